#!/usr/bin/env python3
"""The scripted loss-spike incident (docs/incidents.md), end to end on a tiny GPT:
  - a corpus of ordinary repetitive text (two sentences) holds ONE planted bad document, a run of twelve
    " SolidGoldMagikarp" tokens; mds-train (--log-interval 1, --save every 10 iterations, a short alert window)
    prints exactly one ***ALERT line, at the iteration whose samples hold that document — computed here on our own
    from the Megatron index files (doc_idx / sample_idx / shuffle_idx .npy) with numpy;
  - the alert names the iterations and the consumed samples of that log interval, and --alert-command gets
    MDS_ALERT_MESSAGE (= the log line), MDS_ALERT_ITERATIONS, MDS_ALERT_CONSUMED_SAMPLES and
    MDS_ALERT_SAMPLE_TEXT_COMMAND; that command (through the run ledger), run by /bin/sh, prints the planted text;
  - without a ledger (--run-ledger none) the command carries the training's command line and prints it too;
  - resumed from the checkpoint before the spike (`latest` set back to it, as BigScience did) with
    --skip-train-iteration-range over the spike's iteration: the run skips that data, trains to the end and no
    alert recurs; the ledger's command for that iteration now prints data without the planted document.
Exits 77 without mds-train (no LibTorch), mds-sample-text, mds-preprocess or the GPT-2 vocabulary."""
import glob
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

SOURCE = os.environ.get("MDS_SOURCE_DIR", ".")
sys.path.insert(0, os.path.join(SOURCE, "tests", "integration"))
import testkit  # noqa: E402
from testkit import check  # noqa: E402

TRAIN = testkit.binary("mds-train")
PREPROCESS = testkit.binary("mds-preprocess")
SAMPLE_TEXT = testkit.binary("mds-sample-text")
BIN = os.path.dirname(TRAIN)
GPT2 = os.environ.get("MDS_GPT2_DIR", os.path.join(SOURCE, "..", "shared", "data", "gpt2"))
if not os.path.exists(os.path.join(GPT2, "encoder.json")):
    testkit.skip(f"no GPT-2 vocabulary in {GPT2}")
import numpy as np  # noqa: E402

SENTENCES = ["the cat sat on the mat and looked at the door", "a man went to the old market to buy some bread"]
DOCS = 150
BAD_DOC = 81        # with DOCS, SEED and these sizes the planted document falls inside one sample of iteration 40
BAD_TEXT = " SolidGoldMagikarp" * 12
SEED = 1234
GBS = 2             # = the micro batch size: a skipped iteration is exactly its global batch of samples
ITERS = 50
SAVE_INTERVAL = 10
ALERT_LINE = re.compile(r"^\*\*\*ALERT: loss spike at iteration (\d+): .*; data: iterations (\d+)-(\d+), "
                        r"consumed samples \[(\d+), (\d+)\): (mds-sample-text .*)$")
LOSS = re.compile(r"^ iteration +(\d+)/ +\d+ \|.* lm loss: (\S+) \|")


def make_corpus(tmp):
    rng = random.Random(0)
    with open(tmp + "/corpus.jsonl", "w") as f:
        for i in range(DOCS):
            text = BAD_TEXT if i == BAD_DOC else " " + " ".join(rng.choice(SENTENCES) for _ in range(2))
            f.write(json.dumps({"text": text}) + "\n")
    subprocess.run([PREPROCESS, "--input", tmp + "/corpus.jsonl", "--output-prefix", tmp + "/data", "--vocab-file",
                    GPT2 + "/encoder.json", "--merge-file", GPT2 + "/vocab.bpe", "--append-eod", "--quiet"], check=True)
    return tmp + "/data_text_document"


def train_args(prefix, alert_dir, extra=()):
    return ["--data-path", prefix, "--vocab-file", GPT2 + "/encoder.json", "--merge-file", GPT2 + "/vocab.bpe",
            "--split", "100,0,0", "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
            "--seq-length", "32", "--max-position-embeddings", "32", "--micro-batch-size", str(GBS),
            "--global-batch-size", str(GBS), "--train-iters", str(ITERS), "--lr", "5e-3", "--lr-warmup-iters", "5",
            "--lr-decay-style", "constant", "--log-interval", "1", "--eval-iters", "0", "--eval-interval", "1000",
            "--seed", str(SEED), "--threads", "2", "--alert-loss-window", "5", "--alert-loss-spike-ratio", "2",
            "--alert-command", f'env > "{alert_dir}/alert-$$.tmp" && mv "{alert_dir}/alert-$$.tmp" "{alert_dir}/alert-$$.env"',
            *extra]


def train(args, cwd):
    return subprocess.run([TRAIN, *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def alerts_of(stdout):
    return [line for line in stdout.splitlines() if line.startswith("***ALERT")]


def recorded_alerts(alert_dir):
    """The environments the alert commands recorded (MDS_ALERT_* only). mds-train does not wait for the command,
    but it has finished long before the training exits (seconds of iterations later)."""
    out = []
    for path in sorted(glob.glob(alert_dir + "/alert-*.env")):
        env = {}
        for line in open(path).read().splitlines():
            name, _, value = line.partition("=")
            if name.startswith("MDS_ALERT_"):
                env[name] = value
        out.append(env)
    return out


def bad_iterations(prefix):
    """The iterations whose samples hold a token of the planted document, from the index files mds-train cached:
    training-order position p reads dataset sample shuffle_idx[p], whose seq-length + 1 tokens run from
    (doc_idx[sample_idx[s][0]], offset sample_idx[s][1]) to (doc_idx[sample_idx[s + 1][0]], offset sample_idx[s + 1][1])
    inclusive; with DP = 1 and a constant global batch, position p is trained at iteration p // GBS + 1."""
    files = glob.glob(prefix + f"_train_indexmap_*ns_32sl_{SEED}s_doc_idx.npy")
    if not check(len(files) == 1, f"one cached doc_idx for the training set: {files}"):
        return set()
    base = files[0][:-len("_doc_idx.npy")]
    doc_idx = np.load(base + "_doc_idx.npy")
    sample_idx = np.load(base + "_sample_idx.npy")
    shuffle_idx = np.load(base + "_shuffle_idx.npy")
    where = np.flatnonzero(doc_idx == BAD_DOC)
    check(len(where) == 1, f"the planted document is in the epoch once (one epoch): at {where}")
    k = int(where[0])
    positions = [p for p, s in enumerate(shuffle_idx) if sample_idx[s][0] <= k <= sample_idx[s + 1][0]]
    return {p // GBS + 1 for p in positions if p < ITERS * GBS}


def run_sample_text(command, cwd):
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    return subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, cwd=cwd, env=env, timeout=120)


def main():
    tmp = tempfile.mkdtemp(prefix="mds-incident-")
    try:
        incident(tmp)
    finally:
        if not testkit.failures:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept {tmp}")
    testkit.finish()


def incident(tmp):
    prefix = make_corpus(tmp)
    ckpt = tmp + "/checkpoints"
    alert_dir = tmp + "/alerts"
    os.makedirs(alert_dir)

    # ---- the run that meets the planted document ----
    r = train(train_args(prefix, alert_dir, ["--save", ckpt, "--save-interval", str(SAVE_INTERVAL)]), tmp)
    if not check(r.returncode == 0, f"training exited {r.returncode}: {r.stderr[-2000:]}"):
        return
    bad = bad_iterations(prefix)
    if not check(len(bad) == 1 and min(bad) > SAVE_INTERVAL + 5,
                 f"the planted document lies in the samples of one iteration past the first checkpoint: {sorted(bad)} "
                 "(the corpus, seed or index changed: choose BAD_DOC again)"):
        return
    spike = bad.pop()
    alerts = alerts_of(r.stdout)
    print(f"planted document at iteration {spike}; alerts: {alerts}")
    if not check(len(alerts) == 1, f"exactly one alert: {alerts}"):
        return
    m = ALERT_LINE.match(alerts[0])
    if not check(m is not None, f"the alert names its data: {alerts[0]}"):
        return
    it, first, last, c0, c1, command = int(m[1]), int(m[2]), int(m[3]), int(m[4]), int(m[5]), m[6]
    check(it == spike and first == last == spike, f"the alert is at iteration {spike}: {alerts[0]}")
    check((c0, c1) == ((spike - 1) * GBS, spike * GBS), f"consumed samples [{(spike - 1) * GBS}, {spike * GBS}): {alerts[0]}")
    ledger = os.path.join(ckpt, "runs.jsonl")
    check(command == f"mds-sample-text --ledger {ledger} --iterations {spike}-{spike}", f"the ledger's command: {command}")

    recorded = recorded_alerts(alert_dir)
    if check(len(recorded) == 1, f"--alert-command ran once: {recorded}"):
        env = recorded[0]
        check(env.get("MDS_ALERT_MESSAGE") == alerts[0], f"MDS_ALERT_MESSAGE is the log line: {env}")
        check(env.get("MDS_ALERT_ITERATIONS") == f"{spike}-{spike}", f"MDS_ALERT_ITERATIONS: {env}")
        check(env.get("MDS_ALERT_CONSUMED_SAMPLES") == f"{c0}-{c1}", f"MDS_ALERT_CONSUMED_SAMPLES: {env}")
        check(env.get("MDS_ALERT_SAMPLE_TEXT_COMMAND") == command, f"MDS_ALERT_SAMPLE_TEXT_COMMAND: {env}")
        p = run_sample_text(env.get("MDS_ALERT_SAMPLE_TEXT_COMMAND", "false"), "/")
        check(p.returncode == 0 and BAD_TEXT in p.stdout,
              f"the alert's command prints the planted document: rc {p.returncode}\n{p.stdout[-1500:]}\n{p.stderr[-1500:]}")

    # ---- the same run without a ledger: the command carries the training's command line ----
    alert_dir2 = tmp + "/alerts-no-ledger"
    os.makedirs(alert_dir2)
    r2 = train(train_args(prefix, alert_dir2, ["--run-ledger", "none", "--exit-interval", str(spike)]), tmp)
    alerts2 = alerts_of(r2.stdout)
    m2 = ALERT_LINE.match(alerts2[0]) if len(alerts2) == 1 else None
    if check(r2.returncode == 0 and m2 is not None and int(m2[1]) == spike,
             f"without a ledger: one alert at {spike}: rc {r2.returncode} {alerts2} {r2.stderr[-1000:]}"):
        cmd2 = m2[6]
        check(cmd2.startswith(f"mds-sample-text --data-parallel-size 1 --resume-iteration 0 --iterations {spike}-{spike} "
                              f"-- --data-path {prefix} "), f"the command without a ledger: {cmd2}")
        p = run_sample_text(cmd2, tmp)
        check(p.returncode == 0 and BAD_TEXT in p.stdout,
              f"without a ledger the command prints the planted document: rc {p.returncode}\n{p.stdout[-1500:]}\n"
              f"{p.stderr[-1500:]}")

    # ---- resume from the checkpoint before the spike, stepping over its data ----
    before = (spike - 1) // SAVE_INTERVAL * SAVE_INTERVAL
    with open(os.path.join(ckpt, "latest"), "w") as f:
        f.write(f"global_step{before}")
    for old in glob.glob(alert_dir + "/alert-*.env"):
        os.remove(old)
    r3 = train(train_args(prefix, alert_dir, ["--load", ckpt, "--save", ckpt, "--save-interval", str(SAVE_INTERVAL),
                                              "--skip-train-iteration-range", f"{spike}-{spike}"]), tmp)
    if not check(r3.returncode == 0, f"the resumed training exited {r3.returncode}: {r3.stderr[-2000:]}"):
        return
    losses = {int(x[1]): float(x[2]) for x in (LOSS.match(line) for line in r3.stdout.splitlines()) if x}
    check(f"Skipped iterations {spike} to {spike} due to --skip-train-iteration-range flag." in r3.stderr + r3.stdout,
          f"the resumed run skips iteration {spike}'s data: {r3.stderr[-1500:]}")
    check(sorted(losses) == list(range(before + 1, ITERS + 1)), f"the resumed run trains {before + 1}-{ITERS}: {sorted(losses)}")
    check(not alerts_of(r3.stdout) and not recorded_alerts(alert_dir), f"no alert after the skip: {alerts_of(r3.stdout)}")
    if spike in losses and spike - 1 in losses:
        check(losses[spike] < 1.5 * losses[spike - 1], f"iteration {spike}'s loss is ordinary: {losses}")
    # The ledger now says the newest job trained iteration `spike` on the data after the planted document.
    p = run_sample_text(f"mds-sample-text --ledger {ledger} --iterations {spike}-{spike}", "/")
    check(p.returncode == 0 and BAD_TEXT not in p.stdout and "<|endoftext|>" in p.stdout,
          f"after the skip, iteration {spike}'s data has no planted document: rc {p.returncode}\n{p.stdout[-1500:]}\n"
          f"{p.stderr[-1500:]}")
    print(f"resumed at {before} with --skip-train-iteration-range {spike}-{spike}: no alert, "
          f"loss at {spike}: {losses.get(spike)}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""mds-train's run ledger (docs/run-ledger.md): one JSON line per process in {--save}/runs.jsonl or --run-ledger PATH.
  - a run with --save and --exit-interval leaves one "stopped" line: stop "exit interval", the iteration and
    consumed-samples range, saved = exactly the checkpoint folders that exist, hosts, job id ($SLURM_JOB_ID),
    mds version, seed, layout, the command line as given and the working directory it is relative to;
  - a resume on 2 data-parallel processes adds a second line (the first kept byte for byte): resumed_iteration /
    resumed_consumed_samples of the loaded checkpoint, loaded = its folder, layout DP 2, stop "finished";
  - SIGKILL after a save leaves the line "running" with the saves so far, and the file valid JSONL; a malformed
    line already in the file is kept verbatim, with a warning naming its line number;
  - --run-ledger none writes no ledger; a --run-ledger whose folder cannot be written exits 2 before training.
Exits 77 without LibTorch (no mds-train binary)."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

SOURCE = os.environ.get("MDS_SOURCE_DIR", ".")
sys.path.insert(0, os.path.join(SOURCE, "tests", "integration"))
sys.path.insert(0, os.path.join(SOURCE, "tests", "crosscheck"))
import testkit  # noqa: E402
from testkit import check, free_port  # noqa: E402
import tiny_dataset  # noqa: E402

TRAIN = testkit.binary("mds-train")
BIN = os.path.dirname(TRAIN)
ITERATION = re.compile(r"^ iteration +(\d+)/", re.M)
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
FIELDS = ["run_id", "status", "start_time", "end_time", "job_id", "hosts", "mds_version", "seed", "layout",
          "resumed_iteration", "resumed_consumed_samples", "iteration", "consumed_samples", "loaded", "saved", "stop",
          "command_line", "cwd"]
GBS = 8


def model_flags(data, iters, extra=()):
    return [*data, "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "32",
            "--max-position-embeddings", "32", "--micro-batch-size", "2", "--global-batch-size", str(GBS),
            "--train-iters", str(iters), "--lr", "1e-3", "--log-interval", "1", "--eval-interval", "1000",
            "--eval-iters", "1", "--seed", "7", "--threads", "1", "--device", "cpu", "--distributed-backend", "gloo",
            *extra]


def clean_env(job_id=None):
    launch = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMI_")) and k not in launch}
    if job_id:
        env["SLURM_JOB_ID"] = job_id
    return env


def rank_env(rank, world, port, job_id):
    env = clean_env(job_id)
    env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    return env


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def parse(path, skip=()):
    """Every line but those numbered in `skip` (1-based) must be a JSON object with exactly the contract's fields."""
    out = []
    for n, line in enumerate(read_lines(path), 1):
        if n in skip:
            continue
        try:
            e = json.loads(line)
        except ValueError as err:
            check(False, f"{path}:{n} is not JSON ({err}): {line[:200]}")
            continue
        check(list(e) == FIELDS, f"{path}:{n}: fields {list(e)}, expected {FIELDS}")
        out.append(e)
    return out


def checkpoints(root):
    return sorted(int(d[len("global_step"):]) for d in os.listdir(root) if re.fullmatch(r"global_step\d+", d))


def common_fields(name, e, job_id, world, dp, args, cwd, version):
    check(re.fullmatch(r"[0-9a-f]{16}", e["run_id"]) is not None, f"{name}: run_id {e['run_id']!r}")
    check(ISO.match(e["start_time"] or "") is not None, f"{name}: start_time {e['start_time']!r}")
    check(e["job_id"] == job_id, f"{name}: job_id {e['job_id']!r}, expected {job_id!r}")
    check(e["hosts"] == [socket.gethostname()], f"{name}: hosts {e['hosts']}, expected [{socket.gethostname()!r}]")
    check(e["mds_version"] == version, f"{name}: mds_version {e['mds_version']!r}, expected {version!r}")
    check(e["seed"] == 7, f"{name}: seed {e['seed']}")
    check(e["layout"] == {"world_size": world, "tp": 1, "pp": 1, "dp": dp}, f"{name}: layout {e['layout']}")
    check(e["command_line"] == args, f"{name}: command_line {e['command_line'][:6]}... is not the arguments given")
    check(e["cwd"] == cwd, f"{name}: cwd {e['cwd']!r}, expected {cwd!r}")


def stopped_then_resumed(tmp, data, version):
    work = tmp + "/job"
    os.mkdir(work)
    cwd = os.path.realpath(work)
    root = os.path.join(cwd, "ckpt")
    # Relative --save: the saved paths are made absolute; cwd says what the command line is relative to.
    args = model_flags(data, 8, ["--save", "ckpt", "--save-interval", "2", "--exit-interval", "5"])
    r = subprocess.run([TRAIN, *args], capture_output=True, text=True, cwd=work, env=clean_env("1111"), timeout=600)
    if not check(r.returncode == 0, f"first run exited {r.returncode}: {r.stderr[-2000:]}"):
        return
    ledger = root + "/runs.jsonl"
    if not check(os.path.isfile(ledger), f"no {ledger} after a run with --save"):
        return
    first_text = read_lines(ledger)
    lines = parse(ledger)
    if not check(len(lines) == 1, f"{len(lines)} ledger lines after one run"):
        return
    e = lines[0]
    common_fields("first run", e, "1111", 1, 1, args, cwd, version)
    check(e["status"] == "stopped" and e["stop"] == "exit interval", f"first run: status {e['status']}, stop {e['stop']!r}")
    check(ISO.match(e["end_time"] or "") is not None and e["end_time"] >= e["start_time"],
          f"first run: end_time {e['end_time']!r}")
    check((e["resumed_iteration"], e["resumed_consumed_samples"], e["loaded"]) == (0, 0, None),
          f"first run: resumed {e['resumed_iteration']}/{e['resumed_consumed_samples']}, loaded {e['loaded']!r}")
    check((e["iteration"], e["consumed_samples"]) == (5, 5 * GBS),
          f"first run: iteration {e['iteration']}, consumed {e['consumed_samples']}; expected 5, {5 * GBS}")
    saved = [(s["iteration"], s["path"]) for s in e["saved"]]
    on_disk = checkpoints(root)
    check(on_disk == [2, 4, 5], f"first run: checkpoints on disk {on_disk}")
    check(saved == [(n, f"{root}/global_step{n}") for n in on_disk], f"first run: saved {saved}, on disk {on_disk}")
    print(f"first run: 1 line, iterations 1-{e['iteration']}, saved {[s[0] for s in saved]}, stop {e['stop']!r}")

    # Resume on 2 data-parallel processes: a second line, the first untouched.
    args2 = model_flags(data, 8, ["--load", "ckpt", "--save", "ckpt", "--save-interval", "2"])
    port = free_port()
    procs = [subprocess.Popen([TRAIN, *args2], cwd=work, env=rank_env(rk, 2, port, "2222"), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for rk in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for rk, p in enumerate(procs):
        check(p.returncode == 0, f"resume DP=2: rank {rk} exited {p.returncode}: {outs[rk][1][-2000:]}")
    text = read_lines(ledger)
    lines = parse(ledger)
    if not check(len(lines) == 2, f"{len(lines)} ledger lines after the resume, expected 2"):
        return
    check(text[0] == first_text[0], "the resume changed the first run's line")
    e = lines[1]
    common_fields("resume", e, "2222", 2, 2, args2, cwd, version)
    check(e["run_id"] != lines[0]["run_id"], "the resume reused the first run's run_id")
    check(e["status"] == "stopped" and e["stop"] == "finished", f"resume: status {e['status']}, stop {e['stop']!r}")
    check((e["resumed_iteration"], e["resumed_consumed_samples"]) == (5, 5 * GBS),
          f"resume: resumed_iteration {e['resumed_iteration']}, resumed_consumed_samples {e['resumed_consumed_samples']}")
    check(e["loaded"] == f"{root}/global_step5", f"resume: loaded {e['loaded']!r}, expected {root}/global_step5")
    check((e["iteration"], e["consumed_samples"]) == (8, 8 * GBS),
          f"resume: iteration {e['iteration']}, consumed {e['consumed_samples']}")
    check([(s["iteration"], s["path"]) for s in e["saved"]] == [(n, f"{root}/global_step{n}") for n in (6, 8)],
          f"resume: saved {e['saved']}")
    check(checkpoints(root) == [2, 4, 5, 6, 8], f"resume: checkpoints on disk {checkpoints(root)}")
    print(f"resume on DP=2: line 2, iterations {e['resumed_iteration'] + 1}-{e['iteration']}, loaded "
          f"{os.path.basename(e['loaded'])}, saved {[s['iteration'] for s in e['saved']]}")


def killed_run(tmp, data):
    """SIGKILL after a save: the line stays "running" with the saves so far; a malformed line is kept."""
    folder = tmp + "/killed"
    os.mkdir(folder)
    ledger = folder + "/ledger.jsonl"
    garbage = '{"run_id": "not a ledger line'
    with open(ledger, "w") as f:
        f.write(garbage + "\n")
    args = model_flags(data, 100000, ["--save", folder + "/ckpt", "--save-interval", "2", "--run-ledger", ledger])
    p = subprocess.Popen([TRAIN, *args], env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    saved = []
    while time.time() < deadline and p.poll() is None:
        try:
            lines = read_lines(ledger)
            if len(lines) == 2:
                saved = json.loads(lines[1])["saved"]
        except (OSError, ValueError, KeyError):
            pass  # the file is replaced by rename: never torn, but it may be mid-way when the test looks
        if saved:
            break
        time.sleep(0.05)
    if not check(p.poll() is None and saved, f"no save recorded while training (rc {p.poll()})"):
        p.kill()
        p.communicate()
        return
    time.sleep(0.3)  # a few more iterations, maybe another save
    p.send_signal(signal.SIGKILL)
    _, err = p.communicate()
    text = read_lines(ledger)
    check(text[0] == garbage, f"the malformed line was not kept verbatim: {text[0]!r}")
    check(f"{ledger}:1" in err, f"no warning naming {ledger}:1 on stderr: {err[-500:]}")
    lines = parse(ledger, skip={1})
    if not check(len(lines) == 1, f"killed run: {len(lines)} valid lines, expected 1"):
        return
    e = lines[0]
    check(e["status"] == "running" and e["stop"] is None and e["end_time"] is None,
          f"killed run: status {e['status']}, stop {e['stop']!r}, end_time {e['end_time']!r}")
    its = [s["iteration"] for s in e["saved"]]
    on_disk = checkpoints(folder + "/ckpt")
    check(its and its == sorted(its) and all(n % 2 == 0 for n in its) and set(its) <= set(on_disk),
          f"killed run: saved {its}, checkpoints on disk {on_disk}")
    check(e["iteration"] == its[-1] and e["consumed_samples"] == its[-1] * GBS,
          f"killed run: iteration {e['iteration']} / consumed {e['consumed_samples']} is not the last save {its[-1]}")
    print(f"killed run: line stays running, saved {its}, malformed line 1 kept")


def no_ledger_and_usage(tmp, data):
    save = tmp + "/none-ckpt"
    r = subprocess.run([TRAIN, *model_flags(data, 2, ["--save", save, "--save-interval", "1", "--run-ledger", "none"])],
                       capture_output=True, text=True, env=clean_env(), timeout=600)
    check(r.returncode == 0, f"--run-ledger none: exit {r.returncode}: {r.stderr[-1000:]}")
    check(checkpoints(save) == [1, 2] and not [f for f in os.listdir(save) if f.startswith("runs.jsonl")],
          f"--run-ledger none: {sorted(os.listdir(save))}")
    afile = tmp + "/afile"
    open(afile, "w").close()
    cases = [(afile + "/runs.jsonl", "--run-ledger folder"), (tmp, "is a folder")]
    if os.geteuid() == 0:
        # Root writes anywhere: run as nobody against a folder only root may write.
        pub = tempfile.mkdtemp(prefix="mds-ledger-ro-")
        os.chmod(pub, 0o755)
        cases.append((pub + "/runs.jsonl", "Permission denied"))
        prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    else:
        pub = None
        os.mkdir(tmp + "/ro", 0o555)
        cases.append((tmp + "/ro/runs.jsonl", "Permission denied"))
        prefix = []
    for i, (path, needle) in enumerate(cases):
        argv = [TRAIN, *model_flags(data, 2, ["--run-ledger", path])]
        if needle == "Permission denied":
            argv = prefix + argv
        r = subprocess.run(argv, capture_output=True, text=True, env=clean_env(), timeout=600)
        check(r.returncode == 2 and needle in r.stderr and not ITERATION.search(r.stdout),
              f"--run-ledger {path}: expected exit 2 with '{needle}' before training, got {r.returncode}: "
              f"{r.stderr[-400:]}")
    if pub:
        shutil.rmtree(pub, ignore_errors=True)
    print(f"--run-ledger none: no file; {len(cases)} unwritable ledgers: exit 2 before training")


def main():
    tmp = tempfile.mkdtemp(prefix="mds-run-ledger-")
    try:
        version = subprocess.run([TRAIN, "--version"], capture_output=True, text=True, check=True).stdout.split()[-1]
        prefix, vocab, merges = tiny_dataset.make(tmp, BIN, SOURCE, 1000)
        data = ["--data-path", prefix, "--vocab-file", vocab, "--merge-file", merges, "--split", "90,8,2"]
        stopped_then_resumed(tmp, data, version)
        killed_run(tmp, data)
        no_ledger_and_usage(tmp, data)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    testkit.finish()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""mds-train end to end on a tiny GPT over the bundled corpus (tokenizer and dataset made by mds itself):
  - Megatron's iteration lines, field for field, every --log-interval; validation blocks at --eval-interval and
    at the end; the loss falls well below its start;
  - TensorBoard events read back by TensorBoard's own EventAccumulator carry the tags tr1-13B logged;
  - fp16 (with the loss scale in the line) and bf16 train too; --cross-entropy-loss-fusion gives ATen's losses,
    --adam-step-fusion the unfused step's, --layernorm-backward-fusion ATen's LayerNorm's, --bias-grad-fusion autograd's;
  - --exit-interval, a --kill-switch-path file, SIGUSR1 and a closed standard output stop cleanly (exit 0)
    between iterations;
  - usage errors (an unsupported flag, --save without --save-interval, --finetune without --load, a missing dataset) exit non-zero with
    a message naming the problem;
  - start-up checks: a file as --save, an unwritable --save (run as another user when root), a --tensorboard-dir or
    --codecarbon-dir under a file, and --split 100,-50,50 fail before the model is built, naming the flag; a
    repeated flag keeps its last value.
Exits 77 without LibTorch (no mds-train binary) or without tensorboard in the venv."""
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

SOURCE = os.environ.get("MDS_SOURCE_DIR", ".")
BIN = os.environ.get("MDS_BIN", "build/bin")
TRAIN = os.path.join(BIN, "mds-train")
sys.path.insert(0, os.path.join(SOURCE, "tests", "crosscheck"))
import tiny_dataset  # noqa: E402
if not os.path.exists(TRAIN):
    print("SKIP: mds-train not built (no LibTorch)")
    sys.exit(77)
try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except Exception as e:  # noqa: BLE001
    print(f"SKIP: tensorboard not importable: {e}")
    sys.exit(77)

failures = []
LINE = re.compile(
    r"^ iteration +(\d+)/ +(\d+) \| consumed samples: +(\d+) \| consumed tokens: +(\d+) \| "
    r"elapsed time per iteration \(s\): [0-9.]+ \| learning rate: \d\.\d{3}E[+-]\d\d \| global batch size: +(\d+) \| "
    r"lm loss: (\d\.\d{6}E[+-]\d\d) \| (?:loss scale: [0-9.]+ \| )?grad norm: [0-9.]+ \| (?:num zeros: [0-9.]+ \| )?"
    r"(?:params norm: [0-9.]+ \| )?number of skipped iterations: +\d+ \| number of nan iterations: +\d+ \| "
    r"samples per second: [0-9.]+ \| TFLOPs: [0-9.]+ \| tokens per second: [0-9.]+ \|"
    r"(?: energy \(kWh\): \d\.\d{3}E[+-]\d\d \| CO2 \(kg\): \d\.\d{3}E[+-]\d\d \|)?$")


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def prepare(tmp):
    prefix, vocab, merges = tiny_dataset.make(tmp, BIN, SOURCE, 1000)
    return ["--data-path", prefix, "--vocab-file", vocab, "--merge-file", merges, "--split", "90,8,2"]


def model_flags(iters, extra=()):
    return ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "64",
            "--max-position-embeddings", "64", "--micro-batch-size", "4", "--global-batch-size", "8",
            "--train-iters", str(iters), "--lr", "3e-3", "--min-lr", "3e-4", "--lr-decay-style", "cosine",
            "--lr-warmup-iters", "5", "--weight-decay", "0.1", "--log-interval", "5", "--eval-interval", "10",
            "--eval-iters", "2", "--seed", "42", "--threads", "2", *extra]


def run(args, **kw):
    return subprocess.run([TRAIN, *args], capture_output=True, text=True, **kw)


def iteration_lines(out):
    return [line for line in out.splitlines() if line.startswith(" iteration ")]


def main_run(tmp, data):
    tb = tmp + "/tb"
    r = run(data + model_flags(60, ["--tensorboard-dir", tb, "--log-timers-to-tensorboard", "--log-params-norm",
                                    "--log-num-zeros-in-grad", "--log-validation-ppl-to-tensorboard",
                                    "--log-batch-size-to-tensorboard", "--codecarbon-dir", tmp + "/carbon"]))
    if not check(r.returncode == 0, f"main run exited {r.returncode}: {r.stderr[-2000:]}"):
        return
    lines = iteration_lines(r.stdout)
    check(len(lines) == 12, f"expected 12 iteration lines, got {len(lines)}")
    # On the CPU the heap keeps large freed blocks (docs/mds-train.md, "Training on the CPU"), and says so.
    if "mds-train: device cpu," in r.stderr:
        check("(host heap: blocks up to 256 MiB, 1 GiB of freed memory kept for reuse)" in r.stderr,
              f"the CPU run does not report its heap settings: {r.stderr[-800:]}")
    losses = []
    for n, line in enumerate(lines, 1):
        m = LINE.match(line)
        if not check(m, f"iteration line does not match Megatron's format: {line!r}"):
            continue
        it, total, samples, tokens, gbs, loss = m.groups()
        check(int(it) == 5 * n and int(total) == 60, f"iteration field: {line!r}")
        check(int(samples) == 40 * n and int(tokens) == 40 * n * 64 and int(gbs) == 8, f"consumed fields: {line!r}")
        check("num zeros:" in line and "params norm:" in line, f"--log-num-zeros-in-grad/--log-params-norm: {line!r}")
        losses.append(float(loss))
    check(losses and losses[-1] < losses[0] - 0.7, f"loss did not fall: {losses}")
    check(all("energy (kWh):" in x for x in lines), "--codecarbon-dir: energy missing from the iteration lines")
    import csv
    rows = list(csv.DictReader(open(tmp + "/carbon/emissions.csv"))) if os.path.exists(tmp + "/carbon/emissions.csv") else []
    check(len(rows) == 1 and len(rows[0]) == 38 and float(rows[0]["duration"]) > 0 and float(rows[0]["energy_consumed"]) > 0
          and rows[0]["country_iso_code"] == "FRA", f"emissions.csv: {rows}")
    blocks = re.findall(r"^(?:valid|test) loss at (.*?) \| lm loss value: (\S+) \| lm loss PPL: (\S+) \| $", r.stdout, re.M)
    prefixes = [b[0] for b in blocks]
    check(prefixes == ["iteration 10", "iteration 20", "iteration 30", "iteration 40", "iteration 50", "iteration 60",
                       "the end of training for val data", "the end of training for test data"],
          f"validation blocks: {prefixes}")
    print(f"main run: lm loss {losses[0]:.3f} -> {losses[-1]:.3f} over 60 iterations; {len(blocks)} validation blocks")

    acc = EventAccumulator(tb, size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    expected = {"lm-loss-training/lm loss", "lm-loss-training/lm loss vs samples", "lm-loss-training/lm loss vs tokens",
                "learning-rate/learning-rate", "learning-rate/learning-rate vs samples", "batch-size/batch-size",
                "grad-norm/grad-norm", "num-zeros/num-zeros", "params-norm/params-norm",
                "steps-vs-samples/y=steps,x=samples", "iteration-time/iteration-time",
                "iteration-time/TFLOPs per gpu (estimated)", "lm-loss-validation/valid/lm loss validation",
                "lm-loss-validation/valid/lm loss validation vs samples", "lm-loss-validation/valid/lm loss validation ppl",
                "lm-loss-validation/test/lm loss validation"}
    check(expected <= tags, f"TensorBoard tags missing: {sorted(expected - tags)}")
    if "lm-loss-training/lm loss" in tags:
        ev = acc.Scalars("lm-loss-training/lm loss")
        check([e.step for e in ev] == list(range(1, 61)), "lm loss events are not one per iteration 1..60")
        vs = acc.Scalars("lm-loss-training/lm loss vs samples")
        check([e.step for e in vs] == [8 * i for i in range(1, 61)], "lm loss vs samples steps")
    if "lm-loss-validation/valid/lm loss validation" in tags:
        val = acc.Scalars("lm-loss-validation/valid/lm loss validation")
        printed = [float(b[1]) for b in blocks if b[0].startswith("iteration")]
        check([e.step for e in val][:6] == [10, 20, 30, 40, 50, 60], "validation events steps")
        check(all(abs(e.value - p) <= 1e-5 * p for e, p in zip(val, printed)), "validation values differ from the log")


def precision_runs(tmp, data):
    # fp16 starts at a loss scale of 2^12 as BigScience's DeepSpeed configs did (Megatron's 2^32 default
    # skips the first ~20 steps on overflow, which is right but slow to show).
    for flags, expect_scale in ((["--fp16", "--initial-loss-scale", "4096"], True), (["--bf16"], False)):
        flag = flags[0]
        # The bf16 run with a glibc.malloc tunable of the user's: mds-train leaves the allocator as that says.
        env = dict(os.environ, GLIBC_TUNABLES="glibc.malloc.perturb=0") if flag == "--bf16" else None
        r = run(data + model_flags(10, flags), env=env)
        if not check(r.returncode == 0, f"{flag} run exited {r.returncode}: {r.stderr[-1500:]}"):
            continue
        if env and "mds-train: device cpu," in r.stderr:
            check("host heap:" not in r.stderr, "GLIBC_TUNABLES=glibc.malloc.perturb=0: the heap was changed anyway")
        lines = iteration_lines(r.stdout)
        check(len(lines) == 2 and all(LINE.match(x) for x in lines), f"{flag}: iteration lines {lines}")
        check("number of skipped iterations:   0" in lines[-1], f"{flag}: steps skipped: {lines[-1]}")
        check(("loss scale:" in r.stdout) == expect_scale, f"{flag}: loss scale field presence")
        print(f"{flag}: {lines[-1].split('|')[6].strip()}")


def exits(tmp, data):
    r = run(data + model_flags(1000, ["--exit-interval", "7", "--log-interval", "1"]))
    check(r.returncode == 0 and len(iteration_lines(r.stdout)) == 7 and "exiting program at iteration 7" in r.stderr,
          f"--exit-interval 7: rc {r.returncode}, {len(iteration_lines(r.stdout))} lines, {r.stderr[-500:]}")
    check("the end of training" not in r.stdout, "--exit-interval must not run the end-of-training evaluation")

    switch = tmp + "/kill-switch"
    open(switch, "w").close()
    r = run(data + model_flags(1000, ["--kill-switch-path", switch, "--log-interval", "1"]))
    check(r.returncode == 0 and len(iteration_lines(r.stdout)) == 1 and "Detected kill switch" in r.stderr,
          f"kill switch: rc {r.returncode}, {r.stderr[-500:]}")
    os.remove(switch)

    p = subprocess.Popen([TRAIN, *data, *model_flags(100000, ["--log-interval", "1"])], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    first = p.stdout.readline()
    p.send_signal(signal.SIGUSR1)
    t0 = time.time()
    out, err = p.communicate(timeout=120)
    n = len(iteration_lines(first + out))
    check(p.returncode == 0 and "received SIGUSR1" in err and n < 100,
          f"SIGUSR1: rc {p.returncode}, {n} iterations, {err[-500:]}")
    print(f"exits: --exit-interval 7, kill switch, SIGUSR1 after {n} iterations ({time.time() - t0:.1f} s to stop)")

    # `mds-train ... | tee log` with tee gone: the next log line finds the pipe closed, and the run stops as on
    # SIGUSR1, with its checkpoint, instead of training on unwatched or dying without one.
    save = tmp + "/ckpt-epipe"
    flags = model_flags(100000, ["--log-interval", "1", "--save", save, "--save-interval", "100000"])
    p = subprocess.Popen([TRAIN, *data, *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.stdout.readline()
    p.stdout.close()
    err = p.stderr.read()
    p.wait(timeout=120)
    latest = open(save + "/latest").read().strip() if os.path.exists(save + "/latest") else ""
    saved = latest.removeprefix("global_step")
    check(p.returncode == 0 and "standard output is closed (broken pipe)" in err and
          "received SIGPIPE: stopping after iteration" in err and saved.isdigit() and
          0 < int(saved) < 100000 and os.path.isdir(save + "/" + latest),
          f"closed stdout: rc {p.returncode}, latest {latest!r}, {err[-800:]}")
    print(f"exits: standard output closed: stopped at iteration {saved} with its checkpoint")


def alerts(tmp, data):
    """A learning rate that blows the loss up mid-run: one ***ALERT line, and --alert-command gets it in $1."""
    out = tmp + "/alert.txt"
    args = model_flags(12, ["--lr", "20", "--lr-warmup-iters", "10", "--lr-decay-style", "constant", "--clip-grad", "0",
                            "--log-interval", "1", "--eval-iters", "0", "--alert-command", f'echo "$1" >> {out}'])
    r = run(data + args)
    lines = [x for x in r.stdout.splitlines() if x.startswith("***ALERT")]
    check(r.returncode == 0 and lines and "loss spike at iteration" in lines[0], f"alert: rc {r.returncode}, {lines}")
    got = []
    for _ in range(100):  # the command runs in the background: give it a moment
        got = open(out).read().splitlines() if os.path.exists(out) else []
        if len(got) >= len(lines):
            break
        time.sleep(0.1)
    check(got == lines, f"--alert-command received {got}, the log has {lines}")
    print(f"alerts: {lines[0] if lines else None}")


def mfu(tmp, data):
    """--peak-tflops: the log line's MFU is the model's FLOPs (the forward once, even with --checkpoint-activations)
    per second over the peak; without it (a CPU) the field is absent."""
    peak = 0.002  # TFLOP/s: a CPU-sized peak, so the percentage has digits to check
    r = run(data + model_flags(10, ["--peak-tflops", str(peak), "--checkpoint-activations"]))
    out = r.stdout + r.stderr
    fields = re.findall(r"samples per second: ([0-9.]+) \| TFLOPs: ([0-9.]+) \| tokens per second: [0-9.]+ \| MFU: ([0-9.]+)% \|", out)
    ok = check(r.returncode == 0 and len(fields) == 2, f"--peak-tflops: {r.returncode} {len(fields)} MFU fields: {out[-800:]}")
    check(f"> MFU against --peak-tflops {peak} TFLOP/s per device" in out, "no MFU set-up line")
    # Narayanan et al. Eq. 3 with the forward counted once: 24 * 3 * B s l h^2 (1 + s/(6h) + V/(16 l h)), V padded to 1024.
    B, s_, l, h, V = 8, 64, 2, 64, 1024
    model_flops = 24 * 3 * B * s_ * l * h * h * (1 + s_ / (6 * h) + V / (16 * l * h))
    for sps, _, pct in fields if ok else []:
        want = model_flops * float(sps) / B / 1e12 / peak * 100
        check(abs(float(pct) - want) <= 0.01 + 2e-3 * want, f"MFU {pct}% vs {want:.3f}% from samples per second {sps}")
    plain = run(data + model_flags(5))
    check("MFU" not in plain.stdout, "an MFU field without a known peak on a CPU")
    print(f"MFU: {[f[2] for f in fields]}% at a peak of {peak} TFLOP/s")


def profile_and_attention(tmp, data):
    """--profile --use-pytorch-profiler (Megatron-LM's flags): the window after --profile-step-start up to
    --profile-step-end, a Chrome trace TensorBoard's plugin reads with one ProfilerStep#N per iteration, the summary in
    the log; the "attention:" line names SDPA's kernel, --attention-backend picks another (same losses) or is refused."""
    import glob
    import json
    tb = os.path.join(tmp, "tb-profile")
    no_dropout = ["--attention-dropout", "0", "--hidden-dropout", "0"]
    r = run(data + model_flags(6, [*no_dropout, "--log-interval", "1", "--profile", "--use-pytorch-profiler",
                                   "--profile-step-start", "2", "--profile-step-end", "4", "--tensorboard-dir", tb]))
    out = r.stdout + r.stderr
    check(r.returncode == 0, f"--profile: exit {r.returncode}: {out[-600:]}")
    check("profiler: rank 0 profiling iterations 3 to 4 with LibTorch's profiler" in out, f"no profiler start line: {out[-600:]}")
    m = re.search(r"profiler: rank 0: iterations 3 to 4 \([0-9.]+ s per iteration, profiler included\); trace (\S+)", out)
    check(m is not None, f"no profiler stop line: {out[-600:]}")
    traces = glob.glob(os.path.join(tb, "*.pt.trace.json"))
    check(len(traces) == 1 and m is not None and os.path.samefile(traces[0], m.group(1)),
          f"trace files {os.listdir(tb) if os.path.isdir(tb) else None}")
    check(not glob.glob(os.path.join(tb, "*.tmp")), "a temporary trace file was left")
    if traces:
        events = json.load(open(traces[0]))["traceEvents"]
        names = {e.get("name", "") for e in events}
        steps = sorted(n for n in names if n.startswith("ProfilerStep#"))
        check(steps == ["ProfilerStep#3", "ProfilerStep#4"], f"profiler steps {steps}")
        check(any(n in names for n in ("aten::addmm", "aten::mm", "aten::linear")), "no matrix product in the trace")
        # Q, K and V's gradients stacked in one copy (unbind's backward), not three zero-filled QKV-sized tensors
        # (select's) added up.
        check("aten::select_backward" not in names and "aten::stack" in names,
              f"select_backward {'aten::select_backward' in names}, stack {'aten::stack' in names} in the trace")
    rows = re.findall(r"profiler: +([0-9.]+) +([0-9.]+)% +([0-9.]+)  (aten::\S+)", out)
    check("profiler: CPU operators:" in out and len(rows) >= 5, f"profile summary rows: {rows}")
    check(sum(float(x[1]) for x in rows) <= 100.5 and all(float(x[0]) > 0 for x in rows), f"rows {rows}")
    # What would be a host synchronisation on a GPU, counted on the CPU: the step reads one loss whatever the number
    # of micro batches (2 here, 4 below), and the gradient norm (--clip-grad's default 1.0).
    reads = re.search(r"profiler: host reads of tensor values \(aten::item; a host synchronisation each on a GPU\): "
                      r"([0-9.]+) per iteration", out)
    check(reads is not None and float(reads.group(1)) <= 2.0, f"host reads per iteration: {reads and reads.group(0)}")
    r4 = run(data + model_flags(6, [*no_dropout, "--micro-batch-size", "2", "--log-interval", "1", "--profile",
                                    "--use-pytorch-profiler", "--profile-step-start", "2", "--profile-step-end", "4",
                                    "--tensorboard-dir", tb + "-4"]))
    reads4 = re.search(r"host reads of tensor values .*: ([0-9.]+) per iteration", r4.stderr + r4.stdout)
    check(r4.returncode == 0 and reads4 is not None and reads is not None and reads4.group(1) == reads.group(1),
          f"host reads with 4 micro batches: {reads4 and reads4.group(0)}, with 2: {reads and reads.group(0)}")
    kernel = re.search(r"mds-train: attention: (.*)", out)
    check(kernel is not None and kernel.group(1).endswith("(SDPA, causal)"), f"attention line: {kernel and kernel.group(0)}")

    # The math path computes the same attention: the same losses to float rounding.
    base = [float(x) for x in re.findall(r"lm loss: (\S+) \|", r.stdout)]
    u = run(data + model_flags(6, [*no_dropout, "--log-interval", "1", "--attention-backend", "unfused",
                                   "--position-embedding-type", "absolute"]))
    check("attention: unfused math path (SDPA, causal): scores and probabilities in memory" in u.stderr,
          f"--attention-backend unfused: {u.stderr[-400:]}")
    mine = [float(x) for x in re.findall(r"lm loss: (\S+) \|", u.stdout)]
    check(len(base) == 6 and len(mine) == 6 and all(abs(a - b) <= 2e-5 * abs(a) for a, b in zip(base, mine)),
          f"losses with SDPA's choice {base} and with the math path {mine}")
    a = run(data + model_flags(6, [*no_dropout, "--position-embedding-type", "alibi"]))
    check(a.returncode == 0 and re.search(r"attention: .*\(SDPA, ALiBi bias\)", a.stderr) is not None,
          f"ALiBi's attention line: {a.stderr[-400:]}")

    # Refusals before any training: cuDNN's kernel on a CPU, an empty window, a rank that does not exist.
    for flags, want in ((["--attention-backend", "fused"], "--attention-backend fused: that kernel cannot run"),
                        (["--profile", "--profile-step-start", "4", "--profile-step-end", "4"], "must be after --profile-step-start"),
                        (["--profile", "--profile-ranks", "0", "3"], "--profile-ranks 3: expected a global rank from 0 to 0")):
        e = run(data + model_flags(6, [*no_dropout, *flags]))
        check(e.returncode != 0 and want in e.stderr and " iteration " not in e.stdout,
              f"{flags}: exit {e.returncode}, {e.stderr[-300:]}")
    # Nsight's capture range needs a GPU: a warning on a CPU, and the training runs.
    w = run(data + model_flags(6, [*no_dropout, "--profile"]))
    check(w.returncode == 0 and "marks a capture range for Nsight Systems" in w.stderr, f"--profile alone: {w.stderr[-300:]}")
    print(f"profile: {len(rows)} summary rows, {reads and reads.group(1)} host reads per iteration, "
          f"{kernel.group(1) if kernel else None}")


def fusions(tmp, data):
    """--cross-entropy-loss-fusion on the CPU (kernels/cross_entropy_ref.cpp in an autograd function): fp32, the same
    losses as ATen's cross entropy; bf16, the same first loss and a run that stays close; --fp16 refused.
    --adam-step-fusion on the CPU (kernels/adam_ref.cpp): bf16, the same first loss (before any step) and a run that
    stays close; an fp32 model refused before the first iteration. --layernorm-backward-fusion on the CPU
    (kernels/layer_norm_ref.cpp): fp32, ATen's losses; bf16, the same first loss and a run that stays close; --fp16
    refused. --bias-grad-fusion on the CPU (kernels/bias_grad_ref.cpp): the same. --gelu-epilogue-fusion on the CPU
    (its MLP function with ATen's steps): fp32, the unfused losses; bf16, the same first loss and a run that stays
    close; an activation other than the fused bias GeLU refused."""
    no_dropout = ["--attention-dropout", "0", "--hidden-dropout", "0", "--log-interval", "1"]

    def losses(extra):
        r = run(data + model_flags(6, [*no_dropout, *extra]))
        check(r.returncode == 0, f"{extra}: exit {r.returncode}: {r.stderr[-600:]}")
        return [float(x) for x in re.findall(r"lm loss: (\S+) \|", r.stdout)]

    base, fused = losses([]), losses(["--cross-entropy-loss-fusion"])
    check(len(base) == 6 and len(fused) == 6 and all(abs(a - b) <= 1e-5 * abs(a) for a, b in zip(base, fused)),
          f"fp32 losses: ATen's {base}, fused {fused}")
    bf, bf_fused = losses(["--bf16"]), losses(["--bf16", "--cross-entropy-loss-fusion"])
    check(len(bf) == 6 and len(bf_fused) == 6 and abs(bf[0] - bf_fused[0]) <= 1e-4 * bf[0]
          and all(abs(a - b) <= 2e-2 * abs(a) for a, b in zip(bf, bf_fused)), f"bf16 losses: ATen's {bf}, fused {bf_fused}")
    e = run(data + model_flags(6, ["--fp16", "--cross-entropy-loss-fusion"]))
    check(e.returncode != 0 and "--cross-entropy-loss-fusion takes fp32 or bf16 logits, not --fp16" in e.stderr
          and " iteration " not in e.stdout, f"--fp16 --cross-entropy-loss-fusion: exit {e.returncode}, {e.stderr[-300:]}")
    bf_adam = losses(["--bf16", "--adam-step-fusion"])
    check(len(bf_adam) == 6 and abs(bf[0] - bf_adam[0]) <= 1e-6 * bf[0]
          and all(abs(a - b) <= 1e-2 * abs(a) for a, b in zip(bf, bf_adam)), f"bf16 losses: unfused {bf}, fused step {bf_adam}")
    e = run(data + model_flags(6, ["--adam-step-fusion"]))
    check(e.returncode != 0 and "--adam-step-fusion: a bf16 model only, not Float (needs --bf16)" in e.stderr
          and " iteration " not in e.stdout, f"fp32 --adam-step-fusion: exit {e.returncode}, {e.stderr[-300:]}")
    def matches_unfused(flag, unfused):
        """`flag`'s fp32 losses are the unfused ones to fp32 rounding; in bf16, the first the same and all close."""
        f32, b16 = losses([flag]), losses(["--bf16", flag])
        check(len(f32) == 6 and all(abs(a - b) <= 1e-5 * abs(a) for a, b in zip(base, f32)),
              f"fp32 losses: {unfused} {base}, {flag} {f32}")
        check(len(b16) == 6 and abs(bf[0] - b16[0]) <= 1e-6 * bf[0] and all(abs(a - b) <= 2e-2 * abs(a) for a, b in zip(bf, b16)),
              f"bf16 losses: {unfused} {bf}, {flag} {b16}")
        return f32, b16

    def refused(extra, message):
        e = run(data + model_flags(6, extra))
        check(e.returncode != 0 and message in e.stderr and " iteration " not in e.stdout,
              f"{' '.join(extra)}: exit {e.returncode}, {e.stderr[-300:]}")

    ln, bf_ln = matches_unfused("--layernorm-backward-fusion", "ATen's LayerNorm")
    refused(["--fp16", "--layernorm-backward-fusion"], "--layernorm-backward-fusion takes fp32 or bf16, not --fp16")
    bg, bf_bg = matches_unfused("--bias-grad-fusion", "autograd's bias gradients")
    refused(["--fp16", "--bias-grad-fusion"], "--bias-grad-fusion takes fp32 or bf16, not --fp16")
    ge, bf_ge = matches_unfused("--gelu-epilogue-fusion", "the unfused MLP")
    refused(["--gelu-epilogue-fusion", "--no-bias-gelu-fusion"], "--gelu-epilogue-fusion fuses the bias GeLU")
    print(f"fusions: cross entropy fp32 {base[-1:]} = {fused[-1:]}, bf16 {bf[-1:]} ~ {bf_fused[-1:]}; "
          f"adam step bf16 {bf[-1:]} ~ {bf_adam[-1:]}; layer norm fp32 {ln[-1:]}, bf16 {bf_ln[-1:]}; "
          f"bias grad fp32 {bg[-1:]}, bf16 {bf_bg[-1:]}; gelu epilogue fp32 {ge[-1:]}, bf16 {bf_ge[-1:]}")


def dry_run(tmp, data):
    """--dry-run of tr1-13B's shape trains nothing and prints its parameter count and days."""
    r = run(["--num-layers", "40", "--hidden-size", "5120", "--num-attention-heads", "32", "--seq-length", "2048",
             "--max-position-embeddings", "2048", "--micro-batch-size", "1", "--global-batch-size", "1024",
             "--train-samples", "146_484_375", "--lr", "1e-4", "--fp16", "--checkpoint-activations",
             "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "4", "--dry-run",
             "--dry-run-gpus", "256", "--dry-run-tflops", "45", "--dry-run-vocab-size", "50257", "--json"])
    import json
    ok = r.returncode == 0
    rep = json.loads(r.stdout) if ok else {}
    check(ok and "12854282240" in r.stdout.replace(",", ""), f"dry run: {r.returncode} {r.stdout[:300]} {r.stderr[-300:]}")
    print(f"dry run: {r.stdout[:120]}...")
    return rep


def curriculum(tmp, data):
    """DeepSpeed's seqlen curriculum from --deepspeed_config: each step's samples are cut to DeepSpeed's
    fixed_linear difficulty, and consumed tokens follow it (Megatron-DeepSpeed's accounting)."""
    import json
    cfg = tmp + "/ds.json"
    json.dump({"train_micro_batch_size_per_gpu": 4, "gradient_clipping": 1.0,
               "curriculum_learning": {"enabled": True, "curriculum_type": "seqlen", "min_difficulty": 16,
                                       "max_difficulty": 64, "schedule_type": "fixed_linear",
                                       "schedule_config": {"total_curriculum_step": 8, "difficulty_step": 8}}},
              open(cfg, "w"))
    r = run(data + model_flags(10, ["--log-interval", "1", "--eval-iters", "0", "--deepspeed", "--deepspeed_config", cfg]))
    seqlens = [int(x) for x in re.findall(r"curriculum seqlen: +(\d+)", r.stdout)]
    tokens = [int(x) for x in re.findall(r"consumed tokens: +(\d+)", r.stdout)]
    expect = []
    for step in range(1, 11):  # DeepSpeed fixed_linear: floor(step/total * (max-min) + min), down to a multiple of 8
        x = int(step / 8 * (64 - 16) + 16)
        expect.append(min(x - x % 8, 64))
    check(r.returncode == 0 and seqlens == expect, f"curriculum seqlens {seqlens}, expected {expect}: {r.stderr[-300:]}")
    check(tokens == [8 * sum(expect[:i + 1]) for i in range(10)], f"curriculum consumed tokens {tokens}")
    print(f"curriculum: seqlen {seqlens}")


def errors(tmp, data):
    cases = [
        (model_flags(10, ["--save", tmp + "/ckpt"]), 2, "--save needs --save-interval"),
        (model_flags(10, ["--finetune"]), 2, "--finetune needs --load"),
        (model_flags(10, ["--use-bnb-optimizer"]), 2, "--use-bnb-optimizer"),
        (model_flags(10, ["--no-such-flag"]), 2, "--no-such-flag"),
        (model_flags(10, ["--position-embedding-type", "rotary"]), 2, "rotary"),
    ]
    for args, code, needle in cases:
        r = run(data + args)
        check(r.returncode == code and needle in r.stderr and "mds-train: error:" in r.stderr,
              f"{needle}: expected exit {code} naming it, got {r.returncode}: {r.stderr[-300:]}")
    missing = ["--data-path", tmp + "/nope"] + data[2:]
    r = run(missing + model_flags(10))
    check(r.returncode == 1 and tmp + "/nope" in r.stderr, f"missing dataset: {r.returncode}: {r.stderr[-300:]}")


def startup_checks(tmp, data):
    """Output folders are checked before the rendezvous and the model: exit 1 naming the flag, nothing trained,
    no "internal error". A negative --split proportion is a usage error."""
    afile = tmp + "/afile"
    open(afile, "w").close()
    cases = [
        (["--save", afile, "--save-interval", "2"], 1, f"the --save folder '{afile}' exists and is not a folder"),
        (["--save", afile + "/ckpt", "--save-interval", "2"], 1, "cannot create the --save folder"),
        (["--tensorboard-dir", afile + "/tb"], 1, f"cannot create the --tensorboard-dir folder '{afile}/tb'"),
        (["--codecarbon-dir", afile], 1, "the --codecarbon-dir folder"),
        (["--split", "100,-50,50"], 2, "--split '100,-50,50': the valid proportion is negative"),
        (["--split", "nan,1,1"], 2, "--split 'nan,1,1'"),
    ]
    unwritable = None
    if os.geteuid() == 0:
        # Root writes into read-only folders: run as nobody against a folder only root may write.
        pub = tempfile.mkdtemp(prefix="mds-train-ro-")
        os.chmod(pub, 0o755)
        os.mkdir(pub + "/ro", 0o755)
        unwritable = (["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"], pub + "/ro", pub)
    else:
        os.mkdir(tmp + "/ro", 0o555)
        unwritable = ([], tmp + "/ro", None)
    for extra, code, needle in cases:
        r = run(data + model_flags(10, extra))
        check(r.returncode == code and needle in r.stderr and "internal error" not in r.stderr,
              f"{extra}: expected exit {code} with '{needle}', got {r.returncode}: {r.stderr[-300:]}")
        check("padded vocab" not in r.stderr and not iteration_lines(r.stdout), f"{extra}: checked only after start-up")
    prefix, folder, cleanup = unwritable
    r = subprocess.run(prefix + [TRAIN, *data, *model_flags(10, ["--save", folder, "--save-interval", "2"])],
                       capture_output=True, text=True)
    check(r.returncode == 1 and f"cannot write into the --save folder: {folder}: Permission denied" in r.stderr,
          f"unwritable --save: {r.returncode}: {r.stderr[-300:]}")
    if cleanup:
        import shutil
        shutil.rmtree(cleanup, ignore_errors=True)
    # A repeated flag keeps its last value, as argparse does.
    r = run(data + model_flags(1000, ["--train-iters", "6", "--log-interval", "1", "--eval-iters", "0"]))
    check(r.returncode == 0 and len(iteration_lines(r.stdout)) == 6, f"repeated --train-iters: rc {r.returncode}, "
          f"{len(iteration_lines(r.stdout))} iterations: {r.stderr[-300:]}")
    # The first job of a chain: --load names the folder --save creates (Megatron-DeepSpeed warns, starts from
    # scratch); the resubmission resumes from it with the same flags.
    chain = tmp + "/chain/checkpoints"
    flags = data + model_flags(6, ["--log-interval", "1", "--eval-iters", "0", "--exit-interval", "3",
                                   "--save", chain, "--load", chain, "--save-interval", "100"])
    r = run(flags)
    out = r.stdout + r.stderr
    check(r.returncode == 0 and "will not load any checkpoints and will start from random" in out
          and len(iteration_lines(r.stdout)) == 3 and os.path.isfile(chain + "/latest"),
          f"first launch with a missing --load folder: rc {r.returncode}: {r.stderr[-300:]}")
    r = run(flags[:-6] + ["--exit-interval", "100"] + flags[-6:])
    check(r.returncode == 0 and "successfully loaded checkpoint" in r.stdout + r.stderr
          and [line.split()[1] for line in iteration_lines(r.stdout)][:1] == ["4/"],
          f"resubmission: rc {r.returncode}: {iteration_lines(r.stdout)[:1]} {r.stderr[-300:]}")
    print(f"start-up checks: {len(cases) + 1} bad destinations or splits refused before training; last --train-iters wins; "
          "a missing --load folder starts from scratch")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        data = prepare(tmp)
        main_run(tmp, data)
        precision_runs(tmp, data)
        exits(tmp, data)
        alerts(tmp, data)
        curriculum(tmp, data)
        dry_run(tmp, data)
        mfu(tmp, data)
        profile_and_attention(tmp, data)
        fusions(tmp, data)
        errors(tmp, data)
        startup_checks(tmp, data)
    if failures:
        print("\n".join("FAIL: " + f for f in failures))
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""mds-train pipeline-parallel (and with tensor and data parallelism) on CPU over Gloo, processes started as torchrun
starts them (test_train_dp.py's launcher):
  - PP=2, PP=4 (one block per stage), TP=2 x PP=2 and TP=2 x PP=2 x DP=2 (8 processes) train the same tiny 4-layer
    GPT on the same data as one process, 20 iterations with 12 micro batches per step (1F1B): the same lm loss, grad
    norm and params norm every iteration and the same validation losses, to fp32 tolerance; so does a BLOOM-style
    model (ALiBi, embedding LayerNorm, recomputation) at PP=2 x DP=2, and an uneven cut (3 layers over 2 stages);
  - only the last rank (the last stage) prints the iteration lines; rank 0 reports each stage's blocks;
  - fp16 (Megatron's loss scaler, the same scales as one process) and bf16 at PP=2 x DP=2 stay on one process's
    curve (relative 1e-3);
  - checkpoints: TP=2 x PP=2 x DP=2 (two nodes of 4 ranks) saves one layer file per layer and TP rank (the tied
    embeddings only from the first stage), mp_rank_00..03 (pp * TP + tp, each with its saving process's rank and local
    rank in args) and one ZeRO-1 optimizer partition per rank; it resumes bit for bit at
    that shape, on the same curve at TP=2 x PP=2 x DP=1, and at TP=1 x PP=1 the error names mds-ckpt-reshape;
    a bf16 TP=2 x PP=2 checkpoint reshaped by mds-ckpt-reshape to TP=1 x PP=1 (with its optimizer states) resumes on
    one process on the TP=2 x PP=2 run's curve, within bf16 rounding;
  - a stage that hangs (SIGSTOP on the last stage) makes the first stage, waiting for its gradient, exit within the
    timeout with an error naming it;
  - the 'parameters' partition method (DeepSpeed's weighting) trains on the same curve; a method that moves the embedding off the first stage
    (or the output layer off the last) is refused with a message, and so is a world size that is not TP x PP x DP.
  - --distributed-backend nccl on CPUs trains over Gloo (NCCL moves CUDA tensors only; tests/gpu covers it).
Exits 77 without LibTorch (no mds-train binary)."""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SOURCE = os.environ.get("MDS_SOURCE_DIR", ".")
sys.path.insert(0, os.path.join(SOURCE, "tests", "integration"))
sys.path.insert(0, os.path.join(SOURCE, "tests", "crosscheck"))
import testkit  # noqa: E402
from testkit import check  # noqa: E402
import bmd_checkpoint  # noqa: E402,F401  (stand-in megatron.enums, so torch.load resolves the args Namespace)
import tiny_dataset  # noqa: E402
from test_train_dp import (BIN, TRAIN, curve, flags, free_port, rank_env, read_until_iteration, same_curve, start,  # noqa: E402
                           wait_all)


def one_process(data, extra=(), layers=4, stdout=None):
    """One process's curve; `stdout`, a list, also gets its standard output."""
    r = subprocess.run([TRAIN, *flags(data, extra=extra, layers=layers)], capture_output=True, text=True,
                       env=rank_env(0, 1, free_port()), timeout=600)
    check(r.returncode == 0, f"one process {list(extra)}: exit {r.returncode}: {r.stderr[-1500:]}")
    if stdout is not None:
        stdout.append(r.stdout)
    return curve(r.stdout)


def parallel(data, tp, pp, dp, extra=(), layers=4, backend="gloo", per_node=None):
    world = tp * pp * dp
    par = ["--tensor-model-parallel-size", str(tp), "--pipeline-model-parallel-size", str(pp)]
    args = flags(data, extra=[*extra, *par], layers=layers)
    args[args.index("--distributed-backend") + 1] = backend
    outs = wait_all(start(args, world, free_port(), per_node))
    name = f"TP={tp} x PP={pp} x DP={dp}"
    # --distributed-backend is about GPUs: on CPUs the tensors travel over Gloo whatever it says.
    check(", gloo)" in outs[0][2], f"{name} (--distributed-backend {backend}): rank 0 did not report Gloo")
    for r, (rc, out, err) in enumerate(outs):
        check(rc == 0, f"{name}: rank {r} exited {rc}: {err[-2000:]}")
        if r != world - 1:
            check(not curve(out)[0], f"{name}: rank {r} printed iteration lines (only the last rank should)")
    check(f"TP {tp} x PP {pp} x DP {dp} over {world} processes" in outs[0][2], f"{name}: rank 0 did not report the layout")
    return outs


def stage_cuts(outs):
    """(stage, first block, end block) as the ranks reported them (TP rank 0 of the first replica of each stage)."""
    return sorted(m for _, _, err in outs for m in re.findall(r"pipeline stage (\d+): transformer blocks \[(\d+), (\d+)\)", err))


def equivalence(data, ckpt):
    """Returns the TP=2 x PP=2 x DP=2 curve; that run also saves into `ckpt` at 10 (and 20)."""
    ref = one_process(data)
    check(len(ref[0]) > 0 and ref[0][-1][2] < ref[0][0][2] - 0.3, "one process: the loss did not fall")
    for tp, pp, dp in ((1, 2, 1), (1, 4, 1), (2, 2, 1), (2, 2, 2)):
        save = ["--save", ckpt, "--save-interval", "10"] if (tp, pp, dp) == (2, 2, 2) else []
        # The run that saves: two nodes of 4 ranks (checkpoints() reads each file's saving local rank).
        outs = parallel(data, tp, pp, dp, save, backend="nccl" if (tp, pp, dp) == (1, 2, 1) else "gloo",
                        per_node=4 if save else None)
        stages = stage_cuts(outs)
        per = 4 // pp
        want = [(str(s), str(s * per), str((s + 1) * per)) for s in range(pp)]
        check(sorted(stages) == want, f"TP={tp} x PP={pp} x DP={dp}: stages reported {stages}, expected {want}")
        same_curve(f"TP={tp} x PP={pp} x DP={dp}", ref, curve(outs[-1][1]), rtol=2e-6)
        full = curve(outs[-1][1])

    # Uneven: 3 layers over 2 stages ('type:transformer' gives the first stage 2 blocks, as DeepSpeed).
    ref3 = one_process(data, layers=3)
    outs = parallel(data, 1, 2, 1, layers=3)
    check(stage_cuts(outs) == [("0", "0", "2"), ("1", "2", "3")], f"3 layers over 2 stages: {stage_cuts(outs)}")
    same_curve("3 layers, PP=2", ref3, curve(outs[-1][1]), rtol=2e-6)

    bloom = ["--position-embedding-type", "alibi", "--embed-layernorm", "--checkpoint-activations"]
    ref_bloom = one_process(data, bloom)
    outs = parallel(data, 1, 2, 2, bloom)
    same_curve("BLOOM-style (ALiBi, embedding LayerNorm, recomputation) PP=2 x DP=2", ref_bloom, curve(outs[-1][1]), rtol=2e-6)

    # Mixed precision at PP=2 x DP=2: fp16 with Megatron's dynamic loss scaler (a scale of 4096 that stays clear of
    # overflows: where one falls is at the mercy of the last bit of an fp16 gradient) and bf16.
    for name, prec in (("fp16", ["--fp16", "--initial-loss-scale", "4096", "--loss-scale-window", "1000"]), ("bf16", ["--bf16"])):
        raw = []
        one_process(data, prec, stdout=raw)
        outs = parallel(data, 1, 2, 2, prec)
        # The fp16 lines carry a "loss scale" column between the loss and the grad norm.
        unscaled = [re.sub(r"loss scale: \S+ \| ", "", text) for text in (raw[0], outs[-1][1])]
        same_curve(f"{name} PP=2 x DP=2", curve(unscaled[0]), curve(unscaled[1]), rtol=1e-3)
        if name == "fp16":
            scales = re.findall(r"loss scale: (\S+) \|", outs[-1][1])
            ref_scales = re.findall(r"loss scale: (\S+) \|", raw[0])
            check(scales == ref_scales and len(ref_scales) >= 20,
                  f"fp16: {len(scales)} loss scales {scales[:5]} vs one process {len(ref_scales)} {ref_scales[:5]}")
            print(f"fp16 PP=2 x DP=2: loss scales {sorted(set(scales), key=float)} as one process")

    # 'parameters': with a vocabulary this large next to 64-wide blocks DeepSpeed gives the embedding's stage no block.
    outs = parallel(data, 1, 2, 1, ["--pp-partition-method", "parameters"])
    cut = stage_cuts(outs)
    check(len(cut) == 2, f"'parameters': stages reported {cut}")
    same_curve("PP=2 with --pp-partition-method parameters", ref, curve(outs[-1][1]), rtol=2e-6)
    print(f"'parameters' partition: {sorted(cut)}")
    return full


def checkpoints(tmp, data, straight, ckpt):
    """straight: the 8-process TP=2 x PP=2 x DP=2 curve of equivalence(), which saved into `ckpt` at 10 and 20."""
    par = ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"]
    if not check(len(straight[0]) == 20, "TP=2 x PP=2 x DP=2: the run that saved failed"):
        return
    testkit.checkpoint_back_to(ckpt, 10)
    files = sorted(os.listdir(ckpt + "/global_step10"))
    want = sorted([f"layer_{layer:02d}-model_{t:02d}-model_states.pt" for layer in (1, 3, 4, 5, 6, 8) for t in (0, 1)] +
                  [f"mp_rank_{m:02d}_model_states.pt" for m in range(4)] +
                  [f"zero_pp_rank_{d}_mp_rank_{m:02d}_optim_states.pt" for d in (0, 1) for m in range(4)])
    check(files == want, f"TP=2 x PP=2 x DP=2 checkpoint files: {files}")
    # Each mp_rank file's args are its saving process's (data-parallel rank 0 of its TP and PP ranks): rank and, as
    # BMD's rank % GPUs, the local rank on its node (the run had two nodes of 4 ranks).
    import torch
    ranks = [(a.rank, a.local_rank) for a in (torch.load(f"{ckpt}/global_step10/mp_rank_{m:02d}_model_states.pt",
                                                         weights_only=False)["args"] for m in range(4))]
    check(ranks == [(0, 0), (1, 1), (4, 0), (5, 1)], f"TP=2 x PP=2 x DP=2 checkpoint args (rank, local_rank): {ranks}")
    same = wait_all(start(flags(data, extra=[*par, "--load", ckpt], layers=4), 8, free_port()))
    fewer = wait_all(start(flags(data, extra=[*par, "--load", ckpt], layers=4), 4, free_port()))
    if not check(all(o[0] == 0 for o in same + fewer), f"TP=2 x PP=2 resume: {[o[0] for o in same]} {[o[0] for o in fewer]} "
                                                        f"{same[0][2][-800:]} {fewer[0][2][-800:]}"):
        return
    b, c = curve(same[-1][1]), curve(fewer[-1][1])
    check(b[0] == straight[0][10:] and b[1] == straight[1][1:],
          f"TP=2 x PP=2 x DP=2 resume: iterations 11-20 differ from the straight run: {b[0][:2]} vs {straight[0][10:12]}")
    worst = max(abs(x[2] - y[2]) / y[2] for x, y in zip(c[0], straight[0][10:])) if len(c[0]) == 10 else 1.0
    check(worst <= 2e-6, f"TP=2 x PP=2 x DP=2 checkpoint resumed at DP=1 left the curve by {worst:.1e}")
    one = subprocess.run([TRAIN, *flags(data, extra=["--load", ckpt], layers=4)], capture_output=True, text=True,
                         env=rank_env(0, 1, free_port()), timeout=300)
    check(one.returncode != 0 and "mds-ckpt-reshape --target-tp 1 --target-pp 1" in one.stderr,
          f"a TP=2 x PP=2 checkpoint loaded at TP=1 x PP=1: exit {one.returncode}: {one.stderr[-400:]}")
    print(f"TP=2 x PP=2 x DP=2 saved at 10 ({len(files)} files): resumed bit for bit at that shape, at DP=1 within {worst:.1e}")

    # bf16 (the optimizer files mds-ckpt-reshape reshards): TP=2 x PP=2 -> reshape -> TP=1 x PP=1 on one process.
    bf16 = ["--bf16"]
    src, dst = tmp + "/ckpt-bf16-tp2pp2", tmp + "/ckpt-bf16-tp1pp1"
    straight_bf16 = wait_all(start(flags(data, extra=[*bf16, *par, "--save", src, "--save-interval", "10"], layers=4), 4,
                                   free_port()))
    if not check(all(o[0] == 0 for o in straight_bf16), f"bf16 TP=2 x PP=2: {straight_bf16[0][2][-800:]}"):
        return
    testkit.checkpoint_back_to(src, 10)
    r = subprocess.run([os.path.join(BIN, "mds-ckpt-reshape"), src, dst, "--target-tp", "1", "--target-pp", "1",
                        "--with-optimizer"], capture_output=True, text=True, timeout=300)
    if not check(r.returncode == 0, f"mds-ckpt-reshape: exit {r.returncode}: {r.stderr[-1500:]}"):
        return
    one = subprocess.run([TRAIN, *flags(data, extra=[*bf16, "--load", dst], layers=4)], capture_output=True, text=True,
                         env=rank_env(0, 1, free_port()), timeout=600)
    if not check(one.returncode == 0, f"resume of the reshaped checkpoint: exit {one.returncode}: {one.stderr[-1500:]}"):
        return
    ref, got = curve(straight_bf16[-1][1]), curve(one.stdout)
    if not check(len(got[0]) == 10 and got[0][0][0] == 11, f"reshaped resume: {len(got[0])} iteration lines"):
        return
    check([x[:2] for x in got[0]] == [x[:2] for x in ref[0][10:]], "reshaped resume: iterations / consumed samples differ")
    worst = max(abs(x[2] - y[2]) / y[2] for x, y in zip(got[0], ref[0][10:]))
    check(worst <= 2e-4, f"TP=2 x PP=2 bf16 checkpoint reshaped to TP=1 x PP=1 left the curve by {worst:.1e}")
    print(f"bf16 TP=2 x PP=2 saved at 10, mds-ckpt-reshape to TP=1 x PP=1, resumed on one process: iterations 11-20 "
          f"within {worst:.1e} of the TP=2 x PP=2 run (lm loss {got[0][0][2]:.4f} -> {got[0][-1][2]:.4f})")


HUNG_STAGE = ["--pipeline-model-parallel-size", "2", "--distributed-timeout-minutes", "0.25"]


def hung_stage(data, args=None, name="hung stage"):
    """Stops the last of 2 stages (SIGSTOP); stage 0 must exit within the timeout naming it. `args`: the command line
    (by default flags() with HUNG_STAGE, on CPU)."""
    args = args or flags(data, 100000, HUNG_STAGE, layers=4)
    procs = start(args, 2, free_port())
    ok = check(read_until_iteration(procs[1], time.time() + 300), f"{name}: no iteration line")
    t0 = time.time()
    if ok:
        procs[1].send_signal(signal.SIGSTOP)
    try:
        _, err = procs[0].communicate(timeout=120)
    except subprocess.TimeoutExpired:
        procs[0].kill()
        _, err = procs[0].communicate()
        check(False, f"{name}: stage 0 still running 120 s later")
    elapsed = time.time() - t0
    procs[1].send_signal(signal.SIGCONT)
    procs[1].kill()
    procs[1].communicate()
    if ok:
        check(procs[0].returncode > 0 and "rank 1 stopped answering" in err,
              f"{name}: stage 0 exited {procs[0].returncode}: {err[-1500:]}")
        print(f"{name}, last stage stopped: stage 0 exited {procs[0].returncode} after {elapsed:.1f} s: "
              f"{err.strip().splitlines()[-1][:300]}")


def usage_errors(data):
    cases = [
        (["--pipeline-model-parallel-size", "2", "--pp-partition-method", "type:layernorm"], 2,
         "--pp-partition-method 'type:layernorm' puts the final LayerNorm on pipeline stage 0 of 2"),
        (["--pipeline-model-parallel-size", "3", "--tensor-model-parallel-size", "2"], 4,
         "world size 4 is not divisible by --tensor-model-parallel-size 2 × --pipeline-model-parallel-size 3"),
    ]
    for extra, world, want in cases:
        outs = wait_all(start(flags(data, 5, extra, layers=4), world, free_port()), timeout=120)
        rc, _, err = outs[0]
        check(rc != 0 and want in err, f"{extra} on {world} processes: exit {rc}, expected an error with {want!r}: {err[-600:]}")


def main():
    tmp = tempfile.mkdtemp(prefix="mds-train-pp-")
    try:
        prefix, vocab, merges = tiny_dataset.make(tmp, BIN, SOURCE, 1000)
        data = ["--data-path", prefix, "--vocab-file", vocab, "--merge-file", merges, "--split", "90,8,2"]
        ckpt = tmp + "/ckpt-tp2pp2dp2"
        full = equivalence(data, ckpt)
        checkpoints(tmp, data, full, ckpt)
        hung_stage(data)
        usage_errors(data)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    testkit.finish()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The running flags of issue 18 against BigScience's real Megatron-DeepSpeed (bmd_harness.py), with the SAME flags
on both sides (the tiny GPT of test_bmd_resume.py: 2 layers, hidden 64, 4 heads, seq 64, micro-batch 2, global
batch 4, fp32, ZeRO stage 1, DP=2 on 2 ranks):
  - --eval-only: the real program trains 4 iterations and saves; both programs load that checkpoint (a copy each)
    with `--eval-only True` and must train no step (no iteration line), print the validation and test losses
    "at the end of training for val/test data" and agree on them to relative 1e-5, and save nothing (the
    checkpoint folders keep only global_step4 and its `latest`). mds-train's run ends "stopped (eval only)".
    `--eval-only False` evaluates only as well (argparse's type=bool: bool('False') is True), and so do
    flags that only choose an implementation (--no-masked-softmax-fusion, --mmap-warmup, --DDP-impl torch, ...),
    which must leave the losses exactly as they were.
  - --local_rank: `--local_rank 0` given to both ranks of a 2-rank job (rank 1's local rank is 1) stops both
    programs (BMD's assertion "expected local-rank to be the same as rank % device-count", mds's usage error
    naming --local_rank and the local rank it expected); mds-train on one rank with `--local_rank 0` runs.
Exits 77 without ../shared/third_party, the Python packages, or the mds binaries.
Runs: `MDS_BIN=build/bin .venv/bin/python tests/crosscheck/test_bmd_running_flags.py`."""
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bmd_harness  # noqa: E402

SOURCE = os.environ.get("MDS_SOURCE_DIR", os.path.join(HERE, "..", ".."))
BIN = bmd_harness.mds_bin_dir(SOURCE)  # or exit 77

import tiny_dataset  # noqa: E402
from bmd_harness import check  # noqa: E402

MDS = os.path.join(BIN, "mds-train")


def flags(data, vocab, merges, ckpt, train_iters=4):
    return ["--num-layers", 2, "--hidden-size", 64, "--num-attention-heads", 4,
            "--seq-length", 64, "--max-position-embeddings", 64,
            "--micro-batch-size", 2, "--global-batch-size", 4, "--train-iters", train_iters,
            "--optimizer", "adam", "--adam-beta1", 0.9, "--adam-beta2", 0.95, "--adam-eps", "1e-8",
            "--lr", "1e-3", "--min-lr", "1e-4", "--lr-decay-style", "cosine", "--lr-warmup-iters", 2,
            "--clip-grad", 1.0, "--weight-decay", 0.1, "--seed", 42, "--init-method-std", 0.02,
            "--hidden-dropout", 0.0, "--attention-dropout", 0.0,
            "--data-path", data, "--data-impl", "mmap", "--split", "90,8,2",
            "--vocab-file", vocab, "--merge-file", merges,
            "--log-interval", 1, "--eval-interval", 1000, "--eval-iters", 2,
            "--save-interval", 1000, "--save", ckpt, "--load", ckpt,
            "--distributed-backend", "gloo", "--zero-stage", 1]


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def losses(run):
    """{'the end of training for val data': loss, 'the end of training for test data': loss}."""
    return {v["at"]: v.get("lm loss value") for v in run.validations}


def steps_saved(ckpt):
    return sorted(d for d in os.listdir(ckpt) if d.startswith("global_step"))


def copy(src, dst):
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)


def eval_only(tree, tmp, data, vocab, merges, ds):
    d = os.path.join(tmp, "eval-only")
    ck = os.path.join(d, "ckpt")
    r0 = tree.run(flags(data, vocab, merges, ck), nproc=2, ds_config=ds, name="train4", timeout=400)
    if not check(r0.ok, f"eval-only: the real program's 4 iterations failed (rc {r0.returncode})\n{r0.tail()}"):
        return
    check(steps_saved(ck) == ["global_step4"], f"eval-only: the real run saved {steps_saved(ck)}")
    trained = losses(r0)
    print(f"eval-only: real trains 4 ({r0.seconds:.1f} s), end-of-training losses {trained}")

    runs = {}
    for side, value in (("real", "True"), ("mds", "True"), ("mds-False", "False"), ("mds-switches", "True")):
        c = os.path.join(d, "ckpt-" + side)
        copy(ck, c)
        f = flags(data, vocab, merges, c) + ["--eval-only", value]
        if side == "mds-switches":
            f += ["--no-masked-softmax-fusion", "--no-bias-dropout-fusion", "--mmap-warmup", "--DDP-impl", "torch",
                  "--use-cpu-initialization", "--partition-activations", "--checkpoint-in-cpu", "--num-workers", 0,
                  "--tile-factor", 2, "--bert-no-binary-head", "--mask-prob", 0.3]
        if side.startswith("real"):
            run = tree.run(f, nproc=2, ds_config=ds, name="eval-" + side, timeout=400)
        else:
            run = bmd_harness.run_mds_train(MDS, f, 2, os.path.join(d, "run-" + side), name="eval-" + side,
                                            ds_config=ds, timeout=400)
        runs[side] = run
        print(f"eval-only {side} ({value}): {run.seconds:.1f} s, rc {run.returncode}, losses {losses(run)}")
        if not check(run.ok, f"eval-only {side}: failed (rc {run.returncode})\n{run.tail()}"):
            continue
        check(not run.iterations, f"eval-only {side}: trained iterations {[i['iteration'] for i in run.iterations]}")
        check(steps_saved(c) == ["global_step4"], f"eval-only {side}: the checkpoint folder now holds {steps_saved(c)}")
        with open(os.path.join(c, "latest")) as fh:
            check(fh.read().strip() == "global_step4", f"eval-only {side}: `latest` changed")
        if side.startswith("mds"):
            check("stopped (eval only) after 4 iterations" in "\n".join(run.logs),
                  f"eval-only {side}: no 'stopped (eval only) after 4 iterations'\n{run.tail(5)}")
    want = losses(runs["real"]) if runs["real"].ok else {}
    if not check(sorted(want) == ["the end of training for test data", "the end of training for val data"],
                 f"eval-only: the real program printed {sorted(want)}"):
        return
    # The loaded weights are the ones training ended with: the test loss the training run printed at its end (the
    # test sets start at sample 0; the validation sets go on from the checkpoint's consumed_valid_samples).
    at = "the end of training for test data"
    check(trained.get(at) is not None and rel(want[at], trained[at]) <= 1e-6,
          f"eval-only real: {at} {want[at]!r}, the training run's {trained.get(at)!r}")
    worst = 0.0
    for side in ("mds", "mds-False", "mds-switches"):
        if not runs[side].ok:
            continue
        got = losses(runs[side])
        for at, loss in want.items():
            if not check(got.get(at) is not None, f"eval-only {side}: no '{at}' loss (got {sorted(got)})"):
                continue
            worst = max(worst, rel(got[at], loss))
            check(rel(got[at], loss) <= 1e-5, f"eval-only {side}: {at} {got[at]!r}, the real program's {loss!r} "
                                              f"(relative {rel(got[at], loss):.2e} > 1e-5)")
    if runs["mds"].ok and runs["mds-switches"].ok:
        check(losses(runs["mds"]) == losses(runs["mds-switches"]),
              f"eval-only: implementation switches moved mds's losses: {losses(runs['mds-switches'])} vs "
              f"{losses(runs['mds'])}")
    print(f"  eval-only: validation and test losses agree with the real program, worst relative difference "
          f"{worst:.2e}")


def local_rank(tree, tmp, data, vocab, merges, ds):
    d = os.path.join(tmp, "local-rank")
    f = flags(data, vocab, merges, os.path.join(d, "ckpt"), train_iters=1) + ["--local_rank", 0]
    real = tree.run(f, nproc=2, ds_config=ds, name="local-rank-real", timeout=300)
    mds = bmd_harness.run_mds_train(MDS, f, 2, os.path.join(d, "run-mds"), name="local-rank-mds", ds_config=ds,
                                    timeout=300)
    print(f"local_rank 0 on 2 ranks: real rc {real.returncode}, mds rc {mds.returncode}")
    check(not real.ok and "expected local-rank to be the same as rank % device-count" in "\n".join(real.logs),
          f"local_rank: the real program did not stop on rank 1's --local_rank 0\n{real.tail(10)}")
    check(not mds.ok and "--local_rank 0: expected this process's local rank, 1" in "\n".join(mds.logs),
          f"local_rank: mds-train did not stop on rank 1's --local_rank 0\n{mds.tail(10)}")
    one = bmd_harness.run_mds_train(MDS, flags(data, vocab, merges, os.path.join(d, "ckpt1"), train_iters=3) +
                                    ["--local_rank", 0, "--global-batch-size", 2], 1, os.path.join(d, "run-mds1"),
                                    name="local-rank-mds1", ds_config=bmd_harness.ds_config(2, 2), timeout=300)
    check(one.ok and [i["iteration"] for i in one.iterations] == [1, 2, 3],
          f"local_rank: mds-train on one rank with --local_rank 0 failed (rc {one.returncode})\n{one.tail(10)}")


def main():
    tmp = tempfile.mkdtemp(prefix="bmd-running-flags-")
    started = time.time()
    build_dir = os.environ.get("MDS_BUILD_DIR")
    cache = os.path.join(build_dir, "crosscheck-cache") if build_dir else None
    data, vocab, merges = tiny_dataset.make(tmp, BIN, SOURCE, 512)
    tree = bmd_harness.BmdTree(os.path.join(tmp, "bmd"), source_dir=SOURCE, cache_dir=cache)
    ds = bmd_harness.ds_config(micro_batch_size=2, global_batch_size=4, zero_stage=1, clip=1.0)
    names = sys.argv[1:] or ["eval-only", "local-rank"]
    if "eval-only" in names:
        eval_only(tree, tmp, data, vocab, merges, ds)
    if "local-rank" in names:
        local_rank(tree, tmp, data, vocab, merges, ds)
    bmd_harness.finish(started, tmp)


if __name__ == "__main__":
    main()

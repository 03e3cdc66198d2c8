#!/usr/bin/env python3
"""The batch-size ramp-up (--rampup-batch-size with --train-samples, as tr1-13B and tr11-176B train) against BigScience's
real Megatron-DeepSpeed, through the harness of bmd_harness.py, on 2 ranks (DP=2, micro-batch 1) with the tiny GPT of
test_bmd_resume.py: `--rampup-batch-size 2 2 12 --global-batch-size 6 --train-samples 40`, so the global batch is 2, 2,
2, 4, 4, 6, ... (Megatron's RampupBatchsizeNumMicroBatches), and the first launch stops at iteration 4, in the middle
of the ramp-up.
  - each side trains 4 iterations and saves; the real program resumes its own checkpoint and mds-train resumes a copy,
    and the other way round: iterations 5..end agree (lm loss and grad norm relative 1e-5, learning rate 1e-6), with
    the same consumed samples at each iteration and the same number of iterations in all;
  - both first launches save the same args.train_iters (what Megatron's update_train_iters counts through the
    ramp-up), consumed_train_samples and iteration.
Exits 77 without ../shared/third_party, the Python packages, or the mds binaries."""
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_bmd_resume as resume  # noqa: E402  (skips with 77 when the harness or the binaries are missing)
import bmd_harness  # noqa: E402
import tiny_dataset  # noqa: E402

check = resume.check
TRAIN_SAMPLES = 40


def rampup_flags(data, vocab, merges, ckpt):
    f = [str(x) for x in resume.flags(data, vocab, merges, ckpt, 1, 1, exit_interval=4)]
    f[f.index("--train-iters"):f.index("--train-iters") + 2] = ["--train-samples", str(TRAIN_SAMPLES)]
    f[f.index("--lr-warmup-iters"):f.index("--lr-warmup-iters") + 2] = ["--lr-warmup-samples", "4"]
    f[f.index("--micro-batch-size") + 1] = "1"
    f[f.index("--global-batch-size") + 1] = "6"
    return f + ["--rampup-batch-size", "2", "2", "12"]


def consumed(run):
    return {it["iteration"]: int(it["consumed samples"]) for it in run.iterations}


def saved_args(root):
    args = vars(resume.load_torch(os.path.join(root, "global_step4", "mp_rank_00_model_states.pt"))["args"])
    return {k: args.get(k) for k in ("train_iters", "train_samples", "consumed_train_samples", "iteration",
                                     "rampup_batch_size", "global_batch_size")}


def both_ways(tree, tmp, data, vocab, merges, ds):
    for first in ("real", "mds"):
        d = os.path.join(tmp, first)
        ck = os.path.join(d, "ck")
        flags = lambda c: rampup_flags(data, vocab, merges, c)  # noqa: E731
        if first == "real":
            r1 = tree.run(flags(ck), nproc=2, ds_config=ds, name="rampup-real1", timeout=400)
        else:
            r1 = resume.run_mds(flags(ck), os.path.join(d, "run1"), "rampup-mds1", ds)
        if not check(r1.ok, f"rampup: {first} first launch failed (rc {r1.returncode})\n{r1.tail()}"):
            return None
        resume.copy(ck, ck + "-real")
        resume.copy(ck, ck + "-mds")
        real = tree.run(flags(ck + "-real"), nproc=2, ds_config=ds, name=f"rampup-real-from-{first}", timeout=400)
        mds = resume.run_mds(flags(ck + "-mds"), os.path.join(d, "run-mds"), f"rampup-mds-from-{first}", ds)
        print(f"rampup from {first}: first launch ({r1.seconds:.1f} s), real resumes ({real.seconds:.1f} s), "
              f"mds resumes ({mds.seconds:.1f} s); consumed samples {consumed(r1)}")
        if not (check(real.ok, f"rampup: real resume of {first}'s checkpoint failed\n{real.tail()}") and
                check(mds.ok, f"rampup: mds resume of {first}'s checkpoint failed\n{mds.tail()}")):
            continue
        its = sorted(consumed(real))
        check(its and its[0] == 5, f"rampup from {first}: the real resume logged iterations {its}")
        check(consumed(mds) == consumed(real), f"rampup from {first}: consumed samples per iteration: mds "
                                               f"{consumed(mds)}, the real program {consumed(real)}")
        if its:
            resume.compare(f"rampup from {first}", mds, real, its)
        yield first, ck


def main():
    tmp = tempfile.mkdtemp(prefix="bmd-rampup-")
    started = time.time()
    build_dir = os.environ.get("MDS_BUILD_DIR")
    cache = os.path.join(build_dir, "crosscheck-cache") if build_dir else None
    data, vocab, merges = tiny_dataset.make(tmp, resume.BIN, resume.SOURCE, 512)
    tree = bmd_harness.BmdTree(os.path.join(tmp, "bmd"), source_dir=resume.SOURCE, cache_dir=cache)
    ds = bmd_harness.ds_config(micro_batch_size=1, global_batch_size=6, zero_stage=1, clip=1.0)
    saved = dict(both_ways(tree, tmp, data, vocab, merges, ds) or [])
    if len(saved) == 2:
        real, mds = saved_args(saved["real"]), saved_args(saved["mds"])
        print(f"rampup: saved args, real {real}, mds {mds}")
        for k in ("train_iters", "train_samples", "consumed_train_samples", "iteration", "global_batch_size"):
            check(real[k] == mds[k], f"rampup: args.{k} = {mds[k]!r} in mds's checkpoint, {real[k]!r} in the real one")
    bmd_harness.finish(started, tmp)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""mds-train with several processes on GPUs (label gpu; exits 77 where LibTorch sees no CUDA device), the CPU checks of
tests/integration/test_train_pp.py repeated on CUDA tensors:
  - Gloo, several processes sharing one GPU (CUDA tensors through host memory): TP=2 and PP=2 train the same tiny GPT
    on the same data as one process on the GPU, on the same curve (lm loss, grad norm, params norm, validation) to
    1e-4 relative (GPU kernels differ with the shapes TP cuts);
  - NCCL (--distributed-backend nccl, one GPU per rank): with 2 GPUs or more, TP=2, PP=2 and DP=2 on the same curve,
    TP=2 x PP=2 with 4 GPUs, TP=2 x PP=2 x DP=2 with 8; rank 0 reports NCCL; a stage stopped with SIGSTOP makes the
    other exit within the timeout naming it. With one GPU, two NCCL ranks on it are refused up front with a message
    that says to use one GPU per rank or Gloo (NCCL puts no two ranks of a communicator on one GPU)."""
import os
import subprocess
import sys
import tempfile

SOURCE = os.environ.get("MDS_SOURCE_DIR", ".")
sys.path.insert(0, os.path.join(SOURCE, "tests", "integration"))
sys.path.insert(0, os.path.join(SOURCE, "tests", "crosscheck"))
import testkit  # noqa: E402
from testkit import check  # noqa: E402
import tiny_dataset  # noqa: E402
from test_train_dp import BIN, TRAIN, curve, flags, free_port, rank_env, same_curve, start, wait_all  # noqa: E402
from test_train_pp import HUNG_STAGE, hung_stage  # noqa: E402

if not os.path.exists(TRAIN):
    print("SKIP: mds-train not built")
    sys.exit(77)


def gpu_count():
    python = os.environ.get("MDS_PYTHON", os.path.join(SOURCE, ".venv", "bin", "python"))
    r = subprocess.run([python, "-c", "import torch; print(torch.cuda.device_count())"], capture_output=True, text=True)
    return int(r.stdout.strip() or 0) if r.returncode == 0 else 0


def gpu_flags(data, backend, extra=(), iters=None, layers=4):
    """test_train_dp's flags, on --device cuda with `backend`."""
    args = flags(data, extra=extra, layers=layers) if iters is None else flags(data, iters, extra, layers=layers)
    args[args.index("--device") + 1] = "cuda"
    args[args.index("--distributed-backend") + 1] = backend
    return args


def parallel(data, backend, tp, pp, dp, ref):
    world = tp * pp * dp
    name = f"{backend}: TP={tp} x PP={pp} x DP={dp}"
    par = ["--tensor-model-parallel-size", str(tp), "--pipeline-model-parallel-size", str(pp)]
    outs = wait_all(start(gpu_flags(data, backend, par), world, free_port()))
    for r, (rc, _, err) in enumerate(outs):
        check(rc == 0, f"{name}: rank {r} exited {rc}: {err[-2000:]}")
    engine = "nccl for CUDA tensors" if backend == "nccl" else ", gloo)"
    check(engine in outs[0][2], f"{name}: rank 0 did not report {engine!r}: {outs[0][2][-800:]}")
    same_curve(name, ref, curve(outs[-1][1]), rtol=1e-4)


def main():
    gpus = gpu_count()
    if gpus == 0:
        print("SKIP: no CUDA device")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        prefix, vocab, merges = tiny_dataset.make(tmp, BIN, SOURCE, 1000)
        data = ["--data-path", prefix, "--vocab-file", vocab, "--merge-file", merges, "--split", "90,8,2"]
        one = subprocess.run([TRAIN, *gpu_flags(data, "nccl")], capture_output=True, text=True, env=rank_env(0, 1, free_port()))
        if not check(one.returncode == 0, f"one process on the GPU exited {one.returncode}: {one.stderr[-1500:]}"):
            return testkit.finish()
        ref = curve(one.stdout)
        for tp, pp in ((2, 1), (1, 2)):
            parallel(data, "gloo", tp, pp, 1, ref)
        if gpus >= 2:
            for tp, pp, dp in ((2, 1, 1), (1, 2, 1), (1, 1, 2)):
                parallel(data, "nccl", tp, pp, dp, ref)
            if gpus >= 4:
                parallel(data, "nccl", 2, 2, 1, ref)
            if gpus >= 8:
                parallel(data, "nccl", 2, 2, 2, ref)
            hung_stage(data, gpu_flags(data, "nccl", HUNG_STAGE, iters=100000), "nccl hung stage")
        else:
            outs = wait_all(start(gpu_flags(data, "nccl", ["--tensor-model-parallel-size", "2"], iters=5), 2, free_port()),
                            timeout=300)
            rc, _, err = outs[0]
            check(rc != 0 and "NCCL needs a GPU of its own per rank" in err,
                  f"two NCCL ranks on one GPU: exit {rc}, expected the one-GPU-per-rank error: {err[-800:]}")
            print(f"two NCCL ranks on one GPU: refused ({err.strip().splitlines()[-1][:200] if err.strip() else ''})")
    return testkit.finish()


if __name__ == "__main__":
    sys.exit(main())

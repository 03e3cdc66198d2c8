#!/usr/bin/env python3
"""kernels/'s CUDA kernels against their CPU references on the GPU (label gpu): runs bin/cross_entropy_gpu,
bin/adam_gpu, bin/layer_norm_gpu and bin/bias_grad_gpu, which exit 77 without a CUDA device. Skipped where nvcc did not build the
kernels (no such binaries)."""
import os
import subprocess
import sys

BIN = os.environ.get("MDS_BIN", "build/bin")
TESTS = ["cross_entropy_gpu", "adam_gpu", "layer_norm_gpu", "bias_grad_gpu"]


def main():
    exes = [os.path.join(BIN, t) for t in TESTS]
    if not all(os.path.exists(e) for e in exes):
        print(f"SKIP: {', '.join(TESTS)} not built (no CUDA compiler at configure time)")
        return 77
    failed, skipped = [], 0
    for exe in exes:
        r = subprocess.run([exe], capture_output=True, text=True, timeout=600)
        sys.stdout.write(r.stdout)
        sys.stderr.write(r.stderr[-4000:])
        if r.returncode == 77:
            skipped += 1
        elif r.returncode != 0:
            print(f"FAIL: {exe} exited {r.returncode}")
            failed.append(exe)
    if failed:
        return 1
    if skipped == len(exes):
        return 77
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())

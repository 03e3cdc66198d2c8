#!/usr/bin/env python3
"""kernels/'s CUDA kernels against their CPU references on the GPU (label gpu): runs bin/cross_entropy_gpu, which
exits 77 without a CUDA device. Skipped where nvcc did not build the kernels (no such binary)."""
import os
import subprocess
import sys

BIN = os.environ.get("MDS_BIN", "build/bin")


def main():
    exe = os.path.join(BIN, "cross_entropy_gpu")
    if not os.path.exists(exe):
        print("SKIP: cross_entropy_gpu not built (no CUDA compiler at configure time)")
        return 77
    r = subprocess.run([exe], capture_output=True, text=True, timeout=600)
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr[-4000:])
    if r.returncode == 77:
        return 77
    if r.returncode != 0:
        print(f"FAIL: {exe} exited {r.returncode}")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())

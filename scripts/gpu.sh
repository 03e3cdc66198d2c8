#!/usr/bin/env bash
# On the GPU machine (the device tool runs this from the repository root): configure the CUDA
# path, build, run the gpu-labelled tests and everything else that runs there, and leave logs in
# $OUT (when set). Usage: scripts/gpu.sh [extra ctest args]
# That machine has torch 2.11 (CUDA 13) in its system Python and nvcc; no network.
# To run there without building: scripts/gpu-pack.sh (docs/gpu.md).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/mds-gpu-out}; mkdir -p "$out"
py=$(command -v python3)
nvidia-smi -L 2>&1 | tee "$out/gpu.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMDS_CUDA=ON -DMDS_PYTHON="$py" \
      -DCMAKE_CUDA_ARCHITECTURES=90 2>&1 | tail -n 5 | tee "$out/configure.log"
cmake --build build-gpu -j "$(nproc)" 2>&1 | tail -n 20 | tee "$out/build.log"
ctest --test-dir build-gpu --output-on-failure -L 'gpu|unit' "$@" 2>&1 | tee "$out/ctest.log"

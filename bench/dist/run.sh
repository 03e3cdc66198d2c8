#!/usr/bin/env bash
# bench/dist: the data-parallel gradient all-reduce of mds-train (bench_allreduce: trainer::Communicator,
# 25 MiB buckets over c10d's Gloo) against torch.distributed's Gloo all_reduce from Python on the same
# gradient shapes (reference.py: DDP's 25 MiB buckets, and per tensor), same processes on loopback,
# in the same run. Needs a built tree with LibTorch (scripts/setup.sh).
#   bash bench/dist/run.sh [--world N] [--iters K] [--rounds R]
# Prints a markdown table for bench/RESULTS.md: median ms per all-reduce of all gradients, the
# algorithm bandwidth (gradient bytes / time) and the speed ratio to the DDP-style reference.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${MDS_BUILD_DIR:-build}
world=2; iters=10; rounds=2
while [[ $# -gt 0 ]]; do
  case $1 in
    --world) world=$2; shift 2;;
    --iters) iters=$2; shift 2;;
    --rounds) rounds=$2; shift 2;;
    *) echo "unknown argument $1" >&2; exit 2;;
  esac
done
bin=$build/bench/bench_allreduce
[[ -x $bin ]] || { echo "run.sh: $bin not built" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
port() { .venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# Every rank of one implementation at once; rank 0's JSON lines on stdout.
launch() {
  local p; p=$(port); local pids=()
  for ((r = 1; r < world; r++)); do
    env RANK=$r WORLD_SIZE=$world LOCAL_RANK=$r LOCAL_WORLD_SIZE=$world MASTER_ADDR=127.0.0.1 MASTER_PORT=$p \
      OMP_NUM_THREADS=1 "$@" > /dev/null & pids+=($!)
  done
  env RANK=0 WORLD_SIZE=$world LOCAL_RANK=0 LOCAL_WORLD_SIZE=$world MASTER_ADDR=127.0.0.1 MASTER_PORT=$p \
    OMP_NUM_THREADS=1 "$@"
  wait "${pids[@]}"
}
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(date -u +%F); $world processes on loopback"
echo
echo "| gradients (layers/hidden/vocab) | MB | tensors | implementation | ms (median) | GB/s | vs DDP buckets |"
echo "| --- | ---: | ---: | --- | ---: | ---: | ---: |"
while read -r L H V; do
  "$bin" --layers "$L" --hidden "$H" --vocab "$V" --print-shapes > "$tmp/shapes.json"
  for ((r = 0; r < rounds; r++)); do
    launch .venv/bin/python bench/dist/reference.py --shapes "$tmp/shapes.json" --iters "$iters"
    launch "$bin" --layers "$L" --hidden "$H" --vocab "$V" --iters "$iters"
  done | .venv/bin/python bench/dist/table.py "$L/$H/$V"
done <<'CONFIGS'
2 256 8192
4 512 16384
6 768 50304
CONFIGS

#!/usr/bin/env bash
# bench/train-cpu: one training step (forward, backward, clipping, AdamW) of mds (bench_train_step,
# the code mds-train runs) against the same model and batch in PyTorch eager from Python
# (reference.py), in the same run, same threads. Needs a built tree with LibTorch (scripts/setup.sh).
#   bash bench/train-cpu/run.sh [--steps K] [--rounds R] [--threads T] [--baseline BUILD_DIR]
# --baseline: also times BUILD_DIR/bench/bench_train_step (another checkout's build, e.g. the commit
# before a refactor) in the same alternating rounds, as "mds-baseline", and prints mds's ratio to it.
# Prints a markdown table for bench/RESULTS.md: median ms per step over --rounds alternating runs of
# --steps timed steps each (after 3 warmup steps), and the speed ratio to PyTorch.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${MDS_BUILD_DIR:-build}
steps=8; threads=$(nproc); rounds=2; baseline=
while [[ $# -gt 0 ]]; do
  case $1 in
    --steps) steps=$2; shift 2;;
    --threads) threads=$2; shift 2;;
    --rounds) rounds=$2; shift 2;;
    --baseline) baseline=$2; shift 2;;
    *) echo "unknown argument $1" >&2; exit 2;;
  esac
done
[[ -x $build/bench/bench_train_step ]] || { echo "run.sh: $build/bench/bench_train_step not built" >&2; exit 1; }
[[ -z $baseline || -x $baseline/bench/bench_train_step ]] || { echo "run.sh: $baseline/bench/bench_train_step not built" >&2; exit 1; }
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(date -u +%F); threads $threads"
echo
echo "| model (layers/hidden/heads, seq x batch x micro batches, vocab) | params | implementation | ms/step (median) | vs PyTorch eager |"
echo "| --- | ---: | --- | ---: | ---: |"
while read -r L H N S B M V; do
  args=(--layers "$L" --hidden "$H" --heads "$N" --seq "$S" --batch "$B" --micro-batches "$M" --vocab "$V" --steps "$steps" --threads "$threads")
  # Alternating rounds, step times pooled per implementation: a noisy neighbour hits both sides.
  for ((r = 0; r < rounds; r++)); do
    .venv/bin/python bench/train-cpu/reference.py "${args[@]}"
    "$build/bench/bench_train_step" "${args[@]}"
    if [[ -n $baseline ]]; then
      "$baseline/bench/bench_train_step" "${args[@]}" | sed 's/"impl": "mds"/"impl": "mds-baseline"/'
    fi
  done | .venv/bin/python bench/train-cpu/table.py "$L/$H/$N, $S x $B x $M, $V"
done <<'CONFIGS'
2 128 4 128 8 1 8192
4 256 8 256 8 1 8192
6 384 6 512 4 2 16384
CONFIGS

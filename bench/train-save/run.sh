#!/usr/bin/env bash
# bench/train-save: what checkpointing costs a training run, with synchronous saves (--no-async-save)
# against asynchronous ones (--async-save, the default), in the same run: a GPT whose checkpoint is a
# few GB (fp32 weights + Adam states) trained for --iters steps on the CPU, saving every --save-interval
# steps, the modes alternating over --rounds; a run without saves gives the floor. Per mode: how long
# each save blocked the training (the timers line's save-checkpoint-blocked, else save-checkpoint),
# how long the whole save took (write and fsync included), the end-to-end time of the run and the
# bytes written per second of save. Needs a built tree (scripts/setup.sh) and ~3x the checkpoint size
# free under --dir.
#   bash bench/train-save/run.sh [--iters N] [--save-interval K] [--layers L] [--hidden H] [--rounds R]
#                                [--dir /tmp/mds-bench-train-save]
# Prints a markdown table for bench/RESULTS.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${MDS_BUILD_DIR:-build}
iters=8; interval=2; layers=8; hidden=1024; rounds=1; dir=/tmp/mds-bench-train-save
while [[ $# -gt 0 ]]; do
  case $1 in
    --iters) iters=$2; shift 2;;
    --save-interval) interval=$2; shift 2;;
    --layers) layers=$2; shift 2;;
    --hidden) hidden=$2; shift 2;;
    --rounds) rounds=$2; shift 2;;
    --dir) dir=$2; shift 2;;
    *) echo "unknown argument $1" >&2; exit 2;;
  esac
done
train=$build/bin/mds-train
[[ -x $train ]] || { echo "run.sh: $train not built" >&2; exit 1; }
py=.venv/bin/python
mkdir -p "$dir"
if [[ ! -f $dir/data_text_document.idx ]]; then
  echo "making the dataset in $dir ..." >&2
  $py -c "import sys; sys.path.insert(0, 'tests/crosscheck'); import tiny_dataset; tiny_dataset.make(sys.argv[1], sys.argv[2], '.', 1000)" \
    "$dir" "$build/bin" >&2
fi
modes=(none sync)
help=$("$train" --help)  # not piped into grep -q: its early exit would fail the pipeline (pipefail)
if [[ $help == *--async-save* ]]; then modes+=(async); else echo "run.sh: $train has no --async-save: synchronous saves only" >&2; fi

flags=(--data-path "$dir/data_text_document" --vocab-file "$dir/tok/vocab.json" --merge-file "$dir/tok/merges.txt" --split 90,8,2
       --num-layers "$layers" --hidden-size "$hidden" --num-attention-heads 16 --seq-length 64 --max-position-embeddings 64
       --micro-batch-size 1 --global-batch-size 1 --train-iters "$iters" --lr 1e-4 --log-interval 1
       --eval-interval 100000 --eval-iters 1 --seed 7 --device cpu --distributed-backend gloo)

logs=$dir/logs
rm -rf "$logs"; mkdir -p "$logs"
for ((r = 0; r < rounds; r++)); do
  for mode in "${modes[@]}"; do
    rm -rf "$dir/ckpt"
    case $mode in
      none) extra=();;
      sync) extra=(--save "$dir/ckpt" --save-interval "$interval" --no-async-save);;
      async) extra=(--save "$dir/ckpt" --save-interval "$interval" --async-save);;
    esac
    echo "round $((r + 1)): $mode ..." >&2
    start=$(date +%s.%N)
    "$train" "${flags[@]}" "${extra[@]}" > "$logs/$mode.$r.log" 2>&1 || { tail -20 "$logs/$mode.$r.log" >&2; exit 1; }
    end=$(date +%s.%N)
    echo "$end - $start" | bc > "$logs/$mode.$r.wall"
  done
done
rm -rf "$dir/ckpt"

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem:/{print $2}') GB RAM, $(df -h "$dir" | awk 'NR==2{print $1}'); $(date -u +%F)"
echo "model: $layers layers, hidden $hidden, fp32 on the CPU; $iters iterations, a save every $interval; $rounds round(s)"
echo
$py bench/train-save/table.py "$logs" "$rounds" "${modes[@]}"

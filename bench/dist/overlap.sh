#!/usr/bin/env bash
# bench/dist/overlap.sh: a data-parallel training step of mds-train with the gradient all-reduce overlapped with
# the backward pass (the default) and after it (--no-overlap-grad-reduce), against PyTorch's DistributedDataParallel
# on transformers' GPT2LMHeadModel of the same shape (ddp_step.py; DDP overlaps too), 2 processes on loopback, one
# thread each, in the same run. One micro batch per rank and step, so the whole backward pass can hide the
# all-reduce. Needs a built tree with LibTorch and the .venv (scripts/setup.sh).
#   bash bench/dist/overlap.sh [--iters K] [--rounds R]
# Prints a markdown table for bench/RESULTS.md: median ms per step and the speed ratio to DDP.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${MDS_BUILD_DIR:-build}
iters=10; rounds=2
while [[ $# -gt 0 ]]; do
  case $1 in
    --iters) iters=$2; shift 2;;
    --rounds) rounds=$2; shift 2;;
    *) echo "unknown argument $1" >&2; exit 2;;
  esac
done
train=$build/bin/mds-train
[[ -x $train ]] || { echo "overlap.sh: $train not built" >&2; exit 1; }
tmp=${MDS_BENCH_TMP:-$(mktemp -d)}; [[ -n ${MDS_BENCH_TMP:-} ]] || trap 'rm -rf "$tmp"' EXIT
py=.venv/bin/python
# The model: 4 layers, hidden 512, 8 heads, sequence 256, vocabulary 1024 (a 1000-token BPE of the bundled corpus,
# padded as Megatron pads it): 13.5M parameters, 54 MB of fp32 gradients.
L=4 H=512 A=8 S=256 MBS=4 V=1024
$py - "$tmp" "$build/bin" <<'PY'
import sys
sys.path.insert(0, "tests/crosscheck")
import tiny_dataset
tiny_dataset.make(sys.argv[1], sys.argv[2], ".", 1000)
PY
port() { $py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
launch() {  # both ranks; the last rank's stdout (mds-train's iteration lines) or rank 0's (the reference)
  local p; p=$(port)
  env RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p OMP_NUM_THREADS=1 \
    "$@" > "$tmp/rank1.out" 2> "$tmp/rank1.err" &
  local pid=$!
  env RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p OMP_NUM_THREADS=1 \
    "$@" > "$tmp/rank0.out" 2> "$tmp/rank0.err"
  wait $pid
}
mds() {  # $1: implementation name, rest: extra flags
  local name=$1; shift
  launch "$train" --data-path "$tmp/data_text_document" --vocab-file "$tmp/tok/vocab.json" --merge-file "$tmp/tok/merges.txt" \
    --split 100,0,0 --num-layers $L --hidden-size $H --num-attention-heads $A --seq-length $S --max-position-embeddings $S \
    --micro-batch-size $MBS --global-batch-size $((2 * MBS)) --train-iters $((iters + 2)) --lr 1e-4 --min-lr 1e-5 \
    --lr-decay-style cosine --clip-grad 1.0 --weight-decay 0.1 --hidden-dropout 0 --attention-dropout 0 --log-interval 1 \
    --eval-iters 0 --threads 1 --device cpu --distributed-backend gloo "$@"
  # Each line's "samples per second" (3 decimals; the seconds per iteration have 2) after the first two (warm-up).
  $py - "$name" "$tmp/rank1.out" $((2 * MBS)) <<'PY'
import json, re, sys
sps = [float(m.group(1)) for m in re.finditer(r"samples per second: ([0-9.]+)", open(sys.argv[2]).read())]
print(json.dumps({"impl": sys.argv[1], "ms": [int(sys.argv[3]) / s * 1e3 for s in sps[2:]]}))
PY
}
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(date -u +%F); 2 processes on loopback"
echo
echo "| model (layers/hidden/seq/MBS) | implementation | ms per step (median) | vs DDP |"
echo "| --- | --- | ---: | ---: |"
for ((r = 0; r < rounds; r++)); do
  launch $py bench/dist/ddp_step.py --layers $L --hidden $H --heads $A --vocab $V --seq $S --mbs $MBS --iters "$iters"
  cat "$tmp/rank0.out"
  mds "mds-train, all-reduce overlapped"
  mds "mds-train, all-reduce after backward" --no-overlap-grad-reduce
done | $py -c '
import json, statistics, sys
rows = {}
for line in sys.stdin:
    j = json.loads(line)
    rows.setdefault(j["impl"], []).extend(j["ms"])
ref = statistics.median(rows["PyTorch DDP (GPT2LMHeadModel, overlapped)"])
for name, ms in rows.items():
    m = statistics.median(ms)
    print(f"| '"$L/$H/$S/$MBS"' | {name} | {m:.0f} | {ref / m:.2f}x |")
'

#!/usr/bin/env bash
# bench/ckpt: the checkpoint tools against the speed of the disk. A DeepSpeed pipeline checkpoint of 1.3B
# parameters (bf16, TP 2 x PP 2, BigScience's layout; made once by make_checkpoint.py) is, in the same run:
#   cat        the tag's files concatenated into one file (page cache only),
#   cat+fsync  the same, then fsync'd: the disk-speed reference every tool is compared with,
#   python     converted to a Hugging Face GPT2 folder the Python way (reference.py: torch.load every shard,
#              merge, save_file),
#   to-hf      mds-ckpt-to-hf, reshape (to TP 1 x PP 1) mds-ckpt-reshape, shrink mds-ckpt-shrink (weights
#              only), each with --workers 1 and 2 where the tool has --workers.
# Wall time, MB/s of the checkpoint's bytes and peak RSS (GNU time) of each, over --rounds rounds with a warm
# page cache; the outputs of python and to-hf are checked to hold the same tensors. Needs a built tree
# (scripts/setup.sh) and ~8 GB free under --dir.
#   bash bench/ckpt/run.sh [--rounds R] [--dir /tmp/mds-bench-ckpt]
# Prints a markdown table for bench/RESULTS.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${MDS_BUILD_DIR:-build}
rounds=2; dir=/tmp/mds-bench-ckpt
while [[ $# -gt 0 ]]; do
  case $1 in
    --rounds) rounds=$2; shift 2;;
    --dir) dir=$2; shift 2;;
    *) echo "unknown argument $1" >&2; exit 2;;
  esac
done
for t in to-hf reshape shrink; do
  [[ -x $build/bin/mds-ckpt-$t ]] || { echo "run.sh: $build/bin/mds-ckpt-$t not built" >&2; exit 1; }
done
py=.venv/bin/python
src=$dir/src
if [[ ! -f $src/latest ]]; then
  rm -rf "$src"
  echo "making the checkpoint in $src ..." >&2
  $py bench/ckpt/make_checkpoint.py "$src" >&2
fi
tag=$src/$(cat "$src/latest")
bytes=$(du -sb "$tag" | cut -f1)
largest=$($py -c "import sys; sys.path.insert(0, 'bench/ckpt'); import make_checkpoint as m; s = m.SHAPE; print(s.padded_vocab * s.hidden * 2)" 2>/dev/null | tail -1)
cat "$tag"/* > /dev/null  # warm the page cache for every reader

measure() {  # name, command...: one line "name seconds max_rss_kb"
  local name=$1; shift
  local t; t=$(mktemp)
  /usr/bin/time -f "%e %M" -o "$t" "$@" > /dev/null 2> "$t.err" || { cat "$t.err" >&2; exit 1; }
  echo "$name $(cat "$t")"
  rm -f "$t" "$t.err"
}
# The tools that have --workers (a helper may not have it yet): "1 2", else "" (one run without the flag).
worker_counts() { if [[ $("$build/bin/mds-ckpt-$1" --help 2>&1) == *--workers* ]]; then echo "1 2"; else echo ""; fi; }
run_tool() {  # short name, output, arguments...: one measure per worker count
  local t=$1 out=$2; shift 2
  local counts; counts=$(worker_counts "$t")
  if [[ -z $counts ]]; then
    rm -rf "$out"; measure "$t" "$build/bin/mds-ckpt-$t" "$@" --quiet; rm -rf "$out"; return
  fi
  for w in $counts; do
    rm -rf "$out"; measure "$t-w$w" "$build/bin/mds-ckpt-$t" "$@" --quiet --workers "$w"
    [[ $t == to-hf ]] || rm -rf "$out"
  done
}

results=$(mktemp)
for ((r = 0; r < rounds; r++)); do
  rm -rf "$dir/cat" "$dir/ref" "$dir/to-hf" "$dir/reshape" "$dir/shrink"; mkdir -p "$dir/cat"
  measure cat sh -c "cat '$tag'/* > '$dir/cat/all'" >> "$results"; rm -f "$dir/cat/all"
  measure cat+fsync sh -c "cat '$tag'/* > '$dir/cat/all' && sync '$dir/cat/all'" >> "$results"; rm -rf "$dir/cat"
  measure python $py bench/ckpt/reference.py "$tag" "$dir/ref" >> "$results"
  run_tool to-hf "$dir/to-hf" "$tag" "$dir/to-hf" >> "$results"
  # The bench checkpoint records no original vocabulary size: its padded one is kept.
  run_tool reshape "$dir/reshape" "$tag" "$dir/reshape" --target-tp 1 --target-pp 1 --original-vocab-size 50304 >> "$results"
  run_tool shrink "$dir/shrink" "$src" "$dir/shrink" >> "$results"
done
$py bench/ckpt/compare.py "$dir/ref" "$dir/to-hf" >&2
rm -rf "$dir/ref" "$dir/to-hf"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem:/{print $2}') GB RAM, $(df -h "$dir" | awk 'NR==2{print $1}') under $dir; load average $(cut -d' ' -f1-3 /proc/loadavg); $(date -u '+%F %H:%M UTC')"
echo "checkpoint: $bytes bytes in $(ls "$tag" | wc -l) files; largest tensor $largest bytes; $rounds rounds"
echo
$py - "$results" "$largest" "$bytes" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, sec, kb = line.split()
    rows.setdefault(name, []).append((float(sec), int(kb) * 1024))
largest, total = int(sys.argv[2]), int(sys.argv[3])
disk = statistics.median(s for s, _ in rows["cat+fsync"])
print("| run | wall s (median) | MB/s | vs cat+fsync | peak RSS MB (max) | peak RSS / largest tensor |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
for name, runs in rows.items():
    sec = statistics.median(s for s, _ in runs)
    rss = max(b for _, b in runs)
    print(f"| {name} | {sec:.1f} | {total / sec / 1e6:.0f} | {disk / sec:.2f}x | {rss / 1e6:.0f} | {rss / largest:.1f} |")
PY
rm -f "$results"

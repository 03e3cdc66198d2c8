#!/usr/bin/env bash
# bench/ckpt: converting a DeepSpeed pipeline checkpoint of 1.3B parameters (bf16, TP 2 x PP 2, BigScience's
# layout; made once by make_checkpoint.py) to a Hugging Face GPT2 folder with mds-ckpt-to-hf, against the
# Python way (reference.py: torch.load every shard, merge, save_file), in the same run. Wall time and peak
# RSS (GNU time) of each, over --rounds alternating rounds with a warm page cache; the outputs are checked
# to hold the same tensors. Needs a built tree (scripts/setup.sh) and ~8 GB free under --dir.
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
tool=$build/bin/mds-ckpt-to-hf
[[ -x $tool ]] || { echo "run.sh: $tool not built" >&2; exit 1; }
py=.venv/bin/python
src=$dir/src
if [[ ! -f $src/latest ]]; then
  rm -rf "$src"
  echo "making the checkpoint in $src ..." >&2
  $py bench/ckpt/make_checkpoint.py "$src" >&2
fi
tag=$src/$(cat "$src/latest")
largest=$($py -c "import sys; sys.path.insert(0, 'bench/ckpt'); import make_checkpoint as m; s = m.SHAPE; print(s.padded_vocab * s.hidden * 2)" 2>/dev/null | tail -1)
cat "$tag"/* > /dev/null  # warm the page cache for both sides

measure() {  # name, command...: one line "name seconds max_rss_kb"
  local name=$1; shift
  local t; t=$(mktemp)
  /usr/bin/time -f "%e %M" -o "$t" "$@" > /dev/null 2> "$t.err" || { cat "$t.err" >&2; exit 1; }
  echo "$name $(cat "$t")"
  rm -f "$t" "$t.err"
}

results=$(mktemp)
for ((r = 0; r < rounds; r++)); do
  rm -rf "$dir/ref" "$dir/mds"
  measure python $py bench/ckpt/reference.py "$tag" "$dir/ref" >> "$results"
  measure mds "$tool" "$tag" "$dir/mds" --quiet >> "$results"
done
$py bench/ckpt/compare.py "$dir/ref" "$dir/mds" >&2
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem:/{print $2}') GB RAM; $(date -u +%F)"
echo "checkpoint: $(du -sb "$tag" | cut -f1) bytes in $(ls "$tag" | wc -l) files; largest tensor $largest bytes"
echo
$py - "$results" "$largest" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, sec, kb = line.split()
    rows.setdefault(name, []).append((float(sec), int(kb) * 1024))
largest = int(sys.argv[2])
ref = statistics.median(s for s, _ in rows["python"])
print("| converter | wall s (median) | vs Python | peak RSS MB (max) | peak RSS / largest tensor |")
print("| --- | ---: | ---: | ---: | ---: |")
for name in ("python", "mds"):
    sec = statistics.median(s for s, _ in rows[name])
    rss = max(b for _, b in rows[name])
    print(f"| {name} | {sec:.1f} | {ref / sec:.2f}x | {rss / 1e6:.0f} | {rss / largest:.1f} |")
PY
rm -f "$results"

"""Reads the JSON lines of reference.py and bench_train_step on stdin; prints one markdown row per implementation:
median ms per step (all runs of an implementation pooled) and the speed ratio to PyTorch eager (> 1: faster than PyTorch);
with run.sh --baseline, a last row compares mds with mds-baseline (> 1: this build is faster)."""
import json
import statistics
import sys

pooled, params = {}, {}
for line in sys.stdin:
    if line.strip():
        r = json.loads(line)
        pooled.setdefault(r["impl"], []).extend(r["ms_per_step"])
        params[r["impl"]] = r["params"]
ref = statistics.median(pooled["pytorch-eager"])
for impl, ms in pooled.items():
    med = statistics.median(ms)
    print(f"| {sys.argv[1]} | {params[impl]:,} | {impl} | {med:.1f} | {ref / med:.2f}x |")
if "mds" in pooled and "mds-baseline" in pooled:
    base = statistics.median(pooled["mds-baseline"])
    print(f"| {sys.argv[1]} | {params['mds']:,} | mds vs mds-baseline | {statistics.median(pooled['mds']):.1f} "
          f"| {base / statistics.median(pooled['mds']):.3f}x |")

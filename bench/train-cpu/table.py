"""Reads the JSON lines of reference.py and bench_train_step on stdin; prints one markdown row per implementation:
median ms per step (all runs of an implementation pooled) and the speed ratio to PyTorch eager (> 1: faster than PyTorch)."""
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

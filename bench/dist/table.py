#!/usr/bin/env python3
"""Reads the JSON lines of bench_allreduce and reference.py (rank 0 of each run) on stdin, pools the times per
implementation, and prints the markdown rows of bench/RESULTS.md for the gradient shape named in argv[1]."""
import json
import statistics
import sys

REF = "torch.distributed (DDP 25 MiB buckets)"
rows = {}
for line in sys.stdin:
    j = json.loads(line)
    rows.setdefault(j["impl"], dict(j, ms=[]))["ms"].extend(j["ms"])
ref = statistics.median(rows[REF]["ms"])
for name, j in rows.items():
    m = statistics.median(j["ms"])
    mb, gbs = j["bytes"] / 1e6, j["bytes"] / m / 1e6
    print(f"| {sys.argv[1]} | {mb:.0f} | {j['tensors']} | {name} | {m:.1f} | {gbs:.2f} | {ref / m:.2f}x |")

#!/usr/bin/env python3
"""The reference of bench/dist: torch.distributed's Gloo all_reduce on the same gradient shapes (read from
bench_allreduce --print-shapes), as PyTorch's DistributedDataParallel buckets them (25 MiB flat buckets,
reducer default bucket_cap_mb) and, for comparison, one all_reduce per tensor. Started once per rank with
RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set; rank 0 prints one JSON line per mode."""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist

p = argparse.ArgumentParser()
p.add_argument("--shapes", required=True)
p.add_argument("--iters", type=int, default=10)
p.add_argument("--warmup", type=int, default=2)
a = p.parse_args()
torch.set_num_threads(1)
dist.init_process_group("gloo")
world = dist.get_world_size()
grads = [torch.randn(s) for s in json.load(open(a.shapes))]
nbytes = sum(g.numel() * 4 for g in grads)


def ddp_buckets(tensors, cap=25 << 20):
    buckets, cur, size = [], [], 0
    for t in reversed(tensors):  # DDP fills buckets in reverse parameter order (gradients arrive backwards)
        if cur and size + t.numel() * 4 > cap:
            buckets.append(cur)
            cur, size = [], 0
        cur.append(t)
        size += t.numel() * 4
    if cur:
        buckets.append(cur)
    return buckets


def bucketed():
    for b in ddp_buckets(grads):
        flat = torch._utils._flatten_dense_tensors(b)
        dist.all_reduce(flat)
        flat.div_(world)
        for t, s in zip(b, torch._utils._unflatten_dense_tensors(flat, b)):
            t.copy_(s)


def per_tensor():
    for t in grads:
        dist.all_reduce(t)
        t.div_(world)


for name, fn in (("torch.distributed (DDP 25 MiB buckets)", bucketed), ("torch.distributed (per tensor)", per_tensor)):
    ms = []
    for i in range(a.warmup + a.iters):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        t = (time.perf_counter() - t0) * 1000
        if i >= a.warmup:
            ms.append(t)
    if dist.get_rank() == 0:
        print(json.dumps({"impl": name, "world": world, "bytes": nbytes, "tensors": len(grads), "ms": ms}), flush=True)
dist.destroy_process_group()

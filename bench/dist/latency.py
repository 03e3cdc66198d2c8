#!/usr/bin/env python3
"""Gloo's floor for small all-reduces: torch.distributed's all_reduce over Gloo (the engine mds-train uses
on CPUs, from LibTorch's c10d) of 16 to 65,536 floats between 2 processes on loopback, as tensor
parallelism issues them (a few per layer and micro batch). Prints a markdown table: microseconds per
call (median of --rounds rounds of --iters calls) and the user and system CPU time each process spends
per call. With --pin, both processes (and their threads) share CPU 0.

    .venv/bin/python bench/dist/latency.py [--iters 2000] [--rounds 3] [--pin]

Starts its own two ranks (no launcher needed)."""
import argparse
import os
import resource
import socket
import statistics
import subprocess
import sys
import time

SIZES = (16, 4096, 65536)


def rank_main(a):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rows = []
    for n in SIZES:
        t = torch.ones(n)
        for _ in range(20):  # warm-up: connections, buffers
            dist.all_reduce(t)
        per_call, user, system = [], [], []
        for _ in range(a.rounds):
            dist.barrier()
            r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            for _ in range(a.iters):
                dist.all_reduce(t)
            t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
            per_call.append((t1 - t0) / a.iters * 1e6)
            user.append((r1.ru_utime - r0.ru_utime) / a.iters * 1e6)
            system.append((r1.ru_stime - r0.ru_stime) / a.iters * 1e6)
        rows.append((n, statistics.median(per_call), statistics.median(user), statistics.median(system)))
    if dist.get_rank() == 0:
        where = "both processes on CPU 0" if a.pin else "unpinned"
        print(f"machine: {os.cpu_count()} cores; {time.strftime('%Y-%m-%d', time.gmtime())}; torch {torch.__version__}; "
              f"2 processes on loopback, {where}; median of {a.rounds} rounds of {a.iters} calls")
        print()
        print("| floats | bytes | µs per all-reduce | user µs per call | system µs per call |")
        print("| ---: | ---: | ---: | ---: | ---: |")
        for n, us, u, s in rows:
            print(f"| {n:,} | {4 * n:,} | {us:,.0f} | {u:,.0f} | {s:,.0f} |")
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iters", type=int, default=2000, help="all-reduces per round and size (default 2000)")
    p.add_argument("--rounds", type=int, default=3, help="rounds per size; the table shows the median (default 3)")
    p.add_argument("--pin", action="store_true", help="run both processes on CPU 0 (taskset semantics)")
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.iters < 1 or a.rounds < 1:
        p.error("--iters and --rounds must be at least 1")
    if a.rank is not None:
        if a.pin:
            os.sched_setaffinity(0, {0})
        rank_main(a)
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in (0, 1):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   OMP_NUM_THREADS="1")
        argv = [sys.executable, __file__, "--rank", str(r), "--iters", str(a.iters), "--rounds", str(a.rounds)]
        procs.append(subprocess.Popen(argv + (["--pin"] if a.pin else []), env=env))
    codes = [p.wait() for p in procs]
    if any(codes):
        sys.exit(f"latency.py: ranks exited {codes}")


if __name__ == "__main__":
    main()

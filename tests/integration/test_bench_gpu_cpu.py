#!/usr/bin/env python3
"""bench/gpu's harness on the CPU at its toy size (2 layers, 64 hidden, T=64, batch 4, fp32, one thread), so that
what the GPU machine runs is exercised here:
  - every implementation available here runs — mds-train (when built), PyTorch eager, torch.compile (when a C++
    compiler is there for inductor), llm.c's CPU trainer train_gpt2.c (when its source is in .llmc-src and a C
    compiler is there) — and its row has a finite tokens/s, ms/step, and MFU by both formulas; an unavailable one
    is listed as skipped with the reason;
  - they trained the same model on the same task: each reports the same parameter count (llm.c's formula gives it
    too), and each first loss is near ln(500), the loss of a uniform guess over the 500 token ids;
  - the Megatron TFLOP/s of a row times its median step time is Megatron's FLOP count of the step, worked out here;
  - a missing mds-train or llm.c source gives 'skipped' rows with the reason (exit 3), and an implementation killed
    at --timeout a 'failed' row (exit 1): none is dropped silently;
  - with llm.c's source here, the GPU trainer's step and memory lines, printed from the printf formats in its
    train_gpt2.cu, are read back by bench/gpu/llmc.py (that path runs only on a GPU).
Exits 77 without torch and numpy in the venv."""
import json
import math
import re
import os
import shutil
import subprocess
import sys
import tempfile

SOURCE = os.environ.get("MDS_SOURCE_DIR", ".")
BIN = os.environ.get("MDS_BIN", "build/bin")
PYTHON = os.environ.get("MDS_PYTHON") or sys.executable
sys.path.insert(0, os.path.join(SOURCE, "tests", "integration"))
import testkit  # noqa: E402
from testkit import check  # noqa: E402

BENCH = os.path.join(SOURCE, "bench", "gpu", "bench.py")
LLMC_SRC = os.path.join(SOURCE, ".llmc-src")


def bench(tmp, name, *args, timeout=600):
    work = os.path.join(tmp, name)
    r = subprocess.run([PYTHON, BENCH, "--size", "toy", "--device", "cpu", "--threads", "1", "--work", work, *args],
                       capture_output=True, text=True, timeout=timeout)
    path = os.path.join(work, "out", "results.json")
    results = json.load(open(path)) if os.path.exists(path) else None
    return r, results


def check_llmc_gpu_parser():
    """Formats llm.c's own printf strings (from its train_gpt2.cu) with known values and parses them back."""
    path = os.path.join(LLMC_SRC, "train_gpt2.cu")
    if not os.path.isfile(path):
        print("llm.c GPU parser: no llm.c source here, not checked")
        return
    sys.path.insert(0, os.path.join(SOURCE, "bench", "gpu"))
    import llmc  # noqa: E402
    src = open(path).read()
    formats = {}
    for key, pattern in (("step", r'printf0\("(step %4d/%d \| loss [^"]*)\\n"'),
                         ("memory", r'printf0\("(device memory usage: [^"]*)\\n"'),
                         ("params", r'printf0\("(num_parameters: [^"]*)\\n"')):
        m = re.search(pattern, src)
        if not check(m is not None, f"llm.c's train_gpt2.cu has no {key} line printf0 like {pattern!r}"):
            return
        formats[key] = m.group(1).replace("%zu", "%d").replace("%zd", "%d")
    text = "\n".join([formats["params"] % (124475904, 248951808), formats["memory"] % (23013, 143771),
                      formats["step"] % (1, 30, 11.009346, 0.0, 15.3925, 0.0, 3e-4, 123.45, 41.2, 530000.0),
                      formats["step"] % (2, 30, 10.5, -1.25, 3.5, 0.5, 3e-4, 98.76, 51.2, 660000.0)])
    ms, losses, params, memory = llmc.parse(text)
    check(ms == [123.45, 98.76] and losses == [11.009346, 10.5] and params == 124475904 and memory == 23013 * 2**20,
          f"llm.c GPU output read back as {ms}, {losses}, {params}, {memory} from:\n{text}")
    print(f"llm.c GPU parser: {len(ms)} step lines, parameters and memory read back from its own formats")


def main():
    r = subprocess.run([PYTHON, "-c", "import torch, numpy"], capture_output=True, text=True)
    if r.returncode != 0:
        testkit.skip(f"torch / numpy not importable by {PYTHON}")
    mds_bin = os.path.abspath(BIN)
    have = {"mds": os.path.isfile(os.path.join(mds_bin, "mds-train")), "eager": True,
            "compile": bool(shutil.which("g++") or shutil.which("c++")),
            "llmc": os.path.isfile(os.path.join(LLMC_SRC, "train_gpt2.c")) and bool(shutil.which("cc") or shutil.which("gcc"))}
    check_llmc_gpu_parser()
    with tempfile.TemporaryDirectory() as tmp:
        r, res = bench(tmp, "all", "--mds-bin", mds_bin, "--llmc-src", LLMC_SRC, "--timeout", "300")
        print(r.stdout)
        if not check(res is not None, f"bench.py wrote no results.json (exit {r.returncode}): {r.stderr[-2000:]}"):
            return testkit.finish()
        rows = {row["impl"]: row for row in res["rows"]}
        check(sorted(rows) == sorted(have), f"rows for {sorted(rows)}, expected one per implementation {sorted(have)}")
        table = open(os.path.join(tmp, "all", "out", "table.md")).read()
        vp = 512
        flops_step = 24 * 3 * 4 * 64 * 2 * 64 ** 2 * (1 + 64 / (6 * 64) + vp / (16 * 2 * 64))  # Megatron, toy step
        for impl, ok in have.items():
            row = rows.get(impl)
            if row is None:
                continue
            check(row["label"] in table, f"{impl}: no row labelled {row['label']!r} in table.md")
            if not ok:
                check(row["status"] == "skipped" and row.get("reason"), f"{impl} is unavailable here but its row is {row}")
                print(f"{impl}: skipped: {row.get('reason')}")
                continue
            if not check(row["status"] == "ok", f"{impl}: {row['status']}: {row.get('reason')}"):
                continue
            for k in ("tokens_per_s", "ms_median", "mfu_llmc", "mfu_megatron", "tflops_megatron"):
                v = row.get(k)
                check(isinstance(v, float) and math.isfinite(v) and v > 0, f"{impl}: {k} = {v!r}")
            check(0 < row["mfu_llmc"] < 2 and 0 < row["mfu_megatron"] < 2, f"{impl}: MFU out of range: {row}")
            check(abs(row["tflops_megatron"] * 1e12 * row["ms_median"] / 1e3 - flops_step) < 1e-6 * flops_step,
                  f"{impl}: TFLOP/s x ms/step is not Megatron's {flops_step:.4g} FLOPs per step")
            check(abs(row["tokens_per_s"] * row["ms_median"] / 1e3 - 256) < 1e-6, f"{impl}: tokens/s x ms/step != 256 tokens")
            check(abs(row["losses"][0] - math.log(500)) < 0.3, f"{impl}: first loss {row['losses'][0]} is not near ln(500)")
            check(row.get("params") == 136960, f"{impl}: {row.get('params')} parameters, expected 136,960 "
                                               "(llm.c's count: Vp·C + T·C + L·(12C² + 13C) + 2C)")
            print(f"{impl}: {row['tokens_per_s']:.0f} tokens/s, {row['ms_median']:.2f} ms/step, MFU {100 * row['mfu_llmc']:.1f}% "
                  f"(llm.c) / {100 * row['mfu_megatron']:.1f}% (Megatron), {row.get('params')} parameters")
        check(r.returncode == (0 if all(have.values()) else 3), f"exit {r.returncode}, expected "
                                                                f"{0 if all(have.values()) else 3}: {r.stderr[-800:]}")

        # Missing pieces are rows saying why, not silence.
        r, res = bench(tmp, "missing", "--impls", "mds,llmc", "--mds-bin", os.path.join(tmp, "nowhere"),
                       "--llmc-src", os.path.join(tmp, "nowhere"))
        if check(res is not None, f"missing: no results.json: {r.stderr[-1500:]}"):
            got = {row["impl"]: row for row in res["rows"]}
            check(got.get("mds", {}).get("status") == "skipped" and "mds-train not found" in got["mds"].get("reason", ""),
                  f"missing mds-train: {got.get('mds')}")
            check(got.get("llmc", {}).get("status") == "skipped" and "llm.c source not found" in got["llmc"].get("reason", ""),
                  f"missing llm.c: {got.get('llmc')}")
            check("skipped: mds-train not found" in r.stdout and "skipped: llm.c source not found" in r.stdout,
                  f"the printed table does not say what was skipped and why: {r.stdout}")
            check(r.returncode == 3, f"missing: exit {r.returncode}, expected 3")
        r, res = bench(tmp, "timeout", "--impls", "eager", "--timeout", "0.5")
        if check(res is not None, f"timeout: no results.json: {r.stderr[-1500:]}"):
            row = res["rows"][0]
            check(row["status"] == "failed" and "--timeout" in row.get("reason", ""), f"timeout: {row}")
            check(r.returncode == 1, f"timeout: exit {r.returncode}, expected 1")
    return testkit.finish()


if __name__ == "__main__":
    sys.exit(main())

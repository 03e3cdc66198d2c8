#!/usr/bin/env python3
"""bench/gpu: the same GPT-2 trained for a fixed number of steps by mds-train, PyTorch eager, torch.compile and
llm.c, in one run on one device, with one table: tokens/s, ms/step (median of the steps after --warmup), MFU by
llm.c's formula and by Megatron's (flops.py; the same FLOP counts and peak for every implementation), and peak
device memory. bench/gpu/README.md has the details; docs/gpu.md how it runs on the GPU machine.

  bench.py --size 124M|1.5B|toy [--device cuda|cpu] [--impls mds,eager,compile,llmc] [--out DIR] ...

Sizes: 124M (12 layers, 768 hidden, 12 heads), 1.5B (48 / 1600 / 25), both T=1024 and GPT-2's vocabulary
(50257, padded to 50304), bf16; toy (2 / 64 / 4, T=64, vocabulary 500 → 512, fp32) tests the harness on a CPU,
where llm.c's CPU trainer (train_gpt2.c, which fixes batch 4 x 64) takes part. mds-train and llm.c read the
same random tokens (a Megatron dataset, llm.c's token files); the PyTorch script draws its own from the same
uniform distribution. Each implementation runs as its own process and is killed after --timeout seconds. One that cannot run
is listed as skipped with the reason; one that fails, as failed with its exit status and last error line.
Exit status: 0 when every implementation asked for ran, 1 when one failed, 3 when none failed but one was skipped."""
import argparse
import json
import math
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import flops  # noqa: E402
import formats  # noqa: E402
import gpu_memory  # noqa: E402
import llmc  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))  # the repository, or the GPU pack (which has the same layout)
SIZES = {
    "124M": dict(layers=12, hidden=768, heads=12, seq=1024, vocab=50257, micro_batch=16, global_batch=64, steps=30,
                 warmup=5, precision="bf16"),
    "1.5B": dict(layers=48, hidden=1600, heads=25, seq=1024, vocab=50257, micro_batch=8, global_batch=16, steps=12,
                 warmup=4, precision="bf16"),
    "toy": dict(layers=2, hidden=64, heads=4, seq=64, vocab=500, micro_batch=4, global_batch=4, steps=12, warmup=3,
                precision="fp32"),
}
IMPLS = ["mds", "eager", "compile", "llmc"]
HYPER = dict(lr=3e-4, weight_decay=0.1, beta1=0.9, beta2=0.95, eps=1e-8, clip=1.0, seed=1234)


def first_existing(*paths):
    return next((p for p in paths if p and os.path.exists(p)), None)


def default_mds_bin():
    """$MDS_BIN, else the pack's bin/ (bench/gpu/../../bin), else the repository's build/bin."""
    for d in (os.environ.get("MDS_BIN"), os.path.join(ROOT, "bin"), os.path.join(ROOT, "build", "bin")):
        if d and os.path.isfile(os.path.join(d, "mds-train")):
            return d
    return None


def padded(vocab, multiple=128):
    return -(-vocab // multiple) * multiple


class Result(dict):
    """One implementation's row: impl, label, status (ok / skipped / failed), reason, and the numbers."""


def run_process(cmd, log, timeout, env=None, cwd=None, sample_gpu=False):
    """Runs cmd with stdout and stderr into `log`; returns (exit status or 'timeout', output, seconds, peak RSS
    bytes, peak GPU bytes from nvidia-smi or None)."""
    t0 = time.time()
    with open(log, "w") as lf:
        lf.write("$ " + " ".join(cmd) + "\n")
        lf.flush()
        with gpu_memory.Sampler() if sample_gpu else _NoSampler() as sampler:
            p = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)
            timer = threading.Timer(timeout, lambda: os.killpg(p.pid, signal.SIGKILL))
            timer.start()
            _, status, usage = os.wait4(p.pid, 0)
            timed_out = not timer.is_alive()
            timer.cancel()
    rc = "timeout" if timed_out else os.waitstatus_to_exitcode(status)
    with open(log, errors="replace") as f:
        text = f.read()
    return rc, text, time.time() - t0, usage.ru_maxrss * 1024, sampler.peak_bytes


class _NoSampler:
    peak_bytes = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def last_error(text):
    """The last line that looks like an error (with the next one when it ends in ':', as llm.c's checks print)."""
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("$ ")]
    for i in range(len(lines) - 1, -1, -1):
        if re.search(r"error|Error|ERROR|assert|Traceback|Killed|out of memory|not found", lines[i]):
            more = " " + lines[i + 1] if lines[i].endswith(":") and i + 1 < len(lines) else ""
            return (lines[i] + more)[:300]
    return lines[-1][:300] if lines else "no output"


# ---------------------------------------------------------------------------------------------------------------
# mds-train

ITERATION = re.compile(r"^ iteration +(\d+)/ +(\d+) \|")
PARAMETERS = re.compile(r"number of parameters on \(tensor, pipeline\) model parallel rank \(0, 0\): (\d+)")
FIELD = re.compile(r"([a-zA-Z][a-zA-Z ()]*?): ([-+0-9.eEnaif]+) \|")


def parse_mds(text, tokens_per_step):
    """(ms per step, losses, peak memory bytes or None, parameters or None) from mds-train's output. The step time comes
    from each iteration line's tokens per second (printed to 0.1 tokens/s; elapsed time per iteration has 10 ms
    steps in Megatron's format); peak memory from a Megatron-style memory report ('memory (MB) | ... max
    allocated: X') or a 'peak (GPU) memory' field, when mds-train prints one."""
    ms, losses, peak, params = [], [], None, None
    for line in text.splitlines():
        m = PARAMETERS.search(line)
        if m:
            params = int(m.group(1))
        if ITERATION.match(line):
            fields = {k.strip(): v for k, v in FIELD.findall(line)}
            if "lm loss" in fields:
                losses.append(float(fields["lm loss"]))
            if "tokens per second" in fields and float(fields["tokens per second"]) > 0:
                ms.append(tokens_per_step / float(fields["tokens per second"]) * 1e3)
            elif "elapsed time per iteration (ms)" in fields:
                ms.append(float(fields["elapsed time per iteration (ms)"]))
            elif "elapsed time per iteration (s)" in fields:
                ms.append(float(fields["elapsed time per iteration (s)"]) * 1e3)
        for value, unit in _memory_fields(line):
            b = value * {"B": 1, "KB": 1e3, "KiB": 2**10, "MB": 2**20, "MiB": 2**20, "GB": 2**30, "GiB": 2**30}[unit]
            peak = b if peak is None else max(peak, b)
    return ms, losses, peak, params


def _memory_fields(line):
    """(value, unit) pairs of peak-memory fields in one line of mds-train's output."""
    found = []
    if re.search(r"memory \((MB|MiB|GB|GiB)\)", line):
        unit = re.search(r"memory \((MB|MiB|GB|GiB)\)", line).group(1)
        m = re.search(r"max allocated: ([0-9.]+)", line)
        if m:
            found.append((float(m.group(1)), unit))
        return found
    for m in re.finditer(r"(?i)peak (?:gpu |cuda |device )?memory(?: allocated)?(?: \((MB|MiB|GB|GiB)\))?: "
                         r"([0-9.]+)(?: ?(MB|MiB|GB|GiB|B))?", line):
        unit = m.group(1) or m.group(3)
        if unit:
            found.append((float(m.group(2)), unit))
    return found


def run_mds(cfg, a, data, log):
    train = os.path.join(a.mds_bin, "mds-train") if a.mds_bin else None
    if not train or not os.path.isfile(train):
        return Result(status="skipped", reason=f"mds-train not found ({train or 'no --mds-bin'})")
    prefix, vocab_file, merges_file = data["megatron"]
    cmd = [train, "--num-layers", cfg["layers"], "--hidden-size", cfg["hidden"], "--num-attention-heads", cfg["heads"],
           "--seq-length", cfg["seq"], "--max-position-embeddings", cfg["seq"], "--micro-batch-size", cfg["micro_batch"],
           "--global-batch-size", cfg["global_batch"], "--train-iters", cfg["steps"], "--lr", HYPER["lr"],
           "--lr-decay-style", "constant", "--weight-decay", HYPER["weight_decay"], "--adam-beta1", HYPER["beta1"],
           "--adam-beta2", HYPER["beta2"], "--adam-eps", HYPER["eps"], "--clip-grad", HYPER["clip"],
           "--init-method-std", 0.02, "--hidden-dropout", 0, "--attention-dropout", 0, "--seed", HYPER["seed"],
           "--data-path", prefix, "--vocab-file", vocab_file, "--merge-file", merges_file, "--split", "100,0,0",
           "--eval-iters", 0, "--log-interval", 1, "--device", a.device]
    if cfg["precision"] == "bf16":
        cmd.append("--bf16")
    if a.device == "cpu":
        cmd += ["--threads", a.threads]
    cmd += shlex.split(a.mds_args)  # a variant: later flags win over the ones above
    rc, text, wall, rss, gpu_peak = run_process([str(c) for c in cmd], log, a.timeout, sample_gpu=a.device == "cuda")
    tokens = cfg["global_batch"] * cfg["seq"]
    ms, losses, peak, params = parse_mds(text, tokens)
    r = Result(ms=ms, losses=losses, params=params, wall_s=wall, rss_bytes=rss, tokens_per_step=tokens)
    if peak is not None:
        r.update(peak_memory_bytes=peak, peak_memory_source="mds-train's log")
    elif gpu_peak is not None:
        r.update(peak_memory_bytes=gpu_peak, peak_memory_source="nvidia-smi")
    if gpu_peak is not None:
        r["nvidia_smi_peak_bytes"] = gpu_peak
    return finish(r, rc, text)


# ---------------------------------------------------------------------------------------------------------------
# PyTorch eager / torch.compile


def run_torch(cfg, a, compile_scope, log):
    cmd = [a.python, os.path.join(HERE, "torch_gpt2.py"), "--layers", cfg["layers"], "--hidden", cfg["hidden"],
           "--heads", cfg["heads"], "--seq", cfg["seq"], "--padded-vocab", padded(cfg["vocab"]), "--vocab", cfg["vocab"],
           "--micro-batch", cfg["micro_batch"], "--global-batch", cfg["global_batch"], "--steps", cfg["steps"],
           "--lr", HYPER["lr"], "--weight-decay", HYPER["weight_decay"], "--precision", cfg["precision"],
           "--compile", compile_scope, "--device", a.device, "--seed", HYPER["seed"]]
    if a.device == "cpu":
        cmd += ["--threads", a.threads]
    rc, text, wall, rss, gpu_peak = run_process([str(c) for c in cmd], log, a.timeout, sample_gpu=a.device == "cuda")
    out = None
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                out = json.loads(line)
            except ValueError:
                pass
    r = Result(wall_s=wall, rss_bytes=rss, tokens_per_step=cfg["global_batch"] * cfg["seq"])
    if out:
        r.update(ms=out["ms_per_step"], losses=out["loss"], params=out["params"])
        if "peak_memory_bytes" in out:
            r.update(peak_memory_bytes=out["peak_memory_bytes"], peak_memory_source="torch.cuda.max_memory_allocated")
    if gpu_peak is not None:
        r["nvidia_smi_peak_bytes"] = gpu_peak
    return finish(r, rc, text)


# ---------------------------------------------------------------------------------------------------------------
# llm.c


def build_llmc(a, log):
    """Builds what --device needs; returns {variant: (binary, library folders)} and {variant: why not}."""
    built, why = {}, {}
    if a.device == "cpu":
        try:
            built["cpu"] = (llmc.build_cpu(a.llmc_src, a.llmc_build, log, timeout=a.timeout), [])
        except llmc.Unavailable as e:
            why["cpu"] = str(e)
        except subprocess.TimeoutExpired:
            why["cpu"] = f"building train_gpt2.c took over {a.timeout:.0f} s"
        return built, why
    for variant, cudnn in (("cudnn", True), ("plain", False)):
        try:
            built[variant] = llmc.build_gpu(a.llmc_src, a.llmc_build, cudnn, log, timeout=a.timeout,
                                            build=not a.llmc_prebuilt)
        except llmc.Unavailable as e:
            why[variant] = str(e)
        except subprocess.TimeoutExpired:
            why[variant] = f"building llm.c ({variant}) took over {a.timeout:.0f} s"
    return built, why


def run_llmc(cfg, a, data, log_dir):
    """One row per llm.c binary tried: with cuDNN attention first, its own kernels when that fails."""
    log = os.path.join(log_dir, "llmc-build.log")
    built, why = build_llmc(a, log)
    tokens = cfg["global_batch"] * cfg["seq"]
    if a.device == "cpu":
        if "cpu" not in built:
            return [Result(impl="llmc", label="llm.c (train_gpt2.c, CPU)", status="skipped", reason=why["cpu"])]
        if (cfg["seq"], cfg["micro_batch"], cfg["global_batch"]) != (64, 4, 4):
            return [Result(impl="llmc", label="llm.c (train_gpt2.c, CPU)", status="skipped",
                           reason="llm.c's CPU trainer fixes batch 4 x 64 tokens in its main(): use --size toy")]
        run_dir = data["llmc_cpu_dir"]
        env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
        rc, text, wall, rss, _ = run_process([built["cpu"][0]], os.path.join(log_dir, "llmc.log"), a.timeout, env=env,
                                             cwd=run_dir)
        ms, losses, params, _ = llmc.parse(text)
        r = Result(impl="llmc", label="llm.c (train_gpt2.c, CPU)", ms=ms, losses=losses, params=params, wall_s=wall,
                   rss_bytes=rss, tokens_per_step=4 * 64)
        return [finish(r, rc, text)]
    desc = llmc.DESCRIPTORS.get((cfg["layers"], cfg["hidden"], cfg["heads"]))
    rows = []
    for variant, label in (("cudnn", "llm.c (cuDNN attention)"), ("plain", "llm.c (own attention kernels)")):
        if desc is None or cfg["seq"] > 1024 or cfg["vocab"] != 50257 or cfg["precision"] != "bf16":
            return [Result(impl="llmc", label=label, status="skipped",
                           reason="llm.c builds GPT-2 d12/d24/d36/d48 (T <= 1024, vocabulary 50257) in bf16 only")]
        if variant not in built:
            rows.append(Result(impl="llmc", label=label, status="skipped", reason=why[variant]))
            continue
        binary, lib_dirs = built[variant]
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = ":".join(lib_dirs + [p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p])
        cmd = [binary, "-i", data["llmc_train"], "-j", data["llmc_val"], "-e", desc, "-b", cfg["micro_batch"],
               "-t", cfg["seq"], "-d", tokens, "-x", cfg["steps"], "-l", HYPER["lr"], "-u", 0, "-q", 1.0,
               "-c", HYPER["weight_decay"], "-v", 1000000, "-m", 1, "-s", 0, "-r", 0, "-z", 0, "-w", 1, "-f", 1, "-h", 0]
        rc, text, wall, rss, gpu_peak = run_process([str(c) for c in cmd], os.path.join(log_dir, f"llmc-{variant}.log"),
                                                    a.timeout, env=env, cwd=data["llmc_gpu_dir"], sample_gpu=True)
        ms, losses, params, memory = llmc.parse(text)
        r = Result(impl="llmc", label=label, ms=ms, losses=losses, params=params, wall_s=wall, rss_bytes=rss,
                   tokens_per_step=tokens)
        if memory is not None:
            r.update(peak_memory_bytes=memory, peak_memory_source="llm.c's 'device memory usage' (cudaMemGetInfo)")
        elif gpu_peak is not None:
            r.update(peak_memory_bytes=gpu_peak, peak_memory_source="nvidia-smi")
        if gpu_peak is not None:
            r["nvidia_smi_peak_bytes"] = gpu_peak
        rows.append(finish(r, rc, text))
        if rows[-1]["status"] == "ok":
            break
    return rows


# ---------------------------------------------------------------------------------------------------------------


def finish(r, rc, text):
    if rc == "timeout":
        r.update(status="failed", reason=f"killed after the --timeout ({last_error(text)})")
    elif rc != 0:
        r.update(status="failed", reason=f"exit {rc}: {last_error(text)}")
    elif not r.get("ms"):
        r.update(status="failed", reason=f"no step times in its output ({last_error(text)})")
    else:
        r.setdefault("status", "ok")
    return r


def metrics(r, cfg, a, peak):
    """Adds the steady median and the derived rates to an 'ok' row."""
    steady = r["ms"][a.warmup:]
    if not steady:
        r.update(status="failed", reason=f"only {len(r['ms'])} steps, none after the {a.warmup} warm-up steps")
        return
    med = statistics.median(steady)
    tokens = r["tokens_per_step"]
    tps = tokens / (med / 1e3)
    vp = padded(cfg["vocab"])
    per_token = flops.llmc_flops_per_token(cfg["layers"], cfg["hidden"], cfg["seq"], vp)
    batch = tokens // cfg["seq"]
    mega = flops.megatron_flops_per_iteration(cfg["layers"], cfg["hidden"], cfg["seq"], vp, batch)
    r.update(steady_steps=len(steady), ms_median=med, tokens_per_s=tps,
             tflops_llmc=per_token * tps / 1e12, tflops_megatron=mega / (med / 1e3) / 1e12)
    if peak:
        r.update(mfu_llmc=r["tflops_llmc"] / peak, mfu_megatron=r["tflops_megatron"] / peak)


def detect_device(a):
    r = subprocess.run([a.python, "-c", "import torch; print(int(torch.cuda.is_available()))"], capture_output=True,
                       text=True, timeout=300)
    return "cuda" if r.returncode == 0 and r.stdout.strip() == "1" else "cpu"


def measure_peak(a, log):
    rc, text, _, _, _ = run_process([a.python, os.path.join(HERE, "torch_gpt2.py"), "--matmul-peak", "--device", a.device,
                                     "--threads", str(a.threads)], log, 300)
    for line in text.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    return None


def write_inputs(cfg, a, work):
    """The same random tokens for mds-train (Megatron dataset + a tokenizer of the same size) and llm.c."""
    tokens_needed = cfg["steps"] * cfg["global_batch"] * cfg["seq"] + 1
    count = max(tokens_needed, 64 * 1024)
    tokens = formats.random_tokens(count, cfg["vocab"], HYPER["seed"])
    data = {}
    prefix = os.path.join(work, "megatron", "random_text_document")
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    formats.write_megatron_dataset(prefix, tokens)
    data["megatron"] = (prefix, *formats.write_gpt2_tokenizer(os.path.join(work, "tokenizer"), cfg["vocab"]))
    val = formats.random_tokens(2 * cfg["micro_batch"] * cfg["seq"] + 1 if a.device == "cuda" else 5 * 4 * 64 + 1,
                                cfg["vocab"], HYPER["seed"] + 1)
    if a.device == "cuda":
        data["llmc_gpu_dir"] = os.path.join(work, "llmc-gpu")
        data["llmc_train"] = os.path.join(data["llmc_gpu_dir"], "train.bin")
        data["llmc_val"] = os.path.join(data["llmc_gpu_dir"], "val.bin")
        formats.write_llmc_tokens(data["llmc_train"], tokens)
        formats.write_llmc_tokens(data["llmc_val"], val)
    else:
        # train_gpt2.c reads gpt2_124M.bin and dev/data/tinyshakespeare/*.bin from its working folder.
        d = data["llmc_cpu_dir"] = os.path.join(work, "llmc-cpu")
        shakespeare = os.path.join(d, "dev", "data", "tinyshakespeare")
        formats.write_llmc_tokens(os.path.join(shakespeare, "tiny_shakespeare_train.bin"), tokens)
        formats.write_llmc_tokens(os.path.join(shakespeare, "tiny_shakespeare_val.bin"), val)
        formats.write_llmc_model(os.path.join(d, "gpt2_124M.bin"), cfg["layers"], cfg["hidden"], cfg["heads"], cfg["seq"],
                                 cfg["vocab"], padded(cfg["vocab"]), HYPER["seed"])
    return data


def fmt(v, spec):
    return "–" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def pct(v):
    return "–" if v is None or not math.isfinite(v) else f"{100 * v:.1f}%"


def fmt_rate(v):
    """TFLOP/s with three significant digits or more: 412, 41.2, 0.0412."""
    if v is None or not math.isfinite(v):
        return "–"
    return format(v, ".0f" if v >= 100 else ".1f" if v >= 1 else ".3g")


def table(rows, cfg, a, peak, peak_source, measured):
    vp = padded(cfg["vocab"])
    accum = cfg["global_batch"] // cfg["micro_batch"]
    lines = [f"bench/gpu {a.size}: GPT-2 {cfg['layers']} layers, {cfg['hidden']} hidden, {cfg['heads']} heads, "
             f"T={cfg['seq']}, vocabulary {cfg['vocab']} (padded {vp}); batch {cfg['micro_batch']} x {accum} = "
             f"{cfg['global_batch']} sequences ({cfg['global_batch'] * cfg['seq']:,} tokens) per step; {cfg['precision']}; "
             f"{cfg['steps']} steps, median of those after the first {a.warmup}",
             f"device: {a.device_name} ({a.device}); peak for MFU: {fmt_rate(peak)} TFLOP/s ({peak_source}); "
             f"measured {measured['dtype'].replace('torch.', '') if measured else '?'} matmul "
             f"{measured['n'] if measured else '?'}³: {fmt_rate(measured and measured['tflops'])} TFLOP/s; "
             f"{'threads ' + str(a.threads) + '; ' if a.device == 'cpu' else ''}{time.strftime('%Y-%m-%d')}",
             "",
             "| implementation | status | tokens/s | vs eager | ms/step | MFU (llm.c) | MFU (Megatron) | TFLOP/s (Megatron) | "
             "peak memory (GiB) | parameters | loss first → last |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    eager = next((r["tokens_per_s"] for r in rows if r["impl"] == "eager" and r["status"] == "ok"), None)
    notes = []
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"| {r['label']} | {r['status']}: {r.get('reason', '')} | – | – | – | – | – | – | – | – | – |")
            continue
        mem = r.get("peak_memory_bytes")
        src = r.get("peak_memory_source")
        if src:
            marks = {"torch.cuda.max_memory_allocated": "a", "mds-train's log": "m", "nvidia-smi": "n"}
            mark = marks.get(src, "l")
            notes.append(mark)
        loss = f"{r['losses'][0]:.3f} → {r['losses'][-1]:.3f}" if r.get("losses") else "–"
        ratio = f"{r['tokens_per_s'] / eager:.2f}x" if eager else "–"
        lines.append(f"| {r['label']} | ok | {fmt(r['tokens_per_s'], ',.0f')} | {ratio} | {fmt(r['ms_median'], '.1f')} | "
                     f"{pct(r.get('mfu_llmc'))} | {pct(r.get('mfu_megatron'))} | {fmt_rate(r['tflops_megatron'])} | "
                     f"{fmt(mem and mem / 2**30, '.2f')}{' (' + mark + ')' if src else ''} | {fmt(r.get('params'), ',')} | "
                     f"{loss} |")
    legend = {"a": "(a) torch.cuda.max_memory_allocated", "m": "(m) mds-train's own report",
              "n": "(n) nvidia-smi memory.used minus idle (context and allocator pools included)",
              "l": "(l) llm.c's 'device memory usage' after its allocations (cudaMemGetInfo)"}
    if a.device == "cpu":
        lines.append("")
        lines.append("CPU run: no device memory; peak RSS per process in results.json.")
    elif notes:
        lines.append("")
        lines.append("Peak memory: " + "; ".join(legend[k] for k in sorted(set(notes))) + ".")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(SIZES), default="124M")
    for k in ("layers", "hidden", "heads", "seq", "vocab", "micro-batch", "global-batch", "steps", "warmup"):
        ap.add_argument("--" + k, type=int, help=f"override the size's {k}")
    ap.add_argument("--precision", choices=["bf16", "fp32"], help="override the size's precision")
    ap.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when torch sees a GPU")
    ap.add_argument("--impls", default=",".join(IMPLS), help="comma-separated subset of " + ",".join(IMPLS))
    ap.add_argument("--compile-scope", choices=["model", "block"], default="model",
                    help="torch.compile the whole model or each block (faster to compile for deep models)")
    ap.add_argument("--mds-bin", default=default_mds_bin(),
                    help="folder with mds-train [default: $MDS_BIN, the pack's bin/, build/bin]")
    ap.add_argument("--llmc-src", default=first_existing(os.environ.get("MDS_LLMC_SRC"), os.path.join(ROOT, "llmc"),
                                                         os.path.join(ROOT, ".llmc-src")),
                    help="llm.c's source [default: $MDS_LLMC_SRC, the pack's llmc/, .llmc-src]")
    ap.add_argument("--llmc-build", help="where llm.c's binaries are built (reused when the source is unchanged) "
                                         "[default: WORK/llmc-build]")
    ap.add_argument("--build-llmc-only", action="store_true", help="build llm.c for --device and exit")
    ap.add_argument("--llmc-prebuilt", action="store_true",
                    help="use llm.c's GPU binaries from --llmc-build only, never build them (run.sh builds them earlier)")
    ap.add_argument("--python", default=sys.executable, help="the Python with torch for the PyTorch runs")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads of each implementation on --device cpu [default: 1]")
    ap.add_argument("--timeout", type=float, default=600, help="seconds each implementation may run [default: 600]")
    ap.add_argument("--budget", type=float, help="seconds for the whole run: an implementation gets at most what is "
                                                 "left (less 10 s for the table); none starts with under 20 s left")
    ap.add_argument("--peak-tflops", type=float, help="the device's peak for MFU, instead of looking it up")
    ap.add_argument("--mds-args", default="", help="more mds-train flags (shell syntax), after the harness's own, which "
                                                   "they override: a variant such as '--attention-backend fused' (one flag alone: "
                                                   "--mds-args=--cross-entropy-loss-fusion, as argparse takes a lone "
                                                   "'--word' for an option)")
    ap.add_argument("--work", help="folder for the input files [default: a temporary folder]")
    ap.add_argument("--out", help="folder for table.md, results.json and the logs [default: WORK/out]")
    a = ap.parse_args()
    started = time.time()

    cfg = dict(SIZES[a.size])
    for k in ("layers", "hidden", "heads", "seq", "vocab", "micro_batch", "global_batch", "steps", "warmup", "precision"):
        if getattr(a, k) is not None:
            cfg[k] = getattr(a, k)
    a.warmup = cfg["warmup"]
    if cfg["global_batch"] % cfg["micro_batch"] or cfg["hidden"] % cfg["heads"]:
        ap.error("--global-batch must be a multiple of --micro-batch and --hidden of --heads")
    impls = [i for i in a.impls.split(",") if i]
    unknown = [i for i in impls if i not in IMPLS]
    if unknown:
        ap.error(f"unknown implementation(s) {unknown}; choose from {IMPLS}")
    work = a.work or tempfile.mkdtemp(prefix="mds-bench-gpu-")
    os.makedirs(work, exist_ok=True)
    out = a.out or os.path.join(work, "out")
    os.makedirs(out, exist_ok=True)
    a.llmc_build = a.llmc_build or os.path.join(work, "llmc-build")
    a.device = a.device or detect_device(a)
    if a.build_llmc_only:
        built, why = build_llmc(a, os.path.join(out, "llmc-build.log"))
        for v, (b, _) in built.items():
            print(f"llm.c {v}: {b}")
        for v, w in why.items():
            print(f"llm.c {v}: not built: {w}")
        return 0 if built else 3

    measured = measure_peak(a, os.path.join(out, "peak.log"))
    a.device_name = measured["device_name"] if measured else a.device
    if a.peak_tflops:
        peak, peak_source = a.peak_tflops, "--peak-tflops"
    elif a.device == "cuda":
        peak, peak_source = flops.peak_tflops(a.device_name, a.llmc_src)
        if peak is None and measured:
            peak, peak_source = measured["tflops"], f"{peak_source}: the bf16 matmul measured here"
    else:
        peak = measured["tflops"] if measured else None
        peak_source = f"fp32 matmul measured here with {a.threads} thread(s)" if measured else "none: the matmul failed"

    data = write_inputs(cfg, a, work)
    deadline = started + a.budget if a.budget else None
    per_impl_timeout = a.timeout
    labels = {"mds": "mds-train" + (f" {a.mds_args}" if a.mds_args else ""), "eager": "PyTorch eager", "compile": f"torch.compile ({a.compile_scope})"}
    rows = []
    for impl in impls:
        t0 = time.time()
        if deadline is not None:
            left = deadline - t0 - 10
            if left < 20:
                r = Result(impl=impl, label=labels.get(impl, "llm.c" if impl == "llmc" else impl), status="skipped",
                           reason=f"out of time (--budget {a.budget:g} s)")
                print(f"bench/gpu: {r['label']}: skipped: {r['reason']}", file=sys.stderr, flush=True)
                rows.append(r)
                continue
            a.timeout = min(per_impl_timeout, left)
        if impl == "mds":
            got = [run_mds(cfg, a, data, os.path.join(out, "mds.log"))]
        elif impl == "eager":
            got = [run_torch(cfg, a, "none", os.path.join(out, "eager.log"))]
        elif impl == "compile":
            got = [run_torch(cfg, a, a.compile_scope, os.path.join(out, "compile.log"))]
        else:
            got = run_llmc(cfg, a, data, out)
        for r in got:
            r.setdefault("impl", impl)
            r.setdefault("label", labels.get(impl, impl))
            if r["status"] == "ok":
                metrics(r, cfg, a, peak)
            print(f"bench/gpu: {r['label']}: {r['status']}"
                  f"{': ' + r['reason'] if r.get('reason') else ''} ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
            rows.append(r)
    text = table(rows, cfg, a, peak, peak_source, measured)
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(text)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"size": a.size, "config": cfg, "device": a.device, "device_name": a.device_name, "peak_tflops": peak,
                   "peak_source": peak_source, "measured_matmul": measured, "hyper": HYPER, "rows": rows}, f, indent=1)
    print(text, flush=True)
    counts = {k: sum(r["status"] == k for r in rows) for k in ("ok", "failed", "skipped")}
    print(f"bench/gpu: summary: {counts['ok']} ok, {counts['failed']} failed, {counts['skipped']} skipped "
          f"({', '.join(r['label'] + ': ' + r['status'] for r in rows)})", file=sys.stderr, flush=True)
    if any(r["status"] == "failed" for r in rows):
        return 1
    return 3 if any(r["status"] == "skipped" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())

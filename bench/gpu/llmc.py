"""llm.c (karpathy/llm.c) for bench/gpu: building its trainers from their unmodified source and reading their output.

GPU: train_gpt2.cu in bf16 (-DENABLE_BF16), built with nvcc for the GPU's compute capability, twice: with cuDNN's
flash attention (-DENABLE_CUDNN, llmc/cudnn_att.cpp and NVIDIA's header-only cudnn-frontend; the configuration
llm.c's README reports its speeds with) and with llm.c's own attention kernels. bench/gpu/llmc_compat.h is
force-included so that the source builds with CUDA 13 (cudaMemAdvise's new signature) and never falls back to
managed memory for large buffers. Headers and libraries (cuBLAS, cuBLASLt, cuDNN, NVRTC, NVML) are looked for in
the CUDA toolkit next to nvcc, the usual system folders, and the nvidia/* wheels beside torch, and linked by
full path when only a versioned file (libcublas.so.13) is there.
CPU: train_gpt2.c with the C compiler and OpenMP, llm.c's fp32 reference trainer (its batch 4 x 64 tokens,
40 steps, Adam settings and file names are fixed in its main())."""
import glob
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
COMPAT = os.path.join(HERE, "llmc_compat.h")
# GPT-2 shapes llm.c builds from a descriptor (train_gpt2.cu gpt2_set_hyperparameters): -e d<layers>.
DESCRIPTORS = {(12, 768, 12): "d12", (24, 1024, 16): "d24", (36, 1280, 20): "d36", (48, 1600, 25): "d48"}


class Unavailable(Exception):
    """llm.c cannot run here; the message says why (reported as 'skipped')."""


def site_packages():
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return None
    return os.path.dirname(os.path.dirname(spec.origin))


def _nvcc():
    nvcc = shutil.which("nvcc") or next((p for p in ("/usr/local/cuda/bin/nvcc",) if os.path.exists(p)), None)
    if not nvcc:
        raise Unavailable("nvcc not found (PATH, /usr/local/cuda/bin)")
    return nvcc


def _search_dirs(nvcc, kind):
    root = os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
    dirs = []
    if kind == "include":
        dirs += [os.path.join(root, "include"), os.path.join(root, "targets", "x86_64-linux", "include"),
                 "/usr/local/cuda/include", "/usr/include"]
    else:
        dirs += [os.path.join(root, s) for s in ("lib64", "lib", "targets/x86_64-linux/lib", "lib64/stubs",
                                                  "targets/x86_64-linux/lib/stubs")]
        dirs += ["/usr/local/cuda/lib64", "/usr/local/cuda/lib64/stubs", "/usr/lib/x86_64-linux-gnu",
                 "/usr/local/nvidia/lib64", "/usr/lib64"]
    site = site_packages()
    if site:
        sub = "include" if kind == "include" else "lib"
        dirs += sorted(glob.glob(os.path.join(site, "nvidia", "*", sub)))
    return [d for d in dict.fromkeys(dirs) if os.path.isdir(d)]


def _find_header(nvcc, name):
    for d in _search_dirs(nvcc, "include"):
        if os.path.exists(os.path.join(d, name)):
            return d
    return None


def _find_library(nvcc, name):
    """A path to link lib<name> with: lib<name>.so where there is one, else the newest lib<name>.so.N."""
    for d in _search_dirs(nvcc, "lib"):
        p = os.path.join(d, f"lib{name}.so")
        if os.path.exists(p):
            return p
        versioned = sorted(glob.glob(os.path.join(d, f"lib{name}.so.[0-9]*")))
        if versioned:
            return versioned[-1]
    return None


def compute_capability():
    """'90' for an H100 / H200, from nvidia-smi; '90' when it cannot say."""
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True,
                           text=True, timeout=30)
        caps = sorted(line.strip().replace(".", "") for line in r.stdout.splitlines() if line.strip())
        if r.returncode == 0 and caps and caps[0].isdigit():
            return caps[0]
    except (OSError, subprocess.TimeoutExpired):
        pass
    return "90"


def _source_hash(src, extra):
    h = hashlib.sha256(extra.encode())
    for rel in ["train_gpt2.cu", "train_gpt2.c"] + sorted(os.path.join("llmc", n) for n in os.listdir(os.path.join(src, "llmc"))):
        with open(os.path.join(src, rel), "rb") as f:
            h.update(rel.encode() + f.read())
    with open(COMPAT, "rb") as f:
        h.update(f.read())
    return h.hexdigest()[:16]


def build_gpu(src, build_dir, cudnn, log, timeout=900, build=True):
    """Builds train_gpt2.cu (build=False: only finds an up-to-date earlier build); returns (binary, extra library
    folders for LD_LIBRARY_PATH). Raises Unavailable."""
    if not src or not os.path.isfile(os.path.join(src, "train_gpt2.cu")):
        raise Unavailable(f"llm.c source not found ({src or 'none given'}; docs/gpu.md says how to fetch it)")
    nvcc = _nvcc()
    fe = os.path.join(src, "cudnn-frontend", "include")
    if cudnn and not os.path.isfile(os.path.join(fe, "cudnn_frontend.h")):
        raise Unavailable("cuDNN frontend headers not packed (llmc/cudnn-frontend/include)")
    arch = compute_capability()
    name = "train_gpt2cu_cudnn" if cudnn else "train_gpt2cu"
    os.makedirs(build_dir, exist_ok=True)
    out = os.path.join(build_dir, name)
    libs = ["cublas", "cublasLt"] + (["cudnn", "nvrtc", "cuda"] if cudnn else [])
    headers = ["cublasLt.h", "cublas_v2.h"] + (["cudnn.h"] if cudnn else [])
    includes, missing = [], []
    for h in headers:
        d = _find_header(nvcc, h)
        if d is None:
            missing.append(h)
        elif d not in includes:
            includes.append(d)
    if _find_header(nvcc, "nvml.h"):  # llmc/mfu.h then uses NVML (__has_include) and needs its library
        libs.append("nvidia-ml")
    paths = {}
    for n in libs:
        p = _find_library(nvcc, n)
        if p is None:
            missing.append(f"lib{n}.so")
        paths[n] = p
    if missing:
        raise Unavailable(f"{name}: not found: {', '.join(missing)}")
    flags = ["--threads=0", "--use_fast_math", "-std=c++17", "-O3",
             f"--generate-code=arch=compute_{arch},code=[compute_{arch},sm_{arch}]", "-DENABLE_BF16", "-include", COMPAT]
    flags += [f"-I{d}" for d in includes]
    if cudnn:
        flags += ["-DENABLE_CUDNN", f"-I{fe}"]
    stamp = _source_hash(src, " ".join(flags + sorted(p for p in paths.values())))
    lib_dirs = sorted({os.path.dirname(p) for n, p in paths.items() if n not in ("cuda", "nvidia-ml")})
    if os.path.exists(out) and os.path.exists(out + ".stamp") and open(out + ".stamp").read() == stamp:
        return out, lib_dirs
    if not build:
        raise Unavailable(f"{name} was not built beforehand (--llmc-prebuilt; see the build's log)")
    objs = []
    with open(log, "a") as lf:
        if cudnn:
            obj = os.path.join(build_dir, "cudnn_att.o")
            cmd = [nvcc, "-c", *flags, os.path.join(src, "llmc", "cudnn_att.cpp"), "-o", obj]
            lf.write("$ " + " ".join(cmd) + "\n")
            lf.flush()
            r = subprocess.run(cmd, cwd=src, stdout=lf, stderr=subprocess.STDOUT, timeout=timeout)
            if r.returncode != 0:
                raise Unavailable(f"{name}: nvcc failed on llmc/cudnn_att.cpp (exit {r.returncode}; see {os.path.basename(log)})")
            objs.append(obj)
        cmd = [nvcc, *flags, os.path.join(src, "train_gpt2.cu"), *objs, *[paths[n] for n in libs], "-o", out + ".tmp"]
        lf.write("$ " + " ".join(cmd) + "\n")
        lf.flush()
        r = subprocess.run(cmd, cwd=src, stdout=lf, stderr=subprocess.STDOUT, timeout=timeout)
    if r.returncode != 0:
        raise Unavailable(f"{name}: nvcc failed on train_gpt2.cu (exit {r.returncode}; see {os.path.basename(log)})")
    os.replace(out + ".tmp", out)
    with open(out + ".stamp", "w") as f:
        f.write(stamp)
    return out, lib_dirs


def build_cpu(src, build_dir, log, timeout=600):
    """Builds train_gpt2.c (llm.c's CPU reference trainer) with the C compiler and OpenMP."""
    if not src or not os.path.isfile(os.path.join(src, "train_gpt2.c")):
        raise Unavailable(f"llm.c source not found ({src or 'none given'}; docs/gpu.md says how to fetch it)")
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if not cc:
        raise Unavailable("no C compiler (cc, gcc) for llm.c's train_gpt2.c")
    os.makedirs(build_dir, exist_ok=True)
    out = os.path.join(build_dir, "train_gpt2")
    flags = ["-Ofast", "-Wno-unused-result", "-Wno-ignored-pragmas", "-Wno-unknown-attributes", "-march=native",
             "-fopenmp", "-DOMP"]
    stamp = _source_hash(src, " ".join([cc] + flags))
    if os.path.exists(out) and os.path.exists(out + ".stamp") and open(out + ".stamp").read() == stamp:
        return out
    cmd = [cc, *flags, os.path.join(src, "train_gpt2.c"), "-lm", "-lgomp", "-o", out + ".tmp"]
    with open(log, "a") as lf:
        lf.write("$ " + " ".join(cmd) + "\n")
        lf.flush()
        r = subprocess.run(cmd, cwd=src, stdout=lf, stderr=subprocess.STDOUT, timeout=timeout)
    if r.returncode != 0:
        raise Unavailable(f"train_gpt2.c: {os.path.basename(cc)} failed (exit {r.returncode}; see {os.path.basename(log)})")
    os.replace(out + ".tmp", out)
    with open(out + ".stamp", "w") as f:
        f.write(stamp)
    return out


STEP_GPU = re.compile(r"^step\s+(\d+)/(\d+) \| loss ([-+0-9.eEnaif]+) .*\| ([0-9.]+) ms \|")
STEP_CPU = re.compile(r"^step (\d+): train loss ([-+0-9.eEnaif]+) \(took ([0-9.]+) ms\)")
MEMORY = re.compile(r"^device memory usage: (\d+) MiB / (\d+) MiB")
PARAMS = re.compile(r"^num_parameters: (\d+)")


def parse(text):
    """(ms per step, losses, parameters or None, device memory in bytes or None) from llm.c's stdout."""
    ms, losses, params, memory = [], [], None, None
    for line in text.splitlines():
        m = STEP_GPU.match(line)
        if m:
            losses.append(float(m.group(3)))
            ms.append(float(m.group(4)))
            continue
        m = STEP_CPU.match(line)
        if m:
            losses.append(float(m.group(2)))
            ms.append(float(m.group(3)))
            continue
        m = MEMORY.match(line)
        if m:
            memory = int(m.group(1)) * 2**20
        m = PARAMS.match(line)
        if m:
            params = int(m.group(1))
    return ms, losses, params, memory

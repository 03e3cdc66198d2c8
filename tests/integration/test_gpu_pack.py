#!/usr/bin/env python3
"""The GPU pack (scripts/gpu-pack.sh, docs/gpu.md) works away from this build, as it must on the bare GPU machine:
  - it is made into a temporary folder; a "relocated torch" is made beside it holding only torch's libraries that
    the binaries load (the venv's torch/lib and nvidia/*/lib files, hard-linked or copied, in the wheel's layout);
  - under `env -i` with LD_LIBRARY_PATH = relocated torch + the pack's lib/ and nothing else, the packed
    mds-tokenizer-train and mds-preprocess make a tiny dataset and the packed mds-train trains on it on the CPU:
    iteration lines with a finite lm loss, and its memory map (read while it trains) holds no file of the build
    tree or the venv — libtorch comes from the relocated copy;
  - every file is needed: each library in lib/ is in the NEEDED closure (readelf -d) of a packed binary, none is
    torch's (or glibc's), the binaries carry no search path of this machine, the pack and the working tree fit the
    64 MiB the device tool carries, MANIFEST.md names every binary and library;
  - the pack's run.sh, in its CPU-only rehearsal (MDS_GPU_PACK_DRY=1) on the relocated torch: exit 0, the steps in
    summary.md (torch, ldd ok; gpu skipped; the gpu tests skipped for want of a device; bench/gpu at toy size with
    the packed mds-train ok, with MDS_GPU_MDS_ARGS's flags in its row), at most 8 files in $OUT, every log in logs.tar.gz; with torch's libraries missing it
    stops at the ldd step with exit 2, naming the library.
Exits 77 without mds-train (no LibTorch), without ldd / readelf, or in a sanitizer build."""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

SOURCE = os.path.abspath(os.environ.get("MDS_SOURCE_DIR", "."))
BIN = os.path.abspath(os.environ.get("MDS_BIN", "build/bin"))
BUILD = os.path.abspath(os.environ.get("MDS_BUILD_DIR", os.path.dirname(BIN)))
PYTHON = os.environ.get("MDS_PYTHON") or sys.executable
sys.path.insert(0, os.path.join(SOURCE, "tests", "integration"))
import testkit  # noqa: E402
from testkit import check  # noqa: E402

TOOLS = ["mds-train", "mds-tokenizer-train", "mds-preprocess"]
# kernels/'s GPU tests, packed where nvcc built them: they start on this GPU-less machine and skip (77).
KERNEL_TESTS = [t for t in ["cross_entropy_gpu", "adam_gpu", "layer_norm_gpu", "bias_grad_gpu"] if os.path.isfile(os.path.join(BIN, t))]
GLIBC = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1", "libutil.so.1", "libresolv.so.2",
         "ld-linux-x86-64.so.2"}
MACHINE_OWN = GLIBC | {"libstdc++.so.6", "libgcc_s.so.1"}  # what the pack expects the GPU machine to have


def foreign(paths, pack, reloc):
    """The libraries among `paths` that come neither from the pack nor the relocated torch, nor are the
    machine's own C library and C++ runtime."""
    return sorted(p for p in paths if not p.startswith((pack + "/", reloc + "/"))
                  and not os.path.basename(p).startswith(tuple(MACHINE_OWN)) and ".so" in os.path.basename(p))


def readelf_dynamic(path):
    """(NEEDED names, RPATH/RUNPATH strings) as binutils' readelf prints them."""
    out = subprocess.run(["readelf", "-d", "-W", path], capture_output=True, text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
    paths = re.findall(r"\((?:RPATH|RUNPATH)\)\s+Library r(?:un)?path: \[([^\]]*)\]", out)
    return needed, paths


def torch_closure():
    """({path relative to site-packages: real file} of the torch / nvidia libraries mds-train loads here, every
    library file name the torch and nvidia wheels of that site-packages hold)."""
    out = subprocess.run(["ldd", os.path.join(BIN, "mds-train")], capture_output=True, text=True, check=True).stdout
    libs, site = {}, None
    for m in re.finditer(r"=> (\S+/site-packages/)(\S+) \(0x", out):
        site, rel = m.group(1), os.path.normpath(m.group(2))
        libs[rel] = os.path.realpath(os.path.join(site, rel))
    names = set()
    for d in [os.path.join(site or "", "torch", "lib")] + glob.glob(os.path.join(site or "", "nvidia", "*", "lib")):
        if os.path.isdir(d):
            names.update(os.listdir(d))
    return libs, names


def relocate(libs, dest):
    for rel, real in libs.items():
        d = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(d), exist_ok=True)
        try:
            os.link(real, d)
        except OSError:
            shutil.copy2(real, d)
    dirs = [os.path.join(dest, "torch", "lib")] + sorted(glob.glob(os.path.join(dest, "nvidia", "*", "lib")))
    return ":".join(d for d in dirs if os.path.isdir(d))


def env_i(ld_path, *argv):
    return ["env", "-i", f"LD_LIBRARY_PATH={ld_path}", *argv]


def check_contents(pack, site_names):
    lib = os.path.join(pack, "lib")
    packed = sorted(os.listdir(lib))
    check(packed and all(os.path.isfile(os.path.join(lib, n)) and not os.path.islink(os.path.join(lib, n)) for n in packed),
          f"lib/ should hold plain library files: {packed}")
    torch_packed = [n for n in packed if n in site_names]
    check(not torch_packed, f"torch's libraries are packed: {torch_packed}")
    check(not GLIBC & set(packed), f"glibc is packed: {GLIBC & set(packed)}")
    reached, todo = set(), []
    for t in TOOLS + KERNEL_TESTS:
        needed, paths = readelf_dynamic(os.path.join(pack, "bin", t))
        todo += needed
        for p in paths:
            check(p == "$ORIGIN/../lib", f"bin/{t} has the search path {p!r} (expected only $ORIGIN/../lib)")
    while todo:
        n = todo.pop()
        if n in reached or n not in packed:
            continue
        reached.add(n)
        todo += readelf_dynamic(os.path.join(lib, n))[0]
    unneeded = sorted(set(packed) - reached)
    check(not unneeded, f"packed libraries no packed binary needs: {unneeded}")
    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(pack) for f in fs)
    check(total <= 64 * 2**20, f"the pack is {total / 2**20:.1f} MiB, over 64 MiB")
    manifest = open(os.path.join(pack, "MANIFEST.md")).read()
    for name in [f"bin/{t}" for t in TOOLS + KERNEL_TESTS] + [f"lib/{n}" for n in packed]:
        check(f"| {name} |" in manifest, f"MANIFEST.md does not list {name}")
    for f in ["run.sh", "bench/gpu/bench.py", "bench/gpu/torch_gpt2.py", "tests/gpu/test_train_gpu.py",
              "tests/crosscheck/tiny_dataset.py", "tests/integration/testkit.py", "data/sample/corpus.jsonl.zst"]:
        check(os.path.isfile(os.path.join(pack, f)), f"the pack lacks {f}")
    print(f"pack: {total / 2**20:.1f} MiB, {len(packed)} libraries, all in the NEEDED closure of {', '.join(TOOLS)}")


def train_relocated(pack, ld_path, reloc, tmp):
    os.makedirs(tmp, exist_ok=True)
    for t in KERNEL_TESTS:
        r = subprocess.run(env_i(ld_path, os.path.join(pack, "bin", t)), capture_output=True, text=True)
        check(r.returncode == 77 and "SKIP: no CUDA device" in r.stdout,
              f"bin/{t} without a GPU should skip (77): exit {r.returncode}, {r.stdout} {r.stderr}")
    for t in TOOLS + KERNEL_TESTS:
        r = subprocess.run(env_i(ld_path, "ldd", os.path.join(pack, "bin", t)), capture_output=True, text=True)
        resolved = re.findall(r"=> (/\S+) \(0x", r.stdout)
        check(r.returncode == 0 and "not found" not in r.stdout and resolved, f"ldd bin/{t} under env -i: {r.stdout}")
        check(not foreign(resolved, pack, reloc), f"bin/{t} resolves libraries from elsewhere: {foreign(resolved, pack, reloc)}")
    corpus = os.path.join(pack, "data", "sample", "corpus.jsonl.zst")
    tok = os.path.join(tmp, "tok")
    for argv in ([os.path.join(pack, "bin", "mds-tokenizer-train"), "--input", corpus, "--vocab-size", "1000",
                  "--output-dir", tok, "--quiet"],
                 [os.path.join(pack, "bin", "mds-preprocess"), "--input", corpus, "--output-prefix", tmp + "/data",
                  "--vocab-file", tok + "/vocab.json", "--merge-file", tok + "/merges.txt", "--append-eod",
                  "--workers", "2", "--quiet"]):
        r = subprocess.run(env_i(ld_path, *argv), capture_output=True, text=True, timeout=300)
        if not check(r.returncode == 0, f"{os.path.basename(argv[0])} under env -i exited {r.returncode}: {r.stderr[-1500:]}"):
            return
    argv = [os.path.join(pack, "bin", "mds-train"), "--data-path", tmp + "/data_text_document", "--vocab-file",
            tok + "/vocab.json", "--merge-file", tok + "/merges.txt", "--split", "90,8,2", "--num-layers", "2",
            "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "64", "--max-position-embeddings", "64",
            "--micro-batch-size", "4", "--global-batch-size", "8", "--train-iters", "40", "--lr", "3e-3",
            "--log-interval", "1", "--eval-iters", "0", "--device", "cpu", "--threads", "1"]
    p = subprocess.Popen(env_i(ld_path, *argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines, maps = [], None
    for line in p.stdout:
        lines.append(line)
        if maps is None and line.startswith(" iteration "):
            try:
                with open(f"/proc/{p.pid}/maps") as f:
                    maps = f.read()
            except OSError:
                maps = ""
    err = p.stderr.read()
    rc = p.wait(timeout=300)
    if not check(rc == 0, f"packed mds-train under env -i exited {rc}: {err[-2000:]}"):
        return
    losses = [float(m) for m in re.findall(r"\| lm loss: (\S+) \|", "".join(lines))]
    check(len(losses) == 40 and all(0 < x < 20 for x in losses), f"expected 40 finite lm losses, got {losses}")
    check(bool(maps), "mds-train ended before its memory map could be read")
    files = sorted({m.split()[-1] for m in (maps or "").splitlines() if len(m.split()) >= 6 and m.split()[-1].startswith("/")})
    venv = os.path.realpath(os.path.join(SOURCE, ".venv"))
    leaked = [f for f in files if f.startswith((BUILD + "/", venv + "/", SOURCE + "/.venv/"))]
    check(not leaked, f"mds-train mapped files of the build or the venv: {leaked}")
    check(not foreign(files, pack, reloc), f"mds-train mapped libraries from elsewhere: {foreign(files, pack, reloc)}")
    torch_cpu = [f for f in files if f.endswith("/libtorch_cpu.so")]
    check(len(torch_cpu) == 1 and torch_cpu[0].startswith(reloc + "/"), f"libtorch_cpu.so should come from the relocated torch: {torch_cpu}")
    print(f"relocated: mds-train trained 40 iterations under env -i, lm loss {losses[0]:.3f} -> {losses[-1]:.3f}; "
          f"{len(files)} mapped files, none from the build or the venv")


def rehearse(pack, torch_path, tmp):
    """run.sh with torch_path (the relocated torch alone: the pack's lib/ comes through the binaries' RPATH)."""
    out = os.path.join(tmp, "out")
    env = dict(os.environ, OUT=out, MDS_GPU_PACK_DRY="1", MDS_GPU_PYTHON=PYTHON, MDS_GPU_TORCH_LIB_DIRS=torch_path,
               MDS_GPU_PACK_IMPLS="mds,eager,llmc", MDS_GPU_BUDGET_S="400", MDS_GPU_MDS_ARGS="--cross-entropy-loss-fusion")
    t0 = time.time()
    r = subprocess.run(["bash", os.path.join(pack, "run.sh")], capture_output=True, text=True, env=env, timeout=600)
    print(f"run.sh (dry) took {time.time() - t0:.0f} s, exit {r.returncode}")
    check(r.returncode == 0, f"run.sh (dry) exited {r.returncode}: {r.stdout[-3000:]} {r.stderr[-2000:]}")
    files = sorted(os.listdir(out)) if os.path.isdir(out) else []
    check(0 < len(files) <= 8 and all(os.path.isfile(os.path.join(out, f)) for f in files),
          f"$OUT should hold at most 8 plain files: {files}")
    summary = open(os.path.join(out, "summary.md")).read() if "summary.md" in files else ""
    check(summary and summary in r.stdout, "run.sh should print summary.md at its end")
    rows = dict(re.findall(r"^\| (\S+) \| (\w+) \|", summary, re.M))
    expected = {"torch": "ok", "ldd": "ok", "gpu": "skipped", "test_train_gpu": "skipped", "test_train_gpu_parallel": "skipped"}
    for step, status in expected.items():
        check(rows.get(step) == status, f"summary.md: step {step} is {rows.get(step)!r}, expected {status!r}: {summary}")
    check(rows.get("bench-toy") in ("ok", "partial"), f"summary.md: bench-toy is {rows.get('bench-toy')!r}")
    check("no CUDA device" in summary, "summary.md should say why the gpu tests were skipped")
    res = json.load(open(os.path.join(out, "results-toy.json"))) if "results-toy.json" in files else {"rows": []}
    got = {row["impl"]: row for row in res["rows"]}
    check(got.get("mds", {}).get("status") == "ok" and got["mds"].get("tokens_per_s", 0) > 0,
          f"bench-toy: the packed mds-train did not run: {got.get('mds')}")
    # MDS_GPU_MDS_ARGS reaches mds-train's row (and only it) in the benchmark table.
    check(got.get("mds", {}).get("label") == "mds-train --cross-entropy-loss-fusion" and
          "| mds-train --cross-entropy-loss-fusion | ok |" in summary,
          f"bench-toy: MDS_GPU_MDS_ARGS should label mds-train's row: {got.get('mds', {}).get('label')!r}")
    check(got.get("eager", {}).get("status") == "ok", f"bench-toy: PyTorch eager: {got.get('eager')}")
    if os.path.isfile(os.path.join(pack, "llmc", "train_gpt2.c")):
        check(got.get("llmc", {}).get("status") == "ok", f"bench-toy: llm.c from the pack: {got.get('llmc')}")
    else:
        check(got.get("llmc", {}).get("status") == "skipped", f"bench-toy: llm.c without source: {got.get('llmc')}")
    if "logs.tar.gz" in files:
        with tarfile.open(os.path.join(out, "logs.tar.gz")) as t:
            names = t.getnames()
            ldd = t.extractfile("logs/ldd.log").read().decode() if "logs/ldd.log" in names else ""
        check("logs/test_train_gpu.log" in names and "logs/bench-toy/table.md" in names, f"logs.tar.gz: {names}")
        check(ldd.count("libtorch_cpu.so => " + torch_path.split(":")[0]) == 1 and "not found" not in ldd,
              f"ldd.log should show libtorch from the relocated torch for mds-train and nothing missing: {ldd[:1500]}")
    else:
        check(False, f"no logs.tar.gz in $OUT: {files}")
    print(summary)

    # Without torch's libraries the run stops at the ldd step, naming what is missing.
    out2 = os.path.join(tmp, "out-broken")
    empty = os.path.join(tmp, "empty")
    os.makedirs(empty, exist_ok=True)
    env.update(OUT=out2, MDS_GPU_TORCH_LIB_DIRS=empty)
    r = subprocess.run(["bash", os.path.join(pack, "run.sh")], capture_output=True, text=True, env=env, timeout=120)
    check(r.returncode == 2 and "libtorch.so => not found" in r.stderr,
          f"run.sh without torch's libraries: exit {r.returncode}, stderr {r.stderr[-800:]}")
    summary2 = open(os.path.join(out2, "summary.md")).read() if os.path.exists(os.path.join(out2, "summary.md")) else ""
    check("| ldd | failed |" in summary2 and "test_train_gpu" not in summary2, f"broken run's summary: {summary2}")


def main():
    if os.environ.get("MDS_SANITIZE"):
        testkit.skip("a sanitizer build (the pack carries release builds to the GPU machine)")
    for t in TOOLS:
        if not os.path.isfile(os.path.join(BIN, t)):
            testkit.skip(f"{t} not built in {BIN}")
    for tool in ("ldd", "readelf"):
        if not shutil.which(tool):
            testkit.skip(f"{tool} not installed")
    with tempfile.TemporaryDirectory() as tmp:
        pack = os.path.join(tmp, "pack")
        llmc = os.path.join(SOURCE, ".llmc-src")
        r = subprocess.run(["bash", os.path.join(SOURCE, "scripts", "gpu-pack.sh"), "--out", pack, "--build", BUILD,
                            "--llmc-src", llmc], capture_output=True, text=True, timeout=300)
        print(r.stdout.strip())
        if not check(r.returncode == 0, f"gpu-pack.sh exited {r.returncode}: {r.stderr[-2000:]}"):
            return testkit.finish()
        libs, site_names = torch_closure()
        check(len(libs) >= 5 and site_names, f"mds-train should load torch's libraries from a site-packages: {libs}")
        check_contents(pack, site_names)
        reloc = os.path.join(tmp, "relocated-torch")
        torch_path = relocate(libs, reloc)
        train_relocated(pack, torch_path + ":" + os.path.join(pack, "lib"), reloc, os.path.join(tmp, "train"))
        rehearse(pack, torch_path, tmp)
    return testkit.finish()


if __name__ == "__main__":
    sys.exit(main())

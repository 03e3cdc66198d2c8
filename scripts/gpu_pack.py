"""Assembles the GPU pack (scripts/gpu-pack.sh is the entry point; docs/gpu.md says what the pack is for).

The GPU machine has torch 2.11 for CUDA 13 in its system Python (torch/lib and the nvidia/* wheels: libtorch,
cuBLAS, cuDNN, NCCL, ...) but nothing of Debian's, and no network. So the pack holds:
  bin/           the mds binaries the GPU run needs, their RUNPATH (this machine's .venv) replaced by the
                 DT_RPATH $ORIGIN/../lib, so that they find lib/ wherever the pack lies and nothing of this machine;
  lib/           every shared library of their load closure that is neither torch's (found on the GPU machine
                 through LD_LIBRARY_PATH) nor glibc's (the machine's own loader and C library must be used);
  tests/, data/  the gpu-labelled tests, the helper modules they import, the corpus their tiny dataset is made of;
  bench/gpu/     the benchmark harness;
  llmc/          llm.c's source (and cuDNN's header-only frontend) when a copy was fetched into .llmc-src;
  run.sh         what the device machine runs; MANIFEST.md: every file, its size and why it is there.
The pack is built under a temporary name and renamed into place when complete."""
import argparse
import ast
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_pack_elf import Elf  # noqa: E402

# The binaries the GPU run starts: mds-train (tests and benchmark); mds-tokenizer-train and mds-preprocess make
# the tiny dataset of the gpu tests (tests/crosscheck/tiny_dataset.py).
TOOLS = ["mds-train", "mds-tokenizer-train", "mds-preprocess"]
# Packed where built (nvcc was there at configure time): kernels/'s CUDA kernels against their CPU references
# (tests/gpu/test_kernels_gpu.py). Statically linked to the CUDA runtime: they need only the driver.
OPTIONAL_TOOLS = ["cross_entropy_gpu", "adam_gpu", "layer_norm_gpu", "bias_grad_gpu"]
# glibc: never packed. A program must use the C library of the loader that starts it, and every glibc system
# has these; packing them would mix two glibc versions in one process.
GLIBC = {"ld-linux-x86-64.so.2", "libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1",
         "libutil.so.1", "libresolv.so.2", "libanl.so.1", "libnsl.so.1", "libmvec.so.1", "linux-vdso.so.1"}
# The C++ runtime: torch's own libraries need it, so a machine that runs torch has one. Not packed: Debian 12's
# copy needs glibc 2.36, so it could not help a machine whose libstdc++ is older than the binaries need (gcc 12's,
# GLIBCXX_3.4.30), which has an older glibc too (run.sh's ldd check says so).
CXX_RUNTIME = {"libstdc++.so.6", "libgcc_s.so.1"}
# Why the others are packed. Anything not named here is reported with the library that needs it.
WHY = {
    "libcurl.so.4": "mds-train's HTTP client (MLflow tracking, alert webhooks); not in a minimal image",
    "libzstd.so.1": "mds-preprocess and mds-tokenizer-train read .jsonl.zst (the gpu tests' corpus); libcurl too",
    "libz.so.1": "libcurl, libssh2, libcrypto; packed so that libcurl runs with the builds it was linked against",
}
CURL_DEPENDENCY = "libcurl's dependency closure"
CURL_NOTE = ("libcurl's dependency closure: the libraries libcurl needs as Debian 12 builds it (OpenSSL, GnuTLS, "
             "nghttp2, libssh2, Kerberos, LDAP, ...). A minimal image may lack them, and sonames and versions differ "
             "between distributions (Debian 12's libldap-2.5.so.0 is libldap.so.2 on Ubuntu 24.04), so libcurl travels "
             "with the builds it was linked against.")
LIMIT_MIB = 64  # what the device tool carries: the working tree plus the carried paths, together


def ldd(path):
    """[(soname, resolved path or None)] of a binary's whole load closure, resolved on this machine."""
    r = subprocess.run(["ldd", path], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"gpu-pack: ldd {path} failed: {r.stderr.strip()}")
    out = []
    for line in r.stdout.splitlines():
        line = line.strip()
        m = re.match(r"(\S+) => (not found|(\S+) \(0x[0-9a-f]+\))", line)
        if m:
            out.append((m.group(1), None if m.group(2) == "not found" else m.group(3)))
            continue
        m = re.match(r"(\S+) \(0x[0-9a-f]+\)", line)
        if m:
            out.append((os.path.basename(m.group(1)), m.group(1)))
    return out


def torch_site_packages(closure):
    """The site-packages whose torch/lib the binaries were linked against (from where libtorch.so resolves)."""
    for soname, path in closure:
        if soname in ("libtorch.so", "libc10.so") and path:
            lib = os.path.dirname(os.path.realpath(path))
            return os.path.dirname(os.path.dirname(lib))
    return None


def torch_sonames(site):
    """Sonames a torch wheel and its nvidia/* wheels bring, as installed in `site`."""
    names = set()
    dirs = [os.path.join(site, "torch", "lib")]
    nvidia = os.path.join(site, "nvidia")
    if os.path.isdir(nvidia):
        for d in sorted(os.listdir(nvidia)):
            dirs.append(os.path.join(nvidia, d, "lib"))
    for d in dirs:
        if os.path.isdir(d):
            names.update(n for n in os.listdir(d) if ".so" in n)
    return names


def local_imports(path, search):
    """Modules imported by a Python file (at any depth, inside functions too) that live in one of `search`."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    found = []
    for n in sorted(names):
        for d in search:
            p = os.path.join(d, n + ".py")
            if os.path.exists(p):
                found.append(p)
                break
    return found


def test_files(source):
    """tests/gpu/test_*.py and, transitively, the helpers they import from tests/integration and tests/crosscheck."""
    gpu = os.path.join(source, "tests", "gpu")
    search = [gpu, os.path.join(source, "tests", "integration"), os.path.join(source, "tests", "crosscheck")]
    todo = [os.path.join(gpu, n) for n in sorted(os.listdir(gpu)) if n.endswith(".py")]
    seen = []
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.append(p)
        todo.extend(local_imports(p, search))
    return sorted(seen)


def du(path):
    total = 0
    for root, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


def working_tree_bytes(source):
    """What the device tool sends besides the carried paths: tracked and untracked-not-ignored files."""
    r = subprocess.run(["git", "-C", source, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                       capture_output=True)
    if r.returncode != 0:
        return None
    total = 0
    for name in r.stdout.decode().split("\0"):
        p = os.path.join(source, name)
        if name and os.path.isfile(p) and not os.path.islink(p):
            total += os.path.getsize(p)
    return total


def glibc_needs(paths):
    """The newest GLIBC_ and GLIBCXX_ symbol versions the packed objects ask for (readelf -V)."""
    best = {}
    for p in paths:
        r = subprocess.run(["readelf", "-V", "-W", p], capture_output=True, text=True)
        for m in re.finditer(r"Name: (GLIBC|GLIBCXX)_([0-9.]+)", r.stdout):
            v = tuple(int(x) for x in m.group(2).split("."))
            if v > best.get(m.group(1), ()):
                best[m.group(1)] = v
    return {k: ".".join(map(str, v)) for k, v in best.items()}


def copy_tree_files(src_root, rel_paths, dst_root, manifest, why):
    for rel in rel_paths:
        s, d = os.path.join(src_root, rel), os.path.join(dst_root, rel)
        os.makedirs(os.path.dirname(d), exist_ok=True)
        shutil.copy2(s, d)
        manifest.append((rel, os.path.getsize(d), why))


def main():
    ap = argparse.ArgumentParser(description="Assemble the GPU pack (docs/gpu.md).")
    ap.add_argument("--source", required=True, help="the repository root")
    ap.add_argument("--build", required=True, help="the build folder whose bin/ holds the binaries")
    ap.add_argument("--out", required=True, help="the pack folder to (re)create")
    ap.add_argument("--llmc-src", help="a copy of llm.c's source (train_gpt2.cu, llmc/); skipped when absent")
    ap.add_argument("--limit-mib", type=float, default=LIMIT_MIB,
                    help="fail when the pack plus the working tree exceed this [default: 64]")
    a = ap.parse_args()
    source, out = os.path.abspath(a.source), os.path.abspath(a.out)
    bins = []
    for t in TOOLS:
        p = os.path.join(a.build, "bin", t)
        if not os.path.isfile(p):
            raise SystemExit(f"gpu-pack: {p} is not built (mds-train needs LibTorch: scripts/setup.sh)")
        bins.append(p)
    bins += [p for p in (os.path.join(a.build, "bin", t) for t in OPTIONAL_TOOLS) if os.path.isfile(p)]

    # The load closure of every binary, each library classified.
    closure, parents = {}, {}
    site = None
    for b in bins:
        libs = ldd(b)
        site = site or torch_site_packages(libs)
        for soname, path in libs:
            if path is None:
                raise SystemExit(f"gpu-pack: {b} needs {soname}, which does not resolve on this machine")
            closure.setdefault(soname, path)
    if site is None:
        raise SystemExit("gpu-pack: mds-train does not link libtorch (a build without LibTorch?)")
    torch_names = torch_sonames(site)
    for soname, path in closure.items():
        if soname in GLIBC or soname in torch_names:
            continue
        for n in Elf(os.path.realpath(path)).needed:
            parents.setdefault(n, []).append(soname)
    for b in bins:
        for n in Elf(b).needed:
            parents.setdefault(n, []).append(os.path.basename(b))

    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, "bin"))
    os.makedirs(os.path.join(tmp, "lib"))
    manifest, not_packed = [], []

    for b in bins:
        e = Elf(b)
        d = os.path.join(tmp, "bin", os.path.basename(b))
        if e.search_path:
            e.set_rpath("$ORIGIN/../lib")
            why = "mds binary (the RUNPATH of this machine's build replaced by the RPATH $ORIGIN/../lib)"
        else:
            # No search path to rewrite (no LibTorch), and none can be added in place: its few libraries
            # (libzstd.so.1: dpkg needs it, so every Debian / Ubuntu system has it) come from the machine, or
            # from lib/ through LD_LIBRARY_PATH where the machine lacks one (run.sh checks with ldd).
            why = "mds binary (no RUNPATH: its libraries from the machine, lib/ where missing there)"
        e.write(d)
        os.chmod(d, 0o755)
        manifest.append((f"bin/{os.path.basename(b)}", os.path.getsize(d), why))

    for soname in sorted(closure):
        path = closure[soname]
        if soname in GLIBC:
            not_packed.append((soname, "glibc: the machine's own"))
            continue
        if soname in torch_names:
            not_packed.append((soname, "torch's wheel: found through LD_LIBRARY_PATH on the GPU machine"))
            continue
        if soname in CXX_RUNTIME:
            not_packed.append((soname, "the C++ runtime: the machine's own (torch needs it too)"))
            continue
        needed_by = ", ".join(sorted(set(parents.get(soname, []))))
        rel = f"lib/{soname}"
        why = f"{WHY.get(soname, CURL_DEPENDENCY)} (needed by {needed_by})"
        shutil.copy2(os.path.realpath(path), os.path.join(tmp, rel))
        manifest.append((rel, os.path.getsize(os.path.join(tmp, rel)), why))

    # The gpu tests with their helpers, and the corpus tiny_dataset.py tokenizes.
    tests = [os.path.relpath(p, source) for p in test_files(source)]
    copy_tree_files(source, tests, tmp, manifest, "gpu test or a helper it imports")
    corpus = ["data/sample/corpus.jsonl.zst", "data/sample/LICENSE-PSF", "data/sample/README.md"]
    copy_tree_files(source, corpus, tmp, manifest, "the corpus of the gpu tests' tiny dataset (tests/crosscheck/tiny_dataset.py)")
    bench = sorted(os.path.join("bench", "gpu", n) for n in os.listdir(os.path.join(source, "bench", "gpu"))
                   if n.endswith((".py", ".h", ".md", ".sh")))
    copy_tree_files(source, bench, tmp, manifest, "benchmark harness (bench/gpu/README.md)")
    run_sh = os.path.join(tmp, "run.sh")
    shutil.copy2(os.path.join(source, "scripts", "gpu-pack-run.sh"), run_sh)
    os.chmod(run_sh, 0o755)
    manifest.append(("run.sh", os.path.getsize(run_sh), "what the device machine runs (scripts/gpu-pack-run.sh)"))

    llmc_note = "not packed: no llm.c source (docs/gpu.md: fetch it into .llmc-src)"
    if a.llmc_src and os.path.isfile(os.path.join(a.llmc_src, "train_gpt2.cu")):
        src = os.path.abspath(a.llmc_src)
        rels = ["train_gpt2.cu", "train_gpt2.c", "LICENSE"] + [n for n in ("COMMIT",) if os.path.exists(os.path.join(src, n))]
        rels += sorted(os.path.join("llmc", n) for n in os.listdir(os.path.join(src, "llmc")))
        fe = os.path.join(src, "cudnn-frontend")
        if os.path.isdir(os.path.join(fe, "include")):
            for root, _, files in os.walk(os.path.join(fe, "include")):
                rels += [os.path.relpath(os.path.join(root, f), src) for f in files]
            rels += [os.path.relpath(os.path.join(fe, n), src) for n in ("LICENSE.txt", "COMMIT")
                     if os.path.exists(os.path.join(fe, n))]
        for rel in rels:
            d = os.path.join(tmp, "llmc", rel)
            os.makedirs(os.path.dirname(d), exist_ok=True)
            shutil.copy2(os.path.join(src, rel), d)
        size = du(os.path.join(tmp, "llmc"))
        commit = open(os.path.join(src, "COMMIT")).read().strip() if os.path.exists(os.path.join(src, "COMMIT")) else "?"
        llmc_note = f"llm.c at {commit[:12]} (train_gpt2.cu, train_gpt2.c, llmc/; cuDNN frontend headers: " \
                    f"{'yes' if os.path.isdir(os.path.join(fe, 'include')) else 'no'}), built on the GPU machine by bench/gpu"
        manifest.append(("llmc/", size, llmc_note))

    total = du(tmp)
    tree = working_tree_bytes(source)
    needs = glibc_needs([os.path.join(tmp, r) for r, _, _ in manifest if r.startswith(("bin/", "lib/"))])
    lines = ["# GPU pack manifest", "",
             f"Made by scripts/gpu-pack.sh from {source} (build {os.path.abspath(a.build)}); torch libraries of "
             f"{site} left out.", "",
             f"Total: {total / 2**20:.1f} MiB; working tree that travels with it: "
             f"{'unknown' if tree is None else f'{tree / 2**20:.1f} MiB'} (the device tool carries {LIMIT_MIB} MiB in all).",
             f"Newest symbol versions asked for: GLIBC_{needs.get('GLIBC', '?')}, GLIBCXX_{needs.get('GLIBCXX', '?')}: "
             "the machine's glibc and libstdc++ must provide them (run.sh checks with ldd).", "", CURL_NOTE, "",
             "| path | bytes | why |", "| --- | ---: | --- |"]
    lines += [f"| {r} | {s} | {w} |" for r, s, w in manifest]
    lines += ["", "Not packed (resolved on the GPU machine):", ""] + [f"- {n}: {w}" for n, w in not_packed]
    with open(os.path.join(tmp, "MANIFEST.md"), "w") as f:
        f.write("\n".join(lines) + "\n")

    limit = a.limit_mib * 2**20
    if total + (tree or 0) > limit:
        shutil.rmtree(tmp, ignore_errors=True)
        raise SystemExit(f"gpu-pack: the pack ({total / 2**20:.1f} MiB) and the working tree ({(tree or 0) / 2**20:.1f} MiB) "
                         f"exceed the {a.limit_mib:g} MiB the device tool carries")
    old = out + ".old"
    shutil.rmtree(old, ignore_errors=True)
    if os.path.exists(out):
        os.rename(out, old)
    os.rename(tmp, out)
    shutil.rmtree(old, ignore_errors=True)
    print(f"gpu-pack: {out}: {total / 2**20:.1f} MiB ({len([m for m in manifest if m[0].startswith('lib/')])} libraries, "
          f"{len(bins)} binaries); working tree {'?' if tree is None else f'{tree / 2**20:.1f}'} MiB; {llmc_note}")


if __name__ == "__main__":
    main()

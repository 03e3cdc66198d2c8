#!/usr/bin/env bash
# Packs what a bare GPU machine (torch 2.11 for CUDA 13 in its system Python, nvcc, no Debian packages beyond
# its image, no network) needs to run mds's GPU tests and bench/gpu without building anything there, into one
# git-ignored folder that the device tool carries (docs/gpu.md):
#   scripts/gpu-pack.sh [--out DIR] [--build DIR] [--llmc-src DIR] [--llmc-from GITDIR [--cudnn-frontend-from GITDIR]]
#     --out        the pack folder [default: .gpu-pack]
#     --build      the build whose bin/ has mds-train, mds-tokenizer-train, mds-preprocess [default: $MDS_BUILD_DIR or build]
#     --llmc-src   a copy of karpathy/llm.c's source to pack for bench/gpu [default: .llmc-src when present]
#     --llmc-from  first export HEAD of that git folder (the fetch tool's mirror of github:karpathy/llm.c) into
#                  .llmc-src; --cudnn-frontend-from likewise NVIDIA/cudnn-frontend's include/ into .llmc-src/cudnn-frontend
# What goes in and why (scripts/gpu_pack.py does the work; MANIFEST.md in the pack lists every file):
#   - the binaries, with their RUNPATH (this machine's .venv) replaced by the RPATH $ORIGIN/../lib;
#   - lib/: their load closure minus torch's libraries (libtorch*, libc10*, CUDA, cuDNN, NCCL, NVSHMEM, libgomp:
#     the GPU machine has them in torch/lib and nvidia/*/lib), minus glibc (the machine's loader must be used)
#     and the C++ runtime (torch needs it too). That leaves libcurl (mds-train's HTTP client) with its Debian 12
#     dependency closure (OpenSSL, nghttp2, libssh2, Kerberos, LDAP, ...: sonames differ between distributions)
#     and libzstd (.jsonl.zst input). Gloo needs nothing: its code is inside libtorch_cpu.so. The binaries need
#     glibc 2.34 and GLIBCXX_3.4.30 (gcc 12's libstdc++) on the machine (MANIFEST.md has the numbers).
#   - the gpu tests and their helpers, the corpus of their tiny dataset, bench/gpu, llm.c's source, run.sh.
# Fails when the pack and the working tree together exceed the 64 MiB the device tool carries.
set -euo pipefail
cd "$(dirname "$0")/.."
out=.gpu-pack build=${MDS_BUILD_DIR:-build} llmc=.llmc-src llmc_from= fe_from=
while [[ $# -gt 0 ]]; do
  case $1 in
    --out) out=$2; shift 2;;
    --build) build=$2; shift 2;;
    --llmc-src) llmc=$2; shift 2;;
    --llmc-from) llmc_from=$2; shift 2;;
    --cudnn-frontend-from) fe_from=$2; shift 2;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0;;
    *) echo "gpu-pack: unknown argument $1 (--help)" >&2; exit 2;;
  esac
done
if [[ -n $llmc_from ]]; then
  rm -rf .llmc-src.tmp && mkdir -p .llmc-src.tmp
  git -C "$llmc_from" archive HEAD | tar -x -C .llmc-src.tmp
  git -C "$llmc_from" rev-parse HEAD > .llmc-src.tmp/COMMIT
  if [[ -n $fe_from ]]; then
    mkdir -p .llmc-src.tmp/cudnn-frontend
    git -C "$fe_from" archive HEAD include LICENSE.txt | tar -x -C .llmc-src.tmp/cudnn-frontend
    git -C "$fe_from" rev-parse HEAD > .llmc-src.tmp/cudnn-frontend/COMMIT
  fi
  rm -rf .llmc-src && mv .llmc-src.tmp .llmc-src && llmc=.llmc-src
fi
py=python3; [[ -x .venv/bin/python ]] && py=.venv/bin/python
exec "$py" scripts/gpu_pack.py --source . --build "$build" --out "$out" --llmc-src "$llmc"

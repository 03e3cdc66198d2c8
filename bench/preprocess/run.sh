#!/usr/bin/env bash
# bench/preprocess: mds-preprocess vs tiktoken vs HF tokenizers (GPT-2 BPE), 1 and 2 threads, on the
# bundled corpus and on the multi-script cross-check corpus. Needs ../shared/data/gpt2 (or
# $MDS_GPT2_DIR) and a built tree (scripts/setup.sh). Prints markdown tables for bench/RESULTS.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${MDS_BUILD_DIR:-build}
gpt2=${MDS_GPT2_DIR:-../shared/data/gpt2}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
.venv/bin/python -c "import sys; sys.path.insert(0, 'tests/crosscheck'); import corpus; corpus.write_jsonl(corpus.generate(seed=7, target_bytes=8_000_000, long_words=0, dense=0), '$work/multiscript.jsonl')"
zstd -dc data/sample/corpus.jsonl.zst > "$work/sample.jsonl"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(date -u +%F)"
.venv/bin/python bench/preprocess/bench_preprocess.py --bin "$build/bin" --gpt2 "$gpt2" "$work/sample.jsonl" "$work/multiscript.jsonl" "$@"

#!/usr/bin/env python3
"""bench/preprocess: GPT-2 tokenization throughput of mds-preprocess against tiktoken and Hugging Face
tokenizers on the same corpus, in the same run, on this machine.

Each reference encodes the already-decoded texts (JSON parsing and output writing excluded), while
mds is timed end to end inside mds-preprocess (reading, JSON parsing, tokenizing, writing .bin/.idx;
tokenizer loading excluded). Ids are validated against tiktoken before anything is timed.
MB/s counts the UTF-8 bytes of the texts. Each figure is the best of --repeat runs.

usage: bench_preprocess.py --bin BUILD/bin --gpt2 DIR CORPUS.jsonl[.zst]... [--repeat 3]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def read_texts(path):
    if path.endswith(".zst"):
        data = subprocess.run(["zstd", "-dc", path], check=True, capture_output=True).stdout.decode("utf-8")
    else:
        data = open(path, encoding="utf-8").read()
    # split on "\n" only: texts may hold U+2028 or U+0085 raw, which str.splitlines() would cut at
    return [json.loads(line)["text"] for line in data.split("\n") if line.strip()]


# The reference measurements run in child processes so that each gets its own thread settings
# (Rayon reads RAYON_NUM_THREADS once, at first use).
CHILD = r'''
import json, sys, time
mode, threads, gpt2, corpus, repeat = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
texts = json.load(open(corpus))
best = 1e9
if mode == "tiktoken":
    import tiktoken
    enc = json.load(open(gpt2 + "/encoder.json"))
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs[:]; n = 0
    for b in range(256):
        if b not in bs: bs.append(b); cs.append(256 + n); n += 1
    dec = {chr(c): b for b, c in zip(bs, cs)}
    ranks = {bytes(dec[ch] for ch in tok): i for tok, i in enc.items() if tok != "<|endoftext|>"}
    e = tiktoken.Encoding(name="gpt2-local", pat_str=PATTERN, mergeable_ranks=ranks, special_tokens={})
    for _ in range(repeat):
        t = time.perf_counter()
        if threads == 1:
            ids = [e.encode_ordinary(x) for x in texts]
        else:
            ids = e.encode_ordinary_batch(texts, num_threads=threads)
        best = min(best, time.perf_counter() - t)
else:
    from tokenizers import Tokenizer, models, pre_tokenizers
    tok = Tokenizer(models.BPE.from_file(gpt2 + "/encoder.json", gpt2 + "/vocab.bpe"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    for _ in range(repeat):
        t = time.perf_counter()
        ids = [x.ids for x in tok.encode_batch(texts, add_special_tokens=False)]
        best = min(best, time.perf_counter() - t)
print(json.dumps({"seconds": best, "tokens": sum(map(len, ids)), "first": ids[0][:20]}))
'''.replace("PATTERN", repr(GPT2_PATTERN))


def run_reference(mode, threads, gpt2, texts_json, repeat):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="true")
    out = subprocess.run([sys.executable, "-c", CHILD, mode, str(threads), gpt2, texts_json, str(repeat)],
                         check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out)


def run_mds(binary, gpt2, corpus, workers, repeat, outdir):
    best = None
    for _ in range(repeat):
        prefix = os.path.join(outdir, "mds-w%d" % workers)
        t = time.perf_counter()
        out = subprocess.run([binary, "--input", corpus, "--output-prefix", prefix, "--vocab-file",
                              gpt2 + "/encoder.json", "--merge-file", gpt2 + "/vocab.bpe", "--workers",
                              str(workers), "--json", "--quiet"], check=True, capture_output=True, text=True).stdout
        wall = time.perf_counter() - t
        s = json.loads(out)
        if best is None or s["seconds"] < best["seconds"]:
            best = dict(s, wall=wall, prefix=prefix + "_text_document")
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpora", nargs="+")
    ap.add_argument("--bin", required=True)
    ap.add_argument("--gpt2", required=True)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json-out")
    args = ap.parse_args()
    mds = os.path.join(args.bin, "mds-preprocess")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for corpus in args.corpora:
            texts = read_texts(corpus)
            nbytes = sum(len(t.encode("utf-8")) for t in texts)
            texts_json = os.path.join(tmp, "texts.json")
            json.dump(texts, open(texts_json, "w"))
            rows = []
            # Validate first: mds ids == tiktoken ids, document by document.
            ref = run_reference("tiktoken", 1, args.gpt2, texts_json, 1)
            m1 = run_mds(mds, args.gpt2, corpus, 1, 1, tmp)
            bin_ = np.fromfile(m1["prefix"] + ".bin", dtype=np.uint16)
            if int(bin_.size) != ref["tokens"] or list(bin_[:20]) != ref["first"][:20]:
                sys.exit("validation failed on %s: mds %d tokens, tiktoken %d" % (corpus, bin_.size, ref["tokens"]))
            for name, fn in [("tiktoken", lambda th: run_reference("tiktoken", th, args.gpt2, texts_json, args.repeat)),
                             ("hf-tokenizers", lambda th: run_reference("hf", th, args.gpt2, texts_json, args.repeat)),
                             ("mds-preprocess", lambda th: run_mds(mds, args.gpt2, corpus, th, args.repeat, tmp))]:
                for threads in (1, 2):
                    r = fn(threads)
                    rows.append({"impl": name, "threads": threads, "seconds": r["seconds"],
                                 "mb_s": nbytes / r["seconds"] / 1e6})
            base = {(r["impl"], r["threads"]): r for r in rows}
            print("\ncorpus %s: %d documents, %.1f MB of text" % (os.path.basename(corpus), len(texts), nbytes / 1e6))
            print("| implementation | threads | seconds | MB/s | vs tiktoken (same threads) | vs own 1 thread |")
            print("| --- | ---: | ---: | ---: | ---: | ---: |")
            for r in rows:
                vs_tt = r["mb_s"] / base[("tiktoken", r["threads"])]["mb_s"]
                vs_1 = r["mb_s"] / base[(r["impl"], 1)]["mb_s"]
                print("| %s | %d | %.3f | %.1f | %.2fx | %.2fx |" % (r["impl"], r["threads"], r["seconds"], r["mb_s"], vs_tt, vs_1))
            results.append({"corpus": corpus, "documents": len(texts), "bytes": nbytes, "rows": rows})
    if args.json_out:
        json.dump(results, open(args.json_out, "w"), indent=1)


if __name__ == "__main__":
    main()

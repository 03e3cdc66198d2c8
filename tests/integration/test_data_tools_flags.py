#!/usr/bin/env python3
"""The numeric and repeated flags of the data tools (mds-preprocess, mds-sample-index, mds-tokenizer-train),
and mds-sample-index's --split:
  - every numeric flag refuses nan, inf and a negative number with exit 2 and a message naming the flag, before
    any output is written;
  - a flag given twice keeps the last value, as argparse (and so Megatron's command lines) does, for each tool;
  - --split refuses negative ("100,-50,50": Megatron accepts it and its test documents overlap train),
    non-finite and all-zero proportions with exit 2 naming --split; an accepted split is used;
  - --output-prefix under a file or in a missing folder is an error naming the flag, not an internal error.
A small tokenizer and dataset are made by the tools themselves."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testkit import binary, check, finish  # noqa: E402

PRE = binary("mds-preprocess")
IDX = binary("mds-sample-index")
TOK = binary("mds-tokenizer-train")


def run(*args):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True)


def refused(r, flag, what):
    ok = r.returncode == 2 and flag in r.stderr and "internal error" not in r.stderr
    return check(ok, f"{what}: expected exit 2 naming {flag}, got {r.returncode}: {r.stderr[-300:]}")


def make_data(tmp):
    docs = tmp + "/docs.jsonl"
    with open(docs, "w") as f:
        for i in range(300):
            f.write(json.dumps({"text": f"document {i} says hello to the small world of tests, again and again. " * 3}) + "\n")
    r = run(TOK, "--input", docs, "--vocab-size", "400", "--output-dir", tmp + "/tok", "--quiet")
    check(r.returncode == 0, f"tokenizer-train: {r.stderr[-300:]}")
    r = run(PRE, "--input", docs, "--output-prefix", tmp + "/ds", "--vocab-file", tmp + "/tok/vocab.json",
            "--merge-file", tmp + "/tok/merges.txt", "--append-eod", "--quiet")
    check(r.returncode == 0, f"preprocess: {r.stderr[-300:]}")
    return docs, tmp + "/ds_text_document"


def numeric_flags(tmp, docs, prefix):
    tok_files = ["--vocab-file", tmp + "/tok/vocab.json", "--merge-file", tmp + "/tok/merges.txt"]
    pre = [PRE, "--input", docs, "--output-prefix", tmp + "/bad", *tok_files, "--quiet"]
    idx = [IDX, "--data-path", prefix, "--seq-length", "16", "--global-batch-size", "4", "--train-samples", "64",
           "--quiet", "--split", "90,5,5"]
    tok = [TOK, "--input", docs, "--vocab-size", "300", "--output-dir", tmp + "/badtok", "--quiet"]
    cases = [(pre, f) for f in ["--workers", "--make-vocab-size-divisible-by", "--max-document-bytes",
                                "--progress-interval"]]
    cases += [(idx, f) for f in ["--seq-length", "--seed", "--last-epoch-cutoff", "--train-samples", "--train-iters",
                                 "--global-batch-size", "--eval-interval", "--eval-iters", "--print-sample"]]
    cases += [(tok, f) for f in ["--vocab-size", "--min-frequency", "--workers", "--max-document-bytes",
                                 "--progress-interval"]]
    n = 0
    for base, flag in cases:
        for value in ["nan", "inf", "-1"]:
            r = run(*base, flag, value)
            refused(r, flag, f"{os.path.basename(base[0])} {flag} {value}")
            n += 1
    r = run(*idx, "--rampup-batch-size", "1", "nan", "64")
    refused(r, "--rampup-batch-size", "mds-sample-index --rampup-batch-size 1 nan 64")
    check(not os.path.exists(tmp + "/bad_text_document.bin") and not os.path.exists(tmp + "/badtok"),
          "a refused flag left an output behind")
    print(f"numeric flags: {n + 1} nan/inf/negative values refused")


def repeated_flags(tmp, docs, prefix):
    # mds-sample-index: the last --seq-length and --seed name the index files.
    r = run(IDX, "--data-path", prefix, "--seq-length", "8", "--seq-length", "32", "--seed", "1", "--seed", "7",
            "--global-batch-size", "4", "--train-samples", "64", "--split", "90,5,5", "--json")
    files = json.loads(r.stdout)["datasets"][0]["splits"]["train"]["files"]["doc_idx"] if r.returncode == 0 else ""
    check(r.returncode == 0 and "_32sl_7s_" in files, f"sample-index repeated flags: {r.returncode} {files} {r.stderr[-300:]}")
    # mds-preprocess: the last --json-keys / --output-prefix are used.
    r = run(PRE, "--input", docs, "--output-prefix", tmp + "/first", "--output-prefix", tmp + "/last",
            "--vocab-file", tmp + "/tok/vocab.json", "--merge-file", tmp + "/tok/merges.txt", "--workers", "3",
            "--workers", "1", "--json", "--quiet")
    out = json.loads(r.stdout) if r.returncode == 0 else {}
    check(r.returncode == 0 and os.path.exists(tmp + "/last_text_document.idx")
          and not os.path.exists(tmp + "/first_text_document.idx") and out["lines"] == 300,
          f"preprocess repeated flags: {r.returncode} {r.stderr[-300:]}")
    # mds-tokenizer-train: the last --vocab-size sizes the vocabulary.
    r = run(TOK, "--input", docs, "--vocab-size", "5000", "--vocab-size", "300", "--output-dir", tmp + "/tok2",
            "--min-frequency", "1", "--json", "--quiet")
    size = json.loads(r.stdout)["vocab_size"] if r.returncode == 0 else None
    check(r.returncode == 0 and size == 300, f"tokenizer-train repeated --vocab-size: {r.returncode} size {size} {r.stderr[-300:]}")
    print("repeated flags: the last value is used by each tool")


def splits(tmp, prefix):
    base = [IDX, "--data-path", prefix, "--seq-length", "16", "--global-batch-size", "4", "--train-samples", "64",
            "--quiet"]
    before = set(os.listdir(tmp))
    for bad, needle in [("100,-50,50", "valid proportion is negative"), ("-1,1,1", "train proportion is negative"),
                        ("nan,1,1", "not a finite number"), ("1,inf,0", "not a finite number"),
                        ("0,0,0", "add up to more than 0"), ("1e400,1,1", "not a finite number")]:
        r = run(*base, "--split", bad)
        refused(r, "--split", f"--split {bad}")
        check(needle in r.stderr, f"--split {bad}: stderr lacks '{needle}': {r.stderr[-300:]}")
    check(set(os.listdir(tmp)) == before, "a refused --split wrote index files")
    r = run(*base[:-1], "--split", "80/20", "--json")
    bounds = json.loads(r.stdout)["datasets"][0]["split"] if r.returncode == 0 else None
    check(bounds == [0, 240, 300, 300], f"--split 80/20: {bounds} {r.stderr[-300:]}")
    print("--split: negative, non-finite and all-zero proportions refused; 80/20 used")


def output_prefix(tmp, docs):
    tok_files = ["--vocab-file", tmp + "/tok/vocab.json", "--merge-file", tmp + "/tok/merges.txt"]
    open(tmp + "/afile", "w").close()
    for prefix, needle in [(tmp + "/afile/out", "is not a folder"), (tmp + "/missing/out", "No such file or directory")]:
        r = run(PRE, "--input", docs, "--output-prefix", prefix, *tok_files)
        check(r.returncode == 1 and "--output-prefix" in r.stderr and needle in r.stderr and "internal error" not in r.stderr,
              f"--output-prefix {prefix}: {r.returncode} {r.stderr[-300:]}")
    r = run(PRE, "--datasets", tmp + "/ds_text_document", "--output-prefix", tmp + "/afile/merged")
    check(r.returncode == 1 and "--output-prefix" in r.stderr, f"merge into a file's folder: {r.returncode} {r.stderr[-300:]}")
    check(not os.path.exists(tmp + "/missing"), "--output-prefix created a folder")
    print("--output-prefix: a file or a missing folder is an error naming the flag")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        docs, prefix = make_data(tmp)
        numeric_flags(tmp, docs, prefix)
        repeated_flags(tmp, docs, prefix)
        splits(tmp, prefix)
        output_prefix(tmp, docs)
    finish()


if __name__ == "__main__":
    main()

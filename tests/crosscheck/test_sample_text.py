#!/usr/bin/env python3
"""mds-sample-text (which text trained iteration N) against what mds-train fed and against BigScience's own tool:
  (a) a blended (2 datasets, the small one read for several epochs), ramped-up (--rampup-batch-size 4 4 16),
      data-parallel (2 processes on loopback) mds-train run with --skip-train-iteration-range, stopped at iteration 5
      (--exit-interval) and resumed to the end; with MDS_DUMP_BATCHES set, the token ids and sample ids each rank
      read for each (iteration, micro batch) are exactly what `mds-sample-text --format jsonl --tokens` prints for
      them, for the first launch (`--` form) and the resumed one (`--resume-iteration 5`, and the run ledger form
      when mds-train wrote {--save}/runs.jsonl);
  (b) BigScience's tools/sample_idxs_to_text.py --print-tokens --print-text --sample-id-range A B (the real script
      through bmd_harness, on its own copy of the data) gives the same token ids and text as
      `mds-sample-text --consumed-samples A-B` for the blended dataset;
  (c) every sample's pieces (document, token begin, token end), read from the .bin/.idx with numpy, concatenate to its
      tokens;
  plus the errors: an iteration beyond the training (exit 2), an iteration no ledger line trained (exit 1, naming the
  file).
Exits 77 without the mds binaries (mds-train needs LibTorch), GPT-2's vocabulary, or (for b) the reference tree."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bmd_harness  # noqa: E402
import corpus  # noqa: E402
from bmd_harness import check  # noqa: E402

SOURCE = os.path.abspath(os.environ.get("MDS_SOURCE_DIR", os.path.join(HERE, "..", "..")))
BIN = os.environ.get("MDS_BIN", os.path.join(SOURCE, "build", "bin"))
GPT2 = os.path.abspath(os.path.join(SOURCE, "..", "shared", "data", "gpt2"))
SEQ = 32
TRAIN_SAMPLES = 64  # ramp 4, 4, 4, 4 (16 samples), then 8 per iteration: 10 iterations


def skip(why):
    print("SKIP:", why)
    sys.exit(77)


WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa quebec "
         "romeo sierra tango uniform victor whiskey xray yankee zulu river mountain forest ocean desert valley").split()


def write_docs(path, n, words, seed):
    """n documents of `words` pseudo-random words (a linear congruential generator: the same every run)."""
    x = seed
    with open(path, "w") as f:
        for d in range(n):
            out = []
            for _ in range(words):
                x = (x * 1103515245 + 12345) % 2 ** 31
                out.append(WORDS[x % len(WORDS)])
            f.write(json.dumps({"text": f"Document {d}: " + " ".join(out) + "."}) + "\n")


def preprocess(tmp, name, n, words, seed):
    src = os.path.join(tmp, name + ".jsonl")
    write_docs(src, n, words, seed)
    prefix = os.path.join(tmp, name)
    subprocess.run([os.path.join(BIN, "mds-preprocess"), "--input", src, "--output-prefix", prefix,
                    "--vocab-file", GPT2 + "/encoder.json", "--merge-file", GPT2 + "/vocab.bpe", "--append-eod",
                    "--workers", "1", "--quiet"], check=True)
    return prefix + "_text_document"


def train_flags(a, b, ckpt, extra=()):
    return [str(x) for x in [
        "--num-layers", 2, "--hidden-size", 64, "--num-attention-heads", 4, "--seq-length", SEQ,
        "--max-position-embeddings", SEQ, "--micro-batch-size", 2, "--global-batch-size", 8,
        "--rampup-batch-size", 4, 4, 16, "--train-samples", TRAIN_SAMPLES,
        "--lr", "1e-3", "--min-lr", "1e-4", "--lr-decay-style", "cosine", "--lr-warmup-samples", 8,
        "--seed", 42, "--data-path", "0.6", a, "0.4", b, "--split", "100,0,0", "--data-impl", "mmap",
        "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", GPT2 + "/encoder.json",
        "--merge-file", GPT2 + "/vocab.bpe", "--log-interval", 1, "--eval-interval", 1000, "--eval-iters", 0,
        "--save", ckpt, "--load", ckpt, "--save-interval", 5, "--distributed-backend", "gloo",
        "--device", "cpu"] + list(extra)]


def sample_text(args, cwd=None, expect=0):
    proc = subprocess.run([os.path.join(BIN, "mds-sample-text")] + [str(a) for a in args], capture_output=True,
                          text=True, cwd=cwd)
    if proc.returncode != expect:
        check(False, f"mds-sample-text {' '.join(map(str, args[:8]))} ...: exit {proc.returncode}, expected {expect}\n"
                     f"{proc.stderr[-3000:]}")
    return proc


def jsonl(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def by_micro_batch(records):
    """(iteration, micro_batch, dp_rank) -> (sample ids, tokens) from mds-sample-text's records."""
    out = {}
    for r in records:
        key = (r["iteration"], r["micro_batch"], r["dp_rank"])
        ids, toks = out.setdefault(key, ([], []))
        assert r["index"] == len(ids), r
        ids.append(r["sample"])
        toks.append(r["tokens"])
    return out


def read_dump(path, ranks):
    out = {}
    for rank in range(ranks):
        with open(f"{path}.rank{rank}") as f:
            for line in f:
                r = json.loads(line)
                key = (r["iteration"], r["micro_batch"], r["dp_rank"])
                check(key not in out, f"the batch dump has {key} twice")
                out[key] = (r["samples"], r["tokens"])
    return out


def compare(what, mapped, fed):
    check(sorted(mapped) == sorted(fed), f"{what}: mds-sample-text lists micro batches {sorted(mapped)[:6]}..., "
                                         f"mds-train fed {sorted(fed)[:6]}... ({len(mapped)} vs {len(fed)})")
    bad = [k for k in fed if k in mapped and mapped[k] != fed[k]]
    check(not bad, f"{what}: {len(bad)} micro batches differ, first {bad[:1]}: mds-sample-text "
                   f"{mapped[bad[0]][0] if bad else ''}, fed {fed[bad[0]][0] if bad else ''}")
    print(f"{what}: {len(fed)} micro batches (iteration, micro batch, dp rank) identical to what mds-train fed")


def check_origins(records, datasets):
    """(c) the pieces of each sample, read from the .bin, are its tokens."""
    for r in records:
        seqs = datasets[r["prefix"]]["seqs"]
        toks = [t for p in r["pieces"] for t in seqs[p["doc"]][p["begin"]:p["end"]]]
        if not check(toks == r["tokens"], f"sample {r['sample']}: its pieces {r['pieces']} of {r['prefix']} give "
                                          f"{toks[:8]}..., its tokens are {r['tokens'][:8]}..."):
            return
    print(f"origins: the pieces of {len(records)} samples reproduce their tokens from the .bin files")


def run_training(tmp, a, b):
    """(a): two launches of mds-train (DP 2) with the batch dump; returns (flags, ckpt, dump path)."""
    ckpt = os.path.join(tmp, "ck")
    dump = os.path.join(tmp, "dump", "batches")
    os.makedirs(os.path.dirname(dump))
    skip_ranges = ["--skip-train-iteration-range", "2-3", "8-8"]
    env = {"MDS_DUMP_BATCHES": dump}
    first = train_flags(a, b, ckpt, skip_ranges + ["--exit-interval", 5])
    r1 = bmd_harness.run_mds_train(os.path.join(BIN, "mds-train"), first, 2, os.path.join(tmp, "run1"),
                                   name="mds-train-1", env=env, timeout=300)
    if not check(r1.ok, f"the first mds-train launch failed (rc {r1.returncode})\n{r1.tail()}"):
        return None
    second = train_flags(a, b, ckpt, skip_ranges)
    r2 = bmd_harness.run_mds_train(os.path.join(BIN, "mds-train"), second, 2, os.path.join(tmp, "run2"),
                                   name="mds-train-2", env=env, timeout=300)
    if not check(r2.ok, f"the resumed mds-train launch failed (rc {r2.returncode})\n{r2.tail()}"):
        return None
    its = [it["iteration"] for it in r1.iterations + r2.iterations]
    check(its == list(range(1, 11)), f"the two launches logged iterations {its}, expected 1..10")
    return first, second, ckpt, dump


def part_a(tmp, a, b, datasets):
    got = run_training(tmp, a, b)
    if got is None:
        return
    first, second, ckpt, dump = got
    fed = read_dump(dump, 2)
    run1, run2 = os.path.join(tmp, "run1"), os.path.join(tmp, "run2")
    common = ["--format", "jsonl", "--tokens", "--data-parallel-size", 2, "-q"]
    p1 = sample_text(["--iterations", "1-5"] + common + ["--"] + first, cwd=run1)
    p2 = sample_text(["--iterations", "6-10", "--resume-iteration", 5] + common + ["--"] + second, cwd=run2)
    recs = jsonl(p1.stdout) + jsonl(p2.stdout)
    compare("launches 1 and 2 (-- form)", by_micro_batch(recs), fed)
    # The comparison sees the skipped range: without `--skip-train-iteration-range ... 8-8` iterations 8.. differ.
    no_skip = [f for f in second if f not in ("--skip-train-iteration-range", "2-3", "8-8")]
    other = by_micro_batch(jsonl(sample_text(["--iterations", "6-10", "--resume-iteration", 5] + common + ["--"] +
                                             no_skip, cwd=run2).stdout))
    check(all(other[k] == fed[k] for k in other if k[0] < 8) and any(other[k] != fed[k] for k in other if k[0] >= 8),
          "without the skipped range 8-8, iterations 6-7 should map alike and 8-10 differently")
    check_origins(recs, datasets)
    # The ramp-up: 4 samples per iteration for the first 4, then 8.
    sizes = {}
    for r in recs:
        sizes[r["iteration"]] = sizes.get(r["iteration"], 0) + 1
    check([sizes.get(i) for i in range(1, 11)] == [4, 4, 4, 4] + [8] * 6, f"samples per iteration {sizes}")
    # The small dataset is read beyond its first epoch.
    small = [r for r in recs if r["prefix"] == b]
    per_epoch = (int(datasets[b]["sizes"].sum()) - 1) // SEQ
    check(len({r["dataset_sample"] for r in small}) > per_epoch,
          f"the small dataset serves {len({r['dataset_sample'] for r in small})} distinct samples, not more than one "
          f"epoch's {per_epoch}: the run does not cross its epoch boundary")
    print(f"the small dataset: {len({r['dataset_sample'] for r in small})} distinct samples read, {per_epoch} per epoch")
    # The ledger form, when mds-train keeps {--save}/runs.jsonl.
    ledger = os.path.join(ckpt, "runs.jsonl")
    if os.path.exists(ledger):
        l1 = jsonl(sample_text(["--ledger", ledger, "--iterations", "2-5", "--format", "jsonl", "--tokens", "-q"]).stdout)
        l2 = jsonl(sample_text(["--ledger", ledger, "--iterations", "6-10", "--format", "jsonl", "--tokens",
                                "-q"]).stdout)
        compare("launches 1 and 2 (ledger form)", by_micro_batch(l1 + l2), {k: v for k, v in fed.items() if k[0] >= 2})
        p = sample_text(["--ledger", ledger, "--iterations", "11"], expect=1)
        check(ledger in p.stderr and "line" in p.stderr, f"iteration 11 with the ledger: {p.stderr.strip()}")
    else:
        print(f"note: {ledger} does not exist (this mds-train keeps no run ledger): the ledger form is not checked")
    # Errors and the text format.
    p = sample_text(["--iterations", "11", "--"] + first, cwd=run1, expect=2)
    check("beyond" in p.stderr, f"iteration 11 of 10: {p.stderr.strip()}")
    t = sample_text(["--iterations", "7", "--resume-iteration", 5, "--data-parallel-size", 2, "--max-chars", 40, "-q",
                     "--"] + second, cwd=run2).stdout
    head = [line for line in t.splitlines() if line.startswith("iteration 7 micro-batch 1 dp-rank 1 ")]
    check(len(head) == 2 and " | dataset " in head[0] and " tokens [" in head[0],
          f"text format: the header lines of micro batch 1, rank 1 of iteration 7: {head}")


def bmd_tokens(text, first, last):
    """tools/sample_idxs_to_text.py's output: per id, `i tensor([...])` then `i <text>`."""
    out = {}
    for i in range(first, last):
        start = text.index(f"{i} tensor([")
        end = text.index("])", start)
        ids = [int(x) for x in text[start + len(f"{i} tensor(["):end].replace("\n", " ").split(",") if x.strip()]
        tstart = text.index("\n", end) + 1
        assert text.startswith(f"{i} ", tstart), text[tstart:tstart + 40]
        nxt = text.find(f"\n{i + 1} tensor([", tstart) if i + 1 < last else len(text.rstrip("\n"))
        out[i] = (ids, text[tstart + len(f"{i} "):nxt])
    return out


def part_b(tmp, a, b):
    tree_src = bmd_harness.third_party_dir(SOURCE)
    missing = [m for m in ("torch", "numpy", "deepspeed", "regex", "six") if not bmd_harness._importable(m)]
    if tree_src is None or missing:
        print(f"note: the BigScience cross-check is skipped (reference tree {'found' if tree_src else 'missing'}, "
              f"missing Python packages {missing})")
        return
    # BigScience's tool builds its own index files, on its own copy of the data.
    ref = os.path.join(tmp, "ref-data")
    os.makedirs(ref)
    for p in (a, b):
        for ext in (".bin", ".idx"):
            shutil.copy(p + ext, os.path.join(ref, os.path.basename(p) + ext))
    ra, rb = (os.path.join(ref, os.path.basename(p)) for p in (a, b))
    first, last = 10, 30
    data_flags = ["--train-samples", TRAIN_SAMPLES, "--seq-length", SEQ, "--seed", 42, "--split", "100,0,0",
                  "--data-impl", "mmap", "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", GPT2 + "/encoder.json",
                  "--merge-file", GPT2 + "/vocab.bpe", "--distributed-backend", "gloo"]
    build_dir = os.environ.get("MDS_BUILD_DIR")
    tree = bmd_harness.BmdTree(os.path.join(tmp, "bmd"), source_dir=SOURCE,
                               cache_dir=os.path.join(build_dir, "crosscheck-cache") if build_dir else None)
    out_file = os.path.join(tmp, "bmd-samples.txt")
    run = tree.run(["--print-tokens", "--print-text", "--all-tokens", "--sample-id-range", first, last,
                    "--output-file", out_file, "--data-path", "0.6", ra, "0.4", rb] + data_flags,
                   nproc=1, name="sample_idxs_to_text", timeout=300, script=os.path.join("tools", "sample_idxs_to_text.py"))
    if not check(run.ok and os.path.exists(out_file), f"tools/sample_idxs_to_text.py failed (rc {run.returncode})\n"
                                                      f"{run.tail()}"):
        return
    with open(out_file, errors="replace") as f:
        want = bmd_tokens(f.read(), first, last)
    mflags = ["--num-layers", 2, "--hidden-size", 64, "--num-attention-heads", 4, "--max-position-embeddings", SEQ,
              "--micro-batch-size", 1, "--global-batch-size", 1, "--lr", "1e-3", "--data-path", "0.6", a, "0.4", b] + data_flags
    got = jsonl(sample_text(["--consumed-samples", f"{first}-{last}", "--format", "jsonl", "--tokens", "-q", "--"] +
                            mflags).stdout)
    check([r["consumed"] for r in got] == list(range(first, last)), f"consumed samples {[r['consumed'] for r in got]}")
    same_tokens = same_text = 0
    for r in got:
        ids, text = want.get(r["consumed"], (None, None))
        if check(ids == r["tokens"], f"consumed sample {r['consumed']}: mds-sample-text {r['tokens'][:10]}..., "
                                     f"sample_idxs_to_text.py {ids[:10] if ids else ids}..."):
            same_tokens += 1
        if "\ufffd" in text or "\ufffd" in r["text"]:
            continue  # a character cut at the sample's edge: the two decoders replace its bytes differently
        if check(text == r["text"], f"consumed sample {r['consumed']}: text {r['text'][:60]!r} vs {text[:60]!r}"):
            same_text += 1
    print(f"BigScience's sample_idxs_to_text.py --sample-id-range {first} {last}: {same_tokens} of {len(got)} samples "
          f"with the same token ids, {same_text} with the same text")


def main():
    started = time.time()
    for tool in ("mds-train", "mds-sample-text", "mds-preprocess"):
        if not os.path.exists(os.path.join(BIN, tool)):
            skip(f"{os.path.join(BIN, tool)} not built (mds-train and mds-sample-text need LibTorch)")
    if not os.path.exists(os.path.join(GPT2, "encoder.json")):
        skip(f"GPT-2's vocabulary is not in {GPT2}")
    tmp = tempfile.mkdtemp(prefix="sample-text-")
    a = preprocess(tmp, "big", 40, 120, 1)
    b = preprocess(tmp, "small", 6, 12, 2)
    datasets = {p: corpus.read_indexed(p) for p in (a, b)}
    part_a(tmp, a, b, datasets)
    part_b(tmp, a, b)
    bmd_harness.finish(started, tmp)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Megatron-DeepSpeed's data loading Mode 2 (the weighted split paths BLOOM's tr11-176B-ml trains with), mds-train
against BigScience's real pretrain_gpt.py (bmd_harness.py), with the same flags on both sides.

Three indexed datasets A, B, C (A made by mds from the bundled corpus, B its documents in reverse order, C every
other document of A); the tiny GPT of test_bmd_resume.py (2 layers, hidden 64, 4 heads, seq 64, micro-batch 2,
global batch 4, fp32, dropout off, DeepSpeed ZeRO stage 1) on 1 rank for 6 iterations, with
  --train-weighted-split-paths-path FILE   "train: 0.6 0:0.8 A, 0.4 0.1:0.9 B"   (a file, as tr11 gives it)
  --valid-weighted-split-paths "valid: 0.5 0.8:1 A, 0.5 0.9:1 B" "valid_c: 1 0.9:1 C"   (two named groups)
  --test-weighted-split-paths "test_c: 1 0:0.1 C"
  --eval-interval 2 --eval-iters 2.
The two programs initialize the model differently, so each comparison starts from one checkpoint: a first launch
trains 2 iterations (evaluating both groups at 2, consumed_valid_samples 16) and saves; both programs resume copies
of it with the same flags and must log, for iterations 3..6:
  - the same lm loss (relative 1e-5: the same training samples in the same order: the document ranges, the
    blending by weight, the index files);
  - the same validation lines in the same order: "valid loss at iteration 4", "valid_c loss at iteration 4", ...,
    "... at the end of training for val data", "test_c loss at the end of training for test data", with the same
    lm loss (relative 1e-5; the lines print 7 digits): each group continues from consumed_valid_samples / 2.
Checked both ways: the real first launch resumed by both, and mds's first launch (its own lines at iteration 2 named
valid, valid_c) resumed by both. For the first, also:
  - the same TensorBoard validation tags (lm-loss-validation/<group>/lm loss validation, "vs samples", "vs tokens",
    "vs gigaflos (without embeddings)"), with the same steps (test_c at 0) and values (relative 1e-5);
  - the final checkpoints' args about data loading have the same names, Python types and values (paths aside):
    train/valid/test_weighted_split_paths, _weights, _splits, _names, the three -path entries, data_path, split,
    data_prefixes, data_weights, do_train, do_valid, do_test, consumed_valid_samples;
and mds refuses --data-path together with --train-weighted-split-paths-path (exit 2, naming both modes), as
Megatron's parse_args asserts.
Exits 77 without ../shared/third_party, the Python packages, or the mds binaries.
Runs: `MDS_BIN=build/bin .venv/bin/python tests/crosscheck/test_bmd_weighted_split.py` (25-70 s)."""
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bmd_harness  # noqa: E402

SOURCE = os.environ.get("MDS_SOURCE_DIR", os.path.join(HERE, "..", ".."))
BIN = bmd_harness.mds_bin_dir(SOURCE)  # or exit 77

import corpus  # noqa: E402
import tiny_dataset  # noqa: E402

MDS = os.path.join(BIN, "mds-train")
ITERS = 6
from bmd_harness import check  # noqa: E402


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def write_indexed(prefix, seqs):
    """A Megatron mmap dataset (uint16, one sequence per document), written by hand."""
    import numpy as np
    sizes = np.array([len(s) for s in seqs], dtype="<i4")
    pointers = np.concatenate([[0], np.cumsum(sizes.astype(np.int64))[:-1] * 2]).astype("<i8")
    doc_idx = np.arange(len(seqs) + 1, dtype="<i8")
    with open(prefix + ".bin", "wb") as f:
        for s in seqs:
            f.write(np.asarray(s, dtype="<u2").tobytes())
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, len(seqs), len(seqs) + 1))
        f.write(sizes.tobytes() + pointers.tobytes() + doc_idx.tobytes())


def flags(train_file, valid, test, vocab, merges, ckpt):
    return ["--num-layers", 2, "--hidden-size", 64, "--num-attention-heads", 4,
            "--seq-length", 64, "--max-position-embeddings", 64,
            "--micro-batch-size", 2, "--global-batch-size", 4, "--train-iters", ITERS,
            "--optimizer", "adam", "--adam-beta1", 0.9, "--adam-beta2", 0.95, "--adam-eps", "1e-8",
            "--lr", "1e-3", "--min-lr", "1e-4", "--lr-decay-style", "cosine", "--lr-warmup-iters", 2,
            "--clip-grad", 1.0, "--weight-decay", 0.1, "--seed", 42, "--init-method-std", 0.02,
            "--hidden-dropout", 0.0, "--attention-dropout", 0.0,
            "--train-weighted-split-paths-path", train_file,
            "--valid-weighted-split-paths", *valid,
            "--test-weighted-split-paths", *test,
            "--data-impl", "mmap", "--vocab-file", vocab, "--merge-file", merges,
            "--log-interval", 1, "--eval-interval", 2, "--eval-iters", 2,
            "--save-interval", 1000, "--save", ckpt, "--tensorboard-queue-size", 1,
            "--distributed-backend", "gloo", "--zero-stage", 1]


def scalars(tb_dir):
    """{tag: {step: value}} of every scalar under tb_dir (torch's SummaryWriter may store them as tensor
    summaries, mds writes simple values)."""
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.util import tensor_util
    ea = event_accumulator.EventAccumulator(tb_dir, size_guidance={event_accumulator.SCALARS: 0,
                                                                   event_accumulator.TENSORS: 0})
    ea.Reload()
    out = {tag: {e.step: float(e.value) for e in ea.Scalars(tag)} for tag in ea.Tags().get("scalars", [])}
    for tag in ea.Tags().get("tensors", []):
        events = ea.Tensors(tag)
        if events and tensor_util.make_ndarray(events[0].tensor_proto).size == 1 and "text_summary" not in tag:
            out[tag] = {e.step: float(tensor_util.make_ndarray(e.tensor_proto)) for e in events}
    return out


def validation_lines(run):
    """[(group, at, lm loss)] from '<group> loss at <at> | lm loss value: X | ...' lines, in order."""
    import re
    pat = re.compile(r"^\s*(\S+) loss at (.+?) \| lm loss value: (\S+) \|")
    out = []
    for line in "\n".join(run.logs).splitlines():
        m = pat.match(line)
        if m:
            out.append((m.group(1), m.group(2), float(m.group(3))))
    return out


def same_curves(what, mds_scalars, mds, real):
    """Iterations 3..ITERS: the same training losses (the real program's full-precision hook, mds's TensorBoard
    float32 scalars) and the same validation lines, groups in order, with the same losses."""
    got = mds_scalars.get("lm-loss-training/lm loss", {})
    want = {it["iteration"]: it["lm loss"] for it in real.iterations}
    check(sorted(want) == list(range(3, ITERS + 1)), f"{what}: the real run logged iterations {sorted(want)}")
    worst = 0.0
    for i in range(3, ITERS + 1):
        if check(i in got and i in want, f"{what}: iteration {i}: mds {got.get(i)!r}, real {want.get(i)!r}"):
            worst = max(worst, rel(got[i], want[i]))
            check(rel(got[i], want[i]) <= 1e-5, f"{what}: iteration {i}: lm loss {got[i]!r}, real {want[i]!r}")
    vr, vm = validation_lines(real), validation_lines(mds)
    check([v[:2] for v in vm] == [v[:2] for v in vr],
          f"{what}: validation lines: mds {[v[:2] for v in vm]}, real {[v[:2] for v in vr]}")
    expected = [(g, f"iteration {i}") for i in (4, 6) for g in ("valid", "valid_c")] + \
               [(g, "the end of training for val data") for g in ("valid", "valid_c")] + \
               [("test_c", "the end of training for test data")]
    check([v[:2] for v in vr] == expected, f"{what}: the real run's validation lines {[v[:2] for v in vr]}, "
                                           f"expected {expected}")
    for (g, at, x), (_, _, y) in zip(vm, vr):
        worst = max(worst, rel(x, y))
        check(rel(x, y) <= 1e-5, f"{what}: {g} loss at {at}: mds {x!r}, real {y!r}")
    print(f"  {what}: iterations 3..{ITERS} and {len(vr)} validation lines "
          f"({', '.join(sorted({v[0] for v in vr}))}) agree, worst relative difference {worst:.2e}")


DATA_ARGS = ["train_weighted_split_paths", "valid_weighted_split_paths", "test_weighted_split_paths",
             "train_weighted_split_paths_path", "valid_weighted_split_paths_path", "test_weighted_split_paths_path",
             "data_path", "split", "data_prefixes", "data_weights", "do_train", "do_valid", "do_test",
             "consumed_valid_samples"]


def compare_args(real_root, mds_root):
    import torch
    import bmd_checkpoint  # noqa: F401  (megatron.enums stand-in so the pickled args resolve)
    step = f"global_step{ITERS}"
    load = lambda root: vars(torch.load(os.path.join(root, step, "mp_rank_00_model_states.pt"),  # noqa: E731
                                        map_location="cpu", weights_only=False)["args"])
    if not (check(os.path.exists(os.path.join(real_root, step)), f"the real run saved no {step}") and
            check(os.path.exists(os.path.join(mds_root, step)), f"mds-train saved no {step}")):
        return
    ra, ma = load(real_root), load(mds_root)

    def same_data(v):  # each side reads its own copy of the datasets (data-mds/ for mds)
        if isinstance(v, list):
            return [same_data(x) for x in v]
        return v.replace("/data-mds/", "/data-real/") if isinstance(v, str) else v
    ma = {k: same_data(v) for k, v in ma.items()}
    keys = [k for k in set(ra) | set(ma) if "weighted_split" in k] + DATA_ARGS
    for k in sorted(set(keys)):
        if not check(k in ra and k in ma, f"args.{k}: in the real checkpoint {k in ra}, in mds's {k in ma}"):
            continue
        check(type(ma[k]) is type(ra[k]) and ma[k] == ra[k],
              f"args.{k} = {ma[k]!r} ({type(ma[k]).__name__}) in mds's, {ra[k]!r} ({type(ra[k]).__name__}) in the real one")
    print(f"  checkpoint args: {len(set(keys))} data-loading entries compared "
          f"(valid names {ra.get('valid_weighted_split_names')!r}, data_weights {ra.get('data_weights')!r})")




def main():
    tmp = tempfile.mkdtemp(prefix="bmd-weighted-split-")
    started = time.time()
    build_dir = os.environ.get("MDS_BUILD_DIR")
    cache = os.path.join(build_dir, "crosscheck-cache") if build_dir else None
    a, vocab, merges = tiny_dataset.make(tmp, BIN, SOURCE, 512)
    seqs = corpus.read_indexed(a)["seqs"]
    b, c = os.path.join(tmp, "b_text_document"), os.path.join(tmp, "c_text_document")
    write_indexed(b, seqs[::-1])
    write_indexed(c, seqs[::2])
    train_file = os.path.join(tmp, "train-splits.txt")
    with open(train_file, "w") as f:
        f.write(f'"train: 0.6 0:0.8 {a}, 0.4 0.1:0.9 {b}"\n')
    valid = [f"valid: 0.5 0.8:1 {a}, 0.5 0.9:1 {b}", f"valid_c: 1 0.9:1 {c}"]
    test = [f"test_c: 1 0:0.1 {c}"]
    ds = bmd_harness.ds_config(micro_batch_size=2, global_batch_size=4, zero_stage=1, clip=1.0)
    tree = bmd_harness.BmdTree(os.path.join(tmp, "bmd"), source_dir=SOURCE, cache_dir=cache)

    # The index files are cached beside the datasets: each side gets its own copy of them.
    def data_copy(name):
        d = os.path.join(tmp, name)
        os.makedirs(d)
        for p in (a, b, c):
            for ext in (".bin", ".idx"):
                shutil.copy(p + ext, os.path.join(d, os.path.basename(p) + ext))
        new = {p: os.path.join(d, os.path.basename(p)) for p in (a, b, c)}
        tf = os.path.join(d, "train-splits.txt")
        with open(train_file) as src, open(tf, "w") as dst:
            text = src.read()
            for old, repl in new.items():
                text = text.replace(old + ",", repl + ",").replace(old + '"', repl + '"')
            dst.write(text)
        sub = lambda v: " ".join(new[w.rstrip(",")] + w[len(w.rstrip(",")):] if w.rstrip(",") in new else w  # noqa: E731
                                 for w in v.split(" "))
        return tf, [sub(v) for v in valid], [sub(v) for v in test]

    tf_r, valid_r, test_r = data_copy("data-real")
    tf_m, valid_m, test_m = data_copy("data-mds")
    # The two programs initialize differently: the real one trains 2 iterations (an evaluation of both groups
    # at 2: consumed_valid_samples 16) and saves; each side resumes that checkpoint with the same flags.
    first = tree.run(flags(tf_r, valid_r, test_r, vocab, merges, os.path.join(tmp, "ck")) + ["--exit-interval", 2],
                     nproc=1, ds_config=ds, name="first", timeout=400)
    if not check(first.ok, f"the real first launch failed\n{first.tail()}"):
        return finish(tmp, started)
    shutil.copytree(os.path.join(tmp, "ck"), os.path.join(tmp, "ck-real"))
    shutil.copytree(os.path.join(tmp, "ck"), os.path.join(tmp, "ck-mds"))
    tb_r, tb_m = os.path.join(tmp, "tb-real"), os.path.join(tmp, "tb-mds")
    ck_r, ck_m = os.path.join(tmp, "ck-real"), os.path.join(tmp, "ck-mds")
    real = tree.run(flags(tf_r, valid_r, test_r, vocab, merges, ck_r) + ["--load", ck_r, "--tensorboard-dir", tb_r],
                    nproc=1, ds_config=ds, name="real", timeout=400)
    mds = bmd_harness.run_mds_train(MDS, flags(tf_m, valid_m, test_m, vocab, merges, ck_m) +
                                    ["--load", ck_m, "--tensorboard-dir", tb_m], 1, os.path.join(tmp, "run-mds"),
                                    ds_config=ds, timeout=400)
    print(f"real pretrain_gpt.py: 2 iterations {first.seconds:.1f} s, resumed {real.seconds:.1f} s; "
          f"mds-train resumed {mds.seconds:.1f} s")
    if not (check(real.ok, f"the real run failed\n{real.tail()}") and check(mds.ok, f"mds-train failed\n{mds.tail()}")):
        return finish(tmp, started)

    sr, sm = scalars(tb_r), scalars(tb_m)
    same_curves("mds resumes the real checkpoint", sm, mds, real)
    # TensorBoard: the same validation tags, steps and values.
    tr = {t: v for t, v in sr.items() if t.startswith("lm-loss-validation")}
    tm = {t: v for t, v in sm.items() if t.startswith("lm-loss-validation")}
    check(sorted(tm) == sorted(tr), f"validation tags: mds {sorted(tm)}, real {sorted(tr)}")
    check("lm-loss-validation/valid_c/lm loss validation" in tr, f"the real run's validation tags {sorted(tr)}")
    for tag in sorted(set(tr) & set(tm)):
        if not tag.endswith("lm loss validation") and not tag.endswith("vs samples"):
            continue  # the other axes carry the same values at other steps
        check(sorted(tm[tag]) == sorted(tr[tag]), f"{tag}: steps {sorted(tm[tag])}, real {sorted(tr[tag])}")
        for s in set(tm[tag]) & set(tr[tag]):
            check(rel(tm[tag][s], tr[tag][s]) <= 1e-5, f"{tag} at {s}: mds {tm[tag][s]!r}, real {tr[tag][s]!r}")
    print(f"  TensorBoard: {len(tr)} validation tags agree")

    compare_args(ck_r, ck_m)

    # The other way: mds trains 2 iterations (its own evaluation at 2) and saves; the real program resumes that
    # checkpoint and must continue as mds's own resume does.
    ck2 = os.path.join(tmp, "ck2")
    first_m = bmd_harness.run_mds_train(MDS, flags(tf_m, valid_m, test_m, vocab, merges, ck2) + ["--exit-interval", 2],
                                        1, os.path.join(tmp, "run-mds-first"), ds_config=ds, timeout=400)
    if check(first_m.ok, f"mds-train's first launch failed\n{first_m.tail()}"):
        check([v[:2] for v in validation_lines(first_m)] == [("valid", "iteration 2"), ("valid_c", "iteration 2")],
              f"mds-train's first launch validation lines {validation_lines(first_m)}")
        shutil.copytree(ck2, ck2 + "-real")
        shutil.copytree(ck2, ck2 + "-mds")
        tb2 = os.path.join(tmp, "tb2-mds")
        real2 = tree.run(flags(tf_r, valid_r, test_r, vocab, merges, ck2 + "-real") + ["--load", ck2 + "-real"],
                         nproc=1, ds_config=ds, name="real2", timeout=400)
        mds2 = bmd_harness.run_mds_train(MDS, flags(tf_m, valid_m, test_m, vocab, merges, ck2 + "-mds") +
                                         ["--load", ck2 + "-mds", "--tensorboard-dir", tb2], 1,
                                         os.path.join(tmp, "run-mds2"), ds_config=ds, timeout=400)
        print(f"mds-train: 2 iterations {first_m.seconds:.1f} s, resumed {mds2.seconds:.1f} s; "
              f"real pretrain_gpt.py resumed {real2.seconds:.1f} s")
        if check(real2.ok, f"the real resume of mds's checkpoint failed\n{real2.tail()}") and \
                check(mds2.ok, f"mds-train's own resume failed\n{mds2.tail()}"):
            same_curves("the real program resumes mds's checkpoint", scalars(tb2), mds2, real2)

    # Mode 1 and Mode 2 together: Megatron asserts, mds refuses before any work.
    both = subprocess.run([MDS] + [str(f) for f in flags(tf_m, valid_m, test_m, vocab, merges, os.path.join(tmp, "ck-x"))]
                          + ["--data-path", a], capture_output=True, text=True)
    check(both.returncode == 2 and "mutually exclusive" in both.stderr and "--data-path" in both.stderr,
          f"--data-path with weighted split paths: exit {both.returncode}, {both.stderr.strip()[-300:]!r}")
    return finish(tmp, started)


def finish(tmp, started):
    bmd_harness.finish(started, tmp)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Issue 18's data and loss flags against BigScience's real Megatron-DeepSpeed (pretrain_gpt.py through
bmd_harness.py), with the tiny GPT of test_bmd_resume.py (2 layers, hidden 64, 4 heads, seq 64, fp32, ZeRO 1, dropout
off) on 2 ranks. The two programs initialize differently, so each case starts both from the SAME checkpoint: the real
program trains 2 iterations without the flags under test and saves; the real program and mds-train then resume copies
of it with the same flags and must log the same iterations 3..10 (lm loss and grad norm relative 1e-5, learning rate
1e-6, as test_bmd_resume.py compares).
  eod-pp2   --eod-mask-loss at PP=2 (the mask travels to the last stage). The bundled corpus has short documents (half
            under 64 tokens), so most samples hold EOD tokens inside; mds-train resumed WITHOUT the flag must differ
            from the real program with it by more than 10 x the tolerance somewhere (so the case can fail).
  eod-dp2   the same at DP=2 (each rank's micro batch loss is masked; the reported loss is the DP average).
  eod-tp2   the same at TP=2 (vocab-parallel cross entropy with the mask).
  cyclic    --dataloader-type cyclic at DP=2 (MegatronPretrainingRandomSampler: each rank's bucket shuffled by
            torch.randperm seeded with the epoch), --split 100,0,0 (BMD's evaluation fails with cyclic); mds-train with
            the default single loader must differ.
  skip      --skip-train-iteration-range 9-9 5-7 20-30 22-31 at DP=2 with a global batch of 8 (2 micro batches per step): BMD
            draws END - iteration MICRO batches at iterations 5 and 9 without training and keeps the iteration count;
            both programs print "Skipped iterations 5 to 7"; mds-train without the flag must differ. --train-tokens
            (read nowhere by Megatron-DeepSpeed) is given to both here too: it changes nothing. The ranges are given
            unsorted with two overlapping beyond the run (20-30 22-31): both checkpoints' args hold deque([[20, 31]]).
  extra-ids --vocab-extra-ids 3 with --tokenizer-type PretrainedFromHF (the tiny BPE's tokenizer.json): both programs
            train 3 iterations and print the same "> padded vocab (size: 515) ..." line (AutoTokenizer adds the
            <extra_id_N> it lacks), and with GPT2BPETokenizer the flag changes nothing (size 512).
  reset-pos --reset-position-ids at DP=2 (absolute position embeddings indexed by positions that restart after each
            EOD token inside a sample); mds-train without the flag must differ. The validation losses on the
            way (--eval-interval 5: evaluation takes the same position ids) must agree too (to the 6 digits printed).
  reset-mask --reset-attention-mask: BMD builds the per-document mask, but pretrain_gpt.py sets
            pretrain_causal_attention under --deepspeed and GPTModelPipe's EmbeddingPipe drops it, so the flag changes
            nothing: mds-train (where it is a no-effect flag) must match the real program with it, and mds-train
            WITHOUT it must match the real program with it as well.
  reset-both-pp2 both flags at PP=2 (the first stage embeds with the reset positions, every stage attends causally).
  reset-pos-tp2 --reset-position-ids at TP=2.
Exits 77 without ../shared/third_party, the Python packages, or the mds binaries.
Runs: `MDS_BIN=build/bin .venv/bin/python tests/crosscheck/test_bmd_data_flags.py [eod-pp2 eod-dp2 eod-tp2 cyclic skip
extra-ids reset-pos reset-mask reset-both-pp2 reset-pos-tp2]` (default: eod-pp2 cyclic skip extra-ids reset-mask
reset-both-pp2 reset-pos-tp2)."""
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_bmd_resume as resume  # noqa: E402  (skips with 77 when the harness or the binaries are missing)
import bmd_harness  # noqa: E402
import tiny_dataset  # noqa: E402

check = resume.check
ITERS = 10
ITERATIONS = list(range(3, ITERS + 1))
TOLERANCE = 1e-5  # fp32, as test_bmd_resume.py

# name: (TP, PP, global batch, flags under test, flags of every run of the case)
CASES = {
    "eod-pp2": (1, 2, 4, ["--eod-mask-loss"], []),
    "eod-dp2": (1, 1, 4, ["--eod-mask-loss"], []),
    "eod-tp2": (2, 1, 4, ["--eod-mask-loss"], []),
    "cyclic": (1, 1, 4, ["--dataloader-type", "cyclic"], ["--split", "100,0,0"]),
    "skip": (1, 1, 8, ["--skip-train-iteration-range", "9-9", "5-7", "20-30", "22-31"], ["--train-tokens", "100000"]),
    # --eval-interval 5: validation at iterations 5 and 10 (--exit-interval 10 stops before the final evaluation).
    "reset-pos": (1, 1, 4, ["--reset-position-ids"], ["--eval-interval", "5"]),
    "reset-mask": (1, 1, 4, ["--reset-attention-mask"], ["--eval-interval", "5"]),
    "reset-both-pp2": (1, 2, 4, ["--reset-position-ids", "--reset-attention-mask"], ["--eval-interval", "5"]),
    "reset-pos-tp2": (2, 1, 4, ["--reset-position-ids"], ["--eval-interval", "5"]),
}
NO_EFFECT = {"reset-mask"}  # flags the real program computes and then does not use
DEFAULT = ["eod-pp2", "cyclic", "skip", "extra-ids", "reset-mask", "reset-both-pp2", "reset-pos-tp2"]


def case_flags(data, vocab, merges, ck, tp, pp, gbs, extra, exit_interval):
    f = [str(x) for x in resume.flags(data, vocab, merges, ck, tp, pp, train_iters=ITERS, exit_interval=exit_interval)]
    f[f.index("--global-batch-size") + 1] = str(gbs)
    return f + extra  # after flags()' own: the last --split counts, for both programs


def worst_difference(a, b):
    ca, cb = resume.curve(a), resume.curve(b)
    return max((resume.rel(ca[i][k], cb[i][k]) for i in ITERATIONS if i in ca and i in cb for k in ("lm loss", "grad norm")),
               default=0.0)


def run_case(tree, tmp, data, vocab, merges, name):
    tp, pp, gbs, under_test, common = CASES[name]
    ds = bmd_harness.ds_config(micro_batch_size=2, global_batch_size=gbs, zero_stage=1, clip=1.0)
    d = os.path.join(tmp, name)
    os.makedirs(d)
    if "--split" in common:
        # Megatron's index file names do not say the split: another split gets its own copy of the dataset (BMD
        # would silently reuse the other split's index files; mds refuses them).
        for ext in (".bin", ".idx"):
            shutil.copy(data + ext, os.path.join(d, "data" + ext))
        data = os.path.join(d, "data")
    ck = os.path.join(d, "start")
    started = time.time()
    first = tree.run(case_flags(data, vocab, merges, ck, tp, pp, gbs, common, 2), nproc=2, ds_config=ds,
                     name=name + "-start", timeout=400)
    if not check(first.ok, f"{name}: the real program's first 2 iterations failed (rc {first.returncode})\n{first.tail()}"):
        return
    for side in ("real", "mds", "mds-without"):
        resume.copy(ck, ck + "-" + side)
    flags = lambda c, extra: case_flags(data, vocab, merges, c, tp, pp, gbs, common + extra, ITERS)  # noqa: E731
    real = tree.run(flags(ck + "-real", under_test), nproc=2, ds_config=ds, name=name + "-real", timeout=400)
    mds = resume.run_mds(flags(ck + "-mds", under_test), os.path.join(d, "run-mds"), name + "-mds", ds)
    without = resume.run_mds(flags(ck + "-mds-without", []), os.path.join(d, "run-mds-without"), name + "-mds-without", ds)
    print(f"{name}: start ({first.seconds:.1f} s), real resumes ({real.seconds:.1f} s), mds resumes ({mds.seconds:.1f} s), "
          f"mds without {' '.join(under_test)} ({without.seconds:.1f} s); {time.time() - started:.1f} s in all")
    if not (check(real.ok, f"{name}: the real program's resume failed (rc {real.returncode})\n{real.tail()}") and
            check(mds.ok, f"{name}: mds-train's resume failed (rc {mds.returncode})\n{mds.tail()}") and
            check(without.ok, f"{name}: mds-train without the flag failed (rc {without.returncode})\n{without.tail()}")):
        return
    resume.compare(f"{name} mds vs real, both with {' '.join(under_test)}", mds, real, ITERATIONS, tol=TOLERANCE)
    apart = worst_difference(without, real)
    print(f"  {name}: mds without {' '.join(under_test)} vs the real program with it: worst relative "
          f"difference {apart:.2e} (lm loss or grad norm)")
    if name in NO_EFFECT:
        check(apart <= TOLERANCE, f"{name}: mds-train without {' '.join(under_test)} is {apart:.2e} away from the real "
                                  f"program with it, which should not change the curve")
    else:
        check(apart > 10 * TOLERANCE, f"{name}: the curve without {' '.join(under_test)} is within {apart:.2e} of the real "
                                      f"one with it: the case cannot tell the flag's effect")
    if name.startswith("reset"):
        compare_validations(name, mds, real, without, name not in NO_EFFECT)
    if name == "skip":
        for what, run in (("real", real), ("mds", mds)):
            text = "\n".join(run.logs)
            for start, end in ((5, 7), (9, 9)):
                check(f"Skipped iterations {start} to {end} due to --skip-train-iteration-range flag." in text,
                      f"skip: the {what} run does not say it skipped iterations {start} to {end}")
        # args.skip_train_iteration_range: BMD's deque of merged ranges, less those skipped before the save.
        left = []
        for run_ck in (ck + "-real", ck + "-mds"):
            args = resume.load_torch(os.path.join(run_ck, f"global_step{ITERS}", "mp_rank_00_model_states.pt"))["args"]
            left.append(args.skip_train_iteration_range)
        print(f"  skip: args.skip_train_iteration_range at iteration {ITERS}: real {left[0]!r}, mds {left[1]!r}")
        check(type(left[0]) is type(left[1]) and list(left[0]) == list(left[1]) == [[20, 31]],
              f"skip: args.skip_train_iteration_range: mds {left[1]!r}, the real program {left[0]!r}")


def compare_validations(name, mds, real, without, effect):
    """The validation losses at iterations 5 and 10, as printed (6 significant digits); mds-train without the flag
    must be off by more than the printing's rounding when the flag has an effect (evaluation takes it too)."""
    want, got, off = ([v.get("lm loss value") for v in run.validations] for run in (real, mds, without))
    print(f"  {name}: validation lm loss: real {want}, mds {got}, mds without the flag {off}")
    if not check(len(want) == len(got) == len(off) == 2 and None not in want + got + off,
                 f"{name}: the runs print other validation lines: real {want}, mds {got}, mds without {off}"):
        return
    for w, g in zip(want, got):
        check(resume.rel(g, w) <= 2e-5, f"{name}: validation lm loss {g} vs the real program's {w}")
    apart = max(resume.rel(o, w) for w, o in zip(want, off))
    check(apart > 1e-4 if effect else apart <= 2e-5,
          f"{name}: the validation losses without the flag are {apart:.2e} from the real ones with it")


def padded_vocab_line(run):
    lines = [ln.strip() for ln in "\n".join(run.logs).splitlines() if "> padded vocab (size:" in ln]
    return lines[0][lines[0].index(">"):] if lines else None


def extra_ids(tree, tmp, data, vocab, merges):
    """--vocab-extra-ids: the vocabulary sizes both programs derive (a 3-iteration run each)."""
    ds = bmd_harness.ds_config(micro_batch_size=2, global_batch_size=4, zero_stage=1, clip=1.0)
    d = os.path.join(tmp, "extra-ids")
    os.makedirs(d)
    # The tiny BPE's tokenizer.json with a tokenizer_config.json naming its EOS (BMD's PretrainedFromHF takes EOD
    # from the tokenizer's eos_token; mds-train finds <|endoftext|> itself).
    tok_dir = os.path.join(d, "hf-tokenizer")
    os.makedirs(tok_dir)
    shutil.copy(os.path.join(os.path.dirname(vocab), "tokenizer.json"), tok_dir)
    with open(os.path.join(tok_dir, "tokenizer_config.json"), "w") as f:
        f.write('{"eos_token": "<|endoftext|>"}\n')
    for tok_flags, size in ((["--tokenizer-type", "PretrainedFromHF", "--tokenizer-name-or-path", tok_dir], 515),
                            (["--tokenizer-type", "GPT2BPETokenizer"], 512)):
        f = lambda side: [str(x) for x in resume.flags(data, vocab, merges, os.path.join(d, f"ck-{side}-{size}"), 1, 1,  # noqa: E731
                                                       train_iters=3, exit_interval=3)] + \
            tok_flags + ["--vocab-extra-ids", "3", "--eval-iters", "0"]
        real = tree.run(f("real"), nproc=2, ds_config=ds, name=f"extra-ids-real-{size}", timeout=400)
        mds = resume.run_mds(f("mds"), os.path.join(d, f"run-mds-{size}"), f"extra-ids-mds-{size}", ds)
        if not (check(real.ok, f"extra-ids: the real run failed (rc {real.returncode})\n{real.tail()}") and
                check(mds.ok, f"extra-ids: the mds-train run failed (rc {mds.returncode})\n{mds.tail()}")):
            continue
        want, got = padded_vocab_line(real), padded_vocab_line(mds)
        print(f"extra-ids {tok_flags[1]}: real '{want}', mds '{got}'")
        check(want is not None and want == got, f"extra-ids {tok_flags[1]}: mds says '{got}', the real program '{want}'")
        check(want is not None and f"(size: {size})" in want, f"extra-ids {tok_flags[1]}: expected size {size}: '{want}'")


def main():
    names = sys.argv[1:] or DEFAULT
    unknown = [n for n in names if n not in CASES and n != "extra-ids"]
    if unknown:
        sys.exit(f"unknown case(s) {unknown}; the cases are {list(CASES)}")
    tmp = tempfile.mkdtemp(prefix="bmd-data-flags-")
    started = time.time()
    build_dir = os.environ.get("MDS_BUILD_DIR")
    cache = os.path.join(build_dir, "crosscheck-cache") if build_dir else None
    data, vocab, merges = tiny_dataset.make(tmp, resume.BIN, resume.SOURCE, 512)
    tree = bmd_harness.BmdTree(os.path.join(tmp, "bmd"), source_dir=resume.SOURCE, cache_dir=cache)
    for name in names:
        if name == "extra-ids":
            extra_ids(tree, tmp, data, vocab, merges)
        else:
            run_case(tree, tmp, data, vocab, merges, name)
    bmd_harness.finish(started, tmp)


if __name__ == "__main__":
    main()

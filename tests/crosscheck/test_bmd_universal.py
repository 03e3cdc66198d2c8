#!/usr/bin/env python3
"""mds-train --universal-checkpoint (issue 18) against BigScience's real Megatron-DeepSpeed, through the harness of
bmd_harness.py, with the tiny GPT and flags of test_bmd_resume.py (2 layers, hidden 64, 4 heads, seq 64,
micro-batch 2, global batch 4, 20 iterations, the first launch stops at 10; fp32, ZeRO stage 1, dropout off).

  pp2, dp2: the real program trains 10 iterations (pp2: TP=1 PP=2; dp2: TP=1 PP=1 DP=2, 2 ranks) and saves; its
       own resume gives the source curve (iterations 11..20). DeepSpeed's ds_to_universal.py (--inject_missing_state:
       BigScience's checkpoints carry no universal_checkpoint_info) converts global_step10 into
       global_step10_universal and writes latest_universal. The real program resumes that folder with
       --universal-checkpoint at TP=1 PP=1 (1 rank): BMD's universal resume. mds-train resumes it at other shapes
       (pp2: TP=1 PP=1 and TP=2 PP=1; dp2: TP=2 PP=1 and TP=1 PP=2) and must give BMD's universal-resume curve
       (losses and grad norms, relative 1e-5; learning rates 1e-6). dp2 must also give the source curve at 1e-5
       (BMD's universal resume does: 6.8e-8). pp2 does not: DeepSpeed 0.19.8's converter takes the tied module's
       position embeddings from the LAST stage, whose copy never trains, so BMD's own universal resume leaves the
       source curve (4.7e-3 relative in the loss at iteration 11); the difference to the source is printed only.
       (TP=2 is checked on the mds side only: the folder has no row-parallel information, and DeepSpeed's loader
       cuts every 2-D tensor along dim 0, so BMD cannot resume it at TP=2 correctly.)
  mds: mds-train trains 10 iterations in bf16 (ZeRO stage 0: BF16_Optimizer files) at TP=1 PP=2; its own resume
       gives iterations 11..20; mds-ckpt-reshape --universal writes the universal folder; mds-train resumes it at
       TP=1 PP=2 (relative 1e-6 to its own resume: the same numbers) and at TP=2 PP=1 (bf16 kernels at another TP
       round differently: relative 1e-3), and with another vocabulary padding (rows zero-padded; resume only).
  errors: --universal-checkpoint without latest_universal, on a folder without zero/, with a parameter missing and
       with a wrong shape fails with a message naming the file (and the expected shape).
Exits 77 without ../shared/third_party, the Python packages, or the mds binaries.
Runs: `MDS_BIN=build/bin .venv/bin/python tests/crosscheck/test_bmd_universal.py [pp2 dp2 mds errors]`."""
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bmd_harness  # noqa: E402

SOURCE = os.environ.get("MDS_SOURCE_DIR", os.path.join(HERE, "..", ".."))
BIN = bmd_harness.mds_bin_dir(SOURCE)  # or exit 77

import tiny_dataset  # noqa: E402
from bmd_harness import check  # noqa: E402
from test_bmd_resume import compare, copy, flags, run_mds  # noqa: E402

MDS_RESHAPE = os.path.join(BIN, "mds-ckpt-reshape")
ITS = list(range(11, 21))


def with_flags(base, tp, pp, extra=()):
    """flags() at another TP / PP (the last occurrence of a flag counts, for both programs)."""
    return base + ["--tensor-model-parallel-size", tp, "--pipeline-model-parallel-size", pp] + list(extra)


def ds_to_universal(tree, step_dir):
    """DeepSpeed's own converter on a real checkpoint folder (the copied BMD tree on the path, so that the pickled
    args' megatron.enums resolve)."""
    out = step_dir + "_universal"
    env = dict(os.environ, DS_ACCELERATOR="cpu", PYTHONPATH=tree.tree, OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal", "--input_folder", step_dir,
                        "--output_folder", out, "--num_extract_workers", "1", "--num_merge_workers", "1",
                        "--inject_missing_state"],  # BigScience's checkpoints carry no universal_checkpoint_info
                       env=env, capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"ds_to_universal.py failed (rc {p.returncode})\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p.returncode == 0


# name: (source TP, PP, ranks; the targets mds-train resumes at: (TP, PP, ranks); whether the source curve must be
# reproduced). pp2: DeepSpeed 0.19.8's ds_to_universal takes the tied module's position embeddings from the LAST
# pipeline stage, whose copy never trains (BigScience's layout, where the last stage holds the whole tied embedding
# module): the universal folder holds their initial values, so BMD's own universal resume leaves the source curve
# (4.7e-3 relative at iteration 11) and mds-train is held to BMD's universal resume only. dp2: no pipeline, so the
# universal folder holds the trained weights and both programs must reproduce the source curve.
BMD_SOURCES = {"pp2": (1, 2, 2, [(1, 1, 1), (2, 1, 2)], False),
               "dp2": (1, 1, 2, [(2, 1, 2), (1, 2, 2)], True)}


def bmd_case(tree, tmp, data, vocab, merges, ds, name):
    tp, pp, n, targets, source_curve = BMD_SOURCES[name]
    d = os.path.join(tmp, "bmd-" + name)
    os.makedirs(d)
    ck = os.path.join(d, "real")
    base = lambda c: flags(data, vocab, merges, c, tp, pp)  # noqa: E731
    r1 = tree.run(base(ck), nproc=n, ds_config=ds, name=f"uc-{name}-real1", timeout=400)
    if not check(r1.ok, f"{name}: real first launch failed (rc {r1.returncode})\n{r1.tail()}"):
        return
    copy(ck, ck + "-own")
    r2 = tree.run(base(ck + "-own"), nproc=n, ds_config=ds, name=f"uc-{name}-real2", timeout=400)
    if not check(r2.ok, f"{name}: real resume failed\n{r2.tail()}"):
        return
    if not ds_to_universal(tree, os.path.join(ck, "global_step10")):
        return
    print(f"{name}: real 10 at TP{tp} PP{pp} ({r1.seconds:.1f} s), real resumes ({r2.seconds:.1f} s)")
    copy(ck, os.path.join(d, "real-uc"))
    ru = tree.run(with_flags(base(os.path.join(d, "real-uc")), 1, 1, ["--universal-checkpoint"]), nproc=1,
                  ds_config=ds, name=f"uc-{name}-real-universal", timeout=400)
    if not check(ru.ok, f"{name}: real universal resume failed\n{ru.tail()}"):
        return
    print(f"{name}: real universal resume at TP1 PP1 ({ru.seconds:.1f} s)")
    compare(f"{name} real universal TP1 PP1 vs source", ru, r2, ITS, tol=1e-5 if source_curve else 1.0)
    for ttp, tpp, tn in targets:
        what = f"{name} mds universal TP{ttp} PP{tpp}"
        c = os.path.join(d, f"mds-uc-tp{ttp}-pp{tpp}")
        copy(ck, c)
        m = run_mds(with_flags(base(c), ttp, tpp, ["--universal-checkpoint"]), c + "-run", f"uc-{name}-mds-{ttp}{tpp}",
                    ds, tn)
        if not check(m.ok, f"{what}: mds-train failed (rc {m.returncode})\n{m.tail()}"):
            continue
        print(f"{what} ({m.seconds:.1f} s)")
        check(any("loading checkpoint from" in ln and "at iteration 10" in ln for ln in "\n".join(m.logs).splitlines()),
              f"{what}: no 'loading checkpoint ... at iteration 10' line")
        compare(f"{what} vs real universal", m, ru, ITS)
        compare(f"{what} vs source", m, r2, ITS, tol=1e-5 if source_curve else 1.0)


def reshape_universal(ck):
    out = ck + "-reshaped"
    p = subprocess.run([MDS_RESHAPE, ck, out, "--target-tp", "1", "--target-pp", "2", "--universal"],
                       capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"mds-ckpt-reshape --universal failed (rc {p.returncode})\n{p.stdout}\n{p.stderr}")
    return out if p.returncode == 0 else None


def mds_case(tmp, data, vocab, merges):
    d = os.path.join(tmp, "mds")
    os.makedirs(d)
    ds = bmd_harness.ds_config(micro_batch_size=2, global_batch_size=4, zero_stage=0, clip=1.0, bf16=True)
    bf16 = ["--bf16", "--zero-stage", 0]
    base = lambda c: flags(data, vocab, merges, c, 1, 2) + bf16  # noqa: E731
    ck = os.path.join(d, "ck")
    m1 = run_mds(base(ck), os.path.join(d, "run1"), "ucm-1", ds, 2)
    if not check(m1.ok, f"mds: first launch failed\n{m1.tail()}"):
        return
    copy(ck, ck + "-own")
    m2 = run_mds(base(ck + "-own"), os.path.join(d, "run2"), "ucm-2", ds, 2)
    out = reshape_universal(ck)
    if not (check(m2.ok, f"mds: own resume failed\n{m2.tail()}") and out):
        return
    copy(out, out + "-tp2")
    u1 = run_mds(base(out) + ["--universal-checkpoint"], os.path.join(d, "run-u1"), "ucm-u1", ds, 2)
    u2 = run_mds(with_flags(base(out + "-tp2"), 2, 1, ["--universal-checkpoint"]), os.path.join(d, "run-u2"),
                 "ucm-u2", ds, 2)
    print(f"mds: 10 ({m1.seconds:.1f} s), own resume ({m2.seconds:.1f} s), universal TP1 PP2 ({u1.seconds:.1f} s), "
          f"TP2 PP1 ({u2.seconds:.1f} s)")
    if check(u1.ok, f"mds: universal resume TP1 PP2 failed\n{u1.tail()}"):
        compare("mds bf16 universal TP1 PP2 vs own resume", u1, m2, ITS, tol=1e-6)
    if check(u2.ok, f"mds: universal resume TP2 PP1 failed\n{u2.tail()}"):
        compare("mds bf16 universal TP2 PP1 vs own resume", u2, m2, ITS, tol=1e-3)
    # Another vocabulary padding (--make-vocab-size-divisible-by 1024 at TP=2: 2048 rows): the universal rows are
    # zero-padded as DeepSpeed pads them; the curve changes (more logits), so only the resume itself is checked.
    copy(out, out + "-vocab")
    u3 = run_mds(with_flags(base(out + "-vocab"), 2, 1, ["--universal-checkpoint", "--make-vocab-size-divisible-by",
                                                          1024]), os.path.join(d, "run-u3"), "ucm-u3", ds, 2)
    if check(u3.ok, f"mds: universal resume with another vocabulary padding failed\n{u3.tail()}"):
        got = [it["iteration"] for it in u3.iterations]
        check(got == ITS, f"mds: universal resume with another vocabulary padding logged iterations {got}")
        print("  mds bf16 universal TP2 PP1, vocabulary padded to 2048: resumed, iterations 11..20 logged")
    return out


def errors_case(tmp, data, vocab, merges, universal_root):
    """Clear errors: no latest_universal; a missing parameter; a wrong shape."""
    d = os.path.join(tmp, "errors")
    os.makedirs(d)
    import torch

    def expect(what, root, needle):
        r = bmd_harness.run_mds_train(os.path.join(BIN, "mds-train"),
                                      with_flags(flags(data, vocab, merges, root, 1, 1, train_iters=12), 1, 1,
                                                 ["--bf16", "--zero-stage", 0, "--universal-checkpoint"]),
                                      1, os.path.join(d, "run-" + what), name="uce-" + what, timeout=200)
        text = "\n".join(r.logs)
        check(not r.ok and needle in text, f"errors {what}: expected a failure mentioning {needle!r}, got rc "
                                           f"{r.returncode}\n{r.tail()}")
        if not r.ok and needle in text:
            line = next((ln for ln in text.splitlines() if needle in ln), "")
            print(f"  errors {what}: {line.strip()[:300]}")

    plain = os.path.join(d, "plain")
    os.makedirs(plain)
    expect("no-latest-universal", plain, "latest_universal does not exist")
    if not universal_root:
        return
    tag = open(os.path.join(universal_root, "latest_universal")).read().strip()
    missing = os.path.join(d, "missing")
    copy(universal_root, missing)
    name = "3.self_attention.dense.weight"
    shutil.rmtree(os.path.join(missing, tag, "zero", name))
    expect("missing-param", missing, os.path.join(name, "fp32.pt") + ": missing")
    notuc = os.path.join(d, "not-universal")
    copy(universal_root, notuc)
    with open(os.path.join(notuc, "latest_universal"), "w") as f:
        f.write(tag.replace("_universal", ""))
    expect("not-universal", notuc, "is not a universal checkpoint folder (no zero/")
    shape = os.path.join(d, "shape")
    copy(universal_root, shape)
    f = os.path.join(shape, tag, "zero", name, "fp32.pt")
    sd = torch.load(f, weights_only=False)
    sd["param"] = sd["param"][:, :32].clone()
    torch.save(sd, f)
    expect("wrong-shape", shape, "fp32.pt: shape [64, 32], expected [64, 64]")


def main():
    names = sys.argv[1:] or ["pp2", "dp2", "mds", "errors"]
    tmp = tempfile.mkdtemp(prefix="bmd-universal-")
    started = time.time()
    build_dir = os.environ.get("MDS_BUILD_DIR")
    cache = os.path.join(build_dir, "crosscheck-cache") if build_dir else None
    data, vocab, merges = tiny_dataset.make(tmp, BIN, SOURCE, 512)
    ds = bmd_harness.ds_config(micro_batch_size=2, global_batch_size=4, zero_stage=1, clip=1.0)
    universal_root = None
    if any(n in BMD_SOURCES for n in names):
        tree = bmd_harness.BmdTree(os.path.join(tmp, "bmd-tree"), source_dir=SOURCE, cache_dir=cache)
        for n in names:
            if n in BMD_SOURCES:
                bmd_case(tree, tmp, data, vocab, merges, ds, n)
    if "mds" in names:
        universal_root = mds_case(tmp, data, vocab, merges)
    if "errors" in names:
        errors_case(tmp, data, vocab, merges, universal_root)
    bmd_harness.finish(started, tmp)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The model-variant flags of Megatron-DeepSpeed change mds-train's model exactly as they change the real one
(issue 18): --glu-activation (swiglu, geglu), the GeLU kinds (--no-bias-gelu-fusion: F.gelu; --openai-gelu;
--onnx-safe: erf_gelu), --apply-residual-connection-post-layernorm, --kv-channels and --fp32-residual-connection
(in bf16, ZeRO stage 0, at test_bmd_resume's bf16 tolerance 1e-3; the others in fp32 at 1e-5), through the harness
of bmd_harness.py with the SAME flags on both sides (those of test_bmd_resume.py: the tiny GPT, 2 layers, hidden 64,
4 heads, seq 64, micro-batch 2, global batch 4, fp32, ZeRO stage 1, dropout off), on 2 ranks (DP=2, or TP=2 for
the `-tp2` cases, PP=2 for the `-pp2` ones):
  - the real program trains 10 iterations from scratch and saves at 5 and 10; mds-train resumes its step-5
    checkpoint (a copy whose `latest` names global_step5) and must log iterations 6..10 with the real program's
    losses and grad norms (relative 1e-5; the real curve after step 5 is the one a resume gives: test_bmd_resume
    shows the real program's resume continues its run exactly);
  - in the `-back` cases the other way: mds-train trains 10 from scratch (saving at 5), the real program resumes
    mds's step-5 checkpoint and must give mds's curve 6..10; mds's checkpoint records the variant flags in its
    `args` exactly as the real one does (glu_activation, bias_gelu_fusion, openai_gelu, onnx_safe,
    apply_residual_connection_post_layernorm, kv_channels) and has the real one's param_shapes.
A wrong GLU half order, residual or QKV width shows up at once. The GeLU cases run at --init-method-std 0.3 (at
0.02 the MLP's inputs are so small that the tanh and erf forms give curves only ~2e-6 apart): measured there, mds
with the tanh form against the real program's exact GeLU (or openai_gelu against F.gelu) is 5e-5 apart in grad norm,
the right form 2.5e-7. What this cannot see: erf_gelu's 1.41421 against sqrt(2) (~1e-7; the unit test
tests/unit/model/test_model_variants.cpp checks the formula), and --fp32-residual-connection on or off (the two
programs' bf16 / fp16 rounding, 1.6e-4 / 2.4e-5, is larger than the effect: measured 3e-4 / 6e-5 with it off in mds
only); those cases show the fp32 hidden states (exchanged between pipeline stages at PP=2) run and resume both ways
within the half-precision tolerance.
Exits 77 without ../shared/third_party, the Python packages, or the mds binaries.
Runs: `MDS_BIN=build/bin .venv/bin/python tests/crosscheck/test_bmd_variants.py [swiglu geglu-tp2 postln-back ...]`."""
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bmd_harness  # noqa: E402
import test_bmd_resume as resume  # noqa: E402  (its flags, mds launcher and curve comparison; exits 77 as it does)
import tiny_dataset  # noqa: E402
from bmd_harness import check  # noqa: E402

GLU = ["--no-bias-gelu-fusion"]
GELU_INIT = ["--init-method-std", "0.3"]
VARIANTS = {  # name: extra flags, on top of test_bmd_resume's
    "swiglu": GLU + ["--glu-activation", "swiglu"],
    "geglu": GLU + ["--glu-activation", "geglu"],
    "reglu": GLU + ["--glu-activation", "reglu"],
    "liglu": GLU + ["--glu-activation", "liglu"],
    # The GeLU kinds differ where |x| ~ 1 and beyond: at --init-method-std 0.02 the MLP's inputs are ~0.16 and
    # the tanh form and the exact one give curves 2e-6 apart; at 0.3 they are far more than 1e-5 apart.
    "gelu": GELU_INIT + ["--no-bias-gelu-fusion"],
    "openai": GELU_INIT + ["--no-bias-gelu-fusion", "--openai-gelu"],
    "onnx": GELU_INIT + ["--no-bias-gelu-fusion", "--onnx-safe", "1"],
    "postln": ["--apply-residual-connection-post-layernorm"],
    "kv": ["--kv-channels", "24"],  # 4 heads x 24 = 96 != hidden 64
    "fp32res": ["--fp32-residual-connection"],  # bf16 only (as BMD asserts): see PRECISION
}
# Variants run in another precision than fp32: test_bmd_resume.PRECISIONS' name (flags, DeepSpeed config, tolerance,
# ZeRO stage). bf16 rounds differently in the two programs (test_bmd_resume measured up to 3.8e-4 relative).
PRECISION = {"fp32res": "bf16"}
# The args attributes these flags set, compared between the two programs' checkpoints.
KEYS = ["glu_activation", "bias_gelu_fusion", "openai_gelu", "onnx_safe", "apply_residual_connection_post_layernorm",
        "kv_channels", "fp32_residual_connection", "ffn_hidden_size", "hidden_size", "num_attention_heads"]
ITERATIONS = list(range(6, 11))
# Every default variant both ways (mds resumes the real checkpoint; the real program resumes mds's). About 3 minutes
# on 2 cores when they are free (a real run of 10 iterations takes 8-20 s, up to 60 s under load); "swiglu",
# "postln", "kv", "reglu", "liglu", "fp32res" and other -tp2 / -pp2 / -back forms run by name.
DEFAULT = ["geglu", "swiglu-tp2", "gelu", "openai", "onnx", "postln-tp2", "kv-tp2", "fp32res-pp2", "geglu-back",
           "swiglu-tp2-back", "gelu-back", "openai-back", "onnx-back", "postln-tp2-back", "kv-tp2-back", "fp32res-pp2-back"]


def variant_flags(data, vocab, merges, ck, tp, extra):
    # After flags()' own: the last of a repeated flag counts, for both programs.
    return resume.flags(data, vocab, merges, ck, tp, 1, train_iters=10, exit_interval=10) + ["--save-interval", 5] + extra


def at_step5(src, dst):
    """A copy of checkpoint folder `src` that resumes from global_step5."""
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    shutil.rmtree(os.path.join(dst, "global_step10"), ignore_errors=True)
    with open(os.path.join(dst, "latest"), "w") as f:
        f.write("global_step5")


def compare_args(name, real_root, mds_root, mp_size):
    for mp in range(mp_size):
        f = f"global_step5/mp_rank_{mp:02d}_model_states.pt"
        real, mds = resume.load_torch(os.path.join(real_root, f)), resume.load_torch(os.path.join(mds_root, f))
        ra, ma = vars(real["args"]), vars(mds["args"])
        for k in KEYS:
            check(k in ma and type(ma[k]) is type(ra.get(k)) and ma[k] == ra.get(k),
                  f"{name} {f}: args.{k} = {ma.get(k)!r} in mds's, {ra.get(k)!r} in the real one")
        shapes = lambda sd: [[(k, tuple(v)) for k, v in g.items()] for g in sd["param_shapes"]]  # noqa: E731
        check(shapes(mds) == shapes(real), f"{name} {f}: param_shapes {shapes(mds)}, the real one {shapes(real)}")


def case(tree, tmp, data, vocab, merges, name, ds, real_runs):
    parts = name.split("-")
    variant, tp, pp, back = parts[0], 2 if "tp2" in parts else 1, 2 if "pp2" in parts else 1, "back" in parts
    extra, tol = VARIANTS[variant] + ["--pipeline-model-parallel-size", pp], 1e-5
    if variant in PRECISION:
        pflags, ds_extra, tol, zero = resume.PRECISIONS[PRECISION[variant]]
        extra = extra + pflags + ["--zero-stage", zero]
        ds = bmd_harness.ds_config(micro_batch_size=2, global_batch_size=4, zero_stage=zero, clip=1.0, **ds_extra)
    d = os.path.join(tmp, name)
    os.makedirs(d)
    key = f"{variant}-tp{tp}-pp{pp}"
    # The real program's 10 iterations from scratch (shared by a case and its -back twin).
    if key not in real_runs:
        ck = os.path.join(d, "real")
        r = tree.run(variant_flags(data, vocab, merges, ck, tp, extra), nproc=2, ds_config=ds, name=name + "-real",
                     timeout=400)
        if not check(r.ok, f"{name}: real run failed (rc {r.returncode})\n{r.tail()}"):
            return
        real_runs[key] = (r, ck)
    real, real_ck = real_runs[key]
    if not back:
        at_step5(real_ck, os.path.join(d, "real-5"))
        m = resume.run_mds(variant_flags(data, vocab, merges, os.path.join(d, "real-5"), tp, extra),
                           os.path.join(d, "run-mds"), name + "-mds", ds)
        print(f"{name}: real 10 ({real.seconds:.1f} s), mds resumes at 5 ({m.seconds:.1f} s)")
        if check(m.ok, f"{name}: mds-train resuming the real checkpoint failed (rc {m.returncode})\n{m.tail()}"):
            resume.compare(f"{name} mds resumes real", m, real, ITERATIONS, tol=tol)
        return
    ck = os.path.join(d, "mds")
    m = resume.run_mds(variant_flags(data, vocab, merges, ck, tp, extra), os.path.join(d, "run-mds"), name + "-mds", ds)
    if not check(m.ok, f"{name}: mds-train run failed (rc {m.returncode})\n{m.tail()}"):
        return
    compare_args(name, real_ck, ck, tp * pp)
    at_step5(ck, os.path.join(d, "mds-5"))
    r = tree.run(variant_flags(data, vocab, merges, os.path.join(d, "mds-5"), tp, extra), nproc=2, ds_config=ds,
                 name=name + "-real-from-mds", timeout=400)
    print(f"{name}: mds 10 ({m.seconds:.1f} s), real resumes at 5 ({r.seconds:.1f} s)")
    if check(r.ok, f"{name}: the real program resuming mds's checkpoint failed (rc {r.returncode})\n{r.tail()}"):
        resume.compare(f"{name} real resumes mds", r, m, ITERATIONS, tol=tol)


def main():
    names = sys.argv[1:] or DEFAULT
    for n in names:
        if n.split("-")[0] not in VARIANTS:
            sys.exit(f"unknown case {n!r}: <{'|'.join(VARIANTS)}>[-tp2|-pp2][-back]")
    tmp = tempfile.mkdtemp(prefix="bmd-variants-")
    started = time.time()
    build_dir = os.environ.get("MDS_BUILD_DIR")
    cache = os.path.join(build_dir, "crosscheck-cache") if build_dir else None
    data, vocab, merges = tiny_dataset.make(tmp, resume.BIN, resume.SOURCE, 512)
    tree = bmd_harness.BmdTree(os.path.join(tmp, "bmd"), source_dir=resume.SOURCE, cache_dir=cache)
    ds = bmd_harness.ds_config(micro_batch_size=2, global_batch_size=4, zero_stage=1, clip=1.0)
    real_runs = {}
    for name in names:
        case(tree, tmp, data, vocab, merges, name, ds, real_runs)
    bmd_harness.finish(started, tmp)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The cross-check harness against BigScience's real Megatron-DeepSpeed (bmd_harness.py) works: on the tiny
dataset mds makes itself (mds-tokenizer-train + mds-preprocess), the real pretrain_gpt.py trains a tiny GPT
(2 layers, hidden 64, 4 heads, seq 64, micro-batch 2, global batch 4, fp32, dropout as default) with DeepSpeed
ZeRO stage 1 the way BigScience's scripts launch it (--deepspeed --deepspeed_config, 2 ranks over Gloo; stage 1
because at stage 0 in fp32 DeepSpeed clips without keeping the norm, so Megatron logs no grad norm) at
  - PP=1 (DP=2), PP=2 and TP=2,
for 10 of 20 iterations (--exit-interval 10 saves and exits), then resumes with the same flags to 20.
Asserts for each:
  - both launches exit 0; the first logs iterations 1..10 (and no Megatron timer line between them: with
    --deepspeed the step runs in DeepSpeed's engine), the resume 11..20 (consumed samples 44 at 11) after
    "successfully loaded checkpoint"; every loss and grad norm is finite; the loss decreases over the first
    ten iterations; the resume continues (loss at 11 near loss at 10, well below the loss at 1) and its
    learning rate at 11 is the cosine schedule's value after 44 samples (5.5e-4); and the 20 losses and grad
    norms of stop + resume equal, bit for bit, those of one run of 20 iterations with the same flags;
  - the checkpoint has DeepSpeed's pipeline layout: `latest` = global_step10, then global_step20;
    global_step10/ holds exactly layer_01/03/04/06-model_TT-model_states.pt, mp_rank_MM_model_states.pt and
    zero_pp_rank_D_mp_rank_MM_optim_states.pt for every TP / model-parallel / data-parallel rank;
  - mp_rank_00 loads with torch.load: iteration 10, checkpoint_version 3.0, args a Namespace with
    tokenizer_type GPT2BPETokenizer and 40 consumed samples; the optimizer file holds apex FusedAdam's three
    parameter groups with step 10.
Exits 77 without ../shared/third_party, the Python packages, or the mds binaries that make the data.
Runs: `MDS_BIN=build/bin .venv/bin/python tests/crosscheck/test_bmd_harness.py [pp1 pp2 tp2]`."""
import math
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bmd_harness  # noqa: E402

SOURCE = os.environ.get("MDS_SOURCE_DIR", os.path.join(HERE, "..", ".."))
BIN = os.environ.get("MDS_BIN", os.path.join(SOURCE, "build", "bin"))

bmd_harness.skip_unless_available(SOURCE)
for tool in ("mds-tokenizer-train", "mds-preprocess"):
    if not os.path.exists(os.path.join(BIN, tool)):
        print(f"SKIP: {os.path.join(BIN, tool)} not built (it makes the tiny dataset)")
        sys.exit(77)

import tiny_dataset  # noqa: E402

from bmd_harness import check  # noqa: E402


CONFIGS = {  # name: (TP, PP) on 2 ranks
    "pp1": (1, 1),
    "pp2": (1, 2),
    "tp2": (2, 1),
}
LAYERS = 2


def flags(data, vocab, merges, save, tp, pp):
    return ["--tensor-model-parallel-size", tp, "--pipeline-model-parallel-size", pp,
            "--num-layers", LAYERS, "--hidden-size", 64, "--num-attention-heads", 4,
            "--seq-length", 64, "--max-position-embeddings", 64,
            "--micro-batch-size", 2, "--global-batch-size", 4, "--train-iters", 20, "--exit-interval", 10,
            "--optimizer", "adam", "--adam-beta1", 0.9, "--adam-beta2", 0.95, "--adam-eps", "1e-8",
            "--lr", "1e-3", "--min-lr", "1e-4", "--lr-decay-style", "cosine", "--lr-warmup-iters", 2,
            "--clip-grad", 1.0, "--weight-decay", 0.1, "--seed", 42, "--init-method-std", 0.02,
            "--data-path", data, "--data-impl", "mmap", "--split", "90,8,2",
            # no --tokenizer-type: pretrain_gpt.py's default (GPT2BPETokenizer), as in BigScience's scripts
            "--vocab-file", vocab, "--merge-file", merges,
            "--log-interval", 1, "--eval-interval", 1000, "--eval-iters", 1,
            "--save-interval", 1000, "--save", save, "--load", save,
            "--distributed-backend", "gloo", "--zero-stage", 1]


def without(flag_list, *pairs):
    """flag_list without the named flags (each given with its number of values)."""
    out = list(flag_list)
    for flag, nvalues in zip(pairs[::2], pairs[1::2]):
        i = out.index(flag)
        del out[i:i + 1 + nvalues]
    return out


def expected_files(tp, pp, dp):
    names = set()
    for layer in [1] + [3 + i for i in range(LAYERS)] + [LAYERS + 4]:
        for t in range(tp):
            names.add(f"layer_{layer:02d}-model_{t:02d}-model_states.pt")
    for m in range(tp * pp):
        names.add(f"mp_rank_{m:02d}_model_states.pt")
        for d in range(dp):
            names.add(f"zero_pp_rank_{d}_mp_rank_{m:02d}_optim_states.pt")
    return names


def finite(xs):
    return all(isinstance(x, float) and math.isfinite(x) for x in xs)


def check_checkpoint_contents(name, root):
    os.environ.setdefault("DS_ACCELERATOR", "cpu")  # bmd_checkpoint imports deepspeed: no accelerator probe
    import torch
    import bmd_checkpoint  # noqa: F401  (megatron.enums stand-in so the pickled args resolve)
    states = torch.load(os.path.join(root, "global_step10", "mp_rank_00_model_states.pt"), map_location="cpu",
                        weights_only=False)
    check(states.get("iteration") == 10, f"{name}: mp_rank_00 iteration {states.get('iteration')}, expected 10")
    check(states.get("checkpoint_version") == 3.0, f"{name}: checkpoint_version {states.get('checkpoint_version')}")
    args = states.get("args")
    check(type(args).__name__ == "Namespace", f"{name}: args is {type(args)}")
    check(getattr(args, "tokenizer_type", None) == "GPT2BPETokenizer",
          f"{name}: args.tokenizer_type {getattr(args, 'tokenizer_type', None)!r}")
    check(getattr(args, "consumed_train_samples", None) == 40,
          f"{name}: args.consumed_train_samples {getattr(args, 'consumed_train_samples', None)}")
    optim = torch.load(os.path.join(root, "global_step10", "zero_pp_rank_0_mp_rank_00_optim_states.pt"),
                       map_location="cpu", weights_only=False)
    groups = optim["optimizer_state_dict"]["base_optimizer_state"]["param_groups"]
    check(len(groups) == 3 and all(g.get("step") == 10 for g in groups),
          f"{name}: optimizer param groups {[(g.get('step'), g.get('weight_decay')) for g in groups]}, "
          f"expected apex FusedAdam's three groups at step 10")
    state = optim["optimizer_state_dict"]["base_optimizer_state"]["state"]
    check(all(set(s) == {"exp_avg", "exp_avg_sq"} for s in state.values()),
          f"{name}: optimizer state keys {[sorted(s) for s in state.values()]}")


def in_training(text):
    """The lines of a rank's log from its first iteration line to its last."""
    lines = text.splitlines()
    marks = [i for i, line in enumerate(lines) if line.lstrip().startswith("iteration ")]
    return lines[marks[0]:marks[-1] + 1] if marks else []


def main():
    names = sys.argv[1:] or list(CONFIGS)
    tmp = tempfile.mkdtemp(prefix="bmd-harness-")
    started = time.time()
    build_dir = os.environ.get("MDS_BUILD_DIR")
    cache = os.path.join(build_dir, "crosscheck-cache") if build_dir else None
    data, vocab, merges = tiny_dataset.make(tmp, BIN, SOURCE, 512)
    tree = bmd_harness.BmdTree(os.path.join(tmp, "bmd"), source_dir=SOURCE, cache_dir=cache)
    print(f"prepared the Megatron-DeepSpeed copy and the data in {time.time() - started:.1f} s")
    ds = bmd_harness.ds_config(micro_batch_size=2, global_batch_size=4, zero_stage=1, clip=1.0)
    for name in names:
        tp, pp = CONFIGS[name]
        dp = 2 // (tp * pp)
        save = os.path.join(tmp, "ckpt-" + name)
        f = flags(data, vocab, merges, save, tp, pp)

        first = tree.run(f, nproc=2, ds_config=ds, name=name + "-first", timeout=400)
        print(f"{name}: first launch rc {first.returncode} in {first.seconds:.1f} s")
        if not check(first.ok, f"{name}: first launch failed (rc {first.returncode})\n{first.tail()}"):
            continue
        its = [it["iteration"] for it in first.iterations]
        loss = [it.get("lm loss") for it in first.iterations]
        gnorm = [it.get("grad norm") for it in first.iterations]
        for it in first.iterations:
            print(f"  {it['iteration']:3d} lm loss {it.get('lm loss'):.6f} grad norm {it.get('grad norm')} "
                  f"lr {it.get('learning rate'):.4e}")
        check(its == list(range(1, 11)), f"{name}: first launch logged iterations {its}")
        # With --deepspeed, train_step hands the step to DeepSpeed's pipeline engine and runs none of Megatron's
        # step timers: no "time (ms)" line between the iteration lines (docs/mds-train.md, Timers).
        between = [line for text in first.logs for line in in_training(text) if line.startswith("time (ms)")]
        check(not between, f"{name}: the real program printed timer lines between its iterations: {between[:3]}")
        check(finite(loss), f"{name}: losses not finite: {loss}")
        check(finite(gnorm), f"{name}: grad norms not finite or missing: {gnorm}")
        if finite(loss) and len(loss) == 10:
            check(loss[-1] < loss[0] - 0.1 and sum(loss[-3:]) / 3 < sum(loss[:3]) / 3,
                  f"{name}: loss does not decrease: {loss}")

        tag, files = bmd_harness.checkpoint_files(save)
        check(tag == "global_step10", f"{name}: latest names {tag!r}, expected global_step10")
        want = expected_files(tp, pp, dp)
        check(set(files) == want, f"{name}: global_step10 holds {sorted(files)}; missing "
              f"{sorted(want - set(files))}, unexpected {sorted(set(files) - want)}")
        if tag == "global_step10":
            check_checkpoint_contents(name, save)

        resumed = tree.run(f, nproc=2, ds_config=ds, name=name + "-resume", timeout=400)
        print(f"{name}: resume rc {resumed.returncode} in {resumed.seconds:.1f} s")
        if not check(resumed.ok, f"{name}: resume failed (rc {resumed.returncode})\n{resumed.tail()}"):
            continue
        log = "\n".join(resumed.logs)
        check("successfully loaded checkpoint from" in log, f"{name}: resume did not load the checkpoint")
        its = [it["iteration"] for it in resumed.iterations]
        rloss = [it.get("lm loss") for it in resumed.iterations]
        for it in resumed.iterations:
            print(f"  {it['iteration']:3d} lm loss {it.get('lm loss'):.6f} grad norm {it.get('grad norm')} "
                  f"lr {it.get('learning rate'):.4e}")
        check(its == list(range(11, 21)), f"{name}: resume logged iterations {its}, expected 11..20")
        check(finite(rloss) and finite([it.get("grad norm") for it in resumed.iterations]),
              f"{name}: resumed losses / grad norms not finite: {rloss}")
        if resumed.iterations and finite(rloss) and finite(loss):
            at11 = resumed.iterations[0]
            check(at11.get("consumed samples") == 44, f"{name}: consumed samples at 11: {at11.get('consumed samples')}")
            lr11 = 1e-4 + (1e-3 - 1e-4) * 0.5 * (math.cos(math.pi * (44 - 8) / (80 - 8)) + 1)
            check(abs(at11["learning rate"] - lr11) <= 1e-9 * lr11,
                  f"{name}: learning rate at 11 {at11['learning rate']!r}, the schedule gives {lr11!r}")
            check(abs(rloss[0] - loss[-1]) < 0.1 and rloss[0] < loss[0] - 0.1,
                  f"{name}: resumed loss {rloss[0]} does not continue the first launch ({loss[0]} .. {loss[-1]})")
        tag, _ = bmd_harness.checkpoint_files(save)
        check(tag == "global_step20", f"{name}: latest after the resume names {tag!r}, expected global_step20")

        # The same flags without the exit and the checkpoint: 20 iterations straight. The real program's own
        # stop-and-resume is bitwise continuous on this CPU (dropout on: the RNG states travel), the baseline
        # the cross-resume checks with mds-train compare against.
        straight = tree.run(without(f, "--exit-interval", 1, "--save", 1, "--load", 1), nproc=2, ds_config=ds,
                            name=name + "-straight", timeout=400)
        print(f"{name}: straight 20 iterations rc {straight.returncode} in {straight.seconds:.1f} s")
        if check(straight.ok, f"{name}: straight run failed (rc {straight.returncode})\n{straight.tail()}"):
            key = [(it["iteration"], it.get("lm loss"), it.get("grad norm")) for it in straight.iterations]
            got = [(it["iteration"], it.get("lm loss"), it.get("grad norm"))
                   for it in first.iterations + resumed.iterations]
            check(key == got, f"{name}: stop at 10 + resume differs from 20 straight iterations:\n"
                  + "\n".join(f"  {a} vs {b}" for a, b in zip(key, got) if a != b))

    bmd_harness.finish(started, tmp)


if __name__ == "__main__":
    main()

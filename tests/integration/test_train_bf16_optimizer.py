#!/usr/bin/env python3
"""bf16 at ZeRO stage 0 partitions the optimizer states over data parallelism, as DeepSpeed's BF16_Optimizer does
(tr11-176B-ml's ds_config: "bf16 must use z0! it implements its own zero stage 1 equivalent"):
  - a two-rank bf16 run with --zero-stage 0 (and a DeepSpeed config saying stage 0) reports, on each rank, the
    optimizer-state elements it holds: half of the model's parameters (plus the flat groups' padding), where an
    fp32 run at ZeRO stage 0 holds all of them;
  - `--dry-run --json` for the same flags on 2 GPUs counts the optimizer memory as that partition: 12 bytes per
    held element (fp32 master, Adam's two moments), within the padding of what the run measured, and the gradient
    memory as the fp32 main gradients the run reports (4 bytes for each of the model's parameters);
  - the checkpoint has one BF16-optimizer file per data-parallel rank (bf16_zero_pp_rank_{0,1}_mp_rank_00), each
    with its half of every flat group (single_partition_of_fp32_groups) and partition_count 2, and a resume of it
    on two ranks continues exactly as the uninterrupted run.
Exits 77 without LibTorch (no mds-train binary)."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

SOURCE = os.environ.get("MDS_SOURCE_DIR", ".")
sys.path.insert(0, os.path.join(SOURCE, "tests", "integration"))
sys.path.insert(0, os.path.join(SOURCE, "tests", "crosscheck"))
import testkit  # noqa: E402
from testkit import check  # noqa: E402
import tiny_dataset  # noqa: E402
from test_train_dp import BIN, TRAIN, free_port, rank_env, start, wait_all  # noqa: E402  (the launcher's environment)

HOLDS = re.compile(r"(ZeRO stage 1|BF16 optimizer): each rank holds the optimizer states of about (\d+) of (\d+) parameters")
LOSS = re.compile(r"^ iteration +(\d+)/ +\d+ \|.* lm loss: (\S+) \| grad norm: (\S+) \|", re.M)


def run(args, world=2):
    return wait_all(start(args, world, free_port()))


def flags(data, ds, precision, iters=12, extra=()):
    return [*data, "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "32",
            "--max-position-embeddings", "32", "--micro-batch-size", "2", "--global-batch-size", "8",
            "--train-iters", str(iters), "--lr", "3e-3", "--min-lr", "3e-4", "--lr-decay-style", "cosine",
            "--lr-warmup-iters", "3", "--weight-decay", "0.1", "--clip-grad", "1.0", "--log-interval", "1",
            "--eval-interval", "100", "--eval-iters", "0", "--seed", "7", "--threads", "1", "--device", "cpu",
            "--distributed-backend", "gloo", "--zero-stage", "0", "--deepspeed", "--deepspeed_config", ds,
            *precision, *extra]


def ds_config(path, bf16):
    with open(path, "w") as f:
        json.dump({"train_micro_batch_size_per_gpu": 2, "train_batch_size": 8, "gradient_clipping": 1.0,
                   "zero_optimization": {"stage": 0}, "bf16": {"enabled": bf16}, "steps_per_print": 2000}, f)
    return path


def held(outs, what):
    """(label, elements held, parameters) from rank 0's start-up line (only rank 0 prints it)."""
    m = HOLDS.search(outs[0][2] + outs[0][1])
    check(m is not None, f"{what}: rank 0 did not report the optimizer states it holds: {outs[0][2][-1500:]}")
    return (m.group(1), int(m.group(2)), int(m.group(3))) if m else None


MAIN_GRADS = re.compile(r"gradients accumulated over the micro batches and all-reduced in fp32 \((\d+) fp32 main gradients\)")


def losses(out):
    return [(int(i), float(l), float(g)) for i, l, g in LOSS.findall(out)]


def load_torch(path):
    import torch
    return torch.load(path, map_location="cpu", weights_only=False)


def main():
    tmp = tempfile.mkdtemp(prefix="mds-bf16-optimizer-")
    try:
        prefix, vocab, merges = tiny_dataset.make(tmp, BIN, SOURCE, 400)
        data = ["--data-path", prefix, "--vocab-file", vocab, "--merge-file", merges, "--split", "100,0,0"]
        bf16, fp32 = ds_config(os.path.join(tmp, "bf16.json"), True), ds_config(os.path.join(tmp, "fp32.json"), False)

        # fp32 at ZeRO stage 0: every rank keeps every state (no partition line).
        outs = run(flags(data, fp32, []), 2)
        check(all(rc == 0 for rc, _, _ in outs), f"fp32 ZeRO-0: exits {[o[0] for o in outs]}: {outs[0][2][-1500:]}")
        check(not any(HOLDS.search(e) for _, _, e in outs), "fp32 ZeRO-0 partitioned the optimizer states")

        ckpt = os.path.join(tmp, "ckpt")
        whole = run(flags(data, bf16, ["--bf16"]), 2)
        check(all(rc == 0 for rc, _, _ in whole), f"bf16 ZeRO-0: exits {[o[0] for o in whole]}: {whole[0][2][-1500:]}")
        got = held(whole, "bf16 ZeRO-0")
        if got:
            label, mine, params = got
            check(label == "BF16 optimizer", f"bf16 ZeRO-0: labelled {label}")
            check(abs(mine - params / 2) <= 6, f"bf16 ZeRO-0: rank 0 holds {mine} elements, not half of {params}")
            dry = subprocess.run([TRAIN, *flags(data, bf16, ["--bf16"]), "--dry-run", "--dry-run-gpus", "2", "--json"],
                                 capture_output=True, text=True, env=rank_env(0, 1, free_port()))
            check(dry.returncode == 0, f"dry run exited {dry.returncode}: {dry.stderr[-1500:]}")
            if dry.returncode == 0:
                report = json.loads(dry.stdout)
                stage = report["memory"]["stages"][0]
                measured = mine * 12
                check(report["layout"]["optimizer_partitions"] == 2,
                      f"dry run: optimizer_partitions {report['layout'].get('optimizer_partitions')}, expected 2")
                check(abs(stage["optimizer_bytes"] - measured) <= 12 * 6,
                      f"dry run: {stage['optimizer_bytes']} optimizer bytes per GPU; the run holds {measured}")
                print(f"bf16 ZeRO-0 on 2 ranks: {params} parameters, rank 0 holds {mine} optimizer-state elements "
                      f"({measured} bytes); dry run {stage['optimizer_bytes']} bytes")
                # The fp32 main gradients (every parameter's, on every rank): what the dry run counts as gradients.
                m = MAIN_GRADS.search(whole[0][2] + whole[0][1])
                if check(m is not None, f"bf16 ZeRO-0: no fp32 main gradients line: {whole[0][2][-800:]}"):
                    check(int(m.group(1)) == params and stage["gradients_bytes"] == 4 * params,
                          f"bf16: {m.group(1)} fp32 main gradients for {params} parameters; dry run "
                          f"{stage['gradients_bytes']} gradient bytes")
                    print(f"bf16: {m.group(1)} fp32 main gradients, dry run {stage['gradients_bytes']} gradient bytes")

        # Save at 6, resume on 2 ranks: the same curve as the uninterrupted run.
        first = run(flags(data, bf16, ["--bf16"], extra=["--save", ckpt, "--save-interval", "6", "--exit-interval", "6"]), 2)
        check(all(rc == 0 for rc, _, _ in first), f"bf16 save: exits {[o[0] for o in first]}: {first[0][2][-1500:]}")
        tag = os.path.join(ckpt, "global_step6")
        names = sorted(os.listdir(tag)) if os.path.isdir(tag) else []
        optim = [n for n in names if n.endswith("_optim_states.pt")]
        check(optim == ["bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt", "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt"],
              f"bf16 ZeRO-0 checkpoint optimizer files: {optim}")
        if len(optim) == 2:
            sizes = []
            for n in optim:
                osd = load_torch(os.path.join(tag, n))["optimizer_state_dict"]
                check(osd["partition_count"] == [2] * len(osd["partition_count"]), f"{n}: partition_count {osd['partition_count']}")
                check("zero_stage" not in osd, f"{n}: a ZeRO optimizer's state, not the BF16 optimizer's")
                sizes.append(sum(t.numel() for t in osd["single_partition_of_fp32_groups"]))
            check(sizes[0] == sizes[1] and got is not None and sizes[0] == got[1] and got[2] <= sum(sizes) <= got[2] + 12,
                  f"partition sizes in the files {sizes}, the run held {got}")
        resumed = run(flags(data, bf16, ["--bf16"], extra=["--load", ckpt]), 2)
        check(all(rc == 0 for rc, _, _ in resumed), f"bf16 resume: exits {[o[0] for o in resumed]}: {resumed[0][2][-1500:]}")
        want = [x for x in losses(whole[-1][1]) if x[0] > 6]
        have = losses(resumed[-1][1])
        check(len(want) == 6 and have == want, f"bf16 ZeRO-0 resume: {have} differs from the uninterrupted run {want}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    testkit.finish()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""mds-train on the GPU (label gpu; exits 77 where LibTorch sees no CUDA device): a tiny GPT trained for 8
iterations in fp32 without dropout gives the same per-iteration lm loss on --device cuda as on --device cpu
(to 1e-4 relative: different GEMM and attention kernels, same math), --cross-entropy-loss-fusion's kernels the
same losses as ATen's cross entropy (fp32: to 1e-5; bf16: the first loss to 1e-4), --adam-step-fusion's kernels
the unfused bf16 losses (to 1e-2 relative after the first step), --layernorm-backward-fusion's ATen's LayerNorm's
(fp32: to 1e-5), --bias-grad-fusion's autograd's (fp32: to 1e-5), --gradient-accumulation-fusion's (bf16) the
unfused losses (to 2e-2 relative), --residual-layernorm-fusion's (fp32: to 1e-5), --gelu-epilogue-fusion's
(fp32: to 1e-4, through cuBLASLt's epilogues, not ATen's steps), the step's timers on CUDA events and at most 6 host
waits per iteration in the profiled default run, bf16 / fp16 with ALiBi and activation recomputation train on
the GPU with the loss falling; a GPU checkpoint (saved at --exit-interval) holds the CUDA generator state and
resumes on the GPU, and on the CPU with --no-load-rng. On a GPU the four fusions are on by default (docs/mds-train.md#fused-kernels): each comparison above runs the others off (--no-X),
and the default bf16 run names the four and stays close to the unfused one."""
import os
import re
import subprocess
import sys
import tempfile

SOURCE = os.environ.get("MDS_SOURCE_DIR", ".")
BIN = os.environ.get("MDS_BIN", "build/bin")
TRAIN = os.path.join(BIN, "mds-train")
sys.path.insert(0, os.path.join(SOURCE, "tests", "crosscheck"))
import tiny_dataset  # noqa: E402

if not os.path.exists(TRAIN):
    print("SKIP: mds-train not built")
    sys.exit(77)


FUSIONS = ["--cross-entropy-loss-fusion", "--adam-step-fusion", "--layernorm-backward-fusion", "--bias-grad-fusion"]
UNFUSED = ["--no-" + f[2:] for f in FUSIONS]


def only(flag):
    """`flag` on, the other fusions off."""
    return [flag, *(u for u in UNFUSED if u != "--no-" + flag[2:])]


def train(data, device, extra=(), log=None, out=None):
    args = [TRAIN, *data, "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "64",
            "--max-position-embeddings", "64", "--micro-batch-size", "4", "--global-batch-size", "8", "--train-iters", "8",
            "--lr", "1e-3", "--log-interval", "1", "--eval-iters", "0", "--hidden-dropout", "0", "--attention-dropout", "0",
            "--device", device, *extra]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0 and "no CUDA device" in r.stderr:
        print("SKIP: no CUDA device")
        sys.exit(77)
    if r.returncode != 0:
        raise SystemExit(f"FAIL: {' '.join(args)}: {r.stderr[-1500:]}")
    if log is not None:
        log.append(r.stderr)
    if out is not None:
        out.append(r.stdout)
    return [float(x) for x in re.findall(r"\| lm loss: (\S+) \|", r.stdout)]


def stays_close(losses, ref, first, rest):
    """8 losses, the first within `first` of `ref`'s first and every one within `rest` of `ref`'s (relative)."""
    return (len(losses) == 8 and abs(losses[0] - ref[0]) <= first * abs(ref[0])
            and all(abs(a - b) <= rest * abs(b) for a, b in zip(losses, ref)))


def _has_enums():
    try:
        import bmd_checkpoint  # noqa: F401  (stand-in megatron.enums for torch.load)
        return True
    except Exception:  # noqa: BLE001
        return False


def main():
    with tempfile.TemporaryDirectory() as tmp:
        prefix, vocab, merges = tiny_dataset.make(tmp, BIN, SOURCE, 1000)
        data = ["--data-path", prefix, "--vocab-file", vocab, "--merge-file", merges, "--split", "90,8,2"]
        gpu = train(data, "cuda", UNFUSED)
        cpu = train(data, "cpu")
        bad = [(i + 1, g, c) for i, (g, c) in enumerate(zip(gpu, cpu)) if abs(g - c) > 1e-4 * abs(c)]
        print(f"fp32 cuda {gpu}\nfp32 cpu  {cpu}")
        if len(gpu) != 8 or bad:
            print(f"FAIL: cuda and cpu losses differ: {bad}")
            return 1
        # --cross-entropy-loss-fusion (kernels/cross_entropy.cu): fp32, the same losses as ATen's cross entropy to
        # fp32 rounding; bf16, the same first loss (the same bf16 logits, fp32 math) and a run that stays close.
        fused = train(data, "cuda", only("--cross-entropy-loss-fusion"))
        print(f"fp32 cuda fused {fused}")
        bad = [(i + 1, f, g) for i, (f, g) in enumerate(zip(fused, gpu)) if abs(f - g) > 1e-5 * abs(g)]
        if len(fused) != 8 or bad:
            print(f"FAIL: --cross-entropy-loss-fusion changes the fp32 losses on cuda: {bad}")
            return 1
        bf16 = train(data, "cuda", ["--bf16", *UNFUSED])
        bf16_fused = train(data, "cuda", ["--bf16", *only("--cross-entropy-loss-fusion")])
        print(f"bf16 cuda {bf16}\nbf16 cuda fused {bf16_fused}")
        if not stays_close(bf16_fused, bf16, 1e-4, 2e-2):
            print("FAIL: --cross-entropy-loss-fusion in bf16 on cuda strays from the unfused losses")
            return 1
        # --adam-step-fusion (kernels/adam.cu): the first loss is before any step, so equal; the rest close (the
        # same update to fp32 rounding, bf16 weights rounded from nearly equal masters).
        adam_fused = train(data, "cuda", ["--bf16", *only("--adam-step-fusion")])
        print(f"bf16 cuda adam-step-fusion {adam_fused}")
        if not stays_close(adam_fused, bf16, 1e-6, 1e-2):
            print("FAIL: --adam-step-fusion in bf16 on cuda strays from the unfused losses")
            return 1
        # --layernorm-backward-fusion (kernels/layer_norm.cu): fp32, ATen's losses to fp32 rounding; bf16, the same
        # first loss (the same forward) and a run that stays close.
        ln = train(data, "cuda", only("--layernorm-backward-fusion"))
        bf16_ln = train(data, "cuda", ["--bf16", *only("--layernorm-backward-fusion")])
        print(f"fp32 cuda layernorm-backward-fusion {ln}\nbf16 cuda layernorm-backward-fusion {bf16_ln}")
        if not stays_close(ln, gpu, 1e-6, 1e-5) or not stays_close(bf16_ln, bf16, 1e-6, 2e-2):
            print("FAIL: --layernorm-backward-fusion on cuda strays from ATen's LayerNorm's losses")
            return 1
        # --bias-grad-fusion (kernels/bias_grad.cu): the same forward; fp32 gradients to fp32 rounding.
        bg = train(data, "cuda", only("--bias-grad-fusion"))
        bf16_bg = train(data, "cuda", ["--bf16", *only("--bias-grad-fusion")])
        print(f"fp32 cuda bias-grad-fusion {bg}\nbf16 cuda bias-grad-fusion {bf16_bg}")
        if not stays_close(bg, gpu, 1e-6, 1e-5) or not stays_close(bf16_bg, bf16, 1e-6, 2e-2):
            print("FAIL: --bias-grad-fusion on cuda strays from autograd's bias gradients' losses")
            return 1
        # --gradient-accumulation-fusion (cuBLAS, bf16 inputs into the fp32 main gradients): the same first loss, and
        # the run close to the unfused one (each micro batch's weight gradient no longer rounded to bf16).
        ga = train(data, "cuda", ["--bf16", *UNFUSED, "--gradient-accumulation-fusion"])
        print(f"bf16 cuda gradient-accumulation-fusion {ga}")
        if not stays_close(ga, bf16, 1e-6, 2e-2):
            print("FAIL: --gradient-accumulation-fusion on cuda strays from the unfused losses")
            return 1
        # --residual-layernorm-fusion (kernels/layer_norm.cu's forward with the residual sum): fp32, the unfused losses
        # to fp32 rounding; bf16, the same first loss (the same sums, the LayerNorm to one bf16 rounding) and close.
        rln = train(data, "cuda", [*UNFUSED, "--residual-layernorm-fusion"])
        bf16_rln = train(data, "cuda", ["--bf16", *UNFUSED, "--residual-layernorm-fusion"])
        print(f"fp32 cuda residual-layernorm-fusion {rln}\nbf16 cuda residual-layernorm-fusion {bf16_rln}")
        if not stays_close(rln, gpu, 1e-5, 1e-5) or not stays_close(bf16_rln, bf16, 1e-2, 2e-2):
            print("FAIL: --residual-layernorm-fusion on cuda strays from the unfused losses")
            return 1
        # --gelu-epilogue-fusion (cuBLASLt's GELU_AUX_BIAS and DGELU epilogues): fp32, the unfused losses to fp32
        # rounding (other products' summation orders); bf16, close (the GeLU applied before fc1's output is rounded).
        # Both through cuBLASLt, not ATen's steps: no warning that it refused the operands.
        glog = []
        ge = train(data, "cuda", [*UNFUSED, "--gelu-epilogue-fusion"], glog)
        bf16_ge = train(data, "cuda", ["--bf16", *UNFUSED, "--gelu-epilogue-fusion"], glog)
        print(f"fp32 cuda gelu-epilogue-fusion {ge}\nbf16 cuda gelu-epilogue-fusion {bf16_ge}")
        if any("ATen's steps instead" in text for text in glog):
            print("FAIL: --gelu-epilogue-fusion fell back to ATen's steps on cuda: " +
                  " ".join(line for text in glog for line in text.splitlines() if "gelu-epilogue" in line))
            return 1
        if not stays_close(ge, gpu, 1e-5, 1e-4) or not stays_close(bf16_ge, bf16, 1e-2, 2e-2):
            print("FAIL: --gelu-epilogue-fusion on cuda strays from the unfused losses")
            return 1
        # The default on a GPU: the four fusions, named on stderr; the losses those of the unfused run, closely.
        # The step's timers run on CUDA events: a line per iteration with positive times; the profiled iterations
        # wait for the device only to read the loss, the gradient norm and the timers of the log line (BMD's
        # synchronizing timers and pageable uploads made it about 20 times per iteration here).
        log, out = [], []
        default = train(data, "cuda", ["--bf16", "--profile", "--use-pytorch-profiler", "--profile-step-start", "4",
                                       "--profile-step-end", "6", "--tensorboard-dir", os.path.join(tmp, "tb")], log, out)
        timers = re.findall(r"time \(ms\) \| forward-compute: (\S+) \| backward-compute: (\S+)", out[0])
        syncs = re.search(r"host synchronisations: (\S+) per iteration", log[0])
        print("\n".join(line for line in log[0].splitlines() if "profiler:" in line and ("synchronis" in line or " x " in line)))
        if len(timers) != 8 or not all(float(f) > 0 and float(b) > 0 for f, b in timers):
            print(f"FAIL: the default bf16 run on cuda: {len(timers)} timer lines, forward/backward {timers}")
            return 1
        if not syncs or float(syncs.group(1)) > 6:
            print(f"FAIL: the default bf16 run on cuda waits for the device {syncs and syncs.group(1)} times per iteration")
            return 1
        print(f"bf16 cuda default {default}")
        named = re.search(r"fused kernels on cuda:0 by default: (.*) \(", log[0])
        if not named or named.group(1).split() != FUSIONS:
            print(f"FAIL: the default bf16 run on cuda does not name the four fusions: {named and named.group(0)}")
            return 1
        if not stays_close(default, bf16, 1e-4, 2e-2):
            print("FAIL: the default (fused) bf16 run on cuda strays from the unfused losses")
            return 1
        for flags in (["--bf16", "--position-embedding-type", "alibi", "--embed-layernorm", "--checkpoint-activations"],
                      ["--fp16", "--initial-loss-scale", "4096"]):
            losses = train(data, "cuda", ["--lr", "3e-3", *flags])
            print(f"{flags[0]} cuda {losses}")
            if len(losses) != 8 or not losses[-1] < losses[0]:
                print(f"FAIL: {flags[0]} on cuda: the loss did not fall: {losses}")
                return 1
        ck = os.path.join(tmp, "ck")
        first = train(data, "cuda", ["--bf16", "--save", ck, "--save-interval", "100", "--exit-interval", "4"])
        import torch
        mp = torch.load(os.path.join(ck, "global_step4", "mp_rank_00_model_states.pt"), weights_only=False,
                        map_location="cpu") if _has_enums() else None
        if mp is not None and mp["cuda_rng_state"].numel() != torch.cuda.get_rng_state().numel():
            print(f"FAIL: cuda_rng_state has {mp['cuda_rng_state'].numel()} bytes")
            return 1
        resumed = train(data, "cuda", ["--bf16", "--load", ck])
        on_cpu = train(data, "cpu", ["--bf16", "--load", ck, "--no-load-rng"])
        print(f"resume: first {first}, on cuda {resumed}, on cpu {on_cpu}")
        if len(first) != 4 or len(resumed) != 4 or len(on_cpu) != 4:
            print("FAIL: the GPU checkpoint did not resume for iterations 5-8")
            return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())

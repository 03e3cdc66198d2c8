"""Cross-check: a few mds-train iterations against the same training written with PyTorch and its ecosystem.

mds-train trains a tiny GPT (fp32, dropout off, 2 micro batches per iteration, warmup + cosine LR, weight decay,
clipping that triggers) for 10 iterations with --log-interval 1. The reference trains transformers'
GPT2LMHeadModel from the same initial weights (mds's initialization, dumped by bin/model_probe and mapped to HF
names) on the same samples (bin/mds-sample-index --print-sample, whose order test_sample_index.py checks against
Megatron), with torch.optim.AdamW in Megatron's two parameter groups (no decay for biases and LayerNorms),
megatron-core's OptimizerParamScheduler for the learning rate, torch.nn.utils.clip_grad_norm_, and the loss of
each micro batch divided by the number of micro batches. Every iteration's lm loss, grad norm and params norm
printed by mds-train must match the reference to the digits Megatron prints.
Exits 77 without torch, transformers, megatron-core or the binaries.
"""

import json
import math
import os
import re
import subprocess
import sys
import tempfile

BIN = os.environ.get("MDS_BIN", "build/bin")
SOURCE = os.environ.get("MDS_SOURCE_DIR", ".")
for exe in ("mds-train", "model_probe"):
    if not os.path.exists(os.path.join(BIN, exe)):
        print(f"SKIP: {exe} not built (no LibTorch)")
        sys.exit(77)
try:
    import torch
    import transformers
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
    from safetensors.torch import load_file
except Exception as e:  # noqa: BLE001
    print(f"SKIP: torch / transformers / megatron-core / safetensors not importable: {e}")
    sys.exit(77)

import logging

import tiny_dataset  # tests/crosscheck: the dataset the training tests share

logging.disable(logging.CRITICAL)
transformers.logging.set_verbosity_error()
torch.set_num_threads(2)

L, H, N, S, MBS, GBS, ITERS, SEED = 2, 64, 4, 32, 2, 4, 10, 1234
LR, MIN_LR, WARMUP, WD, CLIP = 2e-3, 2e-4, 3, 0.1, 0.5


def megatron_to_gpt2(w, L, n, d):
    """The inverse of the mapping in test_model_hf.py: Megatron names/layouts -> GPT2LMHeadModel state dict."""
    def qkv(t):
        rest = t.shape[1:]
        t = t.reshape(n, 3, d, *rest).transpose(0, 1).reshape(3 * n * d, *rest)
        return t.t() if t.dim() == 2 else t
    sd = {"transformer.wte.weight": w["01.word_embeddings.weight"], "transformer.wpe.weight": w["01.position_embeddings.weight"],
          "transformer.ln_f.weight": w[f"{L + 4:02d}.weight"], "transformer.ln_f.bias": w[f"{L + 4:02d}.bias"]}
    for i in range(L):
        k, h = f"{i + 3:02d}.", f"transformer.h.{i}."
        sd[h + "ln_1.weight"], sd[h + "ln_1.bias"] = w[k + "input_layernorm.weight"], w[k + "input_layernorm.bias"]
        sd[h + "attn.c_attn.weight"] = qkv(w[k + "self_attention.query_key_value.weight"])
        sd[h + "attn.c_attn.bias"] = qkv(w[k + "self_attention.query_key_value.bias"])
        sd[h + "attn.c_proj.weight"], sd[h + "attn.c_proj.bias"] = w[k + "self_attention.dense.weight"].t(), w[k + "self_attention.dense.bias"]
        sd[h + "ln_2.weight"], sd[h + "ln_2.bias"] = w[k + "post_attention_layernorm.weight"], w[k + "post_attention_layernorm.bias"]
        sd[h + "mlp.c_fc.weight"], sd[h + "mlp.c_fc.bias"] = w[k + "mlp.dense_h_to_4h.weight"].t(), w[k + "mlp.dense_h_to_4h.bias"]
        sd[h + "mlp.c_proj.weight"], sd[h + "mlp.c_proj.bias"] = w[k + "mlp.dense_4h_to_h.weight"].t(), w[k + "mlp.dense_4h_to_h.bias"]
    sd["lm_head.weight"] = sd["transformer.wte.weight"]
    return {k: v.contiguous() for k, v in sd.items()}


def prepare(tmp):
    prefix, vocab, _ = tiny_dataset.make(tmp, BIN, SOURCE, 500)
    return prefix, len(json.load(open(vocab)))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        prefix, vocab = prepare(tmp)
        padded = (vocab + 127) // 128 * 128
        common = ["--seq-length", str(S), "--split", "90,8,2", "--seed", str(SEED)]
        train = [os.path.join(BIN, "mds-train"), "--num-layers", str(L), "--hidden-size", str(H),
                 "--num-attention-heads", str(N), "--max-position-embeddings", str(S), "--micro-batch-size", str(MBS),
                 "--global-batch-size", str(GBS), "--train-iters", str(ITERS), "--lr", str(LR), "--min-lr", str(MIN_LR),
                 "--lr-decay-style", "cosine", "--lr-warmup-iters", str(WARMUP), "--weight-decay", str(WD),
                 "--clip-grad", str(CLIP), "--hidden-dropout", "0", "--attention-dropout", "0", "--log-interval", "1",
                 "--log-params-norm", "--eval-iters", "0", "--data-path", prefix, "--vocab-file", tmp + "/tok/vocab.json",
                 "--merge-file", tmp + "/tok/merges.txt", "--threads", "2", *common]
        r = subprocess.run(train, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"FAIL: mds-train exited {r.returncode}: {r.stderr[-2000:]}")
            return 1
        ours = []
        for line in r.stdout.splitlines():
            m = re.search(r"lm loss: (\S+) \| grad norm: (\S+) \| params norm: (\S+) \|", line)
            if m:
                ours.append(tuple(float(x) for x in m.groups()))
        if len(ours) != ITERS:
            print(f"FAIL: expected {ITERS} iteration lines with loss, grad norm and params norm:\n{r.stdout}")
            return 1

        # The same initial weights: mds's initialization for this seed.
        init = tmp + "/init.safetensors"
        subprocess.run([os.path.join(BIN, "model_probe"), "--out", init, "--init-seed", str(SEED), "--num-layers", str(L),
                        "--hidden-size", str(H), "--ffn-hidden-size", str(4 * H), "--num-attention-heads", str(N),
                        "--seq-length", str(S), "--max-position-embeddings", str(S), "--padded-vocab-size", str(padded)],
                       check=True)
        cfg = transformers.GPT2Config(vocab_size=padded, n_positions=S, n_embd=H, n_layer=L, n_head=N, n_inner=4 * H,
                                      activation_function="gelu_fast", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                      layer_norm_epsilon=1e-5, tie_word_embeddings=True)
        cfg._attn_implementation = "eager"
        model = transformers.GPT2LMHeadModel(cfg).float().train()
        model.load_state_dict(megatron_to_gpt2(load_file(init), L, N, H // N), strict=False)

        # The samples mds-train reads, in Megatron's order.
        samples = []
        for i in range(ITERS * GBS):
            out = subprocess.run([os.path.join(BIN, "mds-sample-index"), "--data-path", prefix, "--train-iters", str(ITERS),
                                  "--global-batch-size", str(GBS), "--eval-iters", "0", "--print-sample", str(i), "--json",
                                  "--quiet", *common], capture_output=True, text=True, check=True).stdout
            samples.append(json.loads(out)["sample"]["tokens"])

        decay = [p for n, p in model.named_parameters() if p.dim() == 2]
        no_decay = [p for n, p in model.named_parameters() if p.dim() == 1]
        opt = torch.optim.AdamW([{"params": decay, "wd_mult": 1.0}, {"params": no_decay, "wd_mult": 0.0}], lr=LR,
                                betas=(0.9, 0.999), eps=1e-8, weight_decay=WD)
        sched = OptimizerParamScheduler(opt, init_lr=0.0, max_lr=LR, min_lr=MIN_LR, lr_warmup_steps=WARMUP * GBS,
                                        lr_decay_steps=ITERS * GBS, lr_decay_style="cosine", start_wd=WD, end_wd=WD,
                                        wd_incr_steps=ITERS * GBS, wd_incr_style="constant",
                                        use_checkpoint_opt_param_scheduler=False, override_opt_param_scheduler=False)
        failures = []
        for it in range(ITERS):
            opt.zero_grad()
            losses = []
            for j in range(GBS // MBS):
                batch = torch.tensor(samples[it * GBS + j * MBS: it * GBS + (j + 1) * MBS])
                logits = model(input_ids=batch[:, :-1]).logits
                loss = torch.nn.functional.cross_entropy(logits.reshape(-1, padded), batch[:, 1:].reshape(-1))
                (loss / (GBS // MBS)).backward()
                losses.append(loss.item())
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP).item()
            opt.step()
            sched.step(GBS)
            with torch.no_grad():
                params_norm = math.sqrt(sum(p.double().pow(2).sum().item() for p in model.parameters()))
            ref = (sum(losses) / len(losses), grad_norm, params_norm)
            got = ours[it]
            # Megatron prints the loss with 7 significant digits, the norms with 3 decimals.
            if abs(got[0] - ref[0]) > 2e-6 * abs(ref[0]) + 1e-6:
                failures.append(f"iteration {it + 1}: lm loss {got[0]} vs {ref[0]:.6E}")
            if abs(got[1] - ref[1]) > 1.5e-3 or abs(got[2] - ref[2]) > 1.5e-3:
                failures.append(f"iteration {it + 1}: grad norm {got[1]} vs {ref[1]:.4f}, params norm {got[2]} vs {ref[2]:.4f}")
            print(f"iteration {it + 1}: lm loss mds {got[0]:.6E} torch {ref[0]:.6E} | grad norm {got[1]:.3f} {ref[1]:.3f}"
                  f" | params norm {got[2]:.3f} {ref[2]:.3f}")
        if failures:
            print("\n".join("FAIL: " + f for f in failures))
            return 1
        print(f"OK: {ITERS} mds-train iterations equal the PyTorch + transformers + megatron-core reference")
        return 0


if __name__ == "__main__":
    sys.exit(main())

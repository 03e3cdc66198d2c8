"""Cross-check: mds's GPT model (libcore/model, driven through bin/model_probe) against Hugging Face transformers.

With the same weights and tokens, mds's logits, lm loss and every parameter gradient must equal those of
  1. GPT2LMHeadModel (Megatron GPT: learned absolute positions, tied embeddings, tanh GeLU = HF "gelu_fast",
     padded vocabulary), and
  2. BloomForCausalLM (the BLOOM options: --position-embedding-type alibi --embed-layernorm; a head count that is
     not a power of two exercises the extra ALiBi slopes),
to fp32 tolerance, with HF's eager attention. Weights are random (LayerNorm weights and all biases too), mapped
from HF names and layouts to Megatron's with the rules of HF's own Megatron converters (specs/checkpoints.md §7):
GPT2 Conv1D weights are transposed and the fused QKV rows reordered from [3, heads, d] to [heads, 3, d]; BLOOM
keeps Megatron's layout. The same check runs with --checkpoint-activations (recomputation must not change a
gradient bit beyond tolerance). Also checks the initialization statistics of a fresh mds model against Megatron's
rules (normal(0, std), output projections std / sqrt(2L), zero biases, unit LayerNorm weights).
Exits 77 (skipped) without torch, transformers or safetensors. The probe comes from $MDS_BIN.
"""

import math
import os
import subprocess
import sys
import tempfile

try:
    import torch
    import transformers
    from safetensors.torch import load_file, save_file
except Exception as e:  # noqa: BLE001
    print(f"SKIP: torch / transformers / safetensors not importable: {e}")
    sys.exit(77)

transformers.logging.set_verbosity_error()
PROBE = os.path.join(os.environ.get("MDS_BIN", "build/bin"), "model_probe")
if not os.path.exists(PROBE):
    print(f"SKIP: {PROBE} not built (mds built without LibTorch)")
    sys.exit(77)
failures = []


def check_close(what, ours, ref, rtol=5e-5):
    ours, ref = ours.double(), ref.double()
    if ours.shape != ref.shape:
        failures.append(f"{what}: shape {tuple(ours.shape)} != {tuple(ref.shape)}")
        return
    scale = ref.abs().max().item()
    err = (ours - ref).abs().max().item()
    if not err <= rtol * scale + 1e-7:
        failures.append(f"{what}: max |mds - hf| = {err:.3e} for max |hf| = {scale:.3e}")


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:  # LayerNorm weights around 1, biases around 0: all must reach the output
                base = 1.0 if ("ln" in name or "layernorm" in name) and name.endswith("weight") else 0.0
                p.copy_(base + 0.1 * torch.randn(p.shape, generator=g))
            else:
                # Large MLP input weights put the GeLU inputs in the range where tanh and erf GeLU differ.
                scale = 0.4 if ("c_fc" in name or "dense_h_to_4h" in name) else 0.05
                p.copy_(scale * torch.randn(p.shape, generator=g))


def qkv_hf_to_meg(w, n, d):
    """GPT2 c_attn [h, 3h] (Conv1D, columns [3, n, d]) -> Megatron query_key_value [3h, h], rows [n, 3, d]."""
    t = w.t() if w.dim() == 2 else w
    rest = t.shape[1:]
    return t.reshape(3, n, d, *rest).transpose(0, 1).reshape(3 * n * d, *rest)


def gpt2_to_megatron(sd, L, n, d, grads=False):
    pre = "transformer."
    out = {"01.word_embeddings.weight": sd[pre + "wte.weight"], "01.position_embeddings.weight": sd[pre + "wpe.weight"]}
    for i in range(L):
        h, k = f"{pre}h.{i}.", f"{i + 3:02d}."
        out[k + "input_layernorm.weight"] = sd[h + "ln_1.weight"]
        out[k + "input_layernorm.bias"] = sd[h + "ln_1.bias"]
        out[k + "self_attention.query_key_value.weight"] = qkv_hf_to_meg(sd[h + "attn.c_attn.weight"], n, d)
        out[k + "self_attention.query_key_value.bias"] = qkv_hf_to_meg(sd[h + "attn.c_attn.bias"], n, d)
        out[k + "self_attention.dense.weight"] = sd[h + "attn.c_proj.weight"].t()
        out[k + "self_attention.dense.bias"] = sd[h + "attn.c_proj.bias"]
        out[k + "post_attention_layernorm.weight"] = sd[h + "ln_2.weight"]
        out[k + "post_attention_layernorm.bias"] = sd[h + "ln_2.bias"]
        out[k + "mlp.dense_h_to_4h.weight"] = sd[h + "mlp.c_fc.weight"].t()
        out[k + "mlp.dense_h_to_4h.bias"] = sd[h + "mlp.c_fc.bias"]
        out[k + "mlp.dense_4h_to_h.weight"] = sd[h + "mlp.c_proj.weight"].t()
        out[k + "mlp.dense_4h_to_h.bias"] = sd[h + "mlp.c_proj.bias"]
    out[f"{L + 4:02d}.weight"] = sd[pre + "ln_f.weight"]
    out[f"{L + 4:02d}.bias"] = sd[pre + "ln_f.bias"]
    return {k: v.contiguous().clone() for k, v in out.items()}


def bloom_to_megatron(sd, L):
    pre = "transformer."
    out = {
        "01.word_embeddings.weight": sd[pre + "word_embeddings.weight"],
        "01.word_embeddings.norm.weight": sd[pre + "word_embeddings_layernorm.weight"],
        "01.word_embeddings.norm.bias": sd[pre + "word_embeddings_layernorm.bias"],
        f"{L + 4:02d}.weight": sd[pre + "ln_f.weight"],
        f"{L + 4:02d}.bias": sd[pre + "ln_f.bias"],
    }
    for key, value in sd.items():
        if key.startswith(pre + "h."):
            i, rest = key[len(pre) + 2:].split(".", 1)
            out[f"{int(i) + 3:02d}.{rest}"] = value
    return {k: v.contiguous().clone() for k, v in out.items()}


def run_probe(tmp, weights, tokens, labels, flags, tag):
    wpath, ipath, opath = (os.path.join(tmp, f"{tag}-{x}.safetensors") for x in ("w", "in", "out"))
    save_file(weights, wpath)
    save_file({"tokens": tokens, "labels": labels}, ipath)
    cmd = [PROBE, "--weights", wpath, "--inputs", ipath, "--out", opath] + flags
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"FAIL: {' '.join(cmd)}: {r.stderr}")
    return load_file(opath)


def hf_reference(model, tokens, labels):
    model.zero_grad()
    logits = model(input_ids=tokens).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1))
    loss.backward()
    grads = {k: p.grad.detach().clone() for k, p in model.named_parameters()}
    return logits.detach(), loss.detach(), grads


def compare(tag, out, logits, loss, meg_grads):
    check_close(f"{tag}: logits", out["logits"], logits)
    check_close(f"{tag}: loss", out["loss"].reshape(()), loss.reshape(()), rtol=1e-5)
    for name, g in meg_grads.items():
        check_close(f"{tag}: grad {name}", out["grad." + name], g, rtol=2e-4)


def gpt2_case(tmp, seed, L, h, n, f, S, V, padded, b, s):
    d = h // n
    cfg = transformers.GPT2Config(vocab_size=padded, n_positions=S, n_embd=h, n_layer=L, n_head=n, n_inner=f,
                                  activation_function="gelu_fast", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                  layer_norm_epsilon=1e-5, tie_word_embeddings=True)
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = transformers.GPT2LMHeadModel(cfg).float().eval()
    randomize(model, seed)
    g = torch.Generator().manual_seed(seed + 1)
    tokens = torch.randint(0, V, (b, s), generator=g)
    labels = torch.randint(0, V, (b, s), generator=g)
    logits, loss, grads = hf_reference(model, tokens, labels)
    weights = gpt2_to_megatron(model.state_dict(), L, n, d)
    meg_grads = gpt2_to_megatron({k: v for k, v in grads.items()} | {"transformer.wte.weight": grads["transformer.wte.weight"]},
                                 L, n, d)
    base = ["--num-layers", str(L), "--hidden-size", str(h), "--ffn-hidden-size", str(f), "--num-attention-heads", str(n),
            "--seq-length", str(s), "--max-position-embeddings", str(S), "--padded-vocab-size", str(padded)]
    for extra, tag in (([], "gpt2"), (["--checkpoint-activations"], "gpt2+recompute"),
                       (["--checkpoint-activations", "--checkpoint-num-layers", "2"], "gpt2+recompute2")):
        out = run_probe(tmp, weights, tokens, labels, base + extra, f"{tag}-{seed}")
        compare(f"{tag} seed {seed}", out, logits, loss, meg_grads)
    print(f"gpt2 L={L} h={h} n={n} f={f} V={V}/{padded} b={b} s={s}: loss {loss.item():.6f}")


def bloom_case(tmp, seed, L, h, n, V, padded, b, s):
    cfg = transformers.BloomConfig(vocab_size=padded, hidden_size=h, n_layer=L, n_head=n, layer_norm_epsilon=1e-5,
                                   hidden_dropout=0.0, attention_dropout=0.0, tie_word_embeddings=True)
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = transformers.BloomForCausalLM(cfg).float().eval()
    randomize(model, seed)
    g = torch.Generator().manual_seed(seed + 1)
    tokens = torch.randint(0, V, (b, s), generator=g)
    labels = torch.randint(0, V, (b, s), generator=g)
    logits, loss, grads = hf_reference(model, tokens, labels)
    weights = bloom_to_megatron(model.state_dict(), L)
    meg_grads = bloom_to_megatron(grads, L)
    base = ["--num-layers", str(L), "--hidden-size", str(h), "--ffn-hidden-size", str(4 * h), "--num-attention-heads",
            str(n), "--seq-length", str(s), "--padded-vocab-size", str(padded), "--alibi", "--embed-layernorm"]
    for extra, tag in (([], "bloom"), (["--checkpoint-activations"], "bloom+recompute")):
        out = run_probe(tmp, weights, tokens, labels, base + extra, f"{tag}-{seed}")
        compare(f"{tag} seed {seed}", out, logits, loss, meg_grads)
    print(f"bloom L={L} h={h} n={n} V={V}/{padded} b={b} s={s}: loss {loss.item():.6f}")


def init_case(tmp):
    L, h, f, V, S = 4, 256, 1024, 1024, 64
    path = os.path.join(tmp, "init.safetensors")
    cmd = [PROBE, "--out", path, "--init-seed", "7", "--num-layers", str(L), "--hidden-size", str(h), "--ffn-hidden-size",
           str(f), "--num-attention-heads", "8", "--seq-length", str(S), "--max-position-embeddings", str(S),
           "--padded-vocab-size", str(V), "--init-method-std", "0.02"]
    subprocess.run(cmd, check=True)
    w = load_file(path)
    out_std = 0.02 / math.sqrt(2 * L)
    for name, t in w.items():
        expect_std = None
        if name.endswith("layernorm.weight") or name == f"{L + 4:02d}.weight":
            ok = bool(torch.all(t == 1))
        elif name.endswith("bias"):
            ok = bool(torch.all(t == 0))
        else:
            expect_std = out_std if ("dense.weight" in name or "4h_to_h.weight" in name) else 0.02
            ok = abs(t.std().item() - expect_std) < 0.03 * expect_std and abs(t.mean().item()) < 0.05 * expect_std
        if not ok:
            failures.append(f"init: {name}: mean {t.float().mean().item():.3e} std {t.float().std().item():.3e}, "
                            f"expected {'std ' + format(expect_std, '.3e') if expect_std else 'constant'}")
    print(f"init: {len(w)} tensors follow Megatron's rules")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        gpt2_case(tmp, 1, L=2, h=64, n=4, f=256, S=40, V=300, padded=384, b=3, s=32)
        gpt2_case(tmp, 2, L=3, h=48, n=6, f=100, S=16, V=500, padded=512, b=2, s=16)
        bloom_case(tmp, 3, L=2, h=64, n=4, V=300, padded=384, b=2, s=24)
        bloom_case(tmp, 4, L=3, h=72, n=6, V=250, padded=256, b=3, s=20)
        init_case(tmp)
    if failures:
        print("\n".join(f"FAIL: {m}" for m in failures[:40]))
        print(f"{len(failures)} mismatches")
        return 1
    print("OK: mds logits, loss and gradients equal transformers' GPT2LMHeadModel and BloomForCausalLM")
    return 0


if __name__ == "__main__":
    sys.exit(main())

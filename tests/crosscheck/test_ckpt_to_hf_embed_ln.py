#!/usr/bin/env python3
"""mds-ckpt-to-hf on tr8-104B's architecture: a GPT with learned absolute position embeddings AND --embed-layernorm.
Megatron-DeepSpeed applies that LayerNorm to the word embedding alone, before adding the position embedding
(mpu/layers.py VocabParallelEmbedding.forward; language_model.py Embedding.forward), so it depends on the token only and
folds into GPT2's wte, with an untied lm_head holding the raw embedding (Megatron's tied output layer). Checked here:
  - fp32 checkpoint, TP 2 x PP 2 (bmd_checkpoint.py, BMD's layout and args): the export loads with
    GPT2LMHeadModel.from_pretrained (tie_word_embeddings false, no missing / unexpected weights); its embedding output
    (hidden_states[0]) equals torch's layer_norm(W[token], eps 1e-5) + P[position]; its logits equal those of mds's own
    model (bin/model_probe --embed-layernorm) on the checkpoint's global weights;
  - bf16 and fp16 (tr8-104B's) checkpoints: lm_head.weight is W bit for bit, wte is the dtype's rounding of
    layer_norm_fp32(W) within one step of the format;
  - --model-type bloom on it fails naming ALiBi (no hint pointing elsewhere).
Exits 77 without the binary or without torch / transformers / safetensors."""
import json
import os
import subprocess
import sys
import tempfile

BIN = os.environ.get("MDS_BIN", "build/bin")
TOOL = os.path.join(BIN, "mds-ckpt-to-hf")
PROBE = os.path.join(BIN, "model_probe")
if not os.path.exists(TOOL):
    print("SKIP: mds-ckpt-to-hf not built")
    sys.exit(77)
try:
    import torch
    import transformers
    from safetensors.torch import load_file, save_file
except Exception as e:  # noqa: BLE001
    print(f"SKIP: torch / transformers / safetensors not importable: {e}")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bmd_checkpoint  # noqa: E402

failures = []
L, H, N, F, V, S = 3, 24, 6, 96, 128, 32


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def convert(*args):
    return subprocess.run([TOOL, *args, "--quiet"], capture_output=True, text=True)


def probe_logits(tmp, weights, tokens):
    w = {f"{li:02d}.{n}": t.float().contiguous() for (li, n), t in weights.items()}
    wpath, ipath, opath = (os.path.join(tmp, f"probe-{x}.safetensors") for x in ("w", "in", "out"))
    save_file(w, wpath)
    save_file({"tokens": tokens, "labels": tokens.clone()}, ipath)
    flags = ["--num-layers", str(L), "--hidden-size", str(H), "--ffn-hidden-size", str(F), "--num-attention-heads", str(N),
             "--seq-length", str(S), "--max-position-embeddings", str(S), "--padded-vocab-size", str(V), "--embed-layernorm"]
    r = subprocess.run([PROBE, "--weights", wpath, "--inputs", ipath, "--out", opath, *flags], capture_output=True, text=True)
    if not check(r.returncode == 0, f"model_probe failed: {r.stderr[-500:]}"):
        return None
    return load_file(opath)["logits"]


def fp32_case(tmp):
    shape = bmd_checkpoint.ModelShape(num_layers=L, hidden=H, heads=N, ffn=F, padded_vocab=V, seq=S, embed_layernorm=True,
                                      alibi=False, dtype=torch.float32)
    root = os.path.join(tmp, "tr8-fp32")
    weights = bmd_checkpoint.make_checkpoint(root, shape, tp=2, pp=2, dp=1, iteration=10)
    out = os.path.join(tmp, "tr8-fp32-hf")
    r = convert(root, out)
    if not check(r.returncode == 0, f"fp32: conversion failed: {r.stderr[-600:]}"):
        return
    config = json.load(open(os.path.join(out, "config.json")))
    check(config["model_type"] == "gpt2" and config["tie_word_embeddings"] is False, f"fp32: config {config}")
    model, info = transformers.GPT2LMHeadModel.from_pretrained(out, dtype=torch.float32, output_loading_info=True)
    model.eval()
    check(not info["missing_keys"] and not info["unexpected_keys"], f"fp32: loading info {info}")
    tokens = torch.randint(0, V, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        o = model(input_ids=tokens, output_hidden_states=True)
    W = weights[(1, "word_embeddings.weight")].float()
    P = weights[(1, "position_embeddings.weight")].float()
    ln = torch.nn.functional.layer_norm(W[tokens], (H,), weights[(1, "word_embeddings.norm.weight")].float(),
                                        weights[(1, "word_embeddings.norm.bias")].float(), eps=1e-5)
    want = ln + P[torch.arange(16)].unsqueeze(0)
    err = (o.hidden_states[0] - want).abs().max().item()
    check(err < 1e-5, f"fp32: the embedding output differs from layer_norm(W[token]) + P[position] by {err}")
    # The other order (LayerNorm after adding the positions) must be told apart by this check.
    other = torch.nn.functional.layer_norm(W[tokens] + P[torch.arange(16)].unsqueeze(0), (H,),
                                           weights[(1, "word_embeddings.norm.weight")].float(),
                                           weights[(1, "word_embeddings.norm.bias")].float(), eps=1e-5)
    check((other - want).abs().max().item() > 1e-3, "fp32: the test cannot tell the two LayerNorm orders apart")
    check(torch.equal(model.lm_head.weight, W), "fp32: lm_head.weight is not the raw word embedding")
    if os.path.exists(PROBE):
        ref = probe_logits(tmp, weights, tokens)
        if ref is not None:
            d = (o.logits - ref).abs().max().item()
            check(o.logits.shape == ref.shape and torch.allclose(o.logits, ref, rtol=1e-4, atol=1e-4),
                  f"fp32: HF logits differ from mds's model by {d}")
    print("fp32 TP 2 x PP 2 GPT + embedding LayerNorm -> HF GPT2 (untied): embedding and logits equal")


def half_case(tmp, dtype, mantissa_bits):
    tag = str(dtype).split(".")[-1]
    shape = bmd_checkpoint.ModelShape(num_layers=2, hidden=H, heads=N, ffn=F, padded_vocab=V, seq=S, embed_layernorm=True,
                                      alibi=False, dtype=dtype)
    root = os.path.join(tmp, f"tr8-{tag}")
    weights = bmd_checkpoint.make_checkpoint(root, shape, tp=2, pp=1, dp=1, iteration=10)
    out = os.path.join(tmp, f"tr8-{tag}-hf")
    r = convert(root, out)
    if not check(r.returncode == 0, f"{tag}: conversion failed: {r.stderr[-600:]}"):
        return
    st = load_file(os.path.join(out, "model.safetensors"))
    W = weights[(1, "word_embeddings.weight")]
    check(st["lm_head.weight"].dtype == dtype and torch.equal(st["lm_head.weight"], W), f"{tag}: lm_head.weight != W")
    want = torch.nn.functional.layer_norm(W.float(), (H,), weights[(1, "word_embeddings.norm.weight")].float(),
                                          weights[(1, "word_embeddings.norm.bias")].float(), eps=1e-5)
    got = st["transformer.wte.weight"]
    step = want.abs().clamp_min(1e-30) * 2.0 ** -mantissa_bits  # one step of the format
    check(got.dtype == dtype and bool(((got.float() - want).abs() <= step).all()),
          f"{tag}: wte is not {tag}(layer_norm(W)): max diff {(got.float() - want).abs().max()}")
    check(not any(k.startswith("transformer.word_embeddings") for k in st), f"{tag}: stray tensors {sorted(st)}")
    r = convert(root, os.path.join(tmp, f"tr8-{tag}-bloom"), "--model-type", "bloom")
    check(r.returncode == 1 and "ALiBi" in r.stderr and "try" not in r.stderr, f"--model-type bloom: {r.returncode} {r.stderr[-300:]}")
    print(f"{tag}: wte = {tag}(LayerNorm(W)), lm_head = W bit for bit; --model-type bloom refused naming ALiBi")


with tempfile.TemporaryDirectory() as tmp:
    fp32_case(tmp)
    half_case(tmp, torch.bfloat16, 7)
    half_case(tmp, torch.float16, 10)  # tr8-104B trained in fp16

for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)

#!/usr/bin/env python3
"""mds-ckpt-to-hf against transformers:
  - checkpoints written the way BigScience's Megatron-DeepSpeed saved them (bmd_checkpoint.py: TP 2 x PP 2, bf16,
    Namespace args, BMD layer numbering), a GPT2 shape and a BLOOM shape (ALiBi, embedding LayerNorm, 6 heads):
    the export loads with GPT2LMHeadModel / BloomForCausalLM.from_pretrained and its logits equal the logits of
    mds's own model (bin/model_probe) on the checkpoint's global weights; config.json says gelu_fast for GPT2;
  - a small --max-shard-size gives shards + model.safetensors.index.json that load to the same logits;
    --workers 1 and 3 write byte-identical folders, --workers 0 is a usage error;
  - a checkpoint saved by mds-train converts with its tokenizer files (from the args), which GPT2TokenizerFast
    loads and which encode like the tokenizers library's byte-level BPE over the same files; HF logits equal
    model_probe's on the layer files' weights;
  - --all converts every tag; a missing layer file, a truncated file and a folder that is no checkpoint fail
    with a message naming the problem and leave no output.
Exits 77 without the binary or without torch / transformers / safetensors."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

BIN = os.environ.get("MDS_BIN", "build/bin")
SOURCE = os.environ.get("MDS_SOURCE_DIR", ".")
TOOL = os.path.join(BIN, "mds-ckpt-to-hf")
PROBE = os.path.join(BIN, "model_probe")
TRAIN = os.path.join(BIN, "mds-train")
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

import bmd_checkpoint  # noqa: E402  (tests/crosscheck)
import tiny_dataset  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def convert(*args):
    return subprocess.run([TOOL, *args, "--quiet"], capture_output=True, text=True)


def probe_logits(tmp, weights, tokens, flags, tag):
    """mds's model on `weights` (full mds names, e.g. '03.self_attention.dense.weight'), in fp32."""
    w = {k: v.float().contiguous() for k, v in weights.items()}
    wpath, ipath, opath = (os.path.join(tmp, f"{tag}-{x}.safetensors") for x in ("w", "in", "out"))
    save_file(w, wpath)
    save_file({"tokens": tokens, "labels": tokens.clone()}, ipath)
    r = subprocess.run([PROBE, "--weights", wpath, "--inputs", ipath, "--out", opath, *flags], capture_output=True, text=True)
    if not check(r.returncode == 0, f"{tag}: model_probe failed: {r.stderr[-500:]}"):
        return None
    return load_file(opath)["logits"]


def hf_logits(folder, bloom, tokens):
    cls = transformers.BloomForCausalLM if bloom else transformers.GPT2LMHeadModel
    model = cls.from_pretrained(folder, dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        return model(input_ids=tokens).logits


def close(tag, a, b):
    if a is None or b is None:
        return
    ok = a.shape == b.shape and torch.allclose(a, b, rtol=1e-4, atol=1e-4)
    check(ok, f"{tag}: logits differ (max abs {((a - b).abs().max().item() if a.shape == b.shape else 'shape')})")


def probe_flags(L, h, n, f, S, V, bloom):
    flags = ["--num-layers", str(L), "--hidden-size", str(h), "--ffn-hidden-size", str(f), "--num-attention-heads", str(n),
             "--seq-length", str(S), "--max-position-embeddings", str(S), "--padded-vocab-size", str(V)]
    return flags + (["--alibi", "--embed-layernorm"] if bloom else [])


def bmd_case(tmp, name, bloom):
    shape = bmd_checkpoint.ModelShape(num_layers=3, hidden=24, heads=6, ffn=96, padded_vocab=128, seq=32,
                                      embed_layernorm=bloom, alibi=bloom)
    root = os.path.join(tmp, name)
    weights = bmd_checkpoint.make_checkpoint(root, shape, tp=2, pp=2, dp=1, iteration=10)
    out = os.path.join(tmp, name + "-hf")
    r = convert(root, out)
    if not check(r.returncode == 0, f"{name}: conversion failed: {r.stderr[-500:]}"):
        return
    config = json.load(open(os.path.join(out, "config.json")))
    check(config["model_type"] == ("bloom" if bloom else "gpt2"), f"{name}: model_type {config['model_type']}")
    if not bloom:
        check(config["activation_function"] == "gelu_fast", f"{name}: activation {config['activation_function']}")
        check(config["n_positions"] == 32 and config["n_inner"] == 96, f"{name}: sizes {config}")
    check(config["vocab_size"] == 128, f"{name}: vocab_size {config['vocab_size']}")
    tokens = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(1))
    ref = hf_logits(out, bloom, tokens)
    if os.path.exists(PROBE):
        full = {f"{li:02d}.{n}": t for (li, n), t in weights.items()}
        close(name, ref, probe_logits(tmp, full, tokens, probe_flags(3, 24, 6, 96, 32, 128, bloom), name))
    sharded = os.path.join(tmp, name + "-sharded")
    r = convert(root, sharded, "--max-shard-size", "8KB")
    index = os.path.join(sharded, "model.safetensors.index.json")
    if check(r.returncode == 0 and os.path.exists(index), f"{name}: sharded conversion: {r.stderr[-300:]}"):
        shards = set(json.load(open(index))["weight_map"].values())
        check(len(shards) > 2, f"{name}: only {len(shards)} shards at 8KB")
        close(name + " sharded", ref, hf_logits(sharded, bloom, tokens))
    # The pipeline's worker count must not change a byte: one worker, and more workers than tensors
    # in flight, sharded so that several files are written.
    outputs = {}
    for workers in ("1", "3"):
        dest = os.path.join(tmp, f"{name}-w{workers}")
        r = convert(root, dest, "--workers", workers, "--max-shard-size", "8KB")
        if check(r.returncode == 0, f"{name}: --workers {workers}: {r.stderr[-300:]}"):
            outputs[workers] = {f: open(os.path.join(dest, f), "rb").read() for f in sorted(os.listdir(dest))}
    if len(outputs) == 2:
        check(outputs["1"] == outputs["3"], f"{name}: --workers 1 and 3 write different files")
        if os.path.isdir(sharded):
            check(outputs["1"] == {f: open(os.path.join(sharded, f), "rb").read() for f in sorted(os.listdir(sharded))},
                  f"{name}: --workers 1 differs from the default")
    r = convert(root, os.path.join(tmp, name + "-w0"), "--workers", "0")
    check(r.returncode == 2, f"{name}: --workers 0 exits {r.returncode}, expected 2 (usage)")
    print(f"{name}: TP 2 x PP 2 bf16 -> HF {config['model_type']}: loads, logits equal mds's")


def mds_train_case(tmp):
    if not os.path.exists(TRAIN):
        print("mds-train not built: the mds-train checkpoint case is skipped")
        return
    prefix, vocab, merges = tiny_dataset.make(tmp, BIN, SOURCE, 1000)
    ck = os.path.join(tmp, "trained")
    r = subprocess.run([TRAIN, "--data-path", prefix, "--vocab-file", vocab, "--merge-file", merges, "--split", "90,8,2",
                        "--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4", "--seq-length", "32",
                        "--max-position-embeddings", "32", "--micro-batch-size", "2", "--global-batch-size", "4",
                        "--train-iters", "3", "--lr", "1e-3", "--eval-iters", "0", "--save", ck, "--save-interval", "3",
                        "--threads", "2"], capture_output=True, text=True)
    if not check(r.returncode == 0, f"mds-train failed: {r.stderr[-500:]}"):
        return
    out = os.path.join(tmp, "trained-hf")
    r = convert(ck, out)
    if not check(r.returncode == 0, f"mds-train checkpoint: {r.stderr[-500:]}"):
        return
    tok = transformers.GPT2TokenizerFast.from_pretrained(out)
    from tokenizers import ByteLevelBPETokenizer
    ref = ByteLevelBPETokenizer(vocab, merges)
    text = "The quick brown fox jumps over the lazy dog. Ünïcode and    spaces!"
    check(tok(text)["input_ids"] == ref.encode(text).ids, "exported tokenizer encodes differently")
    step = os.path.join(ck, open(os.path.join(ck, "latest")).read())
    weights = {}
    for f in sorted(os.listdir(step)):
        if f.startswith("layer_"):
            for k, v in torch.load(os.path.join(step, f), weights_only=False).items():
                weights[f"{f[6:8]}.{k}"] = v
    tokens = torch.randint(0, 1000, (2, 16), generator=torch.Generator().manual_seed(2))
    V = weights["01.word_embeddings.weight"].shape[0]
    if os.path.exists(PROBE):
        close("mds-train", hf_logits(out, False, tokens), probe_logits(tmp, weights, tokens, probe_flags(2, 32, 4, 128, 32, V, False), "trained"))
    print("mds-train checkpoint -> HF GPT2 with its tokenizer: loads, encodes like tokenizers, logits equal mds's")


def drifted_replicas(tmp):
    """BLOOM-era bf16 checkpoints hold TP copies of replicated parameters that drifted apart: they are averaged in
    fp32 (then rounded to bf16), not taken from shard 0."""
    root = os.path.join(tmp, "drift")
    bmd_checkpoint.make_checkpoint(root, bmd_checkpoint.ModelShape(), tp=2, pp=1, iteration=10)
    f = os.path.join(root, "global_step10", "layer_03-model_01-model_states.pt")
    sd = torch.load(f, weights_only=False)
    sd["input_layernorm.weight"] = sd["input_layernorm.weight"] + torch.linspace(-0.05, 0.05, sd["input_layernorm.weight"].numel()).to(torch.bfloat16)
    torch.save(sd, f)
    a = torch.load(os.path.join(root, "global_step10", "layer_03-model_00-model_states.pt"), weights_only=False)["input_layernorm.weight"]
    out = os.path.join(tmp, "drift-hf")
    r = convert(root, out)
    if check(r.returncode == 0, f"drift: {r.stderr[-300:]}"):
        got = load_file(os.path.join(out, "model.safetensors"))["transformer.h.0.ln_1.weight"]
        want = ((a.float() + sd["input_layernorm.weight"].float()) / 2).to(torch.bfloat16)
        check(torch.equal(got, want) and not torch.equal(got, a), "drifted TP replicas are not averaged in fp32")
        print("drifted TP replicas: averaged in fp32")
    # A shard whose row-parallel weight has the wrong number of rows: an error, not a read past its end.
    sd2 = torch.load(f, weights_only=False)
    w = sd2["self_attention.dense.weight"]
    sd2["self_attention.dense.weight"] = torch.zeros(w.shape[0] + 3, w.shape[1], dtype=w.dtype)
    torch.save(sd2, f)
    r = convert(root, os.path.join(tmp, "drift-bad-hf"))
    check(r.returncode != 0 and "layer_03-model_01" in r.stderr and "self_attention.dense.weight" in r.stderr,
          f"mismatched TP shard shapes: {r.returncode} {r.stderr[-300:]}")


def batch_and_errors(tmp):
    shape = bmd_checkpoint.ModelShape(num_layers=3)
    root = os.path.join(tmp, "multi")
    bmd_checkpoint.make_checkpoint(root, shape, tp=1, pp=1, iteration=10)
    bmd_checkpoint.make_checkpoint(root, shape, tp=1, pp=1, iteration=20, seed=1)
    out = os.path.join(tmp, "multi-hf")
    r = convert(root, out, "--all", "--json")
    check(r.returncode == 0 and sorted(os.listdir(out)) == ["global_step10", "global_step20"], f"--all: {os.listdir(out) if os.path.isdir(out) else r.stderr}")
    a = load_file(os.path.join(out, "global_step10", "model.safetensors"))
    b = load_file(os.path.join(out, "global_step20", "model.safetensors"))
    check(not torch.equal(a["transformer.wte.weight"], b["transformer.wte.weight"]), "--all: both tags hold the same weights")
    # A missing layer file.
    broken = os.path.join(tmp, "broken")
    shutil.copytree(root, broken)
    os.remove(os.path.join(broken, "global_step20", "layer_04-model_00-model_states.pt"))
    r = convert(broken, os.path.join(tmp, "broken-hf"))
    check(r.returncode != 0 and "layer_04" in r.stderr and not os.path.exists(os.path.join(tmp, "broken-hf")),
          f"missing layer file: {r.returncode} {r.stderr[-300:]}")
    # A truncated file.
    shutil.rmtree(broken)
    shutil.copytree(root, broken)
    f = os.path.join(broken, "global_step20", "layer_05-model_00-model_states.pt")
    data = open(f, "rb").read()
    open(f, "wb").write(data[:len(data) // 2])
    r = convert(broken, os.path.join(tmp, "broken-hf"))
    check(r.returncode != 0 and "layer_05" in r.stderr and not os.path.exists(os.path.join(tmp, "broken-hf")) and
          not [x for x in os.listdir(tmp) if x.startswith(".broken-hf")], f"truncated file: {r.returncode} {r.stderr[-300:]}")
    nothing = os.path.join(tmp, "nothing")
    os.makedirs(nothing)
    r = convert(nothing, os.path.join(tmp, "nothing-hf"))
    check(r.returncode != 0 and "checkpoint" in r.stderr, f"not a checkpoint: {r.returncode} {r.stderr[-300:]}")
    r = convert(root, out)
    check(r.returncode != 0 and "--overwrite" in r.stderr, f"existing output: {r.returncode} {r.stderr[-300:]}")
    print("--all, missing / truncated files, not a checkpoint, existing output: OK")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        bmd_case(tmp, "gpt", bloom=False)
        bmd_case(tmp, "bloom", bloom=True)
        mds_train_case(tmp)
        drifted_replicas(tmp)
        batch_and_errors(tmp)
    if failures:
        print(f"FAIL: {len(failures)} problem(s)")
        for f in failures[:30]:
            print("  " + f)
        sys.exit(1)
    print("OK: mds-ckpt-to-hf exports load in transformers with mds's logits")


if __name__ == "__main__":
    main()

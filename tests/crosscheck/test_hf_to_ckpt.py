#!/usr/bin/env python3
"""mds-hf-to-ckpt against transformers, mds's own model and trainer, mds-ckpt-reshape, mds-ckpt-to-hf and BigScience's
Megatron-DeepSpeed:
  - transformers' GPT2LMHeadModel and BloomForCausalLM with random weights (LayerNorm weights and all biases too),
    saved by save_pretrained (model.safetensors), sharded (max_shard_size 20KB: shards + model.safetensors.index.json),
    as pytorch_model.bin the way transformers 4 and the original gpt2 upload have it (torch.save zip, no
    "transformer." prefix, GPT2's attn.bias / attn.masked_bias buffers) and as sharded pytorch_model-*.bin with
    pytorch_model.bin.index.json (lm_head.weight sharing wte's storage): all four convert to the same checkpoint;
  - at TP 1 and at TP 2 x PP 2, mds's model (bin/model_probe) on the checkpoint's weights (TP shards joined here)
    gives transformers' logits (fp32 tolerance), and the padding rows Megatron adds to the vocabulary are zeros;
  - mds-train loads the checkpoint with --load DIR --finetune (the flags the tool prints) and the lm loss of its
    first iteration equals the cross entropy transformers' model gives on the same batch (the samples from
    mds-sample-index, Megatron's order; the softmax over the padded vocabulary, as Megatron's is): GPT2 at TP 1,
    GPT2 with gelu_new (--no-bias-gelu-fusion --openai-gelu) at TP 1, BLOOM at TP 2 x PP 2 on 4 processes;
  - the direct TP 2 x PP 2 conversion equals the TP 1 one reshaped by mds-ckpt-reshape (every layer file's tensors,
    and the mp_rank files: args, param_shapes, ...);
  - mds-ckpt-to-hf of the checkpoints (TP 1 and TP 2 x PP 2) gives back the source's tensors bit for bit (names,
    shapes, dtypes, bytes), config.json's vocab_size and activation_function, BLOOM's post-LayerNorm residuals, and
    the tokenizer (found through the args); each GeLU maps to Megatron's args and back; bf16 stays bf16 bit for bit
    and --dtype rounds as torch's casts do;
  - Megatron-DeepSpeed's pretrain_gpt.py (bmd_harness.py) loads the TP 1 GPT2 checkpoint with --load DIR --finetune
    --no-load-optim --override-lr-scheduler and its first iteration's lm loss equals transformers' (skipped, said so,
    without ../shared/third_party);
  - hostile inputs (no config.json, model_type llama, a misshapen / missing / extra tensor, a truncated safetensors,
    a .bin that is no zip, the legacy torch.save format, a damaged .bin, an index naming a missing shard, an untied
    lm_head, heads that do not split over TP, too many stages, bad flag values, an existing destination, SRC inside
    DST) fail with exit 1 or 2 naming the problem and leave nothing under the destination's name.
Exits 77 without the binaries or without torch / transformers / safetensors."""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
BIN = os.environ.get("MDS_BIN", "build/bin")
SOURCE = os.environ.get("MDS_SOURCE_DIR", os.path.join(HERE, "..", ".."))
TOOL = os.path.join(BIN, "mds-hf-to-ckpt")
TO_HF = os.path.join(BIN, "mds-ckpt-to-hf")
RESHAPE = os.path.join(BIN, "mds-ckpt-reshape")
PROBE = os.path.join(BIN, "model_probe")
TRAIN = os.path.join(BIN, "mds-train")
SAMPLE_INDEX = os.path.join(BIN, "mds-sample-index")
for exe in (TOOL, TO_HF, RESHAPE, SAMPLE_INDEX, os.path.join(BIN, "mds-tokenizer-train"), os.path.join(BIN, "mds-preprocess")):
    if not os.path.exists(exe):
        print(f"SKIP: {exe} not built")
        sys.exit(77)
try:
    import torch
    import transformers
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file
except Exception as e:  # noqa: BLE001
    print(f"SKIP: torch / transformers / safetensors not importable: {e}")
    sys.exit(77)

import bmd_checkpoint  # noqa: E402,F401  (megatron.enums stand-in: the mp_rank files' args unpickle)
import bmd_harness  # noqa: E402
import tiny_dataset  # noqa: E402
from bmd_harness import check  # noqa: E402

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()
torch.set_num_threads(2)

L, H, N, F, S = 2, 32, 4, 96, 32   # layers, hidden, heads, GPT2's n_inner, positions / sequence length
MBS, GBS, SEED = 2, 4, 1234
LOSS_TOL = 2e-6                    # relative (+ 1e-6), on the first iteration's lm loss (fp32, printed with 7 digits)


def run(*cmd):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True)


def hf_to_ckpt(src, dst, *flags):
    return run(TOOL, src, dst, "--quiet", *flags)


def randomize(model, seed):
    """Random weights everywhere: LayerNorm weights around 1, biases around 0, matrices N(0, 0.05) (MLP inputs 0.4,
    where the GeLU kinds differ measurably)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                base = 1.0 if ("ln" in name or "layernorm" in name) and name.endswith("weight") else 0.0
                p.copy_(base + 0.1 * torch.randn(p.shape, generator=g))
            else:
                scale = 0.4 if ("c_fc" in name or "dense_h_to_4h" in name) else 0.05
                p.copy_(scale * torch.randn(p.shape, generator=g))
    return model.eval()


def gpt2_model(V, activation="gelu_fast", seed=1):
    cfg = transformers.GPT2Config(vocab_size=V, n_positions=S, n_embd=H, n_layer=L, n_head=N, n_inner=F,
                                  activation_function=activation, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                  bos_token_id=V - 1, eos_token_id=V - 1)
    cfg._attn_implementation = "eager"
    return randomize(transformers.GPT2LMHeadModel(cfg), seed)


def bloom_model(V, post_ln=False, seed=2):
    cfg = transformers.BloomConfig(vocab_size=V, hidden_size=H, n_layer=L, n_head=N, hidden_dropout=0.0,
                                   attention_dropout=0.0, apply_residual_connection_post_layernorm=post_ln)
    cfg._attn_implementation = "eager"
    return randomize(transformers.BloomForCausalLM(cfg), seed)


def save_folders(model, tmp, name, tokenizer_files, bloom):
    """The model saved four ways (see the module docstring): {kind: folder}."""
    out = {}
    st = os.path.join(tmp, f"{name}-st")
    model.save_pretrained(st)
    for f in tokenizer_files:
        shutil.copy(f, st)
    out["safetensors"] = st
    sharded = os.path.join(tmp, f"{name}-st-sharded")
    model.save_pretrained(sharded, max_shard_size="20KB")
    check(os.path.exists(os.path.join(sharded, "model.safetensors.index.json")), f"{name}: save_pretrained wrote no shards")
    out["safetensors-sharded"] = sharded
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    # pytorch_model.bin as GPT2Model / BloomModel saves it: no "transformer." prefix, no LM head; GPT2 with the
    # causal-mask buffers older transformers kept in the state dict.
    plain = {k[len("transformer."):]: v for k, v in sd.items() if k.startswith("transformer.")}
    if not bloom:
        for i in range(L):
            plain[f"h.{i}.attn.bias"] = torch.tril(torch.ones(S, S, dtype=torch.bool)).view(1, 1, S, S)
            plain[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    b = os.path.join(tmp, f"{name}-bin")
    os.makedirs(b)
    shutil.copy(os.path.join(st, "config.json"), b)
    torch.save(plain, os.path.join(b, "pytorch_model.bin"))
    out["bin"] = b
    # Sharded pytorch_model-*.bin as transformers 4 wrote them, lm_head.weight sharing wte's storage.
    bs = os.path.join(tmp, f"{name}-bin-sharded")
    os.makedirs(bs)
    shutil.copy(os.path.join(st, "config.json"), bs)
    keys = [k for k in sd if k != "lm_head.weight"]
    parts = [keys[: len(keys) // 3], keys[len(keys) // 3: 2 * len(keys) // 3], keys[2 * len(keys) // 3:]]
    embed = "transformer.word_embeddings.weight" if bloom else "transformer.wte.weight"
    weight_map = {}
    for i, part in enumerate(parts):
        fname = f"pytorch_model-{i + 1:05d}-of-{len(parts):05d}.bin"
        shard = {k: sd[k] for k in part}
        if embed in shard:
            shard["lm_head.weight"] = shard[embed]  # tied: one storage
        torch.save(shard, os.path.join(bs, fname))
        weight_map.update({k: fname for k in shard})
    with open(os.path.join(bs, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(v.numel() * v.element_size() for v in sd.values())}, "weight_map": weight_map}, f)
    out["bin-sharded"] = bs
    for folder in (sharded, b, bs):
        for f in tokenizer_files:
            shutil.copy(f, folder)
    return out


def tag_dir(root):
    return os.path.join(root, open(os.path.join(root, "latest")).read().strip())


def layer_tensors(root):
    out = {}
    for f in sorted(glob.glob(os.path.join(tag_dir(root), "layer_*-model_*-model_states.pt"))):
        for k, v in torch.load(f, weights_only=False).items():
            out[(os.path.basename(f), k)] = v
    return out


def mp_rank_files(root):
    return {os.path.basename(f): torch.load(f, weights_only=False)
            for f in sorted(glob.glob(os.path.join(tag_dir(root), "mp_rank_*_model_states.pt")))}


def same_tensors(a, b):
    """The keys whose tensors differ in dtype, shape or any bit (plus the keys of one side only)."""
    diff = sorted(set(a) ^ set(b))
    for k in set(a) & set(b):
        if a[k].dtype != b[k].dtype or a[k].shape != b[k].shape or not torch.equal(a[k].view(torch.uint8) if a[k].numel() else a[k],
                                                                                   b[k].view(torch.uint8) if b[k].numel() else b[k]):
            diff.append(k)
    return diff


def joined_weights(root):
    """The checkpoint's global weights ('LL.name'), TP shards joined as Megatron splits them; replicated copies must be
    identical."""
    shards = {}
    for f in sorted(glob.glob(os.path.join(tag_dir(root), "layer_*-model_*-model_states.pt"))):
        layer, rank = int(os.path.basename(f)[6:8]), int(os.path.basename(f)[15:17])
        for k, v in torch.load(f, weights_only=False).items():
            shards.setdefault(f"{layer:02d}.{k}", {})[rank] = v
    out = {}
    for k, by_rank in shards.items():
        parts = [by_rank[r] for r in sorted(by_rank)]
        if any(x in k for x in ("word_embeddings.weight", "query_key_value", "dense_h_to_4h")):
            out[k] = torch.cat(parts, 0)
        elif "self_attention.dense.weight" in k or "dense_4h_to_h.weight" in k:
            out[k] = torch.cat(parts, 1)
        else:
            check(all(torch.equal(p, parts[0]) for p in parts), f"{root}: the TP copies of {k} differ")
            out[k] = parts[0]
    return out


def probe_logits(tmp, weights, tokens, flags, tag):
    wpath, ipath, opath = (os.path.join(tmp, f"{tag}-{x}.safetensors") for x in ("w", "in", "out"))
    save_file({k: v.float().contiguous() for k, v in weights.items()}, wpath)
    save_file({"tokens": tokens, "labels": tokens.clone()}, ipath)
    r = run(PROBE, "--weights", wpath, "--inputs", ipath, "--out", opath, *flags)
    if not check(r.returncode == 0, f"{tag}: model_probe failed: {r.stderr[-500:]}"):
        return None
    return load_file(opath)["logits"]


def probe_flags(V_padded, bloom, f=F):
    flags = ["--num-layers", L, "--hidden-size", H, "--ffn-hidden-size", f, "--num-attention-heads", N,
             "--seq-length", S, "--max-position-embeddings", S, "--padded-vocab-size", V_padded]
    return [str(x) for x in flags] + (["--alibi", "--embed-layernorm"] if bloom else [])


def compare_logits(tag, model, root, tmp, V, V_padded, bloom, flags=(), wrong=None):
    """mds's model on the checkpoint's joined weights (with the model flags of the checkpoint's args: `flags`) against
    transformers' model on the same tokens; and not against `wrong`, a model computing something else, when given."""
    if not os.path.exists(PROBE):
        print(f"  {tag}: model_probe not built; logits not compared")
        return
    tokens = torch.randint(0, V, (2, 16), generator=torch.Generator().manual_seed(7))
    weights = joined_weights(root)
    emb = weights["01.word_embeddings.weight"]
    check(emb.shape[0] == V_padded and not emb[V:].any(), f"{tag}: the padding rows {V}..{V_padded} are not zeros")
    ours = probe_logits(tmp, weights, tokens, probe_flags(V_padded, bloom, 4 * H if bloom else F) + list(flags), tag)
    with torch.no_grad():
        ref = model(input_ids=tokens).logits.float()
    if ours is None:
        return
    ok = ours.shape[-1] == V_padded and torch.allclose(ours[..., :V], ref, rtol=1e-4, atol=1e-5)
    err = (ours[..., :V] - ref).abs().max().item() if ours.shape[-1] == V_padded else float("inf")
    check(ok, f"{tag}: mds's logits differ from transformers' by {err:.2e}")
    other = ""
    if wrong is not None and ok:
        with torch.no_grad():
            w = wrong(input_ids=tokens).logits.float()
        werr = (ours[..., :V] - w).abs().max().item()
        check(werr > 10 * max(err, 1e-6), f"{tag}: the logits of {wrong.config.activation_function if not bloom else 'the other residual order'} "
                                         f"are as close ({werr:.2e}): the check cannot tell them apart")
        other = f"; the other model's differ by {werr:.2e}"
    print(f"  {tag}: mds's logits = transformers' (max |difference| {err:.2e} for max |logit| {ref.abs().max().item():.2f}{other})")


def hf_tensors(folder):
    """Every tensor of a Hugging Face folder's safetensors files: {name: tensor}."""
    out = {}
    for f in sorted(glob.glob(os.path.join(folder, "*.safetensors"))):
        with safe_open(f, "pt") as g:
            for k in g.keys():
                out[k] = g.get_tensor(k)
    return out


def round_trip(tag, root, source, tmp, extra_config=()):
    """mds-ckpt-to-hf of the checkpoint gives back the source folder's tensors and config values."""
    back = os.path.join(tmp, tag + "-back")
    r = run(TO_HF, root, back, "--quiet")
    if not check(r.returncode == 0, f"{tag}: mds-ckpt-to-hf failed: {r.stderr[-500:]}"):
        return None
    a, b = hf_tensors(source), hf_tensors(back)
    diff = same_tensors(a, b)
    check(not diff, f"{tag}: mds-ckpt-to-hf does not give back the source's tensors: {diff[:6]}")
    src_cfg, cfg = json.load(open(os.path.join(source, "config.json"))), json.load(open(os.path.join(back, "config.json")))
    for key in ("vocab_size", *extra_config):
        check(cfg.get(key) == src_cfg.get(key), f"{tag}: config.json {key} {cfg.get(key)!r}, the source's {src_cfg.get(key)!r}")
    if not diff:
        print(f"  {tag}: mds-ckpt-to-hf gives back the {len(a)} source tensors bit for bit, vocab_size {cfg['vocab_size']}")
    return back


def reference_loss(model, samples, V, V_padded):
    """Megatron's lm loss of the first iteration: per micro batch the mean cross entropy over its tokens, with the
    softmax over the padded vocabulary (padding rows are zeros, so their logits are 0), averaged over the micro
    batches."""
    losses = []
    with torch.no_grad():
        for j in range(GBS // MBS):
            batch = torch.tensor(samples[j * MBS:(j + 1) * MBS])
            logits = model(input_ids=batch[:, :-1]).logits.double()
            padded = torch.cat([logits, torch.zeros(*logits.shape[:-1], V_padded - V, dtype=logits.dtype)], -1)
            losses.append(torch.nn.functional.cross_entropy(padded.reshape(-1, V_padded), batch[:, 1:].reshape(-1)).item())
    return sum(losses) / len(losses)


class Data:
    def __init__(self, tmp):
        self.prefix, self.vocab, self.merges = tiny_dataset.make(tmp, BIN, SOURCE, 1000)
        self.tokenizer_json = os.path.join(os.path.dirname(self.vocab), "tokenizer.json")
        self.V = len(json.load(open(self.vocab)))
        self.common = ["--seq-length", str(S), "--split", "90,8,2", "--seed", str(SEED)]
        self.samples = []
        for i in range(GBS):
            out = run(SAMPLE_INDEX, "--data-path", self.prefix, "--train-iters", 2, "--global-batch-size", GBS,
                      "--eval-iters", 0, "--print-sample", i, "--json", "--quiet", *self.common)
            self.samples.append(json.loads(out.stdout)["sample"]["tokens"])

    def train_flags(self, report_flags):
        return report_flags + ["--data-path", self.prefix, "--micro-batch-size", str(MBS), "--global-batch-size", str(GBS),
                               "--train-iters", "2", "--lr", "1e-4", "--eval-iters", "0", "--log-interval", "1",
                               "--hidden-dropout", "0", "--attention-dropout", "0", "--device", "cpu", "--split", "90,8,2",
                               "--seed", str(SEED)]


def mds_train_loss(tag, data, root, report, model, V_padded, nproc=1):
    """mds-train --load ROOT --finetune (the flags the tool printed): its first iteration's lm loss is transformers'."""
    if not os.path.exists(TRAIN):
        print(f"  {tag}: mds-train not built; the training check is skipped")
        return
    i = report["train_flags"].index("--seq-length")
    check(report["train_flags"][i + 1] == str(S), f"{tag}: the tool's flags say --seq-length {report['train_flags'][i + 1]}")
    flags = data.train_flags(report["train_flags"])
    run_dir = os.path.join(os.path.dirname(root), tag + "-train")
    res = bmd_harness.run_mds_train(TRAIN, flags + ["--threads", "1" if nproc > 1 else "2"], nproc, run_dir, name=tag, timeout=600)
    if not check(res.ok, f"{tag}: mds-train --load {root} --finetune failed (rc {res.returncode})\n{res.tail(15)}"):
        return
    first = [it for it in res.iterations if it["iteration"] == 1 and "lm loss" in it]
    want = reference_loss(model, data.samples, data.V, V_padded)
    if not check(first, f"{tag}: mds-train printed no loss for iteration 1\n{res.tail(15)}"):
        return
    got = first[0]["lm loss"]
    check(abs(got - want) <= LOSS_TOL * abs(want) + 1e-6, f"{tag}: mds-train's first lm loss {got!r}, transformers' {want!r}")
    check("for fine-tuning from iteration 0" in "\n".join(res.logs), f"{tag}: mds-train's log does not say it loaded {root} for fine-tuning")
    print(f"  {tag}: mds-train --finetune on {nproc} process(es): first lm loss {got:.6E}, transformers' {want:.6E}")


def convert(tag, folder, root, *flags):
    r = hf_to_ckpt(folder, root, "--json", *flags)
    if not check(r.returncode == 0, f"{tag}: mds-hf-to-ckpt failed: {r.stderr[-800:]}"):
        return None
    return json.loads(r.stdout)


def gpt2_case(tmp, data):
    print("GPT2LMHeadModel (gelu_fast):")
    model = gpt2_model(data.V)
    folders = save_folders(model, tmp, "gpt2", [data.vocab, data.merges], bloom=False)
    V, Vp = data.V, (data.V + 127) // 128 * 128
    roots, reports = {}, {}
    for kind, folder in folders.items():
        roots[kind] = os.path.join(tmp, f"gpt2-{kind}-tp1")
        reports[kind] = convert(f"gpt2 {kind}", folder, roots[kind], "--workers", "2")
    if not all(reports.values()):
        return
    base = layer_tensors(roots["safetensors"])
    for kind in ("safetensors-sharded", "bin", "bin-sharded"):
        diff = same_tensors(base, layer_tensors(roots[kind]))
        check(not diff, f"gpt2: the {kind} folder converts to other tensors than model.safetensors: {diff[:5]}")
    print(f"  safetensors, sharded safetensors, pytorch_model.bin (no prefix, mask buffers), sharded .bin: the same "
          f"{len(base)} layer-file tensors")
    mp = torch.load(os.path.join(tag_dir(roots["safetensors"]), "mp_rank_00_model_states.pt"), weights_only=False)
    a = mp["args"]
    check((a.num_layers, a.hidden_size, a.num_attention_heads, a.ffn_hidden_size, a.max_position_embeddings, a.seq_length,
           a.padded_vocab_size, a.make_vocab_size_divisible_by, a.tensor_model_parallel_size, a.pipeline_model_parallel_size)
          == (L, H, N, F, S, S, Vp, 128, 1, 1), f"gpt2: args {vars(a)}")
    check(a.bias_gelu_fusion is True and a.openai_gelu is False and a.embed_layernorm is False and
          a.position_embedding_type.name == "absolute" and a.params_dtype == torch.float32 and
          a.tokenizer_type == "GPT2BPETokenizer" and a.vocab_file == "hf_tokenizer/vocab.json", f"gpt2: args {vars(a)}")
    check(mp["iteration"] == 0 and mp["checkpoint_version"] == 3.0 and mp["mds_hf_vocab_size"] == V and
          mp["checkpoint_info"] == {"padded_vocab_size": Vp, "original_vocab_size": V} and mp["module"] is None,
          f"gpt2: mp_rank_00 {[(k, v) for k, v in mp.items() if k != 'args']}")
    check(sorted(os.listdir(os.path.join(roots["safetensors"], "hf_tokenizer"))) == ["merges.txt", "vocab.json"],
          "gpt2: hf_tokenizer/ does not hold vocab.json and merges.txt")
    compare_logits("gpt2 TP 1", model, roots["safetensors"], tmp, V, Vp, False)
    back = round_trip("gpt2 TP 1", roots["safetensors"], folders["safetensors"], tmp, ("activation_function", "n_inner", "n_positions"))
    if back:
        check(os.path.exists(os.path.join(back, "vocab.json")), "gpt2: the export has no tokenizer (args.vocab_file not found)")
    mds_train_loss("gpt2-tp1", data, roots["safetensors"], reports["safetensors"], model, Vp)
    # mds-ckpt-to-hf --vocab-size: the first N rows whatever the record says; past the embedding's rows: refused.
    cut = os.path.join(tmp, "gpt2-cut")
    r = run(TO_HF, roots["safetensors"], cut, "--vocab-size", 700, "--no-tokenizer", "--quiet")
    if check(r.returncode == 0, f"mds-ckpt-to-hf --vocab-size 700: {r.stderr[-300:]}"):
        wte = hf_tensors(cut)["transformer.wte.weight"]
        check(json.load(open(os.path.join(cut, "config.json")))["vocab_size"] == 700 and
              torch.equal(wte, model.transformer.wte.weight[:700].detach()), "mds-ckpt-to-hf --vocab-size 700: not the first 700 rows")
    r = run(TO_HF, roots["safetensors"], cut + "-big", "--vocab-size", Vp + 1, "--no-tokenizer", "--quiet")
    check(r.returncode == 1 and "--vocab-size" in r.stderr and not os.path.exists(cut + "-big"),
          f"mds-ckpt-to-hf --vocab-size past the rows: {r.returncode} {r.stderr[-300:]}")

    # TP 2 x PP 2: the direct conversion, and the same as the TP 1 checkpoint reshaped by mds-ckpt-reshape.
    Vp2 = (V + 255) // 256 * 256
    tp2 = os.path.join(tmp, "gpt2-tp2pp2")
    rep2 = convert("gpt2 TP 2 x PP 2", folders["safetensors"], tp2, "--target-tp", "2", "--target-pp", "2")
    if rep2:
        check(rep2["stages"] == [[1, 3], [4, 6]] and rep2["padded_vocab_size"] == Vp2, f"gpt2 TP 2 x PP 2: report {rep2}")
        compare_logits("gpt2 TP 2 x PP 2", model, tp2, tmp, V, Vp2, False)
        round_trip("gpt2 TP 2 x PP 2", tp2, folders["safetensors"], tmp)
        reshaped = os.path.join(tmp, "gpt2-tp1-reshaped")
        r = run(RESHAPE, roots["safetensors"], reshaped, "--target-tp", "2", "--target-pp", "2", "--quiet")
        if check(r.returncode == 0, f"mds-ckpt-reshape of the TP 1 conversion failed: {r.stderr[-500:]}"):
            diff = same_tensors(layer_tensors(tp2), layer_tensors(reshaped))
            check(not diff, f"TP 2 x PP 2: the direct conversion's layer files differ from the reshaped TP 1 one's: {diff[:5]}")
            direct, via = mp_rank_files(tp2), mp_rank_files(reshaped)
            check(sorted(direct) == sorted(via), f"mp_rank files {sorted(direct)} vs {sorted(via)}")
            for f in sorted(set(direct) & set(via)):
                d, v = direct[f], via[f]
                keys = sorted(set(d) ^ set(v)) + [k for k in set(d) & set(v) if k != "args" and d[k] != v[k]]
                keys += [f"args.{k}" for k in set(vars(d["args"])) | set(vars(v["args"])) if getattr(d["args"], k, None) != getattr(v["args"], k, None)]
                check(not keys, f"{f}: the direct conversion and the reshaped one differ in {keys}")
            print("  TP 2 x PP 2: the direct conversion equals the TP 1 conversion reshaped by mds-ckpt-reshape (layer files, "
                  "mp_rank files)")


def gelu_cases(tmp, data):
    print("GPT2 GeLU kinds:")
    V, Vp = data.V, (data.V + 127) // 128 * 128
    for act, fusion, openai, other in (("gelu_new", False, True, "gelu"), ("gelu", False, False, "gelu_new")):
        model = gpt2_model(V, act, seed=3)
        wrong = gpt2_model(V, other, seed=3)  # the same weights, the other GeLU family (tanh / erf)
        folder = os.path.join(tmp, f"gpt2-{act}")
        model.save_pretrained(folder)
        for f in (data.vocab, data.merges):
            shutil.copy(f, folder)
        root = folder + "-ck"
        rep = convert(f"gpt2 {act}", folder, root)
        if not rep:
            continue
        a = torch.load(os.path.join(tag_dir(root), "mp_rank_00_model_states.pt"), weights_only=False)["args"]
        check((a.bias_gelu_fusion, a.openai_gelu) == (fusion, openai), f"gpt2 {act}: bias_gelu_fusion {a.bias_gelu_fusion}, "
                                                                      f"openai_gelu {a.openai_gelu}")
        check(("--no-bias-gelu-fusion" in rep["train_flags"]) and (("--openai-gelu" in rep["train_flags"]) == openai),
              f"gpt2 {act}: flags {rep['train_flags']}")
        round_trip(f"gpt2 {act}", root, folder, tmp, ("activation_function",))
        compare_logits(f"gpt2 {act} TP 1", model, root, tmp, V, Vp, False, flags=[f for f in rep["train_flags"] if f in ("--no-bias-gelu-fusion", "--openai-gelu")], wrong=wrong)
        mds_train_loss(f"gpt2-{act}", data, root, rep, model, Vp)


def bloom_case(tmp, data):
    print("BloomForCausalLM:")
    model = bloom_model(data.V)
    folders = save_folders(model, tmp, "bloom", [data.tokenizer_json], bloom=True)
    V, Vp, Vp2 = data.V, (data.V + 127) // 128 * 128, (data.V + 255) // 256 * 256
    roots = {kind: os.path.join(tmp, f"bloom-{kind}-tp1") for kind in folders}
    if not all([convert(f"bloom {kind}", folders[kind], roots[kind]) for kind in folders]):
        return
    base = layer_tensors(roots["safetensors"])
    for kind in ("safetensors-sharded", "bin", "bin-sharded"):
        diff = same_tensors(base, layer_tensors(roots[kind]))
        check(not diff, f"bloom: the {kind} folder converts to other tensors than model.safetensors: {diff[:5]}")
    a = torch.load(os.path.join(tag_dir(roots["safetensors"]), "mp_rank_00_model_states.pt"), weights_only=False)["args"]
    check(a.position_embedding_type.name == "alibi" and a.embed_layernorm is True and a.bias_gelu_fusion is True and
          a.ffn_hidden_size == 4 * H and a.tokenizer_type == "PretrainedFromHF" and a.tokenizer_name_or_path == "hf_tokenizer" and
          a.apply_residual_connection_post_layernorm is False and a.seq_length == a.max_position_embeddings == 2048,
          f"bloom: args {vars(a)}")
    l1 = torch.load(os.path.join(tag_dir(roots["safetensors"]), "layer_01-model_00-model_states.pt"), weights_only=False)
    check(list(l1) == ["word_embeddings.weight", "word_embeddings.norm.weight", "word_embeddings.norm.bias"], f"bloom: layer_01 {list(l1)}")
    compare_logits("bloom TP 1", model, roots["safetensors"], tmp, V, Vp, True)
    back = round_trip("bloom TP 1", roots["safetensors"], folders["safetensors"], tmp, ("n_layer", "n_head", "hidden_size"))
    if back:
        check(os.path.exists(os.path.join(back, "tokenizer.json")), "bloom: the export has no tokenizer.json (args.tokenizer_name_or_path)")
    tp2 = os.path.join(tmp, "bloom-tp2pp2")
    rep = convert("bloom TP 2 x PP 2", folders["bin-sharded"], tp2, "--target-tp", "2", "--target-pp", "2", "--seq-length", str(S))
    if rep:
        compare_logits("bloom TP 2 x PP 2", model, tp2, tmp, V, Vp2, True)
        round_trip("bloom TP 2 x PP 2", tp2, folders["safetensors"], tmp)
        mds_train_loss("bloom-tp2pp2", data, tp2, rep, model, Vp2, nproc=4)
    # Post-LayerNorm residuals: from config.json into the args and back.
    post = bloom_model(V, post_ln=True, seed=4)
    folder = os.path.join(tmp, "bloom-postln")
    post.save_pretrained(folder)
    root = folder + "-ck"
    if convert("bloom post-LN", folder, root):
        a = torch.load(os.path.join(tag_dir(root), "mp_rank_00_model_states.pt"), weights_only=False)["args"]
        check(a.apply_residual_connection_post_layernorm is True, "bloom post-LN: args.apply_residual_connection_post_layernorm")
        pre = bloom_model(V, post_ln=False, seed=4)  # the same weights, pre-LayerNorm residuals
        compare_logits("bloom post-LN TP 1", post, root, tmp, V, Vp, True, flags=["--apply-residual-connection-post-layernorm"], wrong=pre)
        round_trip("bloom post-LN", root, folder, tmp, ("apply_residual_connection_post_layernorm",))


def dtype_cases(tmp, data):
    print("dtypes:")
    V = data.V
    model = gpt2_model(V, seed=5)
    bf = os.path.join(tmp, "gpt2-bf16")
    model.to(torch.bfloat16).save_pretrained(bf)
    root = bf + "-ck"
    if convert("bf16", bf, root):
        mp = torch.load(os.path.join(tag_dir(root), "mp_rank_00_model_states.pt"), weights_only=False)
        check(mp["args"].bf16 is True and mp["args"].params_dtype == torch.bfloat16, "bf16: args.bf16 / params_dtype")
        check(all(t.dtype == torch.bfloat16 for t in layer_tensors(root).values()), "bf16: layer files not all bf16")
        round_trip("bf16", root, bf, tmp)
    up = bf + "-fp32"
    if convert("bf16 --dtype fp32", bf, up, "--dtype", "fp32"):
        a, b = layer_tensors(root), layer_tensors(up)
        check(all(b[k].dtype == torch.float32 and torch.equal(b[k], a[k].float()) for k in a), "--dtype fp32: not the exact bf16 values")
    fp32 = os.path.join(tmp, "gpt2-fp32")
    randomize(model.float(), 6).save_pretrained(fp32)
    src = layer_tensors(fp32 + "-ck") if convert("fp32", fp32, fp32 + "-ck") else {}
    for flag, dt in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        out = fp32 + "-" + flag
        if src and convert(f"--dtype {flag}", fp32, out, "--dtype", flag):
            got = layer_tensors(out)
            bad = [k for k in src if got[k].dtype != dt or not torch.equal(got[k].view(torch.uint8), src[k].to(dt).view(torch.uint8))]
            check(not bad, f"--dtype {flag}: not torch's rounding of the fp32 weights: {bad[:4]}")
            a = torch.load(os.path.join(tag_dir(out), "mp_rank_00_model_states.pt"), weights_only=False)["args"]
            check(getattr(a, flag) is True and a.params_dtype == dt, f"--dtype {flag}: args")
    print("  bf16 kept bit for bit; --dtype fp32 / bf16 / fp16 convert as torch's casts")


def bmd_case(tmp, data):
    """Megatron-DeepSpeed's pretrain_gpt.py loads the TP 1 GPT2 checkpoint; its first lm loss is transformers'."""
    print("Megatron-DeepSpeed:")
    if bmd_harness.third_party_dir(SOURCE) is None or not all(bmd_harness._importable(m) for m in ("deepspeed", "regex", "six")):
        print("  ../shared/third_party/bigscience-megatron-deepspeed or deepspeed missing: skipped")
        return
    V, Vp = data.V, (data.V + 127) // 128 * 128
    model = gpt2_model(V, seed=8)
    folder = os.path.join(tmp, "gpt2-bmd")
    model.save_pretrained(folder)
    root = folder + "-ck"
    if not convert("bmd", folder, root):
        return
    build = os.environ.get("MDS_BUILD_DIR")
    tree = bmd_harness.BmdTree(os.path.join(tmp, "bmd"), source_dir=SOURCE, cache_dir=os.path.join(build, "crosscheck-cache") if build else None)
    flags = ["--tensor-model-parallel-size", 1, "--pipeline-model-parallel-size", 1, "--num-layers", L, "--hidden-size", H,
             "--ffn-hidden-size", F, "--num-attention-heads", N, "--seq-length", S, "--max-position-embeddings", S,
             "--micro-batch-size", MBS, "--global-batch-size", GBS, "--train-iters", 1, "--optimizer", "adam", "--lr", "1e-4",
             "--lr-decay-style", "constant", "--clip-grad", 1.0, "--weight-decay", 0.0, "--seed", SEED,
             "--hidden-dropout", 0.0, "--attention-dropout", 0.0, "--data-path", data.prefix, "--data-impl", "mmap",
             "--split", "90,8,2", "--vocab-file", data.vocab, "--merge-file", data.merges, "--log-interval", 1,
             "--eval-interval", 1000, "--eval-iters", 1, "--distributed-backend", "gloo", "--zero-stage", 0,
             "--load", root, "--finetune", "--no-load-optim", "--override-lr-scheduler"]
    res = tree.run(flags, nproc=1, ds_config=bmd_harness.ds_config(micro_batch_size=MBS, global_batch_size=GBS, zero_stage=0),
                   name="bmd-load", timeout=400)
    if not check(res.ok, f"bmd: pretrain_gpt.py --load {root} --finetune failed (rc {res.returncode})\n{res.tail(30)}"):
        return
    log = "\n".join(res.logs)
    check("successfully loaded checkpoint" in log, "bmd: no 'successfully loaded checkpoint' line")
    first = [it for it in res.iterations if it["iteration"] == 1]
    want = reference_loss(model, data.samples, V, Vp)
    if check(first and "lm loss" in first[0], f"bmd: no iteration 1 loss\n{res.tail(20)}"):
        got = first[0]["lm loss"]
        check(abs(got - want) <= LOSS_TOL * abs(want) + 1e-6, f"bmd: Megatron-DeepSpeed's first lm loss {got!r}, transformers' {want!r}")
        print(f"  pretrain_gpt.py --load --finetune --no-load-optim --override-lr-scheduler: loaded; first lm loss {got:.7E}, "
              f"transformers' {want:.7E}")


def hostile_cases(tmp, data):
    print("hostile inputs:")
    model = gpt2_model(data.V, seed=9)
    good = os.path.join(tmp, "h-good")
    model.save_pretrained(good)
    dst = os.path.join(tmp, "h-out")

    def refused(name, folder, want_rc, *needles, flags=(), dest=dst):
        r = hf_to_ckpt(folder, dest, *flags)
        leftovers = [f for f in os.listdir(os.path.dirname(dest)) if f.startswith("." + os.path.basename(dest) + ".tmp")]
        ok = (r.returncode == want_rc and all(n in r.stderr for n in needles) and not leftovers and
              (dest != dst or not os.path.exists(dst)) and "Traceback" not in r.stderr)
        check(ok, f"{name}: rc {r.returncode} (expected {want_rc}), stderr {r.stderr[-400:]!r}, leftovers {leftovers}")
        if ok:
            print(f"  {name}: exit {r.returncode}: {r.stderr.strip().splitlines()[-1][:200]}")

    def variant(name, change):
        folder = os.path.join(tmp, "h-" + name)
        shutil.copytree(good, folder)
        change(folder)
        return folder

    def edit_config(**kv):
        def change(folder):
            c = json.load(open(os.path.join(folder, "config.json")))
            c.update(kv)
            json.dump(c, open(os.path.join(folder, "config.json"), "w"))
        return change

    def edit_tensors(fn):
        def change(folder):
            sd = load_file(os.path.join(folder, "model.safetensors"))
            fn(sd)
            save_file(sd, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
        return change

    refused("no config.json", variant("noconfig", lambda f: os.remove(os.path.join(f, "config.json"))), 1, "config.json")
    refused("model_type llama", variant("llama", edit_config(model_type="llama")), 1, "config.json", "llama")
    refused("wrong shape", variant("shape", edit_tensors(lambda sd: sd.update({"transformer.h.1.mlp.c_fc.weight": torch.zeros(H, F + 4)}))),
            1, "transformer.h.1.mlp.c_fc.weight", f"[{H}, {F + 4}]", f"[{H}, {F}]")
    refused("missing tensor", variant("missing", edit_tensors(lambda sd: sd.pop("transformer.h.0.ln_2.bias"))), 1,
            "transformer.h.0.ln_2.bias", "missing")
    refused("extra tensor", variant("extra", edit_tensors(lambda sd: sd.update({"score.weight": torch.zeros(2, H)}))), 1, "score.weight")
    refused("block past n_layer", variant("deep", edit_config(n_layer=1)), 1, "transformer.h.1.")

    def truncate(folder):
        p = os.path.join(folder, "model.safetensors")
        data_ = open(p, "rb").read()
        open(p, "wb").write(data_[: len(data_) - 100])
    refused("truncated safetensors", variant("truncated", truncate), 1, "model.safetensors")

    def not_zip(folder):
        os.remove(os.path.join(folder, "model.safetensors"))
        open(os.path.join(folder, "pytorch_model.bin"), "wb").write(b"this is not a torch.save archive")
    refused(".bin not a zip", variant("notzip", not_zip), 1, "pytorch_model.bin", "zip")

    def legacy(folder):
        os.remove(os.path.join(folder, "model.safetensors"))
        torch.save(model.state_dict(), os.path.join(folder, "pytorch_model.bin"), _use_new_zipfile_serialization=False)
    refused("legacy torch.save", variant("legacy", legacy), 1, "pytorch_model.bin", "legacy")

    def damaged(folder):
        os.remove(os.path.join(folder, "model.safetensors"))
        p = os.path.join(folder, "pytorch_model.bin")
        torch.save(model.state_dict(), p)
        raw = bytearray(open(p, "rb").read())
        at = raw.find(b"data/0") + 4096  # inside the first storage's bytes
        raw[at] ^= 0xFF
        open(p, "wb").write(bytes(raw))
    refused("damaged .bin", variant("damaged", damaged), 1, "pytorch_model.bin")

    def missing_shard(folder):
        os.remove(os.path.join(folder, "model.safetensors"))
        json.dump({"weight_map": {"transformer.wte.weight": "model-00001-of-00002.safetensors"}},
                  open(os.path.join(folder, "model.safetensors.index.json"), "w"))
    refused("index naming a missing shard", variant("noshard", missing_shard), 1, "model-00001-of-00002.safetensors")
    refused("untied lm_head", variant("untied", edit_config(tie_word_embeddings=False)), 1, "tie_word_embeddings")
    refused("relu", variant("relu", edit_config(activation_function="relu")), 1, "activation_function")
    refused("heads over TP 3", good, 1, "--target-tp 3", flags=("--target-tp", "3"))
    refused("more stages than layers", good, 1, "--target-pp 3", flags=("--target-pp", "3"))
    refused("--target-tp 0", good, 2, "--target-tp", flags=("--target-tp", "0"))
    refused("--make-vocab-size-divisible-by 0", good, 2, "--make-vocab-size-divisible-by", flags=("--make-vocab-size-divisible-by", "0"))
    refused("--dtype fp8", good, 2, "--dtype", flags=("--dtype", "fp8"))
    refused("--seq-length past n_positions", good, 2, "--seq-length", flags=("--seq-length", str(2 * S)))
    refused("SRC inside DST", good, 2, "destination", dest=tmp)
    # An existing destination: refused without --overwrite (left as it was), and --overwrite replaces only a checkpoint.
    os.makedirs(dst)
    open(os.path.join(dst, "keep.txt"), "w").write("mine")
    r = hf_to_ckpt(good, dst)
    check(r.returncode == 1 and "--overwrite" in r.stderr and os.listdir(dst) == ["keep.txt"], f"existing DST: {r.returncode} {r.stderr[-300:]}")
    r = hf_to_ckpt(good, dst, "--overwrite")
    check(r.returncode == 1 and "latest" in r.stderr and os.listdir(dst) == ["keep.txt"], f"--overwrite of a non-checkpoint: {r.returncode} {r.stderr[-300:]}")
    shutil.rmtree(dst)
    check(hf_to_ckpt(good, dst).returncode == 0 and hf_to_ckpt(good, dst, "--overwrite", "--target-tp", "2").returncode == 0 and
          os.path.exists(os.path.join(tag_dir(dst), "layer_01-model_01-model_states.pt")), "--overwrite of an earlier checkpoint")
    print("  existing destination: refused without --overwrite; --overwrite replaces an earlier checkpoint only")


def main():
    tmp = tempfile.mkdtemp(prefix="hf-to-ckpt-")
    started = time.time()
    data = Data(tmp)
    cases = {"gpt2": gpt2_case, "gelu": gelu_cases, "bloom": bloom_case, "dtype": dtype_cases, "bmd": bmd_case, "hostile": hostile_cases}
    for name in sys.argv[1:] or list(cases):
        t = time.time()
        cases[name](tmp, data)
        print(f"{name}: {time.time() - t:.1f} s")
    bmd_harness.finish(started, tmp)


if __name__ == "__main__":
    main()

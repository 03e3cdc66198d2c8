"""Writes checkpoints the way bigscience-workshop/Megatron-DeepSpeed + DeepSpeed (BLOOM era) saved them, for the
tests that read real-world checkpoints (specs/checkpoints.md §1-§5, §8): a DeepSpeed pipeline layout

    <root>/latest                                   "global_step<N>", no newline
    <root>/global_step<N>/layer_01-model_TT-model_states.pt      embedding (TP shard TT)
    <root>/global_step<N>/layer_03 .. layer_{L+2}-model_TT-...   transformer blocks
    <root>/global_step<N>/layer_{L+4}-model_TT-model_states.pt   final LayerNorm
    <root>/global_step<N>/mp_rank_MM_model_states.pt             MM = pp * t + tp
    <root>/global_step<N>/bf16_zero_pp_rank_D_mp_rank_MM_optim_states.pt   (bf16 runs)

with what those files hold: OrderedDict state dicts of cloned tensors (bf16 or fp16), `args` as an
argparse.Namespace (with a PositionEmbeddingType enum, torch dtypes, a collections.deque), checkpoint_version 3.0,
Python / numpy / torch RNG states, the AnnealingLR state, DeepSpeed's keys (a set, param_shapes as OrderedDicts
of torch.Size), and the BF16 optimizer's flat fp32 partitions in BMD's three parameter groups with
fragment_address dataclasses. Storage locations can be made 'cuda:N' as on the GPUs that wrote them, and files
can be saved through a file object (archive name "archive") as DeepSpeed 0.6 did for optimizer files.

Use: make_checkpoint(root, ModelShape(...), tp=2, pp=2, dp=2, ...) -> dict of the global (unsharded) weights by
Megatron name, to compare what a reader reconstructs. Needs torch and numpy; defines stand-in modules
`megatron.enums` and `deepspeed.runtime.bf16_optimizer` so the pickles name the same classes as the real ones.
"""
import argparse
import collections
import dataclasses
import enum
import io
import math
import os
import random
import sys
import types
from contextlib import contextmanager

import numpy as np
import torch


# Stand-ins for the classes the real files reference by module path.
class PositionEmbeddingType(enum.Enum):
    rotary = 1
    absolute = 2
    alibi = 3


@dataclasses.dataclass
class fragment_address:  # noqa: N801 (DeepSpeed's name)
    numel: int
    start: int


def _install_module(name, **attrs):
    """Registers `attrs` under module `name` (creating only the modules that do not import), so pickles name the
    classes as the real files do. An installed real module (e.g. DeepSpeed's) keeps its own class."""
    import importlib
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        mod_name = ".".join(parts[:i])
        if mod_name not in sys.modules:
            try:
                importlib.import_module(mod_name)
            except Exception:  # noqa: BLE001
                sys.modules[mod_name] = types.ModuleType(mod_name)
                if i > 1:
                    setattr(sys.modules[".".join(parts[:i - 1])], parts[i - 1], sys.modules[mod_name])
    module = sys.modules[name]
    for k, v in attrs.items():
        if not hasattr(module, k):
            v.__module__ = name
            setattr(module, k, v)


_install_module("megatron.enums", PositionEmbeddingType=PositionEmbeddingType)
_install_module("deepspeed.runtime.bf16_optimizer", fragment_address=fragment_address)
PositionEmbeddingType = sys.modules["megatron.enums"].PositionEmbeddingType  # noqa: F811
fragment_address = sys.modules["deepspeed.runtime.bf16_optimizer"].fragment_address  # noqa: F811


@dataclasses.dataclass
class ModelShape:
    num_layers: int = 2
    hidden: int = 16
    heads: int = 2
    ffn: int = 64
    padded_vocab: int = 128
    seq: int = 32
    embed_layernorm: bool = False
    alibi: bool = False
    dtype: torch.dtype = torch.bfloat16


@contextmanager
def storage_location(location):
    """Makes torch.save record `location` (e.g. 'cuda:3') for every storage, as GPU-saved files have."""
    if location is None:
        yield
        return
    import torch.serialization as ser
    saved = ser.location_tag
    ser.location_tag = lambda storage: location
    try:
        yield
    finally:
        ser.location_tag = saved


def global_weights(shape, seed):
    """The unsharded Megatron weights, by (layer index, name)."""
    g = torch.Generator().manual_seed(seed)
    h, f, L = shape.hidden, shape.ffn, shape.num_layers
    rnd = lambda *s: (torch.randn(*s, generator=g) * 0.02)  # noqa: E731
    w = collections.OrderedDict()
    w[(1, "word_embeddings.weight")] = rnd(shape.padded_vocab, h)
    if shape.embed_layernorm:
        w[(1, "word_embeddings.norm.weight")] = 1 + rnd(h)
        w[(1, "word_embeddings.norm.bias")] = rnd(h)
    if not shape.alibi:
        w[(1, "position_embeddings.weight")] = rnd(shape.seq, h)
    for i in range(L):
        k = i + 3
        w[(k, "input_layernorm.weight")] = 1 + rnd(h)
        w[(k, "input_layernorm.bias")] = rnd(h)
        w[(k, "self_attention.query_key_value.weight")] = rnd(3 * h, h)
        w[(k, "self_attention.query_key_value.bias")] = rnd(3 * h)
        w[(k, "self_attention.dense.weight")] = rnd(h, h)
        w[(k, "self_attention.dense.bias")] = rnd(h)
        w[(k, "post_attention_layernorm.weight")] = 1 + rnd(h)
        w[(k, "post_attention_layernorm.bias")] = rnd(h)
        w[(k, "mlp.dense_h_to_4h.weight")] = rnd(f, h)
        w[(k, "mlp.dense_h_to_4h.bias")] = rnd(f)
        w[(k, "mlp.dense_4h_to_h.weight")] = rnd(h, f)
        w[(k, "mlp.dense_4h_to_h.bias")] = rnd(h)
    w[(L + 4, "weight")] = 1 + rnd(h)
    w[(L + 4, "bias")] = rnd(h)
    return {k: v.to(shape.dtype) for k, v in w.items()}


def tp_split_dim(name):
    """Megatron's TP split of a parameter (specs/checkpoints.md §4): 0 column-parallel, 1 row-parallel, None replicated."""
    if name in ("word_embeddings.weight", "self_attention.query_key_value.weight", "self_attention.query_key_value.bias",
                "mlp.dense_h_to_4h.weight", "mlp.dense_h_to_4h.bias"):
        return 0
    if name in ("self_attention.dense.weight", "mlp.dense_4h_to_h.weight"):
        return 1
    return None


def shard(tensor, name, tp, rank):
    dim = tp_split_dim(name)
    if dim is None:
        return tensor.clone()
    return tensor.chunk(tp, dim=dim)[rank].clone()


def stage_layers(shape, pp):
    """Layer indices per pipeline stage, 'type:transformer' partitioning: blocks spread evenly, the embedding on
    stage 0, the final norm on the last stage."""
    L = shape.num_layers
    per = [L // pp + (1 if s < L % pp else 0) for s in range(pp)]
    out, start = [], 0
    for s in range(pp):
        layers = [i + 3 for i in range(start, start + per[s])]
        start += per[s]
        if s == 0:
            layers = [1] + layers
        if s == pp - 1:
            layers = layers + [L + 4]
        out.append(layers)
    return out


def megatron_args(shape, tp, pp, dp, iteration, consumed_samples):
    return argparse.Namespace(
        num_layers=shape.num_layers, hidden_size=shape.hidden, ffn_hidden_size=shape.ffn,
        num_attention_heads=shape.heads, seq_length=shape.seq, max_position_embeddings=shape.seq,
        make_vocab_size_divisible_by=128, padded_vocab_size=shape.padded_vocab,
        tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, data_parallel_size=dp,
        world_size=tp * pp * dp, micro_batch_size=1, global_batch_size=dp * 4,
        rampup_batch_size=None, train_samples=10_000, lr=1e-4, min_lr=1e-5, lr_decay_style="cosine",
        position_embedding_type=PositionEmbeddingType.alibi if shape.alibi else PositionEmbeddingType.absolute,
        embed_layernorm=shape.embed_layernorm, params_dtype=shape.dtype, bf16=shape.dtype == torch.bfloat16,
        fp16=shape.dtype == torch.float16, tokenizer_type="PretrainedFromHF", deepspeed=True,
        consumed_train_samples=consumed_samples, consumed_valid_samples=0, consumed_train_tokens=consumed_samples * shape.seq,
        gigaflos_no_embeds=0, iteration=iteration, skip_train_iteration_range=collections.deque([[10, 20]]),
        glu_activation=None, checkpoint_activations=True, seed=42)


def _save(obj, path, via_file_object):
    if via_file_object:
        with open(path, "wb") as fd:
            torch.save(obj, fd)
    else:
        torch.save(obj, path)


def make_checkpoint(root, shape=ModelShape(), tp=1, pp=1, dp=1, iteration=10, seed=0, location=None,
                    optimizer_via_file_object=False, write_optimizer=True, original_vocab=None, last_stage_tied=False,
                    moments_seed=None):
    """original_vocab: also write checkpoint_info (BMD after 0f23a729) with this original_vocab_size.
    last_stage_tied: with pp > 1 the last stage also holds the tied embedding (minus its LayerNorm) in param_shapes
    and its optimizer files, as BMD's PipelineModule does for the LM head.
    moments_seed: exp_avg / exp_avg_sq from per-parameter random tensors sharded like the weights (zeros in the
    padding) instead of one constant per group."""
    tag = f"global_step{iteration}"
    step_dir = os.path.join(root, tag)
    os.makedirs(step_dir, exist_ok=True)
    weights = global_weights(shape, seed)
    args = megatron_args(shape, tp, pp, dp, iteration, consumed_samples=iteration * dp * 4)
    stages = stage_layers(shape, pp)
    moments = None
    if moments_seed is not None:
        g = torch.Generator().manual_seed(moments_seed)
        moments = {k: (torch.randn(v.shape, generator=g) * 1e-3, torch.rand(v.shape, generator=g) * 1e-6) for k, v in weights.items()}
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    with storage_location(location):
        for layer in sorted({k[0] for k in weights}):
            for r in range(tp):
                sd = collections.OrderedDict((name, shard(t, name, tp, r)) for (li, name), t in weights.items() if li == layer)
                _save(sd, os.path.join(step_dir, f"layer_{layer:02d}-model_{r:02d}-model_states.pt"), False)
        for s in range(pp):
            for r in range(tp):
                mp = s * tp + r
                names = [(li, name) for (li, name) in weights if li in stages[s]]
                if last_stage_tied and pp > 1 and s == pp - 1:
                    names = [(li, name) for (li, name) in weights if li == 1 and not name.startswith("word_embeddings.norm.")] + names
                shapes = collections.OrderedDict(
                    (("tied_modules.embed." if li == 1 else f"{li}.") + name, torch.Size(shard(weights[(li, name)], name, tp, r).shape))
                    for li, name in names)
                state = {
                    "module": None, "buffer_names": [], "optimizer": None, "param_shapes": [shapes],
                    "lr_scheduler": {"max_lr": 1e-4, "warmup_steps": 100, "num_steps": iteration * dp * 4,
                                     "warmup_tokens": 0, "num_tokens": iteration * dp * 4 * shape.seq,
                                     "decay_style": "cosine", "decay_steps": 10_000, "min_lr": 1e-5},
                    "sparse_tensor_module_names": set(), "skipped_steps": 0, "global_steps": iteration,
                    "global_samples": iteration * dp * 4, "dp_world_size": dp, "mp_world_size": pp * tp,
                    "ds_config": "ds_config.json", "ds_version": "0.6.1+2b8c8e7",
                    "args": args, "checkpoint_version": 3.0, "iteration": iteration,
                    "tokens": iteration * dp * 4 * shape.seq,
                    **({"checkpoint_info": {"padded_vocab_size": shape.padded_vocab, "original_vocab_size": original_vocab}}
                       if original_vocab is not None else {}),
                    "random_rng_state": random.getstate(), "np_rng_state": np.random.get_state(),
                    "torch_rng_state": torch.get_rng_state(), "cuda_rng_state": torch.get_rng_state(),
                    "rng_tracker_states": {"model-parallel-rng": torch.get_rng_state()},
                }
                _save(state, os.path.join(step_dir, f"mp_rank_{mp:02d}_model_states.pt"), False)
                if write_optimizer and shape.dtype == torch.bfloat16:
                    _write_bf16_optimizer(step_dir, weights, names, tp, r, mp, dp, optimizer_via_file_object, moments)
    with open(os.path.join(root, "latest"), "w") as f:
        f.write(tag)
    return {(li, name): t for (li, name), t in weights.items()}


def _write_bf16_optimizer(step_dir, weights, names, tp, r, mp, dp, via_file_object, moments=None):
    """BF16_Optimizer.state_dict() per DP rank in BMD's three groups (WD first half, WD second half, no WD)."""
    def pname(li, name):
        return ("tied_modules.embed." if li == 1 else f"{li}.") + name
    no_wd = [(li, n) for li, n in names if n.endswith("bias") or "layernorm" in n or "norm." in n or n == "weight"]
    wd = [k for k in names if k not in no_wd]
    groups = [wd[: len(wd) // 2], wd[len(wd) // 2:], no_wd]
    for d in range(dp):
        singles, paddings, mappings, states = [], [], [], {}
        for gi, group in enumerate(groups):
            flat = torch.cat([shard(weights[k], k[1], tp, r).float().flatten() for k in group]) if group else torch.zeros(0)
            align = 2 * dp
            pad = (-flat.numel()) % align
            flat = torch.cat([flat, torch.zeros(pad)])
            ps = flat.numel() // dp
            part = flat[d * ps:(d + 1) * ps].clone()
            singles.append(part)
            paddings.append(pad if d == dp - 1 else 0)
            mapping, offset = collections.OrderedDict(), 0
            for k in group:
                n = shard(weights[k], k[1], tp, r).numel()
                lo, hi = max(offset, d * ps), min(offset + n, (d + 1) * ps)
                if lo < hi:
                    mapping[pname(*k)] = fragment_address(numel=hi - lo, start=lo - d * ps)
                offset += n
            mappings.append(mapping)
            if moments is None:
                states[gi] = {"exp_avg": torch.full((ps,), 0.01 * (gi + 1)), "exp_avg_sq": torch.full((ps,), 1e-4)}
            else:
                flat_m = [torch.cat([shard(moments[k][j], k[1], tp, r).flatten() for k in group] + [torch.zeros(pad)])
                          if group else torch.zeros(pad) for j in range(2)]
                states[gi] = {"exp_avg": flat_m[0][d * ps:(d + 1) * ps].clone(), "exp_avg_sq": flat_m[1][d * ps:(d + 1) * ps].clone()}
        base = {"state": states, "param_groups": [
            {"lr": 1e-4, "bias_correction": True, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.0 if gi == 2 else 0.1,
             "step": 10, "params": [gi]} for gi in range(3)]}
        sd = {"optimizer_state_dict": {"clip_grad": 1.0, "base_optimizer_state": base,
                                       "single_partition_of_fp32_groups": singles, "group_paddings": paddings,
                                       "partition_count": [dp] * 3, "ds_version": "0.6.1+2b8c8e7",
                                       "param_slice_mappings": mappings},
              "ds_config": "ds_config.json", "ds_version": "0.6.1+2b8c8e7"}
        _save(sd, os.path.join(step_dir, f"bf16_zero_pp_rank_{d}_mp_rank_{mp:02d}_optim_states.pt"), via_file_object)


if __name__ == "__main__":
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        w = make_checkpoint(tmp, ModelShape(num_layers=3, embed_layernorm=True, alibi=True), tp=2, pp=2, dp=2,
                            location="cuda:3", optimizer_via_file_object=True)
        files = sorted(os.listdir(os.path.join(tmp, "global_step10")))
        print("\n".join(files))
        sd = torch.load(os.path.join(tmp, "global_step10", "layer_03-model_01-model_states.pt"), map_location="cpu")
        assert torch.equal(sd["self_attention.dense.weight"], w[(3, "self_attention.dense.weight")].chunk(2, dim=1)[1])
        mp = torch.load(os.path.join(tmp, "global_step10", "mp_rank_03_model_states.pt"), map_location="cpu",
                        weights_only=False)
        assert isinstance(mp["args"], argparse.Namespace) and mp["args"].position_embedding_type == PositionEmbeddingType.alibi
        print("OK:", len(files), "files; torch.load reads them back")

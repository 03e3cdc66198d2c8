"""The Python way to convert a DeepSpeed pipeline checkpoint to a Hugging Face GPT2 folder, as BigScience's
scripts did it (tools/convert_checkpoint + transformers' convert_megatron_gpt2_checkpoint): torch.load every
layer file of every TP rank, merge the shards, rename to GPT2's keys (QKV rows [n,3,d] -> [3,n,d], Linear
weights transposed for Conv1D), then write model.safetensors and config.json.
  python bench/ckpt/reference.py CHECKPOINT_TAG_DIR OUT_DIR"""
import collections
import glob
import json
import os
import re
import sys

import torch
from safetensors.torch import save_file

# The pickled args name megatron.enums, as in BigScience's files: the stand-in module of the test fixture
# plays Megatron-DeepSpeed's (its tools ran with megatron importable).
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "crosscheck"))
import bmd_checkpoint  # noqa: E402,F401

CAT0 = ("word_embeddings.weight", "self_attention.query_key_value.weight", "self_attention.query_key_value.bias",
        "mlp.dense_h_to_4h.weight", "mlp.dense_h_to_4h.bias")
CAT1 = ("self_attention.dense.weight", "mlp.dense_4h_to_h.weight")


def merged_layers(tag_dir):
    files = glob.glob(os.path.join(tag_dir, "layer_*-model_*-model_states.pt"))
    by_layer = collections.defaultdict(dict)
    for f in files:
        m = re.match(r"layer_(\d+)-model_(\d+)-model_states\.pt", os.path.basename(f))
        by_layer[int(m.group(1))][int(m.group(2))] = f
    for layer in sorted(by_layer):
        shards = [torch.load(by_layer[layer][r], map_location="cpu", weights_only=False) for r in sorted(by_layer[layer])]
        out = collections.OrderedDict()
        for name in shards[0]:
            parts = [s[name] for s in shards]
            if name in CAT0:
                out[name] = torch.cat(parts, 0)
            elif name in CAT1:
                out[name] = torch.cat(parts, 1)
            else:
                out[name] = (sum(p.float() for p in parts) / len(parts)).to(parts[0].dtype)
        yield layer, out


def main():
    tag_dir, out_dir = sys.argv[1], sys.argv[2]
    args = torch.load(os.path.join(tag_dir, "mp_rank_00_model_states.pt"), map_location="cpu", weights_only=False)["args"]
    n, h = args.num_attention_heads, args.hidden_size
    layers = list(merged_layers(tag_dir))
    sd = {}
    for i, (_, w) in enumerate(layers):
        if i == 0:
            sd["transformer.wte.weight"] = w["word_embeddings.weight"]
            sd["transformer.wpe.weight"] = w["position_embeddings.weight"]
        elif i == len(layers) - 1:
            sd["transformer.ln_f.weight"], sd["transformer.ln_f.bias"] = w["weight"], w["bias"]
        else:
            p = f"transformer.h.{i - 1}."
            d = h // n
            qkv_w = w["self_attention.query_key_value.weight"].view(n, 3, d, h).transpose(0, 1).reshape(3 * h, h)
            qkv_b = w["self_attention.query_key_value.bias"].view(n, 3, d).transpose(0, 1).reshape(3 * h)
            sd[p + "ln_1.weight"], sd[p + "ln_1.bias"] = w["input_layernorm.weight"], w["input_layernorm.bias"]
            sd[p + "attn.c_attn.weight"], sd[p + "attn.c_attn.bias"] = qkv_w.t().contiguous(), qkv_b.contiguous()
            sd[p + "attn.c_proj.weight"] = w["self_attention.dense.weight"].t().contiguous()
            sd[p + "attn.c_proj.bias"] = w["self_attention.dense.bias"]
            sd[p + "ln_2.weight"], sd[p + "ln_2.bias"] = w["post_attention_layernorm.weight"], w["post_attention_layernorm.bias"]
            sd[p + "mlp.c_fc.weight"] = w["mlp.dense_h_to_4h.weight"].t().contiguous()
            sd[p + "mlp.c_fc.bias"] = w["mlp.dense_h_to_4h.bias"]
            sd[p + "mlp.c_proj.weight"] = w["mlp.dense_4h_to_h.weight"].t().contiguous()
            sd[p + "mlp.c_proj.bias"] = w["mlp.dense_4h_to_h.bias"]
    os.makedirs(out_dir, exist_ok=True)
    save_file(sd, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": args.padded_vocab_size,
              "n_positions": args.max_position_embeddings, "n_embd": h, "n_layer": args.num_layers, "n_head": n,
              "n_inner": args.ffn_hidden_size, "activation_function": "gelu_fast",
              "layer_norm_epsilon": getattr(args, "layernorm_epsilon", 1e-5), "torch_dtype": "bfloat16"}
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


if __name__ == "__main__":
    main()

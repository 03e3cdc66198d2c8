"""Writes the bench checkpoint once: a GPT of about 1.3B parameters (24 layers, hidden 2048, 16 heads, vocab 50304,
positions 2048) in bf16, TP 2 x PP 2, in the layout BigScience's Megatron-DeepSpeed saved (weights only: the
layer and mp_rank files; tests/crosscheck/bmd_checkpoint.py writes it).
  python bench/ckpt/make_checkpoint.py OUT_DIR"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "crosscheck"))
import bmd_checkpoint  # noqa: E402

SHAPE = bmd_checkpoint.ModelShape(num_layers=24, hidden=2048, heads=16, ffn=8192, padded_vocab=50304, seq=2048)

if __name__ == "__main__":
    out = sys.argv[1]
    weights = bmd_checkpoint.make_checkpoint(out, SHAPE, tp=2, pp=2, dp=1, iteration=1000, write_optimizer=False)
    params = sum(t.numel() for t in weights.values())
    largest = max(t.numel() * t.element_size() for t in weights.values())
    print(f"{params} parameters, largest tensor {largest} bytes")

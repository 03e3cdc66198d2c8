#!/usr/bin/env python3
"""Reference for bench/dist/overlap.sh: one data-parallel training step as PyTorch does it, on the same model shape
as the mds-train run: transformers' GPT2LMHeadModel (Megatron's GPT: pre-LayerNorm blocks, tanh GeLU, tied
embeddings) wrapped in DistributedDataParallel on Gloo (25 MiB buckets, all-reduce overlapped with backward), AdamW,
gradient clipping at 1.0. Started like mds-train (RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT); rank 0 prints one
JSON line with the milliseconds of each timed step."""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from transformers import GPT2Config, GPT2LMHeadModel

p = argparse.ArgumentParser()
p.add_argument("--layers", type=int, required=True)
p.add_argument("--hidden", type=int, required=True)
p.add_argument("--heads", type=int, required=True)
p.add_argument("--vocab", type=int, required=True)
p.add_argument("--seq", type=int, required=True)
p.add_argument("--mbs", type=int, required=True)
p.add_argument("--iters", type=int, default=10)
p.add_argument("--warmup", type=int, default=2)
a = p.parse_args()

torch.set_num_threads(1)
dist.init_process_group("gloo")
torch.manual_seed(1234)
cfg = GPT2Config(n_layer=a.layers, n_embd=a.hidden, n_head=a.heads, vocab_size=a.vocab, n_positions=a.seq,
                 activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
model = DDP(GPT2LMHeadModel(cfg))
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
g = torch.Generator().manual_seed(dist.get_rank())
ms = []
for it in range(a.warmup + a.iters):
    tokens = torch.randint(0, a.vocab, (a.mbs, a.seq + 1), generator=g)
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    out = model(input_ids=tokens[:, :-1], labels=tokens[:, 1:].contiguous())
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if it >= a.warmup:
        ms.append((time.perf_counter() - t0) * 1e3)
if dist.get_rank() == 0:
    print(json.dumps({"impl": "PyTorch DDP (GPT2LMHeadModel, overlapped)", "ms": ms}))
dist.destroy_process_group()

"""PyTorch (Python, eager) reference for bench/train-cpu: the same Megatron GPT as libcore/model, written with
torch.nn.functional (layer_norm, linear, scaled_dot_product_attention with is_causal, tanh GeLU, tied logits, fp32
cross entropy), trained with torch.optim.AdamW in Megatron's two parameter groups (PyTorch's default foreach
implementation, and fused=True) and torch.nn.utils.clip_grad_norm_. Same shapes, random tokens, no dropout.
Prints one JSON line per optimizer variant, like bench_train_step."""
import argparse
import json
import math
import time

import torch
import torch.nn.functional as F


class Gpt(torch.nn.Module):
    def __init__(self, L, h, n, s, V):
        super().__init__()
        self.h, self.n = h, n
        std, out_std = 0.02, 0.02 / math.sqrt(2 * L)
        P = torch.nn.Parameter
        self.wte = P(torch.randn(V, h) * std)
        self.wpe = P(torch.randn(s, h) * std)
        self.blocks = torch.nn.ModuleList()
        for _ in range(L):
            b = torch.nn.Module()
            b.ln1_w, b.ln1_b = P(torch.ones(h)), P(torch.zeros(h))
            b.qkv_w, b.qkv_b = P(torch.randn(3 * h, h) * std), P(torch.zeros(3 * h))
            b.dense_w, b.dense_b = P(torch.randn(h, h) * out_std), P(torch.zeros(h))
            b.ln2_w, b.ln2_b = P(torch.ones(h)), P(torch.zeros(h))
            b.fc1_w, b.fc1_b = P(torch.randn(4 * h, h) * std), P(torch.zeros(4 * h))
            b.fc2_w, b.fc2_b = P(torch.randn(h, 4 * h) * out_std), P(torch.zeros(h))
            self.blocks.append(b)
        self.lnf_w, self.lnf_b = P(torch.ones(h)), P(torch.zeros(h))

    def forward(self, tokens, labels):
        B, S = tokens.shape
        h, n, d = self.h, self.n, self.h // self.n
        x = F.embedding(tokens, self.wte) + F.embedding(torch.arange(S), self.wpe)
        for b in self.blocks:
            qkv = F.linear(F.layer_norm(x, (h,), b.ln1_w, b.ln1_b), b.qkv_w, b.qkv_b).view(B, S, n, 3, d)
            q, k, v = (qkv.select(3, i).transpose(1, 2) for i in range(3))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, S, h)
            x = x + F.linear(a, b.dense_w, b.dense_b)
            m = F.gelu(F.linear(F.layer_norm(x, (h,), b.ln2_w, b.ln2_b), b.fc1_w, b.fc1_b), approximate="tanh")
            x = x + F.linear(m, b.fc2_w, b.fc2_b)
        logits = F.linear(F.layer_norm(x, (h,), self.lnf_w, self.lnf_b), self.wte).float()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    for k in ("layers", "hidden", "heads", "seq", "vocab", "batch", "steps", "warmup", "threads"):
        ap.add_argument("--" + k, type=int, default={"batch": 8, "steps": 10, "warmup": 3, "threads": 0}.get(k))
    ap.add_argument("--micro-batches", type=int, default=1)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    for fused in (False, True):
        torch.manual_seed(1234)
        model = Gpt(a.layers, a.hidden, a.heads, a.seq, a.vocab)
        decay = [p for p in model.parameters() if p.dim() == 2]
        no_decay = [p for p in model.parameters() if p.dim() == 1]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                lr=1e-4, fused=fused)
        g = torch.Generator().manual_seed(7)
        tokens = torch.randint(a.vocab, (a.micro_batches, a.batch, a.seq + 1), generator=g)
        ms, loss_v = [], 0.0
        for i in range(a.warmup + a.steps):
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=False)
            total = 0.0
            for j in range(a.micro_batches):
                mb = tokens[j]
                loss = model(mb[:, :-1], mb[:, 1:])
                total += loss.item()
                (loss / a.micro_batches).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            loss_v = total / a.micro_batches
            dt = (time.perf_counter() - t0) * 1e3
            if i >= a.warmup:
                ms.append(dt)
        params = sum(p.numel() for p in model.parameters())
        print(json.dumps({"impl": "pytorch-eager" + ("-fused-adamw" if fused else ""), "threads": torch.get_num_threads(),
                          "params": params, "loss": loss_v, "ms_per_step": ms}))


if __name__ == "__main__":
    main()

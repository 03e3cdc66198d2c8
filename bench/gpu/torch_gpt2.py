"""GPT-2 trained with PyTorch for bench/gpu: eager, or torch.compile'd (--compile model: the whole model as
nanoGPT and llm.c's train_gpt2.py do; --compile block: each transformer block on its own, which compiles one
block's graph once for all layers and so much faster for deep models).

The model is the one llm.c and mds-train train: learned positions, pre-LayerNorm blocks with biases, fused QKV,
causal scaled_dot_product_attention (flash attention on the GPU), GeLU in its tanh form, no dropout, output
logits tied to the token embedding over the padded vocabulary; GPT-2's initialization. AdamW (fused where this
torch has it) with betas (0.9, 0.95), eps 1e-8, weight decay on the matrices only, a constant learning rate,
global-norm clipping at 1.0, micro batches accumulated into the global batch. bf16: autocast over fp32 weights
(as nanoGPT and llm.c's train_gpt2.py). Random tokens, drawn on the device.

Prints one JSON line: per-step milliseconds (each step ends with loss.item(), which waits for the device),
losses, parameters, peak memory (torch.cuda.max_memory_allocated on the GPU).
--matmul-peak instead times a large matrix product and prints its TFLOP/s and the device's name."""
import argparse
import json
import math
import time

import torch
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(self, C, H, L):
        super().__init__()
        self.heads = H
        self.ln_1 = torch.nn.LayerNorm(C)
        self.c_attn = torch.nn.Linear(C, 3 * C)
        self.attn_proj = torch.nn.Linear(C, C)
        self.ln_2 = torch.nn.LayerNorm(C)
        self.c_fc = torch.nn.Linear(C, 4 * C)
        self.mlp_proj = torch.nn.Linear(4 * C, C)
        for lin, std in ((self.c_attn, 0.02), (self.attn_proj, 0.02 / math.sqrt(2 * L)), (self.c_fc, 0.02),
                         (self.mlp_proj, 0.02 / math.sqrt(2 * L))):
            torch.nn.init.normal_(lin.weight, 0.0, std)
            torch.nn.init.zeros_(lin.bias)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.attn_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt2(torch.nn.Module):
    def __init__(self, L, C, H, T, Vp):
        super().__init__()
        self.wte = torch.nn.Embedding(Vp, C)
        self.wpe = torch.nn.Embedding(T, C)
        torch.nn.init.normal_(self.wte.weight, 0.0, 0.02)
        torch.nn.init.normal_(self.wpe.weight, 0.0, 0.02)
        self.blocks = torch.nn.ModuleList(Block(C, H, L) for _ in range(L))
        self.ln_f = torch.nn.LayerNorm(C)

    def forward(self, tokens, targets):
        T = tokens.shape[1]
        x = self.wte(tokens) + self.wpe(torch.arange(T, device=tokens.device))
        for b in self.blocks:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))


def matmul_peak(device, threads):
    """TFLOP/s of the fastest of several large matrix products: bf16 8192³ on the GPU, fp32 1024³ on the CPU."""
    if device == "cuda":
        n, dtype = 8192, torch.bfloat16
    else:
        n, dtype = 1024, torch.float32
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    times = []
    for i in range(13):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        torch.mm(a, b)
        if device == "cuda":
            torch.cuda.synchronize()
        if i >= 3:
            times.append(time.perf_counter() - t0)
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    return {"tflops": 2 * n ** 3 / min(times) / 1e12, "device_name": name, "n": n, "dtype": str(dtype),
            "threads": torch.get_num_threads()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--padded-vocab", type=int, default=50304)
    ap.add_argument("--vocab", type=int, default=50257, help="tokens are drawn from [0, vocab)")
    ap.add_argument("--micro-batch", type=int, default=16)
    ap.add_argument("--global-batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--compile", choices=["none", "model", "block"], default="none")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--matmul-peak", action="store_true")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.matmul_peak:
        print(json.dumps(matmul_peak(a.device, a.threads)))
        return
    if a.global_batch % a.micro_batch:
        raise SystemExit("torch_gpt2: --global-batch must be a multiple of --micro-batch")
    accum = a.global_batch // a.micro_batch
    torch.manual_seed(a.seed)
    if a.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    with torch.device(a.device):  # initialized where it trains: a 1.5B model's init on the CPU takes seconds
        model = Gpt2(a.layers, a.hidden, a.heads, a.seq, a.padded_vocab)
    params = sum(p.numel() for p in model.parameters())
    run = model
    if a.compile == "model":
        run = torch.compile(model)
    elif a.compile == "block":
        for b in model.blocks:
            b.compile()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": a.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    try:
        opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
        fused = True
    except (RuntimeError, TypeError):
        opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
        fused = False
    gen = torch.Generator(device=a.device).manual_seed(a.seed + 1)
    dtype = torch.bfloat16 if a.precision == "bf16" else torch.float32
    ms, losses = [], []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        total = torch.zeros((), device=a.device)
        for _ in range(accum):
            batch = torch.randint(a.vocab, (a.micro_batch, a.seq + 1), device=a.device, generator=gen)
            with torch.autocast(device_type=a.device, dtype=dtype, enabled=a.precision == "bf16"):
                loss = run(batch[:, :-1], batch[:, 1:])
            (loss / accum).backward()
            total += loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append((total / accum).item())
        ms.append((time.perf_counter() - t0) * 1e3)
    out = {"params": params, "ms_per_step": ms, "loss": losses, "fused_adamw": fused,
           "tokens_per_step": a.global_batch * a.seq, "threads": torch.get_num_threads(), "torch": torch.__version__}
    if a.device == "cuda":
        out["peak_memory_bytes"] = torch.cuda.max_memory_allocated()
        out["peak_memory_source"] = "torch.cuda.max_memory_allocated"
        out["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
        out["device_name"] = torch.cuda.get_device_name()
    print(json.dumps(out))


if __name__ == "__main__":
    main()

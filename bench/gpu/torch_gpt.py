#!/usr/bin/python3
"""Times PyTorch's training step of the GPT that bench/gpt_onnx.py writes.

Usage: python3 bench/gpu/torch_gpt.py --mode eager|compile [--layers 12]
           [--d 768] [--heads 12] [--mlp 3072] [--vocab 50304] [--seq 1024]
           [--batch 8] [--steps 20] [--warmup 5] [--device cuda] [--json OUT]

The model is the same decoder, written the way a PyTorch user writes it
(llm.c's train_gpt2.py): pre-LayerNorm blocks, fused QKV projection with
bias, causal attention through F.scaled_dot_product_attention (flash
attention on the GPU), erf GELU, tied LM head, cross-entropy, AdamW (fused on
CUDA), bf16 autocast (fp32 master weights). --mode compile wraps the model in
torch.compile. Prints one JSON line: ms/step (mean of --steps after
--warmup), tokens/s, model FLOP utilisation.
"""
import argparse
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from flops import flops_per_step, peak_flops  # noqa: E402


def attention(q, k, v):
    if hasattr(F, "scaled_dot_product_attention"):  # PyTorch >= 2.0
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    t = q.shape[-2]  # older PyTorch (the CPU dry run here): spelled out
    w = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    return w.masked_fill(~mask, float("-inf")).softmax(-1) @ v


class Block(nn.Module):
    def __init__(self, d, heads, mlp):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(d)
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.c_fc = nn.Linear(d, mlp)
        self.mlp_proj = nn.Linear(mlp, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for z in (q, k, v))
        y = attention(q, k, v)
        x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.wte = nn.Embedding(a.vocab, a.d)
        self.wpe = nn.Embedding(a.seq, a.d)
        self.h = nn.ModuleList(Block(a.d, a.heads, a.mlp) for _ in range(a.layers))
        self.ln_f = nn.LayerNorm(a.d)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)

    def forward(self, ids, labels):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device))
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.view(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["eager", "compile"], required=True)
    for name, default in (("layers", 12), ("d", 768), ("heads", 12), ("mlp", 3072),
                          ("vocab", 50304), ("seq", 1024), ("batch", 8), ("steps", 20),
                          ("warmup", 5)):
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--precision", choices=["bf16", "f32"], default="bf16")
    ap.add_argument("--json", help="also append the JSON line to this file")
    a = ap.parse_args()

    torch.manual_seed(0)
    dev = torch.device(a.device)
    model = GPT(a).to(dev)
    cuda = dev.type == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0,
                            **({"fused": True} if cuda else {}))
    step_model = torch.compile(model) if a.mode == "compile" else model
    ids = torch.randint(0, 256, (a.batch, a.seq), device=dev)
    labels = torch.randint(0, 256, (a.batch, a.seq), device=dev)
    autocast = torch.autocast(dev.type, dtype=torch.bfloat16,
                              enabled=a.precision == "bf16")

    def step():
        with autocast:
            loss = step_model(ids, labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    sync = torch.cuda.synchronize if cuda else (lambda: None)
    compile_start = time.perf_counter()
    for _ in range(a.warmup):
        loss = step()
    sync()
    warmup_s = time.perf_counter() - compile_start
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    sync()
    seconds = (time.perf_counter() - start) / a.steps
    params = sum(p.numel() for p in model.parameters())
    tokens = a.batch * a.seq
    flops = flops_per_step(a.layers, a.d, a.heads, a.seq, a.batch, params)
    peak = peak_flops(torch.cuda.get_device_name() if cuda else "cpu", a.precision)
    line = {"impl": f"pytorch-{a.mode}", "ms_per_step": seconds * 1e3,
            "tokens_per_s": tokens / seconds,
            "mfu": flops / seconds / peak if peak else None,
            "loss": float(loss), "params": params, "warmup_s": warmup_s,
            "torch": torch.__version__, "device": str(dev), "precision": a.precision}
    if cuda:
        # Everything the step holds at its peak: weights, gradients, AdamW's
        # state and the activations autograd keeps.
        line["peak_bytes"] = torch.cuda.max_memory_allocated()
    print(json.dumps(line))
    if a.json:
        with open(a.json, "a") as f:
            f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()

"""Writes the small TorchScript modules the importer's lit tests read.

Usage: /usr/bin/python3 make_pt.py OUT_DIR
"""
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class LinearRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return F.relu(self.fc(x))


class Attention(nn.Module):
    """Heads split and merged with sizes read from the input, a causal
    mask, a tied output head and the loss inside forward."""

    def __init__(self, d=8, heads=2, vocab=11):
        super().__init__()
        self.heads = heads
        self.emb = nn.Embedding(vocab, d)
        self.qkv = nn.Linear(d, 3 * d)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids, labels):
        b, t = ids.shape
        x = self.emb(ids)
        d = x.shape[-1]
        q, k, v = self.qkv(self.norm(x)).split(d, dim=2)
        q = q.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
        w = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        causal = torch.tril(torch.ones(t, t, dtype=torch.bool))
        w = F.softmax(w.masked_fill(~causal, float("-inf")), dim=-1)
        y = torch.matmul(w, v).transpose(1, 2).reshape(b, t, d)
        logits = self.head(x + y)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


class ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 2 * 2, 3)

    def forward(self, x):
        y = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.fc(torch.flatten(y, 1))


class EinsumRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 3))

    def forward(self, x):
        return torch.relu_(torch.einsum("bi,ij->bj", x, self.w)).sum()


class Frozen(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 3)
        self.a.weight.requires_grad_(False)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


class Detach(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x).detach()


class FloorDiv(nn.Module):
    def forward(self, x):
        return (x // 3) * 10 + torch.div(x, 4, rounding_mode="floor")


class Cumsum(nn.Module):
    def forward(self, x):
        return torch.cumsum(x, dim=0)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    x = torch.randn(2, 4)
    torch.jit.trace(LinearRelu(), (x,)).save(os.path.join(out, "linear_relu.traced.pt"))
    m = Attention().train()
    ids = torch.randint(0, 11, (2, 5))
    torch.jit.trace(m, (ids, ids), check_trace=False).save(os.path.join(out, "attention.traced.pt"))
    torch.jit.script(m).save(os.path.join(out, "attention.scripted.pt"))
    torch.jit.script(ConvBN().train()).save(os.path.join(out, "convbn.scripted.pt"))
    torch.jit.script(Cumsum()).save(os.path.join(out, "cumsum.scripted.pt"))
    torch.jit.script(EinsumRelu()).save(os.path.join(out, "einsum.scripted.pt"))
    torch.jit.script(Frozen()).save(os.path.join(out, "frozen.scripted.pt"))
    torch.jit.script(Detach()).save(os.path.join(out, "detach.scripted.pt"))
    torch.jit.script(FloorDiv()).save(os.path.join(out, "floordiv.scripted.pt"))
    with open(os.path.join(out, "not_torchscript.pt"), "wb") as f:
        f.write(b"not a zip archive")


if __name__ == "__main__":
    main()

"""Writes the small TorchScript modules the importer's lit tests read.

Usage: /usr/bin/python3 make_pt.py OUT_DIR
"""
import math
import os
import sys

import numpy as np
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


class Nonzero(nn.Module):
    def forward(self, x):
        return torch.nonzero(x)


class AtenOps(nn.Module):
    """cumsum, argmax/argmin, topk, one_hot, group_norm, instance_norm,
    conv_transpose2d, conv1d and index_put (integer and boolean indices,
    accumulating), each result flattened into one vector."""

    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1, output_padding=1,
                                     groups=2)
        self.gn = nn.GroupNorm(3, 6)
        self.inorm = nn.InstanceNorm2d(6, affine=True)
        self.conv1 = nn.Conv1d(6, 3, 3, padding=1, dilation=1)
        with torch.no_grad():
            self.gn.weight.uniform_(0.5, 1.5)
            self.gn.bias.uniform_(-0.5, 0.5)
            self.inorm.weight.uniform_(0.5, 1.5)

    def forward(self, x, ids):
        # x: 2x6x5x5, ids: 4 (int64, in [0, 5))
        parts = [torch.cumsum(x, dim=2), torch.cumsum(ids, 0).float(),
                 x.argmax(1).float(), x.argmin(-1, keepdim=True).float(),
                 x.flatten(1).argmax().float()]
        v, i = torch.topk(x, 3, dim=3)
        parts += [v, i.float(), torch.topk(x, 2, dim=1, largest=False)[0]]
        parts += [F.one_hot(ids, 5).float(), self.gn(x), self.inorm(x), self.up(x),
                  self.conv1(x.flatten(2))]
        y = x.clone()
        y[ids] = x[0] * 2.0
        z = x.clone()
        z[z > 0.5] = 0.5
        w = x.clone()
        w.index_put_((ids, ids), torch.ones(4, 5, 5), accumulate=True)
        parts += [y, z, w]
        return torch.cat([p.flatten() for p in parts])


class InPlace(nn.Module):
    """In-place activations (nn.SiLU(inplace=True), torchvision's
    Hardswish(inplace=True), LeakyReLU): later reads see the new value."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.act = nn.SiLU(inplace=True)
        self.hs = nn.Hardswish(inplace=True)

    def forward(self, x):
        h = self.fc(x)
        self.act(h)
        y = self.hs(h * 3.0)
        F.leaky_relu(y, 0.2, inplace=True)
        return h + y + F.hardsigmoid(x)


class Index(nn.Module):
    """A table looked up at position ids (cos_cached[position_ids]) and
    along a later dimension (x[:, idx])."""

    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.arange(24.0).reshape(6, 4))

    def forward(self, x, ids):
        return self.table[ids] * x[:, ids[0]].sum() + torch.stack([x, x * 2], 1).sum(1)


class Aliasing(nn.Module):
    """Writes through views: swin's shifted-window mask written by slice
    assignment into new_zeros, x[:, 1:3] += v, a column of a transpose
    filled, a strided view of a flat view zeroed, an in-place op's result
    written again, and a view taken before the writes read after them."""

    def forward(self, x):
        m = x.new_zeros((5, 6))
        count = 0
        for h in (slice(0, -2), slice(-2, -1), slice(-1, None)):
            for w in (slice(0, -3), slice(-3, -1), slice(-1, None)):
                m[h, w] = count
                count += 1
        y = x * 2.0
        early = y[1]
        y[:, 1:3] += x[:, :2]
        y.t()[2].fill_(-1.0)
        y.view(30)[::7].zero_()
        z = y.relu_()
        z[0, 0] = 5.0
        return m * 10 + y + early * 3 + x[:, ::2].sum()


class AdvancedIndex(nn.Module):
    """Tensor indices in several dimensions, broadcast together: adjacent
    at the front, adjacent after a slice (with a negative index), and apart
    (the broadcast dimensions go first)."""

    def forward(self, x, ids):
        a = x[ids, ids]
        b = x[:, ids, ids - 1]
        c = x[ids[:, None], :, ids[:2]]
        return torch.cat([a.flatten(), b.flatten(), c.flatten()])


class BigZeros(nn.Module):
    """torch.zeros(30000, 30000).sum(): libtorch's constant propagation
    would run it at import (3.6 GB); the importer keeps it an op."""

    def forward(self, x):
        return x + torch.zeros(30000, 30000).sum()


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
    torch.jit.script(Nonzero()).save(os.path.join(out, "nonzero.scripted.pt"))
    m = AtenOps()
    xo, ids = torch.randn(2, 6, 5, 5), torch.tensor([1, 0, 1, 0])
    torch.jit.trace(m, (xo, ids)).save(os.path.join(out, "atenops.traced.pt"))
    os.makedirs(os.path.join(out, "atenops"), exist_ok=True)
    np.save(os.path.join(out, "atenops", "x.npy"), xo.numpy())
    np.save(os.path.join(out, "atenops", "ids.npy"), ids.numpy())
    np.save(os.path.join(out, "atenops_want.npy"), m(xo, ids).detach().numpy())
    torch.jit.script(EinsumRelu()).save(os.path.join(out, "einsum.scripted.pt"))
    torch.jit.script(Frozen()).save(os.path.join(out, "frozen.scripted.pt"))
    torch.jit.script(Detach()).save(os.path.join(out, "detach.scripted.pt"))
    torch.jit.script(FloorDiv()).save(os.path.join(out, "floordiv.scripted.pt"))
    m = InPlace()
    x = torch.randn(3, 4)
    want = m(x.clone())
    torch.jit.trace(m, (x.clone(),)).save(os.path.join(out, "inplace.traced.pt"))
    os.makedirs(os.path.join(out, "inplace"), exist_ok=True)
    np.save(os.path.join(out, "inplace", "x.npy"), x.numpy())
    np.save(os.path.join(out, "inplace_want.npy"), want.detach().numpy())
    ids = torch.tensor([[0, 2, 3, 1]])
    x = torch.randn(4, 4)
    torch.jit.trace(Index(), (x, ids)).save(os.path.join(out, "index.traced.pt"))
    os.makedirs(os.path.join(out, "index"), exist_ok=True)
    np.save(os.path.join(out, "index", "x.npy"), x.numpy())
    np.save(os.path.join(out, "index", "ids.npy"), ids.numpy())
    np.save(os.path.join(out, "index_want.npy"), Index()(x, ids).numpy())
    xa = torch.randn(5, 6)
    torch.jit.trace(Aliasing(), (xa,)).save(os.path.join(out, "aliasing.traced.pt"))
    os.makedirs(os.path.join(out, "aliasing"), exist_ok=True)
    np.save(os.path.join(out, "aliasing", "x.npy"), xa.numpy())
    np.save(os.path.join(out, "aliasing_want.npy"), Aliasing()(xa).numpy())
    xi, ii = torch.randn(4, 5, 6), torch.tensor([0, 3, 1])
    torch.jit.trace(AdvancedIndex(), (xi, ii)).save(os.path.join(out, "advanced.traced.pt"))
    os.makedirs(os.path.join(out, "advanced"), exist_ok=True)
    np.save(os.path.join(out, "advanced", "x.npy"), xi.numpy())
    np.save(os.path.join(out, "advanced", "ids.npy"), ii.numpy())
    np.save(os.path.join(out, "advanced_want.npy"), AdvancedIndex()(xi, ii).numpy())
    torch.jit.script(BigZeros()).save(os.path.join(out, "bigzeros.scripted.pt"))
    with open(os.path.join(out, "not_torchscript.pt"), "wb") as f:
        f.write(b"not a zip archive")


if __name__ == "__main__":
    main()

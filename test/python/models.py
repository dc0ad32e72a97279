"""Torch modules the Python tests train through cleave.tensor_parallel,
written the way their families write them (not Cleave's zoo): a
Llama-style decoder with grouped-query attention, rotary tables as
registered buffers and an odd vocabulary; a convolutional classifier with
BatchNorm in training mode; an MLP with a frozen layer and a constant
buffer; BERT-style post-norm encoder returning logits."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class GQAttention(nn.Module):
    def __init__(self, d, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, d // heads
        self.q_proj = nn.Linear(d, heads * self.hd, bias=False)
        self.k_proj = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.v_proj = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.o_proj = nn.Linear(heads * self.hd, d, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        # Llama's repeat_kv (torch 1.13's exporter mis-exports
        # repeat_interleave on traced sizes: a Reshape [0, -1, 0, 0] of a
        # 5-D tensor).
        rep = self.heads // self.kv_heads
        k = k[:, :, None].expand(b, self.kv_heads, rep, t, self.hd).reshape(
            b, self.heads, t, self.hd)
        v = v[:, :, None].expand(b, self.kv_heads, rep, t, self.hd).reshape(
            b, self.heads, t, self.hd)
        w = q @ k.transpose(-1, -2) / math.sqrt(self.hd)
        mask = torch.full((t, t), float("-inf")).triu(1)
        y = F.softmax(w + mask, dim=-1) @ v
        return self.o_proj(y.transpose(1, 2).reshape(b, t, -1))


class Decoder(nn.Module):
    """Pre-norm decoder: GQA with rotary (rotate-half layout), SwiGLU MLP."""

    def __init__(self, vocab=61, d=32, heads=4, kv_heads=2, layers=2, ctx=8):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList()
        for _ in range(layers):
            layer = nn.Module()
            layer.input_layernorm = RMSNorm(d)
            layer.self_attn = GQAttention(d, heads, kv_heads)
            layer.post_attention_layernorm = RMSNorm(d)
            layer.gate_proj = nn.Linear(d, 3 * d, bias=False)
            layer.up_proj = nn.Linear(d, 3 * d, bias=False)
            layer.down_proj = nn.Linear(3 * d, d, bias=False)
            self.layers.append(layer)
        self.norm = RMSNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        hd = d // heads
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        freqs = torch.outer(torch.arange(ctx).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos()[None, None])
        self.register_buffer("sin_cached", emb.sin()[None, None])

    def forward(self, input_ids):
        x = self.embed_tokens(input_ids)
        t = input_ids.shape[1]
        cos, sin = self.cos_cached[:, :, :t], self.sin_cached[:, :, :t]
        for layer in self.layers:
            x = x + layer.self_attn(layer.input_layernorm(x), cos, sin)
            h = layer.post_attention_layernorm(x)
            x = x + layer.down_proj(F.silu(layer.gate_proj(h)) *
                                    layer.up_proj(h))
        return self.lm_head(self.norm(x))


class ConvNet(nn.Module):
    """A small classifier with BatchNorm (its statistics update in training
    mode) and a classifier head whose width (10) does not divide by 4."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 12, 3, padding=1, bias=False), nn.BatchNorm2d(12),
            nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(12, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(16, 24),
                                        nn.Tanh(), nn.Linear(24, 10))

    def forward(self, pixel_values):
        return self.classifier(self.features(pixel_values))


class FrozenMLP(nn.Module):
    """A frozen first layer (requires_grad False) and a constant buffer:
    neither may train."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(12, 20)
        self.embed.requires_grad_(False)
        self.fc1 = nn.Linear(20, 36)
        self.fc2 = nn.Linear(36, 5)
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 20))

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(self.embed(x) * self.scale)))


class PostNormEncoder(nn.Module):
    """BERT's post-norm layer with a padding mask input, vocabulary 30
    (not a multiple of 4), logits out, scaled by a learned scalar."""

    def __init__(self, vocab=30, d=24, heads=3, ctx=6):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, d)
        self.position_embeddings = nn.Embedding(ctx, d)
        self.emb_ln = nn.LayerNorm(d)
        self.heads = heads
        self.query = nn.Linear(d, d)
        self.key = nn.Linear(d, d)
        self.value = nn.Linear(d, d)
        self.dense = nn.Linear(d, d)
        self.ln1 = nn.LayerNorm(d)
        self.intermediate = nn.Linear(d, 2 * d)
        self.output = nn.Linear(2 * d, d)
        self.ln2 = nn.LayerNorm(d)
        self.decoder = nn.Linear(d, vocab)
        # A learned scalar (CLIP's logit_scale): a 0-d parameter.
        self.logit_scale = nn.Parameter(torch.tensor(0.3))

    def forward(self, input_ids, attention_mask):
        b, t = input_ids.shape
        pos = torch.arange(t).unsqueeze(0)
        x = self.emb_ln(self.word_embeddings(input_ids) +
                        self.position_embeddings(pos))
        hd = x.shape[-1] // self.heads

        def split(y):
            return y.view(b, t, self.heads, hd).transpose(1, 2)
        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        bias = (1.0 - attention_mask[:, None, None, :].float()) * -10000.0
        w = F.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd) + bias, dim=-1)
        a = (w @ v).transpose(1, 2).reshape(b, t, -1)
        x = self.ln1(x + self.dense(a))
        x = self.ln2(x + self.output(F.gelu(self.intermediate(x))))
        return self.decoder(x) * self.logit_scale.exp()


def decoder_batch(gen, b=2, t=8, vocab=61):
    ids = torch.randint(0, vocab, (b, t), generator=gen)
    return {"input_ids": ids,
            "labels": torch.randint(0, vocab, (b, t), generator=gen)}


def conv_batch(gen, b=6):
    return {"pixel_values": torch.randn(b, 3, 8, 8, generator=gen),
            "labels": torch.randint(0, 10, (b,), generator=gen)}


def mlp_batch(gen, b=7):
    return {"x": torch.randn(b, 12, generator=gen),
            "labels": torch.randn(b, 5, generator=gen)}


def encoder_batch(gen, b=2, t=6, vocab=30):
    mask = torch.ones(b, t, dtype=torch.long)
    mask[1, 4:] = 0
    return {"input_ids": torch.randint(0, vocab, (b, t), generator=gen),
            "attention_mask": mask,
            "labels": torch.randint(0, vocab, (b, t), generator=gen)}


def build(name, seed=0):
    """(module, batch function, loss) of a test model."""
    torch.manual_seed(seed)
    if name == "decoder":
        return Decoder(), decoder_batch, "cross_entropy"
    if name == "convnet":
        return ConvNet(), conv_batch, "cross_entropy"
    if name == "frozen_mlp":
        return FrozenMLP(), mlp_batch, "mse"
    if name == "encoder":
        return PostNormEncoder(), encoder_batch, "cross_entropy"
    raise KeyError(name)


def torch_loss(module, batch, loss):
    """What Cleave's appended loss computes, in PyTorch."""
    if loss == "auto":
        return module(**batch)
    args = {k: v for k, v in batch.items() if k != "labels"}
    out = module(**args)
    if loss == "cross_entropy":
        return F.cross_entropy(out.reshape(-1, out.shape[-1]),
                               batch["labels"].reshape(-1))
    if loss == "mse":
        return F.mse_loss(out, batch["labels"])
    return out

#!/usr/bin/python3
"""Test models written the way real LLM families write them (issue 13).

Usage:
  /usr/bin/python3 zoo/idioms.py OUT_DIR [--models gpt2_v50257,...] [--list]
      [--torchscript TS_DIR]

Each model is written in the idiom of its family's paper or model card (there
is no transformers library in Debian, so the idioms are written out here),
small enough to train in a test. For every model OUT_DIR/NAME gets
model.onnx (opset 17, exported by torch.onnx with the state_dict names),
inputs/*.npy (one batch: input_ids and labels), and manifest.json: the loss,
optimizer settings, the float buffers to --freeze (rotary tables, masks,
ALiBi slopes: ONNX cannot tell them from weights), and the shapes that
Megatron's collective optimum is computed from (see check_idioms.py).

--torchscript TS_DIR also writes, per model, TS_DIR/NAME-opset17 in the
layout of make_zoo.py (so zoo/check_zoo.py --formats traced,scripted checks
it): model.traced.pt (torch.jit.trace) and, where torch.jit.script compiles
the model, model.scripted.pt, the inputs, and PyTorch's one-step references
(loss, every gradient, every parameter after one SGD and one AdamW step).
"""
import argparse
import collections
import json
import math
import os
import sys
from typing import Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_zoo  # noqa: E402
from make_zoo import RMSNorm, rotate_half  # noqa: E402

ADAMW = {"lr": 1e-2, "beta1": 0.9, "beta2": 0.999, "eps": 1e-3, "weight_decay": 0.1}
SGD = {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.01}


# ---------------------------------------------------------------------------
# GPT-2 (Radford et al. 2019; the model card's vocabulary of 50257 tokens):
# fused c_attn (q|k|v), learned positions, tied LM head.


class GPT2Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(d)
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.c_fc = nn.Linear(d, 4 * d)
        self.mlp_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
        q = q.view(b, t, h, d // h).transpose(1, 2)
        k = k.view(b, t, h, d // h).transpose(1, 2)
        v = v.view(b, t, h, d // h).transpose(1, 2)
        w = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d // h)
        causal = torch.tril(torch.ones(t, t, dtype=torch.bool))
        w = F.softmax(w.masked_fill(~causal, float("-inf")), dim=-1)
        y = torch.matmul(w, v).transpose(1, 2).reshape(b, t, d)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, vocab, ctx=16, d=32, heads=8, layers=2):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(ctx, d)
        self.h = nn.ModuleList([GPT2Block(d, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, input_ids, labels):
        pos = torch.arange(input_ids.shape[1], dtype=torch.long).unsqueeze(0)
        x = self.wte(input_ids) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


class BertLMHead(nn.Module):
    """BERT's masked-LM head over its 30522-token vocabulary: an untied
    decoder with its own bias (Devlin et al. 2019), labels -100 where no
    token is masked."""

    def __init__(self, vocab, ctx=16, d=32, heads=8, layers=2):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, d)
        self.position_embeddings = nn.Embedding(ctx, d)
        self.ln = nn.LayerNorm(d)
        self.h = nn.ModuleList([GPT2Block(d, heads) for _ in range(layers)])
        self.decoder = nn.Linear(d, vocab)

    def forward(self, input_ids, labels):
        pos = torch.arange(input_ids.shape[1], dtype=torch.long).unsqueeze(0)
        x = self.ln(self.word_embeddings(input_ids) + self.position_embeddings(pos))
        for block in self.h:
            x = block(x)
        logits = self.decoder(x)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                               ignore_index=-100)


# ---------------------------------------------------------------------------
# LLaMA-2/3, Mistral, Qwen2 (Touvron et al. 2023; the model cards): RMSNorm,
# SwiGLU, rotary embeddings on q and k (rotate-half: the two halves of each
# head), grouped-query attention whose K/V heads are repeated for the query
# heads by expand + reshape (the transformers library's repeat_kv). Qwen2
# adds biases to q, k and v. Multi-query attention (one K/V head, PaLM,
# Falcon-7B) is the same with kv_heads = 1.


def repeat_kv(x, n_rep: int):
    b, kvh, t, hd = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, kvh, n_rep, t, hd).reshape(b, kvh * n_rep, t, hd)


def rope_pairs(x, cos, sin):
    """Meta's reference apply_rotary_emb in real arithmetic: dimensions
    (2i, 2i + 1) of each head are one complex number, through a reshape to
    [..., hd / 2, 2]; cos/sin hold one frequency per pair."""
    b, h, t, hd = x.shape
    x = x.reshape(b, h, t, hd // 2, 2)
    x0, x1 = x[..., 0], x[..., 1]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).reshape(b, h, t, hd)


class GemmaRMSNorm(nn.Module):
    """Gemma's RMSNorm scales by (1 + weight), the weight starting at 0."""

    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return x * (1.0 + self.weight)


class LlamaBlock(nn.Module):
    def __init__(self, d, heads, kv_heads, hidden, qkv_bias=False, repeat="expand",
                 rope="half", head_dim=0, gemma=False, qk_norm=False):
        super().__init__()
        self.h, self.kvh, self.hd = heads, kv_heads, head_dim or d // heads
        # Qwen3: RMSNorm over each head's q and k, one weight for all heads.
        self.q_norm = RMSNorm(self.hd) if qk_norm else nn.Identity()
        self.k_norm = RMSNorm(self.hd) if qk_norm else nn.Identity()
        self.repeat, self.rope, self.gemma = repeat, rope, gemma
        norm = GemmaRMSNorm if gemma else RMSNorm
        self.input_layernorm = norm(d)
        self.q_proj = nn.Linear(d, heads * self.hd, bias=qkv_bias)
        self.k_proj = nn.Linear(d, kv_heads * self.hd, bias=qkv_bias)
        self.v_proj = nn.Linear(d, kv_heads * self.hd, bias=qkv_bias)
        self.o_proj = nn.Linear(heads * self.hd, d, bias=False)
        self.post_attention_layernorm = norm(d)
        self.gate_proj = nn.Linear(d, hidden, bias=False)
        self.up_proj = nn.Linear(d, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, d, bias=False)

    def attn(self, x, cos, sin, mask):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.h, self.hd)
        k = self.k_proj(x).view(b, t, self.kvh, self.hd)
        q, k = self.q_norm(q).transpose(1, 2), self.k_norm(k).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kvh, self.hd).transpose(1, 2)
        if self.rope == "pairs":
            q, k = rope_pairs(q, cos, sin), rope_pairs(k, cos, sin)
        else:
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
        n_rep = self.h // self.kvh
        if self.repeat == "broadcast":
            # No repeat: the query heads grouped by their K/V head and the
            # one K/V head broadcast across its group in the matmuls.
            qg = q.reshape(b, self.kvh, n_rep, t, self.hd)
            w = torch.matmul(qg, k[:, :, None].transpose(3, 4)) / math.sqrt(self.hd)
            w = F.softmax(w + mask[:, :, None], dim=-1)
            y = torch.matmul(w, v[:, :, None]).reshape(b, self.h, t, self.hd)
            y = y.transpose(1, 2).reshape(b, t, self.h * self.hd)
            return self.o_proj(y)
        if self.repeat == "expand":
            k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)
        else:
            k = torch.repeat_interleave(k, n_rep, dim=1)
            v = torch.repeat_interleave(v, n_rep, dim=1)
        w = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.hd) + mask
        w = F.softmax(w, dim=-1)
        y = torch.matmul(w, v).transpose(1, 2).reshape(b, t, self.h * self.hd)
        return self.o_proj(y)

    def forward(self, x, cos, sin, mask):
        x = x + self.attn(self.input_layernorm(x), cos, sin, mask)
        h = self.post_attention_layernorm(x)
        if self.gemma:  # GeGLU
            return x + self.down_proj(F.gelu(self.gate_proj(h), approximate="tanh")
                                      * self.up_proj(h))
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self, vocab=96, ctx=16, d=64, heads=8, kv_heads=2, hidden=96, layers=2,
                 qkv_bias=False, repeat="expand", theta=10000.0, rope="half", head_dim=0,
                 gemma=False, qk_norm=False):
        super().__init__()
        self.gemma = gemma
        self.embed_tokens = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList([LlamaBlock(d, heads, kv_heads, hidden, qkv_bias, repeat,
                                                rope, head_dim, gemma, qk_norm)
                                     for _ in range(layers)])
        self.norm = GemmaRMSNorm(d) if gemma else RMSNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        if gemma:  # tied, and the embeddings scaled by sqrt(d)
            self.lm_head.weight = self.embed_tokens.weight
        self.scale = math.sqrt(d) if gemma else 1.0
        hd = head_dim or d // heads
        inv = 1.0 / (theta ** (torch.arange(0, hd, 2).float() / hd))
        freqs = torch.outer(torch.arange(ctx).float(), inv)
        emb = freqs if rope == "pairs" else torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos()[None, None])
        self.register_buffer("sin_cached", emb.sin()[None, None])
        mask = torch.full((ctx, ctx), float("-inf")).triu(1)
        self.register_buffer("causal_mask", mask[None, None])

    def forward(self, input_ids, labels):
        t = input_ids.shape[1]
        x = self.embed_tokens(input_ids) * self.scale
        cos, sin = self.cos_cached[:, :, :t], self.sin_cached[:, :, :t]
        mask = self.causal_mask[:, :, :t, :t]
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def llama_model(kv_heads, **kw):
    d, heads, layers = 64, 8, 2
    hd = kw.get("head_dim") or d // heads
    cfg = {"layers": layers, "d": d, "batch": 2, "seq": 16, "parallel": False,
           "vocab_parallel": ["embed_tokens.weight", "lm_head.weight"],
           "kv_heads": kv_heads, "head_dim": hd}
    if kv_heads < 4:
        # At tp 4 the K/V projections cannot be split by head: their
        # gradients are reduced once per layer.
        cfg["kv_reduce_bytes"] = 2 * kv_heads * hd * d * 4 + (2 * kv_heads * hd * 4
                                                             if kw.get("qkv_bias") else 0)
    if kw.get("qk_norm"):
        # One q and one k norm weight for all heads: partial over the split
        # heads, reduced once per layer.
        cfg["kv_reduce_bytes"] = cfg.get("kv_reduce_bytes", 0) + 2 * hd * 4
    return Model(lambda: Llama(kv_heads=kv_heads, **kw), lambda g: lm_inputs(96, g),
                 ["cos_cached", "sin_cached", "causal_mask"], cfg)


def lm_inputs(vocab, gen, b=2, t=16, masked=False):
    ids = torch.randint(0, vocab, (b, t), generator=gen)
    # The largest ids, which live in the last rank's rows, must be looked up
    # and predicted too.
    ids[0, :3] = torch.tensor([vocab - 1, vocab - 2, 0])
    labels = torch.cat([ids[:, 1:], torch.full((b, 1), vocab - 1)], dim=1)
    if masked:
        labels[:, ::3] = -100
    return collections.OrderedDict(input_ids=ids, labels=labels)


Model = collections.namedtuple("Model", "build inputs freeze config")


def vocab_model(vocab, cls=GPT2, masked=False):
    return Model(lambda: cls(vocab), lambda g: lm_inputs(vocab, g, masked=masked), [],
                 {"layers": 2, "d": 32, "batch": 2, "seq": 16, "vocab": vocab,
                  "parallel": False,
                  "vocab_parallel": ["wte.weight", "word_embeddings.weight",
                                     "decoder.weight"]})


# ---------------------------------------------------------------------------
# GPT-NeoX / Pythia (Black et al. 2022) and BLOOM (BigScience 2022): one
# fused query_key_value projection whose output is per head [h, 3, hd]
# (interleaved: q, k, v of head 0, then of head 1, ...). NeoX applies rotary
# to the first quarter of each head (rotary_pct 0.25), its tables looked up
# at position ids, and runs attention and MLP in parallel from two norms
# (use_parallel_residual); BLOOM adds ALiBi slopes per head to the scores
# instead of positions and normalizes the embeddings.


class NeoXBlock(nn.Module):
    def __init__(self, d, heads, rotary_pct=0.25, alibi=False):
        super().__init__()
        self.h, self.hd = heads, d // heads
        self.rot = int(self.hd * rotary_pct)
        self.alibi = alibi
        self.input_layernorm = nn.LayerNorm(d)
        self.post_attention_layernorm = nn.LayerNorm(d)
        self.query_key_value = nn.Linear(d, 3 * d)
        self.dense = nn.Linear(d, d)
        self.dense_h_to_4h = nn.Linear(d, 4 * d)
        self.dense_4h_to_h = nn.Linear(4 * d, d)

    def rope(self, x, cos, sin):
        """Rotary on the first `rot` dimensions of each head only."""
        xr, xp = x[..., :self.rot], x[..., self.rot:]
        return torch.cat([xr * cos + rotate_half(xr) * sin, xp], dim=-1)

    def attn(self, x, cos, sin, bias):
        b, t, d = x.shape
        qkv = self.query_key_value(x).view(b, t, self.h, 3 * self.hd)
        q, k, v = qkv.permute(0, 2, 1, 3).chunk(3, dim=-1)
        if not self.alibi:
            q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
        w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.hd) + bias
        y = torch.matmul(F.softmax(w, dim=-1), v)
        return self.dense(y.transpose(1, 2).reshape(b, t, d))

    def forward(self, x, cos, sin, bias):
        if self.alibi:  # BLOOM: sequential
            x = x + self.attn(self.input_layernorm(x), cos, sin, bias)
            return x + self.dense_4h_to_h(F.gelu(self.dense_h_to_4h(
                self.post_attention_layernorm(x)), approximate="tanh"))
        a = self.attn(self.input_layernorm(x), cos, sin, bias)
        m = self.dense_4h_to_h(F.gelu(self.dense_h_to_4h(self.post_attention_layernorm(x))))
        return x + a + m


def alibi_slopes(heads):
    """Press et al. 2022: a geometric sequence starting at 2^(-8/heads)."""
    start = 2 ** (-8 / heads)
    return torch.tensor([start ** (i + 1) for i in range(heads)])


class NeoX(nn.Module):
    def __init__(self, vocab=96, ctx=16, d=64, heads=4, layers=2, alibi=False):
        super().__init__()
        self.use_alibi = alibi
        self.embed_in = nn.Embedding(vocab, d)
        self.word_embeddings_layernorm = nn.LayerNorm(d) if alibi else nn.Identity()
        self.layers = nn.ModuleList([NeoXBlock(d, heads, alibi=alibi) for _ in range(layers)])
        self.final_layer_norm = nn.LayerNorm(d)
        self.embed_out = nn.Linear(d, vocab, bias=False)
        rot = int(d // heads * 0.25)
        inv = 1.0 / (10000 ** (torch.arange(0, rot, 2).float() / rot))
        emb = torch.cat([torch.outer(torch.arange(ctx).float(), inv)] * 2, dim=-1)
        self.register_buffer("cos_cached", emb.cos())
        self.register_buffer("sin_cached", emb.sin())
        causal = torch.full((ctx, ctx), float("-inf")).triu(1)
        if alibi:
            # The slope times the key's position (softmax ignores the
            # query's constant), under the causal mask: [h, ctx, ctx].
            causal = (alibi_slopes(heads)[:, None, None]
                      * torch.arange(ctx).float()[None, None, :] + causal)
        self.register_buffer("attn_bias", causal)

    def forward(self, input_ids, labels):
        t = input_ids.shape[1]
        x = self.word_embeddings_layernorm(self.embed_in(input_ids))
        bias = self.attn_bias[..., :t, :t]
        position_ids = torch.arange(t).unsqueeze(0)
        cos = self.cos_cached[position_ids].unsqueeze(1)
        sin = self.sin_cached[position_ids].unsqueeze(1)
        for layer in self.layers:
            x = layer(x, cos, sin, bias)
        logits = self.embed_out(self.final_layer_norm(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


# ---------------------------------------------------------------------------
# GPT-J (Wang & Komatsuzaki 2021) and Phi-2: one norm feeding attention and
# MLP in parallel. GPT-J's rotary is interleaved (rotate_every_two: even and
# odd dimensions of the first rotary_dim of each head, its sin/cos repeated
# twice by repeat_interleave); Phi-2's is rotate-half on the first 40% of
# each head, with q/k/v biases. Both have a biased, untied LM head.


def rotate_every_two(x):
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def rope_assign(x, sin, cos):
    """The same interleaved rotation written into an empty tensor by strided
    slice assignment, as ports of GPT-J and RoFormer write it: the
    gradient flows through the writes."""
    x1, x2 = x[..., ::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., ::2] = x1 * cos - x2 * sin
    out[..., 1::2] = x2 * cos + x1 * sin
    return out


class GPTJBlock(nn.Module):
    def __init__(self, d, heads, rotary_dim, style):
        super().__init__()
        self.h, self.hd, self.rot, self.style = heads, d // heads, rotary_dim, style
        bias = style == "phi"
        self.ln_1 = nn.LayerNorm(d)
        self.q_proj = nn.Linear(d, d, bias=bias)
        self.k_proj = nn.Linear(d, d, bias=bias)
        self.v_proj = nn.Linear(d, d, bias=bias)
        self.out_proj = nn.Linear(d, d, bias=bias)
        self.fc_in = nn.Linear(d, 4 * d)
        self.fc_out = nn.Linear(4 * d, d)

    def heads(self, y):
        return y.view(y.shape[0], y.shape[1], self.h, self.hd).transpose(1, 2)

    def rope(self, x, sin, cos):
        xr, xp = x[..., :self.rot], x[..., self.rot:]
        if self.style == "gptj_assign":
            return torch.cat([rope_assign(xr, sin, cos), xp], dim=-1)
        turned = rotate_every_two(xr) if self.style == "gptj" else rotate_half(xr)
        return torch.cat([xr * cos + turned * sin, xp], dim=-1)

    def forward(self, x, sin, cos, mask):
        b, t, d = x.shape
        h = self.ln_1(x)
        q = self.rope(self.heads(self.q_proj(h)), sin, cos)
        k = self.rope(self.heads(self.k_proj(h)), sin, cos)
        v = self.heads(self.v_proj(h))
        w = F.softmax(torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.hd) + mask, -1)
        a = self.out_proj(torch.matmul(w, v).transpose(1, 2).reshape(b, t, d))
        m = self.fc_out(F.gelu(self.fc_in(h), approximate="tanh"))
        return x + a + m


class GPTJ(nn.Module):
    def __init__(self, style, vocab=96, ctx=16, d=64, heads=4, layers=2):
        super().__init__()
        hd = d // heads
        rot = hd // 2 if style != "phi" else int(hd * 0.4) // 2 * 2
        self.style = style
        self.wte = nn.Embedding(vocab, d)
        self.h = nn.ModuleList([GPTJBlock(d, heads, rot, style) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab)
        inv = 1.0 / (10000 ** (torch.arange(0, rot, 2).float() / rot))
        sinusoid = torch.outer(torch.arange(ctx).float(), inv)
        self.register_buffer("embed_positions", torch.cat([sinusoid.sin(), sinusoid.cos()], 1))
        self.register_buffer("causal_mask", torch.full((ctx, ctx), float("-inf")).triu(1))

    def forward(self, input_ids, labels):
        t = input_ids.shape[1]
        x = self.wte(input_ids)
        sincos = self.embed_positions[torch.arange(t).unsqueeze(0)]
        sin, cos = torch.split(sincos, sincos.shape[-1] // 2, dim=-1)
        if self.style == "gptj_assign":
            sin, cos = sin[:, None], cos[:, None]
        elif self.style == "gptj":
            sin = torch.repeat_interleave(sin[:, None], 2, 3)
            cos = torch.repeat_interleave(cos[:, None], 2, 3)
        else:
            sin, cos = torch.cat([sin, sin], -1)[:, None], torch.cat([cos, cos], -1)[:, None]
        mask = self.causal_mask[:t, :t]
        for block in self.h:
            x = block(x, sin, cos, mask)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


# ---------------------------------------------------------------------------
# T5 (Raffel et al. 2020): no position embeddings; a learned table of
# per-head biases looked up by bucketed relative position, owned by the
# first layer and shared by all; unscaled scores, RMS norm, ReLU MLP, no
# biases anywhere.


def relative_buckets(t: int, num_buckets: int = 32, max_distance: int = 64):
    """T5's bidirectional bucketing of key - query offsets."""
    rel = torch.arange(t)[None, :] - torch.arange(t)[:, None]
    num_buckets = num_buckets // 2
    out = (rel > 0).long() * num_buckets
    rel = rel.abs()
    exact = num_buckets // 2
    large = exact + (torch.log(rel.float().clamp(min=1) / exact)
                     / math.log(max_distance / exact) * (num_buckets - exact)).long()
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return out + torch.where(rel < exact, rel, large)


class T5Block(nn.Module):
    def __init__(self, d, heads, ff):
        super().__init__()
        self.h, self.hd = heads, d // heads
        self.layer_norm = RMSNorm(d)
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, d, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.ff_layer_norm = RMSNorm(d)
        self.wi = nn.Linear(d, ff, bias=False)
        self.wo = nn.Linear(ff, d, bias=False)

    def heads(self, y):
        return y.view(y.shape[0], y.shape[1], self.h, self.hd).transpose(1, 2)

    def forward(self, x, position_bias):
        b, t, d = x.shape
        h = self.layer_norm(x)
        q, k, v = self.heads(self.q(h)), self.heads(self.k(h)), self.heads(self.v(h))
        w = F.softmax(torch.matmul(q, k.transpose(3, 2)) + position_bias, dim=-1)
        x = x + self.o(torch.matmul(w, v).transpose(1, 2).reshape(b, t, d))
        return x + self.wo(F.relu(self.wi(self.ff_layer_norm(x))))


class T5(nn.Module):
    def __init__(self, vocab=96, ctx=16, d=64, heads=8, layers=2, ff=128):
        super().__init__()
        self.shared = nn.Embedding(vocab, d)
        self.relative_attention_bias = nn.Embedding(32, heads)
        self.block = nn.ModuleList([T5Block(d, heads, ff) for _ in range(layers)])
        self.final_layer_norm = RMSNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, input_ids, labels):
        t = input_ids.shape[1]
        bias = self.relative_attention_bias(relative_buckets(t))  # [t, t, h]
        bias = bias.permute(2, 0, 1).unsqueeze(0)
        x = self.shared(input_ids)
        for block in self.block:
            x = block(x, bias)
        logits = self.lm_head(self.final_layer_norm(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


# ---------------------------------------------------------------------------
# Falcon-7B (Almazrouei et al. 2023): multi-query attention from one fused
# projection q|k|v with h query heads and one K/V head, attention and MLP in
# parallel from one norm, rotary, GELU MLP, no biases. Mistral (Jiang et al.
# 2023): LLaMA with a sliding-window causal mask and a padding mask input.


class FalconBlock(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.h, self.hd = heads, d // heads
        self.input_layernorm = nn.LayerNorm(d)
        self.query_key_value = nn.Linear(d, d + 2 * self.hd, bias=False)
        self.dense = nn.Linear(d, d, bias=False)
        self.dense_h_to_4h = nn.Linear(d, 4 * d, bias=False)
        self.dense_4h_to_h = nn.Linear(4 * d, d, bias=False)

    def forward(self, x, cos, sin, mask):
        b, t, d = x.shape
        h = self.input_layernorm(x)
        q, k, v = self.query_key_value(h).split([d, self.hd, self.hd], dim=-1)
        q = q.view(b, t, self.h, self.hd).transpose(1, 2)
        k = k.view(b, t, 1, self.hd).transpose(1, 2)
        v = v.view(b, t, 1, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        # One K/V head broadcast against every query head.
        w = F.softmax(torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.hd) + mask, -1)
        a = self.dense(torch.matmul(w, v).transpose(1, 2).reshape(b, t, d))
        return x + a + self.dense_4h_to_h(F.gelu(self.dense_h_to_4h(h)))


class Falcon(nn.Module):
    def __init__(self, vocab=96, ctx=16, d=64, heads=8, layers=2):
        super().__init__()
        hd = d // heads
        self.word_embeddings = nn.Embedding(vocab, d)
        self.h = nn.ModuleList([FalconBlock(d, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        emb = torch.cat([torch.outer(torch.arange(ctx).float(), inv)] * 2, dim=-1)
        self.register_buffer("cos_cached", emb.cos()[None, None])
        self.register_buffer("sin_cached", emb.sin()[None, None])
        self.register_buffer("causal_mask", torch.full((ctx, ctx), float("-inf")).triu(1))

    def forward(self, input_ids, labels):
        x = self.word_embeddings(input_ids)
        for block in self.h:
            x = block(x, self.cos_cached, self.sin_cached, self.causal_mask)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


class Mistral(Llama):
    def __init__(self, window=6, ctx=16, **kw):
        super().__init__(ctx=ctx, kv_heads=4, **kw)
        i = torch.arange(ctx)
        keep = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < window)
        self.causal_mask = torch.where(keep, 0.0, float("-inf"))[None, None]

    def forward(self, input_ids, labels, attention_mask):
        t = input_ids.shape[1]
        x = self.embed_tokens(input_ids)
        cos, sin = self.cos_cached[:, :, :t], self.sin_cached[:, :, :t]
        # Padding: keys where attention_mask is 0 are never attended to.
        pad = (1.0 - attention_mask[:, None, None, :].float()) * -1e9
        mask = self.causal_mask[:, :, :t, :t] + pad
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                               ignore_index=-100)


def mistral_inputs(gen):
    inputs = lm_inputs(96, gen)
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, :3] = 0  # left padding
    inputs["labels"][1, :3] = -100
    inputs["attention_mask"] = mask
    return inputs


# ChatGLM2-6B (Zeng et al. 2022; THUDM's modeling_chatglm.py): sequence-first
# activations [t, b, d]; one fused query_key_value with a bias, q|k|v
# concatenated with fewer K/V groups than query heads (multi_query_group_num),
# the groups expanded to the heads; rotary on the first half of each head in
# interleaved (2i, 2i + 1) pairs from a [t, hd / 4, 2] cos|sin cache; RMSNorm;
# SwiGLU from one fused dense_h_to_4h (gate|up, chunked in two).


class ChatGLMBlock(nn.Module):
    def __init__(self, d, heads, groups):
        super().__init__()
        self.h, self.g, self.hd = heads, groups, d // heads
        self.input_layernorm = RMSNorm(d)
        self.query_key_value = nn.Linear(d, d + 2 * groups * self.hd, bias=True)
        self.dense = nn.Linear(d, d, bias=False)
        self.post_attention_layernorm = RMSNorm(d)
        self.dense_h_to_4h = nn.Linear(d, 2 * 3 * d, bias=False)
        self.dense_4h_to_h = nn.Linear(3 * d, d, bias=False)

    @staticmethod
    def rotary(x, cache):
        t, b, h, hd = x.shape
        rot = cache.shape[-2] * 2
        x, rest = x[..., :rot], x[..., rot:]
        xs = x.reshape(t, b, h, rot // 2, 2)
        c = cache.view(t, 1, 1, rot // 2, 2)
        out = torch.stack([xs[..., 0] * c[..., 0] - xs[..., 1] * c[..., 1],
                           xs[..., 1] * c[..., 0] + xs[..., 0] * c[..., 1]], -1)
        return torch.cat((out.flatten(3), rest), dim=-1)

    def forward(self, x, cache, mask):
        t, b, d = x.shape
        h = self.input_layernorm(x)
        q, k, v = self.query_key_value(h).split(
            [d, self.g * self.hd, self.g * self.hd], dim=-1)
        q = self.rotary(q.view(t, b, self.h, self.hd), cache)
        k = self.rotary(k.view(t, b, self.g, self.hd), cache)
        v = v.view(t, b, self.g, self.hd)
        rep = self.h // self.g
        k = k.unsqueeze(-2).expand(t, b, self.g, rep, self.hd).reshape(t, b, self.h, self.hd)
        v = v.unsqueeze(-2).expand(t, b, self.g, rep, self.hd).reshape(t, b, self.h, self.hd)
        q, k, v = q.permute(1, 2, 0, 3), k.permute(1, 2, 0, 3), v.permute(1, 2, 0, 3)
        w = F.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.hd) + mask, -1)
        a = (w @ v).permute(2, 0, 1, 3).reshape(t, b, d)
        x = x + self.dense(a)
        gate, up = self.dense_h_to_4h(self.post_attention_layernorm(x)).chunk(2, dim=-1)
        return x + self.dense_4h_to_h(F.silu(gate) * up)


class ChatGLM(nn.Module):
    def __init__(self, vocab=96, ctx=16, d=64, heads=8, groups=2, layers=2):
        super().__init__()
        hd = d // heads
        self.embedding = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList([ChatGLMBlock(d, heads, groups) for _ in range(layers)])
        self.final_layernorm = RMSNorm(d)
        self.output_layer = nn.Linear(d, vocab, bias=False)
        rot = hd // 2
        theta = 1.0 / (10000 ** (torch.arange(0, rot, 2).float() / rot))
        ang = torch.outer(torch.arange(ctx).float(), theta)
        self.register_buffer("rotary_cache", torch.stack([ang.cos(), ang.sin()], -1))
        self.register_buffer("causal_mask", torch.full((ctx, ctx), float("-inf")).triu(1))

    def forward(self, input_ids, labels):
        x = self.embedding(input_ids).transpose(0, 1)  # [t, b, d]
        for layer in self.layers:
            x = layer(x, self.rotary_cache, self.causal_mask)
        logits = self.output_layer(self.final_layernorm(x)).transpose(0, 1)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


# ---------------------------------------------------------------------------
# Mixtral (Jiang et al. 2024; MixtralSparseMoeBlock) and DeepSeekMoE (Dai et
# al. 2024): a router (gate) scores the experts, softmax, the top-k kept
# (Mixtral renormalizes the two), each expert a SwiGLU (w1 gate, w3 up, w2
# down). Written densely, the way a data-independent export sees it: every
# expert runs on every token and is weighted by its routing weight (zero
# where not chosen). DeepSeek adds shared experts that every token takes (one
# wider SwiGLU). The Switch load-balancing loss, E * sum_e f_e * P_e (f_e the
# share of routed slots, P_e the mean router probability), joins the loss.


class Zeros(nn.Module):
    """No shared experts: nothing to add (a module, so TorchScript compiles
    the one forward)."""

    def forward(self, x):
        return torch.zeros_like(x)


class SwiGLUExpert(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.w1 = nn.Linear(d, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d, bias=False)
        self.w3 = nn.Linear(d, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class DenseMoE(nn.Module):
    def __init__(self, d, hidden, experts, top_k, shared=0):
        super().__init__()
        self.e, self.k = experts, top_k
        self.gate = nn.Linear(d, experts, bias=False)
        self.experts = nn.ModuleList([SwiGLUExpert(d, hidden) for _ in range(experts)])
        self.shared_experts = SwiGLUExpert(d, hidden * shared) if shared else Zeros()

    def forward(self, h):
        probs = F.softmax(self.gate(h), dim=-1)
        weights, chosen = torch.topk(probs, self.k, dim=-1)
        if self.k > 1:
            weights = weights / weights.sum(-1, keepdim=True)
        routed = (chosen[..., None] == torch.arange(self.e)).to(h.dtype)  # [b, t, k, E]
        combine = (weights[..., None] * routed).sum(2)
        out = self.shared_experts(h)
        for i, expert in enumerate(self.experts):
            out = out + expert(h) * combine[..., i:i + 1]
        balance = self.e * (routed.sum(2).mean((0, 1)) * probs.mean((0, 1))).sum()
        return out, balance


class MoEBlock(LlamaBlock):
    def __init__(self, d, heads, kv_heads, hidden, experts, top_k, shared):
        super().__init__(d, heads, kv_heads, hidden)
        del self.gate_proj, self.up_proj, self.down_proj
        self.block_sparse_moe = DenseMoE(d, hidden, experts, top_k, shared)

    def forward(self, x, cos, sin, mask):
        x = x + self.attn(self.input_layernorm(x), cos, sin, mask)
        y, balance = self.block_sparse_moe(self.post_attention_layernorm(x))
        return x + y, balance


class MoELlama(Llama):
    def __init__(self, experts, top_k, shared=0, d=64, heads=8, kv_heads=4, hidden=48,
                 layers=2, ctx=16):
        super().__init__(ctx=ctx, d=d, heads=heads, kv_heads=kv_heads, hidden=hidden,
                         layers=layers)
        self.layers = nn.ModuleList([MoEBlock(d, heads, kv_heads, hidden, experts, top_k,
                                              shared) for _ in range(layers)])

    def forward(self, input_ids, labels):
        t = input_ids.shape[1]
        x = self.embed_tokens(input_ids)
        cos, sin = self.cos_cached[:, :, :t], self.sin_cached[:, :, :t]
        mask = self.causal_mask[:, :, :t, :t]
        balance = torch.zeros(())
        for layer in self.layers:
            x, b = layer(x, cos, sin, mask)
            balance = balance + b
        logits = self.lm_head(self.norm(x))
        ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        return ce + 0.02 * balance


class StackedDenseMoE(nn.Module):
    """The dense form over stacked expert weights [E, d, h] (one einsum per
    side, as batched-expert implementations write it): a split of E holds
    whole experts per rank."""

    def __init__(self, d, hidden, experts, top_k):
        super().__init__()
        self.e, self.k = experts, top_k
        self.gate = nn.Linear(d, experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(experts, d, hidden) * 0.1)
        self.w3 = nn.Parameter(torch.randn(experts, d, hidden) * 0.1)
        self.w2 = nn.Parameter(torch.randn(experts, hidden, d) * 0.1)

    def forward(self, h):
        probs = F.softmax(self.gate(h), dim=-1)
        weights, chosen = torch.topk(probs, self.k, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        routed = (chosen[..., None] == torch.arange(self.e)).to(h.dtype)
        combine = (weights[..., None] * routed).sum(2)
        a = torch.einsum("btd,edh->bteh", [h, self.w1])
        u = torch.einsum("btd,edh->bteh", [h, self.w3])
        y = torch.einsum("bteh,ehd->bted", [F.silu(a) * u, self.w2])
        out = torch.einsum("bted,bte->btd", [y, combine])
        balance = self.e * (routed.sum(2).mean((0, 1)) * probs.mean((0, 1))).sum()
        return out, balance


class CapacityMoE(nn.Module):
    """Switch Transformer's (Fedus et al. 2021) and GShard's (Lepikhin et
    al. 2020) token-choice routing with a capacity factor, in their grouped
    form (GShard's G groups, Mesh-TensorFlow's num_groups): the tokens are
    cut into groups of `group` tokens, each routed apart. Top-1, dispatch
    and combine tensors [G, S, E, C] from one_hot of each token's expert
    and of its place in that expert's queue within its group (a cumsum;
    tokens past the capacity dropped), one einsum per side over stacked
    experts ("gsec,gsd->egcd" and "gsec,egcd->gsd"), the load-balancing
    loss and ST-MoE's router z-loss (the mean squared logsumexp of the
    router's logits)."""

    def __init__(self, d, hidden, experts, group, capacity_factor=1.25):
        super().__init__()
        self.e, self.group = experts, group
        self.c = int(math.ceil(group / experts * capacity_factor))
        self.router = nn.Linear(d, experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(experts, d, hidden) * 0.1)
        self.w2 = nn.Parameter(torch.randn(experts, hidden, d) * 0.1)

    def forward(self, h):
        b, t, d = h.shape
        x = h.reshape(-1, self.group, d)
        logits = self.router(x)
        probs = F.softmax(logits, dim=-1)
        gate, idx = probs.max(-1)
        mask = F.one_hot(idx, self.e).to(x.dtype)
        pos = torch.cumsum(mask, 1) * mask - 1.0
        keep = mask * (pos < self.c).to(x.dtype)
        slot = F.one_hot(pos.clamp(0, self.c - 1).long(), self.c).to(x.dtype)
        dispatch = keep[..., None] * slot
        combine = dispatch * gate[..., None, None]
        xin = torch.einsum("gsec,gsd->egcd", [dispatch, x])
        hid = F.gelu(torch.einsum("egcd,edh->egch", [xin, self.w1]))
        out = torch.einsum("egch,ehd->egcd", [hid, self.w2])
        y = torch.einsum("gsec,egcd->gsd", [combine, out])
        balance = self.e * (mask.mean((0, 1)) * probs.mean((0, 1))).sum()
        z = torch.logsumexp(logits, -1).pow(2).mean()
        return y.reshape(b, t, d), balance + 0.1 * z


class MoEVariantBlock(LlamaBlock):
    def __init__(self, moe, d=64, heads=8, kv_heads=4, hidden=48):
        super().__init__(d, heads, kv_heads, hidden)
        del self.gate_proj, self.up_proj, self.down_proj
        self.moe = moe

    def forward(self, x, cos, sin, mask):
        x = x + self.attn(self.input_layernorm(x), cos, sin, mask)
        y, balance = self.moe(self.post_attention_layernorm(x))
        return x + y, balance


class MoEVariant(MoELlama):
    def __init__(self, make, layers=2, d=64, ctx=16):
        super().__init__(4, 1, layers=layers, d=d, ctx=ctx)
        self.layers = nn.ModuleList([MoEVariantBlock(make(), d) for _ in range(layers)])


def moe_variant(make, experts):
    cfg = {"layers": 2, "d": 64, "batch": 2, "seq": 16, "parallel": False,
           "vocab_parallel": ["embed_tokens.weight", "lm_head.weight"],
           "kv_reduce_bytes": experts * 64 * 4}
    return Model(lambda: MoEVariant(make), lambda g: lm_inputs(96, g),
                 ["cos_cached", "sin_cached", "causal_mask"], cfg)


def capacity_model(experts):
    """Switch's capacity form at a size where expert parallelism pays for
    its extra collective (2048 tokens of 128 features, 1 MB an activation):
    each sequence is a group of 256 tokens."""
    d, batch, seq = 128, 8, 256
    cfg = {"layers": 2, "d": d, "batch": batch, "seq": seq, "parallel": False,
           "vocab_parallel": ["embed_tokens.weight", "lm_head.weight"],
           "expert_parallel": True, "kv_reduce_bytes": experts * d * 4,
           # The embedding's output gradient reaches the table partial: the
           # table's gradient (96 rows) and the norms' are reduced in the
           # optimizer's bucket instead of that 1 MB activation.
           "norm_reduce_bytes": (96 + 3) * d * 4}
    return Model(lambda: MoEVariant(lambda: CapacityMoE(d, 96, experts, seq), d=d, ctx=seq),
                 lambda g: lm_inputs(96, g, b=batch, t=seq),
                 ["cos_cached", "sin_cached", "causal_mask"], cfg)


def moe_model(experts, top_k, shared=0):
    cfg = {"layers": 2, "d": 64, "batch": 2, "seq": 16, "parallel": False,
           "vocab_parallel": ["embed_tokens.weight", "lm_head.weight"],
           # The router stays whole: its gradient (partial over the split
           # experts) is reduced once per layer, [E, d] floats.
           "kv_reduce_bytes": experts * 64 * 4}
    return Model(lambda: MoELlama(experts, top_k, shared), lambda g: lm_inputs(96, g),
                 ["cos_cached", "sin_cached", "causal_mask"], cfg)


# ---------------------------------------------------------------------------
# DeepSeek-V2/V3 multi-head latent attention (DeepSeek-AI 2024; the model
# card's modeling_deepseek.py): queries through a low-rank q_a_proj, an
# RMSNorm and q_b_proj (V2-Lite: one q_proj), keys and values from one
# latent: kv_a_proj_with_mqa makes the compressed kv and a decoupled rotary
# key shared by every head (k_pe), kv_a_layernorm, then kv_b_proj per head
# into the no-rope key and the value. Each head's query is its no-rope part
# and its rotary part; the score scale is 1/sqrt(nope + rope).


class MLABlock(nn.Module):
    def __init__(self, d=64, heads=8, q_rank=32, kv_rank=24, nope=8, rope=4, v_hd=8,
                 hidden=96):
        super().__init__()
        self.h, self.nope, self.rope, self.v_hd, self.kv_rank = heads, nope, rope, v_hd, kv_rank
        self.q_rank = q_rank
        self.input_layernorm = RMSNorm(d)
        if q_rank:
            self.q_a_proj = nn.Linear(d, q_rank, bias=False)
            self.q_a_layernorm = RMSNorm(q_rank)
            self.q_b_proj = nn.Linear(q_rank, heads * (nope + rope), bias=False)
        else:
            self.q_proj = nn.Linear(d, heads * (nope + rope), bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(d, kv_rank + rope, bias=False)
        self.kv_a_layernorm = RMSNorm(kv_rank)
        self.kv_b_proj = nn.Linear(kv_rank, heads * (nope + v_hd), bias=False)
        self.o_proj = nn.Linear(heads * v_hd, d, bias=False)
        self.post_attention_layernorm = RMSNorm(d)
        self.mlp = SwiGLUExpert(d, hidden)

    def attn(self, x, cos, sin, mask):
        b, t, _ = x.shape
        q = self.query(x)
        q = q.view(b, t, self.h, self.nope + self.rope).transpose(1, 2)
        q_nope, q_pe = torch.split(q, [self.nope, self.rope], dim=-1)
        compressed, k_pe = torch.split(self.kv_a_proj_with_mqa(x), [self.kv_rank, self.rope],
                                       dim=-1)
        k_pe = k_pe.view(b, t, 1, self.rope).transpose(1, 2)
        kv = self.kv_b_proj(self.kv_a_layernorm(compressed))
        kv = kv.view(b, t, self.h, self.nope + self.v_hd).transpose(1, 2)
        k_nope, v = torch.split(kv, [self.nope, self.v_hd], dim=-1)
        q_pe = q_pe * cos + rotate_half(q_pe) * sin
        k_pe = k_pe * cos + rotate_half(k_pe) * sin
        query = torch.cat([q_nope, q_pe], dim=-1)
        key = torch.cat([k_nope, k_pe.expand(b, self.h, t, self.rope)], dim=-1)
        w = torch.matmul(query, key.transpose(2, 3)) / math.sqrt(self.nope + self.rope)
        w = F.softmax(w + mask, dim=-1)
        y = torch.matmul(w, v).transpose(1, 2).reshape(b, t, self.h * self.v_hd)
        return self.o_proj(y)

    def forward(self, x, cos, sin, mask):
        x = x + self.attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


# One forward each for TorchScript, which compiles every branch.
class MLABlockLora(MLABlock):
    def query(self, x):
        return self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))


class MLABlockLite(MLABlock):
    def query(self, x):
        return self.q_proj(x)


class DeepSeekMLA(Llama):
    def __init__(self, q_rank, layers=2, rope=4, vocab=199):
        # head_dim=rope: the rotary tables of the decoupled rope dims.
        super().__init__(vocab=vocab, layers=layers, head_dim=rope)
        block = MLABlockLora if q_rank else MLABlockLite
        self.layers = nn.ModuleList([block(q_rank=q_rank, rope=rope) for _ in range(layers)])


def mla_model(q_rank, kv_rank=24, rope=4):
    cfg = {"layers": 2, "d": 64, "batch": 2, "seq": 16, "parallel": False,
           "vocab_parallel": ["embed_tokens.weight", "lm_head.weight"],
           # The down-projections and their norms stay whole (each is
           # smaller than its split's communication): the latents' gradients
           # come partial from the split up-projections, and the cheaper of
           # reducing them ([b, t, latent]) or the whole weights' gradients
           # is paid once per layer.
           "kv_reduce_bytes": min(2 * 16 * (q_rank + kv_rank + rope),
                                  64 * (q_rank + kv_rank + rope) + q_rank + kv_rank) * 4}
    # A vocabulary of 199, which 4 ranks do not divide (the table whose
    # gradient was gathered whole in the backward and the optimizer).
    return Model(lambda: DeepSeekMLA(q_rank, rope=rope), lambda g: lm_inputs(199, g),
                 ["cos_cached", "sin_cached", "causal_mask"], cfg)


# ---------------------------------------------------------------------------
# CLIP (Radford et al. 2021; openai/CLIP's model.py): an image tower (a ViT:
# patches projected without bias, a class token, learned positions, ln_pre,
# pre-norm blocks with a fused in_proj and QuickGELU, ln_post on the class
# token, a projection matrix) and a text tower (token and learned position
# embeddings, the same blocks under a causal mask, ln_final, the end-of-text
# token found by argmax of the ids, a projection matrix); both embeddings
# L2-normalised, their products scaled by exp of a learned 0-d temperature,
# the symmetric cross-entropy over the batch's pairs.


class ClipBlock(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.h = heads
        self.ln_1 = nn.LayerNorm(d)
        self.in_proj = nn.Linear(d, 3 * d)
        self.out_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.c_fc = nn.Linear(d, 4 * d)
        self.c_proj = nn.Linear(4 * d, d)

    def forward(self, x, mask: Optional[torch.Tensor] = None):
        b, t, d = x.shape
        q, k, v = self.in_proj(self.ln_1(x)).chunk(3, dim=-1)
        q = q.view(b, t, self.h, d // self.h).transpose(1, 2)
        k = k.view(b, t, self.h, d // self.h).transpose(1, 2)
        v = v.view(b, t, self.h, d // self.h).transpose(1, 2)
        w = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(d // self.h)
        if mask is not None:
            w = w + mask
        y = torch.matmul(F.softmax(w, dim=-1), v).transpose(1, 2).reshape(b, t, d)
        x = x + self.out_proj(y)
        h = self.c_fc(self.ln_2(x))
        return x + self.c_proj(h * torch.sigmoid(1.702 * h))


class Clip(nn.Module):
    def __init__(self, d=64, heads=8, layers=2, patches=9, patch_dim=48, vocab=96, ctx=16,
                 embed=32):
        super().__init__()
        self.conv1 = nn.Linear(patch_dim, d, bias=False)
        self.class_embedding = nn.Parameter(torch.randn(d) * 0.1)
        self.visual_positional_embedding = nn.Parameter(torch.randn(patches + 1, d) * 0.1)
        self.ln_pre = nn.LayerNorm(d)
        self.visual = nn.ModuleList([ClipBlock(d, heads) for _ in range(layers)])
        self.ln_post = nn.LayerNorm(d)
        self.visual_proj = nn.Parameter(torch.randn(d, embed) * 0.1)
        self.token_embedding = nn.Embedding(vocab, d)
        self.positional_embedding = nn.Parameter(torch.randn(ctx, d) * 0.1)
        self.transformer = nn.ModuleList([ClipBlock(d, heads) for _ in range(layers)])
        self.ln_final = nn.LayerNorm(d)
        self.text_projection = nn.Parameter(torch.randn(d, embed) * 0.1)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))
        self.register_buffer("causal_mask", torch.full((ctx, ctx), float("-inf")).triu(1))

    def forward(self, pixels, input_ids):
        b = pixels.shape[0]
        x = self.conv1(pixels)
        x = torch.cat([self.class_embedding.expand(b, 1, -1), x], dim=1)
        x = self.ln_pre(x + self.visual_positional_embedding)
        for block in self.visual:
            x = block(x)
        image = self.ln_post(x[:, 0]) @ self.visual_proj
        t = self.token_embedding(input_ids) + self.positional_embedding
        for block in self.transformer:
            t = block(t, self.causal_mask)
        t = self.ln_final(t)
        text = t[torch.arange(b), input_ids.argmax(-1)] @ self.text_projection
        image = image / image.norm(p=2, dim=-1, keepdim=True)
        text = text / text.norm(p=2, dim=-1, keepdim=True)
        logits = self.logit_scale.exp() * image @ text.t()
        labels = torch.arange(b)
        return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2


def clip_inputs(gen, b=4, patches=9, patch_dim=48, vocab=96, ctx=16):
    ids = torch.randint(1, vocab - 1, (b, ctx), generator=gen)
    ids[torch.arange(b), torch.tensor([15, 9, 12, 6])] = vocab - 1  # end of text
    for i, end in enumerate([15, 9, 12, 6]):
        ids[i, end + 1:] = 0
    return collections.OrderedDict(pixels=torch.randn(b, patches, patch_dim, generator=gen),
                                   input_ids=ids)


def clip_model():
    b, d, layers = 4, 64, 2
    act_image, act_text = b * 10 * d * 4, b * 16 * d * 4
    # Megatron's: per block one all-reduce forward and one backward after
    # attention and after the MLP, in both towers; the vocab-parallel token
    # table's lookup one forward.
    optimum = 4 * layers * (act_image + act_text) + act_text
    # Its gradients reach AdamW's eps (the temperature's 14x scale over
    # cosine similarities): the state after AdamW steps is held to rtol
    # times AdamW's gain on rounding there (check_idioms.py), SGD's to rtol.
    cfg = {"layers": layers, "d": d, "batch": b, "seq": 16, "parallel": False,
           "optimum": optimum, "vocab_parallel": ["token_embedding.weight"],
           "adamw_noise_gain": True}
    return Model(lambda: Clip(), clip_inputs, ["causal_mask"], cfg)


def family(build, freeze, parallel, vocab_parallel, d=64, kv_reduce_bytes=0,
           inputs=None, norm_reduce_bytes=0):
    cfg = {"layers": 2, "d": d, "batch": 2, "seq": 16, "parallel": parallel,
           "vocab_parallel": vocab_parallel}
    if kv_reduce_bytes:
        cfg["kv_reduce_bytes"] = kv_reduce_bytes
    if norm_reduce_bytes:
        cfg["norm_reduce_bytes"] = norm_reduce_bytes
    return Model(build, inputs or (lambda g: lm_inputs(96, g)), freeze, cfg)


MODELS = collections.OrderedDict([
    ("gpt2_v50257", vocab_model(50257)),
    ("bert_v30522", vocab_model(30522, BertLMHead, masked=True)),
    ("gpt2_v250", vocab_model(250)),
    ("gpt2_v151", vocab_model(151)),
    # GPT-2-XL's 25 heads in miniature: 5 heads that 2, 4 and 8 ranks do not
    # divide, so whole heads go to each rank (3 + 2, 2 + 2 + 1 + 0, ...).
    ("gpt2_heads5", Model(lambda: GPT2(96, d=40, heads=5), lambda g: lm_inputs(96, g), [],
                          {"layers": 2, "d": 40, "batch": 2, "seq": 16, "vocab": 96,
                           "parallel": False, "vocab_parallel": ["wte.weight"]})),
    ("llama3_gqa4", llama_model(4)),
    ("llama2_gqa2", llama_model(2)),
    ("qwen2_gqa_bias", llama_model(4, qkv_bias=True)),
    ("gqa_repeat_interleave", llama_model(4, repeat="interleave")),
    ("mqa", llama_model(1)),
    # GQA without any repeat: query heads grouped [b, kv, rep, t, hd], the
    # K/V head broadcast in the score and value matmuls.
    ("gqa_broadcast", llama_model(4, repeat="broadcast")),
    # The same with 2 K/V heads: at tp 4 one axis splits them in halves and
    # gathers them for attention; 2 x 2 holds one per group of ranks.
    ("gqa_broadcast_kv2", llama_model(2, repeat="broadcast")),
    # Meta's reference LLaMA: rotary on (2i, 2i + 1) pairs through a
    # reshape to [..., hd / 2, 2] and a stack back.
    ("llama_meta_rope", llama_model(4, rope="pairs")),
    # Gemma-7B's shape: head_dim 16 with 8 heads, so q/o project 64 <-> 128;
    # GeGLU, (1 + w) RMSNorm, embeddings scaled by sqrt(d) and tied.
    ("gemma_head_dim", llama_model(4, head_dim=16, gemma=True)),
    # Two norms per parallel block: the gradient of both stays partial
    # through them and is reduced once; the norms' own weight and bias
    # gradients (and the final norm's) are then reduced, in one bucket:
    # (2 layers x 4 + 2) x [64] floats.
    ("neox_parallel", family(NeoX, ["cos_cached", "sin_cached", "attn_bias"], True,
                             ["embed_in.weight", "embed_out.weight"],
                             norm_reduce_bytes=(2 * 4 + 2) * 64 * 4)),
    ("bloom_alibi", family(lambda: NeoX(alibi=True), ["cos_cached", "sin_cached", "attn_bias"],
                           False, ["embed_in.weight", "embed_out.weight"])),
    ("gptj_interleaved", family(lambda: GPTJ("gptj"), ["embed_positions", "causal_mask"],
                                True, ["wte.weight", "lm_head.weight"])),
    ("gptj_rope_assign", family(lambda: GPTJ("gptj_assign"), ["embed_positions", "causal_mask"],
                                True, ["wte.weight", "lm_head.weight"])),
    ("phi_partial", family(lambda: GPTJ("phi"), ["embed_positions", "causal_mask"], True,
                           ["wte.weight", "lm_head.weight"])),
    ("t5_relbias", family(T5, [], False, ["shared.weight", "lm_head.weight"])),
    # The one K/V head's slice of the fused projection: 2 x [8, 64] floats.
    ("falcon_mqa_fused", family(Falcon, ["cos_cached", "sin_cached", "causal_mask"], True,
                                ["word_embeddings.weight", "lm_head.weight"],
                                kv_reduce_bytes=2 * 8 * 64 * 4)),
    # 2 K/V groups of 8 at tp 4: the K/V pieces of the fused projection
    # (and of its bias) are replicated, their gradients reduced once per
    # layer: 2 x ([16, 64] + [16]) floats at most.
    ("chatglm_gqa_fused", family(ChatGLM, ["rotary_cache", "causal_mask"], False,
                                 ["embedding.weight", "output_layer.weight"],
                                 kv_reduce_bytes=2 * (16 * 64 + 16) * 4)),
    # Heads that 4 ranks do not divide, with the fused pieces: Falcon with
    # 6 heads (2 + 2 + 2 + 0 whole heads per rank, the K/V head replicated)
    # and ChatGLM2 with 6 heads in 3 groups (one group per rank, the last
    # rank's chunks padding, so no K/V reduction at all).
    ("falcon_heads6", family(lambda: Falcon(d=48, heads=6),
                             ["cos_cached", "sin_cached", "causal_mask"], True,
                             ["word_embeddings.weight", "lm_head.weight"], d=48,
                             kv_reduce_bytes=2 * 8 * 48 * 4)),
    ("chatglm_heads6_groups3", family(lambda: ChatGLM(d=48, heads=6, groups=3),
                                      ["rotary_cache", "causal_mask"], False,
                                      ["embedding.weight", "output_layer.weight"], d=48,
                                      kv_reduce_bytes=2 * (24 * 48 + 24) * 4)),
    ("mistral_sliding", family(Mistral, ["cos_cached", "sin_cached", "causal_mask"], False,
                               ["embed_tokens.weight", "lm_head.weight"],
                               inputs=mistral_inputs)),
    # Issue 37's families. Qwen3: per-head q/k RMSNorm with 2 K/V heads.
    ("qwen3_qk_norm", llama_model(2, qk_norm=True)),
    # Mixtral: 4 experts, top-2; DeepSeekMoE: 8 experts, top-1, shared experts.
    ("moe_mixtral_e4_top2", moe_model(4, 2)),
    ("moe_deepseek_e8_top1_shared", moe_model(8, 1, shared=2)),
    # The dense form over stacked experts, and Switch's capacity form
    # (4 and 8 experts, 32 tokens, capacity factor 1.25).
    ("moe_stacked_e4_top2", moe_variant(lambda: StackedDenseMoE(64, 48, 4, 2), 4)),
    ("moe_capacity_e4", capacity_model(4)),
    ("moe_capacity_e8", capacity_model(8)),
    # DeepSeek-V3's latent attention (a q down-projection) and V2-Lite's (none).
    ("mla_v3_q_lora", mla_model(32)),
    ("mla_v2_lite", mla_model(0)),
    # CLIP's two towers and its learned 0-d temperature.
    ("clip_towers", clip_model()),
])


def build(spec):
    """The model with the idioms' initial values, and its inputs."""
    torch.manual_seed(7)
    model = spec.build()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.1)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.normal_(m.bias, std=0.05)
            if isinstance(m, nn.LayerNorm):
                nn.init.normal_(m.weight, 1.0, 0.2)
                nn.init.normal_(m.bias, 0.0, 0.1)
    model.train()
    return model, spec.inputs(torch.Generator().manual_seed(11))


def write(name, spec, out):
    d = os.path.join(out, name)
    os.makedirs(os.path.join(d, "inputs"), exist_ok=True)
    model, inputs = build(spec)
    path = os.path.join(d, "model.onnx")
    torch.onnx.export(model, tuple(inputs.values()), path, input_names=list(inputs),
                      output_names=["loss"], opset_version=17, do_constant_folding=False,
                      training=torch.onnx.TrainingMode.TRAINING)
    for k, v in inputs.items():
        np.save(os.path.join(d, "inputs", k + ".npy"), v.numpy())
    manifest = {"model": name, "loss": "auto", "sgd": SGD, "adamw": ADAMW,
                "freeze": spec.freeze, "config": spec.config,
                "parameters": [n for n, _ in model.named_parameters()]}
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


def write_torchscript(name, spec, out):
    """The model traced and scripted, with PyTorch's references, as
    make_zoo.py lays out a case. Returns the problems and the lines to print."""
    d = os.path.join(out, f"{name}-opset17")
    model, inputs = build(spec)
    zspec = make_zoo.Spec(None, None, "auto", 0, ["loss"])
    refs = {opt: make_zoo.reference(model, zspec, inputs, None, opt, torch.float32, hp)
            for opt, hp in (("sgd", SGD), ("adamw", ADAMW))}
    params = [n for n, _ in model.named_parameters()]
    # The idioms' buffers (rotary tables, masks, ALiBi slopes) are never
    # written: the TorchScript importer makes them constants of the step,
    # so there is no state of theirs to compare.
    buffers = []
    loss, grads, _ = refs["sgd"]
    for k, v in inputs.items():
        make_zoo.save(os.path.join(d, "inputs", k + ".npy"), v)
    make_zoo.save(os.path.join(d, "ref", "loss.npy"), loss.reshape(1))
    for n in params:
        make_zoo.save(os.path.join(d, "ref", "grad", make_zoo.file_name(n) + ".grad.npy"),
                      grads[n])
    for opt, (_, _, state) in refs.items():
        for n in params + buffers:
            make_zoo.save(os.path.join(d, "ref", opt, make_zoo.file_name(n) + ".npy"),
                          state[n])
    info, problems, lines = make_zoo.save_torchscript(model, inputs, name, d)
    manifest = {"model": name, "opset": 17, "loss": "auto", "sgd": SGD, "adamw": ADAMW,
                "parameters": params, "buffers": buffers,
                "inputs": {k: {"dtype": str(v.dtype).replace("torch.", ""),
                               "shape": list(v.shape)} for k, v in inputs.items()},
                "labels": None, "reference_loss": float(loss), "torchscript": info}
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    return problems, [f"torchscript {name}: traced {info['traced']}, "
                      f"scripted {info['scripted']}"] + lines


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--torchscript", metavar="TS_DIR")
    args = ap.parse_args()
    if args.list:
        print("\n".join(MODELS))
        return
    if not args.out:
        ap.error("OUT_DIR is required")
    failed = False
    for name in args.models.split(","):
        if name not in MODELS:
            sys.exit(f"idioms.py: unknown model '{name}'")
        write(name, MODELS[name], args.out)
        print(f"wrote {name}")
        if args.torchscript:
            problems, lines = write_torchscript(name, MODELS[name], args.torchscript)
            print("\n".join(lines))
            failed |= bool(problems)
            for p in problems:
                print(f"  TORCHSCRIPT FAILED {name}: {p}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

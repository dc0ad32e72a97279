#!/usr/bin/python3
"""Test models written the way real LLM families write them (issue 13).

Usage:
  /usr/bin/python3 zoo/idioms.py OUT_DIR [--models gpt2_v50257,...] [--list]

Each model is written in the idiom of its family's paper or model card (there
is no transformers library in Debian, so the idioms are written out here),
small enough to train in a test. For every model OUT_DIR/NAME gets
model.onnx (opset 17, exported by torch.onnx with the state_dict names),
inputs/*.npy (one batch: input_ids and labels), and manifest.json: the loss,
optimizer settings, the float buffers to --freeze (rotary tables, masks,
ALiBi slopes: ONNX cannot tell them from weights), and the shapes that
Megatron's collective optimum is computed from (see check_idioms.py).
"""
import argparse
import collections
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
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


def repeat_kv(x, n_rep):
    b, kvh, t, hd = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, kvh, n_rep, t, hd).reshape(b, kvh * n_rep, t, hd)


class LlamaBlock(nn.Module):
    def __init__(self, d, heads, kv_heads, hidden, qkv_bias=False, repeat="expand"):
        super().__init__()
        self.h, self.kvh, self.hd = heads, kv_heads, d // heads
        self.repeat = repeat
        self.input_layernorm = RMSNorm(d)
        self.q_proj = nn.Linear(d, heads * self.hd, bias=qkv_bias)
        self.k_proj = nn.Linear(d, kv_heads * self.hd, bias=qkv_bias)
        self.v_proj = nn.Linear(d, kv_heads * self.hd, bias=qkv_bias)
        self.o_proj = nn.Linear(heads * self.hd, d, bias=False)
        self.post_attention_layernorm = RMSNorm(d)
        self.gate_proj = nn.Linear(d, hidden, bias=False)
        self.up_proj = nn.Linear(d, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, d, bias=False)

    def attn(self, x, cos, sin, mask):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.h, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kvh, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kvh, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        n_rep = self.h // self.kvh
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
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self, vocab=96, ctx=16, d=64, heads=8, kv_heads=2, hidden=96, layers=2,
                 qkv_bias=False, repeat="expand", theta=10000.0):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList([LlamaBlock(d, heads, kv_heads, hidden, qkv_bias, repeat)
                                     for _ in range(layers)])
        self.norm = RMSNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        hd = d // heads
        inv = 1.0 / (theta ** (torch.arange(0, hd, 2).float() / hd))
        freqs = torch.outer(torch.arange(ctx).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos()[None, None])
        self.register_buffer("sin_cached", emb.sin()[None, None])
        mask = torch.full((ctx, ctx), float("-inf")).triu(1)
        self.register_buffer("causal_mask", mask[None, None])

    def forward(self, input_ids, labels):
        t = input_ids.shape[1]
        x = self.embed_tokens(input_ids)
        cos, sin = self.cos_cached[:, :, :t], self.sin_cached[:, :, :t]
        mask = self.causal_mask[:, :, :t, :t]
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def llama_model(kv_heads, **kw):
    d, heads, layers = 64, 8, 2
    hd = d // heads
    cfg = {"layers": layers, "d": d, "batch": 2, "seq": 16, "parallel": False,
           "vocab_parallel": ["embed_tokens.weight", "lm_head.weight"]}
    if kv_heads < 4:
        # At tp 4 the K/V projections cannot be split by head: their
        # gradients are reduced once per layer.
        cfg["kv_reduce_bytes"] = 2 * kv_heads * hd * d * 4 + (2 * kv_heads * hd * 4
                                                             if kw.get("qkv_bias") else 0)
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
                  "parallel": False, "vocab_parallel": ["wte.weight", "word_embeddings.weight", "decoder.weight"]})


MODELS = collections.OrderedDict([
    ("gpt2_v50257", vocab_model(50257)),
    ("bert_v30522", vocab_model(30522, BertLMHead, masked=True)),
    ("gpt2_v250", vocab_model(250)),
    ("gpt2_v151", vocab_model(151)),
    ("llama3_gqa4", llama_model(4)),
    ("llama2_gqa2", llama_model(2)),
    ("qwen2_gqa_bias", llama_model(4, qkv_bias=True)),
    ("gqa_repeat_interleave", llama_model(4, repeat="interleave")),
    ("mqa", llama_model(1)),
])


def write(name, spec, out):
    d = os.path.join(out, name)
    os.makedirs(os.path.join(d, "inputs"), exist_ok=True)
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
    inputs = spec.inputs(torch.Generator().manual_seed(11))
    model.train()
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


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    if args.list:
        print("\n".join(MODELS))
        return
    if not args.out:
        ap.error("OUT_DIR is required")
    for name in args.models.split(","):
        if name not in MODELS:
            sys.exit(f"idioms.py: unknown model '{name}'")
        write(name, MODELS[name], args.out)
        print(f"wrote {name}")


if __name__ == "__main__":
    main()

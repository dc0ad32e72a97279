#!/usr/bin/python3
"""Generates Cleave's model zoo: small PyTorch models exported to ONNX, with
PyTorch's loss, gradients and one optimizer step as the reference.

Usage:
  nice /usr/bin/python3 zoo/make_zoo.py --out DIR [--models a,b] [--opsets 14,17]
      [--torchscript]

For each model M and opset O it writes DIR/M-opsetO/:
  model.onnx            torch.onnx.export(training=TRAINING, do_constant_folding=False,
                        static shapes), so initializer names are state_dict names
  inputs/NAME.npy       every model input, plus labels.npy when the compiler
                        appends the loss
  manifest.json         model, opset, loss ("auto" | "cross_entropy" | "mse"),
                        sgd and adamw hyperparameters, parameters, buffers, inputs,
                        outputs, op_types
  ref/loss.npy          float32 [1]
  ref/init/NAME.npy     every parameter and buffer before the step (= the ONNX
                        initializer)
  ref/grad/NAME.grad.npy  gradient of the loss for every parameter
  ref/sgd/NAME.npy      every parameter after one torch.optim.SGD step, and every
                        buffer after the forward
  ref/adamw/NAME.npy    the same for one torch.optim.AdamW step
  ref/bf16_spread.json  with --bf16-spread: per tensor, how far PyTorch's bf16
                        autocast step lands from its float32 step
  ref64/...             with --ref64 (always for --set vision): out/ (the forward's
                        outputs), loss, grad/, sgd/ and
                        adamw/ of the same step in float64

Losses: "auto" means the model's first output is the scalar loss (the forward
calls F.cross_entropy, exported as SoftmaxCrossEntropyLoss; labels are a model
input named "labels"). "cross_entropy" means F.cross_entropy(logits.reshape(-1, C),
labels.reshape(-1), ignore_index=-100, reduction="mean") over the last dimension
of the first output, int64 labels of the logits' shape without the last dim.
"mse" means F.mse_loss(output, labels) (mean), float32 labels of the output's
shape.

The reference and the model do not depend on the opset: they are computed once
per model and written into every opset directory.

With --torchscript, the highest opset's directory (e.g. DIR/gpt2-opset17) also gets
  model.traced.pt       torch.jit.trace(model, inputs in forward order,
                        check_trace=False) in train() mode, with the initial state
                        (the state the references start from; the trace's forward
                        moved BatchNorm statistics, which are put back)
  model.scripted.pt     torch.jit.script(model) in train() mode, where TorchScript
                        compiles the model
and its manifest.json a key "torchscript": {"traced": bool, "scripted": bool,
"scripted_error": why scripting failed (only then), "traced_node_kinds" and
"scripted_node_kinds": the node kinds of each inlined graph}. Each file is loaded
back and checked: named_parameters() names (the names a compiler must use; a tied
parameter appears once, under its first name, and stays one tensor), parameter and
buffer values, and the first output of a forward on the inputs against the eager
model's.
"""
import argparse
import collections
import copy
import json
import math
import os
import re
import shutil
import sys
import time
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import onnx
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fashion_mnist  # noqa: E402
import vision_zoo  # noqa: E402
import zoo_cache  # noqa: E402

# Hyperparameters, chosen so that a check at rtol 1e-4 (infinity norm) sees every
# term of the update and does not depend on rounding noise (measured with
# --check64 and a sweep):
# - Weight decay moves a parameter by lr * wd relative to itself. With the usual
#   SGD wd 1e-4 (lr 0.1) or AdamW lr 1e-3, wd 0.01, that is 1e-5: a step that
#   ignores weight decay would pass. Here lr * wd = 1e-3 for both.
# - AdamW's first step is lr * g / (|g| + eps). With eps 1e-8, a gradient that is
#   zero up to rounding (the key bias of attention is softmax-invariant; random
#   entries near 0) turns rounding noise into a +-lr step: float32 torch against
#   float64 torch then differs by 1e-4 to 5e-1. With eps 1e-3 it differs by
#   < 1e-5, and eps still matters (eps x10 changes the step by 3e-2..5e-1).
SGD = {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.01}
ADAMW = {"lr": 1e-2, "beta1": 0.9, "beta2": 0.999, "eps": 1e-3, "weight_decay": 0.1}


def file_name(name):
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def randomize_affine(model, gen):
    """Gives every norm weight/bias and every zero-initialized bias a random
    non-trivial value, so that a backward that forgets a scale or a shift shows."""
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, (nn.LayerNorm, nn.BatchNorm2d, RMSNorm)):
                if getattr(mod, "weight", None) is not None:
                    mod.weight.copy_(1.0 + 0.2 * torch.randn(mod.weight.shape, generator=gen))
                if getattr(mod, "bias", None) is not None:
                    mod.bias.copy_(0.1 * torch.randn(mod.bias.shape, generator=gen))
            elif isinstance(mod, nn.Linear) and mod.bias is not None:
                mod.bias.copy_(0.05 * torch.randn(mod.bias.shape, generator=gen))
            elif isinstance(mod, nn.MultiheadAttention) and mod.in_proj_bias is not None:
                mod.in_proj_bias.copy_(0.05 * torch.randn(mod.in_proj_bias.shape, generator=gen))


# ---------------------------------------------------------------------------
# GPT-2


class GPT2Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(d)
        self.c_attn = nn.Linear(d, 3 * d)  # fused Q, K, V with bias
        self.c_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.c_fc = nn.Linear(d, 4 * d)
        self.mlp_proj = nn.Linear(4 * d, d)

    def attn(self, x):
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.c_attn(x).split(d, dim=2)
        q = q.reshape(b, t, h, d // h).transpose(1, 2)
        k = k.reshape(b, t, h, d // h).transpose(1, 2)
        v = v.reshape(b, t, h, d // h).transpose(1, 2)
        w = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d // h)
        causal = torch.tril(torch.ones(t, t, dtype=torch.bool))
        w = w.masked_fill(~causal, float("-inf"))
        w = F.softmax(w, dim=-1)
        y = torch.matmul(w, v).transpose(1, 2).reshape(b, t, d)
        return self.c_proj(y)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class GPT2(nn.Module):
    def __init__(self, vocab=96, ctx=16, d=64, heads=4, layers=2):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(ctx, d)
        self.h = nn.ModuleList([GPT2Block(d, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02 if isinstance(m, nn.Linear) else 0.1)

    def forward(self, input_ids, labels):
        t = input_ids.shape[1]
        pos = torch.arange(t, dtype=torch.long).unsqueeze(0)
        x = self.wte(input_ids) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


class GPTJBlock(GPT2Block):
    """GPT-J's parallel block: attention and MLP read one LayerNorm's output
    and their outputs are summed with the residual."""

    def forward(self, x):
        h = self.ln_1(x)
        return x + self.attn(h) + self.mlp_proj(F.gelu(self.c_fc(h)))


class GPTJ(GPT2):
    def __init__(self, vocab=96, ctx=16, d=64, heads=4, layers=2):
        super().__init__(vocab, ctx, d, heads, layers)
        self.h = nn.ModuleList([GPTJBlock(d, heads) for _ in range(layers)])
        for blk in self.h:
            del blk.ln_2
        for m in self.h.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)


def gpt2_inputs(gen):
    b, t, v = 2, 16, 96
    ids = torch.randint(0, v, (b, t), generator=gen)
    # Next-token labels; the last position gets a random token.
    labels = torch.cat([ids[:, 1:], torch.randint(0, v, (b, 1), generator=gen)], dim=1)
    return collections.OrderedDict(input_ids=ids, labels=labels), None


# ---------------------------------------------------------------------------
# LLaMA


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class LlamaBlock(nn.Module):
    def __init__(self, d, heads, hidden):
        super().__init__()
        self.heads = heads
        self.input_layernorm = RMSNorm(d)
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)
        self.post_attention_layernorm = RMSNorm(d)
        self.gate_proj = nn.Linear(d, hidden, bias=False)
        self.up_proj = nn.Linear(d, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, d, bias=False)

    def attn(self, x, cos, sin, mask):
        b, t, d = x.shape
        h = self.heads
        q = self.q_proj(x).reshape(b, t, h, d // h).transpose(1, 2)
        k = self.k_proj(x).reshape(b, t, h, d // h).transpose(1, 2)
        v = self.v_proj(x).reshape(b, t, h, d // h).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        w = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(d // h) + mask
        w = F.softmax(w, dim=-1)
        y = torch.matmul(w, v).transpose(1, 2).reshape(b, t, d)
        return self.o_proj(y)

    def forward(self, x, cos, sin, mask):
        x = x + self.attn(self.input_layernorm(x), cos, sin, mask)
        y = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y))


class Llama(nn.Module):
    def __init__(self, vocab=80, ctx=12, d=48, heads=4, layers=2, hidden=128, theta=10000.0):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList([LlamaBlock(d, heads, hidden) for _ in range(layers)])
        self.norm = RMSNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        hd = d // heads
        inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
        freqs = torch.outer(torch.arange(ctx, dtype=torch.float64), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        # Not persistent: constants of the graph, not state.
        self.register_buffer("cos_cached", emb.cos().float(), persistent=False)
        self.register_buffer("sin_cached", emb.sin().float(), persistent=False)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.05)

    def forward(self, input_ids):
        t = input_ids.shape[1]
        x = self.embed_tokens(input_ids)
        cos = self.cos_cached[:t].to(x.dtype)
        sin = self.sin_cached[:t].to(x.dtype)
        mask = torch.full((t, t), float("-inf"), dtype=x.dtype).triu(1)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.lm_head(self.norm(x))


def llama_inputs(gen):
    b, t, v = 2, 12, 80
    ids = torch.randint(0, v, (b, t), generator=gen)
    labels = torch.cat([ids[:, 1:], torch.randint(0, v, (b, 1), generator=gen)], dim=1)
    # Exercise ignore_index: the last label of every row and two more.
    labels[:, -1] = -100
    labels[0, 3] = -100
    labels[1, 7] = -100
    return collections.OrderedDict(input_ids=ids), labels


# ---------------------------------------------------------------------------
# BERT


class BertLayer(nn.Module):
    def __init__(self, d, heads, inter):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.attn_out = nn.Linear(d, d)
        self.attn_norm = nn.LayerNorm(d, eps=1e-12)
        self.intermediate = nn.Linear(d, inter)
        self.output = nn.Linear(inter, d)
        self.out_norm = nn.LayerNorm(d, eps=1e-12)

    def forward(self, x, ext_mask):
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(x).reshape(b, t, 3, h, d // h).permute(2, 0, 3, 1, 4)
        w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d // h) + ext_mask
        w = F.softmax(w, dim=-1)
        y = torch.matmul(w, v).permute(0, 2, 1, 3).reshape(b, t, d)
        x = self.attn_norm(x + self.attn_out(y))  # post-LN
        return self.out_norm(x + self.output(F.gelu(self.intermediate(x))))


class Bert(nn.Module):
    def __init__(self, vocab=64, ctx=12, d=32, heads=4, layers=2, inter=64, types=2, classes=3):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, d)
        self.position_embeddings = nn.Embedding(ctx, d)
        self.token_type_embeddings = nn.Embedding(types, d)
        self.emb_norm = nn.LayerNorm(d, eps=1e-12)
        self.layers = nn.ModuleList([BertLayer(d, heads, inter) for _ in range(layers)])
        self.pooler = nn.Linear(d, d)
        self.classifier = nn.Linear(d, classes)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.1)

    def forward(self, input_ids, token_type_ids, attention_mask):
        t = input_ids.shape[1]
        pos = torch.arange(t, dtype=torch.long).unsqueeze(0)
        x = (self.word_embeddings(input_ids) + self.position_embeddings(pos)
             + self.token_type_embeddings(token_type_ids))
        x = self.emb_norm(x)
        ext = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, ext)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return self.classifier(pooled)


def bert_inputs(gen):
    b, t, v = 4, 12, 64
    ids = torch.randint(1, v, (b, t), generator=gen)
    lengths = [12, 9, 6, 11]
    mask = torch.zeros(b, t, dtype=torch.long)
    types = torch.zeros(b, t, dtype=torch.long)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
        ids[i, n:] = 0  # [PAD]
        types[i, n // 2:n] = 1  # second segment
    labels = torch.randint(0, 3, (b,), generator=gen)
    return collections.OrderedDict(input_ids=ids, token_type_ids=types, attention_mask=mask), labels


# ---------------------------------------------------------------------------
# Fashion-MNIST MLP


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.fc2 = nn.Linear(256, 128)
        self.fc3 = nn.Linear(128, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def mlp_inputs(gen):
    images = fashion_mnist.load_images("train")
    labels = fashion_mnist.load_labels("train")
    x, y = next(fashion_mnist.batches(images, labels, steps=1, batch=8, seed=0))
    return collections.OrderedDict(x=torch.from_numpy(x)), torch.from_numpy(y)


# ---------------------------------------------------------------------------
# ResNet


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.downsample is None else self.downsample(x)))


class ResNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.maxpool = nn.MaxPool2d(2)
        self.layer1 = BasicBlock(8, 8, 1)
        self.layer2 = BasicBlock(8, 16, 2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layer2(self.layer1(x))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet_inputs(gen):
    x = torch.randn(4, 3, 16, 16, generator=gen)
    return collections.OrderedDict(x=x), torch.randint(0, 10, (4,), generator=gen)


def resnet_build():
    m = ResNet()
    # Non-trivial running statistics, so that the momentum update shows.
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.copy_(0.1 * torch.randn(mod.running_mean.shape, generator=g))
                mod.running_var.copy_(1.0 + 0.5 * torch.rand(mod.running_var.shape, generator=g))
    return m


# ---------------------------------------------------------------------------
# ViT


def vit_build():
    from torchvision.models.vision_transformer import VisionTransformer
    m = VisionTransformer(image_size=16, patch_size=8, num_layers=2, num_heads=2,
                          hidden_dim=32, mlp_dim=64, num_classes=10, dropout=0.0,
                          attention_dropout=0.0)
    # torchvision zero-initializes the head, which would make every other
    # gradient zero; give it ordinary Linear initialization instead.
    m.heads.head.reset_parameters()
    with torch.no_grad():
        m.class_token.normal_(std=0.02)
    return m


def vit_inputs(gen):
    x = torch.randn(2, 3, 16, 16, generator=gen)
    return collections.OrderedDict(x=x), torch.randint(0, 10, (2,), generator=gen)


# ---------------------------------------------------------------------------
# Regression MLP (mse)


class MLPMSE(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 32)
        self.fc3 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc3(torch.sigmoid(self.fc2(torch.tanh(self.fc1(x)))))


def mlp_mse_inputs(gen):
    x = torch.randn(8, 16, generator=gen)
    return collections.OrderedDict(x=x), torch.randn(8, 4, generator=gen)


# ---------------------------------------------------------------------------

Spec = collections.namedtuple("Spec", "build inputs loss seed outputs")

# Facts about a model that the compiler must get right to match PyTorch and that
# the ONNX graph alone does not say; copied into manifest.json as "notes".
NOTES = {
    "gpt2": ["lm_head.weight is tied to wte.weight: one initializer (wte.weight), used by "
             "Gather and by the LM head's MatMul; its gradient is the sum of both"],
    "llama": ["labels hold -100 (ignore_index) at 4 positions: the mean is over the "
              "other 20", "rotary cos/sin tables are Constant nodes, not initializers"],
    "resnet": ["BatchNormalization runs with training_mode=1 (batch statistics, biased "
               "variance for normalizing). PyTorch updates running_var with the UNBIASED "
               "batch variance (n/(n-1)), n = N*H*W, momentum 0.1 (ONNX momentum "
               "attribute 0.9); the ONNX spec's formula (biased) differs from the "
               "reference by up to 8e-4 here. The BN node's running-statistic outputs are "
               "not graph outputs; the buffers' new values are in ref/sgd and ref/adamw",
               "num_batches_tracked is not exported (its increment is dropped)"],
    "vit": ["torchvision VisionTransformer; Dropout nodes have ratio 0 and training_mode "
            "true (identity); the head is re-initialized (torchvision zero-initializes it) "
            "and the class token and in_proj_bias are made non-zero",
            "ONNX Split, Shape/ConstantOfShape/Equal/Where/Expand compute static shapes"],
}

SPECS = collections.OrderedDict([
    ("gpt2", Spec(GPT2, gpt2_inputs, "auto", 1, ["loss"])),
    ("llama", Spec(Llama, llama_inputs, "cross_entropy", 2, ["logits"])),
    ("gptj", Spec(GPTJ, gpt2_inputs, "auto", 8, ["loss"])),
    ("bert", Spec(Bert, bert_inputs, "cross_entropy", 3, ["logits"])),
    ("mlp", Spec(MLP, mlp_inputs, "cross_entropy", 4, ["logits"])),
    ("resnet", Spec(resnet_build, resnet_inputs, "cross_entropy", 5, ["logits"])),
    ("vit", Spec(vit_build, vit_inputs, "cross_entropy", 6, ["logits"])),
    ("mlp_mse", Spec(MLPMSE, mlp_mse_inputs, "mse", 7, ["output"])),
])

# torchvision's classification families (--set vision), zoo/vision_zoo.py.
VISION = vision_zoo.specs(Spec)
for _name in VISION:
    NOTES[_name] = ["torchvision's own classes at small widths and depths; dropout and "
                    "stochastic depth 0; zero-initialised Linear layers and layer scales "
                    "given ordinary values; BatchNorm in training mode"]
ALL_SPECS = collections.OrderedDict(list(SPECS.items()) + list(VISION.items()))


def appended_loss(kind, out, labels):
    if kind == "cross_entropy":
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), labels.reshape(-1),
                               ignore_index=-100, reduction="mean")
    if kind == "mse":
        return F.mse_loss(out, labels, reduction="mean")
    raise ValueError(kind)


def float_state(model):
    """Non-trainable floating-point state (BatchNorm running statistics)."""
    return collections.OrderedDict(
        (n, b) for n, b in model.state_dict(keep_vars=True).items()
        if not isinstance(b, nn.Parameter) and b.is_floating_point())


def reference(model0, spec, inputs, labels, optimizer, dtype, hp=None, variant=None):
    """One training step on a fresh copy of model0. Returns loss, grads, state.
    hp overrides the optimizer's hyperparameters (SGD or ADAMW). variant runs
    PyTorch's float32 another way: "channels_last" (NHWC convolutions) or
    "no_mkldnn" (its reference convolutions), to measure how much a
    different but correct order of float32 operations moves the result."""
    model = copy.deepcopy(model0).to(dtype)
    model.train()
    args = [t.to(dtype) if t.is_floating_point() else t for t in inputs.values()]
    if variant == "channels_last":
        model = model.to(memory_format=torch.channels_last)
        args = [a.to(memory_format=torch.channels_last) if a.dim() == 4 else a for a in args]
    # "bf16": PyTorch's own mixed precision (autocast's bf16 matmuls and
    # convolutions, float32 weights and optimizer), the distance a correct
    # bf16 step may land from the float32 one.
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=variant == "bf16")
    with torch.backends.mkldnn.flags(enabled=variant != "no_mkldnn"), autocast:
        return _step(model, spec, args, labels, optimizer, dtype, hp)


def _step(model, spec, args, labels, optimizer, dtype, hp):
    out = model(*args)
    first = out[0] if isinstance(out, (tuple, list)) else out
    if spec.loss == "auto":
        assert first.dim() == 0, "an auto-loss model must return a scalar first"
        loss = first
    else:
        lab = labels.to(dtype) if labels.is_floating_point() else labels
        loss = appended_loss(spec.loss, first, lab)
    loss.backward()
    params = collections.OrderedDict(model.named_parameters())
    grads = collections.OrderedDict((n, p.grad.detach().clone()) for n, p in params.items())
    if optimizer == "sgd":
        h = dict(SGD, **(hp or {}))
        opt = torch.optim.SGD(params.values(), lr=h["lr"], momentum=h["momentum"],
                              weight_decay=h["weight_decay"])
    else:
        h = dict(ADAMW, **(hp or {}))
        opt = torch.optim.AdamW(params.values(), lr=h["lr"], betas=(h["beta1"], h["beta2"]),
                                eps=h["eps"], weight_decay=h["weight_decay"])
    opt.step()
    state = collections.OrderedDict((n, p.detach().clone().contiguous())
                                    for n, p in params.items())
    for n, b in float_state(model).items():
        state[n] = b.detach().clone()
    return loss.detach(), grads, state


def forward_outputs(model0, spec, inputs, dtype):
    """The forward's outputs (training mode, as exported) by ONNX output
    name: the reference check_ort.py judges onnxruntime and Cleave by."""
    model = copy.deepcopy(model0).to(dtype).train()
    args = [t.to(dtype) if t.is_floating_point() else t for t in inputs.values()]
    with torch.no_grad():
        out = model(*args)
    outs = out if isinstance(out, (tuple, list)) else [out]
    return collections.OrderedDict((n, o.detach()) for n, o in zip(spec.outputs, outs))


def float32_spread(model0, spec, inputs, labels, refs, ref64):
    """Per tensor, the largest relative distance from float64 of PyTorch's
    float32 step run three ways (its default, channels_last, its reference
    convolutions): how far a correct float32 computation may land. Keys:
    loss, grad/NAME, sgd/NAME, adamw/NAME."""
    spread = collections.defaultdict(float)
    for opt in ("sgd", "adamw"):
        l64, g64, s64 = ref64[opt]
        runs = [refs[opt]] + [reference(model0, spec, inputs, labels, opt, torch.float32,
                                        variant=v) for v in ("channels_last", "no_mkldnn")]
        for l32, g32, s32 in runs:
            spread["loss"] = max(spread["loss"], rel_err(l32, l64))
            for n in g64:
                spread["grad/" + n] = max(spread["grad/" + n], rel_err(g32[n], g64[n]))
            for n in s64:
                spread[opt + "/" + n] = max(spread[opt + "/" + n], rel_err(s32[n], s64[n]))
    return dict(spread)


def bf16_spread(model0, spec, inputs, labels, refs):
    """Per tensor, how far PyTorch's bf16 autocast step lands from its float32
    step (same keys as float32_spread): check_zoo.py allows a backend's bf16
    step a small multiple of it against the float32 step. A fixed tolerance
    would be unsound: on a batch of 8 Fashion-MNIST images the MLP's fc2
    gradient moves by 29% under bf16 in PyTorch itself."""
    spread = {}
    for opt in ("sgd", "adamw"):
        l32, g32, s32 = refs[opt]
        lb, gb, sb = reference(model0, spec, inputs, labels, opt, torch.float32, variant="bf16")
        spread["loss"] = rel_err(lb, l32)
        for n in g32:
            spread["grad/" + n] = rel_err(gb[n], g32[n])
        for n in s32:
            spread[opt + "/" + n] = rel_err(sb[n], s32[n])
    return spread


def rel_err(a, b):
    a = a.double()
    b = b.double()
    return float((a - b).abs().max() / max(float(b.abs().max()), 1e-30))


def save(path, t):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    arr = t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else t
    # np.ascontiguousarray makes a 0-d array (CLIP's temperature) 1-d.
    np.save(path, np.array(arr, order="C"))


def export(model0, spec, inputs, name, opset, path):
    model = copy.deepcopy(model0)  # tracing runs the forward: BN stats change
    model.train()
    torch.onnx.export(model, tuple(inputs.values()), path,
                      input_names=list(inputs.keys()), output_names=spec.outputs,
                      opset_version=opset, do_constant_folding=False,
                      training=torch.onnx.TrainingMode.TRAINING)
    proto = onnx.load(path)
    onnx.checker.check_model(proto)
    # The exported initializers must be the initial state (the trace above ran
    # a forward; make sure no running statistic leaked in).
    init0 = model0.state_dict()
    fixed = []
    for t in proto.graph.initializer:
        if t.name in init0:
            want = init0[t.name].numpy()
            got = numpy_helper.to_array(t)
            if got.shape != want.shape:
                raise AssertionError(f"{name}: initializer {t.name} {got.shape} vs {want.shape}")
            if not np.array_equal(got, want):
                t.CopyFrom(numpy_helper.from_array(want, t.name))
                fixed.append(t.name)
    if fixed:
        onnx.save(proto, path)
        print(f"  note: {name} opset {opset}: reset {len(fixed)} initializers that the "
              f"export's trace had changed to the initial state")
    return proto


def onnx_self_check(proto, spec, inputs, labels):
    """Runs the exported model's forward with onnx.reference (onnx 1.13+) or, where
    the installed onnx lacks it, with zoo/onnx_eval.py (NumPy, float64), and
    returns (the loss of its first output by the manifest's definition, which
    evaluator)."""
    feeds = collections.OrderedDict((k, v.numpy()) for k, v in inputs.items())
    try:
        from onnx.reference import ReferenceEvaluator
    except ImportError:
        ReferenceEvaluator = None
    if ReferenceEvaluator is not None:
        first = ReferenceEvaluator(proto).run(None, dict(feeds))[0].astype(np.float64)
        how = "onnx.reference"
    else:
        import onnx_eval
        first = onnx_eval.run(proto, feeds)[proto.graph.output[0].name]
        how = "onnx_eval"
    if spec.loss == "auto":
        loss = float(np.asarray(first).reshape(-1)[0])
    elif spec.loss == "cross_entropy":
        import onnx_eval
        loss = float(onnx_eval.softmax_cross_entropy(
            first.reshape(-1, first.shape[-1]), labels.numpy().reshape(-1), -100))
    else:
        loss = float(np.mean((first - labels.numpy().astype(np.float64)) ** 2))
    return loss, how


def value_info_shape(vi):
    dims = []
    for d in vi.type.tensor_type.shape.dim:
        dims.append(d.dim_value if d.HasField("dim_value") else d.dim_param)
    return dims


def first_output(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def node_kinds(graph):
    """Every node kind of a TorchScript graph, nested blocks (prim::If,
    prim::Loop) included."""
    kinds = set()

    def walk(block):
        for n in block.nodes():
            kinds.add(n.kind())
            for b in n.blocks():
                walk(b)
    walk(graph)
    return kinds


def tie_groups(module):
    """Parameters that are one tensor under several names (GPT-2's lm_head.weight
    and wte.weight), as sorted lists of the names; named_parameters() lists only
    the first name of each."""
    by_tensor = collections.OrderedDict()
    for prefix, mod in module.named_modules():
        for k, v in mod._parameters.items():
            if v is not None:
                by_tensor.setdefault((v.data_ptr(), tuple(v.shape)), []).append(
                    f"{prefix}.{k}" if prefix else k)
    return sorted(sorted(ns) for ns in by_tensor.values() if len(ns) > 1)


def check_torchscript(path, model0, inputs, want):
    """Loads a saved TorchScript module and checks that it is model0: the same
    parameter names, values and ties, the same buffers, and the same first
    output on the zoo's inputs. Returns (problems, notes, node kinds)."""
    problems = []
    notes = []
    loaded = torch.jit.load(path)
    got_params = collections.OrderedDict(loaded.named_parameters())
    want_params = collections.OrderedDict(model0.named_parameters())
    if list(got_params) != list(want_params):
        problems.append(f"named_parameters {list(got_params)} != eager {list(want_params)}")
    want_buffers = collections.OrderedDict(model0.named_buffers())
    got_buffers = collections.OrderedDict(loaded.named_buffers())
    if list(got_buffers) != list(want_buffers):
        problems.append(f"named_buffers {list(got_buffers)} != eager {list(want_buffers)}")
    for n, t in list(want_params.items()) + list(want_buffers.items()):
        g = got_params.get(n, got_buffers.get(n))
        if g is not None and not torch.equal(g.detach(), t.detach()):
            problems.append(f"{n} is not the initial value")
    if tie_groups(loaded) != tie_groups(model0):
        problems.append(f"tied parameters {tie_groups(loaded)}, eager {tie_groups(model0)}")
    kinds = node_kinds(loaded.inlined_graph)
    loaded.train()
    got = first_output(loaded(*inputs.values())).detach()  # changes the loaded copy's BN stats
    if got.shape != want.shape:
        problems.append(f"first output shape {list(got.shape)}, eager {list(want.shape)}")
    elif not torch.equal(got, want):
        err = rel_err(got, want)
        notes.append(f"first output differs from eager's by {err:.1e} (rel., inf-norm)")
        if not err <= 1e-5:
            problems.append(f"first output differs from eager's by {err:.1e}")
    return problems, notes, kinds


def save_torchscript(model0, inputs, name, d):
    """Writes d/model.traced.pt and, where torch.jit.script compiles the model,
    d/model.scripted.pt, both of model0 in train() mode with its initial state.
    Returns (the manifest's "torchscript" entry, problems, printed lines)."""
    info = collections.OrderedDict([("traced", False), ("scripted", False)])
    problems = []
    lines = []
    before = {k: v.clone() for k, v in model0.state_dict().items()}
    eager = copy.deepcopy(model0)
    eager.train()
    want = first_output(eager(*inputs.values())).detach()
    initial = collections.OrderedDict(list(model0.named_parameters())
                                      + list(model0.named_buffers()))

    for kind in ("traced", "scripted"):
        path = os.path.join(d, f"model.{kind}.pt")
        m = copy.deepcopy(model0)
        m.train()
        try:
            if kind == "traced":
                mod = torch.jit.trace(m, tuple(inputs.values()), check_trace=False)
                # The trace ran a forward on m (whose tensors mod holds): BatchNorm's
                # running statistics and num_batches_tracked moved. Back to model0's.
                with torch.no_grad():
                    for n, t in list(mod.named_parameters()) + list(mod.named_buffers()):
                        t.copy_(initial[n])
            else:
                mod = torch.jit.script(m)
            mod.train()
        except Exception as e:
            msg = str(e).strip()
            mlines = msg.splitlines()
            short = mlines[0].strip().rstrip(":") if msg else type(e).__name__
            if kind == "scripted":
                # The reason, with the place and the source line TorchScript points at
                # (the line above the "~~~ <--- HERE" marker).
                where = ""
                for i, ln in enumerate(mlines):
                    m_at = re.match(r'\s*File "(.*)", line (\d+)', ln)
                    if m_at:
                        where = f"{os.path.basename(m_at.group(1))}:{m_at.group(2)}"
                    if "<--- HERE" in ln and i > 0:
                        where += ": " + mlines[i - 1].strip()
                        break
                info["scripted_error"] = f"{type(e).__name__}: {short}" + (
                    f" at {where}" if where else "")
                lines.append(f"  torchscript: scripting failed: {info['scripted_error']}")
            else:
                info["traced_error"] = f"{type(e).__name__}: {short}"
                problems.append(f"torch.jit.trace failed: {info['traced_error']}")
            continue
        torch.jit.save(mod, path)
        try:
            errs, notes, kinds = check_torchscript(path, model0, inputs, want)
        except Exception as e:  # torch.jit.load or the forward of the loaded module
            msg = str(e).strip().splitlines()[-1] if str(e).strip() else ""
            errs, notes, kinds = [f"reloading failed: {type(e).__name__}: {msg}"], [], set()
        for n in notes:
            lines.append(f"  note: {name} {kind}: {n}")
        if errs:
            problems += [f"{kind}: {e}" for e in errs]
            os.remove(path)
            continue
        info[kind] = True
        info[f"{kind}_node_kinds"] = sorted(kinds)
        lines.append(f"  torchscript {kind} ({len(kinds)} node kinds): {' '.join(sorted(kinds))}")

    after = model0.state_dict()
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    if changed:
        problems.append(f"saving TorchScript changed model0: {changed}")
    return info, problems, lines


def make_model(name, opsets, out_dir, check64, failures, torchscript=False,
               with_ref64=False, with_bf16=False):
    spec = ALL_SPECS[name]
    t0 = time.time()
    torch.manual_seed(spec.seed)
    model0 = spec.build()
    gen = torch.Generator().manual_seed(1000 + spec.seed)
    randomize_affine(model0, gen)
    model0.train()
    inputs, labels = spec.inputs(gen)
    model0 = copy.deepcopy(model0)  # the initial state, never run

    refs = {}
    for opt in ("sgd", "adamw"):
        refs[opt] = reference(model0, spec, inputs, labels, opt, torch.float32)
    loss, grads, _ = refs["sgd"]
    loss_a, grads_a, _ = refs["adamw"]
    assert torch.isfinite(loss), f"{name}: loss {loss}"
    assert torch.equal(loss, loss_a)
    for n in grads:
        assert torch.equal(grads[n], grads_a[n]), f"{name}: {n} grads differ between runs"
        assert torch.isfinite(grads[n]).all(), f"{name}: non-finite grad {n}"

    params = [n for n, _ in model0.named_parameters()]
    buffers = list(float_state(model0).keys())
    diag = {}
    if check64:
        # How well-conditioned the float32 reference is: float64 vs float32.
        for opt in ("sgd", "adamw"):
            l64, g64, s64 = reference(model0, spec, inputs, labels, opt, torch.float64)
            _, _, s32 = refs[opt]
            init = model0.state_dict()
            d = {"loss": rel_err(loss, l64)}
            d["grad"] = max((rel_err(grads[n], g64[n]), n) for n in params)
            d["state"] = max((rel_err(s32[n], s64[n]), n) for n in s32)
            d["delta"] = max((rel_err(s32[n] - init[n], (s64[n] - init[n].double())), n)
                             for n in s32)
            # How much weight decay moves each parameter (smallest over tensors
            # with a non-zero initial value).
            _, _, s0 = reference(model0, spec, inputs, labels, opt, torch.float64,
                                 {"weight_decay": 0.0})
            d["wd"] = min((rel_err(s0[n], s64[n]), n) for n in params
                          if init[n].abs().max() > 0)
            diag[opt] = d
    ref64, spread = {}, {}
    if with_ref64:
        for opt in ("sgd", "adamw"):
            ref64[opt] = reference(model0, spec, inputs, labels, opt, torch.float64)
        spread = float32_spread(model0, spec, inputs, labels, refs, ref64)
        forward64 = forward_outputs(model0, spec, inputs, torch.float64)
    spread_bf16 = bf16_spread(model0, spec, inputs, labels, refs) if with_bf16 else None
    t_ref = time.time() - t0

    results = []
    for opset in opsets:
        d = os.path.join(out_dir, f"{name}-opset{opset}")
        stage = "export"
        try:
            t1 = time.time()
            shutil.rmtree(d, ignore_errors=True)  # no stale files of an earlier run
            os.makedirs(d, exist_ok=True)
            path = os.path.join(d, "model.onnx")
            proto = export(model0, spec, inputs, name, opset, path)
            stage = "check"
            g = proto.graph
            inits = {t.name: t for t in g.initializer}
            missing = [n for n in params + buffers if n not in inits]
            if missing:
                raise AssertionError(f"{name} opset {opset}: not initializers: {missing}")
            extra_inits = sorted(n for n in inits if n not in params and n not in buffers)
            graph_inputs = [i.name for i in g.input if i.name not in inits]
            assert graph_inputs == list(inputs.keys()), (name, graph_inputs)
            assert [o.name for o in g.output] == spec.outputs, [o.name for o in g.output]
            first_shape = value_info_shape(g.output[0])
            if spec.loss == "auto":
                assert first_shape in ([], [1]), first_shape
            elif spec.loss == "cross_entropy":
                # The exporter may name a dim it could not infer (torchvision's
                # Swin); the compiler infers it from the inputs.
                assert all(isinstance(a, str) or a == b for a, b in
                           zip(first_shape[:-1], labels.shape)), (labels.shape, first_shape)
            else:
                assert list(labels.shape) == first_shape, (labels.shape, first_shape)
            try:
                onnx_loss, how = onnx_self_check(proto, spec, inputs, labels)
            except NotImplementedError as e:
                # zoo/onnx_eval.py implements the zoo's operators only; the
                # vision families are checked against torch by the compiler's
                # run alone.
                print(f"  note: {name} opset {opset}: no ONNX self-check ({e})")
                onnx_loss, how = float(loss), None
            if not math.isfinite(onnx_loss) or \
                    abs(onnx_loss - float(loss)) > 1e-5 * abs(float(loss)):
                raise AssertionError(f"{name} opset {opset}: the ONNX graph's loss ({how}) "
                                     f"{onnx_loss!r} differs from torch's {float(loss)!r}")
            op_types = sorted({n.op_type for n in g.node})

            for k, v in inputs.items():
                save(os.path.join(d, "inputs", file_name(k) + ".npy"), v)
            if labels is not None:
                save(os.path.join(d, "inputs", "labels.npy"), labels)
            save(os.path.join(d, "ref", "loss.npy"), loss.reshape(1))
            init = model0.state_dict()
            for n in params + buffers:
                save(os.path.join(d, "ref", "init", file_name(n) + ".npy"), init[n])
            for n in params:
                save(os.path.join(d, "ref", "grad", file_name(n) + ".grad.npy"), grads[n])
            for opt in ("sgd", "adamw"):
                state = refs[opt][2]
                for n in params + buffers:
                    save(os.path.join(d, "ref", opt, file_name(n) + ".npy"), state[n])
            if spread_bf16 is not None:
                with open(os.path.join(d, "ref", "bf16_spread.json"), "w") as f:
                    json.dump(spread_bf16, f, indent=0)
            if ref64:
                # The same step in float64: check_zoo.py then measures both
                # float32 steps (PyTorch's and Cleave's) against it.
                for opt in ("sgd", "adamw"):
                    l64, g64, s64 = ref64[opt]
                    if opt == "sgd":
                        save(os.path.join(d, "ref64", "loss.npy"), l64.reshape(1))
                        for n in params:
                            save(os.path.join(d, "ref64", "grad", file_name(n) + ".grad.npy"),
                                 g64[n])
                    for n in params + buffers:
                        save(os.path.join(d, "ref64", opt, file_name(n) + ".npy"), s64[n])
                for n, v in forward64.items():
                    save(os.path.join(d, "ref64", "out", n + ".npy"), v)
                with open(os.path.join(d, "ref64", "spread.json"), "w") as f:
                    json.dump(spread, f, indent=0)
            manifest = collections.OrderedDict([
                ("model", name), ("opset", opset), ("loss", spec.loss),
                ("sgd", SGD), ("adamw", ADAMW),
                ("parameters", params), ("buffers", buffers),
                ("inputs", collections.OrderedDict(
                    (k, {"dtype": str(v.dtype).replace("torch.", ""), "shape": list(v.shape)})
                    for k, v in inputs.items())),
                ("labels", None if labels is None else
                 {"dtype": str(labels.dtype).replace("torch.", ""), "shape": list(labels.shape)}),
                ("outputs", collections.OrderedDict(
                    (o.name, value_info_shape(o)) for o in g.output)),
                ("other_initializers", extra_inits),
                ("op_types", op_types),
                ("reference_loss", float(loss)),
                ("notes", NOTES.get(name, [])),
            ])
            with open(os.path.join(d, "manifest.json"), "w") as f:
                json.dump(manifest, f, indent=1)
                f.write("\n")
            results.append((opset, op_types, extra_inits, time.time() - t1,
                            (onnx_loss - float(loss)) / float(loss), how))
        except Exception as e:  # reported, and the run exits non-zero
            shutil.rmtree(d, ignore_errors=True)
            msg = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            failures.append(f"{name} opset {opset}: {stage} failed: {type(e).__name__}: {msg}")
            print(f"  {stage.upper()} FAILED {name} opset {opset}: {type(e).__name__}: {msg}")
            sys.stdout.flush()

    ts_lines = []
    if torchscript and results:
        # After the references and the exports, from model0 (deep copies).
        top = max(r[0] for r in results)
        d = os.path.join(out_dir, f"{name}-opset{top}")
        try:
            t1 = time.time()
            info, problems, ts_lines = save_torchscript(model0, inputs, name, d)
            mpath = os.path.join(d, "manifest.json")
            with open(mpath) as f:
                manifest = json.load(f, object_pairs_hook=collections.OrderedDict)
            manifest["torchscript"] = info
            with open(mpath, "w") as f:
                json.dump(manifest, f, indent=1)
                f.write("\n")
            ts_lines.insert(0, f"  torchscript in {os.path.basename(d)} ({time.time() - t1:.2f}s): "
                               f"traced {info['traced']}, scripted {info['scripted']}")
        except Exception as e:
            msg = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            problems = [f"{type(e).__name__}: {msg}"]
        for p in problems:
            failures.append(f"{name}: torchscript: {p}")
            print(f"  TORCHSCRIPT FAILED {name}: {p}")

    nparam = sum(model0.state_dict()[n].numel() for n in params)
    print(f"{name}: loss {spec.loss} = {float(loss):.6f}, {len(params)} parameters "
          f"({nparam} values), {len(buffers)} buffers, reference {t_ref:.2f}s")
    for k, v in inputs.items():
        print(f"  input {k}: {str(v.dtype).replace('torch.', '')} {list(v.shape)}")
    if labels is not None:
        print(f"  labels: {str(labels.dtype).replace('torch.', '')} {list(labels.shape)}")
    for opset, ops, extra, dt, dl, how in results:
        print(f"  opset {opset} ({dt:.2f}s, {how} loss rel. diff {dl:.1e}): {' '.join(ops)}")
        if extra:
            print(f"    other initializers: {extra}")
    for line in ts_lines:
        print(line)
    for opt, dd in diag.items():
        print(f"  f32 vs f64 {opt}: loss {dd['loss']:.1e}, grad {dd['grad'][0]:.1e} "
              f"({dd['grad'][1]}), state {dd['state'][0]:.1e} ({dd['state'][1]}), "
              f"update {dd['delta'][0]:.1e} ({dd['delta'][1]}); weight decay moves "
              f">= {dd['wd'][0]:.1e} ({dd['wd'][1]})")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default="",
                    help="comma-separated; default: every model of --set")
    ap.add_argument("--set", choices=["zoo", "vision"], default="zoo",
                    help="zoo: the transformer and small-model zoo; vision: "
                         "torchvision's classification families")
    ap.add_argument("--opsets", default="14,17")
    ap.add_argument("--check64", action="store_true",
                    help="also run the step in float64 and print how far float32 is")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ref64", action="store_true",
                    help="also write ref64/: the step in float64 (always for --set "
                         "vision), which check_zoo.py then judges both float32 steps by")
    ap.add_argument("--bf16-spread", action="store_true",
                    help="also write ref/bf16_spread.json: how far PyTorch's bf16 "
                         "autocast step lands from its float32 step, per tensor "
                         "(check_zoo.py --precision bf16 judges by it)")
    ap.add_argument("--torchscript", action="store_true",
                    help="also write model.traced.pt and model.scripted.pt into each "
                         "model's highest-opset directory")
    ap.add_argument("--cache", metavar="DIR",
                    help="keep the zoo under DIR, keyed by these sources, arguments "
                         "and library versions, and link it from there when the "
                         "same zoo was made before (zoo_cache.py)")
    args = ap.parse_args()
    models = [m for m in args.models.split(",") if m] or list(
        VISION if args.set == "vision" else SPECS)
    unknown = [m for m in models if m not in ALL_SPECS]
    if unknown:
        ap.error(f"unknown models {unknown}; have {list(ALL_SPECS)}")
    opsets = [int(o) for o in args.opsets.split(",") if o]
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
    warnings.filterwarnings("ignore", message="ONNX Preprocess - Removing mutation")
    torch.use_deterministic_algorithms(True)

    def generate(out):
        t0 = time.time()
        failures = []
        for m in models:
            make_model(m, opsets, out, args.check64, failures, args.torchscript,
                       args.ref64 or m in VISION, args.bf16_spread)
        print(f"total {time.time() - t0:.1f}s")
        if failures:
            print("FAILED:\n  " + "\n  ".join(failures))
            return 1
        return 0

    if not args.cache:
        sys.exit(generate(args.out))
    # The key: what decides the zoo's content (not where it goes).
    key_args = [f"models={','.join(models)}", f"opsets={opsets}",
                f"check64={args.check64}", f"threads={args.threads}",
                f"ref64={args.ref64}", f"torchscript={args.torchscript}"]
    if args.bf16_spread:  # older caches' keys stay as they were
        key_args.append("bf16_spread=True")
    sys.exit(zoo_cache.cached(args.cache, key_args, args.out, generate))


if __name__ == "__main__":
    main()

"""Attention at the lengths models train at (FuseAttention, issue 38): a
causal mask built in forward at 272 tokens has 73,984 elements, more than
import folds into a constant, so it reaches the compiler as the ops that
build it. Each way the families write it is recognised as causal (the
scores never become a value the backward keeps) and trains as PyTorch."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import cleave
from test_data_parallel import step_like_pytorch
from test_tensor_parallel import OPTIMIZERS

SEQ = 272


class LongCausal(nn.Module):
    def __init__(self, style, vocab=37, d=16, heads=2):
        super().__init__()
        self.style, self.heads = style, heads
        self.wte = nn.Embedding(vocab, d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.head = nn.Linear(d, vocab)

    def mask(self, t, scores):
        if self.style == "hf":  # LLaMA's: triu(full(min), 1), added
            return scores + torch.full((t, t), torch.finfo(scores.dtype).min).triu(1)
        if self.style == "tril":  # GPT-2-like: tril(ones) == 0 filled
            keep = torch.tril(torch.ones(t, t))
            return scores.masked_fill(keep == 0, float("-inf"))
        i = torch.arange(t)  # arange comparison, as in Mistral's helpers
        return scores.masked_fill(i[None, :] > i[:, None], float("-inf"))

    def forward(self, input_ids, labels):
        b, t = input_ids.shape
        x = self.wte(input_ids)
        q, k, v = self.qkv(x).split(x.shape[-1], dim=-1)
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        scores = self.mask(t, q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]))
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, -1)
        logits = self.head(x + self.proj(y))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


@pytest.mark.parametrize("style", ["hf", "tril", "arange"])
def test_a_mask_built_in_forward_is_fused(style):
    torch.manual_seed(5)
    module = LongCausal(style)
    gen = torch.Generator().manual_seed(6)
    batch = {"input_ids": torch.randint(0, 37, (1, SEQ), generator=gen),
             "labels": torch.randint(0, 37, (1, SEQ), generator=gen)}
    reference = copy.deepcopy(module)
    model = cleave.tensor_parallel(module, dict(batch), tp=2, loss="auto",
                                   optimizer=OPTIMIZERS["sgd"][0])
    kernels = model.inspect()["kernels"]
    assert kernels.get("attention", 0) > 0 and "softmax" not in kernels, kernels
    step_like_pytorch(model, module, reference, batch, "auto", "sgd")

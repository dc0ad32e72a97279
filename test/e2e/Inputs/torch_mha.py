"""torch_mha.py OUT_DIR: token embeddings with a padding row
(nn.Embedding(padding_idx=0): that row takes no gradient) into
nn.MultiheadAttention with a float causal mask (its scores made by
aten::baddbmm in the traced and scripted forms), traced and scripted to
OUT_DIR/model.{traced,scripted}.pt in train() mode, a batch in
OUT_DIR/inputs/, and PyTorch's loss and gradients of one step in
OUT_DIR/ref/ (compare_grads.py's layout)."""
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

out = sys.argv[1]
for sub in ("inputs", "ref"):
    os.makedirs(os.path.join(out, sub), exist_ok=True)
torch.manual_seed(0)
T, B, D, H, C, V = 6, 4, 16, 4, 10, 20


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, D, padding_idx=0)
        self.attn = nn.MultiheadAttention(D, H, dropout=0.0)
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, C)
        mask = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
        self.register_buffer("mask", mask)

    def forward(self, tokens):
        x = self.embed(tokens)
        y, _ = self.attn(x, x, x, attn_mask=self.mask, need_weights=False)
        return self.head(self.norm(x + y)).mean(0)


model = Block().train()
x = torch.randint(0, V, (T, B))
x[0, :2] = 0  # padding, whose row must not train
labels = torch.randint(0, C, (B,))
torch.jit.trace(model, (x,)).save(os.path.join(out, "model.traced.pt"))
torch.jit.script(model).save(os.path.join(out, "model.scripted.pt"))
np.save(os.path.join(out, "inputs", "tokens.npy"), x.numpy())
np.save(os.path.join(out, "inputs", "labels.npy"), labels.numpy())
loss = F.cross_entropy(model(x), labels)
loss.backward()
np.save(os.path.join(out, "ref", "loss.npy"), np.array(loss.item(), np.float32))
assert model.embed.weight.grad[0].abs().max() == 0
for name, p in model.named_parameters():
    np.save(os.path.join(out, "ref", name + ".grad.npy"), p.grad.numpy())

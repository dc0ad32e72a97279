"""clip_towers.py OUT_DIR STEPS LR: a contrastive image-text model in CLIP's
form (Radford et al. 2021: two towers, L2-normalised embeddings, logits
scaled by exp of a learned temperature, initialised to log(1/0.07), the
symmetric cross-entropy over the batch's pairs). Exported by torch.onnx to
OUT_DIR/model.onnx (its temperature a 0-d initializer), a batch in
OUT_DIR/inputs/, and PyTorch's losses and temperature over STEPS SGD steps
in OUT_DIR/ref/.

clip_towers.py --check OUT_DIR RUN_LOG DUMP: the losses cleave printed and
the temperature it dumped equal PyTorch's."""
import math
import os
import re
import sys

import numpy as np

if sys.argv[1] == "--check":
    out, log, dump = sys.argv[2:5]
    want = np.load(os.path.join(out, "ref", "losses.npy"))
    got = [float(m) for m in re.findall(r"loss (\S+)", open(log).read())]
    assert len(got) == len(want), (got, want)
    err = max(abs(a - b) for a, b in zip(got, want))
    assert err <= 1e-5, (got, list(want))
    scale = np.load(os.path.join(dump, "logit_scale.npy"))
    ref = np.load(os.path.join(out, "ref", "logit_scale.npy"))
    assert scale.shape == (), scale.shape
    first = float(np.load(os.path.join(out, "ref", "logit_scale0.npy")))
    assert abs(float(scale) - first) > 1e-3, "the temperature did not train"
    assert abs(float(scale) - float(ref)) <= 1e-5, (float(scale), float(ref))
    print("%d losses and the temperature match (%.6f -> %.6f)"
          % (len(got), first, float(scale)))
    sys.exit(0)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

out, steps, lr = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
for sub in ("inputs", "ref"):
    os.makedirs(os.path.join(out, sub), exist_ok=True)
torch.manual_seed(0)


class Clip(nn.Module):
    def __init__(self):
        super().__init__()
        self.image = nn.Sequential(nn.Linear(48, 32), nn.GELU(),
                                   nn.Linear(32, 16))
        self.token = nn.Embedding(50, 24)
        self.text = nn.Linear(24, 16)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))

    def forward(self, pixels, tokens):
        i = F.normalize(self.image(pixels), dim=-1)
        t = F.normalize(self.text(self.token(tokens).mean(1)), dim=-1)
        logits = self.logit_scale.exp() * i @ t.t()
        labels = torch.arange(logits.shape[0])
        return (F.cross_entropy(logits, labels) +
                F.cross_entropy(logits.t(), labels)) / 2


model = Clip()
pixels = torch.randn(6, 48)
tokens = torch.randint(0, 50, (6, 5))
torch.onnx.export(model, (pixels, tokens), os.path.join(out, "model.onnx"),
                  input_names=["pixels", "tokens"], output_names=["loss"],
                  do_constant_folding=False, opset_version=17)
np.save(os.path.join(out, "inputs", "pixels.npy"), pixels.numpy())
np.save(os.path.join(out, "inputs", "tokens.npy"), tokens.numpy())
np.save(os.path.join(out, "ref", "logit_scale0.npy"),
        model.logit_scale.detach().numpy())
opt = torch.optim.SGD(model.parameters(), lr=lr)
losses = []
for _ in range(steps):
    opt.zero_grad()
    loss = model(pixels, tokens)
    loss.backward()
    opt.step()
    losses.append(loss.item())
np.save(os.path.join(out, "ref", "losses.npy"), np.array(losses))
np.save(os.path.join(out, "ref", "logit_scale.npy"),
        model.logit_scale.detach().numpy())

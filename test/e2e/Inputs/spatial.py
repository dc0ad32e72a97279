#!/usr/bin/python3
"""Issue 16: the gathers, pads, scans, resizes and transposed and 3-D
convolutions the ONNX importer writes in the dialect's own ops, trained
against PyTorch.

  spatial.py OUT_DIR CLEAVE [--tp N]

A small image model through F.pad (reflect, replicate, constant),
ConvTranspose2d (stride, padding, output_padding, groups), InstanceNorm2d
(affine), F.interpolate (bilinear, bicubic, nearest), torch.cumsum,
torch.gather, scatter_add and Conv3d (stride, padding, groups), and a
mixture-of-experts top-2 router (torch.topk), as
torch.onnx (1.13) exports them at opset 17 (GatherElements,
ScatterElements, CumSum, Resize, Pad, ConvTranspose, InstanceNormalization,
Conv over three spatial dims, TopK); one SGD step's loss and every gradient are
compared with PyTorch's in float64, as activations.py does.
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from activations import check  # noqa: E402


class Spatial(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.up = nn.ConvTranspose2d(4, 4, 3, stride=2, padding=1,
                                     output_padding=1, groups=2)
        self.norm = nn.InstanceNorm2d(4, affine=True)
        self.conv3 = nn.Conv3d(2, 4, (2, 3, 3), stride=(2, 1, 2),
                               padding=(1, 1, 0), groups=2)
        self.head = nn.Linear(4 * 2 * 9 * 1, 5)
        self.src = nn.Parameter(torch.randn(1, 4, 3, 7))

    def forward(self, x):
        h = F.pad(x, (1, 2, 2, 1), mode="reflect")              # 4x3x9x9
        h = torch.tanh(self.conv(h))                              # 4x4x7x7
        h = F.pad(h, (1, 0, 0, 1), mode="replicate")             # 4x4x8x8
        h = torch.tanh(self.up(h))                                # 4x4x16x16
        h = self.norm(h)
        h = F.interpolate(h, scale_factor=0.5, mode="bilinear",
                          align_corners=False)                    # 4x4x8x8
        h = F.interpolate(h, size=(9, 7), mode="bicubic",
                          align_corners=True)                     # 4x4x9x7
        h = torch.cumsum(h, dim=-1) * 0.3
        idx = (torch.arange(4 * 4 * 9 * 5).reshape(4, 4, 9, 5) * 7) % 7
        h = torch.gather(h, 3, idx)                               # 4x4x9x5
        h = F.pad(h, (1, 1, 0, 0), value=0.5)                     # 4x4x9x7
        spots = (torch.arange(4 * 4 * 3 * 7).reshape(4, 4, 3, 7) * 5) % 9
        h = h.scatter_add(2, spots, torch.sigmoid(self.src).expand(4, 4, 3, 7))
        h = F.interpolate(h, scale_factor=(1.0, 0.5), mode="nearest")
        h = h.reshape(4, 2, 2, 9, 3)                              # 4x2x2x9x3
        h = self.conv3(h)                                         # 4x4x2x9x1
        return self.head(h.flatten(1))


class Routing(nn.Module):
    """Mixture-of-experts top-2 routing as Mixtral writes it: TopK over the
    router's logits, softmax over the chosen ones, the chosen experts'
    outputs gathered by index (TopK and GatherElements)."""

    def __init__(self):
        super().__init__()
        self.router = nn.Linear(12, 6)
        self.experts = nn.Linear(12, 6 * 4)
        self.head = nn.Linear(4, 5)

    def forward(self, x):                                 # [8, 12]
        weights, chosen = torch.topk(self.router(x), 2, dim=-1)
        weights = torch.softmax(weights, dim=-1)          # [8, 2]
        outs = self.experts(x).reshape(8, 6, 4)
        picked = torch.gather(outs, 1, chosen.unsqueeze(-1).expand(8, 2, 4))
        return self.head((picked * weights.unsqueeze(-1)).sum(1))


def main():
    out, cleave = sys.argv[1], sys.argv[2]
    tp = int(sys.argv[sys.argv.index("--tp") + 1]) if "--tp" in sys.argv else 1
    failed = check(os.path.join(out, "spatial"), cleave, tp, "spatial",
                   Spatial, input_shape=(4, 3, 6, 6))
    failed += check(os.path.join(out, "routing"), cleave, tp, "routing",
                    Routing, input_shape=(8, 12))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

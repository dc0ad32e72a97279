"""conv_net.py OUT_DIR: a small CNN written the way torchvision's mobile
and residual nets are (a strided stem, a depthwise 3x3, pointwise 1x1, a
strided 1x1 shortcut, BatchNorm in training mode, late 2x2 planes), exported
to OUT_DIR/model.onnx with a batch of 16 in OUT_DIR/inputs/ and PyTorch's
gradients of one step in OUT_DIR/ref/ (NAME.grad.npy) and loss.npy."""
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

out = sys.argv[1]
os.makedirs(os.path.join(out, "inputs"), exist_ok=True)
os.makedirs(os.path.join(out, "ref"), exist_ok=True)
torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.pw = nn.Conv2d(16, 48, 1)
        self.down = nn.Conv2d(48, 96, 3, stride=2, padding=1)
        self.short = nn.Conv2d(48, 96, 1, stride=2)
        self.late = nn.Conv2d(96, 96, 3, stride=2, padding=1)
        self.fc = nn.Linear(96, 10)

    def forward(self, x):
        x = F.relu(self.bn(self.stem(x)))        # 16 x 8 x 8
        x = F.relu(self.pw(self.dw(x)))          # 48 x 8 x 8
        x = F.relu(self.down(x) + self.short(x))  # 96 x 4 x 4
        x = F.relu(self.late(x))                 # 96 x 2 x 2
        return self.fc(x.mean((2, 3)))


net = Net()
x = torch.randn(16, 3, 16, 16)
labels = torch.randint(0, 10, (16,))
torch.onnx.export(net, (x,), os.path.join(out, "model.onnx"),
                  input_names=["x"], output_names=["logits"],
                  training=torch.onnx.TrainingMode.TRAINING,
                  do_constant_folding=False, opset_version=17)
np.save(os.path.join(out, "inputs", "x.npy"), x.numpy())
np.save(os.path.join(out, "inputs", "labels.npy"), labels.numpy())
loss = F.cross_entropy(net(x), labels)
loss.backward()
np.save(os.path.join(out, "ref", "loss.npy"), np.array(loss.item(), np.float32))
for name, p in net.named_parameters():
    np.save(os.path.join(out, "ref", name + ".grad.npy"), p.grad.numpy())

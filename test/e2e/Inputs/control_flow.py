#!/usr/bin/python3
"""Issue 16: ONNX If and Loop that fold at compile time, as torch.onnx exports
a scripted module's Python control flow, trained against PyTorch.

  control_flow.py OUT_DIR CLEAVE [--tp N]

A recurrent cell applied by a `for` loop of fixed length (Loop with a
constant trip count, unrolled with its body's weights shared by every
iteration), a branch on a configuration flag kept as an integer buffer (If
on an initializer, which folds), and a loop that leaves early (`break` on the iteration number: the
condition folds per iteration); one SGD step's loss and every gradient are
compared with PyTorch's in float64, as activations.py does. A branch on
the data is refused with one error naming the If.
"""
import os
import subprocess
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from activations import check  # noqa: E402


class Unrolled(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.Linear(12, 12)
        self.head = nn.Linear(12, 5)
        # A configuration flag kept as an integer buffer: an initializer,
        # so the If on it folds.
        self.register_buffer("mode", torch.tensor(1))

    def forward(self, x):
        h = x
        for i in range(3):
            h = torch.tanh(self.cell(h)) + h * 0.5
        if bool(self.mode > 0):
            h = h * 2.0
        else:
            h = h - 1.0
        for i in range(10):
            if i == 2:
                break
            h = h + torch.sigmoid(self.cell(h)) * 0.1
        return self.head(h)


class DataBranch(nn.Module):
    def forward(self, x):
        if bool(x.sum() > 0):
            return x * 2.0
        return x - 1.0


def main():
    out, cleave = sys.argv[1], sys.argv[2]
    tp = int(sys.argv[sys.argv.index("--tp") + 1]) if "--tp" in sys.argv else 1
    failed = check(os.path.join(out, "loops"), cleave, tp, "loops", Unrolled,
                   export=torch.jit.script)
    # A branch on the data cannot be folded: one error naming the op.
    path = os.path.join(out, "data_branch.onnx")
    torch.onnx.export(torch.jit.script(DataBranch()), (torch.randn(8, 12),), path,
                      input_names=["x"], output_names=["y"], opset_version=17)
    r = subprocess.run([cleave, "import", path], capture_output=True, text=True)
    lines = r.stderr.strip().splitlines()
    want = "(If, opset 17): its condition depends on the data"
    if r.returncode != 0 and len(lines) == 1 and want in lines[0]:
        print("PASS data branch refused: " + lines[0])
    else:
        print("FAIL data branch: exit %d: %s" % (r.returncode, r.stderr.strip()))
        failed = 1
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

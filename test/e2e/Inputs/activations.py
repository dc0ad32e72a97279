#!/usr/bin/python3
"""Issue 16: the activations and reductions the ONNX importer writes in the
dialect's own ops, trained against PyTorch.

  activations.py OUT_DIR CLEAVE [--tp N]

Builds a regression MLP whose layers run through HardSigmoid, HardSwish,
Elu, Selu, Celu, Softplus, Softsign, Mish, PReLU (a trained slope per
channel), ReduceLogSumExp and a vector norm, as torch.onnx (1.13)
exports them at opset 17 (Mish and Softsign as their formulas); compiles it with cleave (MSE loss,
SGD), runs one step with --dump, and compares the loss and every gradient
with PyTorch's, computed in float64 (so the reference's own rounding is not
in the comparison). Prints PASS or FAIL lines and the largest relative error.
"""
import copy
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Activations(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.ModuleList([nn.Linear(12 if i == 0 else 24, 24)
                                 for i in range(9)])
        self.prelu = nn.PReLU(24, init=0.3)
        self.head = nn.Linear(24, 5)

    def forward(self, x):
        fc = self.fc
        h = F.hardsigmoid(fc[0](x) * 3.0) - 0.5
        h = F.hardswish(fc[1](h) * 4.0)
        h = F.elu(fc[2](h) * 2.0, alpha=0.7)
        h = F.selu(fc[3](h))
        h = F.celu(fc[4](h) * 2.0, alpha=1.3)
        h = F.softplus(fc[5](h) * 3.0) - 1.0
        h = F.softsign(fc[6](h) * 4.0)
        h = F.mish(fc[7](h) * 2.0)
        h = self.prelu(fc[8](h))
        lse = torch.logsumexp(h, dim=-1, keepdim=True)
        norm = torch.linalg.vector_norm(h, dim=-1, keepdim=True)
        return self.head(h - lse + norm)


class Overflow(nn.Module):
    """The ELU family and Softplus where exp(x) overflows float32 (|x| up to
    ~150): the branch a select discards must not turn the gradient into
    0 * inf = NaN."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(12, 24)
        self.head = nn.Linear(24, 5)

    def forward(self, x):
        h = self.fc(x) * 60.0
        y = F.elu(h) + F.selu(h) + F.celu(h, alpha=1.3) + F.softplus(h)
        return self.head(y * 0.01)


class InverseTrig(nn.Module):
    """Atan, Asin and Acos (the importer's range-reduced polynomial) over
    their whole domains, with inputs up to +-60 for Atan and up to 0.999 in
    magnitude for Asin and Acos."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(12, 24)
        self.head = nn.Linear(24, 5)

    def forward(self, x):
        h = self.fc(x)
        s = torch.tanh(h) * 0.999
        y = torch.atan(h * 20.0) + torch.asin(s) + torch.acos(s * 0.5)
        return self.head(y)


def main():
    out, cleave = sys.argv[1], sys.argv[2]
    tp = int(sys.argv[sys.argv.index("--tp") + 1]) if "--tp" in sys.argv else 1
    failed = 0
    for name, cls in (("activations", Activations), ("overflow", Overflow),
                      ("inverse_trig", InverseTrig)):
        failed += check(os.path.join(out, name), cleave, tp, name, cls)
    return 1 if failed else 0


def check(out, cleave, tp, label, cls, input_shape=(8, 12), export=None):
    """export: what torch.onnx exports instead of the module itself
    (torch.jit.script, for Python control flow); PyTorch's reference runs
    the module."""
    os.makedirs(os.path.join(out, "inputs"), exist_ok=True)
    torch.manual_seed(16)
    model = cls()
    x = torch.randn(*input_shape)
    labels = torch.randn(input_shape[0], 5)
    onnx_path = os.path.join(out, "model.onnx")
    exported = copy.deepcopy(model)
    torch.onnx.export(export(exported) if export else exported, (x,), onnx_path,
                      input_names=["x"],
                      output_names=["y"], opset_version=17,
                      do_constant_folding=False)
    np.save(os.path.join(out, "inputs", "x.npy"), x.numpy())
    np.save(os.path.join(out, "inputs", "labels.npy"), labels.numpy())

    ref = copy.deepcopy(model).double()
    loss = F.mse_loss(ref(x.double()), labels.double())
    loss.backward()
    grads = {n: p.grad.numpy() for n, p in ref.named_parameters()}

    bundle, dump = os.path.join(out, "bundle"), os.path.join(out, "dump")
    compile_cmd = [cleave, "compile", onnx_path, "-o", bundle, "--loss", "mse",
                   "--optimizer", "sgd", "--lr", "0.01"]
    if tp > 1:
        compile_cmd += ["--tp", str(tp)]
    for cmd in (compile_cmd, [cleave, "run", bundle, "--steps", "1", "--inputs",
                              os.path.join(out, "inputs"), "--dump", dump]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print("FAIL %s: %s: %s" % (label, " ".join(cmd[:2]), r.stderr.strip()))
            return 1

    def rel(a, b):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))

    failures, worst = 0, 0.0
    errors = [("loss", rel(np.load(os.path.join(dump, "loss.npy"))[0],
                           loss.item()))]
    for name, g in grads.items():
        path = os.path.join(dump, name + ".grad.npy")
        if not os.path.exists(path):
            print("FAIL %s: no gradient dumped for %s" % (label, name))
            failures += 1
            continue
        errors.append((name, rel(np.load(path).reshape(g.shape), g)))
    for name, err in errors:
        worst = max(worst, err)
        if err > 1e-4:
            print("FAIL %s: %s differs from PyTorch by %.2e (relative)" %
                  (label, name, err))
            failures += 1
    print("%s %s tp=%d: loss and %d gradients, largest relative error %.1e" %
          ("PASS" if failures == 0 else "FAIL", label, tp, len(grads), worst))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

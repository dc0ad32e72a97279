"""Compares two --dump directories of runs that should be the same run.

Usage: same_run.py FULL PART [--tail] [--rtol R]

Every parameter and buffer (NAME.npy; gradients are skipped) must be equal,
bit for bit unless --rtol is given; PART's losses must equal FULL's, or with
--tail the last len(PART) of them (a resumed run continues FULL's).
"""
import os
import sys

import numpy as np

full, part = sys.argv[1], sys.argv[2]
tail = "--tail" in sys.argv
rtol = float(sys.argv[sys.argv.index("--rtol") + 1]) if "--rtol" in sys.argv else 0.0


def same(a, b):
    if rtol == 0.0:
        return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b)
    scale = max(np.abs(b).max(), 1e-30)
    return a.shape == b.shape and np.abs(a - b).max() <= rtol * scale


a, b = np.load(os.path.join(full, "loss.npy")), np.load(os.path.join(part, "loss.npy"))
if tail:
    a = a[len(a) - len(b):]
if not same(b, a):
    sys.exit(f"losses differ: {a} vs {b}")
names = sorted(f for f in os.listdir(full) if f.endswith(".npy") and not f.endswith(".grad.npy")
               and f != "loss.npy")
if not names or names != sorted(f for f in os.listdir(part) if f in names):
    sys.exit(f"different tensors: {names} vs {sorted(os.listdir(part))}")
for n in names:
    if not same(np.load(os.path.join(part, n)), np.load(os.path.join(full, n))):
        sys.exit(f"{n} differs")
print(f"same run: {len(b)} losses, {len(names)} tensors")

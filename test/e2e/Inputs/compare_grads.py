"""compare_grads.py DUMP REF TOL: every REF/NAME.grad.npy equals
DUMP/NAME.grad.npy within TOL of the gradient's largest magnitude, and
REF/loss.npy the dump's first loss."""
import glob
import os
import sys

import numpy as np

dump, ref, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
loss = np.load(os.path.join(dump, "loss.npy")).reshape(-1)[0]
want = float(np.load(os.path.join(ref, "loss.npy")))
assert abs(loss - want) <= tol * abs(want), (loss, want)
count = 0
for path in sorted(glob.glob(os.path.join(ref, "*.grad.npy"))):
    name = os.path.basename(path)
    got = np.load(os.path.join(dump, name)).astype(np.float64)
    exp = np.load(path).astype(np.float64)
    assert got.shape == exp.shape, (name, got.shape, exp.shape)
    err = np.abs(got - exp).max() / max(np.abs(exp).max(), 1e-12)
    assert err <= tol, (name, err)
    count += 1
assert count > 0
print("%d arrays match" % (count + 1))

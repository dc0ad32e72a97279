#!/usr/bin/python3
"""same_dumps.py A B TOL: every .npy of dump A equals B's (exactly when TOL
is 0, else within TOL relative to the array's largest magnitude). A resumed
run's loss.npy, shorter, is compared with the end of B's."""
import glob
import os
import sys

import numpy as np

a_dir, b_dir, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(a_dir, "*.npy")))
if not names or names != sorted(os.path.basename(p) for p in
                                glob.glob(os.path.join(b_dir, "*.npy"))):
    sys.exit(f"the dumps hold different files")
for n in names:
    a, b = np.load(os.path.join(a_dir, n)), np.load(os.path.join(b_dir, n))
    if n == "loss.npy" and 0 < a.shape[0] < b.shape[0]:
        b = b[-a.shape[0]:]
    if tol == 0:
        ok = a.shape == b.shape and np.array_equal(a, b)
    else:
        scale = max(1.0, float(np.abs(b).max())) if b.size else 1.0
        ok = a.shape == b.shape and float(np.abs(a - b).max(initial=0)) <= tol * scale
    if not ok:
        sys.exit(f"{n} differs")
print(f"same: {len(names)} arrays")

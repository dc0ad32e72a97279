#!/usr/bin/python3
"""same_dumps.py A B TOL [FRACTION:ATOL [NOISE...]]: every .npy of dump A equals B's
(exactly when TOL is 0, else within TOL relative to the array's largest
magnitude, at least 1). A resumed run's loss.npy, shorter, is compared with
the end of B's.

FRACTION:ATOL lets at most that fraction of each array's elements (at least
one) differ by up to ATOL instead: for runs whose sums go in another order
(MPI's all-reduce against the in-process one, dp halves against one batch)
and train with AdamW, whose first steps move an element by about lr
whatever its gradient's size: where a gradient is rounding noise, the two
runs' noise can differ in sign, and that element's update by up to 2 lr.
Such elements are a handful; a wrong reduction or scaling changes most.

NOISE, REGEX:START:STOP, names elements whose gradient is zero in exact
arithmetic (an attention's key bias: softmax does not change when a row's
scores all move by the same amount), elements [START, STOP) of the arrays
whose file name REGEX matches: every one of them is noise on both sides,
so they are held to ATOL alone and not counted against FRACTION."""
import glob
import os
import re
import sys

import numpy as np

a_dir, b_dir, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
fraction, atol = 0.0, 0.0
if len(sys.argv) > 4:
    fraction, atol = (float(x) for x in sys.argv[4].split(":"))
noise = []
for spec in sys.argv[5:]:
    regex, start, stop = spec.rsplit(":", 2)
    noise.append((re.compile(regex), int(start), int(stop)))
names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(a_dir, "*.npy")))
if not names or names != sorted(os.path.basename(p) for p in
                                glob.glob(os.path.join(b_dir, "*.npy"))):
    sys.exit("the dumps hold different files")
for n in names:
    a, b = np.load(os.path.join(a_dir, n)), np.load(os.path.join(b_dir, n))
    if n == "loss.npy" and 0 < a.shape[0] < b.shape[0]:
        b = b[-a.shape[0]:]
    if tol == 0:
        ok = a.shape == b.shape and np.array_equal(a, b)
    else:
        # Equal elements (a mask's -inf included) differ by nothing.
        finite = np.abs(b[np.isfinite(b)])
        scale = max(1.0, float(finite.max())) if finite.size else 1.0
        ok = a.shape == b.shape
        if ok:
            with np.errstate(invalid="ignore"):
                diff = np.where(a == b, 0.0,
                                np.abs(a.astype(np.float64) - b.astype(np.float64)))
            outliers = diff > tol * scale
            for regex, start, stop in noise:
                if regex.fullmatch(n):
                    outliers.reshape(-1)[start:stop] = False
            allowed = max(1, int(np.ceil(fraction * a.size))) if fraction else 0
            ok = (int(outliers.sum()) <= allowed and
                  float(diff.max(initial=0)) <= max(tol * scale, atol))
    if not ok:
        sys.exit(f"{n} differs")
print(f"same: {len(names)} arrays")

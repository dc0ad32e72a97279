"""Exits non-zero unless two .npy files agree (rtol 1e-4, atol 1e-5)."""
import sys

import numpy as np

got, want = np.load(sys.argv[1]), np.load(sys.argv[2])
assert got.shape == want.shape, (got.shape, want.shape)
assert got.dtype == want.dtype, (got.dtype, want.dtype)
assert np.allclose(got, want, rtol=1e-4, atol=1e-5), np.abs(got - want).max()

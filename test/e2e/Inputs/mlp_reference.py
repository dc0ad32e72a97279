"""Writes an input batch for the test MLP and NumPy's output for it."""
import sys

import numpy as np
import onnx
from onnx import numpy_helper

model = onnx.load(sys.argv[1])
w = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
x = np.random.default_rng(7).standard_normal((5, 4)).astype(np.float32)
np.save(sys.argv[2] + "/x.npy", x)
np.save(sys.argv[3], np.maximum(x @ w["fc.weight"].T + w["fc.bias"], 0))

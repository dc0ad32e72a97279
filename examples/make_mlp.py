"""Writes a small MLP classifier as ONNX (opset 17) plus an input batch and
NumPy's reference output, for `make demo`.

Usage: /usr/bin/python3 make_mlp.py OUT_DIR
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
os.makedirs(os.path.join(out, "inputs"), exist_ok=True)
rng = np.random.default_rng(0)
d_in, d_hidden, d_out, batch = 784, 128, 10, 4

w1 = (rng.standard_normal((d_hidden, d_in)) * 0.05).astype(np.float32)
b1 = np.zeros(d_hidden, np.float32)
w2 = (rng.standard_normal((d_out, d_hidden)) * 0.05).astype(np.float32)
b2 = np.zeros(d_out, np.float32)

nodes = [
    helper.make_node("Gemm", ["image", "fc1.weight", "fc1.bias"], ["h"],
                     transB=1, name="fc1"),
    helper.make_node("Relu", ["h"], ["a"], name="relu"),
    helper.make_node("Gemm", ["a", "fc2.weight", "fc2.bias"], ["logits"],
                     transB=1, name="fc2"),
    helper.make_node("Softmax", ["logits"], ["probs"], axis=-1, name="softmax"),
]
graph = helper.make_graph(
    nodes, "mlp",
    [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", d_in])],
    [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", d_out])],
    [numpy_helper.from_array(w1, "fc1.weight"),
     numpy_helper.from_array(b1, "fc1.bias"),
     numpy_helper.from_array(w2, "fc2.weight"),
     numpy_helper.from_array(b2, "fc2.bias")])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
onnx.checker.check_model(model)
onnx.save(model, os.path.join(out, "mlp.onnx"))

x = rng.random((batch, d_in), dtype=np.float32)
np.save(os.path.join(out, "inputs", "image.npy"), x)
logits = np.maximum(x @ w1.T + b1, 0) @ w2.T + b2
e = np.exp(logits - logits.max(-1, keepdims=True))
np.save(os.path.join(out, "reference.npy"), e / e.sum(-1, keepdims=True))

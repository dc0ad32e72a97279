"""An ONNX model with a weight-only int8 linear layer, as torch.onnx writes
`F.linear(x, w.to(torch.float32) * scale[:, None])` after a float layer,
and --weights files for it: the int8 weight as I8 (right) and as F32
(wrong).

Usage: make_int8.py OUT_DIR       the model, weights and inputs
       make_int8.py --check OUT_DIR  compares the exported int8 weights
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import json
import struct

KINDS = {"float32": "F32", "int8": "I8"}


def write_safetensors(path, tensors):
    header, blobs, at = {}, [], 0
    for name, a in tensors.items():
        data = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": KINDS[str(a.dtype)], "shape": list(a.shape),
                        "data_offsets": [at, at + len(data)]}
        blobs.append(data)
        at += len(data)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_tensor(path, name):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    info = json.loads(raw[8:8 + n])[name]
    begin, end = info["data_offsets"]
    kind = {v: k for k, v in KINDS.items()}[info["dtype"]]
    return np.frombuffer(raw[8 + n + begin:8 + n + end],
                         dtype=kind).reshape(info["shape"])


def main():
    if sys.argv[1] == "--check":
        out = sys.argv[2]
        a = read_tensor(os.path.join(out, "right.safetensors"), "fc2.weight")
        b = read_tensor(os.path.join(out, "out.safetensors"), "fc2.weight")
        print(b.dtype, "equal" if np.array_equal(a, b) else "differ")
        graph = onnx.load(os.path.join(out, "out.onnx")).graph
        c = next(numpy_helper.to_array(t) for t in graph.initializer
                 if t.name == "fc2.weight")
        print("onnx", c.dtype, "equal" if np.array_equal(a, c) else "differ")
        return
    out = sys.argv[1]
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((64, 32)) * 0.1).astype(np.float32)
    q = rng.integers(-127, 128, size=(48, 64)).astype(np.int8)
    scale = (rng.random(48) * 0.001 + 0.0001).astype(np.float32)
    inits = [numpy_helper.from_array(w1, "fc1.weight"),
             numpy_helper.from_array(q, "fc2.weight"),
             numpy_helper.from_array(scale, "fc2.weight_scale"),
             numpy_helper.from_array(np.array([1], np.int64), "axes")]
    nodes = [
        helper.make_node("Gemm", ["x", "fc1.weight"], ["h"], transB=1),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Cast", ["fc2.weight"], ["wf"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["fc2.weight_scale", "axes"], ["s2"]),
        helper.make_node("Mul", ["wf", "s2"], ["wd"]),
        helper.make_node("Gemm", ["r", "wd"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "int8_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6, 48])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, os.path.join(out, "int8.onnx"))
    write_safetensors(os.path.join(out, "right.safetensors"),
                      {"fc1.weight": w1, "fc2.weight": q,
                       "fc2.weight_scale": scale})
    write_safetensors(os.path.join(out, "wrong.safetensors"),
                      {"fc1.weight": w1, "fc2.weight": q.astype(np.float32),
                       "fc2.weight_scale": scale})
    os.makedirs(os.path.join(out, "in"), exist_ok=True)
    np.save(os.path.join(out, "in", "x.npy"),
            rng.standard_normal((6, 32)).astype(np.float32))
    np.save(os.path.join(out, "in", "labels.npy"),
            rng.standard_normal((6, 48)).astype(np.float32))


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Issue 16: a model whose inputs and outputs are float64, float16, uint8 and
int8 runs under `cleave run --forward`: each output keeps its dtype, and its
values are numpy's (float16 arithmetic rounds once per op, as numpy's
float16 does; uint8 and int8 wrap; float64 computes in float32, within
float32's precision). A float64 input beyond float32's range is one error.

  dtypes.py OUT_DIR CLEAVE
"""
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper


def model(path):
    D, H, U8, I8, F = (TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.UINT8,
                       TensorProto.INT8, TensorProto.FLOAT)
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["x2"]),
        helper.make_node("Add", ["x2", "x"], ["f64_out"]),
        helper.make_node("Mul", ["h", "h"], ["hh"]),
        helper.make_node("Add", ["hh", "h"], ["f16_out"]),
        helper.make_node("Add", ["u", "u"], ["u8_out"]),
        helper.make_node("Cast", ["u"], ["uf"], to=F),
        helper.make_node("Cast", ["x"], ["xh"], to=H),
        helper.make_node("Cast", ["xh"], ["xhf"], to=F),
        helper.make_node("Add", ["uf", "xhf"], ["f32_out"]),
        helper.make_node("Sub", ["i", "i8_one"], ["i8_out"]),
    ]
    graph = helper.make_graph(
        nodes, "dtypes",
        [helper.make_tensor_value_info("x", D, [2, 3]),
         helper.make_tensor_value_info("h", H, [2, 3]),
         helper.make_tensor_value_info("u", U8, [2, 3]),
         helper.make_tensor_value_info("i", I8, [2, 3])],
        [helper.make_tensor_value_info("f64_out", D, [2, 3]),
         helper.make_tensor_value_info("f16_out", H, [2, 3]),
         helper.make_tensor_value_info("u8_out", U8, [2, 3]),
         helper.make_tensor_value_info("f32_out", F, [2, 3]),
         helper.make_tensor_value_info("i8_out", I8, [2, 3])],
        [helper.make_tensor("i8_one", I8, [], [1])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    onnx.save(m, path)


def main():
    out, cleave = sys.argv[1], sys.argv[2]
    os.makedirs(os.path.join(out, "in"), exist_ok=True)
    path = os.path.join(out, "dtypes.onnx")
    model(path)
    x = np.array([[0.1, -2.5, 3.0], [1e-3, 7.25, -0.3]])
    h = np.array([[0.1, 1.5, -3.7], [100.3, 0.001, 2.0]], np.float16)
    u = np.array([[1, 100, 200], [255, 0, 128]], np.uint8)
    i = np.array([[-128, 0, 127], [5, -1, 1]], np.int8)
    for name, v in (("x", x), ("h", h), ("u", u), ("i", i)):
        np.save(os.path.join(out, "in", name + ".npy"), v)
    want = {
        "f64_out": x * x + x,
        "f16_out": (h * h) + h,  # numpy rounds each float16 op
        "u8_out": u + u,         # wraps
        "f32_out": u.astype(np.float32) + x.astype(np.float16).astype(np.float32),
        "i8_out": i - np.int8(1),  # -128 - 1 wraps to 127
    }
    dump = os.path.join(out, "dump")
    r = subprocess.run([cleave, "run", path, "--forward", "--inputs",
                        os.path.join(out, "in"), "--dump", dump],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print("FAIL run: " + r.stderr.strip())
        return 1
    failed = 0
    for name, w in want.items():
        got = np.load(os.path.join(dump, name + ".npy"))
        ok = got.dtype == w.dtype and got.shape == w.shape
        if ok and w.dtype == np.float64:
            ok = np.allclose(got, w, rtol=1e-6, atol=0)
        elif ok:
            ok = np.array_equal(got, w)
        print("%s %s: %s %s" % ("PASS" if ok else "FAIL", name, got.dtype,
                                got.ravel().tolist()))
        failed += not ok
    np.save(os.path.join(out, "in", "x.npy"), np.full((2, 3), 1e300))
    r = subprocess.run([cleave, "run", path, "--forward", "--inputs",
                        os.path.join(out, "in"), "--dump", dump],
                       capture_output=True, text=True)
    lines = r.stderr.strip().splitlines()
    ok = r.returncode != 0 and len(lines) == 1 and "beyond float32's range" in lines[0]
    print("%s range: %s" % ("PASS" if ok else "FAIL", r.stderr.strip()))
    failed += not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

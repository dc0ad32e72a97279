#!/usr/bin/python3
"""Issue 16: Floor, Ceil, Round and Sign on the values where formulas go
wrong (halves, -0.5, the 2^23 boundary, huge values, infinities, NaN).

  rounding.py make OUT_DIR      writes model.onnx (opset 13) and in/x.npy
  rounding.py check DUMP_DIR    compares cleave's outputs with numpy's
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

OPS = [("Floor", np.floor), ("Ceil", np.ceil), ("Round", np.round),
       ("Sign", np.sign)]
X = np.array([-2.5, -1.5, -0.5, -0.49999997, 0.0, 0.5, 1.5, 2.5, 3.7, -3.7,
              8388607.5, -8388607.5, 8388608.0, 16777217.0, 3e9, -3e9, 1e30,
              -1e30, np.inf, -np.inf, np.nan], np.float32)


def make(out):
    os.makedirs(os.path.join(out, "in"), exist_ok=True)
    n = len(X)
    nodes = [helper.make_node(op, ["x"], [op.lower()]) for op, _ in OPS]
    graph = helper.make_graph(
        nodes, "rounding",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
        [helper.make_tensor_value_info(op.lower(), TensorProto.FLOAT, [n])
         for op, _ in OPS])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(out, "model.onnx"))
    np.save(os.path.join(out, "in", "x.npy"), X)


def check(dump):
    bad = 0
    for op, f in OPS:
        got = np.load(os.path.join(dump, op.lower() + ".npy"))
        want = f(X)
        same = (got == want) | (np.isnan(got) & np.isnan(want))
        for i in np.flatnonzero(~same):
            print("FAIL %s(%r) = %r, numpy %r" % (op, X[i], got[i], want[i]))
            bad += 1
    print("%s: %d ops on %d values" % ("PASS" if not bad else "FAIL", len(OPS),
                                       len(X)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(make(sys.argv[2]) if sys.argv[1] == "make" else check(sys.argv[2]))

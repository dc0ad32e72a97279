#!/usr/bin/python3
"""ONNX sequences resolved at import, against numpy.

  sequences.py OUT_DIR CLEAVE

Each model is built with onnx.helper, run by `cleave run --forward`, and
its output compared with the same computation in numpy: SplitToSequence
(pieces of 1 squeezed, a scalar chunk whose last piece is shorter, explicit
sizes), SequenceAt (negative positions), SequenceConstruct, SequenceInsert
and SequenceErase at given and default positions, SequenceLength,
ConcatFromSequence (concatenated and stacked), and a Loop that builds a
sequence (how torch.onnx exports repeat_interleave). A position out of
range is one error naming the node.
"""
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

X = np.arange(2 * 5 * 3, dtype=np.float32).reshape(2, 5, 3) / 7.0


def const(name, value):
    return helper.make_node("Constant", [], [name],
                            value=numpy_helper.from_array(np.array(value)))


def model(nodes, out_shape, extra_inits=()):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                   list(X.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        list(extra_inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def cases():
    pieces = [X[:, i] for i in range(5)]
    yield ("split-ones-squeezed-stack", model([
        helper.make_node("SplitToSequence", ["x"], ["s"], axis=1, keepdims=0),
        helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=2,
                         new_axis=1)], [2, 3, 5]),
        np.stack(pieces, axis=2))
    yield ("scalar-chunk-insert-erase", model([
        const("two", np.int64(2)),
        helper.make_node("SplitToSequence", ["x", "two"], ["s"], axis=1),
        const("m1", np.int64(-1)),
        helper.make_node("SequenceAt", ["s", "m1"], ["last"]),
        const("zero", np.int64(0)),
        helper.make_node("SequenceInsert", ["s", "last", "zero"], ["s2"]),
        helper.make_node("SequenceErase", ["s2"], ["s3"]),
        helper.make_node("ConcatFromSequence", ["s3"], ["y"], axis=1)],
        [2, 5, 3]),
        np.concatenate([X[:, 4:5], X[:, 0:2], X[:, 2:4]], axis=1))
    yield ("sizes-construct-length", model([
        const("sizes", np.array([1, 3, 1], dtype=np.int64)),
        helper.make_node("SplitToSequence", ["x", "sizes"], ["s"], axis=1),
        const("one", np.int64(1)),
        helper.make_node("SequenceAt", ["s", "one"], ["mid"]),
        helper.make_node("SequenceLength", ["s"], ["n"]),
        helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["mid", "nf"], ["scaled"]),
        helper.make_node("SequenceConstruct", ["scaled", "mid"], ["c"]),
        helper.make_node("ConcatFromSequence", ["c"], ["y"], axis=-1)],
        [2, 3, 6]),
        np.concatenate([X[:, 1:4] * 3, X[:, 1:4]], axis=-1))
    # A Loop that inserts each piece twice: repeat_interleave's export.
    body = helper.make_graph([
        helper.make_node("SequenceAt", ["s", "i"], ["p"]),
        helper.make_node("SequenceInsert", ["acc", "p"], ["acc1"]),
        helper.make_node("SequenceInsert", ["acc1", "p"], ["acc2"]),
        helper.make_node("Identity", ["c"], ["c_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_sequence_value_info("acc", TensorProto.FLOAT,
                                                None)],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_sequence_value_info("acc2", TensorProto.FLOAT,
                                                None)])
    yield ("loop-builds-a-sequence", model([
        helper.make_node("SplitToSequence", ["x"], ["s"], axis=1),
        const("trips", np.int64(5)),
        const("true", np.bool_(True)),
        helper.make_node("SequenceEmpty", [], ["empty"]),
        helper.make_node("Loop", ["trips", "true", "empty"], ["built"],
                         body=body),
        helper.make_node("ConcatFromSequence", ["built"], ["y"], axis=1)],
        [2, 10, 3]),
        np.repeat(X, 2, axis=1))


def run(cleave, path, out_dir):
    inputs = os.path.join(out_dir, "in")
    os.makedirs(inputs, exist_ok=True)
    np.save(os.path.join(inputs, "x.npy"), X)
    return subprocess.run([cleave, "run", path, "--forward", "--inputs", inputs,
                           "--dump", out_dir], capture_output=True, text=True)


def main():
    out, cleave = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    failed = 0
    for name, m, want in cases():
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "model.onnx")
        onnx.save(m, path)
        r = run(cleave, path, d)
        if r.returncode != 0:
            print(f"FAIL {name}: {r.stderr.strip()}")
            failed += 1
            continue
        got = np.load(os.path.join(d, "y.npy"))
        if got.shape != want.shape or not np.array_equal(got, want):
            print(f"FAIL {name}: got {got.shape}, want {want.shape}")
            failed += 1
            continue
        print(f"PASS {name}")
    bad = model([
        helper.make_node("SplitToSequence", ["x"], ["s"], axis=1),
        const("seven", np.int64(7)),
        helper.make_node("SequenceAt", ["s", "seven"], ["y"], name="at7")],
        [2, 1, 3])
    d = os.path.join(out, "bad")
    os.makedirs(d, exist_ok=True)
    onnx.save(bad, os.path.join(d, "model.onnx"))
    r = run(cleave, os.path.join(d, "model.onnx"), d)
    print(r.stderr.strip())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

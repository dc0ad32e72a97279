#!/usr/bin/python3
"""Writes models that a careless or hostile source might hand Cleave.

Usage: hostile_models.py OUT_DIR

Each case is OUT_DIR/CASE/model.onnx, the MLP of make_model.py (x [5, 4]
-> y [5, 3]) with its weight fc.weight changed as the case says; a file
OUT_DIR/secret holds bytes that must never be read into a bundle.
"""
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "Import", "Onnx", "Inputs"))
import make_model  # noqa: E402


def external(t, location, offset=None, length=None):
    t.ClearField("raw_data")
    t.data_location = onnx.TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", offset), ("length", length)):
        if v is not None:
            e = t.external_data.add()
            e.key, e.value = k, str(v)


def write(out, case, edit):
    d = os.path.join(out, case)
    os.makedirs(d, exist_ok=True)
    m = make_model.mlp()
    w = next(t for t in m.graph.initializer if t.name == "fc.weight")
    edit(d, w)
    onnx.save(m, os.path.join(d, "model.onnx"))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    secret = os.path.abspath(os.path.join(out, "secret"))
    with open(secret, "wb") as f:
        f.write(b"SECRET" * 100)
    rel = os.path.relpath(secret, os.path.join(os.path.abspath(out), "x"))
    good = np.ones((3, 4), np.float32).tobytes()

    def data_file(d, name, payload=good):
        with open(os.path.join(d, name), "wb") as f:
            f.write(payload)

    write(out, "dotdot", lambda d, w: external(w, rel))
    write(out, "absolute", lambda d, w: external(w, secret))
    write(out, "home", lambda d, w: external(w, "~/secret"))

    def link(d, w):
        path = os.path.join(d, "w.bin")
        if os.path.lexists(path):
            os.remove(path)
        os.symlink(secret, path)
        external(w, "w.bin")
    write(out, "symlink", link)

    def folder(d, w):
        os.makedirs(os.path.join(d, "w.bin"), exist_ok=True)
        external(w, "w.bin")
    write(out, "folder", folder)
    write(out, "missing", lambda d, w: external(w, "nothing.bin"))

    def bad_offset(d, w):
        data_file(d, "w.bin")
        external(w, "w.bin", offset="abc")
    write(out, "offset_text", bad_offset)

    def negative(d, w):
        data_file(d, "w.bin")
        external(w, "w.bin", offset=-8)
    write(out, "offset_negative", negative)

    def truncated(d, w):
        data_file(d, "w.bin", good[:20])
        external(w, "w.bin")
    write(out, "truncated", truncated)

    def past_end(d, w):
        data_file(d, "w.bin")
        external(w, "w.bin", offset=40)
    write(out, "past_end", past_end)

    def wrong_length(d, w):
        data_file(d, "w.bin")
        external(w, "w.bin", length=12)
    write(out, "wrong_length", wrong_length)

    def fine(d, w):
        data_file(d, "w.bin")
        external(w, "w.bin")
    write(out, "external_ok", fine)

    def short_raw(d, w):
        w.raw_data = good[:44]
    write(out, "raw_short", short_raw)

    def huge(d, w):
        del w.dims[:]
        w.dims.extend([1 << 40, 1 << 40])
    write(out, "dims_overflow", huge)
    graph_cases(out)


def write_model(out, case, m):
    d = os.path.join(out, case)
    os.makedirs(d, exist_ok=True)
    onnx.save(m, os.path.join(d, "model.onnx"))


def graph_cases(out):
    """Models whose graph, not their data, is wrong."""
    m = make_model.mlp()
    m.opset_import[0].version = 99
    write_model(out, "opset99", m)
    m = make_model.mlp()
    # A second node writing 'h': the later one would silently win.
    m.graph.node.insert(1, onnx.helper.make_node("Neg", ["x"], ["h"], name="again"))
    write_model(out, "two_writers", m)
    m = make_model.mlp()
    m.graph.node.append(onnx.helper.make_node("Neg", ["h"], ["x"], name="overwrite"))
    write_model(out, "writes_input", m)
    # Logits over 2.5e11 classes: the compiler's IR must not grow with them
    # (the class ids were one constant element per class: a hang).
    classes = 250_000_000_000
    w = numpy_helper.from_array(np.ones([1, 1], np.float32), "w")
    g = onnx.helper.make_graph(
        [onnx.helper.make_node("Mul", ["x", "w"], ["y"], name="scale")], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, classes])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, classes])], [w])
    write_model(out, "huge_classes",
                onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 17)]))
    more_graph_cases(out)


def more_graph_cases(out):
    """Graphs that are wrong the way hand-edited or foreign exports are."""
    h = onnx.helper
    m = make_model.mlp()
    m.graph.node[1].domain = "com.example"
    m.graph.node[1].op_type = "FancyRelu"
    m.opset_import.append(h.make_opsetid("com.example", 1))
    write_model(out, "custom_domain", m)
    m = make_model.mlp()
    m.graph.node[1].input[0] = "nowhere"
    write_model(out, "undefined_input", m)
    m = make_model.mlp()
    m.graph.output[0].name = "never_made"
    write_model(out, "output_not_made", m)
    m = make_model.mlp()
    # relu reads its own output: a cycle.
    m.graph.node[1].input[0] = "y"
    write_model(out, "cycle", m)
    m = make_model.mlp()
    m.graph.node.insert(0, h.make_node("Gemm", ["x", "fc.weight", "fc.bias"], ["h0"], transB=1))
    m.graph.node[1].input[0] = "x"
    m.graph.node[1].op_type = "MatMul"
    del m.graph.node[1].attribute[:]
    m.graph.node[1].input.pop()
    write_model(out, "matmul_mismatch", m)
    m = make_model.mlp()
    shape = numpy_helper.from_array(np.array([7, 7], np.int64), "bad_shape")
    m.graph.initializer.append(shape)
    m.graph.node.append(h.make_node("Reshape", ["y", "bad_shape"], ["z"], name="reshape"))
    m.graph.output[0].name = "z"
    del m.graph.output[0].type.tensor_type.shape.dim[:]
    write_model(out, "reshape_mismatch", m)
    m = make_model.mlp()
    s_init = h.make_tensor("names", onnx.TensorProto.STRING, [2], [b"a", b"b"])
    m.graph.initializer.append(s_init)
    m.graph.node.append(h.make_node("Identity", ["names"], ["n2"]))
    m.graph.output.append(h.make_tensor_value_info("n2", onnx.TensorProto.STRING, [2]))
    write_model(out, "string_tensor", m)
    m = make_model.mlp()
    del m.graph.node[:]
    write_model(out, "no_nodes", m)
    m = make_model.mlp()
    m.graph.node[0].attribute[0].i = 7  # transB = 7
    m.graph.node[0].attribute[0].name = "axis_that_gemm_lacks"
    write_model(out, "unknown_attribute", m)
    m = make_model.mlp()
    m.ir_version = 1000
    write_model(out, "ir_version_future", m)
    # A graph input that shadows an initializer with another shape.
    m = make_model.mlp()
    m.graph.input.append(h.make_tensor_value_info("fc.weight", onnx.TensorProto.FLOAT, [9, 9]))
    write_model(out, "input_shadows_initializer", m)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Writes small model files that try to make the compiler explode or be
silently wrong (issue 33): each is a few hundred bytes that describes huge
tensors, deep unrolling or values float32 cannot hold.

Usage: untrusted_models.py OUT_DIR

Each case is OUT_DIR/CASE.onnx (or .pt for TorchScript archives).
"""
import os
import sys
import zipfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

INT64_MIN, INT64_MAX = -2**63, 2**63 - 1


def model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def const(name, value, dtype):
    return numpy_helper.from_array(np.array(value, dtype=dtype), name)


def range_model(start, limit, delta, dtype):
    inits = [const("s", start, dtype), const("l", limit, dtype),
             const("d", delta, dtype)]
    onnx_dtype = {np.int64: TensorProto.INT64,
                  np.float32: TensorProto.FLOAT}[dtype]
    return model([helper.make_node("Range", ["s", "l", "d"], ["y"])], [],
                 [vi("y", onnx_dtype, None)], inits)


def nested_loops(depth, trips):
    """depth Loops inside one another, each of trips iterations, carrying
    one float through an Add."""
    def body(level):
        n = lambda name: f"{name}{level}"  # noqa: E731 (scopes nest)
        nodes = []
        if level == depth - 1:
            nodes.append(helper.make_node("Add", [n("v_in"), "one"],
                                          [n("v_out")]))
        else:
            nodes.append(helper.make_node(
                "Loop", ["trips", "", n("v_in")], [n("v_out")],
                body=body(level + 1)))
        nodes.append(helper.make_node("Identity", [n("cond_in")],
                                      [n("cond_out")]))
        return helper.make_graph(
            nodes, f"body{level}",
            [vi(n("i"), TensorProto.INT64, []),
             vi(n("cond_in"), TensorProto.BOOL, []),
             vi(n("v_in"), TensorProto.FLOAT, [1])],
            [vi(n("cond_out"), TensorProto.BOOL, []),
             vi(n("v_out"), TensorProto.FLOAT, [1])])
    inits = [const("trips", trips, np.int64), const("one", [1.0], np.float32)]
    return model([helper.make_node("Loop", ["trips", "", "x"], ["y"],
                                   body=body(0))],
                 [vi("x", TensorProto.FLOAT, [1])],
                 [vi("y", TensorProto.FLOAT, [1])], inits)


def window_model(op, **attrs):
    x = vi("x", TensorProto.FLOAT, [1, 1, 8, 8])
    y = vi("y", TensorProto.FLOAT, None)
    inits = []
    ins = ["x"]
    if op == "Conv":
        inits.append(numpy_helper.from_array(
            np.ones((1, 1, 3, 3), np.float32), "w"))
        ins.append("w")
    return model([helper.make_node(op, ins, ["y"], **attrs)], [x], [y], inits)


def many_initializers(n):
    inits = [numpy_helper.from_array(np.array([1.0], np.float32), f"u{i}")
             for i in range(n)]
    return model([helper.make_node("Relu", ["x"], ["y"])],
                 [vi("x", TensorProto.FLOAT, [2, 3])],
                 [vi("y", TensorProto.FLOAT, [2, 3])], inits)


def zip_bomb(path, records, record_bytes):
    """A zip whose deflated records of zeros each inflate to record_bytes:
    a TorchScript archive's shape, small on disk."""
    chunk = bytes(1 << 20)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for r in range(records):
            with z.open(f"bomb/data/{r}", "w", force_zip64=True) as f:
                for _ in range(record_bytes // len(chunk)):
                    f.write(chunk)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)

    def save(name, m):
        onnx.save(m, os.path.join(out, name + ".onnx"))

    # A float64 constant below float32's normal range: x / 1e-300 in f32
    # was x / 0, and Log of it inf.
    save("f64_tiny", model(
        [helper.make_node("Cast", ["c"], ["cf"], to=TensorProto.FLOAT),
         helper.make_node("Div", ["x", "cf"], ["q"]),
         helper.make_node("Log", ["q"], ["y"])],
        [vi("x", TensorProto.FLOAT, [2])], [vi("y", TensorProto.FLOAT, [2])],
        [const("c", [1e-300], np.float64)]))
    save("range_int64_full", range_model(INT64_MIN, INT64_MAX, 1, np.int64))
    save("range_float_tiny_step", range_model(0.0, 1.0, 1e-30, np.float32))
    save("range_huge", range_model(0, 10**12, 1, np.int64))
    # An empty range whose count is far below int64 (a float conversion
    # out of range is undefined behaviour).
    save("range_far_below", range_model(0.0, -1e30, 1e-10, np.float32))
    save("range_nan", range_model(0.0, float("nan"), 1.0, np.float32))
    save("conv_dilation_huge", window_model(
        "Conv", kernel_shape=[3, 3], dilations=[2**62, 1]))
    save("maxpool_kernel_huge", window_model(
        "MaxPool", kernel_shape=[2**62, 1]))
    save("maxpool_kernel_wider_than_input", window_model(
        "MaxPool", kernel_shape=[9, 1]))
    save("nested_loops", nested_loops(3, 1000))
    save("initializers_30k", many_initializers(30000))
    save("onehot_depth_nan", model(
        [helper.make_node("Constant", [], ["depth"], value=const(
            "d", [float("nan")], np.float32)),
         helper.make_node("Constant", [], ["values"], value=const(
             "v", [0.0, 1.0], np.float32)),
         helper.make_node("OneHot", ["i", "depth", "values"], ["y"])],
        [vi("i", TensorProto.INT64, [3])], [vi("y", TensorProto.FLOAT, None)]))
    save("resize_roi_and_scales", model(
        [helper.make_node("Resize", ["x", "roi", "scales"], ["y"],
                          mode="linear",
                          coordinate_transformation_mode="tf_crop_and_resize")],
        [vi("x", TensorProto.FLOAT, [1, 1, 4, 4])],
        [vi("y", TensorProto.FLOAT, None)],
        [const("roi", [0, 0, 0.2, 0.2, 1, 1, 0.8, 0.8], np.float32),
         const("scales", [1, 1, 2, 2], np.float32)]))
    # Two records of 640 MiB of zeros, deflated to about 1.3 MB: past the
    # default budget (1 GiB here) in all, each within deflate's 1032:1.
    zip_bomb(os.path.join(out, "inflates_1280mb.pt"), 2, 640 << 20)
    zip_bomb(os.path.join(out, "inflates_64mb.pt"), 4, 16 << 20)


if __name__ == "__main__":
    main()

"""Builds small ONNX models for the importer's lit tests.

Usage: /usr/bin/python3 make_model.py CASE OUT.onnx
Each case is a function below; the test names the case it needs.
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def vi(name, t, shape):
    return helper.make_tensor_value_info(name, t, shape)


def mlp():
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((3, 4)).astype(np.float32), "fc.weight")
    b = numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "fc.bias")
    return model(
        [helper.make_node("Gemm", ["x", "fc.weight", "fc.bias"], ["h"], transB=1, name="fc"),
         helper.make_node("Relu", ["h"], ["y"], name="relu")],
        [vi("x", F, ["batch", 4])], [vi("y", F, ["batch", 3])], [w, b])


def mlp2():
    # Two layers, 64 -> 128 -> 16: Megatron's column then row split at tp 2.
    rng = np.random.default_rng(2)
    init = lambda name, shape: numpy_helper.from_array(
        (0.3 * rng.standard_normal(shape)).astype(np.float32), name)
    return model(
        [helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], transB=1,
                          name="fc1"),
         helper.make_node("Relu", ["h"], ["r"], name="relu"),
         helper.make_node("Gemm", ["r", "fc2.weight", "fc2.bias"], ["y"], transB=1,
                          name="fc2")],
        [vi("x", F, ["batch", 64])], [vi("y", F, ["batch", 16])],
        [init("fc1.weight", (128, 64)), init("fc1.bias", (128,)),
         init("fc2.weight", (16, 128)), init("fc2.bias", (16,))])


def shape_arith():
    # x [2, 3, 8] -> reshape to [2, 3, 2, 4] computed from Shape, as exporters do.
    c = lambda name, v: helper.make_node(
        "Constant", [], [name], value=numpy_helper.from_array(np.array(v, np.int64)))
    return model(
        [helper.make_node("Shape", ["x"], ["s"]),
         c("i0", 0), c("i1", 1), c("heads", [2]), c("ax", [0]),
         helper.make_node("Gather", ["s", "i0"], ["b"]),
         helper.make_node("Gather", ["s", "i1"], ["t"]),
         helper.make_node("Unsqueeze", ["b", "ax"], ["b1"]),
         helper.make_node("Unsqueeze", ["t", "ax"], ["t1"]),
         helper.make_node("Div", ["heads", "heads"], ["one"]),
         c("four", [4]),
         helper.make_node("Mul", ["one", "four"], ["d"]),
         helper.make_node("Concat", ["b1", "t1", "heads", "d"], ["shape"], axis=0),
         helper.make_node("Reshape", ["x", "shape"], ["y"], name="split_heads")],
        [vi("x", F, [2, 3, 8])], [vi("y", F, [2, 3, 2, 4])])


def unsupported_op():
    # NonZero's result shape depends on the data: it stays unsupported.
    return model([helper.make_node("NonZero", ["x"], ["i"], name="nonzero")],
                 [vi("x", F, [4])], [vi("i", I64, [1, 4])])


def custom_domain():
    m = model([helper.make_node("FusedGemm", ["x"], ["y"], domain="com.microsoft", name="fused")],
              [vi("x", F, [4])], [vi("y", F, [4])])
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return m


def old_opset():
    return model([helper.make_node("LayerNormalization", ["x", "s"], ["y"], name="ln")],
                 [vi("x", F, [2, 4]), vi("s", F, [4])], [vi("y", F, [2, 4])], opset=12)


def output_type_mismatch():
    return model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                 [vi("x", F, [4])], [vi("y", I64, [4])])


def undefined_input():
    return model([helper.make_node("Add", ["x", "nowhere"], ["y"], name="add")],
                 [vi("x", F, [4])], [vi("y", F, [4])])


def broadcast_error():
    return model([helper.make_node("Add", ["x", "z"], ["y"], name="add")],
                 [vi("x", F, [4, 3]), vi("z", F, [2])], [vi("y", F, [4, 3])])


def batchnorm_bad_scale():
    # Training mode builds the statistics itself; the scale still must be [C].
    return model([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"],
                                   ["y"], training_mode=1, name="bn")],
                 [vi("x", F, [2, 3, 4]), vi("s", F, [4]), vi("b", F, [3]),
                  vi("m", F, [3]), vi("v", F, [3])], [vi("y", F, [2, 3, 4])], opset=15)


def gemm_bad_bias():
    return model([helper.make_node("Gemm", ["a", "w", "c"], ["y"], beta=0.5, name="gemm")],
                 [vi("a", F, [2, 4]), vi("w", F, [4, 3]), vi("c", F, [5])],
                 [vi("y", F, [2, 3])])


def dynamic_reshape():
    return model([helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")],
                 [vi("x", F, [4, 3]), vi("shape", I64, [2])], [vi("y", F, [3, 4])])


def external_data():
    # The weight lives in a side file next to the model.
    m = mlp()
    for t in m.graph.initializer:
        if t.name == "fc.weight":
            data = numpy_helper.to_array(t).tobytes()
            t.ClearField("raw_data")
            t.ClearField("float_data")
            t.data_location = TensorProto.EXTERNAL
            t.external_data.add(key="location", value="weights.bin")
            with open(sys.argv[2] + ".dir/weights.bin", "wb") as f:
                f.write(data)
    return m


def sce_loss():
    # PyTorch's export of F.cross_entropy: class dimension 1, class weights,
    # ignore_index, and the optional log-probability output.
    return model([helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t", "w"],
                                   ["loss", "logp"], ignore_index=-1,
                                   reduction="mean", name="sce")],
                 [vi("x", F, [2, 3, 4]), vi("t", I64, [2, 4]), vi("w", F, [3])],
                 [vi("loss", F, []), vi("logp", F, [2, 3, 4])])


def nll_loss():
    return model([helper.make_node("NegativeLogLikelihoodLoss", ["x", "t"],
                                   ["loss"], reduction="sum", name="nll")],
                 [vi("x", F, [2, 3]), vi("t", I64, [2])], [vi("loss", F, [])])


def nll_of_log_softmax():
    # F.nll_loss(F.log_softmax(x @ w, 1), t) as torch.onnx exports it.
    w = numpy_helper.from_array(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3), "w")
    return model([helper.make_node("MatMul", ["x", "w"], ["z"], name="head"),
                  helper.make_node("LogSoftmax", ["z"], ["lp"], axis=1, name="ls"),
                  helper.make_node("NegativeLogLikelihoodLoss", ["lp", "t"],
                                   ["loss"], name="nll")],
                 [vi("x", F, [2, 4]), vi("t", I64, [2])], [vi("loss", F, [])], [w])


def dropout_training():
    ratio = numpy_helper.from_array(np.array(0.25, np.float32), "ratio")
    mode = numpy_helper.from_array(np.array(True), "mode")
    return model([helper.make_node("Dropout", ["x", "ratio", "mode"], ["y", "mask"],
                                   name="drop")],
                 [vi("x", F, [2, 3])],
                 [vi("y", F, [2, 3]), vi("mask", TensorProto.BOOL, [2, 3])],
                 [ratio, mode])


def batchnorm_training():
    # As PyTorch exports it: running statistics are initializers, updated by
    # the node's extra outputs, which are not graph outputs.
    inits = [numpy_helper.from_array(np.ones(3, np.float32) * v, n)
             for n, v in [("bn.weight", 1), ("bn.bias", 0),
                          ("bn.running_mean", 0), ("bn.running_var", 1)]]
    m = model([helper.make_node("BatchNormalization",
                                ["x", "bn.weight", "bn.bias", "bn.running_mean",
                                 "bn.running_var"], ["y", "rm", "rv"],
                                training_mode=1, momentum=0.9, name="bn")],
              [vi("x", F, [2, 3, 4])], [vi("y", F, [2, 3, 4])], inits, opset=15)
    m.producer_name = "pytorch"
    return m


def dropout_model():
    # y = Dropout(x * w, 0.3, training): trained with --loss mse.
    w = numpy_helper.from_array(np.ones(4000, np.float32), "w")
    ratio = numpy_helper.from_array(np.array(0.3, np.float32), "ratio")
    mode = numpy_helper.from_array(np.array(True), "mode")
    return model([helper.make_node("Mul", ["x", "w"], ["h"], name="scale"),
                  helper.make_node("Dropout", ["h", "ratio", "mode"], ["y"],
                                   name="drop")],
                 [vi("x", F, [4000])], [vi("y", F, [4000])], [w, ratio, mode])


def masked_scores():
    # y = Softmax(x W^T + mask): the mask a float initializer holding -inf
    # (as torch.onnx stores a causal-mask buffer).
    rng = np.random.default_rng(2)
    w = numpy_helper.from_array(rng.standard_normal((3, 4)).astype(np.float32), "fc.weight")
    mask = numpy_helper.from_array(np.array([0, 0, -np.inf], np.float32), "mask")
    return model([helper.make_node("Transpose", ["fc.weight"], ["wt"], perm=[1, 0]),
                  helper.make_node("MatMul", ["x", "wt"], ["h"]),
                  helper.make_node("Add", ["h", "mask"], ["s"]),
                  helper.make_node("Softmax", ["s"], ["y"], axis=-1)],
                 [vi("x", F, [2, 4])], [vi("y", F, [2, 3])], [w, mask])


def splat_reduce():
    # y = x + ReduceSum(ConstantOfShape([30000, 30000], 0)): a 4-byte splat
    # that folding would fill in full (3.6 GB) to reduce; it stays an op.
    shape = numpy_helper.from_array(np.array([30000, 30000], np.int64), "shape")
    zero = helper.make_tensor("v", TensorProto.FLOAT, [1], [0.0])
    return model([helper.make_node("ConstantOfShape", ["shape"], ["z"], value=zero),
                  helper.make_node("ReduceSum", ["z"], ["s"], keepdims=0),
                  helper.make_node("Add", ["x", "s"], ["y"])],
                 [vi("x", F, [4])], [vi("y", F, [4])], [shape])


if __name__ == "__main__":
    case, out = sys.argv[1], sys.argv[2]
    if case == "external_data":
        import os
        os.makedirs(out + ".dir", exist_ok=True)
        onnx.save(globals()[case](), out + ".dir/model.onnx")
    else:
        onnx.save(globals()[case](), out)

"""A small NumPy evaluator for the forward pass of the zoo's ONNX models.

onnx 1.12 has no onnx.reference and onnxruntime is not installed here, so
make_zoo.py uses this to check that the exported graph computes the loss that
PyTorch computed. It covers the operators (and opsets 14-17) that the zoo's
models use, nothing more; an unknown operator raises NotImplementedError.
Floating-point values are computed in float64.
"""
import math

import numpy as np
from onnx import helper, numpy_helper

_erf = np.vectorize(math.erf, otypes=[np.float64])

_ONNX_DTYPE = {1: np.float32, 6: np.int32, 7: np.int64, 9: np.bool_, 11: np.float64}


def _f(x):
    return x.astype(np.float64) if x.dtype in (np.float32, np.float16) else x


def _attrs(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _axes(a, rank):
    return tuple(int(x) % rank for x in np.atleast_1d(a))


def _conv(x, w, b, strides, pads, dilations, group):
    if group != 1 or any(d != 1 for d in dilations):
        raise NotImplementedError("Conv with groups or dilations")
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    x = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = (x.shape[2] - kh) // strides[0] + 1
    ow = (x.shape[3] - kw) // strides[1] + 1
    cols = np.empty((n, c, kh, kw, oh, ow), x.dtype)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = x[:, :, i:i + strides[0] * oh:strides[0],
                                 j:j + strides[1] * ow:strides[1]]
    y = np.einsum("nckloq,mckl->nmoq", cols, w)
    return y if b is None else y + b.reshape(1, -1, 1, 1)


def _maxpool(x, kernel, strides, pads):
    if any(pads):
        raise NotImplementedError("MaxPool with pads")
    n, c, h, w = x.shape
    oh = (h - kernel[0]) // strides[0] + 1
    ow = (w - kernel[1]) // strides[1] + 1
    y = np.full((n, c, oh, ow), -np.inf, x.dtype)
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            y = np.maximum(y, x[:, :, i:i + strides[0] * oh:strides[0],
                                j:j + strides[1] * ow:strides[1]])
    return y


def _run_node(node, ins):
    op = node.op_type
    a = _attrs(node)
    x = ins[0] if ins else None
    if op == "Constant":
        return [_f(numpy_helper.to_array(a["value"]))]
    if op in ("Add", "Sub", "Mul", "Div", "Pow", "Equal"):
        fn = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
              "Pow": np.power, "Equal": np.equal}[op]
        y = fn(ins[0], ins[1])
        if op == "Div" and ins[0].dtype.kind == "i":
            y = np.trunc(y).astype(ins[0].dtype)
        return [y]
    unary = {"Sqrt": np.sqrt, "Neg": np.negative, "Erf": _erf, "Tanh": np.tanh,
             "Sigmoid": lambda v: 1.0 / (1.0 + np.exp(-v)), "Relu": lambda v: np.maximum(v, 0),
             "Not": np.logical_not}
    if op in unary:
        return [unary[op](x)]
    if op == "Where":
        return [np.where(ins[0], ins[1], ins[2])]
    if op == "Cast":
        t = _ONNX_DTYPE[a["to"]]
        return [_f(x.astype(t))]
    if op == "Concat":
        return [np.concatenate(ins, axis=a["axis"])]
    if op == "ConstantOfShape":
        v = _f(numpy_helper.to_array(a["value"])) if "value" in a else np.zeros(1)
        return [np.full(tuple(int(d) for d in x), v.reshape(-1)[0], v.dtype)]
    if op == "Shape":
        return [np.array(x.shape, np.int64)]
    if op == "Slice":
        starts, ends = ins[1], ins[2]
        axes = ins[3] if len(ins) > 3 and ins[3] is not None else np.arange(len(starts))
        steps = ins[4] if len(ins) > 4 and ins[4] is not None else np.ones(len(starts), np.int64)
        sl = [slice(None)] * x.ndim
        for s, e, ax, st in zip(starts, ends, axes, steps):
            dim = x.shape[ax]
            s, e = int(s), int(e)
            s = max(min(s + dim if s < 0 else s, dim), 0)
            e = max(min(e + dim if e < 0 else e, dim), 0) if st > 0 else e
            sl[int(ax) % x.ndim] = slice(s, e, int(st))
        return [x[tuple(sl)]]
    if op == "Gather":
        return [np.take(x, ins[1], axis=a.get("axis", 0))]
    if op == "Split":
        axis = a.get("axis", 0)
        split = ins[1] if len(ins) > 1 and ins[1] is not None else a.get("split")
        if split is None:
            return list(np.split(x, len(node.output), axis=axis))
        return list(np.split(x, np.cumsum(split)[:-1], axis=axis))
    if op == "Squeeze":
        axes = ins[1] if len(ins) > 1 else [i for i, d in enumerate(x.shape) if d == 1]
        return [np.squeeze(x, axis=_axes(axes, x.ndim))]
    if op == "Unsqueeze":
        y = x
        rank = x.ndim + len(np.atleast_1d(ins[1]))
        for ax in sorted(_axes(ins[1], rank)):
            y = np.expand_dims(y, ax)
        return [y]
    if op == "Reshape":
        shape = [x.shape[i] if d == 0 else int(d) for i, d in enumerate(ins[1])]
        return [x.reshape(shape)]
    if op == "Flatten":
        ax = a.get("axis", 1) % max(x.ndim, 1)
        return [x.reshape(int(np.prod(x.shape[:ax])), -1)]
    if op == "Transpose":
        return [np.transpose(x, a.get("perm"))]
    if op == "Expand":
        shape = np.broadcast_shapes(x.shape, tuple(int(d) for d in ins[1]))
        return [np.broadcast_to(x, shape).copy()]
    if op == "MatMul":
        return [np.matmul(ins[0], ins[1])]
    if op == "Gemm":
        aa = ins[0].T if a.get("transA", 0) else ins[0]
        bb = ins[1].T if a.get("transB", 0) else ins[1]
        y = a.get("alpha", 1.0) * (aa @ bb)
        if len(ins) > 2 and ins[2] is not None:
            y = y + a.get("beta", 1.0) * ins[2]
        return [y]
    if op == "Softmax":
        ax = a.get("axis", -1)
        e = np.exp(x - x.max(axis=ax, keepdims=True))
        return [e / e.sum(axis=ax, keepdims=True)]
    if op == "ReduceMean":
        axes = a.get("axes")
        if axes is None and len(ins) > 1:
            axes = ins[1]
        axes = tuple(range(x.ndim)) if axes is None else _axes(axes, x.ndim)
        return [x.mean(axis=axes, keepdims=bool(a.get("keepdims", 1)))]
    if op == "Trilu":
        k = int(ins[1]) if len(ins) > 1 and ins[1] is not None else 0
        return [np.triu(x, k) if a.get("upper", 1) else np.tril(x, k)]
    if op == "LayerNormalization":
        ax = a.get("axis", -1) % x.ndim
        axes = tuple(range(ax, x.ndim))
        mean = x.mean(axis=axes, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
        inv = 1.0 / np.sqrt(var + a.get("epsilon", 1e-5))
        y = (x - mean) * inv * ins[1]
        if len(ins) > 2 and ins[2] is not None:
            y = y + ins[2]
        return [y, mean, inv]
    if op == "SoftmaxCrossEntropyLoss":
        return [softmax_cross_entropy(x, ins[1], a.get("ignore_index"),
                                      a.get("reduction", b"mean"))]
    if op == "Dropout":
        ratio = float(ins[1]) if len(ins) > 1 and ins[1] is not None else 0.5
        training = bool(ins[2]) if len(ins) > 2 and ins[2] is not None else False
        if training and ratio != 0.0:
            raise NotImplementedError("Dropout with a non-zero ratio in training mode")
        return [x, np.ones(x.shape, np.bool_)]
    if op == "Conv":
        k = len(ins[1].shape) - 2
        return [_conv(x, ins[1], ins[2] if len(ins) > 2 else None, a.get("strides", [1] * k),
                      a.get("pads", [0] * 2 * k), a.get("dilations", [1] * k),
                      a.get("group", 1))]
    if op == "MaxPool":
        k = a["kernel_shape"]
        if a.get("ceil_mode", 0):
            raise NotImplementedError("MaxPool with ceil_mode")
        return [_maxpool(x, k, a.get("strides", [1] * len(k)), a.get("pads", [0] * 2 * len(k)))]
    if op == "GlobalAveragePool":
        return [x.mean(axis=tuple(range(2, x.ndim)), keepdims=True)]
    if op == "BatchNormalization":
        scale, bias, rmean, rvar = ins[1:5]
        eps = a.get("epsilon", 1e-5)
        shape = (1, -1) + (1,) * (x.ndim - 2)
        # Opset 14+ says training_mode; before, training is having >1 output.
        if not a.get("training_mode", int(len(node.output) > 1)):
            y = (x - rmean.reshape(shape)) / np.sqrt(rvar.reshape(shape) + eps)
            return [y * scale.reshape(shape) + bias.reshape(shape)]
        axes = (0,) + tuple(range(2, x.ndim))
        mean = x.mean(axis=axes)
        var = x.var(axis=axes)
        y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps)
        m = a.get("momentum", 0.9)
        # Running statistics as the ONNX spec writes them (biased variance);
        # PyTorch's running_var uses the unbiased one.
        return [y * scale.reshape(shape) + bias.reshape(shape),
                rmean * m + mean * (1 - m), rvar * m + var * (1 - m)]
    raise NotImplementedError(f"onnx_eval: operator {op}")


def softmax_cross_entropy(logits, labels, ignore_index=None, reduction=b"mean"):
    """SoftmaxCrossEntropyLoss for logits [N, C] or [N, C, d...] and labels [N, d...]."""
    if logits.ndim > 2:
        c = logits.shape[1]
        logits = np.moveaxis(logits, 1, -1).reshape(-1, c)
    labels = labels.reshape(-1)
    lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    keep = np.ones(labels.shape, bool) if ignore_index is None else labels != ignore_index
    safe = np.where(keep, labels, 0)
    nll = (lse - logits[np.arange(len(labels)), safe]) * keep
    if reduction in (b"mean", "mean"):
        return np.array(nll.sum() / keep.sum())
    if reduction in (b"sum", "sum"):
        return np.array(nll.sum())
    return nll


def run(model, feeds):
    """Evaluates the graph; returns {output name: array}."""
    g = model.graph
    env = {t.name: _f(numpy_helper.to_array(t)) for t in g.initializer}
    for k, v in feeds.items():
        env[k] = _f(np.asarray(v))
    for node in g.node:
        ins = [env[i] if i else None for i in node.input]
        outs = _run_node(node, ins)
        for name, val in zip(node.output, outs):
            if name:
                env[name] = np.asarray(val)
    return {o.name: env[o.name] for o in g.output}

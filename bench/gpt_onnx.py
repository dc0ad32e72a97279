#!/usr/bin/python3
"""Writes a GPT-shaped ONNX training graph without materialising its weights.

Usage: /usr/bin/python3 bench/gpt_onnx.py OUT.onnx [--arch gpt|llama]
           [--layers 48] [--d 2048] [--heads 32] [--kv-heads H] [--mlp 8192]
           [--vocab 50304] [--seq 1024] [--batch 8]

--arch gpt (default) is the zoo's GPT-2-style decoder (pre-LayerNorm
blocks, fused QKV projection with bias, causal softmax attention, erf GELU
MLP, tied LM head). --arch llama is LLaMA's as the transformers library
writes it: RMSNorm (x * 1/sqrt(mean(x^2) + eps) * w), separate q/k/v
projections without bias and --kv-heads K/V heads repeated to the query
heads by repeat_kv (unsqueeze, expand, reshape), rotate-half rotary
embeddings from cos/sin tables (buffers `rotary.cos` / `rotary.sin`: pass
`--freeze rotary` when compiling), SwiGLU MLP (down(silu(gate(x)) *
up(x))), untied LM head. Both end in SoftmaxCrossEntropyLoss and are built
node by node with onnx.helper, the way torch.onnx.export writes them
(Linear = Transpose of the [out, in] weight, MatMul, Add). Every float
initializer is declared as external data in
OUT.weights (offsets and lengths, ONNX's external-data convention), and that
file is created sparse: it reads as zeros and takes no disk space, so a
2.5B-parameter model costs a few kilobytes. Compile it with
`cleave compile OUT.onnx --plan-only` to measure the compiler alone.
"""
import argparse
import math
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Graph:
    def __init__(self, weights_file):
        self.nodes, self.inits = [], []
        self.weights_file = weights_file
        self.offset = 0
        self.count = 0
        self.params = 0

    def name(self, hint):
        self.count += 1
        return f"{hint}_{self.count}"

    def op(self, kind, inputs, hint=None, **attrs):
        out = self.name(hint or kind.lower())
        self.nodes.append(helper.make_node(kind, inputs, [out], **attrs))
        return out

    def weight(self, name, shape):
        """A float parameter stored as external data (never written)."""
        t = TensorProto()
        t.name = name
        t.data_type = TensorProto.FLOAT
        t.dims.extend(shape)
        length = 4 * int(np.prod(shape))
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", os.path.basename(self.weights_file)),
                     ("offset", str(self.offset)), ("length", str(length))):
            e = t.external_data.add()
            e.key, e.value = k, v
        self.offset += length
        self.params += int(np.prod(shape))
        self.inits.append(t)
        return name

    def const(self, array, hint):
        """A literal: a Constant node, as torch.onnx writes them (a float
        initializer is a weight, and trains unless frozen)."""
        name = self.name(hint)
        self.nodes.append(helper.make_node(
            "Constant", [], [name],
            value=numpy_helper.from_array(np.asarray(array), name)))
        return name

    def linear(self, x, name, n_in, n_out, bias=True):
        w = self.weight(f"{name}.weight", [n_out, n_in])
        y = self.op("MatMul", [x, self.op("Transpose", [w], perm=[1, 0])])
        if bias:
            y = self.op("Add", [y, self.weight(f"{name}.bias", [n_out])])
        return y

    def layer_norm(self, x, name, d):
        return self.op("LayerNormalization",
                       [x, self.weight(f"{name}.weight", [d]),
                        self.weight(f"{name}.bias", [d])], axis=-1, epsilon=1e-5)

    def rms_norm(self, x, name, d, eps):
        var = self.op("ReduceMean", [self.op("Pow", [x, eps["two"]])], axes=[-1],
                      keepdims=1)
        x = self.op("Div", [x, self.op("Sqrt", [self.op("Add", [var, eps["eps"]])])])
        return self.op("Mul", [x, self.weight(f"{name}.weight", [d])])


def build(args):
    weights = os.path.splitext(args.out)[0] + ".weights"
    g = Graph(weights)
    if args.arch == "llama":
        return finish(g, args, llama_logits(g, args))
    b, t, d, h = args.batch, args.seq, args.d, args.heads
    hd = d // h
    shape4 = g.const(np.array([b, t, h, hd], np.int64), "shape4")
    shape3 = g.const(np.array([b, t, d], np.int64), "shape3")
    split3 = g.const(np.array([d, d, d], np.int64), "split")
    scale = g.const(np.array(math.sqrt(hd), np.float32), "scale")
    ninf = g.const(np.array(-np.inf, np.float32), "ninf")
    half = g.const(np.array(0.5, np.float32), "half")
    one = g.const(np.array(1.0, np.float32), "one")
    sqrt2 = g.const(np.array(math.sqrt(2.0), np.float32), "sqrt2")
    causal = g.op("Trilu", [g.const(np.ones((t, t), np.bool_), "ones")], upper=0)
    positions = g.const(np.arange(t, dtype=np.int64).reshape(1, t), "positions")

    x = g.op("Add", [g.op("Gather", [g.weight("wte.weight", [args.vocab, d]),
                                     "input_ids"]),
                     g.op("Gather", [g.weight("wpe.weight", [t, d]), positions])])
    for i in range(args.layers):
        p = f"h.{i}"
        a = g.layer_norm(x, f"{p}.ln_1", d)
        qkv = g.linear(a, f"{p}.c_attn", d, 3 * d)
        q, k, v = (g.name("q"), g.name("k"), g.name("v"))
        g.nodes.append(helper.make_node("Split", [qkv, split3], [q, k, v], axis=2))
        q = g.op("Transpose", [g.op("Reshape", [q, shape4])], perm=[0, 2, 1, 3])
        k = g.op("Transpose", [g.op("Reshape", [k, shape4])], perm=[0, 2, 3, 1])
        v = g.op("Transpose", [g.op("Reshape", [v, shape4])], perm=[0, 2, 1, 3])
        w = g.op("Div", [g.op("MatMul", [q, k]), scale])
        w = g.op("Softmax", [g.op("Where", [causal, w, ninf])], axis=-1)
        y = g.op("Transpose", [g.op("MatMul", [w, v])], perm=[0, 2, 1, 3])
        y = g.op("Reshape", [y, shape3])
        x = g.op("Add", [x, g.linear(y, f"{p}.c_proj", d, d)])
        m = g.linear(g.layer_norm(x, f"{p}.ln_2", d), f"{p}.c_fc", d, args.mlp)
        m = g.op("Mul", [g.op("Mul", [m, half]),
                         g.op("Add", [g.op("Erf", [g.op("Div", [m, sqrt2])]), one])])
        x = g.op("Add", [x, g.linear(m, f"{p}.mlp_proj", args.mlp, d)])
    x = g.layer_norm(x, "ln_f", d)
    logits = g.op("MatMul", [x, g.op("Transpose", ["wte.weight"], perm=[1, 0])])
    return finish(g, args, logits)


def llama_logits(g, args):
    """LLaMA's decoder, as the transformers library writes it."""
    b, t, d, h = args.batch, args.seq, args.d, args.heads
    kv = args.kv_heads or h
    hd, rep = d // h, h // kv
    consts = {"two": g.const(np.array(2.0, np.float32), "two"),
              "eps": g.const(np.array(1e-5, np.float32), "eps")}
    shape = lambda *dims: g.const(np.array(dims, np.int64), "shape")  # noqa: E731
    scale = g.const(np.array(math.sqrt(hd), np.float32), "scale")
    ninf = g.const(np.array(-np.inf, np.float32), "ninf")
    causal = g.op("Trilu", [g.const(np.ones((t, t), np.bool_), "ones")], upper=0)
    cos = g.weight("rotary.cos", [1, 1, t, hd])  # buffers, not parameters
    sin = g.weight("rotary.sin", [1, 1, t, hd])
    g.params -= 2 * t * hd
    starts = [g.const(np.array([v], np.int64), "start") for v in (0, hd // 2)]
    ends = [g.const(np.array([v], np.int64), "end") for v in (hd // 2, hd)]
    last = g.const(np.array([-1], np.int64), "axis")

    def rotary(x):
        x1 = g.op("Slice", [x, starts[0], ends[0], last])
        x2 = g.op("Slice", [x, starts[1], ends[1], last])
        rotated = g.op("Concat", [g.op("Neg", [x2]), x1], axis=-1)
        return g.op("Add", [g.op("Mul", [x, cos]), g.op("Mul", [rotated, sin])])

    def heads(x, n):
        return g.op("Transpose", [g.op("Reshape", [x, shape(b, t, n, hd)])],
                    perm=[0, 2, 1, 3])

    def repeat_kv(x):
        if rep == 1:
            return x
        x = g.op("Unsqueeze", [x, g.const(np.array([2], np.int64), "axis")])
        x = g.op("Expand", [x, shape(b, kv, rep, t, hd)])
        return g.op("Reshape", [x, shape(b, h, t, hd)])

    x = g.op("Gather", [g.weight("embed_tokens.weight", [args.vocab, d]), "input_ids"])
    for i in range(args.layers):
        p = f"layers.{i}"
        a = g.rms_norm(x, f"{p}.input_layernorm", d, consts)
        q = rotary(heads(g.linear(a, f"{p}.self_attn.q_proj", d, h * hd, False), h))
        k = rotary(heads(g.linear(a, f"{p}.self_attn.k_proj", d, kv * hd, False), kv))
        v = heads(g.linear(a, f"{p}.self_attn.v_proj", d, kv * hd, False), kv)
        k, v = repeat_kv(k), repeat_kv(v)
        w = g.op("Div", [g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])]),
                         scale])
        w = g.op("Softmax", [g.op("Where", [causal, w, ninf])], axis=-1)
        y = g.op("Transpose", [g.op("MatMul", [w, v])], perm=[0, 2, 1, 3])
        y = g.op("Reshape", [y, shape(b, t, h * hd)])
        x = g.op("Add", [x, g.linear(y, f"{p}.self_attn.o_proj", h * hd, d, False)])
        a = g.rms_norm(x, f"{p}.post_attention_layernorm", d, consts)
        gate = g.linear(a, f"{p}.mlp.gate_proj", d, args.mlp, False)
        up = g.linear(a, f"{p}.mlp.up_proj", d, args.mlp, False)
        act = g.op("Mul", [g.op("Mul", [gate, g.op("Sigmoid", [gate])]), up])
        x = g.op("Add", [x, g.linear(act, f"{p}.mlp.down_proj", args.mlp, d, False)])
    x = g.rms_norm(x, "norm", d, consts)
    return g.linear(x, "lm_head", d, args.vocab, False)


def finish(g, args, logits):
    """The loss over the logits, and the files."""
    b, t = args.batch, args.seq
    flat = g.op("Reshape", [logits, g.const(np.array([b * t, args.vocab], np.int64),
                                            "shape2")])
    labels = g.op("Reshape", ["labels", g.const(np.array([b * t], np.int64), "shape1")])
    g.nodes.append(helper.make_node("SoftmaxCrossEntropyLoss", [flat, labels], ["loss"],
                                    reduction="mean"))
    graph = helper.make_graph(
        g.nodes, args.arch,
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [b, t]),
         helper.make_tensor_value_info("labels", TensorProto.INT64, [b, t])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        initializer=g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, args.out)
    with open(g.weights_file, "wb") as f:  # sparse: holes read as zeros
        f.truncate(g.offset)
    return g.params


def add_shape_arguments(ap):
    """The model's shape options (issue 4's 2.5B target by default)."""
    ap.add_argument("--arch", choices=["gpt", "llama"], default="gpt")
    ap.add_argument("--d", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=0,
                    help="llama: K/V heads (default: --heads)")
    ap.add_argument("--mlp", type=int, default=8192)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=48)
    add_shape_arguments(ap)
    args = ap.parse_args()
    params = build(args)
    print(f"{args.out}: {args.layers} layers, {params} parameters")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Writes the repo's GPT-style example: a byte-level language model (vocab 256,
so any text trains it) in the zoo's GPT-2 style (pre-LayerNorm blocks, fused
QKV, tied LM head, cross-entropy loss), exported to ONNX for training.

Usage: /usr/bin/python3 examples/make_gpt.py OUT.onnx [--layers 2] [--d 64]
           [--heads 4] [--seq 64] [--batch 8] [--seed 0]

Its inputs are input_ids and labels, both [batch, seq] int64: what
`cleave run --text FILE` feeds.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "zoo"))
from make_zoo import GPT2  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    model = GPT2(vocab=256, ctx=args.seq, d=args.d, heads=args.heads, layers=args.layers)
    ids = torch.zeros(args.batch, args.seq, dtype=torch.long)
    torch.onnx.export(model, (ids, ids), args.out, input_names=["input_ids", "labels"],
                      output_names=["loss"], opset_version=17, do_constant_folding=False,
                      training=torch.onnx.TrainingMode.TRAINING)
    params = sum(p.numel() for p in model.parameters())
    print(f"{args.out}: byte-level GPT, {args.layers} layers, d {args.d}, "
          f"{args.heads} heads, sequence {args.seq}, batch {args.batch}, {params} parameters")


if __name__ == "__main__":
    main()

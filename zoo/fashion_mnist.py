#!/usr/bin/python3
"""Writes batches of real Fashion-MNIST training images for `cleave run`.

Usage:
  /usr/bin/python3 zoo/fashion_mnist.py --out DIR --steps K --batch B [--seed S]
      [--model FILE.onnx]

Writes DIR/step-0/x.npy (float32 [B, 784], pixels scaled to [0, 1]) and
DIR/step-0/labels.npy (int64 [B]), ..., DIR/step-{K-1}/. The batches walk a
seeded random permutation of the 60000 training images; when it runs out, a
fresh permutation (same generator) starts the next epoch.

With --model it also exports the zoo's MLP (784-256-128-10, untrained,
torch.manual_seed(S)) for batch B as ONNX (opset 17) to FILE.onnx.

The reader is also used by make_zoo.py (`load_images`, `load_labels`, `batches`).
"""
import argparse
import gzip
import os
import struct

import numpy as np

DATA_DIR = "/usr/share/datasets/fashion-mnist"


def _read_idx(path, magic, ndim):
    with gzip.open(path, "rb") as f:
        data = f.read()
    got_magic, = struct.unpack(">I", data[:4])
    if got_magic != magic:
        raise ValueError(f"{path}: bad idx magic {got_magic:#x}, want {magic:#x}")
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(dims)):
        raise ValueError(f"{path}: {body.size} bytes of data for dims {dims}")
    return body.reshape(dims)


def load_images(split="train", data_dir=DATA_DIR):
    """uint8 [N, 28, 28]"""
    return _read_idx(os.path.join(data_dir, f"{split}-images-idx3-ubyte.gz"), 2051, 3)


def load_labels(split="train", data_dir=DATA_DIR):
    """uint8 [N]"""
    return _read_idx(os.path.join(data_dir, f"{split}-labels-idx1-ubyte.gz"), 2049, 1)


def batches(images, labels, steps, batch, seed):
    """Yields (x float32 [batch, 784] in [0, 1], labels int64 [batch]) per step."""
    n = images.shape[0]
    if batch > n:
        raise ValueError(f"batch {batch} exceeds the {n} images")
    rng = np.random.default_rng(seed)
    order = rng.permutation(n)
    pos = 0
    for _ in range(steps):
        if pos + batch > n:
            order = rng.permutation(n)
            pos = 0
        idx = order[pos:pos + batch]
        pos += batch
        x = images[idx].reshape(batch, -1).astype(np.float32) / np.float32(255.0)
        yield np.ascontiguousarray(x), labels[idx].astype(np.int64)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", default=DATA_DIR)
    ap.add_argument("--model", help="also export the MLP for this batch here")
    args = ap.parse_args()
    if args.steps < 1 or args.batch < 1:
        ap.error("--steps and --batch must be positive")
    images = load_images("train", args.data_dir)
    labels = load_labels("train", args.data_dir)
    if images.shape[0] != labels.shape[0]:
        raise SystemExit(f"{images.shape[0]} images but {labels.shape[0]} labels")
    for k, (x, y) in enumerate(batches(images, labels, args.steps, args.batch, args.seed)):
        d = os.path.join(args.out, f"step-{k}")
        os.makedirs(d, exist_ok=True)
        np.save(os.path.join(d, "x.npy"), x)
        np.save(os.path.join(d, "labels.npy"), y)
    print(f"wrote {args.steps} batches of {args.batch} to {args.out}")
    if args.model:
        export_mlp(args.model, args.batch, args.seed)


def export_mlp(path, batch, seed):
    import sys
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from make_zoo import MLP
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    model = MLP()
    torch.onnx.export(model, (torch.zeros(batch, 784),), path,
                      input_names=["x"], output_names=["logits"],
                      opset_version=17, do_constant_folding=False)
    print(f"wrote the MLP for batch {batch} to {path}")


if __name__ == "__main__":
    main()

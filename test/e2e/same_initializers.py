#!/usr/bin/python3
"""Compares the initializers of two ONNX models by name.

Usage: same_initializers.py WANT.onnx GOT.onnx

Prints, for every initializer of WANT, its name, shape and whether GOT holds
the same values (bit for bit; missing or of another shape differs), then
the number that differ. Exits 1 if any does.
"""
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def initializers(path):
    model = onnx.load(path)
    return {t.name: numpy_helper.to_array(t, base_dir=path.rsplit("/", 1)[0])
            for t in model.graph.initializer}


def main():
    want, got = initializers(sys.argv[1]), initializers(sys.argv[2])
    differ = 0
    for name, a in want.items():
        b = got.get(name)
        same = b is not None and a.shape == b.shape and a.dtype == b.dtype and \
            np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
        differ += not same
        print(f"{name} {list(a.shape)} {'equal' if same else 'differ'}")
    print(f"{differ} differ")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()

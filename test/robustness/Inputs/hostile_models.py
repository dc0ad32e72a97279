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


if __name__ == "__main__":
    main()

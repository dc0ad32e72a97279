"""Writes a model's initializers as safetensors files in other dtypes, and
checks what the bundles compiled from them hold (weights-dtypes.test).

Usage: write_weights.py MODEL.onnx DIR    writes DIR/{bf16,f16,f64,i8,big}.safetensors
       write_weights.py --check DIR       compares DIR/*-out.safetensors
"""
import json
import struct
import sys

import numpy as np
import onnx
import torch
from onnx import numpy_helper


def write(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        assert h["dtype"] == "F32", h
        b, e = h["data_offsets"]
        out[name] = np.frombuffer(data[b:e], np.float32).reshape(h["shape"])
    return out


def main():
    if sys.argv[1] == "--check":
        d = sys.argv[2]
        want = {k: v for k, v in np.load(d + "/values.npz").items()}
        for kind in ("bf16", "f16"):
            got = read(f"{d}/{kind}-out.safetensors")
            exact = all((got[k] == want[kind + ":" + k]).all() for k in got)
            print(kind, "exact" if exact and got else "differs")
        got = read(f"{d}/f64-out.safetensors")
        ok = all((got[k] == want["f64:" + k].astype(np.float32)).all()
                 for k in got)
        print("f64", "rounded" if ok and got else "differs")
        return
    model, d = onnx.load(sys.argv[1]), sys.argv[2]
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    values = {}
    files = {"bf16": {}, "f16": {}, "f64": {}, "i8": {}, "big": {}}
    for name, a in inits.items():
        t = torch.from_numpy(a.copy())
        bf = t.to(torch.bfloat16)
        files["bf16"][name] = ("BF16", a.shape, bf.view(torch.int16).numpy().tobytes())
        values["bf16:" + name] = bf.float().numpy()
        h = a.astype(np.float16)
        files["f16"][name] = ("F16", a.shape, h.tobytes())
        values["f16:" + name] = h.astype(np.float32)
        g = a.astype(np.float64) / 3
        files["f64"][name] = ("F64", a.shape, g.tobytes())
        values["f64:" + name] = g
        files["i8"][name] = ("I8", a.shape, np.ones(a.shape, np.int8).tobytes())
        files["big"][name] = ("F64", a.shape, np.full(a.shape, 1e300).tobytes())
    for kind, tensors in files.items():
        write(f"{d}/{kind}.safetensors", tensors)
    np.savez(f"{d}/values.npz", **values)


if __name__ == "__main__":
    main()

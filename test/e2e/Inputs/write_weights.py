"""Writes a model's initializers as safetensors files in other dtypes, and
checks what the bundles compiled from them hold (weights-dtypes.test).

Usage: write_weights.py MODEL.onnx DIR    writes DIR/{bf16,f16,f64,i8,big}.safetensors
                                          and DIR/sharded/: the bf16 tensors in two
                                          shards with Hugging Face's index (and bad
                                          indexes beside it)
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
        for kind in ("bf16", "f16", "sharded"):
            got = read(f"{d}/{kind}-out.safetensors")
            key = "bf16" if kind == "sharded" else kind
            exact = all((got[k] == want[key + ":" + k]).all() for k in got)
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
    # Hugging Face's sharded form: tensors spread over shard files, an
    # index naming each one's shard.
    import os
    os.makedirs(f"{d}/sharded", exist_ok=True)
    names = sorted(files["bf16"])
    shards = {n: f"model-{1 + i % 2:05d}-of-00002.safetensors"
              for i, n in enumerate(names)}
    for shard in sorted(set(shards.values())):
        write(f"{d}/sharded/{shard}",
              {n: files["bf16"][n] for n in names if shards[n] == shard})
    for name, weight_map in (
            ("model", shards),
            ("escape", dict(shards, **{names[0]: "../bf16.safetensors"})),
            ("wrong", {n: "model-00001-of-00002.safetensors" for n in names})):
        with open(f"{d}/sharded/{name}.safetensors.index.json", "w") as f:
            json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)
    np.savez(f"{d}/values.npz", **values)


if __name__ == "__main__":
    main()

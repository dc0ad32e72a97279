#!/usr/bin/python3
"""--random-weights keeps parameters zero in their padding (the program
relies on it): a tp run from random weights, with SGD at lr 1e-30 so the
weights do not move, must give the loss that a tp=1 run computes from the
same weights (dumped trimmed, read back with --weights).

Usage: random_weights_padding.py CLEAVE MODEL_DIR WORK TP
"""
import json
import os
import struct
import subprocess
import sys

import numpy as np


def run(*args):
    subprocess.run(list(args), check=True, stdout=subprocess.DEVNULL)


def write_safetensors(path, tensors):
    header, blobs, at = {}, [], 0
    for name, a in tensors.items():
        raw = np.ascontiguousarray(a, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def main():
    cleave, model, work, tp = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    man = json.load(open(os.path.join(model, "manifest.json")))
    onnx = os.path.join(model, "model.onnx")
    inputs = os.path.join(model, "inputs")
    flags = ["--optimizer", "sgd", "--lr", "1e-30", "--momentum", "0",
             "--weight-decay", "0"]
    for f in man.get("freeze", []):
        flags += ["--freeze", f]
    split = os.path.join(work, f"tp{tp}")
    run(cleave, "compile", onnx, "-o", split, "--tp", tp, "--plan-only", *flags)
    run(cleave, "run", split, "--steps", "1", "--inputs", inputs,
        "--random-weights", "--dump", split + "-dump")
    loss = np.load(os.path.join(split + "-dump", "loss.npy"))[0]
    weights = {n: np.load(os.path.join(split + "-dump", n + ".npy"))
               for n in man["parameters"]}
    st = os.path.join(work, "weights.safetensors")
    write_safetensors(st, weights)
    whole = os.path.join(work, "tp1")
    run(cleave, "compile", onnx, "-o", whole, "--weights", st, *flags)
    run(cleave, "run", whole, "--steps", "1", "--inputs", inputs,
        "--dump", whole + "-dump")
    ref = np.load(os.path.join(whole + "-dump", "loss.npy"))[0]
    err = abs(loss - ref) / abs(ref)
    print(f"{'PASS' if err <= 1e-6 else 'FAIL'} random weights at tp {tp}: "
          f"loss {loss:.7f}, tp 1 from the same weights {ref:.7f}")
    sys.exit(0 if err <= 1e-6 else 1)


if __name__ == "__main__":
    main()

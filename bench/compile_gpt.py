#!/usr/bin/python3
"""Measures `cleave compile --tp N` time on GPT-shaped models of growing depth.

Usage: /usr/bin/python3 bench/compile_gpt.py --cleave build/bin/cleave
           [--layers 2,4,8] [--d 128] [--heads 8] [--vocab 512] [--seq 64]
           [--tp 8] [--work /tmp/cleave-bench]

Each model is the zoo's GPT-2-style decoder (zoo/make_zoo.py), exported to
ONNX with torch; the timing covers import, autodiff, the sharding search,
partitioning, buffer planning and writing the bundle. Prints one line per
depth: layers, parameters, wall seconds, peak RSS (from /usr/bin/time).
"""
import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cleave", required=True)
    ap.add_argument("--layers", default="2,4,8")
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--work", default="/tmp/cleave-bench")
    args = ap.parse_args()
    sys.path.insert(0, os.path.join(HERE, "..", "zoo"))
    import torch
    from make_zoo import GPT2
    torch.set_num_threads(1)
    os.makedirs(args.work, exist_ok=True)
    for layers in [int(x) for x in args.layers.split(",")]:
        torch.manual_seed(0)
        model = GPT2(vocab=args.vocab, ctx=args.seq, d=args.d, heads=args.heads,
                     layers=layers)
        path = os.path.join(args.work, f"gpt{layers}.onnx")
        ids = torch.zeros(2, args.seq, dtype=torch.long)
        torch.onnx.export(model, (ids, ids), path, input_names=["input_ids", "labels"],
                          output_names=["loss"], opset_version=17,
                          do_constant_folding=False,
                          training=torch.onnx.TrainingMode.TRAINING)
        params = sum(p.numel() for p in model.parameters())
        r = subprocess.run(["/usr/bin/time", "-f", "%e %M", args.cleave, "compile",
                            path, "-o", os.path.join(args.work, f"gpt{layers}.bundle"),
                            "--optimizer", "adamw", "--tp", str(args.tp)],
                           capture_output=True, text=True)
        if r.returncode:
            print(r.stderr)
            sys.exit(1)
        seconds, rss = r.stderr.strip().split("\n")[-1].split()
        print(f"layers {layers:3d}  parameters {params:10d}  tp {args.tp}  "
              f"compile {float(seconds):7.2f} s  peak RSS {int(rss) // 1024} MiB",
              flush=True)


if __name__ == "__main__":
    main()

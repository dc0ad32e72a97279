#!/usr/bin/python3
"""Measures `cleave compile --tp N` time on GPT-shaped models of growing depth.

Usage: /usr/bin/python3 bench/compile_gpt.py --cleave build/bin/cleave
           [--arch gpt|llama] [--layers 12,24,48] [--d 2048] [--heads 32]
           [--kv-heads H] [--mlp 8192] [--vocab 50304] [--seq 1024]
           [--batch 8] [--tp 8] [--work /tmp/cleave-bench]

The defaults are issue 4's target: a 48-layer GPT (d 2048, 32 heads, MLP 8192,
vocab 50304, sequence 1024; 2.5B parameters) at tp = 8. Each model is written
by bench/gpt_onnx.py without materialising its weights and compiled with
`cleave compile MODEL --optimizer adamw --tp N --plan-only`, so the time is
the compiler's alone: import, loss, autodiff, AdamW, the sharding search,
partitioning, buffer planning and writing the plan (no weights are read or
written). Prints one line per depth: layers, parameters, wall seconds, peak
RSS (from /usr/bin/time), and the step's collectives from `cleave inspect
--json` (all-reduces per layer in forward and backward; Megatron's optimum
is 2 and 2). --arch llama writes LLaMA's decoder (GQA, rotary, SwiGLU,
RMSNorm; see gpt_onnx.py) and compiles it with `--freeze rotary`.
LLaMA-3-8B at tp = 8 (--precision bf16 for the mixed-precision plan):

    bench/compile_gpt.py --cleave build/bin/cleave --arch llama --layers 32 \
        --d 4096 --heads 32 --kv-heads 8 --mlp 14336 --vocab 128256 \
        --seq 2048 --batch 1
"""
import argparse
import collections
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpt_onnx  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cleave", required=True)
    ap.add_argument("--layers", default="12,24,48")
    gpt_onnx.add_shape_arguments(ap)
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--work", default="/tmp/cleave-bench")
    ap.add_argument("--precision", default="f32",
                    help="f32 or bf16 (cleave compile --precision); the "
                    "per-rank memory from inspect is printed too")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    for layers in [int(x) for x in args.layers.split(",")]:
        gen = argparse.Namespace(**vars(args))
        gen.layers = layers
        gen.out = os.path.join(args.work, f"gpt{layers}.onnx")
        params = gpt_onnx.build(gen)
        bundle = os.path.join(args.work, f"gpt{layers}.bundle")
        r = subprocess.run(["/usr/bin/time", "-f", "%e %M", args.cleave, "compile",
                            gen.out, "-o", bundle, "--optimizer", "adamw",
                            "--tp", str(args.tp), "--plan-only",
                            "--precision", args.precision]
                           + (["--freeze", "rotary"] if args.arch == "llama" else []),
                           capture_output=True, text=True)
        if r.returncode:
            print(r.stderr)
            sys.exit(1)
        seconds, rss = r.stderr.strip().split("\n")[-1].split()
        info = json.loads(subprocess.run([args.cleave, "inspect", bundle, "--json"],
                                         capture_output=True, text=True,
                                         check=True).stdout)
        counts = collections.Counter((c["phase"], c["kind"]) for c in info["collectives"])
        summary = ", ".join(f"{p} {k} {n}" for (p, k), n in sorted(counts.items()))
        print(f"layers {layers:3d}  parameters {params:11d}  tp {args.tp}  "
              f"compile {float(seconds):6.2f} s  peak RSS {int(rss) // 1024} MiB  "
              f"[{summary}]", flush=True)
        mem = info["memory_per_rank"]
        print(f"  {args.precision} per rank: " + ", ".join(
            f"{k} {v / 1e9:.2f} GB" for k, v in mem.items()), flush=True)


if __name__ == "__main__":
    main()

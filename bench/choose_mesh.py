#!/usr/bin/python3
"""Measures `cleave compile --devices N`: the mesh it chooses and why.

Usage: /usr/bin/python3 bench/choose_mesh.py --cleave build/bin/cleave
           [--devices 64] [--memory-per-device 80GB|none] [--node-size 8]
           [--link intra=450,inter=50] [--arch llama] [--layers 32]
           [--d 4096] [--heads 32] [--kv-heads 8] [--mlp 14336]
           [--vocab 128256] [--seq 2048] [--batch 64] [--work DIR]
           [--precision f32|bf16] [--recompute auto|none|selective|full]

The defaults are issue 18's benchmark: LLaMA-3-8B's shapes (bench/gpt_onnx.py
--arch llama; weight-free) on 64 devices, 8 nodes of 8, 80 GB each, a global
batch of 64 sequences of 2048 tokens, AdamW in float32. The model is
compiled with `--devices N --plan-only` (every candidate mesh compiled in
full and costed from its plan; no weights are read or written). Prints the
compile's wall time and peak RSS, then `cleave inspect`'s table of the
candidates, and for the chosen mesh: per-rank memory by kind and one
step's collectives by mesh axis (count and bytes).
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
    ap.add_argument("--devices", type=int, default=64)
    ap.add_argument("--memory-per-device", default="80GB")
    ap.add_argument("--node-size", type=int, default=8)
    ap.add_argument("--link", default="intra=450,inter=50")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--work", default="/tmp/cleave-bench-mesh")
    ap.add_argument("--precision", default="f32", help="f32, bf16 or fp16")
    ap.add_argument("--recompute", default="auto",
                    help="none, selective, full or auto (the least that fits)")
    gpt_onnx.add_shape_arguments(ap)
    ap.set_defaults(arch="llama", d=4096, heads=32, kv_heads=8, mlp=14336,
                    vocab=128256, seq=2048, batch=64)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    args.out = os.path.join(args.work, f"{args.arch}{args.layers}.onnx")
    params = gpt_onnx.build(args)
    bundle = os.path.join(args.work, "bundle")
    cmd = [args.cleave, "compile", args.out, "-o", bundle, "--optimizer", "adamw",
           "--devices", str(args.devices), "--node-size", str(args.node_size),
           "--link", args.link, "--plan-only", "--precision", args.precision,
           "--recompute", args.recompute]
    if args.memory_per_device != "none":
        cmd += ["--memory-per-device", args.memory_per_device]
    if args.arch == "llama":
        cmd += ["--freeze", "rotary"]
    r = subprocess.run(["/usr/bin/time", "-f", "%e %M"] + cmd, capture_output=True,
                       text=True)
    if r.returncode:
        print(r.stderr)
        sys.exit(1)
    seconds, rss = r.stderr.strip().split("\n")[-1].split()
    print(f"{args.arch} {args.layers} layers, {params:,} parameters, batch {args.batch} x "
          f"{args.seq}: --devices {args.devices} compiled in {float(seconds):.2f} s, "
          f"peak RSS {int(rss) // 1024} MiB")
    text = subprocess.run([args.cleave, "inspect", bundle], capture_output=True, text=True,
                          check=True).stdout
    print(text[text.index("mesh chosen"):].rstrip())
    info = json.loads(subprocess.run([args.cleave, "inspect", bundle, "--json"],
                                     capture_output=True, text=True, check=True).stdout)
    print("chosen mesh:", info["mesh"], "recompute:", info["recompute"]["policy"],
          f"({info['recompute']['ops']} ops made again, "
          f"{info['recompute']['flops'] / max(info['recompute']['step_flops'], 1):.0%}"
          " of the product FLOPs)")
    memory = info["memory_per_rank"]
    print("memory per rank:", {k: f"{v / 1e9:.2f} GB" for k, v in memory.items()
                               if isinstance(v, (int, float))})
    # Activations a layer: the whole peak (the LM head's logits and their
    # gradient included) over the layers, against Megatron's sbh * 34 / t
    # (arXiv 2205.05198: tensor and sequence parallelism, the attention's
    # scores not stored; 16-bit activations) for this rank's sequences.
    mesh = info["mesh"]
    sequences = args.batch // mesh.get("dp", 1)
    megatron = args.seq * sequences * args.d * 34 / mesh.get("tp", 1)
    per_layer = memory["activations_peak"] / args.layers
    print(f"activations a layer: {per_layer / 1e9:.3f} GB (peak / {args.layers} layers; "
          f"Megatron's sbh*34/t for {sequences} sequences at tp {mesh.get('tp', 1)}: "
          f"{megatron / 1e9:.3f} GB)")
    by = collections.defaultdict(lambda: [0, 0])
    for c in info["collectives"]:
        key = (",".join(c["axes"]), c["phase"], c["kind"])
        by[key][0] += 1
        by[key][1] += c["bytes"]
    for (axes, phase, kind), (n, b) in sorted(by.items()):
        print(f"  {axes:6s} {phase:9s} {kind:14s} {n:4d}  {b / 1e9:8.3f} GB")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Recomputation's and sequence parallelism's memory, predicted and
measured (issue 38).

Usage: /usr/bin/python3 bench/recompute_memory.py --cleave build/bin/cleave
           [--work /tmp/cleave-recompute] [--layers 4] [--d 512]
           [--heads 8] [--mlp 2048] [--vocab 2048] [--seq 1024]
           [--batch 4] [--tp 1,2] [--steps 3] [--json OUT]

The model: bench/gpt_onnx.py's GPT (pre-LayerNorm blocks, fused QKV, erf
GELU, tied head) at these shapes, AdamW. For each tp and each policy
(none, selective, full), and at tp > 1 each with and without sequence
parallelism, it compiles `cleave compile --recompute P
--sequence-parallel on|off` and runs `cleave run --random-weights --steps N` (ranks as threads: one
process), measuring the process's peak RSS (wait4's ru_maxrss). What
inspect predicts a policy saves is the drop of the planned arena (the
activations' peak: every value the step computes lives there) times the
ranks; what it measures is the drop of the peak RSS against the plain
plan's in the same run. Step time: the median of the steps after the
first (`--metrics`), on every core. Prints one line per run and a table for
docs/benchmarks.md.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from cpu_step import run_measured  # noqa: E402

POLICIES = ("none", "selective", "full")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cleave", default=os.path.join(HERE, "..", "build", "bin", "cleave"))
    ap.add_argument("--work", default="/tmp/cleave-recompute")
    for name, default in (("layers", 4), ("d", 512), ("heads", 8), ("mlp", 2048),
                          ("vocab", 2048), ("seq", 1024), ("batch", 4), ("steps", 3)):
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--tp", default="1,2")
    ap.add_argument("--json")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    model = os.path.join(args.work, "gpt.onnx")
    subprocess.run([sys.executable, os.path.join(HERE, "gpt_onnx.py"), model,
                    "--layers", str(args.layers), "--d", str(args.d),
                    "--heads", str(args.heads), "--mlp", str(args.mlp),
                    "--vocab", str(args.vocab), "--seq", str(args.seq),
                    "--batch", str(args.batch)], check=True,
                   stdout=subprocess.DEVNULL)
    import numpy as np
    data = os.path.join(args.work, "data")
    os.makedirs(data, exist_ok=True)
    rng = np.random.default_rng(0)
    for name in ("input_ids", "labels"):
        np.save(os.path.join(data, name + ".npy"),
                rng.integers(0, args.vocab, (args.batch, args.seq), dtype=np.int64))
    rows = []
    for tp in [int(t) for t in args.tp.split(",")]:
        base = None
        for sp in ((False, True) if tp > 1 else (False,)):
            for policy in POLICIES:
                rows.append(measure(args, model, data, tp, policy, sp, base))
                base = base or rows[-1]
    print("\n| tp | recompute | sequence parallel | arena (MiB) | peak RSS (MiB) "
          "| drop predicted (MiB) | drop measured (MiB) | FLOPs made again | step (s) |")
    print("| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['tp']} | {r['policy']} | {'yes' if r['sequence_parallel'] else 'no'} | "
              f"{r['arena_bytes'] / 2**20:.1f} | "
              f"{r['peak_rss_bytes'] / 2**20:.1f} | {r['predicted_drop'] / 2**20:.1f} | "
              f"{r['measured_drop'] / 2**20:.1f} | "
              f"{r['flops_made_again'] / max(r['step_flops'], 1):.0%} | "
              f"{r['step_seconds']:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


def measure(args, model, data, tp, policy, sp, base):
    """One compile and run; the drops against base (the plain plan at this
    tp; None: this is it)."""
    bundle = os.path.join(args.work, f"tp{tp}-{policy}{'-sp' if sp else ''}")
    subprocess.run([args.cleave, "compile", model, "-o", bundle, "--tp", str(tp),
                    "--optimizer", "adamw", "--recompute", policy,
                    "--sequence-parallel", "on" if sp else "off"],
                   check=True, stdout=subprocess.DEVNULL)
    info = json.loads(subprocess.check_output(
        [args.cleave, "inspect", bundle, "--json"]))
    arena = info["memory_per_rank"]["activations_peak"]
    metrics = bundle + ".metrics"
    cmd = [args.cleave, "run", bundle, "--random-weights", "--inputs", data,
           "--steps", str(args.steps), "--progress", "lines",
           "--metrics", metrics]
    if tp > 1:
        cmd.append("--threads")
    rss = run_measured(cmd)["peak_rss_mb"] * 2**20
    with open(metrics) as f:
        seconds = [json.loads(line)["seconds"] for line in f if line.strip()]
    # The first step warms the caches and the arena's pages.
    step = statistics.median(seconds[1:] or seconds)
    row = {"tp": tp, "policy": policy, "sequence_parallel": sp,
           "arena_bytes": arena,
           "peak_rss_bytes": int(rss), "ops_made_again": info["recompute"]["ops"],
           "flops_made_again": info["recompute"]["flops"],
           "step_flops": info["recompute"]["step_flops"],
           "step_seconds": step}
    base = base or row
    row["predicted_drop"] = (base["arena_bytes"] - arena) * tp
    row["measured_drop"] = base["peak_rss_bytes"] - row["peak_rss_bytes"]
    ratio = (row["measured_drop"] / row["predicted_drop"]
             if row["predicted_drop"] else float("nan"))
    print(f"tp={tp} {policy:9s} {'sp' if sp else '  '} arena {arena / 2**20:8.1f} MiB  peak RSS "
          f"{rss / 2**20:8.1f} MiB  drop predicted "
          f"{row['predicted_drop'] / 2**20:7.1f} MiB measured "
          f"{row['measured_drop'] / 2**20:7.1f} MiB ({ratio:.2f}x)  "
          f"{row['ops_made_again']} ops made again, "
          f"{row['flops_made_again'] / max(row['step_flops'], 1):.0%} of the "
          f"product FLOPs, step {step:.2f} s", flush=True)
    return row


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Kernel times that survive a noisy machine: A/B two cleave binaries (or
two bundles) on one training step, kernel by kernel.

Usage: /usr/bin/python3 bench/kernel_times.py BUNDLE --inputs DIR
           [--cleave build/bin/cleave] [--cleave OTHER] [--bundle OTHER]
           [--steps 8] [--rounds 2] [--kind fused_elementwise] [--top 12]

This 2-core machine runs at two speeds and is sometimes preempted for tens
of milliseconds; whole-step times of one build move by 10% from run to run,
so a 1% change cannot be seen in them. Here each run writes `cleave run
--trace`; every kernel instance of the program (the same instruction in
every step after the first) keeps its fastest step, and those minima are
summed by kernel kind, and for --kind by source op (layers folded together).
Runs alternate between the variants, --rounds times each.
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile


def minima(trace_path):
    """{(kind, op, phase): [fastest duration of the kth instance]} in us."""
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    per = collections.defaultdict(lambda: collections.defaultdict(list))
    for e in events:
        args = e.get("args", {})
        if e.get("ph") != "X" or e.get("cat") != "kernel":
            continue
        if args.get("step", 0) < 2:
            continue
        key = (e["name"], args.get("op", ""), args.get("phase", ""))
        per[key][args["step"]].append(e["dur"])
    out = {}
    for key, by_step in per.items():
        n = min(len(v) for v in by_step.values())
        out[key] = [min(v[i] for v in by_step.values()) for i in range(n)]
    return out


def summarize(mins, kind, top):
    kinds = collections.Counter()
    ops = collections.Counter()
    for (name, op, phase), durations in mins.items():
        kinds[name] += sum(durations)
        if name == kind:
            ops[(re.sub(r"h\.\d+", "h.N", op), phase)] += sum(durations)
    lines = ["  total %.1f ms" % (sum(kinds.values()) / 1e3)]
    for name, us in kinds.most_common(6):
        lines.append("  %-28s %8.2f ms" % (name, us / 1e3))
    for (op, phase), us in ops.most_common(top):
        lines.append("    %-44s %-9s %7.2f ms" % (op[-44:], phase, us / 1e3))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("bundle")
    ap.add_argument("--inputs", required=True)
    ap.add_argument("--cleave", action="append",
                    help="a cleave binary (twice to compare two)")
    ap.add_argument("--bundle", dest="other", help="a second bundle")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--kind", default="fused_elementwise")
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    if args.steps < 3:
        sys.exit("kernel_times.py: --steps must be at least 3")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    binaries = args.cleave or [os.path.join(root, "build", "bin", "cleave")]
    variants = [(b, args.bundle) for b in binaries]
    if args.other:
        variants.append((binaries[-1], args.other))
    with tempfile.TemporaryDirectory(prefix="cleave-kt-") as work:
        trace = os.path.join(work, "trace.json")
        for r in range(args.rounds):
            for binary, bundle in variants:
                subprocess.run([binary, "run", bundle, "--inputs", args.inputs,
                                "--steps", str(args.steps), "--trace", trace,
                                "--progress", "lines"], check=True,
                               stdout=subprocess.DEVNULL)
                print("round %d: %s %s" % (r + 1, binary, bundle))
                print(summarize(minima(trace), args.kind, args.top),
                      flush=True)


if __name__ == "__main__":
    main()

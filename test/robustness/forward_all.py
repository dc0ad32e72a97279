#!/usr/bin/python3
"""Runs `cleave run MODEL --forward` on every model of the ONNX backend test
data and reports the runs that crash or hang (issue 14): exit status 128 or
more, a stack dump, or no answer within --timeout seconds. Errors (exit 1,
one `cleave: error:` line) are fine: an unsupported op is an error, not a
crash.

Usage: forward_all.py --cleave CLEAVE [--root /usr/share/libonnx-testdata/data]
           [--suites node,pytorch-converted,pytorch-operator,simple]
           [--timeout 60] [--work DIR]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper


def inputs_of(case, out):
    """The first data set's inputs as NAME.npy, named by the graph."""
    model = onnx.load(os.path.join(case, "model.onnx"), load_external_data=False)
    inits = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    data = os.path.join(case, "test_data_set_0")
    os.makedirs(out, exist_ok=True)
    for k, name in enumerate(names):
        path = os.path.join(data, f"input_{k}.pb")
        if not os.path.exists(path):
            break
        t = onnx.TensorProto()
        with open(path, "rb") as f:
            t.ParseFromString(f.read())
        np.save(os.path.join(out, name.replace("/", "_") + ".npy"),
                numpy_helper.to_array(t))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cleave", required=True)
    ap.add_argument("--root", default="/usr/share/libonnx-testdata/data")
    ap.add_argument("--suites", default="node,pytorch-converted,pytorch-operator,simple")
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--work", default=None)
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="cleave-forward-")
    counts = {"ok": 0, "error": 0, "crash": 0, "hang": 0}
    bad = []
    for suite in args.suites.split(","):
        root = os.path.join(args.root, suite)
        for name in sorted(os.listdir(root)):
            case = os.path.join(root, name)
            if not os.path.exists(os.path.join(case, "model.onnx")):
                continue
            ins = os.path.join(work, suite, name)
            try:
                inputs_of(case, ins)
            except Exception:  # a case the onnx package cannot read
                counts["error"] += 1
                continue
            try:
                p = subprocess.run([args.cleave, "run", os.path.join(case, "model.onnx"),
                                    "--forward", "--inputs", ins],
                                   capture_output=True, text=True, timeout=args.timeout)
            except subprocess.TimeoutExpired:
                counts["hang"] += 1
                bad.append(f"HANG {suite}/{name}")
                continue
            err = p.stderr
            if p.returncode >= 128 or p.returncode < 0 or "Stack dump" in err:
                counts["crash"] += 1
                bad.append(f"CRASH {suite}/{name} (exit {p.returncode}): "
                           f"{err.strip().splitlines()[0] if err.strip() else ''}")
            elif p.returncode == 0:
                counts["ok"] += 1
            else:
                counts["error"] += 1
                lines = [l for l in err.strip().splitlines() if l]
                if len(lines) != 1 or not lines[0].startswith("cleave: error: "):
                    bad.append(f"UNCLEAR {suite}/{name}: {err.strip()[:200]!r}")
    for b in bad:
        print(b)
    print(" ".join(f"{k} {v}" for k, v in counts.items()))
    sys.exit(1 if counts["crash"] or counts["hang"] else 0)


if __name__ == "__main__":
    main()

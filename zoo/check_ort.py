#!/usr/bin/python3
"""Compares Cleave's forward pass with onnxruntime-node's on zoo cases.

  check_ort.py --cleave CLEAVE --ort ORT_MODULES --zoo DIR [--models a,b]
               [--rtol 1e-4] [--atol 1e-5]

For every case DIR/NAME-opsetN/ (make_zoo.py's layout: model.onnx,
inputs/NAME.npy), runs `cleave run model.onnx --forward` and
zoo/ort_forward.js (onnxruntime's CPU provider, graph optimisations off) on
the same inputs and compares every output both produce: elementwise
|cleave - ort| <= atol + rtol * |ort|, integers and booleans exactly;
where that fails and the case has PyTorch's float64 forward
(ref64/out/NAME.npy), Cleave passes if its largest distance from it is
within 10x onnxruntime's (or the tolerance).
ORT_MODULES is a node_modules directory holding onnxruntime-node
(scripts/setup.sh installs it under build/ort). Prints one PASS or FAIL line
per case and a summary line; exits non-zero on any failure.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def compare(got, want, rtol, atol):
    """The worst error as a fraction of the tolerance (<= 1 passes)."""
    if got.shape != want.shape:
        return float("inf"), f"shape {got.shape} vs {want.shape}"
    if want.dtype.kind in "biu":
        bad = int(np.sum(got != want))
        return (0.0 if bad == 0 else float("inf")), f"{bad} elements differ"
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    if not np.array_equal(np.isnan(got64), np.isnan(want64)):
        return float("inf"), "NaN positions differ"
    finite = ~np.isnan(want64)
    err = np.abs(got64 - want64)[finite]
    tol = (atol + rtol * np.abs(want64))[finite]
    worst = float(np.max(err / tol)) if err.size else 0.0
    return worst, f"max abs err {float(np.max(err)) if err.size else 0:.2e}"


def run_case(case, args, work):
    model = os.path.join(case, "model.onnx")
    inputs = os.path.join(case, "inputs")
    ort_out, cl_out = os.path.join(work, "ort"), os.path.join(work, "cleave")
    env = dict(os.environ, NODE_PATH=args.ort)
    r = subprocess.run(["node", os.path.join(HERE, "ort_forward.js"), model,
                        inputs, ort_out], capture_output=True, text=True,
                       env=env)
    if r.returncode != 0:
        return False, "onnxruntime: " + (r.stderr.strip().splitlines() or ["?"])[-1]
    r = subprocess.run([args.cleave, "run", model, "--forward", "--inputs",
                        inputs, "--dump", cl_out], capture_output=True,
                       text=True)
    if r.returncode != 0:
        return False, "cleave: " + (r.stderr.strip().splitlines() or ["?"])[-1]
    names = sorted(set(os.listdir(ort_out)) & set(os.listdir(cl_out)))
    if not names:
        return False, "no output in common"
    worst, where, note = 0.0, "", ""
    for name in names:
        got = np.load(os.path.join(cl_out, name))
        want = np.load(os.path.join(ort_out, name))
        w, n = compare(got, want, args.rtol, args.atol)
        exact = os.path.join(case, "ref64", "out", name)
        if w > 1.0 and os.path.exists(exact) and got.shape == want.shape:
            # Ill-conditioned networks (batch statistics of 4 samples
            # through 90 layers) move two correct float32 orders apart:
            # Cleave passes if it is no further from PyTorch's float64
            # forward than 10x onnxruntime is.
            r64 = np.load(exact)
            ec = float(np.max(np.abs(got - r64)))
            eo = float(np.max(np.abs(want - r64)))
            bound = max(args.atol + args.rtol * float(np.max(np.abs(r64))),
                        10 * eo)
            w = ec / bound
            n = (f"from float64: cleave {ec:.2e}, onnxruntime {eo:.2e}, "
                 f"apart {n[len('max abs err '):]}")
        if w >= worst:
            worst, where, note = w, name, n
    ok = worst <= 1.0
    return ok, (f"{len(names)} outputs, worst {worst:.2f} of tolerance "
                f"({where[:-4]}: {note})")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cleave", required=True)
    ap.add_argument("--ort", required=True)
    ap.add_argument("--zoo", required=True)
    ap.add_argument("--models", default="")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--atol", type=float, default=1e-5)
    args = ap.parse_args()
    wanted = set(filter(None, args.models.split(",")))
    cases = sorted(d for d in os.listdir(args.zoo)
                   if os.path.isfile(os.path.join(args.zoo, d, "model.onnx"))
                   and (not wanted or d.rsplit("-opset", 1)[0] in wanted))
    passed = failed = 0
    for d in cases:
        with tempfile.TemporaryDirectory() as work:
            ok, msg = run_case(os.path.join(args.zoo, d), args, work)
        print(f"{'PASS' if ok else 'FAIL'} {d}: {msg}", flush=True)
        passed += ok
        failed += not ok
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed or not cases else 0)


if __name__ == "__main__":
    main()

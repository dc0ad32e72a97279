#!/usr/bin/env bash
# make demo: build an example model, show its IR, run its forward pass on the
# CPU runtime and compare with NumPy.
set -euo pipefail
BUILD=${1:-build}
OUT=$BUILD/demo
rm -rf "$OUT" && mkdir -p "$OUT"
/usr/bin/python3 examples/make_mlp.py "$OUT"
echo "== cleave import $OUT/mlp.onnx --input image=4x784"
"$BUILD/bin/cleave" import "$OUT/mlp.onnx" --input image=4x784
echo "== cleave run $OUT/mlp.onnx --forward --inputs $OUT/inputs --dump $OUT/outputs"
"$BUILD/bin/cleave" run "$OUT/mlp.onnx" --forward --inputs "$OUT/inputs" --dump "$OUT/outputs"
/usr/bin/python3 - "$OUT" <<'PY'
import sys, numpy as np
out = sys.argv[1]
got = np.load(f"{out}/outputs/probs.npy")
ref = np.load(f"{out}/reference.npy")
np.set_printoptions(precision=4, suppress=True)
print("class probabilities (Cleave):\n", got)
print("max |Cleave - NumPy| =", float(np.abs(got - ref).max()))
assert np.allclose(got, ref, rtol=1e-4, atol=1e-6), "mismatch with NumPy"
PY

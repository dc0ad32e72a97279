#!/usr/bin/env bash
# make demo: compile the training step of an MLP for 2 tensor-parallel ranks
# (Cleave chooses the sharding), show the plan, and train it on real
# Fashion-MNIST data on 2 CPU processes.
set -euo pipefail
BUILD=${1:-build}
OUT=$BUILD/demo
rm -rf "$OUT" && mkdir -p "$OUT"
echo "== data: 200 batches of 64 Fashion-MNIST images, and the model"
/usr/bin/python3 zoo/fashion_mnist.py --out "$OUT/data" --steps 200 --batch 64 --model "$OUT/mlp.onnx"
echo "== cleave compile $OUT/mlp.onnx -o $OUT/mlp.bundle --loss cross_entropy --optimizer adamw --lr 0.002 --tp 2"
"$BUILD/bin/cleave" compile "$OUT/mlp.onnx" -o "$OUT/mlp.bundle" --loss cross_entropy --optimizer adamw --lr 0.002 --tp 2
echo "== cleave inspect $OUT/mlp.bundle"
"$BUILD/bin/cleave" inspect "$OUT/mlp.bundle"
echo "== cleave run $OUT/mlp.bundle --steps 200 --inputs $OUT/data --dump $OUT/out   (2 ranks)"
"$BUILD/bin/cleave" run "$OUT/mlp.bundle" --steps 200 --inputs "$OUT/data" --dump "$OUT/out"
/usr/bin/python3 - "$OUT" <<'PY'
import sys, numpy as np
loss = np.load(f"{sys.argv[1]}/out/loss.npy")
print(f"loss: first step {loss[0]:.3f}, mean of the last 20 steps {loss[-20:].mean():.3f}")
PY

#!/usr/bin/env bash
# make demo: a byte-level GPT trained on 4 tensor-parallel CPU ranks.
# Cleave chooses the sharding (Megatron's, found by its search), trains on a
# text every Debian system has, checkpoints, exports the trained model, and
# shows that the same run on one rank ends at the same loss.
set -euo pipefail
BUILD=${1:-build}
CLEAVE="$BUILD/bin/cleave"
OUT=$BUILD/demo
TEXT=/usr/share/common-licenses/GPL-3
STEPS=300
# AdamW's epsilon at 1e-6: at 1e-8 a gradient that is zero up to rounding
# becomes a full +-lr step, and runs that differ only in rounding (tp=4 vs
# tp=1) drift apart.
OPT=(--optimizer adamw --lr 0.001 --eps 1e-6)
DATA=(--text "$TEXT" --shuffle --seed 1 --steps "$STEPS")
rm -rf "$OUT" && mkdir -p "$OUT"

echo "== the model: examples/make_gpt.py (PyTorch, exported to ONNX)"
/usr/bin/python3 examples/make_gpt.py "$OUT/gpt.onnx" --layers 2 --d 64 --heads 4 --seq 64 --batch 8 2>/dev/null

echo "== cleave compile $OUT/gpt.onnx -o $OUT/gpt.bundle ${OPT[*]} --tp 4"
"$CLEAVE" compile "$OUT/gpt.onnx" -o "$OUT/gpt.bundle" "${OPT[@]}" --tp 4

echo "== cleave inspect $OUT/gpt.bundle"
"$CLEAVE" inspect "$OUT/gpt.bundle"

echo "== cleave run $OUT/gpt.bundle ${DATA[*]} --checkpoint $OUT/ckpt --save-every 100   (4 ranks)"
"$CLEAVE" run "$OUT/gpt.bundle" "${DATA[@]}" --checkpoint "$OUT/ckpt" --save-every 100 \
  --metrics "$OUT/tp4.jsonl" --log-every 25

echo "== cleave export $OUT/ckpt -o $OUT/trained.onnx"
"$CLEAVE" export "$OUT/ckpt" -o "$OUT/trained.onnx"
ls -l "$OUT/trained.onnx"

echo "== the same run on one rank (cleave compile ... --tp 1)"
"$CLEAVE" compile "$OUT/gpt.onnx" -o "$OUT/gpt1.bundle" "${OPT[@]}"
"$CLEAVE" run "$OUT/gpt1.bundle" "${DATA[@]}" --metrics "$OUT/tp1.jsonl" --progress lines --log-every 100

/usr/bin/python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
tp4 = [json.loads(l)["loss"] for l in open(f"{out}/tp4.jsonl")]
tp1 = [json.loads(l)["loss"] for l in open(f"{out}/tp1.jsonl")]
worst = max(abs(a - b) / abs(b) for a, b in zip(tp4, tp1))
print(f"loss at step 1: {tp4[0]:.4f}; at step {len(tp4)}: tp=4 {tp4[-1]:.6f}, tp=1 {tp1[-1]:.6f}")
print(f"largest relative difference between the two runs over {len(tp4)} steps: {worst:.1e}")
PY

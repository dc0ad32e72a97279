#!/bin/bash
# The prepared GPU check of the CUDA backend, in two halves.
#
#   bench/gpu/check.sh prepare
#     On a machine where Cleave builds (no GPU needed): builds, compiles the
#     zoo (one SGD and one AdamW bundle per model) and records each bundle's
#     step on the CPU backend, compiles GPT-2-small (12 layers, d 768, 12
#     heads, MLP 3072, vocab 50304, seq 1024, batch 8, AdamW) with
#     --plan-only, and packs cleave-run (the runtime without the compiler),
#     the GPU unit tests, their libraries and all of that into
#     bench/gpu/pack.tar.xz (about 20 MB; carry it to the GPU machine).
#
#   bench/gpu/check.sh run [--cpu]
#     On a one-GPU machine with CUDA, PyTorch and Python, no network, no
#     MLIR: builds the CUDA backend from source (build_plugin.sh), runs the
#     GPU unit tests (every kernel against the CPU backend), runs every zoo
#     bundle's step on the GPU against the CPU's (f32 within 1e-4, bf16
#     within 2e-2), then times GPT-2-small's train step in bf16 on Cleave
#     (its fused attention and cross-entropy, and --no-fusion's unfused
#     form), PyTorch eager and torch.compile, with each one's peak memory
#     (Cleave: the plan's bytes; PyTorch: max_memory_allocated), and prints
#     the table last. Writes
#     check.log, results.jsonl and table.md to $OUT (the device tool's
#     folder) or bench/gpu/results. --cpu: the same on the CPU backend at
#     tiny shapes, to dry-run this script where there is no GPU.
#
# Budget: under 8 minutes on an H200 (the plugin build ~1 min on 16 cores,
# the zoo ~1 min, torch.compile's compilation ~1-2 min); every stage runs
# under `timeout`, so a hang costs its stage, not the machine's lease.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
pack=$root/bench/gpu/pack
mode=${1:-}
shift || true
cpu=0
[ "${1:-}" = "--cpu" ] && cpu=1
# The first Python with NumPy (the GPU machine's python3 holds PyTorch; on a
# Debian development machine that is /usr/bin/python3).
py=${PYTHON:-}
if [ -z "$py" ]; then
  for candidate in python3 /usr/bin/python3; do
    if "$candidate" -c 'import numpy' 2>/dev/null; then py=$candidate; break; fi
  done
fi
py=${py:-python3}

# Shapes: GPT-2-small, or tiny for the CPU dry run.
gpt2=(--layers 12 --d 768 --heads 12 --mlp 3072 --vocab 50304 --seq 1024 --batch 8)
tiny=(--layers 2 --d 128 --heads 4 --mlp 512 --vocab 512 --seq 128 --batch 2)

prepare() {
  set -e
  make -C "$root" build >/dev/null
  local b=$root/build/bin
  rm -rf "$pack" && mkdir -p "$pack"/{bin,lib,zoo,runs}
  cp "$b"/cleave-run "$b"/cleave-unit-tests "$pack"/bin/
  cp "$root"/build/lib/libcleave_cuda.so "$pack"/lib/libcleave_cuda.prebuilt.so
  # Shared libraries, except the C/C++ runtime the GPU machine has itself.
  ldd "$b"/cleave-run "$b"/cleave-unit-tests | awk '/=> \//{print $3}' | sort -u |
    grep -v -E '/(libc|libm|libdl|librt|libpthread|ld-linux-x86-64|libstdc\+\+|libgcc_s)\.so' |
    xargs -I{} cp -L {} "$pack"/lib/
  # The zoo at opset 17, its bundles and the CPU backend's step.
  "$py" "$root"/zoo/make_zoo.py --out "$pack"/zoo --opsets 17 --bf16-spread >/dev/null
  "$py" "$root"/zoo/check_zoo.py --cleave "$b"/cleave --zoo "$pack"/zoo \
    --keep "$pack"/runs | tail -1
  find "$pack"/runs -name '*.onnx' -delete
  for shape in gpt2 tiny; do
    local -n dims=$shape
    "$py" "$root"/bench/gpt_onnx.py "$pack"/$shape.onnx "${dims[@]}" >/dev/null
    # The fused step (attention, cross-entropy) and the exporter's form.
    for variant in "" .unfused; do
      "$b"/cleave compile "$pack"/$shape.onnx -o "$pack"/$shape$variant.bundle \
        --plan-only --optimizer adamw --lr 1e-4 ${variant:+--no-fusion}
      "$b"/cleave inspect "$pack"/$shape$variant.bundle --json \
        > "$pack"/$shape$variant.inspect.json
    done
    rm -f "$pack"/$shape.onnx "$pack"/$shape.weights "$pack"/$shape.bundle/model.onnx
  done
  tar -C "$root"/bench/gpu -cJf "$root"/bench/gpu/pack.tar.xz pack
  echo "prepared $(du -h "$root"/bench/gpu/pack.tar.xz | cut -f1) bench/gpu/pack.tar.xz"
}

# CHECK_STAGES picks stages (default all: unit zoo gpt torch), so that a first
# lease can spend its minutes on correctness and a second on timing.
want() { [[ " ${CHECK_STAGES:-unit zoo gpt torch} " == *" $1 "* ]]; }

run() {
  local results=${OUT:-$root/bench/gpu/results}
  mkdir -p "$results"
  exec > >(tee "$results/check.log") 2>&1
  local start=$SECONDS
  local log=$results/results.jsonl
  : > "$log"
  if [ ! -d "$pack" ]; then
    [ -f "$root"/bench/gpu/pack.tar.xz ] || { echo "no bench/gpu/pack.tar.xz: run 'check.sh prepare' first"; exit 2; }
    tar -C "$root"/bench/gpu -xJf "$root"/bench/gpu/pack.tar.xz
  fi
  export LD_LIBRARY_PATH=$pack/lib:${LD_LIBRARY_PATH:-}
  local backend=cuda
  [ $cpu = 1 ] && backend=cpu
  echo "== machine"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())' 2>&1

  echo "== build the CUDA backend from source ($((SECONDS - start)) s)"
  local plugin=$pack/lib/libcleave_cuda.so
  if timeout 180 "$root"/bench/gpu/build_plugin.sh "$plugin"; then
    echo '{"check": "plugin build", "ok": true}' >> "$log"
  else
    echo "build failed: using the plugin built by 'prepare'"
    cp "$pack"/lib/libcleave_cuda.prebuilt.so "$plugin"
    echo '{"check": "plugin build", "ok": false}' >> "$log"
  fi
  export CLEAVE_CUDA_PLUGIN=$plugin

  if want unit; then
  echo "== GPU unit tests: every kernel against the CPU backend ($((SECONDS - start)) s)"
  # The whole gtest log goes to unit.log; the summary and each failure here.
  timeout 150 "$pack"/bin/cleave-unit-tests --gtest_filter='Cuda*' > "$results/unit.log" 2>&1
  local unit_rc=$?
  grep -E '^\[  (FAILED|PASSED) |^\[==========\]|Failure|error' "$results/unit.log" | head -60
  echo "{\"check\": \"unit\", \"ok\": $([ $unit_rc = 0 ] && echo true || echo false), \"rc\": $unit_rc}" >> "$log"

  fi
  if want zoo; then
  echo "== zoo: one train step, $backend vs the CPU backend ($((SECONDS - start)) s)"
  local pass=0 fail=0 hung=0
  for precision in f32 bf16; do
    [ $cpu = 1 ] && [ $precision = bf16 ] && continue
    local rtol=1e-4
    [ $precision = bf16 ] && rtol=2e-2
    for run in "$pack"/runs/*/*/; do
      # Three hung steps mean a hang in the backend itself: the later cases
      # would only spend the lease's minutes on the same hang.
      [ $hung -ge 3 ] && { echo "SKIP $precision $(basename "$(dirname "$run")"): 3 steps hung"; fail=$((fail + 1)); continue; }
      local case=$pack/zoo/$(basename "$(dirname "$run")") opt=$(basename "$run")
      local dump=/tmp/cleave-check/$(basename "$case")-$opt-$precision
      rm -rf "$dump"
      timeout 30 "$pack"/bin/cleave-run "$run"/bundle --steps 1 --inputs "$case"/inputs \
        --dump "$dump" --backend $backend --precision $precision --progress lines >/dev/null 2>"$dump.err"
      local rc=$?
      if [ $rc = 0 ] && "$py" "$root"/zoo/check_zoo.py --dump-dir "$dump" --case "$case" --optimizer "$opt" \
          --cpu-dump "$run"/dump --rtol $rtol --precision $precision | sed "s/^/$precision /"; then
        pass=$((pass + 1))
      else
        [ $rc = 124 ] && hung=$((hung + 1))
        echo "FAIL $precision $(basename "$case") $opt (rc $rc): $(tail -3 "$dump.err" 2>/dev/null)"
        fail=$((fail + 1))
      fi
    done
  done
  echo "zoo: $pass passed, $fail failed"
  echo "{\"check\": \"zoo\", \"passed\": $pass, \"failed\": $fail}" >> "$log"
  fi

  { want gpt || want torch; } && echo "== GPT train step: Cleave vs PyTorch ($((SECONDS - start)) s)"
  local shape=gpt2 dims=("${gpt2[@]}") device=cuda precision=bf16 steps=30
  if [ $cpu = 1 ]; then shape=tiny; dims=("${tiny[@]}"); device=cpu; precision=f32; steps=4; fi
  local text=/tmp/cleave-check/text
  cat "$root"/docs/*.md "$root"/README.md > "$text"
  while [ "$(stat -c %s "$text")" -lt 200000 ]; do cat "$text" "$text" > "$text.2"; mv "$text.2" "$text"; done
  # Fused attention and cross-entropy (the default), then the unfused form.
  if want gpt; then
  for variant in "" .unfused; do
  rm -f /tmp/cleave-check/metrics.jsonl
  timeout 120 "$pack"/bin/cleave-run "$pack"/$shape$variant.bundle --random-weights --text "$text" \
    --steps $steps --backend $backend --precision $precision --progress lines \
    --log-every 10 --metrics /tmp/cleave-check/metrics.jsonl
  "$py" - "$shape" "$pack/$shape$variant.inspect.json" "cleave${variant/./-}" "${dims[@]}" >> "$log" <<'PY'
import json, sys
sys.path.insert(0, "bench/gpu")
from flops import flops_per_step, peak_flops
shape, inspect, impl, rest = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
a = {rest[i][2:]: int(rest[i + 1]) for i in range(0, len(rest), 2)}
try:
    steps = [json.loads(l) for l in open("/tmp/cleave-check/metrics.jsonl")]
except OSError:
    steps = []
if not steps:
    print(json.dumps({"impl": impl, "error": True}))
    sys.exit(0)
try:
    # The plan's bytes per rank: weights, gradients, optimizer state and the
    # step's arena (every activation the backward keeps).
    memory = json.load(open(inspect))["memory_per_rank"]
except (OSError, KeyError, ValueError):
    memory = {}
timed = steps[len(steps) // 4:] or steps  # the first steps warm up and record the graph
s = sum(x["seconds"] for x in timed) / len(timed)
d, L, V, T = a["d"], a["layers"], a["vocab"], a["seq"]
# wte, wpe; per layer 2 LayerNorms, QKV, projection, MLP; ln_f.
params = V * d + T * d + L * (4 * d * d + 2 * d * a["mlp"] + 9 * d + a["mlp"]) + 2 * d
try:
    import torch
    name = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
except Exception:
    name = "cpu"
peak = peak_flops(name, "bf16")
flops = flops_per_step(L, d, a["heads"], T, a["batch"], params)
print(json.dumps({"impl": impl, "ms_per_step": s * 1e3, "tokens_per_s": a["batch"] * T / s,
                  "mfu": flops / s / peak if peak else None, "loss": timed[-1]["loss"],
                  "params": params, "peak_bytes": sum(memory.values()) or None,
                  "activation_bytes": memory.get("activations_peak")}))
PY
  done
  fi
  if want torch; then
  for m in eager compile; do
    timeout 150 "$py" "$root"/bench/gpu/torch_gpt.py --mode $m --device $device --precision $precision \
      "${dims[@]}" --steps $((steps > 10 ? 20 : steps)) --warmup $((steps > 10 ? 5 : 1)) >> "$log" ||
      echo "{\"impl\": \"pytorch-$m\", \"error\": true}" >> "$log"
  done
  fi
  echo "== done in $((SECONDS - start)) s; full numbers in $log"
  want gpt || want torch || return 0
  "$py" - "$log" "$shape" "$precision" > "$results/table.md" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"impl"' in l]
ref = next((r for r in rows if r.get("impl") == "pytorch-compile" and "ms_per_step" in r), None)
print(f"GPT train step ({sys.argv[2]}, {sys.argv[3]})")
print("| implementation | ms/step | tokens/s | MFU | speed vs torch.compile | peak memory MiB |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
for r in rows:
    if "ms_per_step" not in r:
        print(f"| {r['impl']} | failed | | | | |")
        continue
    mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") else "-"
    rel = f"{ref['ms_per_step'] / r['ms_per_step']:.3f}x" if ref else "-"
    mem = f"{r['peak_bytes'] / 2**20:.0f}" if r.get("peak_bytes") else "-"
    print(f"| {r['impl']} | {r['ms_per_step']:.1f} | {r['tokens_per_s']:.0f} | {mfu} | {rel} | {mem} |")
PY
  cat "$results/table.md"
}

case "$mode" in
  prepare) prepare ;;
  run) mkdir -p /tmp/cleave-check && cd "$root" && run ;;
  *) sed -n '2,26p' "$0"; exit 2 ;;
esac

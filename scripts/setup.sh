#!/usr/bin/env bash
# Installs every dependency of Cleave from Debian's apt, skipping what is present,
# and onnxruntime-node (the second reference executor: Debian packages no
# onnxruntime) from the npm registry into build/ort. Idempotent: a second run
# installs nothing and takes a second.
set -euo pipefail

PKGS=(
  cmake ninja-build g++ make pkg-config ccache
  libmlir-22-dev mlir-22-tools llvm-22-dev llvm-22-tools
  libprotobuf-dev protobuf-compiler libonnx-dev libonnx-testdata
  libopenblas-dev libdnnl-dev libxbyak-dev libgtest-dev nlohmann-json3-dev zlib1g-dev
  libopenmpi-dev openmpi-bin
  python3-numpy python3-onnx
  python3-torch python3-torchvision libtorch-dev dataset-fashion-mnist
  clang-22 libclang-rt-22-dev libomp-22-dev
  python3-dev pybind11-dev python3-pytest python3-tqdm
  clang-format-22 pre-commit flake8
)

# onnxruntime-node's CPU binaries ship in the package; its postinstall only
# fetches GPU ones (and fails without them), hence --ignore-scripts. Without
# the registry the comparisons with it are skipped (lit feature onnxruntime).
ORT_VERSION=1.30.0
ORT_DIR="${CLEAVE_ORT_DIR:-$(cd "$(dirname "$0")/.." && pwd)/build/ort}"
install_ort() {
  if [ -f "$ORT_DIR/node_modules/onnxruntime-node/package.json" ] &&
     grep -q "\"version\": \"$ORT_VERSION\"" \
       "$ORT_DIR/node_modules/onnxruntime-node/package.json"; then
    return
  fi
  if ! command -v npm >/dev/null; then
    # Debian's own node and npm, unless a node that bundles npm is there.
    $SUDO apt-get install -y -qq --no-install-recommends nodejs npm \
      >/dev/null 2>&1 || true
  fi
  mkdir -p "$ORT_DIR"
  if command -v npm >/dev/null && npm install --prefix "$ORT_DIR" --ignore-scripts --no-audit --no-fund \
       --silent "onnxruntime-node@$ORT_VERSION" >"$ORT_DIR/npm.log" 2>&1; then
    echo "setup: onnxruntime-node $ORT_VERSION in $ORT_DIR"
  else
    echo "setup: could not install onnxruntime-node (see $ORT_DIR/npm.log);" \
         "the comparisons with onnxruntime will be skipped"
  fi
}

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PKGS[@]} packages present"
  install_ort
  exit 0
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
install_ort
echo "setup: done"

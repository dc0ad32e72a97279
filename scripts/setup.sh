#!/usr/bin/env bash
# Installs every dependency of Cleave from Debian's apt, skipping what is present.
# Idempotent: a second run installs nothing and takes a second.
set -euo pipefail

PKGS=(
  cmake ninja-build g++ make pkg-config
  libmlir-22-dev mlir-22-tools llvm-22-dev llvm-22-tools
  libprotobuf-dev protobuf-compiler libonnx-dev libonnx-testdata
  libopenblas-dev libgtest-dev nlohmann-json3-dev zlib1g-dev
  libopenmpi-dev openmpi-bin
  python3-numpy python3-onnx
  python3-torch python3-torchvision libtorch-dev dataset-fashion-mnist
  clang-22 libclang-rt-22-dev libomp-22-dev
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PKGS[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"

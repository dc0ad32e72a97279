#!/bin/bash
# Builds the CUDA backend (libcleave_cuda.so) from source with nvcc alone: on
# a GPU machine that has CUDA but not the project's build dependencies (MLIR,
# protobuf, MPI), the plugin needs none of them. Same sources and flags as
# runtime/CMakeLists.txt's cleave_cuda target: sm_90 code + compute_90 PTX.
#   bench/gpu/build_plugin.sh OUT.so
set -euo pipefail
out=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
cuda=$(dirname "$(dirname "$(readlink -f "$nvcc")")")

# NCCL: the CUDA directory, or the nvidia-nccl wheel PyTorch brings along.
find_nccl() {
  for d in "$cuda" /usr/local/cuda /usr \
    $(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null || true) \
    $(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "nccl"))' 2>/dev/null || true); do
    if [ -f "$d/include/nccl.h" ]; then
      for l in "$d/lib" "$d/lib64" "$d/lib/x86_64-linux-gnu"; do
        if ls "$l"/libnccl.so* >/dev/null 2>&1; then echo "$d/include $l"; return; fi
      done
    fi
  done
  return 1
}
read -r nccl_inc nccl_lib < <(find_nccl) || { echo "build_plugin: no nccl.h + libnccl found" >&2; exit 1; }
cudalib=$cuda/lib64; [ -d "$cudalib" ] || cudalib=$cuda/lib
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
inc="-I$root/runtime/include -I$root/runtime -I$nccl_inc -I$cuda/include"
arch="-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"
# The sources of runtime/cuda/CMakeLists.txt's cleave_cuda (with the kernel
# families' cuda* files) and
# runtime/core/CMakeLists.txt's cleave_runtime_core (which it links).
srcs=$(ls "$root"/runtime/cuda/{executor,matmul_cache,schedule}.cpp \
  "$root"/runtime/cuda/{fused,support}.cu \
  "$root"/runtime/kernels/*/cuda*.cu "$root"/runtime/kernels/*/cuda*.cpp \
  "$root"/runtime/core/{communicator,fusion,kernel_info,kernel_schema,nn_geometry,program,reduce_plan,shape_rules,types}.cpp \
  "$root"/runtime/kernels/*/shape.cpp)
# Objects are named by their path below runtime/: every family has a shape.cpp.
echo "$srcs" | xargs -P "$(nproc)" -I{} sh -c '
  f={}; o='"$work"'/$(echo "${f#'"$root"'/runtime/}" | tr / _).o
  case "$f" in
    *.cu) '"$nvcc"' -std=c++17 -O3 --expt-relaxed-constexpr -Xcompiler=-fPIC,-fvisibility=hidden,-Wno-unknown-pragmas '"$arch $inc"' -c "$f" -o "$o" ;;
    *) '"$nvcc"' -std=c++17 -O2 -Xcompiler=-fPIC,-fvisibility=hidden,-Wno-unknown-pragmas '"$inc"' -c "$f" -o "$o" ;;
  esac' 
"$nvcc" -shared -o "$out" "$work"/*.o -L"$cudalib" -L"$nccl_lib" -lcudart -lcublasLt -lnccl \
  -Xlinker --no-undefined -Xlinker -rpath -Xlinker "$cudalib:$nccl_lib"
echo "build_plugin: $out (nvcc $("$nvcc" --version | grep -o 'release [0-9.]*'), NCCL from $nccl_lib)"

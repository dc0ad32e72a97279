//===- block_reduce.cuh - Warp and block all-reduces -----------*- C++ -*-===//
//
// What the reductions, softmax and the norms share on the GPU: the launch
// limits, a deterministic warp/block all-reduce, and the warp-or-block
// per row mapping of row-wise kernels.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_CUDA_BLOCK_REDUCE_CUH
#define CLEAVE_RUNTIME_CUDA_BLOCK_REDUCE_CUH

#include "cuda/cuda_common.cuh"

#include <limits>
#include <string>

namespace cleave::rt::cuda {

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;
/// Rows (or reductions) up to this many elements get one warp; longer ones a
/// whole block of kBlock threads.
constexpr int64_t kWarpRowLimit = 1024;
/// Reductions of up to this many elements get one thread per output.
constexpr int64_t kThreadRunLimit = 16;
/// A few waves of blocks on an H200 (132 SMs): reductions with fewer output
/// blocks than this split their reduced range.
constexpr int64_t kTargetBlocks = 1024;
/// Fewest reduced elements a thread handles per split; below it the extra
/// launch and partial traffic cost more than the parallelism gains.
constexpr int64_t kMinPerThread = 32;
/// Largest gridDim.x a launch may use.
constexpr int64_t kMaxGridX = std::numeric_limits<int32_t>::max();
/// Largest gridDim.y.
constexpr int64_t kMaxGridY = 65535;

inline int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline Status gridError(const char *kernel, int64_t blocks) {
  return Status::error(std::string(kernel) + ": " + std::to_string(blocks) +
                       " blocks exceed the CUDA grid limit");
}

//===----------------------------------------------------------------------===//
// Cooperative reductions
//===----------------------------------------------------------------------===//

/// Reduces \p v over the calling warp; every lane gets the result. The
/// butterfly order is fixed, so the result is deterministic.
template <typename Op, typename V> __device__ V warpAllReduce(V v) {
  for (int offset = kWarp / 2; offset > 0; offset >>= 1)
    v = Op::merge(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

/// Reduces \p v over the block (a multiple of kWarp threads, at most 1024);
/// every thread gets the result. All threads must call it.
template <typename Op, typename V> __device__ V blockAllReduce(V v) {
  __shared__ V partial[kWarp];
  v = warpAllReduce<Op>(v);
  int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  // A previous call may still be reading `partial` in slower warps.
  __syncthreads();
  if (lane == 0)
    partial[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / kWarp) ? partial[lane]
                                                  : Op::identity();
  return warpAllReduce<Op>(v);
}

/// A warp's or a block's all-reduce.
template <bool kWarpGroup, typename Op, typename V>
__device__ V groupAllReduce(V v) {
  if constexpr (kWarpGroup)
    return warpAllReduce<Op>(v);
  else
    return blockAllReduce<Op>(v);
}

/// Float max as std::max(acc, x) folds it on the CPU: NaN operands are
/// skipped (the CPU's NaN shows up later, through exp).
struct MaxOp {
  __device__ static float identity() {
    return -std::numeric_limits<float>::infinity();
  }
  __device__ static float merge(float a, float b) { return fmaxf(a, b); }
};

struct SumOp {
  __device__ static double identity() { return 0.0; }
  __device__ static double merge(double a, double b) { return a + b; }
};

/// The row this thread works on, its lane in the row's group and the
/// group's width: a warp per row (several rows per block) or a block per
/// row. False for the surplus warps of the last block.
template <bool kWarpRow>
__device__ bool rowOfThread(int64_t outer, int64_t *row, int *lane,
                            int *width) {
  if constexpr (kWarpRow) {
    *row = blockIdx.x * int64_t(blockDim.x / kWarp) + threadIdx.x / kWarp;
    *lane = threadIdx.x % kWarp;
    *width = kWarp;
    return *row < outer;
  }
  *row = blockIdx.x;
  *lane = threadIdx.x;
  *width = blockDim.x;
  return true;
}

} // namespace cleave::rt::cuda

#endif // CLEAVE_RUNTIME_CUDA_BLOCK_REDUCE_CUH

//===- cuda_common.cuh - Device helpers shared by the kernels --*- CUDA -*-===//
//
// Private to libcleave_cuda.so: grid sizing, broadcast indexing and error
// reporting used by every kernel file.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_CUDA_CUDA_COMMON_CUH
#define CLEAVE_RUNTIME_CUDA_CUDA_COMMON_CUH

#include "cuda/cuda_kernel.h"

#include <cstdint>
#include <vector>

namespace cleave::rt::cuda {

constexpr int kBlock = 256;

/// Blocks for \p n elements at kBlock threads, capped: kernels loop with a
/// grid stride, so large tensors need no more blocks than the GPU can hold.
inline unsigned gridFor(int64_t n) {
  int64_t blocks = (n + kBlock - 1) / kBlock;
  if (blocks < 1)
    blocks = 1;
  if (blocks > 65535 * 8)
    blocks = 65535 * 8;
  return static_cast<unsigned>(blocks);
}

/// Grid-stride loop over [0, n).
#define CLEAVE_GRID_LOOP(i, n)                                                 \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n);    \
       i += int64_t(gridDim.x) * blockDim.x)

/// Maps a result's linear index to element offsets of up to 3 operands that
/// broadcast to it (strides 0 along broadcast dims). Passed by value to
/// kernels.
struct Indexer {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[3][kMaxRank] = {};

  /// Offsets of operands 0..count-1 for result element \p linear.
  __device__ void offsets(int64_t linear, int count, int64_t *out) const {
    for (int k = 0; k < count; ++k)
      out[k] = 0;
    for (int d = rank - 1; d >= 0; --d) {
      int64_t i = linear % dims[d];
      linear /= dims[d];
      for (int k = 0; k < count; ++k)
        out[k] += i * strides[k][d];
    }
  }
};

/// An Indexer over \p resultShape for operands with the given element
/// strides (one per result dim); dims are coalesced where every operand
/// allows. Error when the coalesced rank exceeds kMaxRank.
Status makeIndexer(const std::vector<int64_t> &resultShape,
                   const std::vector<std::vector<int64_t>> &operandStrides,
                   Indexer *out);

/// Records the first data error of the step: instruction index and code.
__device__ inline void reportError(int *flag, int instruction, int code) {
  if (atomicCAS(flag, 0, instruction + 1) == 0)
    flag[1] = code;
}

} // namespace cleave::rt::cuda

#endif // CLEAVE_RUNTIME_CUDA_CUDA_COMMON_CUH

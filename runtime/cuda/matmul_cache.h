//===- matmul_cache.h - cuBLASLt plans per matmul problem -------*- C++ -*-===//
//
// Private to libcleave_cuda.so. Matmuls of the same problem (a transformer's
// layers repeat the same few) share one descriptor set and one algorithm,
// chosen by cuBLASLt's heuristic the first time the problem runs.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_CUDA_MATMUL_CACHE_H
#define CLEAVE_RUNTIME_CUDA_MATMUL_CACHE_H

#include "cuda/cuda_kernel.h"

#include <map>
#include <memory>
#include <tuple>

namespace cleave::rt::cuda {

/// A problem in the row-major view (see matmul.cu).
struct MatmulKey {
  bool transA, transB;
  int64_t m, n, k, batch, strideA, strideB, strideC;
  bool bf16;
  /// Largest power of two (<= 16) dividing every pointer and batch stride.
  int alignment;
  /// cuBLASLt's BIAS epilogue (a vector of n added to every row).
  bool bias = false;

  auto tie() const {
    return std::tie(transA, transB, m, n, k, batch, strideA, strideB, strideC,
                    bf16, alignment, bias);
  }
  bool operator<(const MatmulKey &o) const { return tie() < o.tie(); }
};

struct MatmulGeometry {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t aLayout = nullptr, bLayout = nullptr,
                         cLayout = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool hasAlgo = false;
  ~MatmulGeometry();
};

class MatmulCache {
public:
  MatmulCache(cublasLtHandle_t lt, size_t workspaceBytes)
      : lt_(lt), workspaceBytes_(workspaceBytes) {}
  /// The plan for \p key, made on first use.
  Status get(const MatmulKey &key, const MatmulGeometry **plan);
  size_t size() const { return plans_.size(); }

private:
  cublasLtHandle_t lt_;
  size_t workspaceBytes_;
  std::map<MatmulKey, std::unique_ptr<MatmulGeometry>> plans_;
};

/// Elements of the bf16 copies a matmul instruction needs (both operands).
int64_t bf16ScratchElements(const KernelInfo &info);

/// A matmul whose only use is the add of a bias broadcast over its rows, run
/// as one cuBLASLt call with the BIAS epilogue. Operands: a, b, bias, then
/// the add's own two operands (for the fallback); results: the add's result,
/// then the matmul's (scratch for the fallback). Error when the matmul is
/// batched (not fusable).
Status prepareMatmulBias(const KernelInfo &matmul, DeviceFn unfusedMatmul,
                         DeviceFn unfusedAdd, DeviceFn *fn);

} // namespace cleave::rt::cuda

#endif // CLEAVE_RUNTIME_CUDA_MATMUL_CACHE_H

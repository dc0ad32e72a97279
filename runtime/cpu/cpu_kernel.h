//===- cpu_kernel.h - The CPU kernels' prepare functions --------*- C++ -*-===//
//
// Every kernel in kernels.def has a CPU "prepare" function. It sees an
// instruction the schema's validator (core/kernel_schema.cpp) has already
// checked: arity, dtypes and attributes, decoded into the kernel's Params,
// and the kernel's shape rule (core/shape_rules.h), which both backends
// share. prepare binds, once, at load time, the function that runs it; it
// refuses only what the CPU cannot run. Run-time functions see raw
// pointers: what could make them read or write out of bounds is the shape
// rules' to refuse, and data (indices) theirs to check as they run.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_CPU_CPU_KERNEL_H
#define CLEAVE_RUNTIME_CPU_CPU_KERNEL_H

#include "core/kernel_info.h"

#include <functional>
#include <memory>

namespace cleave::rt {

struct FusedProgram;

/// Element counts above which loops are split across OpenMP threads; below it
/// the fork/join overhead dominates.
constexpr int64_t kParallelThreshold = 32 * 1024;

/// Row-major C_i [m, n] = op(A_i) [m, k] * op(B_i) [k, n] for each of
/// \p batches matrices (A_i at a + aOffsets[i], B_i at b + bOffsets[i], C_i
/// at c + i * cStride; beta 0, or 1 with \p accumulate), as single-threaded
/// sgemm calls over tiles of every C_i that OpenMP's threads share.
/// OpenBLAS's own threads stay off (set to one on first use): its pool spun
/// against OpenMP's after every call, its split of a call follows the
/// thread count (and its edge tiles round otherwise than full ones), and
/// its OpenMP build is not safe to call from several ranks' threads. Tiles
/// chosen from the shape alone make every element's arithmetic independent
/// of the thread count.
void sgemmTiled(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                int64_t batches, const float *a, const int64_t *aOffsets,
                int64_t lda, const float *b, const int64_t *bOffsets,
                int64_t ldb, float *c, int64_t cStride, int64_t ldc,
                bool accumulate = false);

/// One single-threaded row-major sgemm, C = alpha op(A) op(B) + beta C, for
/// kernels that share out their own work among OpenMP's threads (BLAS set to
/// one thread first, as for sgemmTiled).
void sgemmSerial(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                 float alpha, const float *a, int64_t lda, const float *b,
                 int64_t ldb, float beta, float *c, int64_t ldc);

using PrepareFn = Status (*)(const KernelInfo &, KernelFn *);

#define CLEAVE_KERNEL(NAME)                                                    \
  Status prepare_##NAME(const KernelInfo &, KernelFn *);
#include "plan/kernels.def"

/// \p info's kernel run by its f32 loop (\p prepareF32) on widened copies
/// of its bf16 / f16 operands, its results rounded back once (widen.cpp).
Status prepareWidened(const KernelInfo &info, PrepareFn prepareF32,
                      KernelFn *fn);

/// matmul with bf16 / f16 operands and result, accumulated in f32: oneDNN,
/// or widened where oneDNN has no implementation (cpu_half.cpp).
Status prepareHalfMatmul(const KernelInfo &info, KernelFn *fn);

/// A strided walk over a result of some shape, reading up to 3 operands with
/// arbitrary (possibly 0 or negative) element strides. Dims are coalesced so
/// that the inner loop is as long as possible.
struct StridedLoop {
  static constexpr int kMaxOperands = 3;
  int numOperands = 0;
  /// Coalesced dims, outermost first; at least one dim (possibly of size 1).
  std::vector<int64_t> dims;
  /// Per operand, element strides per coalesced dim.
  std::vector<int64_t> strides[kMaxOperands];
  /// Element offsets added to every operand index.
  int64_t baseOffset[kMaxOperands] = {0, 0, 0};

  /// \p operandStrides[k] has one stride per dim of \p resultShape.
  static StridedLoop
  build(const std::vector<int64_t> &resultShape,
        const std::vector<std::vector<int64_t>> &operandStrides);

  int64_t innerSize() const { return dims.back(); }
  int64_t outerSize() const;
  int64_t innerStride(int k) const { return strides[k].back(); }

  /// Calls fn(row, outOffset, operandOffsets) for each row of the inner dim,
  /// in parallel when the total size is large. Offsets are element indices.
  template <typename Fn> void forEachRow(Fn fn) const {
    int64_t outer = outerSize();
    int64_t inner = innerSize();
    if (inner == 0)
      return;
    int64_t rank = static_cast<int64_t>(dims.size());
    int n = numOperands;
#pragma omp parallel for schedule(                                             \
        static) if (outer * inner > kParallelThreshold && outer > 1)
    for (int64_t row = 0; row < outer; ++row) {
      int64_t offsets[kMaxOperands];
      for (int k = 0; k < n; ++k)
        offsets[k] = baseOffset[k];
      int64_t rest = row;
      for (int64_t d = rank - 2; d >= 0; --d) {
        int64_t i = rest % dims[d];
        rest /= dims[d];
        for (int k = 0; k < n; ++k)
          offsets[k] += i * strides[k][d];
      }
      fn(row * inner, static_cast<const int64_t *>(offsets));
    }
  }
};

/// Copies elements of \p elemSize bytes: out (contiguous, loop's result
/// shape) from in through loop operand 0.
void stridedCopy(const StridedLoop &loop, size_t elemSize, const void *in,
                 void *out);

/// The CPU kernel of a fused_elementwise instruction: blocks of elements
/// through registers.
KernelFn fusedCpuKernel(std::shared_ptr<const FusedProgram> program);

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_CPU_CPU_KERNEL_H

//===- cpu_nn.h - Helpers of the CPU conv and pool kernels ------*- C++ -*-===//

#ifndef CLEAVE_RUNTIME_KERNELS_CONV_POOL_CPU_NN_H
#define CLEAVE_RUNTIME_KERNELS_CONV_POOL_CPU_NN_H

#include "core/nn_geometry.h"
#include "cpu/cpu_kernel.h"

#include <algorithm>
#include <memory>
#include <new>

namespace cleave::rt::nn {

/// Lays out the receptive fields of one group of \p images images (image
/// i's first channel at x + i * imageStride) side by side: row r of image i
/// at col + r * rowStride + i * oh * ow, [cg * kh * kw] rows.
void im2col(const ConvGeometry &p, const float *x, int64_t images,
            int64_t imageStride, int64_t cg, float *col, int64_t rowStride);

/// Where output rows are short (a late stage's 4x4 or 2x2 planes), per tap
/// (ki, kj) and output pixel, the input offset it reads within a plane, or
/// -1 for padding: one table lookup per element instead of a copy call per
/// run of a few elements. Empty where rows are long or the table large.
std::vector<int64_t> shortRowTaps(const ConvGeometry &p);

/// Output planes at least this wide (sgemm's tile columns) are written by
/// sgemm one image at a time, with no copy through a column matrix.
constexpr int64_t kDirectPlane = 256;

/// Images a convolution's batched column matrix covers at once: all of
/// them where the columns ([rows, images * plane]) fit the budget, at
/// least one.
int64_t imagesPerChunk(int64_t rows, int64_t plane, int64_t images);

/// sgemmTiled (cpu_kernel.h) of one matrix: C [m, n] = op(A) op(B).
void sgemmMatrix(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                 const float *a, int64_t lda, const float *b, int64_t ldb,
                 float *c, int64_t ldc, bool accumulate = false);

/// Uninitialised scratch of \p n floats (at least one); null when memory is
/// short. Column buffers are written whole before they are read, so
/// zeroing them would be a wasted pass.
inline std::unique_ptr<float[]> scratchFloats(int64_t n) {
  return std::unique_ptr<float[]>(
      new (std::nothrow) float[std::max<int64_t>(n, 1)]);
}
/// The error for a column buffer of \p rows x \p cols that did not fit.
inline Status columnsTooBig(int64_t rows, int64_t cols) {
  return Status::error("out of memory for a " + std::to_string(rows) + "x" +
                       std::to_string(cols) + " column buffer");
}

/// avg_pool2d's divisor of output (oy, ox) is rowTaps[oy] * colTaps[ox].
/// Per output row (i) and column (j) of a pool, the window taps [lo, hi)
/// that land inside the input: loops over them test nothing else.
struct PoolTaps {
  std::vector<int64_t> iLo, iHi, jLo, jHi;
};
PoolTaps poolTaps(const PoolGeometry &p);

void avgPoolTaps(const PoolGeometry &p, std::vector<int64_t> *rowTaps,
                 std::vector<int64_t> *colTaps);

} // namespace cleave::rt::nn

#endif // CLEAVE_RUNTIME_KERNELS_CONV_POOL_CPU_NN_H

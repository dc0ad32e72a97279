//===- cuda_softmax.cu - softmax and log_softmax on the GPU ---------------===//
//
// The CUDA counterparts of cpu_softmax.cpp beside it: rows over the softmax
// axis get a warp (up to kWarpRowLimit elements) or a block, the shift and
// scale as on the CPU (kernel_math.h).
//
//===----------------------------------------------------------------------===//

#include "core/kernel_math.h"
#include "cuda/block_reduce.cuh"

#include <algorithm>
#include <cmath>

namespace cleave::rt::cuda {
namespace {

//===----------------------------------------------------------------------===//
// Softmax and log_softmax
//===----------------------------------------------------------------------===//

/// The CPU's max shift: a row of -inf shifts by 0 (so it becomes 0/0, NaN,
/// like the reference frameworks); +inf stays.
__device__ float softmaxShift(float maxValue) {
  if (isinf(maxValue))
    return maxValue > 0 ? maxValue : 0.0f;
  return maxValue;
}

/// Softmax over contiguous rows of \p extent: a warp per row (several rows
/// per block) or a block per row.
template <bool kWarpRow>
__global__ void softmaxRowsKernel(const float *x, float *y, int64_t outer,
                                  int64_t extent, bool logSoftmax) {
  int64_t row;
  int lane, width;
  if (!rowOfThread<kWarpRow>(outer, &row, &lane, &width))
    return;
  const float *in = x + row * extent;
  float *out = y + row * extent;
  float maxValue = MaxOp::identity();
  for (int64_t i = lane; i < extent; i += width)
    maxValue = fmaxf(maxValue, in[i]);
  float shift = softmaxShift(groupAllReduce<kWarpRow, MaxOp>(maxValue));
  double sum = 0;
  for (int64_t i = lane; i < extent; i += width)
    sum += expf(in[i] - shift);
  sum = groupAllReduce<kWarpRow, SumOp>(sum);
  if (logSoftmax) {
    // (x - max) - log(sum), as on the CPU, to keep log(sum)'s digits.
    float logSum = static_cast<float>(log(sum));
    for (int64_t i = lane; i < extent; i += width)
      out[i] = (in[i] - shift) - logSum;
  } else {
    float scale = softmaxScale(sum);
    for (int64_t i = lane; i < extent; i += width)
      out[i] = expf(in[i] - shift) * scale;
  }
}

/// Softmax along a non-innermost axis: a thread per (outer, inner) column;
/// neighbouring threads read neighbouring inner elements.
__global__ void softmaxColumnsKernel(const float *x, float *y, int64_t outer,
                                     int64_t extent, int64_t inner,
                                     bool logSoftmax) {
  CLEAVE_GRID_LOOP(c, outer * inner) {
    int64_t o = c / inner;
    int64_t first = o * extent * inner + (c - o * inner);
    const float *in = x + first;
    float *out = y + first;
    float maxValue = MaxOp::identity();
    for (int64_t a = 0; a < extent; ++a)
      maxValue = fmaxf(maxValue, in[a * inner]);
    float shift = softmaxShift(maxValue);
    double sum = 0;
    for (int64_t a = 0; a < extent; ++a)
      sum += expf(in[a * inner] - shift);
    if (logSoftmax) {
      float logSum = static_cast<float>(log(sum));
      for (int64_t a = 0; a < extent; ++a)
        out[a * inner] = (in[a * inner] - shift) - logSum;
    } else {
      float scale = softmaxScale(sum);
      for (int64_t a = 0; a < extent; ++a)
        out[a * inner] = expf(in[a * inner] - shift) * scale;
    }
  }
}

Status prepareSoftmax(const KernelInfo &info, DeviceFn *fn, bool logSoftmax,
                      int64_t axis) {
  const char *name = logSoftmax ? "log_softmax" : "softmax";
  const TensorType &a = info.operand(0);
  int64_t outer = product(a.shape, 0, axis);
  int64_t extent = a.shape[axis];
  int64_t inner = product(a.shape, axis + 1, a.shape.size());
  bool warpRows = extent <= kWarpRowLimit;
  int64_t blocks = warpRows ? ceilDiv(outer, kBlock / kWarp) : outer;
  if (inner == 1 && blocks > kMaxGridX)
    return gridError(name, blocks);
  *fn = [=](const KernelArgs &args, Context &ctx) {
    const auto *x = static_cast<const float *>(args.operands[0]);
    auto *y = static_cast<float *>(args.results[0]);
    if (outer * extent * inner == 0)
      return Status::ok();
    auto grid = static_cast<unsigned>(blocks);
    if (inner != 1)
      softmaxColumnsKernel<<<gridFor(outer * inner), kBlock, 0, ctx.stream>>>(
          x, y, outer, extent, inner, logSoftmax);
    else if (warpRows)
      softmaxRowsKernel<true>
          <<<grid, kBlock, 0, ctx.stream>>>(x, y, outer, extent, logSoftmax);
    else
      softmaxRowsKernel<false>
          <<<grid, kBlock, 0, ctx.stream>>>(x, y, outer, extent, logSoftmax);
    return launchStatus(name);
  };
  return Status::ok();
}

} // namespace

Status prepare_softmax(const KernelInfo &info, DeviceFn *fn) {
  return prepareSoftmax(info, fn, /*logSoftmax=*/false,
                        info.params<schema::Kernel::k_softmax>().axis);
}
Status prepare_log_softmax(const KernelInfo &info, DeviceFn *fn) {
  return prepareSoftmax(info, fn, /*logSoftmax=*/true,
                        info.params<schema::Kernel::k_log_softmax>().axis);
}

} // namespace cleave::rt::cuda

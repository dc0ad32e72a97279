//===- cpu_softmax.cpp - softmax and log_softmax on the CPU ---------------===//
//
// Row-wise along the innermost axis, else with the inner dims as lanes;
// the row statistics are kernel_math.h's, which the CUDA kernels share.
//
//===----------------------------------------------------------------------===//

#include "core/kernel_math.h"
#include "core/vector_math.h"
#include "cpu/cpu_kernel.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace cleave::rt {

namespace {

void softmaxRows(const float *x, float *y, int64_t outer, int64_t extent,
                 bool logSoftmax) {
#pragma omp parallel for schedule(                                             \
        static) if (outer > 1 && outer * extent > kParallelThreshold)
  for (int64_t o = 0; o < outer; ++o) {
    const float *row = x + o * extent;
    float *out = y + o * extent;
    float maxValue = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < extent; ++i)
      maxValue = std::max(maxValue, row[i]);
    // A fully masked row (all -inf) must not compute -inf - -inf; with a
    // zero shift it becomes 0/0, NaN like the reference frameworks.
    if (std::isinf(maxValue))
      maxValue = maxValue > 0 ? maxValue : 0.0f;
    // The exponentials first (a loop per instruction set), then their sum
    // in order.
    expArray(row, maxValue, out, extent);
    double sum = 0;
    for (int64_t i = 0; i < extent; ++i)
      sum += out[i];
    if (logSoftmax) {
      // (x - max) - log(sum), not x - (max + log(sum)): with large logits
      // the sum of max and log(sum) would round away the log's digits.
      float logSum = static_cast<float>(std::log(sum));
      for (int64_t i = 0; i < extent; ++i)
        out[i] = (row[i] - maxValue) - logSum;
    } else {
      float scale = softmaxScale(sum);
      for (int64_t i = 0; i < extent; ++i)
        out[i] *= scale;
    }
  }
}

/// Softmax along a non-innermost axis: the inner dim is processed as lanes.
void softmaxStrided(const float *x, float *y, int64_t outer, int64_t extent,
                    int64_t inner, bool logSoftmax) {
#pragma omp parallel for schedule(                                             \
        static) if (outer > 1 && outer * extent * inner > kParallelThreshold)
  for (int64_t o = 0; o < outer; ++o) {
    const float *in = x + o * extent * inner;
    float *out = y + o * extent * inner;
    std::vector<float> maxValue(inner, -std::numeric_limits<float>::infinity());
    std::vector<double> sum(inner, 0.0);
    for (int64_t a = 0; a < extent; ++a)
      for (int64_t j = 0; j < inner; ++j)
        maxValue[j] = std::max(maxValue[j], in[a * inner + j]);
    for (int64_t j = 0; j < inner; ++j)
      if (std::isinf(maxValue[j]))
        maxValue[j] = maxValue[j] > 0 ? maxValue[j] : 0.0f;
    for (int64_t a = 0; a < extent; ++a) {
      for (int64_t j = 0; j < inner; ++j)
        out[a * inner + j] = vecExp(in[a * inner + j] - maxValue[j]);
      for (int64_t j = 0; j < inner; ++j)
        sum[j] += out[a * inner + j];
    }
    for (int64_t j = 0; j < inner; ++j)
      sum[j] = logSoftmax ? std::log(sum[j]) : 1.0 / sum[j];
    for (int64_t a = 0; a < extent; ++a)
      for (int64_t j = 0; j < inner; ++j) {
        if (logSoftmax)
          out[a * inner + j] =
              (in[a * inner + j] - maxValue[j]) - static_cast<float>(sum[j]);
        else
          out[a * inner + j] *= static_cast<float>(sum[j]);
      }
  }
}

Status prepareSoftmax(const KernelInfo &info, KernelFn *fn, bool logSoftmax,
                      int64_t axis) {
  const TensorType &a = info.operand(0);
  int64_t outer = product(a.shape, 0, axis);
  int64_t extent = a.shape[axis];
  int64_t inner = product(a.shape, axis + 1, a.shape.size());
  *fn = [=](const KernelArgs &args) {
    const auto *x = static_cast<const float *>(args.operands[0]);
    auto *y = static_cast<float *>(args.results[0]);
    if (outer * extent * inner == 0)
      return Status::ok();
    if (inner == 1)
      softmaxRows(x, y, outer, extent, logSoftmax);
    else
      softmaxStrided(x, y, outer, extent, inner, logSoftmax);
    return Status::ok();
  };
  return Status::ok();
}

} // namespace

Status prepare_softmax(const KernelInfo &info, KernelFn *fn) {
  return prepareSoftmax(info, fn, /*logSoftmax=*/false,
                        info.params<schema::Kernel::k_softmax>().axis);
}
Status prepare_log_softmax(const KernelInfo &info, KernelFn *fn) {
  return prepareSoftmax(info, fn, /*logSoftmax=*/true,
                        info.params<schema::Kernel::k_log_softmax>().axis);
}

} // namespace cleave::rt

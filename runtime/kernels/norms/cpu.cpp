//===- cpu.cpp - layer_norm and batch_norm on the CPU ---------------------===//
//
// One row (layer_norm) or one channel plane (batch_norm) per OpenMP
// iteration; the statistics are kernel_math.h's, which the CUDA kernels share.
//
//===----------------------------------------------------------------------===//

#include "core/kernel_math.h"
#include "cpu/cpu_kernel.h"

#include <algorithm>

namespace cleave::rt {

namespace {

/// step(k, i) for the n (at most 4) rows k of a group and their elements i:
/// a full group with its rows interleaved element by element (four
/// independent chains), a partial one row after row.
template <typename Step> void forGroup(int64_t n, int64_t inner, Step step) {
  if (n == 4) {
    for (int64_t i = 0; i < inner; ++i) {
      step(0, i);
      step(1, i);
      step(2, i);
      step(3, i);
    }
    return;
  }
  for (int64_t k = 0; k < n; ++k)
    for (int64_t i = 0; i < inner; ++i)
      step(k, i);
}

} // namespace

Status prepare_layer_norm(const KernelInfo &info, KernelFn *fn) {
  const TensorType &x = info.operand(0);
  const auto &attrs = info.params<schema::Kernel::k_layer_norm>();
  int64_t axis = attrs.axis;
  double epsilon = attrs.epsilon;
  int64_t outer = product(x.shape, 0, axis);
  int64_t inner = product(x.shape, axis, x.shape.size());
  float eps = static_cast<float>(epsilon);
  *fn = [outer, inner, eps](const KernelArgs &args) {
    const auto *x = static_cast<const float *>(args.operands[0]);
    const auto *scale = static_cast<const float *>(args.operands[1]);
    const auto *bias = static_cast<const float *>(args.operands[2]);
    auto *y = static_cast<float *>(args.results[0]);
    auto *meanOut = static_cast<float *>(args.results[1]);
    auto *invStdOut = static_cast<float *>(args.results[2]);
    // One row's normalized values and statistics, from its mean and
    // variance.
    auto writeRow = [&](int64_t o, float mean, float var) {
      const float *row = x + o * inner;
      float *out = y + o * inner;
      float invStd = invStdOf(var, eps);
      for (int64_t i = 0; i < inner; ++i) {
        float v = (row[i] - mean) * invStd;
        if (scale)
          v *= scale[i];
        if (bias)
          v += bias[i];
        out[i] = v;
      }
      if (meanOut)
        meanOut[o] = mean;
      if (invStdOut)
        invStdOut[o] = invStd;
    };
    // Rows in groups of four: the group's sums are interleaved so that
    // their dependent adds overlap, each row's in its own order (the bits
    // of one row at a time).
    constexpr int64_t kGroup = 4;
    int64_t groups = (outer + kGroup - 1) / kGroup;
#pragma omp parallel for schedule(                                             \
        static) if (groups > 1 && outer * inner > kParallelThreshold)
    for (int64_t gi = 0; gi < groups; ++gi) {
      int64_t first = gi * kGroup, n = std::min(kGroup, outer - first);
      const float *rows = x + first * inner;
      // Double accumulation; the statistics themselves are rounded to f32
      // before use, as they are also outputs.
      double sum[kGroup] = {}, sq[kGroup] = {};
      float means[kGroup] = {};
      auto add = [&](int64_t k, int64_t i) { sum[k] += rows[k * inner + i]; };
      auto square = [&](int64_t k, int64_t i) {
        double d = static_cast<double>(rows[k * inner + i]) - means[k];
        sq[k] += d * d;
      };
      forGroup(n, inner, add);
      for (int64_t k = 0; k < n; ++k)
        means[k] = rowMean(sum[k], inner);
      forGroup(n, inner, square);
      for (int64_t k = 0; k < n; ++k)
        writeRow(first + k, means[k], rowMean(sq[k], inner));
    }
    return Status::ok();
  };
  return Status::ok();
}

Status prepare_batch_norm(const KernelInfo &info, KernelFn *fn) {
  const TensorType &x = info.operand(0);
  int64_t channels = x.shape[1];
  double epsilon = info.params<schema::Kernel::k_batch_norm>().epsilon;
  int64_t n = x.shape[0];
  int64_t plane = product(x.shape, 2, x.shape.size());
  float eps = static_cast<float>(epsilon);
  *fn = [n, channels, plane, eps](const KernelArgs &args) {
    const auto *x = static_cast<const float *>(args.operands[0]);
    const auto *scale = static_cast<const float *>(args.operands[1]);
    const auto *bias = static_cast<const float *>(args.operands[2]);
    const auto *mean = static_cast<const float *>(args.operands[3]);
    const auto *var = static_cast<const float *>(args.operands[4]);
    auto *y = static_cast<float *>(args.results[0]);
    int64_t planes = n * channels;
#pragma omp parallel for schedule(                                             \
        static) if (planes > 1 && planes * plane > kParallelThreshold)
    for (int64_t i = 0; i < planes; ++i) {
      int64_t c = i % channels;
      float invStd = invStdOf(var[c], eps);
      float m = mean[c], s = scale[c], b = bias[c];
      const float *src = x + i * plane;
      float *dst = y + i * plane;
      for (int64_t j = 0; j < plane; ++j)
        dst[j] = (src[j] - m) * invStd * s + b;
    }
    return Status::ok();
  };
  return Status::ok();
}

} // namespace cleave::rt

//===- cpu.cpp - layer_norm and batch_norm on the CPU ---------------------===//
//
// One row (layer_norm) or one channel plane (batch_norm) per OpenMP
// iteration; the statistics are kernel_math.h's, which the CUDA kernels share.
// layer_norm_backward makes its three gradients in two passes (rows, then
// strips of columns) where the same formulas run op by op take a chain of
// elementwise kernels and five reductions, each a pass over [rows, width]
// f32 tensors.
//
//===----------------------------------------------------------------------===//

#include "core/convert.h"
#include "core/kernel_math.h"
#include "core/reduce_plan.h"
#include "core/vector_math.h"
#include "cpu/cpu_kernel.h"

#include <algorithm>
#include <omp.h>
#include <vector>

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

/// The \p n values of \p base from \p offset on as f32: where they are,
/// or (bf16) widened into \p buffer.
const float *rowOf(const void *base, bool bf16, int64_t offset, int64_t n,
                   std::vector<float> &buffer) {
  if (!bf16)
    return static_cast<const float *>(base) + offset;
  widenBf16Array(static_cast<const uint16_t *>(base) + offset, buffer.data(),
                 n);
  return buffer.data();
}

/// The mean of v[0, n) as the reduce kernel takes it over a contiguous run:
/// kSplitSums partial f64 sums for a run at least that long, else one.
inline float runMean(const float *v, int64_t n) {
  double acc = 0;
  if (n >= kSplitSums) {
    double part[kSplitSums] = {};
    addSplit(part, v, n);
    acc = combineSplit(part);
  } else {
    for (int64_t i = 0; i < n; ++i)
      acc += static_cast<double>(v[i]);
  }
  return static_cast<float>(acc / static_cast<double>(n));
}

/// One row of grad_x: xhat, g = grad * scale and g * xhat into the
/// buffers, their two means, then the gradient, each op rounded to f32.
CLEAVE_CLONES void layerNormGradRow(const float *x, const float *grad,
                                    const float *scale, float mean, float inv,
                                    int64_t n, float *xhat, float *g,
                                    float *gxhat, float *out) {
  for (int64_t i = 0; i < n; ++i) {
    xhat[i] = (x[i] - mean) * inv;
    g[i] = scale ? grad[i] * scale[i] : grad[i];
    gxhat[i] = g[i] * xhat[i];
  }
  float meanG = runMean(g, n), meanGX = runMean(gxhat, n);
  for (int64_t i = 0; i < n; ++i)
    out[i] = inv * ((g[i] - meanG) - xhat[i] * meanGX);
}

/// One row's strip of columns added into the scale's and bias's sums.
CLEAVE_CLONES void layerNormGradColumns(const float *x, const float *grad,
                                        float mean, float inv, int64_t n,
                                        double *scaleSum, double *biasSum) {
  for (int64_t l = 0; l < n; ++l) {
    float xhat = (x[l] - mean) * inv;
    scaleSum[l] += static_cast<double>(grad[l] * xhat);
    biasSum[l] += static_cast<double>(grad[l]);
  }
}

} // namespace

Status prepare_layer_norm_backward(const KernelInfo &info, KernelFn *fn) {
  const TensorType &x = info.operand(0);
  int64_t axis = info.params<schema::Kernel::k_layer_norm_backward>().axis;
  int64_t outer = product(x.shape, 0, axis);
  int64_t inner = product(x.shape, axis, x.shape.size());
  bool xHalf = x.dtype == DType::BF16;
  bool gHalf = info.operand(3).dtype == DType::BF16;
  *fn = [=](const KernelArgs &args) {
    const void *x = args.operands[0], *grad = args.operands[3];
    const auto *mean = static_cast<const float *>(args.operands[1]);
    const auto *inv = static_cast<const float *>(args.operands[2]);
    const auto *scale = static_cast<const float *>(args.operands[4]);
    auto *gx = static_cast<float *>(args.results[0]);
    auto *gScale = static_cast<float *>(args.results[1]);
    auto *gBias = static_cast<float *>(args.results[2]);
    bool parallel = outer * inner > kParallelThreshold;
    // Rows: grad_x, the row means in the reduce kernel's order.
#pragma omp parallel if (parallel && outer > 1)
    {
      std::vector<float> xs(inner), gs(inner), xhat(inner), g(inner),
          gxhat(inner);
#pragma omp for schedule(static)
      for (int64_t o = 0; o < outer; ++o)
        layerNormGradRow(rowOf(x, xHalf, o * inner, inner, xs),
                         rowOf(grad, gHalf, o * inner, inner, gs), scale,
                         mean[o], inv[o], inner, xhat.data(), g.data(),
                         gxhat.data(), gx + o * inner);
    }
    // Columns: each lane adds its rows in order in f64, as the reduce
    // kernel's kept lanes, in strips as wide as the threads allow.
    constexpr int64_t kMaxStrip = 2048;
    int64_t threads = parallel ? std::max(1, omp_get_max_threads()) : 1;
    int64_t strip = std::clamp<int64_t>(
        ((inner + threads - 1) / threads + 63) / 64 * 64, 256, kMaxStrip);
    int64_t strips = (inner + strip - 1) / strip;
#pragma omp parallel for schedule(static) if (parallel && strips > 1)
    for (int64_t t = 0; t < strips; ++t) {
      int64_t first = t * strip, width = std::min(strip, inner - first);
      std::vector<float> xs(width), gs(width);
      if (axis == 0) {
        // Nothing to sum over: the products and the gradient themselves,
        // as the formulas have no reduction there (a -0.0 stays -0.0,
        // which a sum from +0.0 would not keep).
        const float *xr = rowOf(x, xHalf, first, width, xs);
        const float *gr = rowOf(grad, gHalf, first, width, gs);
        for (int64_t l = 0; l < width; ++l) {
          gScale[first + l] = gr[l] * ((xr[l] - mean[0]) * inv[0]);
          gBias[first + l] = gr[l];
        }
        continue;
      }
      std::vector<double> scaleSum(width, 0.0), biasSum(width, 0.0);
      for (int64_t o = 0; o < outer; ++o) {
        int64_t at = o * inner + first;
        layerNormGradColumns(rowOf(x, xHalf, at, width, xs),
                             rowOf(grad, gHalf, at, width, gs), mean[o], inv[o],
                             width, scaleSum.data(), biasSum.data());
      }
      for (int64_t l = 0; l < width; ++l) {
        gScale[first + l] = static_cast<float>(scaleSum[l]);
        gBias[first + l] = static_cast<float>(biasSum[l]);
      }
    }
    return Status::ok();
  };
  return Status::ok();
}

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

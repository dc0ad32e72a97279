//===- cuda.cu - layer_norm and batch_norm on the GPU ---------------------===//
//
// The CUDA counterparts of cpu.cpp beside it, with the CPU's statistics
// (kernel_math.h): double sums, the mean rounded to f32 before the variance
// pass.
//
//===----------------------------------------------------------------------===//

#include "core/convert.h"
#include "core/kernel_math.h"
#include "cuda/block_reduce.cuh"

#include <algorithm>
#include <cmath>

namespace cleave::rt::cuda {
namespace {

//===----------------------------------------------------------------------===//
// Normalisation
//===----------------------------------------------------------------------===//

/// Layer norm over contiguous rows of \p inner. Statistics as on the CPU:
/// double sums, the mean rounded to f32 before the variance pass, and the
/// output products rounded one at a time (no FMA contraction), so y matches
/// the CPU's operation order.
template <bool kWarpRow>
__global__ void layerNormKernel(const float *x, const float *scale,
                                const float *bias, float *y, float *meanOut,
                                float *invStdOut, int64_t outer, int64_t inner,
                                float eps) {
  int64_t row;
  int lane, width;
  if (!rowOfThread<kWarpRow>(outer, &row, &lane, &width))
    return;
  const float *in = x + row * inner;
  float *out = y + row * inner;
  double sum = 0;
  for (int64_t i = lane; i < inner; i += width)
    sum += in[i];
  sum = groupAllReduce<kWarpRow, SumOp>(sum);
  float mean = rowMean(sum, inner);
  double sq = 0;
  for (int64_t i = lane; i < inner; i += width) {
    double d = static_cast<double>(in[i]) - mean;
    sq += d * d;
  }
  sq = groupAllReduce<kWarpRow, SumOp>(sq);
  float var = rowMean(sq, inner);
  float invStd = invStdOf(var, eps);
  for (int64_t i = lane; i < inner; i += width) {
    float v = __fmul_rn(in[i] - mean, invStd);
    if (scale)
      v = __fmul_rn(v, scale[i]);
    if (bias)
      v = __fadd_rn(v, bias[i]);
    out[i] = v;
  }
  if (lane != 0)
    return;
  if (meanOut)
    meanOut[row] = mean;
  if (invStdOut)
    invStdOut[row] = invStd;
}

__device__ float wide(float v) { return v; }
__device__ float wide(uint16_t v) { return bf16ToFloat(v); }

/// layer_norm_backward's grad_x, a row per warp or block: the two row
/// means in f64, then the gradient, each product rounded (no FMA).
template <bool kWarpRow, typename TX, typename TG>
__global__ void layerNormGradKernel(const TX *x, const float *mean,
                                    const float *inv, const TG *grad,
                                    const float *scale, float *gx,
                                    int64_t outer, int64_t inner) {
  int64_t row;
  int lane, width;
  if (!rowOfThread<kWarpRow>(outer, &row, &lane, &width))
    return;
  const TX *xr = x + row * inner;
  const TG *gr = grad + row * inner;
  float m = mean[row], r = inv[row];
  auto values = [&](int64_t i, float *xhat, float *g) {
    *xhat = __fmul_rn(wide(xr[i]) - m, r);
    *g = scale ? __fmul_rn(wide(gr[i]), scale[i]) : wide(gr[i]);
  };
  double sumG = 0, sumGX = 0;
  for (int64_t i = lane; i < inner; i += width) {
    float xhat, g;
    values(i, &xhat, &g);
    sumG += g;
    sumGX += __fmul_rn(g, xhat);
  }
  sumG = groupAllReduce<kWarpRow, SumOp>(sumG);
  sumGX = groupAllReduce<kWarpRow, SumOp>(sumGX);
  auto meanG = static_cast<float>(sumG / static_cast<double>(inner));
  auto meanGX = static_cast<float>(sumGX / static_cast<double>(inner));
  for (int64_t i = lane; i < inner; i += width) {
    float xhat, g;
    values(i, &xhat, &g);
    gx[row * inner + i] =
        __fmul_rn(r, __fsub_rn(__fsub_rn(g, meanG), __fmul_rn(xhat, meanGX)));
  }
}

/// grad_scale and grad_bias: a thread per column, its rows in order (with
/// no dims to sum over, \p direct, the values themselves, as on the CPU).
template <typename TX, typename TG>
__global__ void
layerNormGradColumnsKernel(const TX *x, const float *mean, const float *inv,
                           const TG *grad, float *gScale, float *gBias,
                           int64_t outer, int64_t inner, bool direct) {
  CLEAVE_GRID_LOOP(l, inner) {
    if (direct) {
      float g = wide(grad[l]);
      gScale[l] = __fmul_rn(g, __fmul_rn(wide(x[l]) - mean[0], inv[0]));
      gBias[l] = g;
      continue;
    }
    double s = 0, b = 0;
    for (int64_t o = 0; o < outer; ++o) {
      float g = wide(grad[o * inner + l]);
      float xhat = __fmul_rn(wide(x[o * inner + l]) - mean[o], inv[o]);
      s += __fmul_rn(g, xhat);
      b += g;
    }
    gScale[l] = static_cast<float>(s);
    gBias[l] = static_cast<float>(b);
  }
}

template <typename TX, typename TG>
Status launchLayerNormGrad(const KernelArgs &args, Context &ctx, int64_t outer,
                           int64_t inner, unsigned grid, bool warpRows,
                           bool direct) {
  const auto *x = static_cast<const TX *>(args.operands[0]);
  const auto *mean = static_cast<const float *>(args.operands[1]);
  const auto *inv = static_cast<const float *>(args.operands[2]);
  const auto *grad = static_cast<const TG *>(args.operands[3]);
  const auto *scale = static_cast<const float *>(args.operands[4]);
  auto *gx = static_cast<float *>(args.results[0]);
  // No rows: no grad_x, and grad_scale and grad_bias are zeros (sums of
  // nothing), which the column kernel writes.
  if (outer > 0 && warpRows)
    layerNormGradKernel<true><<<grid, kBlock, 0, ctx.stream>>>(
        x, mean, inv, grad, scale, gx, outer, inner);
  else if (outer > 0)
    layerNormGradKernel<false><<<grid, kBlock, 0, ctx.stream>>>(
        x, mean, inv, grad, scale, gx, outer, inner);
  layerNormGradColumnsKernel<<<gridFor(inner), kBlock, 0, ctx.stream>>>(
      x, mean, inv, grad, static_cast<float *>(args.results[1]),
      static_cast<float *>(args.results[2]), outer, inner, direct);
  return launchStatus("layer_norm_backward");
}

/// ((x - mean) * invStd) * scale + bias, rounded step by step like the CPU.
__device__ float batchNormValue(float x, float mean, float invStd, float scale,
                                float bias) {
  return __fadd_rn(__fmul_rn(__fmul_rn(x - mean, invStd), scale), bias);
}

/// Batch norm with planes of at least half a block: blockIdx.y walks the
/// (n, c) planes, so the channel and its inverse std are found once per
/// plane instead of by two 64-bit divisions per element.
__global__ void batchNormPlanesKernel(const float *x, const float *scale,
                                      const float *bias, const float *mean,
                                      const float *var, float *y,
                                      int64_t planes, int64_t channels,
                                      int64_t plane, float eps) {
  for (int64_t p = blockIdx.y; p < planes; p += gridDim.y) {
    int64_t c = p % channels;
    float invStd = invStdOf(var[c], eps);
    float m = mean[c], s = scale[c], b = bias[c];
    const float *src = x + p * plane;
    float *dst = y + p * plane;
    for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < plane;
         j += int64_t(gridDim.x) * blockDim.x)
      dst[j] = batchNormValue(src[j], m, invStd, s, b);
  }
}

/// Batch norm with small planes: a thread per element.
__global__ void batchNormFlatKernel(const float *x, const float *scale,
                                    const float *bias, const float *mean,
                                    const float *var, float *y, int64_t total,
                                    int64_t channels, int64_t plane,
                                    float eps) {
  CLEAVE_GRID_LOOP(i, total) {
    int64_t c = (i / plane) % channels;
    float invStd = invStdOf(var[c], eps);
    y[i] = batchNormValue(x[i], mean[c], invStd, scale[c], bias[c]);
  }
}

} // namespace

Status prepare_layer_norm(const KernelInfo &info, DeviceFn *fn) {
  const TensorType &x = info.operand(0);
  const auto &attrs = info.params<schema::Kernel::k_layer_norm>();
  int64_t axis = attrs.axis;
  double epsilon = attrs.epsilon;
  int64_t outer = product(x.shape, 0, axis);
  int64_t inner = product(x.shape, axis, x.shape.size());
  bool warpRows = inner <= kWarpRowLimit;
  int64_t blocks = warpRows ? ceilDiv(outer, kBlock / kWarp) : outer;
  if (blocks > kMaxGridX)
    return gridError("layer_norm", blocks);
  float eps = static_cast<float>(epsilon);
  *fn = [=](const KernelArgs &args, Context &ctx) {
    if (outer == 0)
      return Status::ok();
    const auto *x = static_cast<const float *>(args.operands[0]);
    const auto *scale = static_cast<const float *>(args.operands[1]);
    const auto *bias = static_cast<const float *>(args.operands[2]);
    auto *y = static_cast<float *>(args.results[0]);
    auto *meanOut = static_cast<float *>(args.results[1]);
    auto *invStdOut = static_cast<float *>(args.results[2]);
    auto grid = static_cast<unsigned>(blocks);
    if (warpRows)
      layerNormKernel<true><<<grid, kBlock, 0, ctx.stream>>>(
          x, scale, bias, y, meanOut, invStdOut, outer, inner, eps);
    else
      layerNormKernel<false><<<grid, kBlock, 0, ctx.stream>>>(
          x, scale, bias, y, meanOut, invStdOut, outer, inner, eps);
    return launchStatus("layer_norm");
  };
  return Status::ok();
}

Status prepare_layer_norm_backward(const KernelInfo &info, DeviceFn *fn) {
  const TensorType &x = info.operand(0);
  int64_t axis = info.params<schema::Kernel::k_layer_norm_backward>().axis;
  int64_t outer = product(x.shape, 0, axis);
  int64_t inner = product(x.shape, axis, x.shape.size());
  bool warpRows = inner <= kWarpRowLimit;
  int64_t blocks = warpRows ? ceilDiv(outer, kBlock / kWarp) : outer;
  if (blocks > kMaxGridX)
    return gridError("layer_norm_backward", blocks);
  bool xHalf = x.dtype == DType::BF16;
  bool gHalf = info.operand(3).dtype == DType::BF16;
  *fn = [=](const KernelArgs &args, Context &ctx) {
    if (inner == 0)
      return Status::ok();
    auto grid = static_cast<unsigned>(blocks);
    bool direct = axis == 0;
    if (xHalf && gHalf)
      return launchLayerNormGrad<uint16_t, uint16_t>(args, ctx, outer, inner,
                                                     grid, warpRows, direct);
    if (xHalf)
      return launchLayerNormGrad<uint16_t, float>(args, ctx, outer, inner, grid,
                                                  warpRows, direct);
    if (gHalf)
      return launchLayerNormGrad<float, uint16_t>(args, ctx, outer, inner, grid,
                                                  warpRows, direct);
    return launchLayerNormGrad<float, float>(args, ctx, outer, inner, grid,
                                             warpRows, direct);
  };
  return Status::ok();
}

Status prepare_batch_norm(const KernelInfo &info, DeviceFn *fn) {
  const TensorType &x = info.operand(0);
  double epsilon = info.params<schema::Kernel::k_batch_norm>().epsilon;
  int64_t channels = x.shape[1];
  int64_t planes = x.shape[0] * channels;
  int64_t plane = product(x.shape, 2, x.shape.size());
  float eps = static_cast<float>(epsilon);
  *fn = [=](const KernelArgs &args, Context &ctx) {
    if (planes * plane == 0)
      return Status::ok();
    const auto *x = static_cast<const float *>(args.operands[0]);
    const auto *scale = static_cast<const float *>(args.operands[1]);
    const auto *bias = static_cast<const float *>(args.operands[2]);
    const auto *mean = static_cast<const float *>(args.operands[3]);
    const auto *var = static_cast<const float *>(args.operands[4]);
    auto *y = static_cast<float *>(args.results[0]);
    // Planes narrower than half a block would idle most of its threads.
    if (plane >= kBlock / 2) {
      dim3 grid(static_cast<unsigned>(
                    std::min<int64_t>(ceilDiv(plane, kBlock), kTargetBlocks)),
                static_cast<unsigned>(std::min(planes, kMaxGridY)));
      batchNormPlanesKernel<<<grid, kBlock, 0, ctx.stream>>>(
          x, scale, bias, mean, var, y, planes, channels, plane, eps);
    } else {
      batchNormFlatKernel<<<gridFor(planes * plane), kBlock, 0, ctx.stream>>>(
          x, scale, bias, mean, var, y, planes * plane, channels, plane, eps);
    }
    return launchStatus("batch_norm");
  };
  return Status::ok();
}

} // namespace cleave::rt::cuda

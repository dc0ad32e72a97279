//===- cuda.cu - Convolution and pooling kernels and their adjoints -------===//
//
// Direct kernels in place of the CPU backend's im2col + sgemm (cpu.cpp,
// cpu_backward.cpp): the models are small CNNs, and a direct kernel needs no
// column scratch, which a captured step could not allocate. The geometry comes
// from the readers in runtime/core/nn_geometry.{h,cpp}, so both
// backends agree on it by construction.
//
// The adjoints gather rather than scatter: each thread owns one element of the
// gradient it writes and sums the contributions in a fixed order, so results
// are deterministic without atomics. The pool adjoints add in the order the
// CPU kernels do (windows row-major), which makes them bit-identical to the
// CPU; the convolutions sum in the CPU's tap order, but sgemm's internal order
// is unknowable, so they agree to f32 rounding. conv2d_backward_filter reduces
// over images and output positions with one block per filter element.
//
//===----------------------------------------------------------------------===//

#include "core/nn_geometry.h"
#include "cuda/cuda_common.cuh"

#include <limits>

namespace cleave::rt::cuda {
namespace {

using nn::ConvGeometry;
using nn::PoolGeometry;

//===----------------------------------------------------------------------===//
// Window arithmetic
//===----------------------------------------------------------------------===//

/// nn::validOutputRange on the device: the range [*lo, *hi) of o in [0, out)
/// with o * stride + offset inside [0, size).
__device__ inline void outputRange(int64_t offset, int64_t stride, int64_t size,
                                   int64_t out, int64_t *lo, int64_t *hi) {
  int64_t first = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  int64_t num = size - 1 - offset;
  int64_t last = num < 0 ? -1 : num / stride;
  int64_t l = first < out ? first : out;
  int64_t h = last + 1 < out ? last + 1 : out;
  *lo = l;
  *hi = h > l ? h : l;
}

/// nn::tapsInside on the device.
__device__ inline int64_t tapsInside(int64_t start, int64_t kernel,
                                     int64_t dilation, int64_t lo, int64_t hi) {
  int64_t first, last;
  outputRange(start - lo, dilation, hi - lo, kernel, &first, &last);
  return last - first;
}

/// The window o in [0, out) whose tap k, at o * stride - pad + k * dilation,
/// is input position \p i; -1 if none. Distinct taps k give distinct windows,
/// and a larger k an earlier one.
__device__ inline int64_t windowOf(int64_t i, int64_t k, int64_t stride,
                                   int64_t pad, int64_t dilation, int64_t out) {
  int64_t t = i + pad - k * dilation;
  if (t < 0 || t % stride != 0)
    return -1;
  int64_t o = t / stride;
  return o < out ? o : -1;
}

/// nn::avgPoolTaps' factors: avg_pool2d divides window (oy, ox) by
/// rowTaps(oy) * colTaps(ox).
__device__ inline int64_t rowTaps(const PoolGeometry &p, int64_t oy) {
  const nn::Window win = p.win;
  int64_t start = oy * win.strideH - win.padTop;
  return p.countIncludePad ? tapsInside(start, win.kh, win.dilationH,
                                        -win.padTop, p.h + win.padBottom)
                           : tapsInside(start, win.kh, win.dilationH, 0, p.h);
}

__device__ inline int64_t colTaps(const PoolGeometry &p, int64_t ox) {
  const nn::Window win = p.win;
  int64_t start = ox * win.strideW - win.padLeft;
  return p.countIncludePad ? tapsInside(start, win.kw, win.dilationW,
                                        -win.padLeft, p.w + win.padRight)
                           : tapsInside(start, win.kw, win.dilationW, 0, p.w);
}

/// Sum of \p v over the block (blockDim.x == kBlock), valid in thread 0. The
/// tree has a fixed shape, so the sum does not depend on scheduling.
__device__ inline float blockSum(float v, float *scratch) {
  for (int offset = 16; offset > 0; offset /= 2)
    v += __shfl_down_sync(0xffffffffu, v, offset);
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0)
    scratch[warp] = v;
  __syncthreads();
  float total = 0.0f;
  if (warp == 0) {
    total = lane < kBlock / 32 ? scratch[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset /= 2)
      total += __shfl_down_sync(0xffffffffu, total, offset);
  }
  // The next call's writes to scratch must wait for warp 0's reads.
  __syncthreads();
  return total;
}

//===----------------------------------------------------------------------===//
// conv2d and its adjoints
//===----------------------------------------------------------------------===//

/// One thread per output element y[img, f, oy, ox].
__global__ void conv2dKernel(ConvGeometry p, const float *x,
                             const float *weight, const float *bias, float *y,
                             int64_t total) {
  const nn::Window win = p.win;
  int64_t cg = p.c / p.groups, fg = p.f / p.groups;
  int64_t hw = p.h * p.w;
  CLEAVE_GRID_LOOP(idx, total) {
    int64_t ox = idx % p.ow, rest = idx / p.ow;
    int64_t oy = rest % p.oh;
    rest /= p.oh;
    int64_t f = rest % p.f, img = rest / p.f;
    const float *xg = x + (img * p.c + f / fg * cg) * hw;
    const float *wf = weight + f * cg * win.kh * win.kw;
    int64_t iy0 = oy * win.strideH - win.padTop;
    int64_t ix0 = ox * win.strideW - win.padLeft;
    float acc = 0.0f;
    // Taps in the padding multiply a zero, as im2col's zeros do on the CPU
    // (so that an infinite weight still yields NaN there).
    for (int64_t ci = 0; ci < cg; ++ci) {
      const float *plane = xg + ci * hw;
      for (int64_t ki = 0; ki < win.kh; ++ki) {
        int64_t iy = iy0 + ki * win.dilationH;
        bool rowInside = iy >= 0 && iy < p.h;
        for (int64_t kj = 0; kj < win.kw; ++kj) {
          int64_t ix = ix0 + kj * win.dilationW;
          float v =
              rowInside && ix >= 0 && ix < p.w ? plane[iy * p.w + ix] : 0.0f;
          acc += *wf++ * v;
        }
      }
    }
    // The CPU adds the bias after the whole product, as here.
    if (bias)
      acc += bias[f];
    y[idx] = acc;
  }
}

/// One thread per input-gradient element dx[img, c, iy, ix]: sums, per tap
/// (ki, kj) that some output position reads it through, the filters of its
/// group (col = W^T dY then col2im on the CPU, in the same tap order).
__global__ void conv2dBackwardInputKernel(ConvGeometry p, const float *dy,
                                          const float *weight, float *dx,
                                          int64_t total) {
  const nn::Window win = p.win;
  int64_t cg = p.c / p.groups, fg = p.f / p.groups;
  int64_t taps = win.kh * win.kw;
  int64_t plane = p.oh * p.ow;
  int64_t filterStride = cg * taps;
  CLEAVE_GRID_LOOP(idx, total) {
    int64_t ix = idx % p.w, rest = idx / p.w;
    int64_t iy = rest % p.h;
    rest /= p.h;
    int64_t c = rest % p.c, img = rest / p.c;
    int64_t g = c / cg, cl = c % cg;
    const float *dyg = dy + (img * p.f + g * fg) * plane;
    // Weight [g * fg, cl, 0, 0]; filter fl of the group is fl * filterStride
    // further.
    const float *wg = weight + (g * fg * cg + cl) * taps;
    float acc = 0.0f;
    for (int64_t ki = 0; ki < win.kh; ++ki) {
      int64_t oy =
          windowOf(iy, ki, win.strideH, win.padTop, win.dilationH, p.oh);
      if (oy < 0)
        continue;
      for (int64_t kj = 0; kj < win.kw; ++kj) {
        int64_t ox =
            windowOf(ix, kj, win.strideW, win.padLeft, win.dilationW, p.ow);
        if (ox < 0)
          continue;
        const float *wk = wg + ki * win.kw + kj;
        const float *gk = dyg + oy * p.ow + ox;
        float sum = 0.0f;
        for (int64_t fl = 0; fl < fg; ++fl)
          sum += wk[fl * filterStride] * gk[fl * plane];
        acc += sum;
      }
    }
    dx[idx] = acc;
  }
}

/// One block per filter element dw[f, cl, ki, kj]: each thread sums a strided
/// share of the output positions of every image, then the block reduces.
__global__ void conv2dBackwardFilterKernel(ConvGeometry p, const float *x,
                                           const float *dy, float *dw,
                                           int64_t total) {
  __shared__ float scratch[kBlock / 32];
  const nn::Window win = p.win;
  int64_t cg = p.c / p.groups, fg = p.f / p.groups;
  int64_t hw = p.h * p.w;
  // readConvGeometry bounds the output plane to int32, so positions can be
  // split into rows and columns with (cheaper) 32-bit division.
  int64_t plane = p.oh * p.ow;
  int ow = static_cast<int>(p.ow);
  // e depends only on the block, so every thread of a block takes the same
  // iterations and reaches blockSum's barriers together.
  for (int64_t e = blockIdx.x; e < total; e += gridDim.x) {
    int64_t kj = e % win.kw, rest = e / win.kw;
    int64_t ki = rest % win.kh;
    rest /= win.kh;
    int64_t cl = rest % cg, f = rest / cg;
    int64_t c = f / fg * cg + cl;
    int64_t yOff = ki * win.dilationH - win.padTop;
    int64_t xOff = kj * win.dilationW - win.padLeft;
    float acc = 0.0f;
    for (int64_t img = 0; img < p.n; ++img) {
      const float *xi = x + (img * p.c + c) * hw;
      const float *gi = dy + (img * p.f + f) * plane;
      for (int64_t pos = threadIdx.x; pos < plane; pos += kBlock) {
        int oy = static_cast<int>(pos) / ow;
        int ox = static_cast<int>(pos) - oy * ow;
        int64_t iy = oy * win.strideH + yOff;
        int64_t ix = ox * win.strideW + xOff;
        // Zero in the padding, as im2col's (a non-finite gradient still
        // yields NaN there).
        float v = iy >= 0 && iy < p.h && ix >= 0 && ix < p.w ? xi[iy * p.w + ix]
                                                             : 0.0f;
        acc += gi[pos] * v;
      }
    }
    acc = blockSum(acc, scratch);
    if (threadIdx.x == 0)
      dw[e] = acc;
  }
}

//===----------------------------------------------------------------------===//
// Pools and their adjoints
//===----------------------------------------------------------------------===//

/// One thread per output element; the CPU's loop, NaN propagating.
__global__ void maxPoolKernel(PoolGeometry p, const float *x, float *y,
                              int64_t total) {
  const nn::Window win = p.win;
  CLEAVE_GRID_LOOP(idx, total) {
    int64_t ox = idx % p.ow, rest = idx / p.ow;
    int64_t oy = rest % p.oh, pl = rest / p.oh;
    const float *src = x + pl * p.h * p.w;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < win.kh; ++i) {
      int64_t iy = oy * win.strideH - win.padTop + i * win.dilationH;
      if (iy < 0 || iy >= p.h)
        continue;
      for (int64_t j = 0; j < win.kw; ++j) {
        int64_t ix = ox * win.strideW - win.padLeft + j * win.dilationW;
        if (ix < 0 || ix >= p.w)
          continue;
        float v = src[iy * p.w + ix];
        if (v > m || isnan(v))
          m = v;
      }
    }
    y[idx] = m;
  }
}

/// One thread per output element; the CPU's loop and divisor.
__global__ void avgPoolKernel(PoolGeometry p, const float *x, float *y,
                              int64_t total) {
  const nn::Window win = p.win;
  CLEAVE_GRID_LOOP(idx, total) {
    int64_t ox = idx % p.ow, rest = idx / p.ow;
    int64_t oy = rest % p.oh, pl = rest / p.oh;
    const float *src = x + pl * p.h * p.w;
    float sum = 0.0f;
    for (int64_t i = 0; i < win.kh; ++i) {
      int64_t iy = oy * win.strideH - win.padTop + i * win.dilationH;
      if (iy < 0 || iy >= p.h)
        continue;
      for (int64_t j = 0; j < win.kw; ++j) {
        int64_t ix = ox * win.strideW - win.padLeft + j * win.dilationW;
        if (ix >= 0 && ix < p.w)
          sum += src[iy * p.w + ix];
      }
    }
    int64_t divisor = rowTaps(p, oy) * colTaps(p, ox);
    // No counted taps (only with ceil-mode output sizes): 0, not 0/0.
    y[idx] = divisor ? sum / static_cast<float>(divisor) : 0.0f;
  }
}

/// One thread per input element dx[pl, iy, ix]: adds the gradient of every
/// window whose argmax it is. The argmax is the CPU's: the first tap inside
/// the input, row-major in the window, holding the maximum, NaN counting as
/// the maximum. Windows are visited in the CPU's order (oy, then ox,
/// ascending), so the sum is bit-identical.
__global__ void maxPoolBackwardKernel(PoolGeometry p, const float *x,
                                      const float *dy, float *dx,
                                      int64_t total) {
  const nn::Window win = p.win;
  int64_t hw = p.h * p.w, plane = p.oh * p.ow;
  CLEAVE_GRID_LOOP(idx, total) {
    int64_t ix = idx % p.w, rest = idx / p.w;
    int64_t iy = rest % p.h, pl = rest / p.h;
    const float *src = x + pl * hw;
    const float *grad = dy + pl * plane;
    float acc = 0.0f;
    // Descending taps visit ascending windows.
    for (int64_t i = win.kh - 1; i >= 0; --i) {
      int64_t oy =
          windowOf(iy, i, win.strideH, win.padTop, win.dilationH, p.oh);
      if (oy < 0)
        continue;
      int64_t iy0 = oy * win.strideH - win.padTop;
      int64_t iLo, iHi;
      outputRange(iy0, win.dilationH, p.h, win.kh, &iLo, &iHi);
      for (int64_t j = win.kw - 1; j >= 0; --j) {
        int64_t ox =
            windowOf(ix, j, win.strideW, win.padLeft, win.dilationW, p.ow);
        if (ox < 0)
          continue;
        int64_t ix0 = ox * win.strideW - win.padLeft;
        int64_t jLo, jHi;
        outputRange(ix0, win.dilationW, p.w, win.kw, &jLo, &jHi);
        int64_t best = -1;
        float m = 0.0f;
        for (int64_t a = iLo; a < iHi; ++a) {
          int64_t row = (iy0 + a * win.dilationH) * p.w;
          for (int64_t b = jLo; b < jHi; ++b) {
            int64_t at = row + ix0 + b * win.dilationW;
            float v = src[at];
            if (best < 0 || v > m || (isnan(v) && !isnan(m))) {
              best = at;
              m = v;
            }
          }
        }
        if (best == iy * p.w + ix)
          acc += grad[oy * p.ow + ox];
      }
    }
    dx[idx] = acc;
  }
}

/// One thread per input element dx[pl, iy, ix]: adds each covering window's
/// gradient over its divisor, in the CPU's window order (bit-identical).
__global__ void avgPoolBackwardKernel(PoolGeometry p, const float *dy,
                                      float *dx, int64_t total) {
  const nn::Window win = p.win;
  int64_t plane = p.oh * p.ow;
  CLEAVE_GRID_LOOP(idx, total) {
    int64_t ix = idx % p.w, rest = idx / p.w;
    int64_t iy = rest % p.h, pl = rest / p.h;
    const float *grad = dy + pl * plane;
    float acc = 0.0f;
    // Descending taps visit ascending windows.
    for (int64_t i = win.kh - 1; i >= 0; --i) {
      int64_t oy =
          windowOf(iy, i, win.strideH, win.padTop, win.dilationH, p.oh);
      if (oy < 0)
        continue;
      int64_t rows = rowTaps(p, oy);
      for (int64_t j = win.kw - 1; j >= 0; --j) {
        int64_t ox =
            windowOf(ix, j, win.strideW, win.padLeft, win.dilationW, p.ow);
        if (ox < 0)
          continue;
        int64_t divisor = rows * colTaps(p, ox);
        // avg_pool2d yields 0 for a window with no counted taps.
        if (divisor == 0)
          continue;
        acc += grad[oy * p.ow + ox] / static_cast<float>(divisor);
      }
    }
    dx[idx] = acc;
  }
}

/// Blocks for conv2dBackwardFilterKernel: one per filter element, capped like
/// gridFor (the kernel loops over the rest).
unsigned blocksFor(int64_t elements) {
  return static_cast<unsigned>(
      elements < 1 ? 1 : (elements > 65535 * 8 ? 65535 * 8 : elements));
}

Status preparePool(const KernelInfo &info, DeviceFn *fn, bool isMax) {
  PoolGeometry p;
  if (Status s = nn::readPoolGeometry(info, info.operand(0), info.result(0),
                                      "operand", "result", isMax, &p);
      !s)
    return s;
  int64_t total = p.planes * p.oh * p.ow;
  *fn = [p, total, isMax](const KernelArgs &args, Context &ctx) {
    if (total == 0)
      return Status::ok();
    const auto *x = static_cast<const float *>(args.operands[0]);
    auto *y = static_cast<float *>(args.results[0]);
    if (isMax) {
      maxPoolKernel<<<gridFor(total), kBlock, 0, ctx.stream>>>(p, x, y, total);
      return launchStatus("max_pool2d");
    }
    avgPoolKernel<<<gridFor(total), kBlock, 0, ctx.stream>>>(p, x, y, total);
    return launchStatus("avg_pool2d");
  };
  return Status::ok();
}

} // namespace

Status prepare_conv2d(const KernelInfo &info, DeviceFn *fn) {
  if (info.result(0).dtype != DType::F32)
    return halfPlanRefused("conv2d");
  ConvGeometry p;
  if (Status s = nn::readConvGeometry(info, info.operand(0), info.operand(1),
                                      info.result(0),
                                      {"input", "weight", "result"}, &p);
      !s)
    return s;
  int64_t total = p.n * p.f * p.oh * p.ow;
  *fn = [p, total](const KernelArgs &args, Context &ctx) {
    if (total == 0)
      return Status::ok();
    conv2dKernel<<<gridFor(total), kBlock, 0, ctx.stream>>>(
        p, static_cast<const float *>(args.operands[0]),
        static_cast<const float *>(args.operands[1]),
        static_cast<const float *>(args.operands[2]),
        static_cast<float *>(args.results[0]), total);
    return launchStatus("conv2d");
  };
  return Status::ok();
}

Status prepare_conv2d_backward_input(const KernelInfo &info, DeviceFn *fn) {
  if (info.result(0).dtype != DType::F32)
    return halfPlanRefused("conv2d_backward_input");
  // Operands (grad_out, weight); the result is grad_in.
  ConvGeometry p;
  if (Status s = nn::readConvGeometry(
          info, info.result(0), info.operand(1), info.operand(0),
          {"grad_in (result)", "weight", "grad_out"}, &p);
      !s)
    return s;
  int64_t total = p.n * p.c * p.h * p.w;
  *fn = [p, total](const KernelArgs &args, Context &ctx) {
    if (total == 0)
      return Status::ok();
    conv2dBackwardInputKernel<<<gridFor(total), kBlock, 0, ctx.stream>>>(
        p, static_cast<const float *>(args.operands[0]),
        static_cast<const float *>(args.operands[1]),
        static_cast<float *>(args.results[0]), total);
    return launchStatus("conv2d_backward_input");
  };
  return Status::ok();
}

Status prepare_conv2d_backward_filter(const KernelInfo &info, DeviceFn *fn) {
  if (info.result(0).dtype != DType::F32)
    return halfPlanRefused("conv2d_backward_filter");
  // Operands (input, grad_out); the result is grad_w.
  ConvGeometry p;
  if (Status s = nn::readConvGeometry(
          info, info.operand(0), info.result(0), info.operand(1),
          {"input", "grad_w (result)", "grad_out"}, &p);
      !s)
    return s;
  int64_t total = p.f * (p.c / p.groups) * p.win.kh * p.win.kw;
  *fn = [p, total](const KernelArgs &args, Context &ctx) {
    if (total == 0)
      return Status::ok();
    conv2dBackwardFilterKernel<<<blocksFor(total), kBlock, 0, ctx.stream>>>(
        p, static_cast<const float *>(args.operands[0]),
        static_cast<const float *>(args.operands[1]),
        static_cast<float *>(args.results[0]), total);
    return launchStatus("conv2d_backward_filter");
  };
  return Status::ok();
}

Status prepare_max_pool2d(const KernelInfo &info, DeviceFn *fn) {
  return preparePool(info, fn, /*isMax=*/true);
}

Status prepare_avg_pool2d(const KernelInfo &info, DeviceFn *fn) {
  return preparePool(info, fn, /*isMax=*/false);
}

Status prepare_max_pool2d_backward(const KernelInfo &info, DeviceFn *fn) {
  // Operands (input, grad_out); the result is grad_in, shaped like input.
  PoolGeometry p;
  if (Status s = nn::readPoolGeometry(info, info.operand(0), info.operand(1),
                                      "input", "grad_out", /*isMax=*/true, &p);
      !s)
    return s;
  int64_t total = p.planes * p.h * p.w;
  *fn = [p, total](const KernelArgs &args, Context &ctx) {
    if (total == 0)
      return Status::ok();
    maxPoolBackwardKernel<<<gridFor(total), kBlock, 0, ctx.stream>>>(
        p, static_cast<const float *>(args.operands[0]),
        static_cast<const float *>(args.operands[1]),
        static_cast<float *>(args.results[0]), total);
    return launchStatus("max_pool2d_backward");
  };
  return Status::ok();
}

Status prepare_avg_pool2d_backward(const KernelInfo &info, DeviceFn *fn) {
  // Operand grad_out; the result is grad_in.
  PoolGeometry p;
  if (Status s = nn::readPoolGeometry(info, info.result(0), info.operand(0),
                                      "grad_in (result)", "grad_out",
                                      /*isMax=*/false, &p);
      !s)
    return s;
  int64_t total = p.planes * p.h * p.w;
  *fn = [p, total](const KernelArgs &args, Context &ctx) {
    if (total == 0)
      return Status::ok();
    avgPoolBackwardKernel<<<gridFor(total), kBlock, 0, ctx.stream>>>(
        p, static_cast<const float *>(args.operands[0]),
        static_cast<float *>(args.results[0]), total);
    return launchStatus("avg_pool2d_backward");
  };
  return Status::ok();
}

} // namespace cleave::rt::cuda

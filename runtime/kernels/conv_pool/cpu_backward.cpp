//===- cpu_backward.cpp - Adjoints of convolution and pooling -------------===//
//
// Both take a chunk of images at a time, their planes side by side (as the
// forward conv does), so that small planes still give sgemm wide matrices:
// conv2d_backward_input:  per group, col = W_g^T * dY_g (sgemm), then
//                         col2im scatters each image's columns back onto its
//                         input planes.
// conv2d_backward_filter: per group, dW_g += dY_g * im2col(X_g)^T, one sgemm
//                         over the chunk's pixels.
// Pool adjoints scatter each window's gradient onto its plane. Every loop that
// runs in parallel writes disjoint planes and sums in a fixed order, so the
// results do not depend on the thread count.
//
//===----------------------------------------------------------------------===//

#include "kernels/conv_pool/cpu_nn.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace cleave::rt {
namespace {

using namespace nn;

//===----------------------------------------------------------------------===//
// conv2d_backward_input
//===----------------------------------------------------------------------===//

/// Accumulates the columns of \p images images' \p channels planes (as
/// im2col lays them out: image i's at col + i * oh * ow, rows \p rowStride
/// apart) onto their zeroed-here planes (image i's at dx + i * channels *
/// h * w). Each plane receives its taps in the same order on either path.
void col2im(const ConvGeometry &p, const float *col, int64_t images,
            int64_t channels, float *dx, int64_t rowStride) {
  const Window &win = p.win;
  int64_t taps = win.kh * win.kw;
  int64_t plane = p.oh * p.ow;
  int64_t hw = p.h * p.w;
  std::vector<int64_t> table = shortRowTaps(p);
  // Per kernel column kj, the output columns whose tap lands inside the input.
  std::vector<int64_t> oxLo(win.kw), oxHi(win.kw);
  for (int64_t kj = 0; kj < win.kw; ++kj)
    validOutputRange(kj * win.dilationW - win.padLeft, win.strideW, p.w, p.ow,
                     &oxLo[kj], &oxHi[kj]);
  int64_t jobs = images * channels;
#pragma omp parallel for schedule(                                             \
        static) if (jobs > 1 && jobs * std::max(taps * plane, hw) >            \
                                        kParallelThreshold)
  for (int64_t job = 0; job < jobs; ++job) {
    int64_t i = job / channels, ci = job % channels;
    float *dst = dx + job * hw;
    const float *cols = col + ci * taps * rowStride + i * plane;
    std::fill(dst, dst + hw, 0.0f);
    if (!table.empty()) {
      for (int64_t tap = 0; tap < taps; ++tap) {
        const float *src = cols + tap * rowStride;
        const int64_t *at = table.data() + tap * plane;
        for (int64_t q = 0; q < plane; ++q)
          if (at[q] >= 0)
            dst[at[q]] += src[q];
      }
      continue;
    }
    for (int64_t ki = 0; ki < win.kh; ++ki) {
      int64_t oyLo, oyHi;
      validOutputRange(ki * win.dilationH - win.padTop, win.strideH, p.h, p.oh,
                       &oyLo, &oyHi);
      for (int64_t kj = 0; kj < win.kw; ++kj) {
        const float *src = cols + (ki * win.kw + kj) * rowStride;
        int64_t lo = oxLo[kj], hi = oxHi[kj];
        int64_t ix0 = kj * win.dilationW - win.padLeft;
        for (int64_t oy = oyLo; oy < oyHi; ++oy) {
          int64_t iy = oy * win.strideH - win.padTop + ki * win.dilationH;
          float *row = dst + iy * p.w;
          const float *s = src + oy * p.ow;
          if (win.strideW == 1) {
            for (int64_t ox = lo; ox < hi; ++ox)
              row[ix0 + ox] += s[ox];
          } else {
            for (int64_t ox = lo; ox < hi; ++ox)
              row[ix0 + ox * win.strideW] += s[ox];
          }
        }
      }
    }
  }
}

/// Copies channels [first, first + count) of images [image, image + nb) of
/// \p src ([n, channels, plane]) side by side into \p dst ([count,
/// nb * plane]).
void gatherPlanes(const float *src, int64_t image, int64_t nb, int64_t channels,
                  int64_t first, int64_t count, int64_t plane, float *dst) {
  int64_t rows = nb * count;
#pragma omp parallel for schedule(static) if (rows * plane > kParallelThreshold)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t i = r / count, c = r % count;
    const float *from = src + ((image + i) * channels + first + c) * plane;
    std::copy(from, from + plane, dst + c * nb * plane + i * plane);
  }
}

Status runConvBackwardInput(const ConvGeometry &p, const float *dy,
                            const float *weight, float *dx) {
  int64_t cg = p.c / p.groups, fg = p.f / p.groups;
  int64_t kdim = cg * p.win.kh * p.win.kw;
  int64_t plane = p.oh * p.ow;
  int64_t hw = p.h * p.w;
  if (p.n == 0 || p.c == 0 || hw == 0)
    return Status::ok();
  if (plane == 0 || fg == 0 || kdim == 0) {
    std::fill(dx, dx + p.n * p.c * hw, 0.0f);
    return Status::ok();
  }
  if (p.pointwise) {
    // dX_g [cg, hw] = W_g^T [cg, fg] * dY_g [fg, hw].
    std::vector<int64_t> weights(p.n), grads(p.n);
    for (int64_t g = 0; g < p.groups; ++g) {
      for (int64_t img = 0; img < p.n; ++img) {
        weights[img] = g * fg * cg;
        grads[img] = (img * p.f + g * fg) * hw;
      }
      sgemmTiled(true, false, cg, hw, fg, p.n, weight, weights.data(), cg, dy,
                 grads.data(), hw, dx + g * cg * hw, p.c * hw, hw);
    }
    return Status::ok();
  }
  // The columns of all groups, so that col2im can spread the channels of
  // every group across threads.
  int64_t chunk = imagesPerChunk(p.groups * kdim + fg, plane, p.n);
  int64_t cols = chunk * plane;
  std::unique_ptr<float[]> col = scratchFloats(p.groups * kdim * cols);
  std::unique_ptr<float[]> grad = scratchFloats(fg * cols);
  if (!col || !grad)
    return columnsTooBig(p.groups * kdim, cols);
  // Wide planes: sgemm reads each image's gradient where it lies.
  bool direct = plane >= kDirectPlane;
  std::vector<int64_t> zeros(chunk, 0), images(chunk);
  for (int64_t first = 0; first < p.n; first += chunk) {
    int64_t nb = std::min(chunk, p.n - first);
    int64_t width = nb * plane;
    for (int64_t g = 0; g < p.groups; ++g) {
      float *colG = col.get() + g * kdim * width;
      if (direct) {
        for (int64_t i = 0; i < nb; ++i)
          images[i] = ((first + i) * p.f + g * fg) * plane;
        sgemmTiled(true, false, kdim, plane, fg, nb, weight + g * fg * kdim,
                   zeros.data(), kdim, dy, images.data(), plane, colG, plane,
                   width);
        continue;
      }
      gatherPlanes(dy, first, nb, p.f, g * fg, fg, plane, grad.get());
      sgemmMatrix(true, false, kdim, width, fg, weight + g * fg * kdim, kdim,
                  grad.get(), width, colG, width);
    }
    col2im(p, col.get(), nb, p.c, dx + first * p.c * hw, width);
  }
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// conv2d_backward_filter
//===----------------------------------------------------------------------===//

Status runConvBackwardFilter(const ConvGeometry &p, const float *x,
                             const float *dy, float *dw) {
  int64_t cg = p.c / p.groups, fg = p.f / p.groups;
  int64_t kdim = cg * p.win.kh * p.win.kw;
  int64_t plane = p.oh * p.ow;
  int64_t hw = p.h * p.w;
  if (p.f == 0 || kdim == 0)
    return Status::ok();
  if (p.n == 0 || plane == 0) {
    std::fill(dw, dw + p.f * kdim, 0.0f);
    return Status::ok();
  }
  // The sum over pixels is sgemm's inner dimension, accumulated in f32:
  // as few images per sgemm as give it a useful length (kSumLength pixels),
  // so that no sum runs longer than one image's or kSumLength, whichever is
  // more (a whole batch of ResNet's 32x32 planes in one sum lost a digit
  // against float64), and chunks add up in order.
  constexpr int64_t kSumLength = 256;
  int64_t chunk = std::min(imagesPerChunk(p.groups * kdim + fg, plane, p.n),
                           std::max<int64_t>(1, kSumLength / plane));
  int64_t cols = chunk * plane;
  std::unique_ptr<float[]> col = scratchFloats(kdim * cols);
  std::unique_ptr<float[]> grad = scratchFloats(fg * cols);
  if (!col || !grad)
    return columnsTooBig(kdim, cols);
  // Chunks accumulate into dW in order (beta 1 after the first).
  for (int64_t first = 0; first < p.n; first += chunk) {
    int64_t nb = std::min(chunk, p.n - first);
    int64_t width = nb * plane;
    for (int64_t g = 0; g < p.groups; ++g) {
      im2col(p, x + (first * p.c + g * cg) * hw, nb, p.c * hw, cg, col.get(),
             width);
      // One image's gradient planes are already [fg, plane] in place.
      const float *gradG = dy + (first * p.f + g * fg) * plane;
      if (nb > 1) {
        gatherPlanes(dy, first, nb, p.f, g * fg, fg, plane, grad.get());
        gradG = grad.get();
      }
      // dW_g [fg, kdim] (+)= dY_g [fg, width] * col^T [width, kdim].
      sgemmMatrix(false, true, fg, kdim, width, gradG, width, col.get(), width,
                  dw + g * fg * kdim, kdim, first != 0);
    }
  }
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Pools
//===----------------------------------------------------------------------===//

/// The first tap of a window (row-major) holding a NaN: forward max_pool2d
/// propagates it, so it is the tap the gradient flows to.
int64_t firstNaN(const float *src, int64_t w, int64_t iy0, int64_t ix0,
                 int64_t iLo, int64_t iHi, int64_t jLo, int64_t jHi,
                 const Window &win) {
  for (int64_t i = iLo; i < iHi; ++i)
    for (int64_t j = jLo; j < jHi; ++j) {
      int64_t at = (iy0 + i * win.dilationH) * w + ix0 + j * win.dilationW;
      if (std::isnan(src[at]))
        return at;
    }
  return -1;
}

void runMaxPoolBackward(const PoolGeometry &p, const float *x, const float *dy,
                        float *dx) {
  const Window &win = p.win;
  int64_t hw = p.h * p.w, plane = p.oh * p.ow;
  if (p.planes == 0 || hw == 0)
    return;
  PoolTaps taps = poolTaps(p);
  const std::vector<int64_t> &jLo = taps.jLo, &jHi = taps.jHi;
#pragma omp parallel for schedule(                                             \
        static) if (p.planes > 1 &&                                            \
                        p.planes * std::max(plane * win.kh * win.kw, hw) >     \
                                kParallelThreshold)
  for (int64_t pl = 0; pl < p.planes; ++pl) {
    const float *src = x + pl * hw;
    const float *grad = dy + pl * plane;
    float *dst = dx + pl * hw;
    std::fill(dst, dst + hw, 0.0f);
    for (int64_t oy = 0; oy < p.oh; ++oy) {
      int64_t iy0 = oy * win.strideH - win.padTop;
      int64_t iLo = taps.iLo[oy], iHi = taps.iHi[oy];
      for (int64_t ox = 0; ox < p.ow; ++ox) {
        int64_t ix0 = ox * win.strideW - win.padLeft;
        // The first tap inside the input (row-major in the window) holding
        // the window's maximum, where NaN counts as the maximum (as forward
        // max_pool2d propagates it).
        // Branch-free (random data defeats the predictor). The first tap
        // inside the input starts as the answer (a window of -inf keeps
        // it); strict > keeps the first of equal maxima; a NaN compares
        // false everywhere, so windows holding one take the careful loop.
        int64_t best = iLo < iHi && jLo[ox] < jHi[ox]
                           ? (iy0 + iLo * win.dilationH) * p.w + ix0 +
                                 jLo[ox] * win.dilationW
                           : -1;
        float m = -std::numeric_limits<float>::infinity();
        bool nan = false;
        for (int64_t i = iLo; i < iHi; ++i) {
          int64_t rowAt = (iy0 + i * win.dilationH) * p.w + ix0;
          for (int64_t j = jLo[ox]; j < jHi[ox]; ++j) {
            int64_t at = rowAt + j * win.dilationW;
            float v = src[at];
            nan |= v != v;
            bool better = v > m;
            m = better ? v : m;
            best = better ? at : best;
          }
        }
        if (nan)
          best = firstNaN(src, p.w, iy0, ix0, iLo, iHi, jLo[ox], jHi[ox], win);
        // A window with no tap inside the input does not depend on x.
        if (best >= 0)
          dst[best] += grad[oy * p.ow + ox];
      }
    }
  }
}

void runAvgPoolBackward(const PoolGeometry &p, const float *dy, float *dx) {
  const Window &win = p.win;
  int64_t hw = p.h * p.w, plane = p.oh * p.ow;
  if (p.planes == 0 || hw == 0)
    return;
  std::vector<int64_t> rowTaps, colTaps;
  avgPoolTaps(p, &rowTaps, &colTaps);
  PoolTaps taps = poolTaps(p);
  const std::vector<int64_t> &jLo = taps.jLo, &jHi = taps.jHi;
#pragma omp parallel for schedule(                                             \
        static) if (p.planes > 1 &&                                            \
                        p.planes * std::max(plane * win.kh * win.kw, hw) >     \
                                kParallelThreshold)
  for (int64_t pl = 0; pl < p.planes; ++pl) {
    const float *grad = dy + pl * plane;
    float *dst = dx + pl * hw;
    std::fill(dst, dst + hw, 0.0f);
    for (int64_t oy = 0; oy < p.oh; ++oy) {
      int64_t iLo = taps.iLo[oy], iHi = taps.iHi[oy];
      for (int64_t ox = 0; ox < p.ow; ++ox) {
        int64_t divisor = rowTaps[oy] * colTaps[ox];
        // avg_pool2d yields 0 for a window with no counted taps.
        if (divisor == 0)
          continue;
        float v = grad[oy * p.ow + ox] / static_cast<float>(divisor);
        int64_t ix0 = ox * win.strideW - win.padLeft;
        for (int64_t i = iLo; i < iHi; ++i) {
          float *row =
              dst + (oy * win.strideH - win.padTop + i * win.dilationH) * p.w;
          for (int64_t j = jLo[ox]; j < jHi[ox]; ++j)
            row[ix0 + j * win.dilationW] += v;
        }
      }
    }
  }
}

} // namespace

Status prepare_conv2d_backward_input(const KernelInfo &info, KernelFn *fn) {
  if (info.result(0).dtype != DType::F32) // mixed precision: widened
    return prepareWidened(info, &prepare_conv2d_backward_input, fn);
  ConvGeometry p;
  if (Status s = readConvGeometry(
          info, info.result(0), info.operand(1), info.operand(0),
          {"grad_in (result)", "weight", "grad_out"}, &p);
      !s)
    return s;
  *fn = [p](const KernelArgs &args) {
    return runConvBackwardInput(p, static_cast<const float *>(args.operands[0]),
                                static_cast<const float *>(args.operands[1]),
                                static_cast<float *>(args.results[0]));
  };
  return Status::ok();
}

Status prepare_conv2d_backward_filter(const KernelInfo &info, KernelFn *fn) {
  if (info.result(0).dtype != DType::F32) // mixed precision: widened
    return prepareWidened(info, &prepare_conv2d_backward_filter, fn);
  ConvGeometry p;
  if (Status s = readConvGeometry(info, info.operand(0), info.result(0),
                                  info.operand(1),
                                  {"input", "grad_w (result)", "grad_out"}, &p);
      !s)
    return s;
  *fn = [p](const KernelArgs &args) {
    return runConvBackwardFilter(p,
                                 static_cast<const float *>(args.operands[0]),
                                 static_cast<const float *>(args.operands[1]),
                                 static_cast<float *>(args.results[0]));
  };
  return Status::ok();
}

Status prepare_max_pool2d_backward(const KernelInfo &info, KernelFn *fn) {
  PoolGeometry p;
  if (Status s = readPoolGeometry(info, info.operand(0), info.operand(1),
                                  "input", "grad_out", /*isMax=*/true, &p);
      !s)
    return s;
  *fn = [p](const KernelArgs &args) {
    runMaxPoolBackward(p, static_cast<const float *>(args.operands[0]),
                       static_cast<const float *>(args.operands[1]),
                       static_cast<float *>(args.results[0]));
    return Status::ok();
  };
  return Status::ok();
}

Status prepare_avg_pool2d_backward(const KernelInfo &info, KernelFn *fn) {
  PoolGeometry p;
  if (Status s = readPoolGeometry(info, info.result(0), info.operand(0),
                                  "grad_in (result)", "grad_out",
                                  /*isMax=*/false, &p);
      !s)
    return s;
  *fn = [p](const KernelArgs &args) {
    runAvgPoolBackward(p, static_cast<const float *>(args.operands[0]),
                       static_cast<float *>(args.results[0]));
    return Status::ok();
  };
  return Status::ok();
}

} // namespace cleave::rt

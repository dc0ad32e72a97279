//===- cpu.cpp - Convolution and pooling on the CPU -----------------------===//

#include "core/kernel_math.h"
#include "kernels/conv_pool/cpu_nn.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace cleave::rt {
namespace nn {

std::vector<int64_t> shortRowTaps(const ConvGeometry &p) {
  const Window &win = p.win;
  int64_t plane = p.oh * p.ow, taps = win.kh * win.kw;
  constexpr int64_t kShortRow = 16, kMaxTable = int64_t(1) << 16;
  if (p.ow >= kShortRow || taps * plane > kMaxTable)
    return {};
  std::vector<int64_t> offsets(taps * plane, -1);
  for (int64_t ki = 0; ki < win.kh; ++ki)
    for (int64_t kj = 0; kj < win.kw; ++kj)
      for (int64_t oy = 0; oy < p.oh; ++oy)
        for (int64_t ox = 0; ox < p.ow; ++ox) {
          int64_t iy = oy * win.strideH - win.padTop + ki * win.dilationH;
          int64_t ix = ox * win.strideW - win.padLeft + kj * win.dilationW;
          if (iy >= 0 && iy < p.h && ix >= 0 && ix < p.w)
            offsets[((ki * win.kw + kj) * p.oh + oy) * p.ow + ox] =
                iy * p.w + ix;
        }
  return offsets;
}

void im2col(const ConvGeometry &p, const float *x, int64_t images,
            int64_t imageStride, int64_t cg, float *col, int64_t rowStride) {
  const Window &win = p.win;
  int64_t taps = win.kh * win.kw;
  int64_t rows = cg * taps;
  int64_t plane = p.oh * p.ow;
  std::vector<int64_t> table = shortRowTaps(p);
  // The output rows and columns whose tap lands inside the input, per
  // kernel row and column: no bounds test per element, and unit strides
  // copy whole runs.
  std::vector<int64_t> oyLo(win.kh), oyHi(win.kh), oxLo(win.kw), oxHi(win.kw);
  for (int64_t ki = 0; ki < win.kh; ++ki)
    validOutputRange(ki * win.dilationH - win.padTop, win.strideH, p.h, p.oh,
                     &oyLo[ki], &oyHi[ki]);
  for (int64_t kj = 0; kj < win.kw; ++kj)
    validOutputRange(kj * win.dilationW - win.padLeft, win.strideW, p.w, p.ow,
                     &oxLo[kj], &oxHi[kj]);
  // One job per row and image, images innermost: a thread's jobs write
  // consecutive stretches of the columns.
  int64_t jobs = rows * images;
#pragma omp parallel for schedule(                                             \
        static) if (jobs > 1 && jobs * plane > kParallelThreshold)
  for (int64_t job = 0; job < jobs; ++job) {
    int64_t r = job / images, i = job % images;
    int64_t ci = r / taps, tap = r % taps;
    int64_t ki = tap / win.kw, kj = tap % win.kw;
    const float *src = x + i * imageStride + ci * p.h * p.w;
    float *dst = col + r * rowStride + i * plane;
    if (!table.empty()) {
      const int64_t *at = table.data() + tap * plane;
      for (int64_t q = 0; q < plane; ++q)
        dst[q] = at[q] < 0 ? 0.0f : src[at[q]];
      continue;
    }
    int64_t yLo = oyLo[ki], yHi = std::max(oyHi[ki], yLo);
    int64_t lo = oxLo[kj], hi = std::max(oxHi[kj], lo);
    std::fill(dst, dst + yLo * p.ow, 0.0f);
    std::fill(dst + yHi * p.ow, dst + plane, 0.0f);
    int64_t ix0 = kj * win.dilationW - win.padLeft;
    for (int64_t oy = yLo; oy < yHi; ++oy) {
      int64_t iy = oy * win.strideH - win.padTop + ki * win.dilationH;
      const float *srcRow = src + iy * p.w + ix0;
      float *row = dst + oy * p.ow;
      std::fill(row, row + lo, 0.0f);
      std::fill(row + hi, row + p.ow, 0.0f);
      if (win.strideW == 1) {
        std::copy(srcRow + lo, srcRow + hi, row + lo);
      } else {
        for (int64_t ox = lo; ox < hi; ++ox)
          row[ox] = srcRow[ox * win.strideW];
      }
    }
  }
}

PoolTaps poolTaps(const PoolGeometry &p) {
  const Window &win = p.win;
  PoolTaps t{std::vector<int64_t>(p.oh), std::vector<int64_t>(p.oh),
             std::vector<int64_t>(p.ow), std::vector<int64_t>(p.ow)};
  for (int64_t oy = 0; oy < p.oh; ++oy)
    validOutputRange(oy * win.strideH - win.padTop, win.dilationH, p.h, win.kh,
                     &t.iLo[oy], &t.iHi[oy]);
  for (int64_t ox = 0; ox < p.ow; ++ox)
    validOutputRange(ox * win.strideW - win.padLeft, win.dilationW, p.w, win.kw,
                     &t.jLo[ox], &t.jHi[ox]);
  return t;
}

void avgPoolTaps(const PoolGeometry &p, std::vector<int64_t> *rowTaps,
                 std::vector<int64_t> *colTaps) {
  const Window &win = p.win;
  rowTaps->assign(p.oh, 0);
  colTaps->assign(p.ow, 0);
  for (int64_t oy = 0; oy < p.oh; ++oy) {
    int64_t start = oy * win.strideH - win.padTop;
    (*rowTaps)[oy] = p.countIncludePad
                         ? tapsInside(start, win.kh, win.dilationH, -win.padTop,
                                      p.h + win.padBottom)
                         : tapsInside(start, win.kh, win.dilationH, 0, p.h);
  }
  for (int64_t ox = 0; ox < p.ow; ++ox) {
    int64_t start = ox * win.strideW - win.padLeft;
    (*colTaps)[ox] = p.countIncludePad
                         ? tapsInside(start, win.kw, win.dilationW,
                                      -win.padLeft, p.w + win.padRight)
                         : tapsInside(start, win.kw, win.dilationW, 0, p.w);
  }
}

void sgemmMatrix(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                 const float *a, int64_t lda, const float *b, int64_t ldb,
                 float *c, int64_t ldc, bool accumulate) {
  const int64_t zero = 0;
  sgemmTiled(transA, transB, m, n, k, 1, a, &zero, lda, b, &zero, ldb, c, 0,
             ldc, accumulate);
}

int64_t imagesPerChunk(int64_t rows, int64_t plane, int64_t images) {
  // 8M floats (32 MiB): past that, more images no longer make the sgemm
  // faster, only the scratch bigger.
  constexpr int64_t kBudget = int64_t(8) << 20;
  int64_t perImage = std::max<int64_t>(1, rows * plane);
  return std::clamp<int64_t>(kBudget / perImage, 1,
                             std::max<int64_t>(images, 1));
}

} // namespace nn

namespace {

using namespace nn;

/// One sgemm per group over a chunk of images: the columns of every image
/// side by side ([kdim, images * plane]), so that small late-layer planes
/// (ResNet's 4x4 and 2x2) still give sgemm wide matrices, then each image's
/// planes copied out (with the bias).
Status runConv(const ConvGeometry &p, const float *x, const float *weight,
               const float *bias, float *y) {
  int64_t cg = p.c / p.groups, fg = p.f / p.groups;
  int64_t kdim = cg * p.win.kh * p.win.kw;
  int64_t plane = p.oh * p.ow;
  if (plane == 0 || p.n == 0 || p.f == 0)
    return Status::ok();
  int64_t chunk = imagesPerChunk(std::max(kdim, fg), plane, p.n);
  std::unique_ptr<float[]> col = scratchFloats(kdim * chunk * plane);
  std::unique_ptr<float[]> out = scratchFloats(fg * chunk * plane);
  if (!col || !out)
    return columnsTooBig(std::max(kdim, fg), chunk * plane);
  // Planes as wide as a tile's columns (the stem's, ResNet's first stage)
  // go to the output straight from sgemm, one image per matrix: no copy
  // out. Narrower ones keep the images side by side for sgemm's sake.
  bool direct = plane >= kDirectPlane && kdim > 0;
  std::vector<int64_t> zeros(chunk, 0), columns(chunk);
  for (int64_t i = 0; i < chunk; ++i)
    columns[i] = i * plane;
  for (int64_t first = 0; first < p.n; first += chunk) {
    int64_t nb = std::min(chunk, p.n - first);
    int64_t width = nb * plane;
    for (int64_t g = 0; g < p.groups; ++g) {
      im2col(p, x + (first * p.c + g * cg) * p.h * p.w, nb, p.c * p.h * p.w, cg,
             col.get(), width);
      if (direct) {
        float *y0 = y + (first * p.f + g * fg) * plane;
        if (bias) {
          int64_t rows = nb * fg;
#pragma omp parallel for schedule(static) if (rows * plane > kParallelThreshold)
          for (int64_t r = 0; r < rows; ++r)
            std::fill_n(y0 + (r / fg) * p.f * plane + (r % fg) * plane, plane,
                        bias[g * fg + r % fg]);
        }
        sgemmTiled(false, false, fg, plane, kdim, nb, weight + g * fg * kdim,
                   zeros.data(), kdim, col.get(), columns.data(), width, y0,
                   p.f * plane, plane, bias != nullptr);
        continue;
      }
      if (kdim == 0)
        std::fill(out.get(), out.get() + fg * width, 0.0f);
      else
        sgemmMatrix(false, false, fg, width, kdim, weight + g * fg * kdim, kdim,
                    col.get(), width, out.get(), width);
      int64_t rows = nb * fg;
#pragma omp parallel for schedule(static) if (rows * plane > kParallelThreshold)
      for (int64_t r = 0; r < rows; ++r) {
        int64_t i = r / fg, f = r % fg;
        const float *src = out.get() + f * width + i * plane;
        float *dst = y + ((first + i) * p.f + g * fg + f) * plane;
        if (!bias) {
          std::copy(src, src + plane, dst);
          continue;
        }
        float b = bias[g * fg + f];
        for (int64_t j = 0; j < plane; ++j)
          dst[j] = src[j] + b;
      }
    }
  }
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Pools
//===----------------------------------------------------------------------===//

void runMaxPool(const PoolGeometry &p, const float *x, float *y) {
  const Window &win = p.win;
  PoolTaps taps = poolTaps(p);
  const std::vector<int64_t> &iLo = taps.iLo, &iHi = taps.iHi, &jLo = taps.jLo,
                             &jHi = taps.jHi;
#pragma omp parallel for schedule(                                             \
        static) if (p.planes > 1 && p.planes * p.oh * p.ow * win.kh * win.kw > \
                                            kParallelThreshold)
  for (int64_t pl = 0; pl < p.planes; ++pl) {
    const float *src = x + pl * p.h * p.w;
    float *dst = y + pl * p.oh * p.ow;
    for (int64_t oy = 0; oy < p.oh; ++oy) {
      int64_t iy0 = oy * win.strideH - win.padTop;
      for (int64_t ox = 0; ox < p.ow; ++ox) {
        int64_t ix0 = ox * win.strideW - win.padLeft;
        // Branch-free (random data defeats the predictor): NaN, which
        // propagates as in the reference frameworks, is tracked apart.
        float m = -std::numeric_limits<float>::infinity();
        bool nan = false;
        for (int64_t i = iLo[oy]; i < iHi[oy]; ++i) {
          const float *row = src + (iy0 + i * win.dilationH) * p.w + ix0;
          for (int64_t j = jLo[ox]; j < jHi[ox]; ++j) {
            float v = row[j * win.dilationW];
            nan |= v != v;
            m = v > m ? v : m;
          }
        }
        dst[oy * p.ow + ox] = nan ? std::numeric_limits<float>::quiet_NaN() : m;
      }
    }
  }
}

void runAvgPool(const PoolGeometry &p, const float *x, float *y) {
  const Window &win = p.win;
  // The divisor only depends on the output position, not the plane.
  std::vector<int64_t> rowTaps, colTaps;
  avgPoolTaps(p, &rowTaps, &colTaps);
#pragma omp parallel for schedule(                                             \
        static) if (p.planes > 1 && p.planes * p.oh * p.ow * win.kh * win.kw > \
                                            kParallelThreshold)
  for (int64_t pl = 0; pl < p.planes; ++pl) {
    const float *src = x + pl * p.h * p.w;
    float *dst = y + pl * p.oh * p.ow;
    for (int64_t oy = 0; oy < p.oh; ++oy)
      for (int64_t ox = 0; ox < p.ow; ++ox) {
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
        int64_t divisor = rowTaps[oy] * colTaps[ox];
        // A window with no counted taps (only possible with ceil-mode output
        // sizes) yields 0 rather than 0/0.
        dst[oy * p.ow + ox] =
            divisor ? sum / static_cast<float>(divisor) : 0.0f;
      }
  }
}

Status preparePool(const KernelInfo &info, KernelFn *fn, bool isMax) {
  PoolGeometry p;
  if (Status s = readPoolGeometry(info, info.operand(0), info.result(0),
                                  "operand", "result", isMax, &p);
      !s)
    return s;
  *fn = [p, isMax](const KernelArgs &args) {
    const auto *x = static_cast<const float *>(args.operands[0]);
    auto *y = static_cast<float *>(args.results[0]);
    if (isMax)
      runMaxPool(p, x, y);
    else
      runAvgPool(p, x, y);
    return Status::ok();
  };
  return Status::ok();
}

} // namespace

Status prepare_conv2d(const KernelInfo &info, KernelFn *fn) {
  if (info.result(0).dtype != DType::F32) // mixed precision: widened
    return prepareWidened(info, &prepare_conv2d, fn);
  ConvGeometry p;
  if (Status s =
          readConvGeometry(info, info.operand(0), info.operand(1),
                           info.result(0), {"input", "weight", "result"}, &p);
      !s)
    return s;
  p.hasBias = info.hasOperand(2);
  *fn = [p](const KernelArgs &args) {
    return runConv(p, static_cast<const float *>(args.operands[0]),
                   static_cast<const float *>(args.operands[1]),
                   p.hasBias ? static_cast<const float *>(args.operands[2])
                             : nullptr,
                   static_cast<float *>(args.results[0]));
  };
  return Status::ok();
}

Status prepare_max_pool2d(const KernelInfo &info, KernelFn *fn) {
  return preparePool(info, fn, /*isMax=*/true);
}
Status prepare_avg_pool2d(const KernelInfo &info, KernelFn *fn) {
  return preparePool(info, fn, /*isMax=*/false);
}

} // namespace cleave::rt

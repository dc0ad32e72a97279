//===- cpu.cpp - Batched matrix multiplication through cblas_sgemm --------===//
//
// Operands are used in place: transposition is passed to BLAS, and broadcast
// batch dims only change which matrix each sgemm call reads.
//
//===----------------------------------------------------------------------===//

#include "core/convert.h"
#include "cpu/cpu_kernel.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

namespace cleave::rt {
namespace {

struct MatmulGeometry {
  bool transposeA = false, transposeB = false;
  int64_t m = 0, n = 0, k = 0;
  /// Element offsets of each batch's A and B matrices; C is contiguous.
  std::vector<int64_t> aOffsets, bOffsets;
};

void runMatmul(const MatmulGeometry &p, const float *a, const float *b,
               float *c) {
  int64_t batches = static_cast<int64_t>(p.aOffsets.size());
  if (p.m == 0 || p.n == 0)
    return;
  if (p.k == 0) {
    std::memset(c, 0, sizeof(float) * batches * p.m * p.n);
    return;
  }
  sgemmTiled(p.transposeA, p.transposeB, p.m, p.n, p.k, batches, a,
             p.aOffsets.data(), p.transposeA ? p.m : p.k, b, p.bOffsets.data(),
             p.transposeB ? p.k : p.n, c, p.m * p.n, p.n);
}

void blasOneThread() {
  static std::once_flag blasThreads;
  std::call_once(blasThreads, [] { openblas_set_num_threads(1); });
}

struct Tiles {
  int64_t rows, cols;
};

/// Tiles of at most 256 x 256, big enough for sgemm's micro-kernels to run
/// at speed, and halved (the wider side first, down to 64, in multiples of
/// 16) until a product has at least kMinTiles of them: ResNet-18's third
/// stage at batch 16 is one 256 x 256 product per convolution, which whole
/// tiles left to one core. The tiling follows the shape alone, never the
/// thread count, so every element's arithmetic stays the same on any
/// number of threads.
Tiles tilesFor(int64_t m, int64_t n, int64_t batches) {
  constexpr int64_t kMax = 256, kMin = 64, kMinTiles = 4;
  int64_t rows = std::clamp<int64_t>(m, 1, kMax);
  int64_t cols = std::clamp<int64_t>(n, 1, kMax);
  auto count = [&] {
    return batches * ((m + rows - 1) / rows) * ((n + cols - 1) / cols);
  };
  auto half = [&](int64_t v) { return std::max(kMin, (v / 2 + 15) / 16 * 16); };
  while (count() < kMinTiles) {
    if (cols >= rows && cols > kMin)
      cols = half(cols);
    else if (rows > kMin)
      rows = half(rows);
    else
      break;
  }
  return {rows, cols};
}

} // namespace

void sgemmSerial(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                 float alpha, const float *a, int64_t lda, const float *b,
                 int64_t ldb, float beta, float *c, int64_t ldc) {
  blasOneThread();
  if (m == 0 || n == 0)
    return;
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
              static_cast<int>(ldc));
}

void sgemmTiled(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                int64_t batches, const float *a, const int64_t *aOffsets,
                int64_t lda, const float *b, const int64_t *bOffsets,
                int64_t ldb, float *c, int64_t cStride, int64_t ldc,
                bool accumulate) {
  blasOneThread();
  Tiles tiling = tilesFor(m, n, batches);
  int64_t kRows = tiling.rows, kCols = tiling.cols;
  int64_t rowTiles = (m + kRows - 1) / kRows;
  int64_t perBatch = rowTiles * ((n + kCols - 1) / kCols);
  int64_t tiles = batches * perBatch;
#pragma omp parallel for schedule(                                             \
        dynamic) if (tiles > 1 && m * n * k > (int64_t(1) << 16))
  for (int64_t t = 0; t < tiles; ++t) {
    int64_t i = t / perBatch, tile = t % perBatch;
    int64_t i0 = (tile % rowTiles) * kRows, j0 = (tile / rowTiles) * kCols;
    int64_t rows = std::min(kRows, m - i0), cols = std::min(kCols, n - j0);
    const float *ai = a + aOffsets[i], *bi = b + bOffsets[i];
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
                transB ? CblasTrans : CblasNoTrans, static_cast<int>(rows),
                static_cast<int>(cols), static_cast<int>(k), 1.0f,
                transA ? ai + i0 : ai + i0 * lda, static_cast<int>(lda),
                transB ? bi + j0 * ldb : bi + j0, static_cast<int>(ldb),
                accumulate ? 1.0f : 0.0f, c + i * cStride + i0 * ldc + j0,
                static_cast<int>(ldc));
  }
}

Status prepare_matmul(const KernelInfo &info, KernelFn *fn) {
  if (info.operand(0).dtype != DType::F32)
    return prepareHalfMatmul(info, fn); // mixed precision's bf16 / f16
  const TensorType &a = info.operand(0), &b = info.operand(1),
                   &r = info.result(0);
  MatmulGeometry plan;
  const auto &attrs = info.params<schema::Kernel::k_matmul>();
  bool ta = attrs.transpose_a, tb = attrs.transpose_b;
  plan.transposeA = ta;
  plan.transposeB = tb;
  size_t rank = r.shape.size();
  plan.m = r.shape[rank - 2];
  plan.n = r.shape[rank - 1];
  int64_t aRows = a.shape[rank - 2], aCols = a.shape[rank - 1];
  int64_t bRows = b.shape[rank - 2], bCols = b.shape[rank - 1];
  plan.k = ta ? aRows : aCols;
  if (plan.m > INT32_MAX || plan.n > INT32_MAX || plan.k > INT32_MAX)
    return Status::error("matrix dims exceed the BLAS int range");
  std::vector<int64_t> rBatch(r.shape.begin(), r.shape.end() - 2);
  std::vector<int64_t> aBatch(a.shape.begin(), a.shape.end() - 2);
  std::vector<int64_t> bBatch(b.shape.begin(), b.shape.end() - 2);
  plan.aOffsets = batchOffsets(aBatch, rBatch, aRows * aCols);
  plan.bOffsets = batchOffsets(bBatch, rBatch, bRows * bCols);

  // One B shared by every batch, and the A matrices stacked contiguously
  // without transposition: the batches are rows of one taller sgemm.
  bool sharedB = true, stackedA = !plan.transposeA;
  for (size_t i = 0; i < plan.aOffsets.size(); ++i) {
    sharedB &= plan.bOffsets[i] == 0;
    stackedA &= plan.aOffsets[i] == static_cast<int64_t>(i) * aRows * aCols;
  }
  int64_t batches = static_cast<int64_t>(plan.aOffsets.size());
  if (batches > 1 && sharedB && stackedA && batches * plan.m <= INT32_MAX) {
    plan.m *= batches;
    plan.aOffsets = {0};
    plan.bOffsets = {0};
  }
  *fn = [plan](const KernelArgs &args) {
    runMatmul(plan, static_cast<const float *>(args.operands[0]),
              static_cast<const float *>(args.operands[1]),
              static_cast<float *>(args.results[0]));
    return Status::ok();
  };
  return Status::ok();
}

} // namespace cleave::rt

namespace cleave::rt {
namespace {

/// Rows [first, first + count) of \p w as f32 times their scales (one per
/// row and group of cols / groups columns), into \p out (count x cols).
template <typename T, typename Widen>
void dequantizeRows(const T *w, const float *scale, int64_t groups,
                    int64_t first, int64_t count, int64_t cols, float *out,
                    Widen widen) {
  int64_t width = cols / groups;
#pragma omp parallel for if (count * cols > (int64_t(1) << 16))
  for (int64_t r = 0; r < count; ++r) {
    const T *src = w + (first + r) * cols;
    float *dst = out + r * cols;
    for (int64_t g = 0; g < groups; ++g) {
      float s = scale ? scale[(first + r) * groups + g] : 1.0f;
      for (int64_t c = g * width; c < (g + 1) * width; ++c)
        dst[c] = widen(src[c]) * s;
    }
  }
}

void dequantize(DType dtype, const void *w, const float *scale, int64_t groups,
                int64_t first, int64_t count, int64_t cols, float *out) {
  switch (dtype) {
  case DType::I8:
    return dequantizeRows(static_cast<const int8_t *>(w), scale, groups, first,
                          count, cols, out,
                          [](int8_t v) { return static_cast<float>(v); });
  case DType::BF16:
    return dequantizeRows(static_cast<const uint16_t *>(w), scale, groups,
                          first, count, cols, out, bf16ToFloat);
  default:
    return dequantizeRows(static_cast<const uint16_t *>(w), scale, groups,
                          first, count, cols, out, halfToFloat);
  }
}

} // namespace

/// The weight is dequantized in blocks of rows (about 2 MiB of f32 each,
/// whole multiples of 64 rows), each multiplied as it is made: the f32
/// matrix never exists whole, and the scratch is one per thread, shared by
/// every such product.
Status prepare_matmul_dequant(const KernelInfo &info, KernelFn *fn) {
  DequantProduct p;
  if (Status s = readDequantProduct(info, &p); !s)
    return s;
  bool tb = p.transposeB, scaled = p.scaled;
  int64_t groups = p.groups, rows = p.rows, cols = p.cols, m = p.m, n = p.n,
          k = p.k;
  int64_t block =
      std::max<int64_t>(64, (int64_t(1) << 19) / std::max<int64_t>(cols, 1));
  block = std::min(rows, block / 64 * 64);
  DType dtype = info.operand(1).dtype;
  *fn = [=](const KernelArgs &args) {
    const auto *x = static_cast<const float *>(args.operands[0]);
    const float *scale =
        scaled ? static_cast<const float *>(args.operands[2]) : nullptr;
    auto *out = static_cast<float *>(args.results[0]);
    if (m == 0 || n == 0)
      return Status::ok();
    if (k == 0 || rows == 0) {
      std::memset(out, 0, sizeof(float) * m * n);
      return Status::ok();
    }
    thread_local std::vector<float> scratch;
    scratch.resize(static_cast<size_t>(block * cols));
    const int64_t zero = 0;
    for (int64_t first = 0; first < rows; first += block) {
      int64_t count = std::min(block, rows - first);
      dequantize(dtype, args.operands[1], scale, groups, first, count, cols,
                 scratch.data());
      if (tb) // out[:, first:first+count] = x . block^T
        sgemmTiled(false, true, m, count, k, 1, x, &zero, k, scratch.data(),
                   &zero, k, out + first, 0, n);
      else // out += x[:, first:first+count] . block
        sgemmTiled(false, false, m, n, count, 1, x + first, &zero, k,
                   scratch.data(), &zero, n, out, 0, n, first > 0);
    }
    return Status::ok();
  };
  return Status::ok();
}

} // namespace cleave::rt

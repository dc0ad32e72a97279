//===- bf16_gemm.cpp - Small bf16 products for kernels' tiles -------------===//
//
// One block of 8 rows x 32 columns keeps its 16 accumulators in registers
// across k; the packing loops are compiled per instruction set.
//
//===----------------------------------------------------------------------===//

#include "cpu/bf16_gemm.h"

#include "core/convert.h"
#include "core/vector_math.h"
#include "cpu/cpu_kernel.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

namespace cleave::rt {

namespace {

constexpr int kBlockRows = 8, kBlockCols = 32;

std::atomic<bool> widenForTesting{false};

/// Packed pairs read through another type's storage (a bf16 matrix's rows).
typedef uint32_t __attribute__((may_alias)) AliasedPair;

CLEAVE_CLONES void roundToBf16(const float *x, int64_t n, uint16_t *out) {
  for (int64_t j = 0; j < n; ++j)
    out[j] = floatToBf16(x[j]);
}

CLEAVE_CLONES void interleavePairs(const uint16_t *lo, const uint16_t *hi,
                                   int64_t n, uint32_t *out) {
  for (int64_t j = 0; j < n; ++j)
    out[j] = static_cast<uint32_t>(lo[j]) | static_cast<uint32_t>(hi[j]) << 16;
}

/// Row \p r's first \p n elements of \p src as bf16 bits: the row itself,
/// or rounded into \p tmp.
const uint16_t *rowBits(const Bf16Source &src, int64_t r, int64_t n,
                        std::vector<uint16_t> &tmp) {
  if (src.bf16)
    return static_cast<const uint16_t *>(src.data) + r * src.ld;
  tmp.resize(n);
  roundToBf16(static_cast<const float *>(src.data) + r * src.ld, n, tmp.data());
  return tmp.data();
}

/// Rows \p r and \p r + 1 (zeros where \p r + 1 is \p rows) of \p src
/// as pairs into out[0, n).
void pairRows(const Bf16Source &src, int64_t r, int64_t rows, int64_t n,
              uint32_t *out) {
  thread_local std::vector<uint16_t> t0, t1, zeros;
  const uint16_t *lo = rowBits(src, r, n, t0);
  const uint16_t *hi;
  if (r + 1 < rows) {
    hi = rowBits(src, r + 1, n, t1);
  } else {
    zeros.assign(n, 0);
    hi = zeros.data();
  }
  interleavePairs(lo, hi, n, out);
}

/// Row \p r of \p src, k elements, as kp pairs (the last padded with 0).
void pairsOfRow(const Bf16Source &src, int64_t r, int64_t k, int64_t kp,
                uint32_t *out) {
  thread_local std::vector<uint16_t> t;
  const uint16_t *bits = rowBits(src, r, k, t);
  std::memcpy(out, bits, sizeof(uint16_t) * k);
  if (k % 2)
    out[kp - 1] = bits[k - 1];
}

#define CLEAVE_BF16_TARGET                                                     \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

/// C[R rows, cols <= 32] = alpha A B + beta C from the packed pairs.
template <int R>
CLEAVE_BF16_TARGET void dotBlock(int64_t kp, int64_t lastOdd, PackedA a,
                                 PackedB b, int64_t cols, float alpha,
                                 float beta, float *c, int64_t ldc) {
  __m512 lo[R], hi[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    lo[r] = hi[r] = _mm512_setzero_ps();
  const auto *pa = reinterpret_cast<const AliasedPair *>(a.data);
  // An odd depth's last pair reads only its low half of B: the high one
  // lies past the product (a causal tile's next key, whose value may be
  // anything), and 0 times a non-finite value is not 0.
  __m512i keep = _mm512_set1_epi32(-1), low = _mm512_set1_epi32(0xffff);
  for (int64_t p = 0; p < kp; ++p) {
    __m512i mask = p == lastOdd ? low : keep;
    auto b0 =
        (__m512bh)_mm512_and_si512(_mm512_loadu_si512(b.data + p * b.ld), mask);
    auto b1 = (__m512bh)_mm512_and_si512(
        _mm512_loadu_si512(b.data + p * b.ld + 16), mask);
    const AliasedPair *col = pa + p * a.pairStride;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      auto pair =
          (__m512bh)_mm512_set1_epi32(static_cast<int>(col[r * a.rowStride]));
      lo[r] = _mm512_dpbf16_ps(lo[r], pair, b0);
      hi[r] = _mm512_dpbf16_ps(hi[r], pair, b1);
    }
  }
  __mmask16 m0 = cols >= 16 ? 0xffff : static_cast<__mmask16>((1u << cols) - 1);
  __mmask16 m1 = cols >= 32   ? 0xffff
                 : cols <= 16 ? 0
                              : static_cast<__mmask16>((1u << (cols - 16)) - 1);
  __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float *row = c + r * ldc;
    __m512 x0 = _mm512_mul_ps(lo[r], va), x1 = _mm512_mul_ps(hi[r], va);
    if (beta != 0.0f) {
      x0 = _mm512_add_ps(x0, _mm512_mul_ps(_mm512_maskz_loadu_ps(m0, row), vb));
      x1 = _mm512_add_ps(
          x1, _mm512_mul_ps(_mm512_maskz_loadu_ps(m1, row + 16), vb));
    }
    _mm512_mask_storeu_ps(row, m0, x0);
    _mm512_mask_storeu_ps(row + 16, m1, x1);
  }
}

using DotBlockFn = void (*)(int64_t, int64_t, PackedA, PackedB, int64_t, float,
                            float, float *, int64_t);
constexpr DotBlockFn kDotBlocks[kBlockRows] = {
    dotBlock<1>, dotBlock<2>, dotBlock<3>, dotBlock<4>,
    dotBlock<5>, dotBlock<6>, dotBlock<7>, dotBlock<8>};

/// Without the instruction: the packed (rounded) values widened, exact in
/// f32, multiplied by sgemm.
void widenedProduct(int64_t m, int64_t n, int64_t k, PackedA a, PackedB b,
                    float alpha, float beta, float *c, int64_t ldc) {
  thread_local std::vector<float> wa, wb;
  wa.resize(m * k);
  wb.resize(k * n);
  const auto *pa = reinterpret_cast<const AliasedPair *>(a.data);
  auto half = [](uint32_t pair, int64_t kk) {
    return bf16ToFloat(static_cast<uint16_t>(pair >> (16 * (kk % 2))));
  };
  for (int64_t i = 0; i < m; ++i)
    for (int64_t kk = 0; kk < k; ++kk)
      wa[i * k + kk] = half(pa[i * a.rowStride + (kk / 2) * a.pairStride], kk);
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t j = 0; j < n; ++j)
      wb[kk * n + j] = half(b.data[(kk / 2) * b.ld + j], kk);
  sgemmSerial(false, false, m, n, k, alpha, wa.data(), k, wb.data(), n, beta, c,
              ldc);
}

} // namespace

bool hasBf16DotProduct() {
  static const bool has = __builtin_cpu_supports("avx512bf16");
  return has && !widenForTesting.load(std::memory_order_relaxed);
}

void widenBf16GemmForTesting(bool widen) { widenForTesting = widen; }

PackedA packA(bool trans, int64_t m, int64_t k, Bf16Source a,
              std::vector<uint32_t> &buf) {
  int64_t kp = (k + 1) / 2;
  if (!trans && a.bf16 && k % 2 == 0 && a.ld % 2 == 0)
    return {static_cast<const uint32_t *>(a.data), a.ld / 2, 1};
  buf.resize(m * kp);
  if (!trans) {
    for (int64_t i = 0; i < m; ++i)
      pairsOfRow(a, i, k, kp, buf.data() + i * kp);
    return {buf.data(), kp, 1};
  }
  // op(A)[i][kk] = A[kk][i]: A's rows 2p and 2p + 1 give pair p of every i.
  for (int64_t p = 0; p < kp; ++p)
    pairRows(a, 2 * p, k, m, buf.data() + p * m);
  return {buf.data(), 1, m};
}

PackedB packB(bool trans, int64_t k, int64_t n, Bf16Source b,
              std::vector<uint32_t> &buf) {
  int64_t kp = (k + 1) / 2;
  int64_t npad = (n + kBlockCols - 1) / kBlockCols * kBlockCols;
  buf.assign(kp * npad, 0u);
  if (!trans) {
    for (int64_t p = 0; p < kp; ++p)
      pairRows(b, 2 * p, k, n, buf.data() + p * npad);
    return {buf.data(), npad};
  }
  // op(B)[kk][j] = B[j][kk]: row j's pairs are column j's.
  thread_local std::vector<uint32_t> row;
  row.resize(kp);
  for (int64_t j = 0; j < n; ++j) {
    pairsOfRow(b, j, k, kp, row.data());
    for (int64_t p = 0; p < kp; ++p)
      buf[p * npad + j] = row[p];
  }
  return {buf.data(), npad};
}

void bf16Gemm(int64_t m, int64_t n, int64_t k, float alpha, PackedA a,
              PackedB b, float beta, float *c, int64_t ldc) {
  if (m <= 0 || n <= 0)
    return;
  if (!hasBf16DotProduct())
    return widenedProduct(m, n, k, a, b, alpha, beta, c, ldc);
  int64_t kp = (k + 1) / 2, lastOdd = k % 2 ? kp - 1 : -1;
  for (int64_t j0 = 0; j0 < n; j0 += kBlockCols) {
    int64_t cols = std::min<int64_t>(kBlockCols, n - j0);
    PackedB bj{b.data + j0, b.ld};
    for (int64_t i0 = 0; i0 < m; i0 += kBlockRows) {
      int64_t rows = std::min<int64_t>(kBlockRows, m - i0);
      PackedA ai{a.data + i0 * a.rowStride, a.rowStride, a.pairStride};
      kDotBlocks[rows - 1](kp, lastOdd, ai, bj, cols, alpha, beta,
                           c + i0 * ldc + j0, ldc);
    }
  }
}

} // namespace cleave::rt

//===- cpu.cpp - Fused attention and its backward -------------------------===//
//
// FlashAttention's algorithm on the CPU: the scores exist only as one tile
// of query rows by key columns at a time. The forward keeps a running
// maximum and sum per row (online softmax) and rescales its accumulator as
// the maximum grows; it stores each row's log-sum-exp, from which the
// backward recomputes a tile's probabilities exactly. Every task owns its
// outputs (forward: a block of query rows of one head; backward: one key
// head with the query heads that read it), so no two threads add into one
// element and results do not depend on the thread count.
//
// Under mixed precision q, k, v and the output's gradient are bf16 and each
// tile's products round their f32 operands (the probabilities, ds) to bf16
// and sum in f32, as FlashAttention and PyTorch's autocast bmm do; the
// softmax, its statistics and every gradient stay f32. An f32 attention
// runs sgemm as before.
//
//===----------------------------------------------------------------------===//

#include "core/convert.h"
#include "core/nn_geometry.h"
#include "core/vector_math.h"
#include "cpu/bf16_gemm.h"
#include "cpu/cpu_kernel.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace cleave::rt {
namespace {

using nn::AttentionGeometry;

// Tile extents: a 64 x 128 score tile and its probabilities stay in L2 next
// to the key and value rows they combine.
constexpr int64_t kRows = 64, kCols = 128;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// q, k, v (and the output's gradient): f32, or bf16's bits.
using Bf16 = uint16_t;

float widen(float x) { return x; }
float widen(Bf16 x) { return bf16ToFloat(x); }

/// The operands of one (batch, query head) pair.
template <typename T> struct HeadView {
  const T *q, *k, *v;
  const float *bias;
  int64_t bi, hi;
};

template <typename T>
HeadView<T> headView(const AttentionGeometry &g, const T *q, const T *k,
                     const T *v, const float *bias, int64_t bi, int64_t hi) {
  int64_t kh = hi / (g.h / g.hk);
  HeadView<T> view;
  view.q = q + (bi * g.h + hi) * g.sq * g.d;
  view.k = k + (bi * g.hk + kh) * g.sk * g.d;
  view.v = v + (bi * g.hk + kh) * g.sk * g.dv;
  view.bias =
      bias ? bias + bi * g.biasStride[0] + hi * g.biasStride[1] : nullptr;
  view.bi = bi;
  view.hi = hi;
  return view;
}

/// The six products of a head's tiles. f32: sgemm on the operands where
/// they are.
template <typename T> struct Products {
  const AttentionGeometry &g;
  HeadView<float> view;
  const float *dout;

  Products(const AttentionGeometry &g, const HeadView<float> &view,
           const float *dout, bool /*backward*/, uint64_t /*call*/)
      : g(g), view(view), dout(dout) {}
  /// s = scale q_i k_j^T.
  void scores(int64_t i0, int64_t rows, int64_t j0, int64_t cols, float *s) {
    sgemmSerial(false, true, rows, cols, g.d, g.scale, view.q + i0 * g.d, g.d,
                view.k + j0 * g.d, g.d, 0.0f, s, cols);
  }
  /// acc += p v_j.
  void addValues(int64_t rows, int64_t j0, int64_t cols, const float *p,
                 float *acc) {
    sgemmSerial(false, false, rows, g.dv, cols, 1.0f, p, cols,
                view.v + j0 * g.dv, g.dv, 1.0f, acc, g.dv);
  }
  /// dv_j += p^T dout_i.
  void valueGrad(int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                 const float *p, float *dv) {
    sgemmSerial(true, false, cols, g.dv, rows, 1.0f, p, cols, dout + i0 * g.dv,
                g.dv, 1.0f, dv + j0 * g.dv, g.dv);
  }
  /// dp = dout_i v_j^T.
  void probGrad(int64_t i0, int64_t rows, int64_t j0, int64_t cols, float *dp) {
    sgemmSerial(false, true, rows, cols, g.dv, 1.0f, dout + i0 * g.dv, g.dv,
                view.v + j0 * g.dv, g.dv, 0.0f, dp, cols);
  }
  /// dk_j += scale ds^T q_i.
  void keyGrad(int64_t i0, int64_t rows, int64_t j0, int64_t cols,
               const float *ds, float *dk) {
    sgemmSerial(true, false, cols, g.d, rows, g.scale, ds, cols,
                view.q + i0 * g.d, g.d, 1.0f, dk + j0 * g.d, g.d);
  }
  /// dq_i += scale ds k_j.
  void queryGrad(int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                 const float *ds, float *dq) {
    sgemmSerial(false, false, rows, g.d, cols, g.scale, ds, cols,
                view.k + j0 * g.d, g.d, 1.0f, dq + i0 * g.d, g.d);
  }
};

/// Each kernel call's number: a thread's packed head is reused only within
/// the call that packed it (the arena holds other values at those
/// addresses on the next).
std::atomic<uint64_t> callNumber{0};

/// bf16: the head's operands packed into the dot product's pairs once
/// (kept per thread while its tasks stay on the head), the tiles' f32
/// probabilities and their gradients rounded as they are packed.
template <> struct Products<Bf16> {
  const AttentionGeometry &g;
  HeadView<Bf16> view;
  const Bf16 *dout;
  PackedB kT, v, k{}, vT{}, q{}, dO{};
  std::vector<uint32_t> &tile;

  struct Slot {
    const void *data = nullptr;
    uint64_t call = 0;
    std::vector<uint32_t> buf;
    PackedB packed{};
  };
  static Slot &slot(int which) {
    thread_local Slot slots[6];
    return slots[which];
  }
  static std::vector<uint32_t> &tileBuffer() {
    thread_local std::vector<uint32_t> buf;
    return buf;
  }
  static PackedB cached(int which, bool trans, int64_t k, int64_t n,
                        const Bf16 *data, int64_t ld, uint64_t call) {
    Slot &s = slot(which);
    if (s.data != data || s.call != call) {
      s.packed = packB(trans, k, n, {data, true, ld}, s.buf);
      s.data = data;
      s.call = call;
    }
    return s.packed;
  }

  Products(const AttentionGeometry &g, const HeadView<Bf16> &view,
           const Bf16 *dout, bool backward, uint64_t call)
      : g(g), view(view), dout(dout), tile(tileBuffer()) {
    kT = cached(0, true, g.d, g.sk, view.k, g.d, call);
    v = cached(1, false, g.sk, g.dv, view.v, g.dv, call);
    if (!backward)
      return;
    k = cached(2, false, g.sk, g.d, view.k, g.d, call);
    vT = cached(3, true, g.dv, g.sk, view.v, g.dv, call);
    q = cached(4, false, g.sq, g.d, view.q, g.d, call);
    dO = cached(5, false, g.sq, g.dv, dout, g.dv, call);
  }
  /// Packed rows from pair offset \p at (tiles start at even rows).
  static PackedB from(PackedB b, int64_t row) {
    return {b.data + row / 2 * b.ld, b.ld};
  }
  PackedA rowsOf(const void *x, bool bf16, int64_t rows, int64_t k,
                 bool trans = false) {
    return packA(trans, rows, k, {x, bf16, trans ? rows : k}, tile);
  }
  void scores(int64_t i0, int64_t rows, int64_t j0, int64_t cols, float *s) {
    bf16Gemm(rows, cols, g.d, g.scale,
             rowsOf(view.q + i0 * g.d, true, rows, g.d), {kT.data + j0, kT.ld},
             0.0f, s, cols);
  }
  void addValues(int64_t rows, int64_t j0, int64_t cols, const float *p,
                 float *acc) {
    bf16Gemm(rows, g.dv, cols, 1.0f, rowsOf(p, false, rows, cols), from(v, j0),
             1.0f, acc, g.dv);
  }
  void valueGrad(int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                 const float *p, float *dv) {
    bf16Gemm(cols, g.dv, rows, 1.0f, rowsOf(p, false, cols, rows, true),
             from(dO, i0), 1.0f, dv + j0 * g.dv, g.dv);
  }
  void probGrad(int64_t i0, int64_t rows, int64_t j0, int64_t cols, float *dp) {
    bf16Gemm(rows, cols, g.dv, 1.0f, rowsOf(dout + i0 * g.dv, true, rows, g.dv),
             {vT.data + j0, vT.ld}, 0.0f, dp, cols);
  }
  void keyGrad(int64_t i0, int64_t rows, int64_t j0, int64_t cols,
               const float *ds, float *dk) {
    bf16Gemm(cols, g.d, rows, g.scale, rowsOf(ds, false, cols, rows, true),
             from(q, i0), 1.0f, dk + j0 * g.d, g.d);
  }
  void queryGrad(int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                 const float *ds, float *dq) {
    bf16Gemm(rows, g.d, cols, g.scale, rowsOf(ds, false, rows, cols),
             from(k, j0), 1.0f, dq + i0 * g.d, g.d);
  }
};

/// s [rows, cols] = scale * q[i0:i0+rows] k[j0:j0+cols]^T + bias, with
/// masked keys at -inf.
template <typename T>
void scoreTile(const AttentionGeometry &g, const HeadView<T> &view,
               Products<T> &prods, int64_t i0, int64_t rows, int64_t j0,
               int64_t cols, float *s) {
  prods.scores(i0, rows, j0, cols, s);
  for (int64_t r = 0; r < rows; ++r) {
    float *row = s + r * cols;
    int64_t i = i0 + r;
    if (view.bias) {
      const float *b = view.bias + i * g.biasStride[2];
      int64_t stride = g.biasStride[3];
      for (int64_t c = 0; c < cols; ++c)
        row[c] += b[(j0 + c) * stride];
    }
    int64_t end = g.keyEnd(i);
    for (int64_t c = std::max<int64_t>(end - j0, 0); c < cols; ++c)
      row[c] = kNegInf;
  }
}

/// acc[r] = step(... step(acc[r], r, 0) ..., r, cols - 1) for each of
/// \p rows rows, four rows' chains interleaved so that their latencies
/// overlap (a row's maximum, a sum: one dependent add per element). Each
/// row is reduced in its own order, so the bits are those of a loop over
/// that row alone.
template <typename Acc, typename Step>
void reduceRows(int64_t rows, int64_t cols, Acc *acc, Step step) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    Acc a0 = acc[r], a1 = acc[r + 1], a2 = acc[r + 2], a3 = acc[r + 3];
    for (int64_t c = 0; c < cols; ++c) {
      a0 = step(a0, r, c);
      a1 = step(a1, r + 1, c);
      a2 = step(a2, r + 2, c);
      a3 = step(a3, r + 3, c);
    }
    acc[r] = a0;
    acc[r + 1] = a1;
    acc[r + 2] = a2;
    acc[r + 3] = a3;
  }
  for (; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      acc[r] = step(acc[r], r, c);
}

/// One block of query rows of one head: out and lse rows.
template <typename T>
void forwardBlock(const AttentionGeometry &g, const HeadView<T> &view,
                  Products<T> &prods, int64_t i0, int64_t rows, float *out,
                  float *lse, std::vector<float> &scratch) {
  scratch.resize(kRows * kCols + kRows * g.dv + 2 * kRows);
  float *s = scratch.data();
  float *acc = s + kRows * kCols;
  float *maxima = acc + kRows * g.dv;
  float *sums = maxima + kRows;
  std::fill(acc, acc + rows * g.dv, 0.0f);
  std::fill(maxima, maxima + rows, kNegInf);
  std::fill(sums, sums + rows, 0.0f);
  int64_t end = g.keyEnd(i0 + rows - 1);
  for (int64_t j0 = 0; j0 < end; j0 += kCols) {
    int64_t cols = std::min(kCols, end - j0);
    scoreTile(g, view, prods, i0, rows, j0, cols, s);
    // Each row's new maximum, its exponentials (a loop per instruction
    // set), then their sum.
    float tileMax[kRows], tileSum[kRows];
    std::copy(maxima, maxima + rows, tileMax);
    reduceRows(rows, cols, tileMax, [&](float m, int64_t r, int64_t c) {
      return std::max(m, s[r * cols + c]);
    });
    for (int64_t r = 0; r < rows; ++r) {
      float *row = s + r * cols;
      if (tileMax[r] == kNegInf)
        std::fill(row, row + cols, 0.0f); // every key so far masked
      else
        expArray(row, tileMax[r], row, cols);
    }
    std::fill(tileSum, tileSum + rows, 0.0f);
    reduceRows(rows, cols, tileSum, [&](float sum, int64_t r, int64_t c) {
      return sum + s[r * cols + c];
    });
    for (int64_t r = 0; r < rows; ++r) {
      float m = tileMax[r];
      if (m == kNegInf)
        continue; // nothing to add yet
      float rescale = vecExp(maxima[r] - m);
      sums[r] = sums[r] * rescale + tileSum[r];
      maxima[r] = m;
      if (rescale != 1.0f)
        for (int64_t c = 0; c < g.dv; ++c)
          acc[r * g.dv + c] *= rescale;
    }
    prods.addValues(rows, j0, cols, s, acc);
  }
  for (int64_t r = 0; r < rows; ++r) {
    // A row with every key masked divides 0 by 0, as softmax does.
    float inv = 1.0f / sums[r];
    for (int64_t c = 0; c < g.dv; ++c)
      out[r * g.dv + c] = acc[r * g.dv + c] * inv;
    lse[r] = maxima[r] + std::log(sums[r]);
  }
}

/// Gradients of one query head into dq (its own rows) and dk, dv (its key
/// head's, accumulated over the group).
template <typename T>
void backwardHead(const AttentionGeometry &g, const HeadView<T> &view,
                  Products<T> &prods, const float *out, const float *lse,
                  const T *dout, float *dq, float *dk, float *dv,
                  std::vector<float> &scratch) {
  scratch.resize(2 * kRows * kCols + g.sq);
  float *p = scratch.data();
  float *dp = p + kRows * kCols;
  float *delta = dp + kRows * kCols;
  // delta_i = sum_c dout[i, c] out[i, c] = sum_j p_ij dp_ij.
  thread_local std::vector<double> sums;
  sums.assign(g.sq, 0.0);
  reduceRows(g.sq, g.dv, sums.data(), [&](double sum, int64_t i, int64_t c) {
    return sum +
           static_cast<double>(widen(dout[i * g.dv + c])) * out[i * g.dv + c];
  });
  for (int64_t i = 0; i < g.sq; ++i)
    delta[i] = static_cast<float>(sums[i]);
  for (int64_t j0 = 0; j0 < g.sk; j0 += kCols) {
    int64_t cols = std::min(kCols, g.sk - j0);
    for (int64_t i0 = 0; i0 < g.sq; i0 += kRows) {
      int64_t rows = std::min(kRows, g.sq - i0);
      if (g.keyEnd(i0 + rows - 1) <= j0)
        continue; // the whole tile masked
      scoreTile(g, view, prods, i0, rows, j0, cols, p);
      for (int64_t r = 0; r < rows; ++r)
        expArray(p + r * cols, lse[i0 + r], p + r * cols, cols);
      // dv_j += p^T dout_i; dp = dout_i v_j^T.
      prods.valueGrad(i0, rows, j0, cols, p, dv);
      prods.probGrad(i0, rows, j0, cols, dp);
      // ds = p (dp - delta), into dp.
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          dp[r * cols + c] =
              p[r * cols + c] * (dp[r * cols + c] - delta[i0 + r]);
      // dk_j += scale ds^T q_i; dq_i += scale ds k_j.
      prods.keyGrad(i0, rows, j0, cols, dp, dk);
      prods.queryGrad(i0, rows, j0, cols, dp, dq);
    }
  }
}

template <typename T> KernelFn forwardKernel(const AttentionGeometry &g) {
  return [g](const KernelArgs &args) {
    const auto *q = static_cast<const T *>(args.operands[0]);
    const auto *k = static_cast<const T *>(args.operands[1]);
    const auto *v = static_cast<const T *>(args.operands[2]);
    const auto *bias = static_cast<const float *>(args.operands[3]);
    auto *out = static_cast<float *>(args.results[0]);
    auto *lse = static_cast<float *>(args.results[1]);
    int64_t blocks = (g.sq + kRows - 1) / kRows;
    int64_t tasks = g.b * g.h * blocks;
    uint64_t call = ++callNumber;
#pragma omp parallel if (tasks > 1)
    {
      std::vector<float> scratch;
#pragma omp for schedule(dynamic)
      for (int64_t t = 0; t < tasks; ++t) {
        int64_t pair = t / blocks, i0 = (t % blocks) * kRows;
        HeadView<T> view = headView(g, q, k, v, bias, pair / g.h, pair % g.h);
        Products<T> prods(g, view, static_cast<const T *>(nullptr), false,
                          call);
        int64_t rows = std::min(kRows, g.sq - i0);
        forwardBlock(g, view, prods, i0, rows, out + (pair * g.sq + i0) * g.dv,
                     lse + pair * g.sq + i0, scratch);
      }
    }
    return Status::ok();
  };
}

template <typename T> KernelFn backwardKernel(const AttentionGeometry &g) {
  return [g](const KernelArgs &args) {
    const auto *q = static_cast<const T *>(args.operands[0]);
    const auto *k = static_cast<const T *>(args.operands[1]);
    const auto *v = static_cast<const T *>(args.operands[2]);
    const auto *out = static_cast<const float *>(args.operands[3]);
    const auto *lse = static_cast<const float *>(args.operands[4]);
    const auto *dout = static_cast<const T *>(args.operands[5]);
    const auto *bias = static_cast<const float *>(args.operands[6]);
    auto *dq = static_cast<float *>(args.results[0]);
    auto *dk = static_cast<float *>(args.results[1]);
    auto *dv = static_cast<float *>(args.results[2]);
    int64_t group = g.h / g.hk, tasks = g.b * g.hk;
    uint64_t call = ++callNumber;
#pragma omp parallel if (tasks > 1)
    {
      std::vector<float> scratch;
#pragma omp for schedule(dynamic)
      for (int64_t t = 0; t < tasks; ++t) {
        // One key head and the query heads of its group: nothing another
        // task writes.
        float *dkHead = dk + t * g.sk * g.d, *dvHead = dv + t * g.sk * g.dv;
        std::memset(dkHead, 0, sizeof(float) * g.sk * g.d);
        std::memset(dvHead, 0, sizeof(float) * g.sk * g.dv);
        int64_t bi = t / g.hk, kh = t % g.hk;
        for (int64_t hi = kh * group; hi < (kh + 1) * group; ++hi) {
          int64_t pair = bi * g.h + hi;
          float *dqHead = dq + pair * g.sq * g.d;
          std::memset(dqHead, 0, sizeof(float) * g.sq * g.d);
          HeadView<T> view = headView(g, q, k, v, bias, bi, hi);
          const T *doutHead = dout + pair * g.sq * g.dv;
          Products<T> prods(g, view, doutHead, true, call);
          backwardHead(g, view, prods, out + pair * g.sq * g.dv,
                       lse + pair * g.sq, dout + pair * g.sq * g.dv, dqHead,
                       dkHead, dvHead, scratch);
        }
      }
    }
    return Status::ok();
  };
}

} // namespace

Status prepare_attention(const KernelInfo &info, KernelFn *fn) {
  AttentionGeometry g;
  if (Status s = nn::readAttentionGeometry(info, false, &g); !s)
    return s;
  *fn = g.bf16 ? forwardKernel<Bf16>(g) : forwardKernel<float>(g);
  return Status::ok();
}

Status prepare_attention_backward(const KernelInfo &info, KernelFn *fn) {
  AttentionGeometry g;
  if (Status s = nn::readAttentionGeometry(info, true, &g); !s)
    return s;
  *fn = g.bf16 ? backwardKernel<Bf16>(g) : backwardKernel<float>(g);
  return Status::ok();
}

} // namespace cleave::rt

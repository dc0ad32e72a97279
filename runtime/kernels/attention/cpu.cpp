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
//===----------------------------------------------------------------------===//

#include "core/nn_geometry.h"
#include "core/vector_math.h"
#include "cpu/cpu_kernel.h"

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

/// The operands of one (batch, query head) pair.
struct HeadView {
  const float *q, *k, *v, *bias;
  int64_t bi, hi;
};

HeadView headView(const AttentionGeometry &g, const float *q, const float *k,
                  const float *v, const float *bias, int64_t bi, int64_t hi) {
  int64_t kh = hi / (g.h / g.hk);
  HeadView view;
  view.q = q + (bi * g.h + hi) * g.sq * g.d;
  view.k = k + (bi * g.hk + kh) * g.sk * g.d;
  view.v = v + (bi * g.hk + kh) * g.sk * g.dv;
  view.bias =
      bias ? bias + bi * g.biasStride[0] + hi * g.biasStride[1] : nullptr;
  view.bi = bi;
  view.hi = hi;
  return view;
}

/// s [rows, cols] = scale * q[i0:i0+rows] k[j0:j0+cols]^T + bias, with
/// masked keys at -inf.
void scoreTile(const AttentionGeometry &g, const HeadView &view, int64_t i0,
               int64_t rows, int64_t j0, int64_t cols, float *s) {
  sgemmSerial(false, true, rows, cols, g.d, g.scale, view.q + i0 * g.d, g.d,
              view.k + j0 * g.d, g.d, 0.0f, s, cols);
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

/// One block of query rows of one head: out and lse rows.
void forwardBlock(const AttentionGeometry &g, const HeadView &view, int64_t i0,
                  int64_t rows, float *out, float *lse,
                  std::vector<float> &scratch) {
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
    scoreTile(g, view, i0, rows, j0, cols, s);
    for (int64_t r = 0; r < rows; ++r) {
      float *row = s + r * cols;
      float m = maxima[r];
      for (int64_t c = 0; c < cols; ++c)
        m = std::max(m, row[c]);
      if (m == kNegInf) {
        // Every key so far masked: nothing to add yet.
        std::fill(row, row + cols, 0.0f);
        continue;
      }
      float rescale = vecExp(maxima[r] - m);
      // The exponentials first (a loop per instruction set), then their sum.
      expArray(row, m, row, cols);
      float sum = 0.0f;
      for (int64_t c = 0; c < cols; ++c)
        sum += row[c];
      sums[r] = sums[r] * rescale + sum;
      maxima[r] = m;
      if (rescale != 1.0f)
        for (int64_t c = 0; c < g.dv; ++c)
          acc[r * g.dv + c] *= rescale;
    }
    sgemmSerial(false, false, rows, g.dv, cols, 1.0f, s, cols,
                view.v + j0 * g.dv, g.dv, 1.0f, acc, g.dv);
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
void backwardHead(const AttentionGeometry &g, const HeadView &view,
                  const float *out, const float *lse, const float *dout,
                  float *dq, float *dk, float *dv,
                  std::vector<float> &scratch) {
  scratch.resize(2 * kRows * kCols + g.sq);
  float *p = scratch.data();
  float *dp = p + kRows * kCols;
  float *delta = dp + kRows * kCols;
  for (int64_t i = 0; i < g.sq; ++i) {
    // delta_i = sum_c dout[i, c] out[i, c] = sum_j p_ij dp_ij.
    double sum = 0;
    for (int64_t c = 0; c < g.dv; ++c)
      sum += static_cast<double>(dout[i * g.dv + c]) * out[i * g.dv + c];
    delta[i] = static_cast<float>(sum);
  }
  for (int64_t j0 = 0; j0 < g.sk; j0 += kCols) {
    int64_t cols = std::min(kCols, g.sk - j0);
    for (int64_t i0 = 0; i0 < g.sq; i0 += kRows) {
      int64_t rows = std::min(kRows, g.sq - i0);
      if (g.keyEnd(i0 + rows - 1) <= j0)
        continue; // the whole tile masked
      scoreTile(g, view, i0, rows, j0, cols, p);
      for (int64_t r = 0; r < rows; ++r)
        expArray(p + r * cols, lse[i0 + r], p + r * cols, cols);
      // dv_j += p^T dout_i; dp = dout_i v_j^T.
      sgemmSerial(true, false, cols, g.dv, rows, 1.0f, p, cols,
                  dout + i0 * g.dv, g.dv, 1.0f, dv + j0 * g.dv, g.dv);
      sgemmSerial(false, true, rows, cols, g.dv, 1.0f, dout + i0 * g.dv, g.dv,
                  view.v + j0 * g.dv, g.dv, 0.0f, dp, cols);
      // ds = p (dp - delta), into dp.
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          dp[r * cols + c] =
              p[r * cols + c] * (dp[r * cols + c] - delta[i0 + r]);
      // dk_j += scale ds^T q_i; dq_i += scale ds k_j.
      sgemmSerial(true, false, cols, g.d, rows, g.scale, dp, cols,
                  view.q + i0 * g.d, g.d, 1.0f, dk + j0 * g.d, g.d);
      sgemmSerial(false, false, rows, g.d, cols, g.scale, dp, cols,
                  view.k + j0 * g.d, g.d, 1.0f, dq + i0 * g.d, g.d);
    }
  }
}

} // namespace

Status prepare_attention(const KernelInfo &info, KernelFn *fn) {
  AttentionGeometry g;
  if (Status s = nn::readAttentionGeometry(info, false, &g); !s)
    return s;
  *fn = [g](const KernelArgs &args) {
    const auto *q = static_cast<const float *>(args.operands[0]);
    const auto *k = static_cast<const float *>(args.operands[1]);
    const auto *v = static_cast<const float *>(args.operands[2]);
    const auto *bias = static_cast<const float *>(args.operands[3]);
    auto *out = static_cast<float *>(args.results[0]);
    auto *lse = static_cast<float *>(args.results[1]);
    int64_t blocks = (g.sq + kRows - 1) / kRows;
    int64_t tasks = g.b * g.h * blocks;
#pragma omp parallel if (tasks > 1)
    {
      std::vector<float> scratch;
#pragma omp for schedule(dynamic)
      for (int64_t t = 0; t < tasks; ++t) {
        int64_t pair = t / blocks, i0 = (t % blocks) * kRows;
        HeadView view = headView(g, q, k, v, bias, pair / g.h, pair % g.h);
        int64_t rows = std::min(kRows, g.sq - i0);
        forwardBlock(g, view, i0, rows, out + (pair * g.sq + i0) * g.dv,
                     lse + pair * g.sq + i0, scratch);
      }
    }
    return Status::ok();
  };
  return Status::ok();
}

Status prepare_attention_backward(const KernelInfo &info, KernelFn *fn) {
  AttentionGeometry g;
  if (Status s = nn::readAttentionGeometry(info, true, &g); !s)
    return s;
  *fn = [g](const KernelArgs &args) {
    const auto *q = static_cast<const float *>(args.operands[0]);
    const auto *k = static_cast<const float *>(args.operands[1]);
    const auto *v = static_cast<const float *>(args.operands[2]);
    const auto *out = static_cast<const float *>(args.operands[3]);
    const auto *lse = static_cast<const float *>(args.operands[4]);
    const auto *dout = static_cast<const float *>(args.operands[5]);
    const auto *bias = static_cast<const float *>(args.operands[6]);
    auto *dq = static_cast<float *>(args.results[0]);
    auto *dk = static_cast<float *>(args.results[1]);
    auto *dv = static_cast<float *>(args.results[2]);
    int64_t group = g.h / g.hk, tasks = g.b * g.hk;
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
          backwardHead(g, headView(g, q, k, v, bias, bi, hi),
                       out + pair * g.sq * g.dv, lse + pair * g.sq,
                       dout + pair * g.sq * g.dv, dqHead, dkHead, dvHead,
                       scratch);
        }
      }
    }
    return Status::ok();
  };
  return Status::ok();
}

} // namespace cleave::rt

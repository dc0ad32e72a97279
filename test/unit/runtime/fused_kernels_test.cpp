//===- fused_kernels_test.cpp - Fused attention and cross-entropy --------===//
//
// Both against float64 references. Attention: shapes that cross the kernels'
// tiles (64 query rows, 128 keys) unevenly, grouped key heads, more keys than
// queries under the causal mask, biases broadcast along different dims and
// holding -inf: the forward's output and log-sum-exp and the backward's three
// gradients against the plain softmax(scale q k^T + bias) v in double
// precision, and bit-identical at one and two threads; the same with bf16
// operands (mixed precision's tiles) within bf16's rounding.
//
//===----------------------------------------------------------------------===//

#include "test_util.h"

#include "cpu/bf16_gemm.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

using namespace cleave::rt;
using namespace cleave::rt::test;

namespace {

struct Case {
  int64_t b, h, hk, sq, sk, d, dv;
  double scale;
  bool causal;
  /// Empty: no bias.
  Shape biasShape;
};

struct Reference {
  std::vector<double> out, lse, dq, dk, dv;
};

double at(const std::vector<float> &x, const Shape &s, int64_t i0, int64_t i1,
          int64_t i2, int64_t i3) {
  // Broadcast read: size-1 dims take index 0.
  int64_t idx[4] = {i0, i1, i2, i3};
  int64_t flat = 0;
  for (int d = 0; d < 4; ++d)
    flat = flat * s[d] + (s[d] == 1 ? 0 : idx[d]);
  return x[flat];
}

Reference reference(const Case &c, const std::vector<float> &q,
                    const std::vector<float> &k, const std::vector<float> &v,
                    const std::vector<float> &bias,
                    const std::vector<float> &dout) {
  Reference r;
  r.out.assign(c.b * c.h * c.sq * c.dv, 0);
  r.lse.assign(c.b * c.h * c.sq, 0);
  r.dq.assign(c.b * c.h * c.sq * c.d, 0);
  r.dk.assign(c.b * c.hk * c.sk * c.d, 0);
  r.dv.assign(c.b * c.hk * c.sk * c.dv, 0);
  Shape qs{c.b, c.h, c.sq, c.d}, ks{c.b, c.hk, c.sk, c.d},
      vs{c.b, c.hk, c.sk, c.dv}, os{c.b, c.h, c.sq, c.dv};
  std::vector<double> p(c.sk), dp(c.sk);
  for (int64_t bi = 0; bi < c.b; ++bi)
    for (int64_t hi = 0; hi < c.h; ++hi) {
      int64_t kh = hi / (c.h / c.hk);
      for (int64_t i = 0; i < c.sq; ++i) {
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < c.sk; ++j) {
          double s = -std::numeric_limits<double>::infinity();
          if (!c.causal || j <= i + c.sk - c.sq) {
            s = 0;
            for (int64_t e = 0; e < c.d; ++e)
              s += at(q, qs, bi, hi, i, e) * at(k, ks, bi, kh, j, e);
            s *= c.scale;
            if (!c.biasShape.empty())
              s += at(bias, c.biasShape, bi, hi, i, j);
          }
          p[j] = s;
          m = std::max(m, s);
        }
        double sum = 0;
        for (int64_t j = 0; j < c.sk; ++j)
          sum += p[j] = std::exp(p[j] - m);
        int64_t row = (bi * c.h + hi) * c.sq + i;
        r.lse[row] = m + std::log(sum);
        double delta = 0;
        for (int64_t j = 0; j < c.sk; ++j) {
          p[j] /= sum;
          dp[j] = 0;
          for (int64_t e = 0; e < c.dv; ++e) {
            r.out[row * c.dv + e] += p[j] * at(v, vs, bi, kh, j, e);
            dp[j] += at(dout, os, bi, hi, i, e) * at(v, vs, bi, kh, j, e);
          }
          delta += p[j] * dp[j];
        }
        for (int64_t j = 0; j < c.sk; ++j) {
          double ds = p[j] * (dp[j] - delta);
          int64_t krow = (bi * c.hk + kh) * c.sk + j;
          for (int64_t e = 0; e < c.d; ++e) {
            r.dq[row * c.d + e] += c.scale * ds * at(k, ks, bi, kh, j, e);
            r.dk[krow * c.d + e] += c.scale * ds * at(q, qs, bi, hi, i, e);
          }
          for (int64_t e = 0; e < c.dv; ++e)
            r.dv[krow * c.dv + e] += p[j] * at(dout, os, bi, hi, i, e);
        }
      }
    }
  return r;
}

/// Relative to the tensor's largest magnitude, as the zoo compares.
void expectClose(const std::vector<float> &got, const std::vector<double> &want,
                 double rtol, const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1e-30, worst = 0;
  for (double w : want)
    scale = std::max(scale, std::fabs(w));
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::fabs(got[i] - want[i]));
  EXPECT_LE(worst / scale, rtol) << what;
}

Attrs attrsOf(const Case &c) {
  return {{"scale", {{}, {c.scale}}}, {"causal", {{c.causal ? 1 : 0}, {}}}};
}

void check(const Case &c, uint32_t seed) {
  HostTensor q = randomF32({c.b, c.h, c.sq, c.d}, seed);
  HostTensor k = randomF32({c.b, c.hk, c.sk, c.d}, seed + 1);
  HostTensor v = randomF32({c.b, c.hk, c.sk, c.dv}, seed + 2);
  HostTensor dout = randomF32({c.b, c.h, c.sq, c.dv}, seed + 3);
  std::optional<HostTensor> bias;
  std::vector<float> biasValues;
  if (!c.biasShape.empty()) {
    bias = randomF32(c.biasShape, seed + 4);
    // Mask the last key of every other bias row (a padding mask's -inf).
    float *data = bias->data<float>();
    int64_t last = c.biasShape[3];
    for (int64_t i = 0; i < numel(c.biasShape); i += 2 * last)
      data[i + last - 1] = -std::numeric_limits<float>::infinity();
    biasValues = values<float>(*bias);
  }
  Reference want = reference(c, values<float>(q), values<float>(k),
                             values<float>(v), biasValues, values<float>(dout));
  std::vector<std::vector<float>> runs[2];
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    std::vector<HostTensor> fwd = runKernel(
        "attention", {q, k, v, bias},
        {{DType::F32, {c.b, c.h, c.sq, c.dv}}, {DType::F32, {c.b, c.h, c.sq}}},
        attrsOf(c));
    ASSERT_EQ(fwd.size(), 2u);
    std::vector<HostTensor> bwd = runKernel(
        "attention_backward", {q, k, v, fwd[0], fwd[1], dout, bias},
        {{DType::F32, q.shape}, {DType::F32, k.shape}, {DType::F32, v.shape}},
        attrsOf(c));
    ASSERT_EQ(bwd.size(), 3u);
    for (const HostTensor *t : {&fwd[0], &fwd[1], &bwd[0], &bwd[1], &bwd[2]})
      runs[threads - 1].push_back(values<float>(*t));
  }
  omp_set_num_threads(2);
  const char *names[] = {"out", "lse", "dq", "dk", "dv"};
  const std::vector<double> *wants[] = {&want.out, &want.lse, &want.dq,
                                        &want.dk, &want.dv};
  for (int i = 0; i < 5; ++i) {
    expectClose(runs[0][i], *wants[i], 2e-6, names[i]);
    EXPECT_EQ(runs[0][i], runs[1][i]) << names[i] << " differs by threads";
  }
}

TEST(Attention, GroupedCausalBiasAcrossTiles) {
  // 4 query heads on 2 key heads; 70 queries on 150 keys (tiles of 64 and
  // 128 with remainders); a learned bias broadcast over the batch.
  check({2, 4, 2, 70, 150, 24, 20, 0.3, true, {1, 4, 70, 150}}, 11);
}

TEST(Attention, PaddingBiasNoMask) {
  // BERT's padding: [B, 1, 1, Sk] with -inf keys; one key head for all.
  check({3, 2, 1, 130, 130, 16, 16, 0.25, false, {3, 1, 1, 130}}, 21);
}

TEST(Attention, CausalNoBias) {
  check({1, 3, 3, 200, 200, 8, 12, 0.125, true, {}}, 31);
}

/// Rounds \p t to bf16 in place; gives the rounded values in f32 (what a
/// reference reads).
std::vector<float> toBf16(HostTensor &t) {
  EXPECT_TRUE(narrowFromF32(&t, DType::BF16));
  HostTensor wide = t;
  EXPECT_TRUE(widenToF32(&wide));
  return values<float>(wide);
}

/// Mixed precision: bf16 q, k, v and output gradient (the values the
/// reference reads), the tiles' probabilities and their gradients rounded
/// to bf16 inside the kernel, sums in f32: within bf16's rounding (2^-8 of
/// the largest magnitude) of the float64 reference, on the AVX512_BF16
/// dot product and on its widened sgemm fallback alike, and bit-identical
/// at one and two threads.
void checkBf16(const Case &c, uint32_t seed) {
  HostTensor t[4] = {randomF32({c.b, c.h, c.sq, c.d}, seed),
                     randomF32({c.b, c.hk, c.sk, c.d}, seed + 1),
                     randomF32({c.b, c.hk, c.sk, c.dv}, seed + 2),
                     randomF32({c.b, c.h, c.sq, c.dv}, seed + 3)};
  std::vector<float> rounded[4];
  for (int i = 0; i < 4; ++i)
    rounded[i] = toBf16(t[i]);
  auto &[q, k, v, dout] = t;
  Reference want =
      reference(c, rounded[0], rounded[1], rounded[2], {}, rounded[3]);
  const std::vector<double> *wants[] = {&want.out, &want.lse, &want.dq,
                                        &want.dk, &want.dv};
  const char *names[] = {"out", "lse", "dq", "dk", "dv"};
  std::vector<std::vector<float>> first;
  for (bool widen : {false, true})
    for (int threads : {1, 2}) {
      widenBf16GemmForTesting(widen);
      omp_set_num_threads(threads);
      std::vector<HostTensor> fwd =
          runKernel("attention", {q, k, v, std::nullopt},
                    {{DType::F32, {c.b, c.h, c.sq, c.dv}},
                     {DType::F32, {c.b, c.h, c.sq}}},
                    attrsOf(c));
      ASSERT_EQ(fwd.size(), 2u);
      std::vector<HostTensor> bwd = runKernel(
          "attention_backward", {q, k, v, fwd[0], fwd[1], dout, std::nullopt},
          {{DType::F32, q.shape}, {DType::F32, k.shape}, {DType::F32, v.shape}},
          attrsOf(c));
      ASSERT_EQ(bwd.size(), 3u);
      const HostTensor *got[] = {&fwd[0], &fwd[1], &bwd[0], &bwd[1], &bwd[2]};
      for (int i = 0; i < 5; ++i) {
        std::string what = std::string(names[i]) +
                           (widen ? " (widened)" : " (dot product)") + " at " +
                           std::to_string(threads) + " threads";
        // lse reads only the exact bf16 products' f32 sums.
        expectClose(values<float>(*got[i]), *wants[i], i == 1 ? 2e-6 : 8e-3,
                    what);
        if (threads == 1)
          first.push_back(values<float>(*got[i]));
        else
          EXPECT_EQ(values<float>(*got[i]), first[first.size() - 5 + i])
              << what << " differs by threads";
      }
    }
  widenBf16GemmForTesting(false);
  omp_set_num_threads(2);
}

TEST(Attention, Bf16OperandsGroupedCausalAcrossTiles) {
  // Odd head dims (packed with a zero pair), 70 queries on 150 keys.
  checkBf16({2, 4, 2, 70, 150, 24, 21, 0.3, true, {}}, 41);
  checkBf16({1, 2, 1, 129, 129, 17, 16, 0.25, false, {}}, 51);
}

TEST(Attention, Bf16CausalTileReadsNoKeyPastItsMask) {
  // 65 queries on 66 keys, causal: the first block of 64 queries sees keys
  // 0..64, an odd depth whose last bf16 pair also holds key 65. Key 65's
  // value is NaN (only query 64 sees it): the first 64 rows stay finite
  // and right, as the f32 kernel, which never reads past the mask, gives.
  Case c{1, 1, 1, 65, 66, 16, 16, 0.25, true, {}};
  HostTensor q = randomF32({1, 1, 65, 16}, 61),
             k = randomF32({1, 1, 66, 16}, 62);
  HostTensor v = randomF32({1, 1, 66, 16}, 63);
  for (int64_t e = 0; e < 16; ++e)
    v.data<float>()[65 * 16 + e] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> rounded[3] = {toBf16(q), toBf16(k), toBf16(v)};
  Reference want = reference(c, rounded[0], rounded[1], rounded[2], {},
                             std::vector<float>(65 * 16, 0.0f));
  want.out.resize(64 * 16); // row 64 reads the NaN
  for (bool widen : {false, true}) {
    widenBf16GemmForTesting(widen);
    std::vector<HostTensor> fwd = runKernel(
        "attention", {q, k, v, std::nullopt},
        {{DType::F32, {1, 1, 65, 16}}, {DType::F32, {1, 1, 65}}}, attrsOf(c));
    ASSERT_EQ(fwd.size(), 2u);
    std::vector<float> out = values<float>(fwd[0]);
    out.resize(64 * 16);
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) {
      return std::isfinite(x);
    })) << (widen ? "widened" : "dot product");
    expectClose(out, want.out, 8e-3, widen ? "widened" : "dot product");
  }
  widenBf16GemmForTesting(false);
}

TEST(Attention, BadShapesAreLoadErrors) {
  // Query heads not a multiple of key heads.
  plan::Program p = singleKernelProgram(
      "attention",
      {randomF32({1, 3, 4, 8}, 1), randomF32({1, 2, 4, 8}, 2),
       randomF32({1, 2, 4, 8}, 3)},
      {{DType::F32, {1, 3, 4, 8}}, {DType::F32, {1, 3, 4}}},
      {{"scale", {{}, {1.0}}}});
  EXPECT_NE(createError(p).find("multiple of Hk"), std::string::npos)
      << createError(p);
  // A bias that does not broadcast to the scores.
  p = singleKernelProgram(
      "attention",
      {randomF32({1, 2, 4, 8}, 1), randomF32({1, 2, 5, 8}, 2),
       randomF32({1, 2, 5, 8}, 3), randomF32({1, 2, 4, 4}, 4)},
      {{DType::F32, {1, 2, 4, 8}}, {DType::F32, {1, 2, 4}}},
      {{"scale", {{}, {1.0}}}});
  EXPECT_NE(createError(p).find("does not broadcast"), std::string::npos)
      << createError(p);
}

/// cross_entropy and its backward over the middle axis of [2, 7, 3] logits
/// with i32 labels (one outside the classes, one at the last class),
/// against the sums and the gradient written out in double.
TEST(CrossEntropy, MiddleAxisAgainstReference) {
  Shape xs{2, 7, 3}, kept{2, 1, 3};
  HostTensor x = randomF32(xs, 41, -6, 6);
  HostTensor shift = randomF32(kept, 42, -1, 1);
  HostTensor labels = i32(kept, {0, 6, 9, 3, -100, 2});
  std::vector<int32_t> idValues{0, 1, 2, 3, 4, 5, 6};
  HostTensor ids = i32({1, 7, 1}, idValues);
  HostTensor gs = randomF32(kept, 43), gt = randomF32(kept, 44);
  Attrs axis{{"axis", {{1}, {}}}};
  std::vector<HostTensor> fwd =
      runKernel("cross_entropy", {x, labels, ids, shift},
                {{DType::F32, kept}, {DType::F32, kept}}, axis);
  ASSERT_EQ(fwd.size(), 2u);
  HostTensor dx = run1("cross_entropy_backward",
                       {x, labels, ids, shift, gs, gt}, DType::F32, xs, axis);
  std::vector<float> xv = values<float>(x), sv = values<float>(shift),
                     gsv = values<float>(gs), gtv = values<float>(gt);
  std::vector<int32_t> lv = values<int32_t>(labels);
  std::vector<double> sums, targets, grads(xv.size());
  for (int64_t o = 0; o < 2; ++o)
    for (int64_t i = 0; i < 3; ++i) {
      int64_t r = o * 3 + i;
      double sum = 0, target = 0;
      for (int64_t c = 0; c < 7; ++c) {
        int64_t at = (o * 7 + c) * 3 + i;
        double v = static_cast<double>(xv[at]) - sv[r];
        sum += std::exp(v);
        grads[at] = gsv[r] * std::exp(v) + (lv[r] == c ? gtv[r] : 0.0);
        if (lv[r] == c)
          target += v;
      }
      sums.push_back(sum);
      targets.push_back(target);
    }
  expectNear(values<float>(fwd[0]), sums, 1e-6, "sum_exp");
  expectNear(values<float>(fwd[1]), targets, 1e-6, "target");
  expectNear(values<float>(dx), grads, 1e-6, "logits gradient");
  // Labels 9 and -100 match no class: their targets are 0.
  EXPECT_EQ(values<float>(fwd[1])[2], 0.0f);
  EXPECT_EQ(values<float>(fwd[1])[4], 0.0f);
}

TEST(CrossEntropy, MismatchedShapesAreLoadErrors) {
  plan::Program p = singleKernelProgram(
      "cross_entropy",
      {randomF32({4, 8}, 1), i64({4, 1}, {0, 1, 2, 3}),
       i64({1, 7}, {0, 1, 2, 3, 4, 5, 6}), randomF32({4, 1}, 2)},
      {{DType::F32, {4, 1}}, {DType::F32, {4, 1}}}, {{"axis", {{1}, {}}}});
  EXPECT_NE(createError(p).find("class ids"), std::string::npos)
      << createError(p);
}

} // namespace

//===- nn_test.cpp - Normalisation, convolution and pooling kernels -------===//

#include "test_util.h"

#include "core/convert.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>

using namespace cleave::rt;
using namespace cleave::rt::test;

namespace {

/// layer_norm over the dims from \p axis of \p s against float64: the
/// kernel's rows come in groups of four (their sums interleaved), so both
/// a whole group and a partial one are checked where rows allow.
void checkLayerNorm(const Shape &s, int64_t axis, uint32_t seed) {
  int64_t rows = 1, inner = 1;
  for (size_t d = 0; d < s.size(); ++d)
    (static_cast<int64_t>(d) < axis ? rows : inner) *= s[d];
  Shape stats(s.size(), 1), params(s.begin() + axis, s.end());
  for (int64_t d = 0; d < axis; ++d)
    stats[d] = s[d];
  HostTensor x = randomF32(s, seed);
  HostTensor scale = randomF32(params, seed + 1),
             bias = randomF32(params, seed + 2);
  double eps = 1e-5;
  std::vector<HostTensor> out =
      runKernel("layer_norm", {x, scale, bias},
                {{DType::F32, s}, {DType::F32, stats}, {DType::F32, stats}},
                {{"axis", {{axis}, {}}}, {"epsilon", {{}, {eps}}}});
  ASSERT_EQ(out.size(), 3u);
  std::vector<float> xv = values<float>(x), sv = values<float>(scale),
                     bv = values<float>(bias);
  std::vector<double> y, means, invStds;
  for (int64_t o = 0; o < rows; ++o) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < inner; ++i)
      mean += xv[o * inner + i];
    mean /= inner;
    for (int64_t i = 0; i < inner; ++i)
      var += (xv[o * inner + i] - mean) * (xv[o * inner + i] - mean);
    var /= inner; // biased
    double invStd = 1 / std::sqrt(var + eps);
    for (int64_t i = 0; i < inner; ++i)
      y.push_back((xv[o * inner + i] - mean) * invStd * sv[i] + bv[i]);
    means.push_back(mean);
    invStds.push_back(invStd);
  }
  expectNear(values<float>(out[0]), y, 1e-5, "y");
  expectNear(values<float>(out[1]), means, 1e-6, "mean");
  expectNear(values<float>(out[2]), invStds, 1e-5, "inv_std_dev");
}

TEST(LayerNorm, ThreeOutputs) { checkLayerNorm({2, 3, 4}, 1, 101); }

TEST(LayerNorm, WholeAndPartialRowGroups) {
  checkLayerNorm({7, 5, 3}, 1, 201); // a group of 4 rows, then 3
  checkLayerNorm({4, 2, 9}, 2, 211); // two whole groups
}

TEST(LayerNorm, AbsentScaleBiasAndStatistics) {
  HostTensor x = f32({2, 2}, {1, 3, -1, -1});
  // Operands 1 and 2 are -1; mean/inv_std results are -1 (not needed).
  ProgramBuilder b;
  int in = b.input("x", DType::F32, {2, 2});
  int y = b.arena(DType::F32, {2, 2});
  b.instruction("layer_norm", {in, -1, -1}, {y, -1, -1},
                {{"axis", {{1}, {}}}, {"epsilon", {{}, {0.0}}}});
  b.output(y, "y");
  std::unique_ptr<Executor> exec;
  Status s = Executor::create(b.program, &exec);
  ASSERT_TRUE(s.isOk()) << s.message();
  std::vector<HostTensor> out;
  ASSERT_TRUE(exec->run({x}, &out).isOk());
  // Row 0: mean 2, var 1 -> [-1, 1]; row 1: var 0, eps 0 -> 0 * inf = NaN.
  std::vector<float> v = values<float>(out[0]);
  EXPECT_FLOAT_EQ(v[0], -1);
  EXPECT_FLOAT_EQ(v[1], 1);
  EXPECT_TRUE(std::isnan(v[2]));
}

void expectSameBits(const HostTensor &got, const HostTensor &want,
                    const char *what) {
  std::vector<float> a = values<float>(got), b = values<float>(want);
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_EQ(std::memcmp(&a[i], &b[i], sizeof(float)), 0)
        << what << " element " << i << ": " << a[i] << " vs " << b[i];
}

/// layer_norm_backward against its formulas run kernel by kernel (the
/// decomposition the compiler emits where the op does not apply): the same
/// bits, with x and grad f32 or bf16, with and without a scale.
void checkLayerNormBackward(const Shape &s, int64_t axis, bool withScale,
                            DType xType, DType gType, uint32_t seed) {
  Shape stats(s.size(), 1), params(s.begin() + axis, s.end()),
      aligned(s.size(), 1);
  std::vector<int64_t> outerAxes, normAxes;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
    (d < axis ? outerAxes : normAxes).push_back(d);
    (d < axis ? stats : aligned)[d] = s[d];
  }
  HostTensor x = asDtype(randomF32(s, seed), xType);
  // Some zero gradients: times a negative xhat they make -0.0, which a sum
  // from +0.0 turns into +0.0 and a value kept as it is does not.
  HostTensor gf = randomF32(s, seed + 1);
  for (int64_t i = 0; i < gf.numElements(); i += 3)
    gf.data<float>()[i] = 0.0f;
  HostTensor g = asDtype(gf, gType);
  HostTensor mean = randomF32(stats, seed + 2);
  HostTensor inv = randomF32(stats, seed + 3, 0.5f, 2.0f);
  HostTensor scale = randomF32(params, seed + 4);
  std::optional<HostTensor> scaleOperand;
  if (withScale)
    scaleOperand = scale;
  std::vector<HostTensor> got =
      runKernel("layer_norm_backward", {x, mean, inv, g, scaleOperand},
                {{DType::F32, s}, {DType::F32, params}, {DType::F32, params}},
                {{"axis", {{axis}, {}}}});
  ASSERT_EQ(got.size(), 3u);

  auto op = [&](const char *k, const HostTensor &a, const HostTensor &b) {
    return run1(k, {a, b}, DType::F32, s);
  };
  auto reduce = [&](const char *k, const HostTensor &a,
                    const std::vector<int64_t> &axes, const Shape &to) {
    if (axes.empty())
      return makeTensor<float>(DType::F32, to, values<float>(a));
    return run1(k, {a}, DType::F32, to, {{"axes", {axes, {}}}});
  };
  HostTensor xw = f32(x.shape, widenedValues(x)),
             gw = f32(g.shape, widenedValues(g));
  HostTensor xhat = op("mul", op("sub", xw, mean), inv);
  HostTensor gg =
      withScale
          ? op("mul", gw,
               makeTensor<float>(DType::F32, aligned, values<float>(scale)))
          : gw;
  HostTensor meanG = reduce("reduce_mean", gg, normAxes, stats);
  HostTensor meanGX =
      reduce("reduce_mean", op("mul", gg, xhat), normAxes, stats);
  HostTensor gx =
      op("mul", inv, op("sub", op("sub", gg, meanG), op("mul", xhat, meanGX)));
  expectSameBits(got[0], gx, "grad_x");
  expectSameBits(got[1],
                 reduce("reduce_sum", op("mul", gw, xhat), outerAxes, params),
                 "grad_scale");
  expectSameBits(got[2], reduce("reduce_sum", gw, outerAxes, params),
                 "grad_bias");
}

TEST(LayerNormBackward, EqualsItsFormulasKernelByKernel) {
  for (DType xt : {DType::F32, DType::BF16})
    for (DType gt : {DType::F32, DType::BF16}) {
      checkLayerNormBackward({6, 20}, 1, true, xt, gt, 301);
      checkLayerNormBackward({5, 3}, 1, true, xt, gt, 311); // runs under 8
      checkLayerNormBackward({2, 3, 4}, 1, false, xt, gt, 321);
      checkLayerNormBackward({3, 4}, 0, true, xt, gt, 331); // no outer dims
      // Over the parallel threshold, the columns in two strips.
      checkLayerNormBackward({64, 600}, 1, true, xt, gt, 341);
    }
}

TEST(BatchNorm, Inference) {
  Shape s = {2, 3, 2, 2};
  HostTensor x = randomF32(s, 111);
  HostTensor scale = randomF32({3}, 112), bias = randomF32({3}, 113),
             mean = randomF32({3}, 114), var = randomF32({3}, 115, 0.5f, 2.0f);
  HostTensor r = run1("batch_norm", {x, scale, bias, mean, var}, DType::F32, s,
                      {{"epsilon", {{}, {1e-3}}}});
  std::vector<float> xv = values<float>(x), sv = values<float>(scale),
                     bv = values<float>(bias), mv = values<float>(mean),
                     vv = values<float>(var);
  std::vector<double> expected;
  for (int64_t i = 0; i < numel(s); ++i) {
    int64_t c = unravel(i, s)[1];
    expected.push_back((xv[i] - mv[c]) / std::sqrt(vv[c] + 1e-3) * sv[c] +
                       bv[c]);
  }
  expectNear(values<float>(r), expected, 1e-5, "batch_norm");
}

struct ConvCase {
  int64_t n, c, h, w, f, kh, kw;
  std::vector<int64_t> strides, pads, dilations;
  int64_t groups;
  bool bias;
};

void checkConv(const ConvCase &k) {
  int64_t oh = (k.h + k.pads[0] + k.pads[2] - k.dilations[0] * (k.kh - 1) - 1) /
                   k.strides[0] +
               1;
  int64_t ow = (k.w + k.pads[1] + k.pads[3] - k.dilations[1] * (k.kw - 1) - 1) /
                   k.strides[1] +
               1;
  int64_t cg = k.c / k.groups, fg = k.f / k.groups;
  HostTensor x = randomF32({k.n, k.c, k.h, k.w}, 121);
  HostTensor w = randomF32({k.f, cg, k.kh, k.kw}, 122);
  HostTensor b = randomF32({k.f}, 123);
  std::vector<std::optional<HostTensor>> operands = {x, w};
  if (k.bias)
    operands.push_back(b);
  Shape rs = {k.n, k.f, oh, ow};
  HostTensor r = run1("conv2d", operands, DType::F32, rs,
                      {{"strides", {k.strides, {}}},
                       {"pads", {k.pads, {}}},
                       {"dilations", {k.dilations, {}}},
                       {"groups", {{k.groups}, {}}}});
  std::vector<float> xv = values<float>(x), wv = values<float>(w),
                     bv = values<float>(b);
  std::vector<double> expected(numel(rs));
  for (int64_t i = 0; i < numel(rs); ++i) {
    auto idx = unravel(i, rs);
    int64_t n = idx[0], f = idx[1], y = idx[2], xo = idx[3];
    int64_t g = f / fg;
    double sum = k.bias ? bv[f] : 0;
    for (int64_t ci = 0; ci < cg; ++ci)
      for (int64_t a = 0; a < k.kh; ++a)
        for (int64_t bb = 0; bb < k.kw; ++bb) {
          int64_t iy = y * k.strides[0] - k.pads[0] + a * k.dilations[0];
          int64_t ix = xo * k.strides[1] - k.pads[1] + bb * k.dilations[1];
          if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w)
            continue;
          sum +=
              double(
                  xv[ravel({n, g * cg + ci, iy, ix}, {k.n, k.c, k.h, k.w})]) *
              wv[ravel({f, ci, a, bb}, {k.f, cg, k.kh, k.kw})];
        }
    expected[i] = sum;
  }
  expectNear(values<float>(r), expected, 1e-4, "conv2d");
}

TEST(Conv2d, GroupsPaddingDilationStride) {
  checkConv({2, 4, 7, 6, 6, 3, 2, {2, 1}, {1, 0, 2, 1}, {1, 2}, 2, true});
}
TEST(Conv2d, Plain3x3) {
  checkConv({1, 3, 8, 8, 5, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1, true});
}
TEST(Conv2d, PointwiseNoBias) {
  checkConv({2, 6, 5, 4, 4, 1, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1, false});
}
TEST(Conv2d, Depthwise) {
  checkConv({2, 4, 6, 6, 8, 3, 3, {2, 2}, {1, 1, 1, 1}, {1, 1}, 4, true});
}
// Output rows of 16 and more take im2col's copies of runs (unit and
// strided); the shorter rows above take its per-tap offset table.
TEST(Conv2d, LongRowsCopyRuns) {
  checkConv({2, 3, 9, 20, 4, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1, true});
  checkConv({1, 2, 7, 41, 3, 3, 5, {2, 2}, {1, 2, 0, 1}, {1, 1}, 1, false});
}
TEST(Conv2d, WrongResultShapeIsALoadError) {
  HostTensor x = randomF32({1, 1, 4, 4}, 1), w = randomF32({1, 1, 3, 3}, 2);
  plan::Program p =
      singleKernelProgram("conv2d", {x, w}, {{DType::F32, {1, 1, 3, 3}}});
  EXPECT_NE(createError(p).find("conv2d"), std::string::npos);
}

struct PoolCase {
  Shape x;
  int64_t oh, ow;
  std::vector<int64_t> kernel, strides, pads, dilations;
};

std::vector<double> referencePool(const HostTensor &x, const PoolCase &c,
                                  bool isMax, bool countIncludePad) {
  std::vector<float> xv = values<float>(x);
  int64_t h = c.x[2], w = c.x[3];
  std::vector<double> out;
  for (int64_t p = 0; p < c.x[0] * c.x[1]; ++p)
    for (int64_t oy = 0; oy < c.oh; ++oy)
      for (int64_t ox = 0; ox < c.ow; ++ox) {
        double m = -INFINITY, sum = 0;
        int64_t inside = 0, padded = 0;
        for (int64_t i = 0; i < c.kernel[0]; ++i)
          for (int64_t j = 0; j < c.kernel[1]; ++j) {
            int64_t iy = oy * c.strides[0] - c.pads[0] + i * c.dilations[0];
            int64_t ix = ox * c.strides[1] - c.pads[1] + j * c.dilations[1];
            bool inPadded = iy >= -c.pads[0] && iy < h + c.pads[2] &&
                            ix >= -c.pads[1] && ix < w + c.pads[3];
            padded += inPadded;
            if (iy < 0 || iy >= h || ix < 0 || ix >= w)
              continue;
            double v = xv[(p * h + iy) * w + ix];
            m = std::max(m, v);
            sum += v;
            ++inside;
          }
        if (isMax)
          out.push_back(m);
        else
          out.push_back(sum / (countIncludePad ? padded : inside));
      }
  return out;
}

const std::vector<PoolCase> kPoolCases = {
    // 3x3 stride 2 pad 1.
    {{2, 3, 7, 7}, 4, 4, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}},
    // Asymmetric pads, dilation.
    {{1, 2, 8, 9}, 4, 4, {2, 3}, {2, 2}, {0, 1, 1, 0}, {2, 1}},
    // Ceil-mode-like result: last window hangs past the padded input.
    {{1, 1, 6, 6}, 3, 3, {3, 3}, {2, 2}, {0, 0, 0, 0}, {1, 1}},
    // Padding where windows contain padded and out-of-input positions.
    {{1, 2, 5, 5}, 4, 4, {3, 3}, {2, 2}, {2, 2, 2, 2}, {1, 1}},
};

Attrs poolAttrs(const PoolCase &c) {
  return {{"kernel", {c.kernel, {}}},
          {"strides", {c.strides, {}}},
          {"pads", {c.pads, {}}},
          {"dilations", {c.dilations, {}}}};
}

TEST(Pool, MaxWithPadding) {
  for (const PoolCase &c : kPoolCases) {
    HostTensor x = randomF32(c.x, 131);
    HostTensor r = run1("max_pool2d", {x}, DType::F32,
                        {c.x[0], c.x[1], c.oh, c.ow}, poolAttrs(c));
    expectNear(values<float>(r), referencePool(x, c, true, false), 0,
               "max_pool2d");
  }
}

TEST(Pool, MaxPropagatesNaN) {
  // NaN anywhere in a window is its maximum, before or after larger values;
  // -inf windows stay -inf.
  float nan = std::numeric_limits<float>::quiet_NaN();
  float inf = std::numeric_limits<float>::infinity();
  Attrs attrs = {{"kernel", {{2, 2}, {}}}, {"strides", {{2, 2}, {}}}};
  HostTensor x = f32({1, 1, 2, 6}, {nan, 9, 1, 2, -inf, -inf,   //
                                    3, 4, 5, nan, -inf, -inf}); //
  std::vector<float> r =
      values<float>(run1("max_pool2d", {x}, DType::F32, {1, 1, 1, 3}, attrs));
  EXPECT_TRUE(std::isnan(r[0]));
  EXPECT_TRUE(std::isnan(r[1]));
  EXPECT_EQ(r[2], -inf);
}

TEST(Pool, AvgCountIncludePad) {
  for (const PoolCase &c : kPoolCases)
    for (bool include : {false, true}) {
      HostTensor x = randomF32(c.x, 141);
      Attrs attrs = poolAttrs(c);
      attrs["count_include_pad"] = {{include}, {}};
      HostTensor r = run1("avg_pool2d", {x}, DType::F32,
                          {c.x[0], c.x[1], c.oh, c.ow}, attrs);
      expectNear(values<float>(r), referencePool(x, c, false, include), 1e-5,
                 include ? "avg_pool2d include" : "avg_pool2d exclude");
    }
}

TEST(Pool, AvgDivisorExactValues) {
  // 2x2 input of ones, 3x3 window, stride 1, pad 1 all round: every window
  // sees the 4 inputs' subset plus padding.
  HostTensor x = f32({1, 1, 2, 2}, {1, 1, 1, 1});
  Attrs attrs = {{"kernel", {{3, 3}, {}}},
                 {"strides", {{1, 1}, {}}},
                 {"pads", {{1, 1, 1, 1}, {}}},
                 {"count_include_pad", {{1}, {}}}};
  // Each window covers all 4 ones and 5 padded positions.
  EXPECT_EQ(
      values<float>(run1("avg_pool2d", {x}, DType::F32, {1, 1, 2, 2}, attrs)),
      std::vector<float>(4, 4.0f / 9.0f));
  attrs["count_include_pad"] = {{0}, {}};
  EXPECT_EQ(
      values<float>(run1("avg_pool2d", {x}, DType::F32, {1, 1, 2, 2}, attrs)),
      std::vector<float>(4, 1.0f));
}

} // namespace

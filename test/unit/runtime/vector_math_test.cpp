//===- vector_math_test.cpp - exp, erf, tanh against float64 --------------===//

#include "core/fused_ops.h"
#include "core/vector_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace cleave::rt::test {
namespace {

/// |got - exact| in units of the last place of exact rounded to f32.
double ulps(float got, double exact) {
  float rounded = static_cast<float>(exact);
  double ulp = std::nextafter(std::fabs(rounded),
                              std::numeric_limits<float>::infinity()) -
               std::fabs(rounded);
  return std::fabs(static_cast<double>(got) - exact) / ulp;
}

/// The largest error of \p fn against \p exact at n points of [lo, hi].
template <typename Fn, typename Exact>
double maxUlps(Fn fn, Exact exact, double lo, double hi, int n = 400000) {
  double worst = 0;
  for (int i = 0; i <= n; ++i) {
    float x = static_cast<float>(lo + (hi - lo) * i / n);
    worst = std::max(worst, ulps(fn(x), exact(static_cast<double>(x))));
  }
  return worst;
}

bool sameBits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

// Bounds a little above scripts/fit_vector_math.py's measurements (0.94,
// 1.21, 1.29): glibc's erff, the function they replace, is within 1.
TEST(VectorMath, WithinTwoUlpsOfFloat64) {
  auto exp64 = [](double x) { return std::exp(x); };
  EXPECT_LT(maxUlps(vecExp, exp64, -87.0, 88.7), 1.5);
  EXPECT_LT(maxUlps(vecExp, exp64, -1.0, 1.0), 1.5);
  auto erf64 = [](double x) { return std::erf(x); };
  EXPECT_LT(maxUlps(vecErf, erf64, 1e-6, 4.5), 1.5);
  EXPECT_LT(maxUlps(vecErf, erf64, -4.5, -1e-6), 1.5);
  auto tanh64 = [](double x) { return std::tanh(x); };
  EXPECT_LT(maxUlps(vecTanh, tanh64, 1e-6, 10.0), 1.5);
  EXPECT_LT(maxUlps(vecTanh, tanh64, -10.0, -1e-6), 1.5);
  // Subnormal results: within one step of the smallest subnormal.
  for (float x = -103.9f; x < -87.5f; x += 0.01f)
    ASSERT_LE(std::fabs(vecExp(x) - std::exp(static_cast<double>(x))),
              std::numeric_limits<float>::denorm_min())
        << x;
}

TEST(VectorMath, SpecialValuesAsLibm) {
  float inf = std::numeric_limits<float>::infinity();
  float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(vecExp(nan)));
  EXPECT_TRUE(std::isnan(vecErf(nan)));
  EXPECT_TRUE(std::isnan(vecTanh(nan)));
  EXPECT_EQ(vecExp(inf), inf);
  EXPECT_EQ(vecExp(89.0f), inf);
  EXPECT_EQ(vecExp(-inf), 0.0f);
  EXPECT_EQ(vecExp(-104.0f), 0.0f);
  EXPECT_EQ(vecExp(0.0f), 1.0f);
  EXPECT_EQ(vecExp(-0.0f), 1.0f);
  EXPECT_EQ(vecExp(88.7f), std::exp(88.7f)); // the largest finite results
  EXPECT_EQ(vecErf(inf), 1.0f);
  EXPECT_EQ(vecErf(-inf), -1.0f);
  EXPECT_EQ(vecErf(4.0f), 1.0f);
  EXPECT_EQ(vecErf(1e30f), 1.0f);
  EXPECT_TRUE(sameBits(vecErf(-0.0f), -0.0f));
  EXPECT_EQ(vecTanh(inf), 1.0f);
  EXPECT_EQ(vecTanh(-inf), -1.0f);
  EXPECT_EQ(vecTanh(50.0f), 1.0f);
  EXPECT_TRUE(sameBits(vecTanh(-0.0f), -0.0f));
  EXPECT_EQ(vecErf(1e-30f), 1e-30f * 1.1283791670955126f);
  EXPECT_EQ(vecTanh(1e-30f), 1e-30f);
}

// The arrays run whichever copy this machine's instruction set picks; each
// element equals the scalar function's bits (the fused kernel's and the
// separate kernels' values agree), over lengths that leave vector tails.
TEST(VectorMath, ArraysEqualTheElementFunctionsBitForBit) {
  std::vector<float> in;
  for (int i = -20000; i <= 20000; ++i)
    in.push_back(static_cast<float>(i) * 0.0049f);
  in.push_back(std::numeric_limits<float>::infinity());
  in.push_back(std::numeric_limits<float>::quiet_NaN());
  in.push_back(-0.0f);
  in.push_back(-95.0f);
  for (size_t n : {in.size(), size_t{1}, size_t{17}, size_t{33}}) {
    std::vector<float> out(n), same(in.begin(), in.begin() + n);
    expArray(in.data(), 0.75f, out.data(), n);
    for (size_t i = 0; i < n; ++i)
      ASSERT_TRUE(sameBits(out[i], vecExp(in[i] - 0.75f))) << i;
    erfArray(in.data(), out.data(), n);
    for (size_t i = 0; i < n; ++i)
      ASSERT_TRUE(sameBits(out[i], vecErf(in[i]))) << i;
    tanhArray(in.data(), out.data(), n);
    for (size_t i = 0; i < n; ++i)
      ASSERT_TRUE(sameBits(out[i], vecTanh(in[i]))) << i;
    sigmoidArray(in.data(), out.data(), n);
    for (size_t i = 0; i < n; ++i)
      ASSERT_TRUE(sameBits(out[i], applyFused(FusedCode::Sigmoid, in[i], 0.0f)))
          << i;
    expArray(same.data(), 0.0f, same.data(), n); // in place
    for (size_t i = 0; i < n; ++i)
      ASSERT_TRUE(sameBits(same[i], vecExp(in[i]))) << i;
  }
}

} // namespace
} // namespace cleave::rt::test

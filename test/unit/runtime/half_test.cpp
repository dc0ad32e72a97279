//===- half_test.cpp - Mixed precision's bf16 and f16 kernels -------------===//
//
// matmul on bf16 / f16 operands (oneDNN, or sgemm on widened copies) against
// a double-precision sum of the same rounded operands, rounded once; the
// widened convolutions bit for bit against their f32 loop on the rounded
// values; half-precision sums over ranks.
//
//===----------------------------------------------------------------------===//

#include "test_util.h"

#include "cleave/runtime/comm.h"
#include "cleave/runtime/thread_ranks.h"
#include "core/convert.h"

#include <cmath>
#include <cstring>

using namespace cleave::rt;
using namespace cleave::rt::test;

namespace {

uint16_t narrow(DType d, float x) {
  return d == DType::BF16 ? floatToBf16(x) : floatToHalf(x);
}
float widen(DType d, uint16_t x) {
  return d == DType::BF16 ? bf16ToFloat(x) : halfToFloat(x);
}

void checkHalfMatmul(DType d, Shape aShape, Shape bShape, Shape rShape, bool ta,
                     bool tb) {
  HostTensor a = asDtype(randomF32(aShape, 31), d);
  HostTensor b = asDtype(randomF32(bShape, 32), d);
  HostTensor r =
      run1("matmul", {a, b}, d, rShape,
           {{"transpose_a", {{ta}, {}}}, {"transpose_b", {{tb}, {}}}});
  ASSERT_EQ(r.dtype, d);
  size_t rank = rShape.size();
  int64_t k = ta ? aShape[rank - 2] : aShape[rank - 1];
  std::vector<float> av = widenedValues(a), bv = widenedValues(b),
                     got = widenedValues(r);
  // One ulp of the result's dtype, plus f32 accumulation's own error.
  double ulp = d == DType::BF16 ? 1.0 / 128 : 1.0 / 1024;
  for (int64_t i = 0; i < numel(rShape); ++i) {
    auto idx = unravel(i, rShape);
    double sum = 0, magnitude = 0;
    for (int64_t p = 0; p < k; ++p) {
      auto ai = idx, bi = idx;
      ai[rank - 2] = ta ? p : idx[rank - 2];
      ai[rank - 1] = ta ? idx[rank - 2] : p;
      bi[rank - 2] = tb ? idx[rank - 1] : p;
      bi[rank - 1] = tb ? p : idx[rank - 1];
      double term = double(av[broadcastIndex(ai, aShape)]) *
                    bv[broadcastIndex(bi, bShape)];
      sum += term;
      magnitude += std::fabs(term);
    }
    ASSERT_LE(std::fabs(got[i] - sum), ulp * std::fabs(sum) + 1e-6 * magnitude)
        << dtypeName(d) << " element " << i << ": " << got[i] << " vs " << sum;
  }
}

TEST(HalfMatmul, RoundsAnF32AccumulationOnce) {
  for (DType d : {DType::BF16, DType::F16}) {
    checkHalfMatmul(d, {3, 4}, {4, 5}, {3, 5}, false, false);
    checkHalfMatmul(d, {4, 3}, {4, 5}, {3, 5}, true, false);
    checkHalfMatmul(d, {3, 4}, {5, 4}, {3, 5}, false, true);
    checkHalfMatmul(d, {2, 4, 3}, {2, 5, 4}, {2, 3, 5}, true, true);
    // Broadcast batches: shared B folded into rows, a shared A, and an
    // outer broadcast that is not equally spaced (one call per matrix).
    checkHalfMatmul(d, {4, 3, 6}, {1, 5, 6}, {4, 3, 5}, false, true);
    checkHalfMatmul(d, {1, 3, 6}, {4, 6, 5}, {4, 3, 5}, false, false);
    checkHalfMatmul(d, {2, 1, 3, 4}, {1, 3, 4, 5}, {2, 3, 3, 5}, false, false);
    // Big enough for the blocked kernels, with odd sizes.
    checkHalfMatmul(d, {67, 130}, {90, 130}, {67, 90}, false, true);
  }
}

TEST(HalfMatmul, EmptyKIsZero) {
  HostTensor a = makeTensor<uint16_t>(DType::BF16, {2, 0}, {});
  HostTensor b = makeTensor<uint16_t>(DType::BF16, {0, 3}, {});
  EXPECT_EQ(values<uint16_t>(run1("matmul", {a, b}, DType::BF16, {2, 3})),
            std::vector<uint16_t>(6, 0));
}

TEST(HalfMatmul, MixedDtypesAreRefused) {
  HostTensor a = asDtype(randomF32({2, 3}, 1), DType::BF16);
  HostTensor b = randomF32({3, 2}, 2);
  plan::Program p =
      singleKernelProgram("matmul", {a, b}, {{DType::BF16, {2, 2}}});
  EXPECT_NE(createError(p).find("matmul"), std::string::npos);
}

/// The cast kernel's bf16 loops (compiled per instruction set, in pieces
/// per thread) round and widen every element as core/convert.h does: ties,
/// NaN, infinities, subnormals and a length that is no multiple of a piece
/// or a vector, over the parallel threshold.
TEST(HalfCast, Bf16CastsEqualTheElementConversions) {
  const int64_t n = 3 * 4096 * 8 + 37;
  std::vector<float> x(n);
  const float edge[] = {
      1.0f + 1.0f / 256, 1.0f + 3.0f / 256, -0.0f,  std::nanf(""),
      INFINITY,          -INFINITY,         1e-40f, -3e-39f,
      3.4e38f,           1.0f + 1.0f / 512};
  std::vector<float> random = values<float>(randomF32({n}, 7));
  for (int64_t i = 0; i < n; ++i)
    x[i] = i % 7 == 0 ? edge[(i / 7) % 10] : random[i] * 1e3f;
  HostTensor wide = makeTensor<float>(DType::F32, {n}, x);
  HostTensor narrowed = run1("cast", {wide}, DType::BF16, {n});
  std::vector<uint16_t> bits = values<uint16_t>(narrowed);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(bits[i], floatToBf16(x[i])) << "element " << i << ": " << x[i];
  HostTensor back = run1("cast", {narrowed}, DType::F32, {n});
  std::vector<float> got = values<float>(back);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t want, have;
    float w = bf16ToFloat(bits[i]);
    std::memcpy(&want, &w, 4);
    std::memcpy(&have, &got[i], 4);
    ASSERT_EQ(have, want) << "element " << i;
  }
}

/// conv2d and its adjoints on bf16 are their f32 loop on the widened
/// values, rounded once: bit for bit.
TEST(HalfConv, WidenedConvolutionsEqualTheF32LoopRounded) {
  DType d = DType::BF16;
  Attrs attrs = {{"strides", {{1, 1}, {}}},
                 {"pads", {{1, 1, 1, 1}, {}}},
                 {"dilations", {{1, 1}, {}}},
                 {"groups", {{1}, {}}}};
  HostTensor x = asDtype(randomF32({2, 3, 5, 5}, 41), d);
  HostTensor w = asDtype(randomF32({4, 3, 3, 3}, 42), d);
  HostTensor g = asDtype(randomF32({2, 4, 5, 5}, 43), d);
  auto wide = [](const HostTensor &t) {
    return f32(t.shape, widenedValues(t));
  };
  struct Case {
    const char *kernel;
    HostTensor a, b;
    Shape result;
  } cases[] = {{"conv2d", x, w, {2, 4, 5, 5}},
               {"conv2d_backward_input", g, w, {2, 3, 5, 5}},
               {"conv2d_backward_filter", x, g, {4, 3, 3, 3}}};
  for (const Case &c : cases) {
    HostTensor half = run1(c.kernel, {c.a, c.b}, d, c.result, attrs);
    HostTensor full =
        run1(c.kernel, {wide(c.a), wide(c.b)}, DType::F32, c.result, attrs);
    EXPECT_EQ(values<uint16_t>(half), values<uint16_t>(asDtype(full, d)))
        << c.kernel;
  }
}

TEST(HalfCollectives, SumsOverRanksRoundEachSumOnce) {
  std::unique_ptr<ThreadRanks> ranks;
  ASSERT_TRUE(ThreadRanks::create(3, 10, &ranks));
  for (DType d : {DType::BF16, DType::F16}) {
    std::vector<std::vector<uint16_t>> out(3);
    ASSERT_TRUE(ranks->run([&](int r) {
      // 1 + 2^-9 + 2^-9 is 1 in bf16 pairwise (each sum rounds to even),
      // but exact in f16.
      out[r] = {narrow(d, r == 0 ? 1.0f : 1.0f / 512), narrow(d, 2.0f + r)};
      return ranks->comm(r).allReduce(out[r].data(), 2, d, Reduction::Sum, {0});
    }));
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(widen(d, out[r][0]),
                d == DType::BF16 ? 1.0f : 1.0f + 2.0f / 512);
      EXPECT_EQ(widen(d, out[r][1]), 9.0f);
    }
  }
  // f64 and the integer storage dtypes are not summed.
  std::vector<double> x(2);
  Status s = ranks->run([&](int r) {
    return ranks->comm(r).allReduce(x.data(), 2, DType::F64, Reduction::Sum,
                                    {0});
  });
  EXPECT_NE(s.message().find("cannot reduce f64"), std::string::npos)
      << s.message();
}

} // namespace

namespace {

/// matmul_dequant against a double-precision product with the weight
/// dequantized by hand: int8 with per-row scales (\p groups 1) or per
/// group of columns, or bf16 / f16 widened;
/// \p cols wide enough that the kernel's 2 MiB blocks of rows split
/// \p rows into several (the last one short).
void checkDequantMatmul(DType wd, bool scaled, bool tb, int64_t rows,
                        int64_t cols, int64_t groups = 1) {
  int64_t k = tb ? cols : rows, n = tb ? rows : cols;
  Shape aShape{2, 3, k}, rShape{2, 3, n};
  HostTensor a = randomF32(aShape, 41);
  HostTensor w = HostTensor::zeros(wd, {rows, cols});
  std::mt19937 gen(42);
  std::uniform_int_distribution<int> q(-127, 127);
  std::vector<double> deq(rows * cols);
  Shape scaleShape{rows};
  if (groups > 1)
    scaleShape.push_back(groups);
  HostTensor scale = randomF32(scaleShape, 43, 0.001f, 0.02f);
  for (int64_t i = 0; i < rows * cols; ++i) {
    int64_t row = i / cols, group = (i % cols) / (cols / groups);
    float s = scaled ? scale.data<float>()[row * groups + group] : 1.0f;
    if (wd == DType::I8) {
      int v = q(gen);
      w.data<int8_t>()[i] = static_cast<int8_t>(v);
      deq[i] = double(float(v) * s);
    } else {
      uint16_t h = narrow(wd, float(q(gen)) / 64);
      w.data<uint16_t>()[i] = h;
      deq[i] = double(widen(wd, h) * s);
    }
  }
  std::vector<std::optional<HostTensor>> operands{a, w};
  if (scaled)
    operands.push_back(scale);
  HostTensor r = run1("matmul_dequant", operands, DType::F32, rShape,
                      {{"transpose_b", {{tb}, {}}}});
  std::vector<float> av = values<float>(a), got = values<float>(r);
  for (int64_t i = 0; i < numel(rShape); ++i) {
    int64_t row = i / n, j = i % n;
    double sum = 0, magnitude = 0;
    for (int64_t p = 0; p < k; ++p) {
      double term =
          av[row * k + p] * (tb ? deq[j * cols + p] : deq[p * cols + j]);
      sum += term;
      magnitude += std::fabs(term);
    }
    ASSERT_LE(std::fabs(got[i] - sum), 1e-5 * magnitude + 1e-6)
        << dtypeName(wd) << (tb ? " ^T" : "") << " element " << i << ": "
        << got[i] << " vs " << sum;
  }
}

} // namespace

TEST(DequantMatmul, MatchesTheDequantizedProduct) {
  for (bool tb : {true, false}) {
    checkDequantMatmul(DType::I8, true, tb, 5, 7);
    // 2^19 / 8192 = 64 rows a block: 150 rows are three blocks.
    checkDequantMatmul(DType::I8, true, tb, 150, 8192);
    checkDequantMatmul(DType::I8, false, tb, 150, 8192);
    checkDequantMatmul(DType::I8, true, tb, 5, 12, 3);
    checkDequantMatmul(DType::I8, true, tb, 150, 8192, 64);
    checkDequantMatmul(DType::BF16, false, tb, 70, 8192);
    checkDequantMatmul(DType::F16, false, tb, 6, 9);
  }
}

TEST(DequantMatmul, ScalesMustMatchTheRows) {
  HostTensor a = randomF32({2, 4}, 1);
  HostTensor w = HostTensor::zeros(DType::I8, {3, 4});
  plan::Program p =
      singleKernelProgram("matmul_dequant", {a, w, randomF32({4}, 2)},
                          {{DType::F32, {2, 3}}}, {{"transpose_b", {{1}, {}}}});
  EXPECT_NE(createError(p).find("one value per row"), std::string::npos)
      << createError(p);
}

//===- kernels_test.cpp - Elementwise, matmul, reduction, shape kernels ---===//
//
// Each kernel runs through a one-instruction plan and is compared with a
// naive, index-by-index reference computed here in double precision.
//
//===----------------------------------------------------------------------===//

#include "test_util.h"

#include <algorithm>
#include <functional>
#include <limits>

using namespace cleave::rt;
using namespace cleave::rt::test;

namespace {

struct BroadcastCase {
  Shape a, b, result;
};

const std::vector<BroadcastCase> kBroadcastCases = {
    {{3, 4, 5}, {3, 4, 5}, {3, 4, 5}},        // same shape: flat path
    {{3, 1, 5}, {1, 4, 1}, {3, 4, 5}},        // both broadcast
    {{1, 1, 1}, {3, 4, 5}, {3, 4, 5}},        // scalar-like a
    {{3, 4, 5}, {1, 1, 5}, {3, 4, 5}},        // bias-add pattern
    {{3, 4, 1}, {3, 4, 5}, {3, 4, 5}},        // inner broadcast
    {{2, 300, 70}, {2, 1, 70}, {2, 300, 70}}, // large: parallel path
};

using FloatOp = std::function<double(double, double)>;

void checkFloatBinary(const std::string &kernel, FloatOp ref, float lo,
                      float hi) {
  uint32_t seed = 1;
  for (const BroadcastCase &c : kBroadcastCases) {
    HostTensor a = randomF32(c.a, seed++, lo, hi);
    HostTensor b = randomF32(c.b, seed++, lo, hi);
    HostTensor r = run1(kernel, {a, b}, DType::F32, c.result);
    std::vector<float> av = values<float>(a), bv = values<float>(b);
    std::vector<double> expected(numel(c.result));
    for (int64_t i = 0; i < numel(c.result); ++i) {
      auto idx = unravel(i, c.result);
      expected[i] =
          ref(av[broadcastIndex(idx, c.a)], bv[broadcastIndex(idx, c.b)]);
    }
    expectNear(values<float>(r), expected, 1e-5, kernel);
  }
}

TEST(Elementwise, FloatBinary) {
  checkFloatBinary("add", [](double a, double b) { return a + b; }, -2, 2);
  checkFloatBinary("sub", [](double a, double b) { return a - b; }, -2, 2);
  checkFloatBinary("mul", [](double a, double b) { return a * b; }, -2, 2);
  checkFloatBinary("div", [](double a, double b) { return a / b; }, 0.5, 2);
  checkFloatBinary(
      "pow", [](double a, double b) { return std::pow(a, b); }, 0.5, 2);
  checkFloatBinary(
      "max", [](double a, double b) { return std::max(a, b); }, -2, 2);
  checkFloatBinary(
      "min", [](double a, double b) { return std::min(a, b); }, -2, 2);
}

template <typename T> void checkIntBinary(DType dtype) {
  // Exact expectations, including truncating division of negatives.
  HostTensor a = makeTensor<T>(dtype, {2, 3}, {-7, 7, -8, 9, 0, 3});
  HostTensor b = makeTensor<T>(dtype, {1, 3}, {2, -2, 3});
  auto run = [&](const std::string &k) {
    return values<T>(run1(k, {a, b}, dtype, {2, 3}));
  };
  EXPECT_EQ(run("add"), (std::vector<T>{-5, 5, -5, 11, -2, 6}));
  EXPECT_EQ(run("sub"), (std::vector<T>{-9, 9, -11, 7, 2, 0}));
  EXPECT_EQ(run("mul"), (std::vector<T>{-14, -14, -24, 18, 0, 9}));
  EXPECT_EQ(run("div"), (std::vector<T>{-3, -3, -2, 4, 0, 1}));
  EXPECT_EQ(run("max"), (std::vector<T>{2, 7, 3, 9, 0, 3}));
  EXPECT_EQ(run("min"), (std::vector<T>{-7, -2, -8, 2, -2, 3}));
  // pow: 1/x^2 truncates to 0 for |x| > 1.
  EXPECT_EQ(run("pow"), (std::vector<T>{49, 0, -512, 81, 0, 27}));
}

TEST(Elementwise, IntBinary) {
  checkIntBinary<int32_t>(DType::I32);
  checkIntBinary<int64_t>(DType::I64);
}

TEST(Elementwise, IntDivisionByZeroIsARunError) {
  HostTensor a = i32({3}, {1, 2, 3}), b = i32({3}, {1, 0, 1});
  plan::Program p = singleKernelProgram("div", {a, b}, {{DType::I32, {3}}});
  std::unique_ptr<Executor> exec;
  ASSERT_TRUE(Executor::create(p, &exec).isOk());
  std::vector<HostTensor> out;
  Status s = exec->run({a, b}, &out);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("division by zero"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("div"), std::string::npos);
}

TEST(Elementwise, Comparisons) {
  // Values drawn from a small integer set so that ties occur.
  struct Op {
    const char *kernel;
    std::function<bool(double, double)> ref;
  };
  std::vector<Op> ops = {{"cmp_eq", [](double a, double b) { return a == b; }},
                         {"cmp_ne", [](double a, double b) { return a != b; }},
                         {"cmp_lt", [](double a, double b) { return a < b; }},
                         {"cmp_le", [](double a, double b) { return a <= b; }},
                         {"cmp_gt", [](double a, double b) { return a > b; }},
                         {"cmp_ge", [](double a, double b) { return a >= b; }}};
  for (DType dtype : {DType::F32, DType::I32, DType::I64, DType::Bool}) {
    for (const BroadcastCase &c : kBroadcastCases) {
      HostTensor ai = randomInt(DType::I64, c.a, 11, -2, 2);
      HostTensor bi = randomInt(DType::I64, c.b, 12, -2, 2);
      auto convert = [&](const HostTensor &t) {
        std::vector<int64_t> v = values<int64_t>(t);
        HostTensor out = HostTensor::zeros(dtype, t.shape);
        for (size_t i = 0; i < v.size(); ++i) {
          if (dtype == DType::F32)
            out.data<float>()[i] = static_cast<float>(v[i]);
          else if (dtype == DType::I32)
            out.data<int32_t>()[i] = static_cast<int32_t>(v[i]);
          else if (dtype == DType::I64)
            out.data<int64_t>()[i] = v[i];
          else
            out.data<uint8_t>()[i] = v[i] > 0;
        }
        return out;
      };
      HostTensor a = convert(ai), b = convert(bi);
      std::vector<int64_t> av = values<int64_t>(ai), bv = values<int64_t>(bi);
      for (const Op &op : ops) {
        HostTensor r = run1(op.kernel, {a, b}, DType::Bool, c.result);
        std::vector<uint8_t> rv = values<uint8_t>(r);
        ASSERT_EQ(rv.size(), static_cast<size_t>(numel(c.result)));
        for (int64_t i = 0; i < numel(c.result); ++i) {
          auto idx = unravel(i, c.result);
          double x = av[broadcastIndex(idx, c.a)];
          double y = bv[broadcastIndex(idx, c.b)];
          if (dtype == DType::Bool) {
            x = x > 0;
            y = y > 0;
          }
          ASSERT_EQ(rv[i], op.ref(x, y) ? 1 : 0)
              << op.kernel << " " << dtypeName(dtype) << " at " << i;
        }
      }
    }
  }
}

TEST(Elementwise, Logical) {
  HostTensor a = boolean({2, 1}, {0, 1});
  HostTensor b = boolean({1, 2}, {0, 1});
  EXPECT_EQ(values<uint8_t>(run1("and", {a, b}, DType::Bool, {2, 2})),
            (std::vector<uint8_t>{0, 0, 0, 1}));
  EXPECT_EQ(values<uint8_t>(run1("or", {a, b}, DType::Bool, {2, 2})),
            (std::vector<uint8_t>{0, 1, 1, 1}));
  EXPECT_EQ(values<uint8_t>(run1("xor", {a, b}, DType::Bool, {2, 2})),
            (std::vector<uint8_t>{0, 1, 1, 0}));
  EXPECT_EQ(
      values<uint8_t>(run1("not", {boolean({3}, {0, 1, 0})}, DType::Bool, {3})),
      (std::vector<uint8_t>{1, 0, 1}));
}

TEST(Elementwise, Select) {
  HostTensor c = boolean({3, 1}, {1, 0, 1});
  HostTensor a = f32({1, 4}, {1, 2, 3, 4});
  HostTensor b = randomF32({3, 4}, 5);
  std::vector<float> bv = values<float>(b);
  std::vector<double> expected;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j)
      expected.push_back(i != 1 ? j + 1.0 : bv[i * 4 + j]);
  expectNear(values<float>(run1("select", {c, a, b}, DType::F32, {3, 4})),
             expected, 0);
  // Same shapes, i64.
  HostTensor c2 = boolean({3}, {0, 1, 1});
  HostTensor a2 = i64({3}, {10, 20, 30}), b2 = i64({3}, {-1, -2, -3});
  EXPECT_EQ(values<int64_t>(run1("select", {c2, a2, b2}, DType::I64, {3})),
            (std::vector<int64_t>{-1, 20, 30}));
}

TEST(Elementwise, FloatUnary) {
  const double kSqrt2 = std::sqrt(2.0), kPi = std::acos(-1.0);
  struct Op {
    std::string kernel;
    std::function<double(double)> ref;
    float lo, hi;
    Attrs attrs;
  };
  std::vector<Op> ops = {
      {"neg", [](double x) { return -x; }, -3, 3, {}},
      {"abs", [](double x) { return std::fabs(x); }, -3, 3, {}},
      {"exp", [](double x) { return std::exp(x); }, -3, 3, {}},
      {"log", [](double x) { return std::log(x); }, 0.1f, 3, {}},
      {"sqrt", [](double x) { return std::sqrt(x); }, 0.1f, 3, {}},
      {"rsqrt", [](double x) { return 1 / std::sqrt(x); }, 0.1f, 3, {}},
      {"reciprocal", [](double x) { return 1 / x; }, 0.1f, 3, {}},
      {"tanh", [](double x) { return std::tanh(x); }, -3, 3, {}},
      {"sigmoid", [](double x) { return 1 / (1 + std::exp(-x)); }, -30, 30, {}},
      {"relu", [](double x) { return x > 0 ? x : 0; }, -3, 3, {}},
      {"erf", [](double x) { return std::erf(x); }, -3, 3, {}},
      {"sin", [](double x) { return std::sin(x); }, -3, 3, {}},
      {"cos", [](double x) { return std::cos(x); }, -3, 3, {}},
      {"gelu",
       [&](double x) { return 0.5 * x * (1 + std::erf(x / kSqrt2)); },
       -4,
       4,
       {{"approximate", {{0}, {}}}}},
      {"gelu",
       [&](double x) {
         return 0.5 * x *
                (1 +
                 std::tanh(std::sqrt(2 / kPi) * (x + 0.044715 * x * x * x)));
       },
       -4,
       4,
       {{"approximate", {{1}, {}}}}},
      {"leaky_relu",
       [](double x) { return x < 0 ? 0.1 * x : x; },
       -3,
       3,
       {{"alpha", {{}, {0.1}}}}},
  };
  for (const Op &op : ops) {
    for (const Shape &shape : {Shape{7, 5}, Shape{300, 200}}) {
      HostTensor x = randomF32(shape, 3, op.lo, op.hi);
      std::vector<float> xv = values<float>(x);
      std::vector<double> expected;
      for (float v : xv)
        expected.push_back(op.ref(v));
      expectNear(
          values<float>(run1(op.kernel, {x}, DType::F32, shape, op.attrs)),
          expected, 2e-6, op.kernel);
    }
  }
}

TEST(Elementwise, IntNegAbs) {
  HostTensor a = i32({4}, {-3, 0, 5, -1});
  EXPECT_EQ(values<int32_t>(run1("neg", {a}, DType::I32, {4})),
            (std::vector<int32_t>{3, 0, -5, 1}));
  EXPECT_EQ(values<int32_t>(run1("abs", {a}, DType::I32, {4})),
            (std::vector<int32_t>{3, 0, 5, 1}));
  HostTensor b = i64({2}, {-(int64_t(1) << 40), 7});
  EXPECT_EQ(values<int64_t>(run1("abs", {b}, DType::I64, {2})),
            (std::vector<int64_t>{int64_t(1) << 40, 7}));
}

TEST(Elementwise, Cast) {
  HostTensor f = f32({6}, {-1.7f, 2.9f, 0.0f, -0.5f, 3.0f, 1e10f});
  EXPECT_EQ(values<int32_t>(run1("cast", {f}, DType::I32, {6})),
            (std::vector<int32_t>{-1, 2, 0, 0, 3, INT32_MAX}));
  EXPECT_EQ(values<int64_t>(run1("cast", {f}, DType::I64, {6})),
            (std::vector<int64_t>{-1, 2, 0, 0, 3, 10000000000}));
  EXPECT_EQ(values<uint8_t>(run1("cast", {f}, DType::Bool, {6})),
            (std::vector<uint8_t>{1, 1, 0, 1, 1, 1}));
  HostTensor b = boolean({3}, {1, 0, 1});
  EXPECT_EQ(values<float>(run1("cast", {b}, DType::F32, {3})),
            (std::vector<float>{1, 0, 1}));
  EXPECT_EQ(values<int64_t>(run1("cast", {b}, DType::I64, {3})),
            (std::vector<int64_t>{1, 0, 1}));
  HostTensor l = i64({3}, {-2, 0, (int64_t(1) << 32) + 5});
  EXPECT_EQ(values<int32_t>(run1("cast", {l}, DType::I32, {3})),
            (std::vector<int32_t>{-2, 0, 5}));
  EXPECT_EQ(values<uint8_t>(run1("cast", {l}, DType::Bool, {3})),
            (std::vector<uint8_t>{1, 0, 1}));
  EXPECT_EQ(values<float>(run1("cast", {i32({2}, {-3, 4})}, DType::F32, {2})),
            (std::vector<float>{-3, 4}));
  EXPECT_EQ(values<int64_t>(run1("cast", {i32({2}, {-3, 4})}, DType::I64, {2})),
            (std::vector<int64_t>{-3, 4}));
}

// The storage dtypes (float64, float16, bfloat16, int8, int16, uint8,
// uint16, uint32): rounding to nearest even into the 16-bit floats
// (halfway cases, subnormals, overflow to infinity, NaN), exact widening
// back, wrapping of integers into the narrow ones, and the range check of
// float64 inputs.
TEST(Elementwise, CastStorageDTypes) {
  const float inf = std::numeric_limits<float>::infinity();
  // 1 + 2^-11 is halfway between 1 and the next half: even (1) wins;
  // 1 + 3 * 2^-11 rounds up; 65504 is the largest half, 65520 the first
  // value that rounds to infinity; 2^-24 is the smallest subnormal and
  // 2^-25 rounds (a tie) to zero.
  HostTensor f = f32({10}, {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65504.0f,
                            65520.0f, 0x1p-24f, 0x1p-25f, -2.5f, inf,
                            std::numeric_limits<float>::quiet_NaN(), -0.0f});
  HostTensor h = run1("cast", {f}, DType::F16, {10});
  std::vector<uint16_t> bits = values<uint16_t>(h);
  EXPECT_EQ(bits,
            (std::vector<uint16_t>{0x3c00, 0x3c02, 0x7bff, 0x7c00, 0x0001,
                                   0x0000, 0xc100, 0x7c00, bits[8], 0x8000}));
  EXPECT_EQ(bits[8] & 0x7c00, 0x7c00);
  EXPECT_NE(bits[8] & 0x3ff, 0); // NaN stays NaN
  std::vector<float> back = values<float>(run1("cast", {h}, DType::F32, {10}));
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], 1.0f + 0x1p-9f);
  EXPECT_EQ(back[4], 0x1p-24f);
  EXPECT_EQ(back[3], inf);
  EXPECT_TRUE(std::isnan(back[8]));
  // bfloat16 keeps f32's exponent: 1 + 2^-8 ties to 1, 1 + 3 * 2^-8 up.
  HostTensor b =
      run1("cast", {f32({3}, {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 3e38f})},
           DType::BF16, {3});
  EXPECT_EQ(values<uint16_t>(b),
            (std::vector<uint16_t>{0x3f80, 0x3f82, 0x7f62}));
  EXPECT_EQ(values<float>(run1("cast", {b}, DType::F32, {3}))[1],
            1.0f + 0x1p-6f);
  // Integers: narrowing wraps (as int8 arithmetic does), widening is exact.
  HostTensor wide = i32({4}, {127, 128, -129, 300});
  EXPECT_EQ(values<int8_t>(run1("cast", {wide}, DType::I8, {4})),
            (std::vector<int8_t>{127, -128, 127, 44}));
  EXPECT_EQ(values<uint8_t>(run1("cast", {wide}, DType::U8, {4})),
            (std::vector<uint8_t>{127, 128, 127, 44}));
  HostTensor u = makeTensor<uint32_t>(DType::U32, {2}, {4000000000u, 7u});
  EXPECT_EQ(values<int64_t>(run1("cast", {u}, DType::I64, {2})),
            (std::vector<int64_t>{4000000000, 7}));
  HostTensor s = makeTensor<int16_t>(DType::I16, {2}, {-32768, 5});
  EXPECT_EQ(values<float>(run1("cast", {s}, DType::F32, {2})),
            (std::vector<float>{-32768.0f, 5.0f}));
  HostTensor d = makeTensor<double>(DType::F64, {3}, {0.1, -1e300, 1e-50});
  EXPECT_EQ(values<float>(run1("cast", {d}, DType::F32, {3})),
            (std::vector<float>{0.1f, -inf, 0.0f}));
}

// A range-checked cast (float64 inputs of a program computing in f32)
// refuses a finite value f32 cannot hold.
TEST(Elementwise, CastRangeChecked) {
  Attrs checked = {{"range_checked", {{1}, {}}}};
  HostTensor bad = makeTensor<double>(DType::F64, {3}, {1.0, 3.5e38, -2.0});
  plan::Program program =
      singleKernelProgram("cast", {bad}, {{DType::F32, {3}}}, checked);
  std::unique_ptr<Executor> exec;
  ASSERT_TRUE(Executor::create(program, &exec).isOk());
  std::vector<HostTensor> out;
  Status s = exec->run({bad}, &out);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("float64 element 1"), std::string::npos)
      << s.message();
  HostTensor ok = makeTensor<double>(DType::F64, {2}, {1e38, -1e-300});
  EXPECT_EQ(values<float>(run1("cast", {ok}, DType::F32, {2}, checked)),
            (std::vector<float>{1e38f, -0.0f}));
}

// The saturating edges (core/convert.h): NaN is 0, infinities and the
// floats at and beyond each bound saturate, the largest float inside a
// bound converts exactly.
TEST(Elementwise, CastSaturates) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  HostTensor f = f32({7}, {nan, inf, -inf, 2147483648.0f, -2147483648.0f,
                           2147483520.0f, -9.3e18f});
  EXPECT_EQ(values<int32_t>(run1("cast", {f}, DType::I32, {7})),
            (std::vector<int32_t>{0, INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN,
                                  2147483520, INT32_MIN}));
  EXPECT_EQ(values<int64_t>(run1("cast", {f}, DType::I64, {7})),
            (std::vector<int64_t>{0, INT64_MAX, INT64_MIN, 2147483648,
                                  -2147483648, 2147483520, INT64_MIN}));
  EXPECT_EQ(values<uint8_t>(run1("cast", {f}, DType::Bool, {7})),
            (std::vector<uint8_t>{1, 1, 1, 1, 1, 1, 1}));
}

TEST(Elementwise, Copy) {
  HostTensor a = randomF32({2, 3}, 9);
  EXPECT_EQ(values<float>(run1("copy", {a}, DType::F32, {2, 3})),
            values<float>(a));
}

//===----------------------------------------------------------------------===//
// matmul
//===----------------------------------------------------------------------===//

void checkMatmul(Shape aShape, Shape bShape, Shape rShape, bool ta, bool tb) {
  HostTensor a = randomF32(aShape, 21), b = randomF32(bShape, 22);
  HostTensor r =
      run1("matmul", {a, b}, DType::F32, rShape,
           {{"transpose_a", {{ta}, {}}}, {"transpose_b", {{tb}, {}}}});
  size_t rank = rShape.size();
  int64_t m = rShape[rank - 2], n = rShape[rank - 1];
  int64_t k = ta ? aShape[rank - 2] : aShape[rank - 1];
  std::vector<float> av = values<float>(a), bv = values<float>(b);
  std::vector<double> expected(numel(rShape));
  for (int64_t i = 0; i < numel(rShape); ++i) {
    auto idx = unravel(i, rShape);
    int64_t row = idx[rank - 2], col = idx[rank - 1];
    double sum = 0;
    for (int64_t p = 0; p < k; ++p) {
      auto ai = idx, bi = idx;
      ai[rank - 2] = ta ? p : row;
      ai[rank - 1] = ta ? row : p;
      bi[rank - 2] = tb ? col : p;
      bi[rank - 1] = tb ? p : col;
      sum += double(av[broadcastIndex(ai, aShape)]) *
             bv[broadcastIndex(bi, bShape)];
    }
    expected[i] = sum;
  }
  (void)m;
  (void)n;
  expectNear(values<float>(r), expected, 1e-4, "matmul");
}

TEST(Matmul, Plain) { checkMatmul({3, 4}, {4, 5}, {3, 5}, false, false); }
TEST(Matmul, Transposes) {
  checkMatmul({4, 3}, {4, 5}, {3, 5}, true, false);
  checkMatmul({3, 4}, {5, 4}, {3, 5}, false, true);
  checkMatmul({2, 4, 3}, {2, 5, 4}, {2, 3, 5}, true, true);
}
TEST(Matmul, BroadcastBatch) {
  checkMatmul({2, 1, 3, 4}, {1, 3, 4, 5}, {2, 3, 3, 5}, false, false);
  checkMatmul({2, 3, 4, 3}, {1, 1, 5, 4}, {2, 3, 3, 5}, true, true);
  // Shared B, stacked A: folded into one sgemm.
  checkMatmul({4, 3, 6}, {1, 6, 5}, {4, 3, 5}, false, false);
  checkMatmul({4, 3, 6}, {1, 5, 6}, {4, 3, 5}, false, true);
  // Shared A, batched B.
  checkMatmul({1, 3, 6}, {4, 6, 5}, {4, 3, 5}, false, false);
}
TEST(Matmul, EmptyK) {
  HostTensor a = f32({2, 0}, {}), b = f32({0, 3}, {});
  EXPECT_EQ(values<float>(run1("matmul", {a, b}, DType::F32, {2, 3})),
            std::vector<float>(6, 0.0f));
}

//===----------------------------------------------------------------------===//
// Reductions and softmax
//===----------------------------------------------------------------------===//

const std::vector<std::vector<int64_t>> kAxesSets = {
    {}, {0}, {1}, {3}, {0, 2}, {1, 3}, {2, 3}, {0, 1}, {0, 1, 2, 3}, {1, 2}};

/// Reference reduction of \p in (shape \p s) over \p axes in double.
std::vector<double> referenceReduce(const std::vector<double> &in,
                                    const Shape &s,
                                    const std::vector<int64_t> &axes,
                                    const std::string &kind) {
  Shape kept;
  std::vector<bool> reduced(s.size(), false);
  for (int64_t a : axes)
    reduced[a] = true;
  for (size_t d = 0; d < s.size(); ++d)
    if (!reduced[d])
      kept.push_back(s[d]);
  double init = kind == "max"    ? -INFINITY
                : kind == "min"  ? INFINITY
                : kind == "prod" ? 1
                                 : 0;
  std::vector<double> acc(numel(kept), init);
  std::vector<int64_t> count(numel(kept), 0);
  for (int64_t i = 0; i < numel(s); ++i) {
    auto idx = unravel(i, s);
    std::vector<int64_t> k;
    for (size_t d = 0; d < s.size(); ++d)
      if (!reduced[d])
        k.push_back(idx[d]);
    int64_t o = ravel(k, kept);
    double v = in[i];
    if (kind == "max")
      acc[o] = std::max(acc[o], v);
    else if (kind == "min")
      acc[o] = std::min(acc[o], v);
    else if (kind == "prod")
      acc[o] *= v;
    else
      acc[o] += v;
    count[o]++;
  }
  if (kind == "mean")
    for (size_t o = 0; o < acc.size(); ++o)
      acc[o] /= count[o];
  return acc;
}

Shape keptShape(const Shape &s, const std::vector<int64_t> &axes) {
  // Reduced dims kept as 1: the layout is the same either way.
  Shape r = s;
  for (int64_t a : axes)
    r[a] = 1;
  return r;
}

TEST(Reduce, FloatAllAxesSets) {
  for (const Shape &s : {Shape{2, 3, 4, 5}, Shape{3, 40, 30, 20}}) {
    for (const char *kind : {"sum", "mean", "max", "min", "prod"}) {
      bool prod = std::string(kind) == "prod";
      HostTensor x = randomF32(s, 31, prod ? 0.9f : -2.0f, prod ? 1.1f : 2.0f);
      std::vector<float> xv = values<float>(x);
      std::vector<double> in(xv.begin(), xv.end());
      for (const auto &axes : kAxesSets) {
        if (prod && numel(s) > 1000 && axes.size() > 2)
          continue; // products of thousands of factors are not informative
        HostTensor r = run1(std::string("reduce_") + kind, {x}, DType::F32,
                            keptShape(s, axes), {{"axes", {axes, {}}}});
        expectNear(values<float>(r), referenceReduce(in, s, axes, kind), 1e-4,
                   std::string("reduce_") + kind);
      }
    }
  }
}

template <typename T> void checkIntReduce(DType dtype) {
  Shape s = {3, 4, 5};
  HostTensor x = randomInt(dtype, s, 41, -3, 3);
  std::vector<T> xv = values<T>(x);
  std::vector<double> in(xv.begin(), xv.end());
  for (const char *kind : {"sum", "max", "min", "prod"})
    for (const auto &axes : std::vector<std::vector<int64_t>>{
             {}, {0}, {2}, {0, 2}, {0, 1, 2}, {1}}) {
      HostTensor r = run1(std::string("reduce_") + kind, {x}, dtype,
                          keptShape(s, axes), {{"axes", {axes, {}}}});
      std::vector<double> expected = referenceReduce(in, s, axes, kind);
      std::vector<T> rv = values<T>(r);
      ASSERT_EQ(rv.size(), expected.size());
      for (size_t i = 0; i < rv.size(); ++i)
        EXPECT_EQ(static_cast<double>(rv[i]), expected[i]) << kind << " " << i;
    }
}

TEST(Reduce, Ints) {
  checkIntReduce<int32_t>(DType::I32);
  checkIntReduce<int64_t>(DType::I64);
}

TEST(Reduce, DroppedDimsSameLayout) {
  HostTensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(values<float>(run1("reduce_sum", {x}, DType::F32, {2},
                               {{"axes", {{1}, {}}}})),
            (std::vector<float>{6, 15}));
  EXPECT_EQ(values<float>(run1("reduce_max", {x}, DType::F32, {3},
                               {{"axes", {{0}, {}}}})),
            (std::vector<float>{4, 5, 6}));
}

TEST(Reduce, EmptyExtents) {
  HostTensor x = f32({3, 0}, {});
  EXPECT_EQ(values<float>(run1("reduce_sum", {x}, DType::F32, {3},
                               {{"axes", {{1}, {}}}})),
            std::vector<float>(3, 0.0f));
  EXPECT_EQ(values<float>(run1("reduce_prod", {x}, DType::F32, {3},
                               {{"axes", {{1}, {}}}})),
            std::vector<float>(3, 1.0f));
  EXPECT_EQ(values<float>(run1("reduce_max", {x}, DType::F32, {3},
                               {{"axes", {{1}, {}}}})),
            std::vector<float>(3, -INFINITY));
  EXPECT_TRUE(values<float>(run1("reduce_sum", {x}, DType::F32, {0},
                                 {{"axes", {{0}, {}}}}))
                  .empty());
}

TEST(Softmax, MaskedRows) {
  // -inf entries get probability 0; a fully masked row is NaN (0/0).
  HostTensor x =
      f32({2, 3}, {0, -INFINITY, 0, -INFINITY, -INFINITY, -INFINITY});
  std::vector<float> r = values<float>(
      run1("softmax", {x}, DType::F32, {2, 3}, {{"axis", {{1}, {}}}}));
  EXPECT_FLOAT_EQ(r[0], 0.5f);
  EXPECT_EQ(r[1], 0.0f);
  EXPECT_FLOAT_EQ(r[2], 0.5f);
  EXPECT_TRUE(std::isnan(r[3]));
}

void checkSoftmax(const Shape &s, int64_t axis, bool logSoftmax, float lo,
                  float hi) {
  HostTensor x = randomF32(s, 51, lo, hi);
  std::vector<float> xv = values<float>(x);
  int64_t outer = 1, inner = 1, extent = s[axis];
  for (int64_t d = 0; d < axis; ++d)
    outer *= s[d];
  for (size_t d = axis + 1; d < s.size(); ++d)
    inner *= s[d];
  std::vector<double> expected(xv.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      auto at = [&](int64_t a) { return (o * extent + a) * inner + j; };
      double m = -INFINITY, sum = 0;
      for (int64_t a = 0; a < extent; ++a)
        m = std::max(m, double(xv[at(a)]));
      for (int64_t a = 0; a < extent; ++a)
        sum += std::exp(xv[at(a)] - m);
      for (int64_t a = 0; a < extent; ++a)
        expected[at(a)] = logSoftmax ? xv[at(a)] - m - std::log(sum)
                                     : std::exp(xv[at(a)] - m) / sum;
    }
  HostTensor r = run1(logSoftmax ? "log_softmax" : "softmax", {x}, DType::F32,
                      s, {{"axis", {{axis}, {}}}});
  expectNear(values<float>(r), expected, 1e-5,
             logSoftmax ? "log_softmax" : "softmax");
}

TEST(Softmax, AllAxes) {
  for (bool logSoftmax : {false, true}) {
    for (int64_t axis = 0; axis < 3; ++axis)
      checkSoftmax({3, 4, 5}, axis, logSoftmax, -3, 3);
    checkSoftmax({64, 1000}, 1, logSoftmax, -3, 3);
    checkSoftmax({8, 100, 50}, 1, logSoftmax, -3, 3);
    // Large logits: only a max-subtracting implementation stays finite.
    checkSoftmax({4, 6}, 1, logSoftmax, 500, 1000);
  }
}

//===----------------------------------------------------------------------===//
// Shape ops
//===----------------------------------------------------------------------===//

TEST(ShapeOps, Transpose) {
  Shape s = {2, 3, 4};
  std::vector<int64_t> perm = {2, 0, 1};
  Shape rs = {4, 2, 3};
  for (DType dtype : {DType::F32, DType::I64, DType::Bool}) {
    HostTensor x = randomInt(dtype, s, 61, 0, 50);
    if (dtype == DType::F32)
      x = randomF32(s, 61);
    HostTensor r = run1("transpose", {x}, dtype, rs, {{"perm", {perm, {}}}});
    size_t es = dtypeSize(dtype);
    ASSERT_EQ(r.bytes.size(), x.bytes.size());
    for (int64_t i = 0; i < numel(rs); ++i) {
      auto ri = unravel(i, rs);
      std::vector<int64_t> xi(3);
      for (int d = 0; d < 3; ++d)
        xi[perm[d]] = ri[d];
      EXPECT_EQ(0, std::memcmp(r.bytes.data() + i * es,
                               x.bytes.data() + ravel(xi, s) * es, es))
          << dtypeName(dtype) << " at " << i;
    }
  }
  // Batched transpose of the last two dims (the tiled path), odd sizes.
  HostTensor m = randomF32({3, 37, 45}, 63);
  HostTensor mt = run1("transpose", {m}, DType::F32, {3, 45, 37},
                       {{"perm", {{0, 2, 1}, {}}}});
  std::vector<float> mv = values<float>(m), mtv = values<float>(mt);
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t i = 0; i < 37; ++i)
      for (int64_t j = 0; j < 45; ++j)
        ASSERT_EQ(mtv[(b * 45 + j) * 37 + i], mv[(b * 37 + i) * 45 + j]);
  // 2-D transpose big enough for the parallel path.
  HostTensor big = randomF32({300, 200}, 62);
  HostTensor bt = run1("transpose", {big}, DType::F32, {200, 300},
                       {{"perm", {{1, 0}, {}}}});
  std::vector<float> bv = values<float>(big), tv = values<float>(bt);
  for (int64_t i = 0; i < 300; ++i)
    for (int64_t j = 0; j < 200; ++j)
      ASSERT_EQ(tv[j * 300 + i], bv[i * 200 + j]);
}

TEST(ShapeOps, Broadcast) {
  HostTensor x = i32({3, 1, 2}, {1, 2, 3, 4, 5, 6});
  HostTensor r = run1("broadcast", {x}, DType::I32, {3, 4, 2});
  std::vector<int32_t> rv = values<int32_t>(r);
  for (int64_t i = 0; i < 24; ++i) {
    auto idx = unravel(i, {3, 4, 2});
    EXPECT_EQ(rv[i], idx[0] * 2 + idx[2] + 1);
  }
}

TEST(ShapeOps, Concat) {
  HostTensor a = i32({2, 1, 2}, {1, 2, 3, 4});
  HostTensor b = i32({2, 2, 2}, {5, 6, 7, 8, 9, 10, 11, 12});
  HostTensor c = i32({2, 0, 2}, {});
  HostTensor r =
      run1("concat", {a, b, c}, DType::I32, {2, 3, 2}, {{"axis", {{1}, {}}}});
  EXPECT_EQ(values<int32_t>(r),
            (std::vector<int32_t>{1, 2, 5, 6, 7, 8, 3, 4, 9, 10, 11, 12}));
  HostTensor r0 =
      run1("concat", {a, a}, DType::I32, {4, 1, 2}, {{"axis", {{0}, {}}}});
  EXPECT_EQ(values<int32_t>(r0),
            (std::vector<int32_t>{1, 2, 3, 4, 1, 2, 3, 4}));
}

TEST(ShapeOps, SliceNegativeSteps) {
  Shape s = {5, 6, 3};
  HostTensor x = randomF32(s, 71);
  std::vector<float> xv = values<float>(x);
  struct Case {
    std::vector<int64_t> starts, steps;
    Shape result;
  };
  std::vector<Case> cases = {
      {{4, 1, 0}, {-2, 2, 1}, {3, 3, 3}},
      {{0, 5, 2}, {1, -1, -1}, {5, 6, 3}},
      {{1, 0, 1}, {3, 5, 1}, {2, 2, 2}},
      {{4, 5, 2}, {-1, -3, -2}, {5, 2, 2}},
  };
  for (const Case &c : cases) {
    HostTensor r = run1("slice", {x}, DType::F32, c.result,
                        {{"starts", {c.starts, {}}}, {"steps", {c.steps, {}}}});
    std::vector<double> expected;
    for (int64_t i = 0; i < numel(c.result); ++i) {
      auto idx = unravel(i, c.result);
      std::vector<int64_t> src(3);
      for (int d = 0; d < 3; ++d)
        src[d] = c.starts[d] + idx[d] * c.steps[d];
      expected.push_back(xv[ravel(src, s)]);
    }
    expectNear(values<float>(r), expected, 0, "slice");
  }
}

TEST(ShapeOps, SliceOutOfRangeIsALoadError) {
  HostTensor x = randomF32({5}, 72);
  plan::Program p =
      singleKernelProgram("slice", {x}, {{DType::F32, {3}}},
                          {{"starts", {{1}, {}}}, {"steps", {{2}, {}}}});
  EXPECT_NE(createError(p).find("leaves the operand"), std::string::npos)
      << createError(p);
}

TEST(ShapeOps, GatherNegativeIndices) {
  HostTensor data = randomF32({3, 4, 2}, 81);
  std::vector<float> dv = values<float>(data);
  // Axis 1, i64 indices with negatives.
  HostTensor idx = i64({2, 2}, {0, -1, 2, -4});
  std::vector<int64_t> iv = values<int64_t>(idx);
  Shape rs = {3, 2, 2, 2};
  HostTensor r =
      run1("gather", {data, idx}, DType::F32, rs, {{"axis", {{1}, {}}}});
  std::vector<double> expected;
  for (int64_t i = 0; i < numel(rs); ++i) {
    auto ri = unravel(i, rs);
    int64_t k = iv[ri[1] * 2 + ri[2]];
    if (k < 0)
      k += 4;
    expected.push_back(dv[ravel({ri[0], k, ri[3]}, {3, 4, 2})]);
  }
  expectNear(values<float>(r), expected, 0, "gather axis 1");

  // Axis 0 (embedding lookup), i32 indices, i64 data.
  HostTensor table = i64({3, 2}, {0, 1, 10, 11, 20, 21});
  HostTensor ids = i32({4}, {2, -3, 1, -1});
  EXPECT_EQ(values<int64_t>(run1("gather", {table, ids}, DType::I64, {4, 2},
                                 {{"axis", {{0}, {}}}})),
            (std::vector<int64_t>{20, 21, 0, 1, 10, 11, 20, 21}));
}

TEST(ShapeOps, GatherOutOfRangeIsARunError) {
  HostTensor data = randomF32({3, 2}, 82);
  HostTensor ids = i64({3}, {0, 3, 1});
  plan::Program p = singleKernelProgram(
      "gather", {data, ids}, {{DType::F32, {3, 2}}}, {{"axis", {{0}, {}}}});
  p.mutable_instructions(0)->set_location("model.py:42");
  std::unique_ptr<Executor> exec;
  ASSERT_TRUE(Executor::create(p, &exec).isOk());
  std::vector<HostTensor> out;
  Status s = exec->run({data, ids}, &out);
  ASSERT_FALSE(s.isOk());
  for (const char *needle : {"gather", "model.py:42", "index 3", "size 3"})
    EXPECT_NE(s.message().find(needle), std::string::npos)
        << needle << " not in: " << s.message();
  ids.data<int64_t>()[1] = -4;
  s = exec->run({data, ids}, &out);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("index -4"), std::string::npos) << s.message();
}

} // namespace

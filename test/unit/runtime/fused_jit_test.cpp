//===- fused_jit_test.cpp - Compiled fused chains against the interpreter ===//
//
// Every op the JIT compiles, alone and in chains, in each operand mode, on
// values that reach every branch of exp, erf, tanh and the bf16 rounding
// (zeros, infinities, NaN, subnormals, the polynomials' boundaries, bf16
// ties): the compiled kernel's results equal the interpreter's bit for bit
// (any NaN equal to any NaN: neither promises a payload). Lengths that are
// not a multiple of the 16 lanes run the rest through the interpreter.
//
//===----------------------------------------------------------------------===//

#include "core/fusion.h"
#include "cpu/cpu_kernel.h"
#include "cpu/fused_jit.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace cleave::rt {
namespace {

/// Sets $CLEAVE_NO_JIT for one kernel's construction, then restores it.
class JitSwitch {
public:
  explicit JitSwitch(bool compiled) {
    const char *v = std::getenv("CLEAVE_NO_JIT");
    saved_ = v ? std::optional<std::string>(v) : std::nullopt;
    if (compiled)
      unsetenv("CLEAVE_NO_JIT");
    else
      setenv("CLEAVE_NO_JIT", "1", 1);
  }
  ~JitSwitch() {
    if (saved_)
      setenv("CLEAVE_NO_JIT", saved_->c_str(), 1);
    else
      unsetenv("CLEAVE_NO_JIT");
  }

private:
  std::optional<std::string> saved_;
};

/// Values that reach every branch, then random ones of every magnitude.
std::vector<float> testValues(size_t n, uint32_t seed) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.0f,          -0.0f,
                          inf,           -inf,
                          std::nanf(""), -std::nanf("0x1234"),
                          1e-40f,        -1e-45f,
                          0.9f,          std::nextafter(0.9f, 0.0f),
                          4.0f,          -4.5f,
                          0.625f,        -0.624f,
                          88.7f,         89.5f,
                          -103.9f,       -104.5f,
                          1.00390625f, // a bf16 tie, even below
                          1.01171875f, // a bf16 tie, odd below
                          3.4e38f,       -87.0f,
                          1.0f,          -1.0f};
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> scale(-12, 8);
  while (v.size() < n)
    v.push_back(std::ldexp(unit(gen), scale(gen)));
  std::shuffle(v.begin() + 1, v.end(), gen);
  v.resize(n);
  return v;
}

bool sameBits(float a, float b) {
  if (std::isnan(a) || std::isnan(b))
    return std::isnan(a) && std::isnan(b);
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

/// A chain over \p inputs inputs (Full f32, or one-element Scalar where
/// \p scalar says) of \p n elements.
FusedProgram chain(int64_t n, const std::vector<bool> &scalar,
                   std::vector<FusedOp> ops, std::vector<uint8_t> outputs) {
  FusedProgram f;
  f.numElements = n;
  f.shape = {n};
  f.dims = {n};
  for (bool s : scalar) {
    f.inputs.push_back(s ? FusedInput::Scalar : FusedInput::Full);
    f.inputIsBool.push_back(0);
    f.inputStorage.push_back(DType::F32);
    f.strides.emplace_back();
  }
  f.numRegisters = static_cast<int>(scalar.size() + ops.size());
  f.ops = std::move(ops);
  f.outputRegisters = std::move(outputs);
  f.outputIsBool.assign(f.outputRegisters.size(), 0);
  f.outputStorage.assign(f.outputRegisters.size(), DType::F32);
  return f;
}

/// Runs \p f on \p in, compiled or interpreted.
std::vector<std::vector<float>> run(const FusedProgram &f,
                                    const std::vector<std::vector<float>> &in,
                                    bool compiled) {
  KernelFn fn;
  {
    JitSwitch jit(compiled);
    fn = fusedCpuKernel(std::make_shared<FusedProgram>(f));
  }
  std::vector<const void *> operands;
  for (const auto &v : in)
    operands.push_back(v.data());
  std::vector<std::vector<float>> out(f.outputRegisters.size(),
                                      std::vector<float>(f.numElements, -7.0f));
  // The reductions' results: one per element of the dims not reduced.
  int64_t kept = 1;
  for (size_t d = 0; d < f.shape.size(); ++d)
    if (std::find(f.reduceAxes.begin(), f.reduceAxes.end(),
                  static_cast<int64_t>(d)) == f.reduceAxes.end())
      kept *= f.shape[d];
  for (size_t k = 0; k < f.reductions.size(); ++k)
    out.emplace_back(kept, -7.0f);
  std::vector<void *> results;
  for (auto &v : out)
    results.push_back(v.data());
  EXPECT_TRUE(fn({operands.data(), results.data()}).isOk());
  return out;
}

/// The chain compiles (on AVX-512 machines) and equals the interpreter.
void expectSame(const FusedProgram &f,
                const std::vector<std::vector<float>> &in, const char *what) {
  {
    JitSwitch jit(true);
    EXPECT_NE(compileFusedJit(f), nullptr) << what;
  }
  auto want = run(f, in, false), got = run(f, in, true);
  for (size_t o = 0; o < want.size(); ++o)
    for (size_t i = 0; i < want[o].size(); ++i)
      if (!sameBits(got[o][i], want[o][i])) {
        ADD_FAILURE() << what << ": output " << o << " element " << i << " of "
                      << in[0][i] << ": " << got[o][i] << " compiled, "
                      << want[o][i] << " interpreted";
        return;
      }
}

/// Whether chains compile here: AVX-512, and the runtime built with Xbyak.
bool jitAvailable() {
  if (!__builtin_cpu_supports("avx512f"))
    return false;
  JitSwitch jit(true);
  FusedProgram f = chain(16, {false}, {{FusedCode::Neg, 1, 0, 0, 0}}, {1});
  return compileFusedJit(f) != nullptr;
}

#define SKIP_WITHOUT_JIT()                                                     \
  if (!jitAvailable())                                                         \
  GTEST_SKIP() << "no AVX-512 or no Xbyak: chains are interpreted"

/// 16-lane blocks where erf's and tanh's second branch is needed by no
/// lane, by one, by a NaN, and by all; then the tail.
std::vector<float> branchBlocks() {
  std::vector<float> v;
  for (int b = 0; b < 4; ++b)
    for (int l = 0; l < 16; ++l)
      v.push_back(b == 3 ? 1.5f + l : (l - 8) / 17.0f);
  v[16 + 5] = 3.0f;
  v[32 + 11] = std::nanf("");
  v.push_back(0.3f);
  v.push_back(-2.0f);
  return v;
}

constexpr FusedCode kUnary[] = {
    FusedCode::Neg,  FusedCode::Abs,      FusedCode::Exp,
    FusedCode::Sqrt, FusedCode::Rsqrt,    FusedCode::Reciprocal,
    FusedCode::Tanh, FusedCode::Erf,      FusedCode::Sigmoid,
    FusedCode::Relu, FusedCode::Identity, FusedCode::RoundBf16};
constexpr FusedCode kBinary[] = {FusedCode::Add, FusedCode::Sub, FusedCode::Mul,
                                 FusedCode::Div, FusedCode::Max, FusedCode::Min,
                                 FusedCode::Eq,  FusedCode::Ne,  FusedCode::Lt,
                                 FusedCode::Le,  FusedCode::Gt,  FusedCode::Ge};

TEST(FusedJit, EveryUnaryOpEqualsTheInterpreter) {
  SKIP_WITHOUT_JIT();
  // 1000 elements: segments of 256, the last one's 8 past the lanes.
  std::vector<float> x = testValues(1000, 1), blocks = branchBlocks();
  int64_t nb = static_cast<int64_t>(blocks.size());
  for (FusedCode c : kUnary) {
    std::string what = "unary op " + std::to_string(static_cast<int>(c));
    expectSame(chain(1000, {false}, {{c, 1, 0, 0, 0}}, {1}), {x}, what.c_str());
    expectSame(chain(nb, {false}, {{c, 1, 0, 0, 0}}, {1}), {blocks},
               (what + " on branch blocks").c_str());
  }
}

TEST(FusedJit, EveryBinaryOpInEachOperandModeEqualsTheInterpreter) {
  SKIP_WITHOUT_JIT();
  std::vector<float> x = testValues(777, 2), y = testValues(777, 3);
  // Ties of signed zeros and NaNs on either side, lined up.
  const float nan = std::nanf(""), inf = std::numeric_limits<float>::infinity();
  const float xs[] = {-0.0f, 0.0f, nan, 1.0f, nan, -inf, 2.0f};
  const float ys[] = {0.0f, -0.0f, 1.0f, nan, nan, -inf, 2.0f};
  std::copy(std::begin(xs), std::end(xs), x.begin());
  std::copy(std::begin(ys), std::end(ys), y.begin());
  for (FusedCode c : kBinary)
    for (int mode = 0; mode < 3; ++mode) {
      // Vectors; b a scalar; a a scalar.
      std::vector<bool> scalar = {mode == 2, mode == 1};
      std::vector<std::vector<float>> values =
          mode == 0
              ? std::vector<std::vector<float>>{{}}
              : std::vector<std::vector<float>>{{0.5f}, {-0.0f}, {-inf}, {nan}};
      for (const std::vector<float> &v : values) {
        std::vector<float> a = mode == 2 ? v : x, b = mode == 1 ? v : y;
        std::string what = "binary op " + std::to_string(static_cast<int>(c)) +
                           " mode " + std::to_string(mode);
        expectSame(chain(777, scalar, {{c, 2, 0, 1, 0}}, {2}), {a, b},
                   what.c_str());
      }
    }
}

TEST(FusedJit, SelectAndLongChainsEqualTheInterpreter) {
  SKIP_WITHOUT_JIT();
  std::vector<float> x = testValues(4099, 4), y = testValues(4099, 5);
  // select's three operands read from the inputs themselves.
  expectSame(
      chain(4099, {false, false}, {{FusedCode::Select, 2, 0, 1, 0}}, {2}),
      {x, y}, "select of inputs");
  // select(x > y, erf(x), x * y): the condition a register (0 or 1).
  expectSame(chain(4099, {false, false},
                   {{FusedCode::Gt, 2, 0, 1, 0},
                    {FusedCode::Erf, 3, 0, 0, 0},
                    {FusedCode::Mul, 4, 0, 1, 0},
                    {FusedCode::Select, 5, 2, 3, 4}},
                   {5}),
             {x, y}, "select");
  // GELU and its derivative as autodiff writes them (x / sqrt 2, erf, the
  // density), with two outputs, one of them read again later.
  std::vector<float> k = {1.41421356f}, half = {0.5f}, one = {1.0f};
  expectSame(chain(4099, {false, true, true, true},
                   {{FusedCode::Div, 4, 0, 1, 0},
                    {FusedCode::Erf, 5, 4, 0, 0},
                    {FusedCode::Add, 6, 5, 3, 0},
                    {FusedCode::Mul, 7, 6, 2, 0},
                    {FusedCode::Mul, 8, 0, 7, 0},
                    {FusedCode::Mul, 9, 4, 4, 0},
                    {FusedCode::Neg, 10, 9, 0, 0},
                    {FusedCode::Exp, 11, 10, 0, 0},
                    {FusedCode::Mul, 12, 11, 0, 0},
                    {FusedCode::Add, 13, 12, 7, 0},
                    {FusedCode::RoundBf16, 14, 8, 0, 0},
                    {FusedCode::Mul, 15, 14, 13, 0}},
                   {14, 13, 15}),
             {x, k, half, one}, "gelu");
  // 22 values alive at once: more than the registers, so interpreted.
  std::vector<FusedOp> wide;
  for (int i = 0; i < 22; ++i)
    wide.push_back({FusedCode::Sigmoid, static_cast<uint8_t>(1 + i), 0, 0, 0});
  for (int i = 0; i < 21; ++i)
    wide.push_back({FusedCode::Add, static_cast<uint8_t>(23 + i),
                    static_cast<uint8_t>(i == 0 ? 1 : 22 + i),
                    static_cast<uint8_t>(2 + i), 0});
  FusedProgram f = chain(4099, {false}, wide, {43});
  EXPECT_EQ(compileFusedJit(f), nullptr);
  auto want = run(f, {x}, false), got = run(f, {x}, true);
  for (size_t i = 0; i < want[0].size(); ++i)
    ASSERT_TRUE(sameBits(got[0][i], want[0][i])) << i;
}

TEST(FusedJit, ChainsEndingInReductionsEqualTheInterpreter) {
  SKIP_WITHOUT_JIT();
  // [64, 100]: sums along rows (each row a run) and down columns (lanes),
  // of a computed register and of an input itself, and an output beside.
  std::vector<float> x = testValues(6400, 6), y = testValues(6400, 7);
  for (float &v : x)
    v = std::isfinite(v) ? std::fmod(v, 8.0f) : 0.5f;
  for (int64_t axis : {0, 1}) {
    FusedProgram f = chain(6400, {false, false},
                           {{FusedCode::Erf, 2, 0, 0, 0},
                            {FusedCode::Mul, 3, 2, 1, 0},
                            {FusedCode::Tanh, 4, 3, 0, 0}},
                           {4});
    f.shape = {64, 100};
    f.reduceAxes = {axis};
    f.reductions = {{3, false}, {0, true}};
    expectSame(f, {x, y}, axis == 0 ? "sums down columns" : "sums of rows");
  }
}

} // namespace
} // namespace cleave::rt

//===- cuda_backend_test.cpp - The CUDA backend against the CPU backend ---===//
//
// Every kernel of kernels.def runs in small programs (one instruction, or a
// copy of junk bytes into the result first) on both backends through the
// public StepRunner interface, the CPU backend being the reference. Integer,
// bool and data-movement results must match exactly, f32 results within
// 1e-4 relative, and bf16 matmuls within 2e-2 of their row's magnitude. Each
// case runs twice on the GPU: eagerly, then as a replayed CUDA graph.
//
// Without a GPU the comparisons skip, but the case table is still checked:
// every kernel has a case, and every case runs (or fails as expected) on the
// CPU.
//
//===----------------------------------------------------------------------===//

#include "cleave/runtime/runner.h"
#include "core/convert.h"
#include "test_util.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <limits>
#include <sstream>

using namespace cleave::rt;
using namespace cleave::rt::test;

namespace {

// The plugin is in the build's lib/, not beside this binary (runner.cpp looks
// in BINDIR/../lib): point at it before any runner is created.
[[maybe_unused]] const bool kPluginPathSet = [] {
#ifdef CLEAVE_CUDA_PLUGIN_PATH
  setenv("CLEAVE_CUDA_PLUGIN", CLEAVE_CUDA_PLUGIN_PATH, /*overwrite=*/0);
#endif
  return true;
}();

constexpr DType kF32 = DType::F32, kI32 = DType::I32, kI64 = DType::I64,
                kBool = DType::Bool;
const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

AttrSpec ia(std::vector<int64_t> v) { return {std::move(v), {}}; }
AttrSpec fa(double v) { return {{}, {v}}; }
std::optional<ResultType> R(DType d, Shape s) {
  return ResultType{d, std::move(s)};
}
using Ops = std::vector<std::optional<HostTensor>>;
using Res = std::vector<std::optional<ResultType>>;

/// How f32 outputs are compared; integers and bools are always exact.
enum class FloatCheck {
  /// |cuda - cpu| <= 1e-4 * max(1, |cpu|); NaN matches NaN.
  Near,
  /// Bit for bit (data movement, random numbers); NaN matches NaN.
  Exact,
  /// CUDA runs with Precision::BF16 against the f32 CPU result: within
  /// 2e-2 * max |cpu| over the element's row (last dim).
  Bf16
};

struct Case {
  std::string kernel, name;
  plan::Program program;
  std::vector<HostTensor> inputs;
  FloatCheck check = FloatCheck::Near;
  /// Non-empty: every run must fail on both backends with this in the
  /// message.
  std::string error;
};

std::string str(const HostTensor &t) {
  return describeTensor(t.dtype, t.shape);
}

std::string describeAttrs(const Attrs &attrs) {
  std::ostringstream os;
  bool first = true;
  for (const auto &[name, a] : attrs) {
    os << (first ? " {" : ", ") << name << "=";
    first = false;
    if (!a.floats.empty())
      os << a.floats[0];
    for (size_t i = 0; i < a.ints.size(); ++i)
      os << (i ? "," : "[") << a.ints[i];
    if (a.floats.empty())
      os << (a.ints.empty() ? "[]" : "]");
  }
  return attrs.empty() ? "" : os.str() + "}";
}

/// Sets every zero of an integer tensor to 1 (divisors, products).
HostTensor nonZero(HostTensor t) {
  for (int64_t i = 0; i < t.numElements(); ++i) {
    if (t.dtype == kI32 && t.data<int32_t>()[i] == 0)
      t.data<int32_t>()[i] = 1;
    if (t.dtype == kI64 && t.data<int64_t>()[i] == 0)
      t.data<int64_t>()[i] = 1;
  }
  return t;
}

HostTensor toF32(const HostTensor &ints, float scale) {
  HostTensor t = HostTensor::zeros(kF32, ints.shape);
  for (int64_t i = 0; i < t.numElements(); ++i)
    t.data<float>()[i] = scale * static_cast<float>(ints.data<int32_t>()[i]);
  return t;
}

/// The case table under construction, with its own deterministic seeds.
class Cases {
public:
  HostTensor f(Shape s, float lo = -2, float hi = 2) {
    return randomF32(std::move(s), seed_++, lo, hi);
  }
  HostTensor i(DType d, Shape s, int lo = -50, int hi = 50) {
    return randomInt(d, std::move(s), seed_++, lo, hi);
  }
  HostTensor b(Shape s) {
    return randomInt(kBool, std::move(s), seed_++, 0, 1);
  }
  HostTensor any(DType d, Shape s) {
    return d == kF32    ? f(std::move(s))
           : d == kBool ? b(std::move(s))
                        : i(d, std::move(s));
  }
  /// Multiples of 0.5 in [-2, 2]: f32 operands that are often equal.
  HostTensor halves(Shape s) {
    return toF32(i(kI32, std::move(s), -4, 4), 0.5f);
  }

  /// A program running \p kernel once: operands are inputs (nullopt: -1),
  /// results are outputs (nullopt: -1). With \p junk, each result is first
  /// filled with junk bytes by a copy (the CUDA arena starts zeroed, which
  /// would hide a kernel that leaves elements of its result unwritten).
  Case &add(const std::string &kernel, const Ops &operands, const Res &results,
            const Attrs &attrs = {}, const std::string &note = "",
            bool junk = false) {
    ProgramBuilder pb;
    Case c;
    c.kernel = kernel;
    std::ostringstream name;
    name << kernel << "(";
    std::vector<int> ops, res;
    for (size_t k = 0; k < operands.size(); ++k) {
      name << (k ? ", " : "") << (operands[k] ? str(*operands[k]) : "-");
      if (!operands[k]) {
        ops.push_back(-1);
        continue;
      }
      ops.push_back(pb.input("in" + std::to_string(k), operands[k]->dtype,
                             operands[k]->shape));
      c.inputs.push_back(*operands[k]);
    }
    name << ") -> (";
    for (size_t k = 0; k < results.size(); ++k) {
      const std::optional<ResultType> &r = results[k];
      name << (k ? ", " : "") << (r ? describeTensor(r->dtype, r->shape) : "-");
      res.push_back(r ? pb.arena(r->dtype, r->shape) : -1);
      if (r && junk) {
        HostTensor j = HostTensor::zeros(r->dtype, r->shape);
        std::fill(j.bytes.begin(), j.bytes.end(), uint8_t(0x41));
        int in = pb.input("junk" + std::to_string(k), r->dtype, r->shape);
        c.inputs.push_back(std::move(j));
        pb.instruction("copy", {in}, {res.back()});
      }
    }
    pb.instruction(kernel, ops, res, attrs);
    for (size_t k = 0; k < res.size(); ++k)
      if (res[k] >= 0)
        pb.output(res[k], "out" + std::to_string(k));
    c.program = std::move(pb.program);
    c.name = name.str() + ")" + describeAttrs(attrs) +
             (note.empty() ? "" : " [" + note + "]") + (junk ? " [junk]" : "");
    all.push_back(std::move(c));
    return all.back();
  }
  /// add() for data movement: f32 results compared bit for bit.
  Case &move(const std::string &kernel, const Ops &operands, const Res &results,
             const Attrs &attrs = {}, const std::string &note = "",
             bool junk = false) {
    Case &c = add(kernel, operands, results, attrs, note, junk);
    c.check = FloatCheck::Exact;
    return c;
  }

  std::vector<Case> all;

private:
  uint32_t seed_ = 1;
};

//===----------------------------------------------------------------------===//
// The cases
//===----------------------------------------------------------------------===//

const std::vector<float> kSpecialF32 = {kNaN,   kInf,  -kInf, 0.0f,  -0.0f,
                                        1.0f,   -1.0f, 0.5f,  -2.5f, 3.0f,
                                        1e-30f, 1e30f, -1e30f};
const std::vector<float> kSpecialUnary = {
    kNaN,  kInf, -kInf,  0.0f,  -0.0f,  1.0f,  -1.0f,  0.5f,
    -2.5f, 3.0f, 1e-30f, 20.0f, -20.0f, 88.0f, -100.0f};

template <typename T> std::vector<T> intEdges() {
  using L = std::numeric_limits<T>;
  return {L::min(), L::max(), -1, 0, 1, 7, -7, 2};
}
template <typename T> std::vector<T> intDivisors() {
  using L = std::numeric_limits<T>;
  return {L::min(), L::max(), -1, 1, 2, -7, 3};
}

/// [n, 1] and [1, m] operands: every pair of their values meets.
template <typename T>
std::pair<HostTensor, HostTensor> pairwise(DType d, const std::vector<T> &a,
                                           const std::vector<T> &b) {
  int64_t n = static_cast<int64_t>(a.size()),
          m = static_cast<int64_t>(b.size());
  return {makeTensor<T>(d, {n, 1}, a), makeTensor<T>(d, {1, m}, b)};
}

void elementwiseCases(Cases &cs) {
  struct Shapes {
    Shape a, b, r;
  };
  const std::vector<Shapes> shapes = {{{3, 4, 5}, {3, 4, 5}, {3, 4, 5}},
                                      {{3, 1, 5}, {1, 4, 1}, {3, 4, 5}},
                                      {{1, 1, 1}, {3, 4, 5}, {3, 4, 5}},
                                      {{2, 300, 70}, {2, 1, 70}, {2, 300, 70}},
                                      {{}, {}, {}}};
  int64_t ns = static_cast<int64_t>(kSpecialF32.size());
  auto [sa, sb] = pairwise(kF32, kSpecialF32, kSpecialF32);
  for (std::string k : {"add", "sub", "mul", "div", "pow", "max", "min"}) {
    bool pow = k == "pow", div = k == "div";
    for (const Shapes &s : shapes)
      cs.add(k, {cs.f(s.a, pow ? 0.5f : -2, 2), cs.f(s.b)}, {R(kF32, s.r)});
    cs.add(k, {sa, sb}, {R(kF32, {ns, ns})}, {}, "special values");
    for (DType d : {kI32, kI64}) {
      for (const Shapes &s : {shapes[0], shapes[1]}) {
        HostTensor a = cs.i(d, s.a, pow ? -4 : -50, pow ? 4 : 50);
        HostTensor b = cs.i(d, s.b, pow ? -2 : -50, pow ? 6 : 50);
        cs.add(k, {a, div ? nonZero(b) : b}, {R(d, s.r)});
      }
      auto [ea, eb] =
          d == kI32 ? pairwise(d, intEdges<int32_t>(), intDivisors<int32_t>())
                    : pairwise(d, intEdges<int64_t>(), intDivisors<int64_t>());
      cs.add(k, {ea, eb}, {R(d, {8, 7})}, {}, "extremes");
    }
  }
  for (std::string k :
       {"cmp_eq", "cmp_ne", "cmp_lt", "cmp_le", "cmp_gt", "cmp_ge"}) {
    cs.add(k, {cs.halves({3, 1, 5}), cs.halves({1, 4, 5})},
           {R(kBool, {3, 4, 5})});
    cs.add(k, {sa, sb}, {R(kBool, {ns, ns})}, {}, "special values");
    cs.add(k, {cs.i(kI32, {40}, -3, 3), cs.i(kI32, {40}, -3, 3)},
           {R(kBool, {40})});
    cs.add(k, {cs.i(kI64, {4, 1}, -3, 3), cs.i(kI64, {1, 6}, -3, 3)},
           {R(kBool, {4, 6})});
    cs.add(k, {cs.b({2, 3}), cs.b({2, 1})}, {R(kBool, {2, 3})});
  }
  for (std::string k : {"and", "or", "xor"}) {
    cs.add(k, {cs.b({3, 4, 5}), cs.b({3, 4, 5})}, {R(kBool, {3, 4, 5})});
    cs.add(k, {cs.b({3, 1, 5}), cs.b({1, 4, 1})}, {R(kBool, {3, 4, 5})});
  }
  cs.add("not", {cs.b({3, 4, 5})}, {R(kBool, {3, 4, 5})});
  cs.add("not", {cs.b({40000})}, {R(kBool, {40000})});
  for (DType d : {kF32, kI32, kI64, kBool})
    cs.move("select",
            {cs.b({3, 1, 5}), cs.any(d, {1, 4, 5}), cs.any(d, {3, 4, 1})},
            {R(d, {3, 4, 5})});
  cs.move("select", {cs.b({5000}), cs.f({5000}), cs.f({5000})},
          {R(kF32, {5000})});

  int64_t nu = static_cast<int64_t>(kSpecialUnary.size());
  auto unary = [&](const char *k, float lo, float hi, const Attrs &attrs) {
    for (Shape s : {Shape{3, 4, 5}, Shape{70000}})
      cs.add(k, {cs.f(s, lo, hi)}, {R(kF32, s)}, attrs);
    cs.add(k, {f32({nu}, kSpecialUnary)}, {R(kF32, {nu})}, attrs,
           "special values");
  };
  struct Range {
    const char *kernel;
    float lo, hi;
  };
  const std::vector<Range> ranges = {
      {"exp", -10, 10},     {"log", 0.01f, 10},    {"sqrt", 0, 10},
      {"rsqrt", 0.01f, 10}, {"reciprocal", -4, 4}, {"tanh", -6, 6},
      {"sigmoid", -20, 20}, {"relu", -2, 2},       {"erf", -4, 4},
      {"sin", -6, 6},       {"cos", -6, 6},        {"neg", -2, 2},
      {"abs", -2, 2},       {"gelu", -5, 5}};
  for (const Range &u : ranges)
    unary(u.kernel, u.lo, u.hi, {});
  for (int64_t approximate : {0, 1})
    unary("gelu", -5, 5, {{"approximate", ia({approximate})}});
  for (double alpha : {0.01, 0.2})
    unary("leaky_relu", -2, 2, {{"alpha", fa(alpha)}});
  for (std::string k : {"neg", "abs"}) {
    for (DType d : {kI32, kI64})
      cs.add(k, {cs.i(d, {3, 4, 5})}, {R(d, {3, 4, 5})});
    cs.add(k, {makeTensor<int32_t>(kI32, {8}, intEdges<int32_t>())},
           {R(kI32, {8})}, {}, "extremes");
    cs.add(k, {makeTensor<int64_t>(kI64, {8}, intEdges<int64_t>())},
           {R(kI64, {8})}, {}, "extremes");
  }
}

void castCases(Cases &cs) {
  const std::vector<float> f = {kNaN,          kInf,           -kInf,
                                0.0f,          -0.0f,          0.7f,
                                -0.7f,         2.5f,           -2.5f,
                                1e10f,         -1e10f,         2147483520.0f,
                                2147483648.0f, -2147483648.0f, -2147483904.0f,
                                9.2233715e18f, 9.223372e18f,   -9.223372e18f,
                                -1e30f,        16777217.0f,    123.99f};
  const std::vector<int32_t> i32 = {INT32_MIN, INT32_MAX, -1,        0,
                                    1,         16777217,  -16777217, 123};
  const int64_t p31 = int64_t(1) << 31, p40 = int64_t(1) << 40;
  const std::vector<int64_t> i64 = {
      INT64_MIN, INT64_MAX, p40 + 3, -p40 - 1, p31,       -p31 - 1,
      16777217,  -1,        0,       1,        p40 << 13, (p40 << 13) + 1};
  const std::vector<HostTensor> edges = {
      makeTensor<float>(kF32, {21}, f), makeTensor<int32_t>(kI32, {8}, i32),
      makeTensor<int64_t>(kI64, {12}, i64), boolean({5}, {0, 1, 1, 0, 1})};
  for (const HostTensor &from : edges) {
    HostTensor random = from.dtype == kF32
                            ? cs.f({3, 40}, -100, 100)
                            : cs.i(from.dtype, {3, 40}, -100, 100);
    for (DType to : {kF32, kI32, kI64, kBool}) {
      cs.move("cast", {from}, {R(to, from.shape)}, {}, "edge values");
      cs.move("cast", {random}, {R(to, random.shape)});
    }
  }
  // The storage dtypes (a model's float64, float16, bfloat16 and narrow
  // integer inputs and outputs): into each from the edges, and back.
  const std::vector<DType> storage = {DType::F64, DType::F16, DType::BF16,
                                      DType::I8,  DType::I16, DType::U8,
                                      DType::U16, DType::U32};
  for (DType to : storage)
    for (const HostTensor &from : edges)
      cs.move("cast", {from}, {R(to, from.shape)}, {}, "to a storage dtype");
  const std::vector<uint16_t> halfBits = {0x3c00, 0x0001, 0x7bff, 0xfc00,
                                          0x7e00, 0x8000, 0x03ff, 0xc4d2};
  for (DType from16 : {DType::F16, DType::BF16})
    for (DType to : {kF32, kI32, kI64, kBool})
      cs.move("cast", {makeTensor<uint16_t>(from16, {8}, halfBits)},
              {R(to, {8})}, {}, "from 16-bit float bits");
  cs.move("cast",
          {makeTensor<double>(DType::F64, {5}, {0.1, -1e300, 1e-50, 3.5, -7})},
          {R(kF32, {5})}, {}, "from float64");
  cs.move("cast", {makeTensor<int8_t>(DType::I8, {4}, {-128, 127, 0, -1})},
          {R(kI32, {4})}, {}, "from int8");
  cs.move("cast",
          {makeTensor<uint32_t>(DType::U32, {3}, {4000000000u, 0u, 7u})},
          {R(kI64, {3})}, {}, "from uint32");
  cs.move("copy", {cs.f({3, 4})}, {R(kF32, {3, 4})});
  cs.move("copy", {cs.f({2, 6})}, {R(kF32, {3, 4})}, {}, "reshaped");
  cs.move("copy", {cs.i(kI64, {1000})}, {R(kI64, {10, 100})});
  cs.move("copy", {cs.i(kI32, {5, 1})}, {R(kI32, {5})});
  cs.move("copy", {cs.b({7})}, {R(kBool, {7})});
  cs.move("fill", {}, {R(kF32, {3, 4})}, {{"value", fa(2.5)}});
  cs.move("iota", {}, {R(kI64, {2, 3, 4})}, {{"dim", ia({1})}});
  cs.move("iota", {}, {R(kI32, {50257})}, {{"dim", ia({0})}});
  cs.move("fill", {}, {R(kF32, {100000})}, {{"value", fa(0.1)}});
  cs.move("fill", {}, {R(kF32, {})}, {{"value", fa(-kInf)}});
  cs.move("fill", {}, {R(kI32, {5})}, {{"value", ia({-7})}});
  cs.move("fill", {}, {R(kI64, {2, 3})},
          {{"value", ia({(int64_t(1) << 40) + 1})}});
  cs.move("fill", {}, {R(kBool, {9})}, {{"value", ia({1})}});
  cs.move("fill", {}, {R(kBool, {4})}, {{"value", ia({0})}});
}

void matmulCases(Cases &cs) {
  struct Matmul {
    Shape a, b, r;
    int ta = 0, tb = 0;
    bool bf16 = false;
  };
  const std::vector<Matmul> cases = {
      {{5, 7}, {7, 3}, {5, 3}},
      {{33, 17}, {17, 65}, {33, 65}},
      {{2, 5, 7}, {2, 3, 7}, {2, 5, 3}, 0, 1},
      {{2, 7, 5}, {2, 7, 3}, {2, 5, 3}, 1, 0},
      {{7, 5}, {3, 7}, {5, 3}, 1, 1},
      {{2, 3, 4, 6}, {2, 3, 6, 5}, {2, 3, 4, 5}},
      {{2, 3, 4, 6}, {1, 1, 6, 5}, {2, 3, 4, 5}},       // one B: a taller A
      {{2, 3, 6, 4}, {1, 1, 6, 5}, {2, 3, 4, 5}, 1, 0}, // one B, A transposed
      {{1, 1, 4, 6}, {2, 3, 6, 5}, {2, 3, 4, 5}},       // one A
      {{2, 3, 4, 6}, {2, 1, 6, 5}, {2, 3, 4, 5}},       // B not equally spaced
      {{2, 3, 4, 6}, {1, 3, 6, 5}, {2, 3, 4, 5}},
      {{1, 3, 4, 6}, {2, 1, 6, 5}, {2, 3, 4, 5}},
      {{2, 3, 6, 4}, {2, 1, 5, 6}, {2, 3, 4, 5}, 1, 1},
      {{2, 128, 256}, {1, 256, 96}, {2, 128, 96}},
      {{1, 64}, {64, 1}, {1, 1}},
      {{3, 0}, {0, 4}, {3, 4}}, // k = 0: zeros
      {{48, 64}, {64, 40}, {48, 40}, 0, 0, true},
      {{2, 48, 32}, {2, 40, 48}, {2, 32, 40}, 1, 1, true},
      {{2, 3, 32, 48}, {2, 1, 48, 40}, {2, 3, 32, 40}, 0, 0, true},
      {{2, 3, 32, 48}, {1, 1, 48, 40}, {2, 3, 32, 40}, 0, 0, true},
      {{2, 256, 128}, {2, 128, 64}, {2, 256, 64}, 0, 0, true}};
  for (const Matmul &m : cases) {
    Attrs attrs;
    if (m.ta || m.bf16)
      attrs["transpose_a"] = ia({m.ta});
    if (m.tb)
      attrs["transpose_b"] = ia({m.tb});
    bool k0 = numel(m.a) == 0;
    cs.add("matmul", {cs.f(m.a), cs.f(m.b)}, {R(kF32, m.r)}, attrs,
           m.bf16 ? "bf16" : "", /*junk=*/k0)
        .check = m.bf16 ? FloatCheck::Bf16 : FloatCheck::Near;
  }
  // A weight-only int8 base: per-row and per-group scales, both
  // transpositions; a bf16 weight widened.
  for (bool tb : {true, false}) {
    Attrs attrs{{"transpose_b", ia({tb})}};
    HostTensor q = HostTensor::zeros(DType::I8, {40, 48});
    HostTensor codes = cs.i(kI32, {40, 48}, -127, 127);
    for (int64_t i = 0; i < q.numElements(); ++i)
      q.data<int8_t>()[i] = static_cast<int8_t>(codes.data<int32_t>()[i]);
    Shape x = tb ? Shape{2, 16, 48} : Shape{2, 16, 40};
    Shape r = tb ? Shape{2, 16, 40} : Shape{2, 16, 48};
    cs.add("matmul_dequant", {cs.f(x), q, cs.f({40}, 0.001f, 0.02f)},
           {R(kF32, r)}, attrs, "", /*junk=*/true);
    cs.add("matmul_dequant", {cs.f(x), q, cs.f({40, 4}, 0.001f, 0.02f)},
           {R(kF32, r)}, attrs, "per group");
    HostTensor h = HostTensor::zeros(DType::BF16, {40, 48});
    HostTensor v = cs.f({40, 48});
    for (int64_t i = 0; i < h.numElements(); ++i)
      h.data<uint16_t>()[i] = floatToBf16(v.data<float>()[i]);
    cs.add("matmul_dequant", {cs.f(x), h}, {R(kF32, r)}, attrs, "bf16 weight");
  }
}

Shape reducedShape(const Shape &s, const std::vector<int64_t> &axes,
                   bool keep) {
  Shape r;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
    bool reduced = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (!reduced || keep)
      r.push_back(reduced ? 1 : s[d]);
  }
  return r;
}

void reduceCases(Cases &cs) {
  const std::vector<std::vector<int64_t>> axesSets = {
      {}, {0}, {1}, {2}, {0, 1}, {0, 2}, {1, 2}, {0, 1, 2}};
  struct Layout {
    Shape s;
    std::vector<int64_t> axes;
  };
  const std::vector<Layout> layouts = {
      {{3, 5000}, {1}},       {{5000, 3}, {0}},
      {{200, 40}, {1}},       {{2, 100000}, {1}},
      {{64, 8, 33}, {0, 2}},  {{2, 3, 4, 5, 6}, {0, 2, 4}},
      {{1, 7, 1, 5}, {0, 1}}, {{6, 1, 300}, {0, 1}},
      {{0, 3}, {0}},          {{3, 0}, {1}}};
  const Shape base = {4, 5, 6};
  for (std::string k : {"reduce_sum", "reduce_mean", "reduce_max", "reduce_min",
                        "reduce_prod"}) {
    bool prod = k == "reduce_prod", ints = k != "reduce_mean";
    for (size_t j = 0; j < axesSets.size(); ++j) {
      Attrs attrs = {{"axes", ia(axesSets[j])}};
      for (bool keep : {false, true}) {
        if (keep && j % 2 == 0)
          continue;
        cs.add(k, {cs.f(base, prod ? 0.5f : -2, prod ? 1.5f : 2)},
               {R(kF32, reducedShape(base, axesSets[j], keep))}, attrs,
               keep ? "keepdims" : "");
      }
      for (DType d : {kI32, kI64})
        if (ints)
          cs.add(k, {nonZero(cs.i(d, base, prod ? -3 : -50, prod ? 3 : 50))},
                 {R(d, reducedShape(base, axesSets[j], false))}, attrs);
    }
    for (size_t j = 0; j < layouts.size(); ++j) {
      const Layout &l = layouts[j];
      Attrs attrs = {{"axes", ia(l.axes)}};
      bool empty = numel(l.s) == 0;
      cs.add(k, {cs.f(l.s, prod ? 0.98f : -2, prod ? 1.02f : 2)},
             {R(kF32, reducedShape(l.s, l.axes, j % 2))}, attrs, "", empty);
      DType d = j % 2 ? kI32 : kI64;
      if (ints)
        cs.add(k, {nonZero(cs.i(d, l.s, prod ? -1 : -50, prod ? 1 : 50))},
               {R(d, reducedShape(l.s, l.axes, false))}, attrs, "", empty);
    }
    HostTensor x = cs.f({4, 6}, prod ? 0.5f : -2, prod ? 1.5f : 2);
    x.data<float>()[7] = kNaN;
    cs.add(k, {x}, {R(kF32, {4})}, {{"axes", ia({1})}}, "NaN");
    cs.add(k, {x}, {R(kF32, {6})}, {{"axes", ia({0})}}, "NaN");
    HostTensor big = cs.f({3, 100000}, prod ? 0.98f : -2, prod ? 1.02f : 2);
    big.data<float>()[177777] = kNaN;
    cs.add(k, {big}, {R(kF32, {3})}, {{"axes", ia({1})}}, "NaN");
  }
}

void softmaxCases(Cases &cs) {
  struct Softmax {
    Shape s;
    int64_t axis;
    float range;
  };
  const std::vector<Softmax> cases = {
      {{4, 5000}, 1, 10},     {{6, 37}, 1, 10},    {{5000}, 0, 10},
      {{2, 5000, 3}, 1, 10},  {{4, 5, 6}, 0, 10},  {{4, 5, 6}, 1, 10},
      {{3, 2000, 40}, 1, 10}, {{3, 300}, 1, 1000}, {{1, 1}, 1, 10}};
  // Rows: all -inf, half -inf, one +inf, one NaN.
  HostTensor masked = cs.f({4, 8}, -3, 3);
  for (int64_t j = 0; j < 8; ++j) {
    masked.data<float>()[j] = -kInf;
    if (j % 2)
      masked.data<float>()[8 + j] = -kInf;
  }
  masked.data<float>()[19] = kInf;
  masked.data<float>()[29] = kNaN;
  for (std::string k : {"softmax", "log_softmax"}) {
    for (const Softmax &c : cases)
      cs.add(k, {cs.f(c.s, -c.range, c.range)}, {R(kF32, c.s)},
             {{"axis", ia({c.axis})}});
    for (int64_t axis : {0, 1})
      cs.add(k, {masked}, {R(kF32, {4, 8})}, {{"axis", ia({axis})}}, "masked");
  }
}

void attentionCases(Cases &cs) {
  struct Shapes {
    int64_t b, h, hk, sq, sk, d, dv;
    Shape bias;
    bool causal;
  };
  // Across the CPU kernel's tiles (64 x 128) and the GPU's 128-key chunks;
  // grouped and single key heads; learned and padding biases.
  const std::vector<Shapes> cases = {
      {2, 4, 2, 70, 150, 24, 20, {1, 4, 70, 150}, true},
      {3, 2, 1, 130, 130, 16, 16, {3, 1, 1, 130}, false},
      {1, 3, 3, 200, 200, 8, 12, {}, true},
      {2, 2, 2, 5, 9, 64, 64, {}, false}};
  for (const Shapes &c : cases) {
    Attrs attrs{{"scale", fa(0.3)}, {"causal", ia({c.causal ? 1 : 0})}};
    HostTensor q = cs.f({c.b, c.h, c.sq, c.d}, -1, 1);
    HostTensor k = cs.f({c.b, c.hk, c.sk, c.d}, -1, 1);
    HostTensor v = cs.f({c.b, c.hk, c.sk, c.dv}, -1, 1);
    std::optional<HostTensor> bias;
    if (!c.bias.empty())
      bias = cs.f(c.bias, -2, 2);
    Shape out{c.b, c.h, c.sq, c.dv}, lse{c.b, c.h, c.sq};
    cs.add("attention", {q, k, v, bias}, {R(kF32, out), R(kF32, lse)}, attrs);
    // Any out and lse give a well-defined backward; lse above the scores'
    // range keeps the recomputed probabilities small.
    cs.add("attention_backward",
           {q, k, v, cs.f(out, -1, 1), cs.f(lse, 4, 6), cs.f(out, -1, 1), bias},
           {R(kF32, q.shape), R(kF32, k.shape), R(kF32, v.shape)}, attrs);
  }
}

void crossEntropyCases(Cases &cs) {
  // A GPT-2-sized vocabulary (odd, above the block's threads), the class
  // axis last and in the middle, i64 and i32 labels with ignored ones.
  struct Shapes {
    Shape x;
    int64_t axis;
  };
  for (const Shapes &c :
       {Shapes{{6, 50257}, 1}, Shapes{{2, 7, 3}, 1}, Shapes{{5, 10}, 1}}) {
    Shape kept = c.x, ids(c.x.size(), 1);
    kept[c.axis] = 1;
    ids[c.axis] = c.x[c.axis];
    int64_t rows = numel(kept), classes = c.x[c.axis];
    std::vector<int64_t> labels(rows), classIds(classes);
    for (int64_t r = 0; r < rows; ++r)
      labels[r] = r % 4 == 3 ? -100 : (r * 7919) % classes;
    for (int64_t k = 0; k < classes; ++k)
      classIds[k] = k;
    bool wide = classes > 100;
    HostTensor l =
        wide ? i64(kept, labels)
             : i32(kept, std::vector<int32_t>(labels.begin(), labels.end()));
    HostTensor id =
        wide ? i64(ids, classIds)
             : i32(ids, std::vector<int32_t>(classIds.begin(), classIds.end()));
    HostTensor x = cs.f(c.x, -8, 8), shift = cs.f(kept, 6, 8);
    Attrs attrs{{"axis", ia({c.axis})}};
    cs.add("cross_entropy", {x, l, id, shift}, {R(kF32, kept), R(kF32, kept)},
           attrs);
    cs.add("cross_entropy_backward",
           {x, l, id, shift, cs.f(kept, -1, 1), cs.f(kept, -1, 1)},
           {R(kF32, c.x)}, attrs);
  }
}

void normCases(Cases &cs) {
  auto attrs = [](int64_t axis, double eps) -> Attrs {
    return {{"axis", ia({axis})}, {"epsilon", fa(eps)}};
  };
  HostTensor x = cs.f({4, 6, 8}, 3, 7);
  Shape xs = x.shape;
  cs.add("layer_norm", {x, cs.f({8}), cs.f({8})},
         {R(kF32, xs), R(kF32, {4, 6, 1}), R(kF32, {4, 6, 1})}, attrs(2, 1e-5));
  cs.add("layer_norm", {x, cs.f({6, 8}), cs.f({6, 8})},
         {R(kF32, xs), R(kF32, {4}), R(kF32, {4})}, attrs(1, 1e-5));
  cs.add("layer_norm", {x}, {R(kF32, xs)}, attrs(2, 1e-5));
  cs.add("layer_norm", {x, cs.f({8})}, {R(kF32, xs), R(kF32, {24})},
         attrs(2, 1e-3));
  cs.add("layer_norm", {x, std::nullopt, cs.f({8})},
         {R(kF32, xs), std::nullopt, R(kF32, {4, 6, 1})}, attrs(2, 1e-5));
  cs.add("layer_norm", {x, std::nullopt, std::nullopt},
         {R(kF32, xs), R(kF32, {4, 6}), std::nullopt}, attrs(2, 1e-5));
  cs.add("layer_norm", {cs.f({3, 5000}, -1, 3), cs.f({5000}), cs.f({5000})},
         {R(kF32, {3, 5000}), R(kF32, {3, 1}), R(kF32, {3, 1})},
         attrs(1, 1e-6));
  cs.add("layer_norm", {cs.f({2, 3, 4, 1000}), cs.f({1000}), cs.f({1000})},
         {R(kF32, {2, 3, 4, 1000}), R(kF32, {24}), R(kF32, {24})},
         attrs(3, 1e-5));
  cs.add("layer_norm", {cs.f({2, 3, 4, 5})},
         {R(kF32, {2, 3, 4, 5}), R(kF32, {1}), R(kF32, {1})}, attrs(0, 1e-5));
  HostTensor flat = HostTensor::zeros(kF32, {3, 16});
  for (int64_t i = 0; i < 48; ++i)
    flat.data<float>()[i] = 0.5f * static_cast<float>(i / 16);
  cs.add("layer_norm", {flat}, {R(kF32, {3, 16}), R(kF32, {3}), R(kF32, {3})},
         attrs(1, 1e-5), "constant rows");
  // layer_norm_backward: f32 and bf16 input and gradient, with and
  // without a scale, warp rows and block rows.
  auto bf16 = [&](HostTensor v) {
    HostTensor h = HostTensor::zeros(DType::BF16, v.shape);
    for (int64_t i = 0; i < h.numElements(); ++i)
      h.data<uint16_t>()[i] = floatToBf16(v.data<float>()[i]);
    return h;
  };
  Attrs lnAxis{{"axis", ia({2})}};
  HostTensor mean = cs.f({4, 6, 1}), inv = cs.f({4, 6, 1}, 0.5f, 2);
  cs.add("layer_norm_backward", {x, mean, inv, cs.f(xs), cs.f({8})},
         {R(kF32, xs), R(kF32, {8}), R(kF32, {8})}, lnAxis);
  cs.add("layer_norm_backward", {x, mean, inv, cs.f(xs)},
         {R(kF32, xs), R(kF32, {8}), R(kF32, {8})}, lnAxis, "no scale");
  cs.add("layer_norm_backward", {bf16(x), mean, inv, bf16(cs.f(xs)), cs.f({8})},
         {R(kF32, xs), R(kF32, {8}), R(kF32, {8})}, lnAxis, "bf16");
  cs.add("layer_norm_backward",
         {cs.f({3, 5000}), cs.f({3, 1}), cs.f({3, 1}, 0.5f, 2), cs.f({3, 5000}),
          cs.f({5000})},
         {R(kF32, {3, 5000}), R(kF32, {5000}), R(kF32, {5000})},
         {{"axis", ia({1})}}, "block rows");
  for (Shape s : {Shape{2, 3, 4, 5}, Shape{2, 3}, Shape{2, 4, 32, 32}}) {
    int64_t c = s[1];
    cs.add("batch_norm",
           {cs.f(s), cs.f({c}), cs.f({c}), cs.f({c}), cs.f({c}, 0.5f, 2)},
           {R(kF32, s)}, {{"epsilon", fa(1e-5)}});
  }
}

void shapeCases(Cases &cs) {
  auto perm = [](std::vector<int64_t> p) { return Attrs{{"perm", ia(p)}}; };
  for (DType d : {kF32, kI32, kI64, kBool}) {
    cs.move("transpose", {cs.any(d, {2, 3, 4})}, {R(d, {4, 2, 3})},
            perm({2, 0, 1}));
    cs.move("broadcast", {cs.any(d, {3, 1, 5})}, {R(d, {3, 4, 5})});
  }
  cs.move("transpose", {cs.f({2, 3, 4})}, {R(kF32, {3, 2, 4})},
          perm({1, 0, 2}));
  cs.move("transpose", {cs.f({2, 3, 4})}, {R(kF32, {2, 4, 3})},
          perm({0, 2, 1}));
  cs.move("transpose", {cs.f({64, 48})}, {R(kF32, {48, 64})}, perm({1, 0}));
  cs.move("transpose", {cs.i(kI64, {2, 3, 1, 4, 5})},
          {R(kI64, {5, 1, 2, 4, 3})}, perm({4, 2, 0, 3, 1}));
  cs.move("transpose", {cs.f({3, 4})}, {R(kF32, {3, 4})}, perm({0, 1}));
  cs.move("broadcast", {cs.f({1, 1})}, {R(kF32, {6, 7})});
  cs.move("broadcast", {cs.f({4, 1})}, {R(kF32, {4, 1000})});
  cs.move("broadcast", {cs.f({1, 300})}, {R(kF32, {50, 300})});
  cs.move("broadcast", {cs.i(kI64, {1})}, {R(kI64, {9})});

  auto axis = [](int64_t a) { return Attrs{{"axis", ia({a})}}; };
  cs.move("concat", {cs.f({2, 3, 4}), cs.f({2, 1, 4}), cs.f({2, 5, 4})},
          {R(kF32, {2, 9, 4})}, axis(1));
  cs.move("concat", {cs.i(kI64, {1, 3}), cs.i(kI64, {4, 3})}, {R(kI64, {5, 3})},
          axis(0));
  cs.move("concat", {cs.b({2, 2, 1}), cs.b({2, 2, 3})}, {R(kBool, {2, 2, 4})},
          axis(2));
  cs.move("concat", {cs.f({2, 0, 4}), cs.f({2, 3, 4})}, {R(kF32, {2, 3, 4})},
          axis(1));
  cs.move("concat", {cs.f({3, 4})}, {R(kF32, {3, 4})}, axis(0));
  cs.move("concat",
          {cs.i(kI32, {1, 2}), cs.i(kI32, {2, 2}), cs.i(kI32, {3, 2}),
           cs.i(kI32, {1, 2}), cs.i(kI32, {2, 2})},
          {R(kI32, {9, 2})}, axis(0));

  auto window = [](std::vector<int64_t> starts, std::vector<int64_t> steps) {
    Attrs a = {{"starts", ia(std::move(starts))}};
    if (!steps.empty())
      a["steps"] = ia(std::move(steps));
    return a;
  };
  cs.move("slice", {cs.f({6, 7, 8})}, {R(kF32, {3, 7, 8})},
          window({1, 0, 7}, {2, 1, -1}));
  cs.move("slice", {cs.i(kI64, {10})}, {R(kI64, {4})}, window({9}, {-3}));
  cs.move("slice", {cs.b({5, 6})}, {R(kBool, {5, 3})},
          window({4, 5}, {-1, -2}));
  cs.move("slice", {cs.i(kI32, {8, 9})}, {R(kI32, {4, 5})}, window({2, 3}, {}));
  cs.move("slice", {cs.f({4, 100})}, {R(kF32, {2, 15})},
          window({0, 99}, {3, -7}));
  cs.move("slice", {cs.f({4, 3})}, {R(kF32, {0, 3})}, window({0, 0}, {1, 1}),
          "empty");
  cs.move("slice_scatter", {cs.f({3, 7})}, {R(kF32, {6, 7})},
          window({1, 0}, {2, 1}), "", true);
  cs.move("slice_scatter", {cs.i(kI64, {4})}, {R(kI64, {8})}, window({7}, {-2}),
          "", true);
  cs.move("slice_scatter", {cs.b({2, 3})}, {R(kBool, {4, 6})},
          window({3, 5}, {-2, -2}), "", true);
  cs.move("slice_scatter", {cs.f({4, 5})}, {R(kF32, {4, 5})},
          window({3, 0}, {-1, 1}), "covers the result", true);
  cs.move("slice_scatter", {cs.i(kI32, {2, 2})}, {R(kI32, {5, 5})},
          window({0, 1}, {}));

  auto gatherAttrs = [](int64_t a, bool shard) {
    Attrs attrs = {{"axis", ia({a})}};
    if (shard)
      attrs["shard_axes"] = ia({0});
    return attrs;
  };
  HostTensor idx3 = i64({3}, {4, -1, 0});
  cs.move("gather", {cs.f({5, 4}), idx3}, {R(kF32, {3, 4})}, gatherAttrs(0, 0));
  cs.move("gather", {cs.f({5, 4}), idx3}, {R(kF32, {3, 4})}, gatherAttrs(0, 1),
          "one-member shard group");
  cs.move("gather", {cs.f({3, 6}), i32({2, 3}, {0, 5, -6, 2, 2, 1})},
          {R(kF32, {3, 2, 3})}, gatherAttrs(1, 0));
  cs.move("gather", {cs.i(kI64, {2, 5, 3}), i64({4}, {1, 1, 4, -5})},
          {R(kI64, {2, 4, 3})}, gatherAttrs(1, 0));
  cs.move("gather", {cs.b({6, 2}), i32({5}, {5, 0, -1, 3, 3})},
          {R(kBool, {5, 2})}, gatherAttrs(0, 0));
  cs.move("gather", {cs.f({1000, 64}), cs.i(kI64, {512}, -1000, 999)},
          {R(kF32, {512, 64})}, gatherAttrs(0, 0));
  cs.add("gather", {cs.f({5, 4}), i64({4}, {0, 1, 5, 2})}, {R(kF32, {4, 4})},
         gatherAttrs(0, 0), "index 5 of 5")
      .error = "out of range";
  cs.add("gather", {cs.f({3, 5}), i32({2}, {-6, 0})}, {R(kF32, {3, 2})},
         gatherAttrs(1, 0), "index -6 of 5")
      .error = "out of range";

  Attrs labels3 = {{"bound", ia({3})}, {"ignore", ia({-100})}};
  cs.add("check_index", {i64({5}, {0, 1, 2, -100, 1})}, {R(kI64, {5})},
         labels3);
  cs.add("check_index", {i32({2, 2}, {0, 1, 2, 0})}, {R(kI32, {2, 2})},
         {{"bound", ia({3})}});
  cs.add("check_index", {i64({3}, {0, 3, 1})}, {R(kI64, {3})}, labels3,
         "label 3 of 3")
      .error = "out of range";
  cs.add("check_index", {i32({2}, {-100, 0})}, {R(kI32, {2})},
         {{"bound", ia({3})}}, "-100 not ignored")
      .error = "out of range";

  cs.add("scatter_add", {cs.f({3, 4}), i64({3}, {1, -1, 1})}, {R(kF32, {5, 4})},
         gatherAttrs(0, 0), "", true);
  cs.add("scatter_add", {cs.f({3, 4}), i64({3}, {1, -1, 1})}, {R(kF32, {5, 4})},
         gatherAttrs(0, 1), "one-member shard group", true);
  cs.add("scatter_add",
         {cs.f({2, 2, 4, 3}), i32({2, 4}, {0, 5, -1, 2, 2, 2, -6, 3})},
         {R(kF32, {2, 6, 3})}, gatherAttrs(1, 0));
  cs.add("scatter_add", {cs.f({1000, 32}), cs.i(kI64, {1000}, -100, 99)},
         {R(kF32, {100, 32})}, gatherAttrs(0, 0), "", true);
  cs.add("scatter_add", {cs.f({2, 4}), i64({2}, {0, 7})}, {R(kF32, {5, 4})},
         gatherAttrs(0, 0), "index 7 of 5")
      .error = "out of range";
  cs.add("div", {i32({4}, {1, 2, 3, 4}), i32({4}, {1, 0, 1, 1})},
         {R(kI32, {4})}, {}, "zero divisor")
      .error = "division by zero";
  cs.add("div", {i64({2, 2}, {1, 2, 3, 4}), i64({1, 2}, {3, 0})},
         {R(kI64, {2, 2})}, {}, "zero divisor")
      .error = "division by zero";
}

/// The window attrs of conv2d and the pools.
struct Window {
  std::vector<int64_t> strides = {1, 1}, pads = {0, 0, 0, 0},
                       dilations = {1, 1};
  int64_t groups = 1;

  /// Output extent along spatial dim \p d of \p k taps over \p size.
  int64_t out(int d, int64_t size, int64_t k) const {
    int64_t span = size + pads[d] + pads[d + 2] - dilations[d] * (k - 1) - 1;
    return span < 0 ? 0 : span / strides[d] + 1;
  }
  /// Default values are left out (the kernels' defaults), but for strides
  /// when \p withStrides (the pools require them).
  Attrs attrs(bool withStrides) const {
    Attrs a;
    if (withStrides || strides != std::vector<int64_t>{1, 1})
      a["strides"] = ia(strides);
    if (pads != std::vector<int64_t>(4, 0))
      a["pads"] = ia(pads);
    if (dilations != std::vector<int64_t>{1, 1})
      a["dilations"] = ia(dilations);
    if (groups != 1)
      a["groups"] = ia({groups});
    return a;
  }
};

void convCases(Cases &cs) {
  struct Conv {
    Shape x, w;
    Window win;
  };
  const std::vector<Conv> convs = {
      {{2, 3, 8, 8}, {4, 3, 3, 3}, {}},
      {{2, 3, 8, 8}, {4, 3, 3, 3}, {{2, 2}, {1, 1, 1, 1}}},
      {{1, 3, 9, 7}, {5, 3, 3, 2}, {{2, 1}, {1, 2, 0, 1}}},
      {{2, 2, 10, 10}, {3, 2, 3, 3}, {{1, 1}, {2, 2, 2, 2}, {2, 2}}},
      {{2, 3, 7, 7}, {6, 1, 3, 3}, {{1, 1}, {1, 1, 1, 1}, {1, 1}, 3}},
      {{1, 4, 9, 6}, {6, 2, 2, 3}, {{2, 2}, {0, 1, 1, 0}, {1, 2}, 2}},
      {{2, 8, 5, 5}, {16, 8, 1, 1}, {}},
      {{1, 2, 9, 9}, {3, 2, 2, 2}, {{3, 3}}},
      {{4, 16, 32, 32}, {32, 16, 3, 3}, {{1, 1}, {1, 1, 1, 1}}}};
  for (const Conv &c : convs) {
    Shape y = {c.x[0], c.w[0], c.win.out(0, c.x[2], c.w[2]),
               c.win.out(1, c.x[3], c.w[3])};
    Attrs attrs = c.win.attrs(false);
    HostTensor x = cs.f(c.x), w = cs.f(c.w);
    cs.add("conv2d", {x, w}, {R(kF32, y)}, attrs);
    cs.add("conv2d", {x, w, cs.f({c.w[0]})}, {R(kF32, y)}, attrs, "bias");
    cs.add("conv2d_backward_input", {cs.f(y), w}, {R(kF32, c.x)}, attrs, "",
           true);
    cs.add("conv2d_backward_filter", {x, cs.f(y)}, {R(kF32, c.w)}, attrs, "",
           true);
  }
  struct Pool {
    Shape x, kernel;
    Window win;
    int64_t extra = 0; // added to OH and OW: ceil-mode output sizes
  };
  const std::vector<Pool> pools = {
      {{2, 3, 9, 9}, {3, 3}, {{2, 2}}},
      {{2, 3, 9, 9}, {3, 3}, {{2, 2}, {1, 1, 1, 1}}},
      {{1, 2, 8, 8}, {2, 2}, {{1, 1}, {0, 0, 0, 0}, {2, 2}}},
      {{1, 2, 10, 10}, {3, 3}, {{2, 2}}, 1},
      {{2, 2, 7, 9}, {2, 3}, {{1, 2}, {0, 1, 1, 0}}},
      {{1, 2, 8, 8}, {2, 2}, {{3, 3}}},
      {{2, 16, 32, 32}, {2, 2}, {{2, 2}}}};
  for (const Pool &p : pools) {
    Shape y = {p.x[0], p.x[1], p.win.out(0, p.x[2], p.kernel[0]) + p.extra,
               p.win.out(1, p.x[3], p.kernel[1]) + p.extra};
    std::string note = p.extra ? "ceil mode" : "";
    Attrs attrs = p.win.attrs(true);
    attrs["kernel"] = ia(p.kernel);
    HostTensor x = cs.f(p.x);
    cs.add("max_pool2d", {x}, {R(kF32, y)}, attrs, note);
    cs.add("max_pool2d_backward", {x, cs.f(y)}, {R(kF32, p.x)}, attrs, note,
           true);
    for (int64_t include : {0, 1}) {
      Attrs a = attrs;
      a["count_include_pad"] = ia({include});
      cs.add("avg_pool2d", {x}, {R(kF32, y)}, a, note);
      cs.add("avg_pool2d_backward", {cs.f(y)}, {R(kF32, p.x)}, a, note, true);
    }
  }
  // Ties: the gradient goes to the first maximum of each window.
  Attrs tie = Window().attrs(true);
  tie["kernel"] = ia({3, 3});
  cs.add("max_pool2d_backward",
         {toF32(cs.i(kI32, {2, 2, 6, 6}, 0, 2), 1.0f), cs.f({2, 2, 4, 4})},
         {R(kF32, {2, 2, 6, 6})}, tie, "ties", true);
  cs.add("avg_pool2d", {cs.f({1, 1, 5, 5})}, {R(kF32, {1, 1, 2, 2})},
         {{"kernel", ia({3, 3})}, {"strides", ia({2, 2})}}, "default divisor");
}

void randomAndCollectiveCases(Cases &cs) {
  auto rng = [](int64_t seed, int64_t stream) {
    return Attrs{{"seed", ia({seed})}, {"stream", ia({stream})}};
  };
  cs.move("random_uniform", {i64({}, {0})}, {R(kF32, {1000})}, rng(1234, 0));
  cs.move("random_uniform", {i64({}, {123456789012})}, {R(kF32, {3, 5, 7})},
          rng(0x123456789ABCDEF, 7));
  cs.move("random_uniform", {i64({}, {-1})}, {R(kF32, {100003})},
          rng(-5, 0x1FFFFFFFF));
  cs.move("random_uniform", {i64({}, {9})}, {R(kF32, {})}, rng(3, 1));
  Attrs shard = rng(77, 2);
  shard["offsets"] = ia({2, 5});
  shard["global_shape"] = ia({8, 16});
  cs.move("random_uniform", {i64({}, {4})}, {R(kF32, {3, 4})}, shard, "shard");
  shard["offsets"] = ia({1, 3, 0});
  shard["global_shape"] = ia({4, 13, 6});
  cs.move("random_uniform", {i64({}, {4})}, {R(kF32, {3, 10, 6})}, shard,
          "shard");

  auto coll = [](std::vector<int64_t> axes, std::optional<int64_t> dim,
                 std::string extra = "", int64_t value = 0) {
    Attrs a = {{"axes", ia(std::move(axes))}};
    if (dim)
      a["dim"] = ia({*dim});
    if (!extra.empty())
      a[extra] = ia({value});
    return a;
  };
  cs.move("all_reduce", {cs.f({2, 3})}, {R(kF32, {2, 3})}, coll({0}, {}));
  cs.move("all_reduce", {cs.i(kI32, {5})}, {R(kI32, {5})}, coll({}, {}));
  cs.move("all_reduce", {cs.i(kI64, {4})}, {R(kI64, {4})},
          coll({0}, {}, "reduction", 1));
  cs.move("all_reduce", {cs.f({7})}, {R(kF32, {7})},
          coll({0}, {}, "reduction", 2));
  cs.move("all_reduce", {cs.b({6})}, {R(kBool, {6})},
          coll({0}, {}, "reduction", 1));
  cs.move("all_gather", {cs.f({2, 3})}, {R(kF32, {2, 3})}, coll({0}, 1));
  cs.move("all_gather", {cs.i(kI64, {4, 2})}, {R(kI64, {4, 2})},
          coll({0}, 0, "blocks", 2));
  cs.move("all_gather", {cs.b({3})}, {R(kBool, {3})}, coll({}, 0));
  cs.move("all_gather", {cs.f({2, 6})}, {R(kF32, {2, 6})},
          coll({0}, 1, "blocks", 3));
  cs.move("reduce_scatter", {cs.f({4, 3})}, {R(kF32, {4, 3})}, coll({0}, 0));
  cs.move("reduce_scatter", {cs.i(kI64, {2, 6})}, {R(kI64, {2, 6})},
          coll({0}, 1));
  cs.move("reduce_scatter", {cs.i(kI32, {5})}, {R(kI32, {5})}, coll({}, 0));
  Attrs a2a = coll({0}, {}, "split_dim", 0);
  a2a["concat_dim"] = ia({1});
  cs.move("all_to_all", {cs.f({4, 6})}, {R(kF32, {4, 6})}, a2a);
  cs.move("shard_slice", {cs.f({4, 6})}, {R(kF32, {4, 6})},
          coll({0}, 1, "blocks", 2));
  cs.move("shard_slice", {cs.b({4})}, {R(kBool, {4})}, coll({0}, 0));
  cs.move("shard_slice", {cs.i(kI32, {2, 3})}, {R(kI32, {2, 3})}, coll({}, 0));
}

const std::vector<Case> &allCases() {
  static const std::vector<Case> cases = [] {
    Cases cs;
    elementwiseCases(cs);
    castCases(cs);
    matmulCases(cs);
    reduceCases(cs);
    softmaxCases(cs);
    normCases(cs);
    attentionCases(cs);
    crossEntropyCases(cs);
    shapeCases(cs);
    convCases(cs);
    randomAndCollectiveCases(cs);
    return std::move(cs.all);
  }();
  return cases;
}

std::vector<std::string> kernelNames() {
  return {
#define CLEAVE_KERNEL(NAME) #NAME,
#include "plan/kernels.def"
  };
}

//===----------------------------------------------------------------------===//
// Running and comparing
//===----------------------------------------------------------------------===//

std::string element(const HostTensor &t, int64_t i) {
  std::ostringstream os;
  if (t.dtype == kF32)
    os << std::setprecision(9) << t.data<float>()[i];
  else if (t.dtype == kI32)
    os << t.data<int32_t>()[i];
  else if (t.dtype == kI64)
    os << t.data<int64_t>()[i];
  else
    os << int(t.data<uint8_t>()[i]);
  return os.str();
}

/// Empty when \p actual (CUDA) matches \p expected (CPU); else the first
/// differing elements.
std::string mismatch(const HostTensor &actual, const HostTensor &expected,
                     FloatCheck check) {
  if (actual.dtype != expected.dtype || actual.shape != expected.shape ||
      actual.bytes.size() != expected.bytes.size())
    return "got " + str(actual) + ", expected " + str(expected);
  int64_t n = expected.numElements();
  bool isFloat = expected.dtype == kF32;
  // Bf16: an element's tolerance is 2e-2 of its row's largest |value|.
  int64_t row =
      expected.shape.empty() ? 1 : std::max<int64_t>(1, expected.shape.back());
  std::vector<double> rowMax;
  if (isFloat && check == FloatCheck::Bf16) {
    rowMax.assign(n / row + 1, 0.0);
    for (int64_t i = 0; i < n; ++i)
      rowMax[i / row] = std::max(rowMax[i / row],
                                 std::fabs(double(expected.data<float>()[i])));
  }
  size_t width = dtypeSize(expected.dtype);
  int64_t bad = 0;
  std::ostringstream os;
  for (int64_t i = 0; i < n; ++i) {
    bool ok;
    if (!isFloat) {
      ok = std::memcmp(&actual.bytes[i * width], &expected.bytes[i * width],
                       width) == 0;
    } else {
      float a = actual.data<float>()[i], e = expected.data<float>()[i];
      if (std::isnan(a) || std::isnan(e))
        ok = std::isnan(a) && std::isnan(e);
      else if (check == FloatCheck::Exact)
        ok = std::memcmp(&a, &e, sizeof(float)) == 0;
      else if (a == e)
        ok = true;
      else if (!std::isfinite(a) || !std::isfinite(e))
        ok = false;
      else if (check == FloatCheck::Bf16)
        ok = std::fabs(double(a) - e) <= 2e-2 * rowMax[i / row];
      else
        ok = std::fabs(double(a) - e) <=
             1e-4 * std::max(1.0, std::fabs(double(e)));
    }
    if (ok || bad++ >= 5)
      continue;
    os << " at [";
    std::vector<int64_t> idx = unravel(i, expected.shape);
    for (size_t d = 0; d < idx.size(); ++d)
      os << (d ? "," : "") << idx[d];
    os << "] " << element(actual, i) << " (CPU " << element(expected, i) << ")";
  }
  if (!bad)
    return "";
  return std::to_string(bad) + " of " + std::to_string(n) +
         " elements differ:" + os.str() + (bad > 5 ? " ..." : "");
}

using Runs = std::vector<std::vector<HostTensor>>;

/// Loads \p c on one backend, sets \p inputs and runs \p runs times, keeping
/// every run's outputs.
Status runCase(const Case &c, const std::vector<HostTensor> &inputs,
               const BackendOptions &options, int runs, Runs *outputs) {
  std::unique_ptr<StepRunner> runner;
  if (Status s = createRunner(c.program, nullptr, options, &runner); !s)
    return Status::error("load: " + s.message());
  for (size_t i = 0; i < inputs.size(); ++i)
    if (Status s = runner->setInput(i, inputs[i]); !s)
      return Status::error("setInput: " + s.message());
  for (int r = 1; r <= runs; ++r) {
    if (Status s = runner->run(); !s)
      return Status::error("run " + std::to_string(r) + ": " + s.message());
    std::vector<HostTensor> outs(c.program.outputs_size());
    for (size_t o = 0; o < outs.size(); ++o)
      if (Status s = runner->getOutput(o, &outs[o]); !s)
        return Status::error("getOutput: " + s.message());
    outputs->push_back(std::move(outs));
  }
  return Status::ok();
}

/// Every one of \p runs runs of error case \p c fails on \p backend, with
/// c.error in the message.
void expectFailure(const Case &c, Backend backend, int runs) {
  std::string who = c.name + ": " + backendName(backend);
  std::unique_ptr<StepRunner> runner;
  Status s =
      createRunner(c.program, nullptr, {backend, Precision::F32}, &runner);
  ASSERT_TRUE(s) << who << " load: " << s.message();
  for (size_t i = 0; i < c.inputs.size(); ++i)
    ASSERT_TRUE(runner->setInput(i, c.inputs[i])) << who;
  for (int r = 1; r <= runs; ++r) {
    s = runner->run();
    EXPECT_FALSE(s) << who << " run " << r << " succeeded; expected '"
                    << c.error << "'";
    if (!s) {
      EXPECT_NE(s.message().find(c.error), std::string::npos)
          << who << " run " << r << ": expected '" << c.error
          << "' in: " << s.message();
    }
  }
}

void expectCudaMatchesCpu(const Case &c) {
  if (!c.error.empty()) {
    expectFailure(c, Backend::Cpu, 1);
    expectFailure(c, Backend::Cuda, 2);
    return;
  }
  Runs cpu, cuda;
  Status s = runCase(c, c.inputs, {Backend::Cpu, Precision::F32}, 1, &cpu);
  ASSERT_TRUE(s) << c.name << ": CPU " << s.message();
  Precision p = c.check == FloatCheck::Bf16 ? Precision::BF16 : Precision::F32;
  // The second run replays the CUDA graph captured from the first.
  s = runCase(c, c.inputs, {Backend::Cuda, p}, 2, &cuda);
  ASSERT_TRUE(s) << c.name << ": CUDA " << s.message();
  for (size_t r = 0; r < cuda.size(); ++r)
    for (size_t o = 0; o < cpu[0].size(); ++o) {
      std::string m = mismatch(cuda[r][o], cpu[0][o], c.check);
      if (!m.empty())
        ADD_FAILURE() << c.name << ": output " << o << ", CUDA run " << r + 1
                      << (r ? " (graph)" : " (eager)") << ": " << m;
    }
}

float roundToBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u; // to nearest, ties even
  std::memcpy(&x, &u, sizeof(u));
  return x;
}

//===----------------------------------------------------------------------===//
// Tests
//===----------------------------------------------------------------------===//

// Runs without a GPU: a kernel added to kernels.def needs a case here.
TEST(CudaBackend, EveryKernelHasACase) {
  std::vector<std::string> names = kernelNames();
  for (const std::string &k : names) {
    size_t n =
        std::count_if(allCases().begin(), allCases().end(), [&](const Case &c) {
          return c.kernel == k && c.error.empty();
        });
    EXPECT_GT(n, 0u) << "kernel '" << k
                     << "' has no case in cuda_backend_test.cpp";
  }
  for (const Case &c : allCases())
    EXPECT_NE(std::find(names.begin(), names.end(), c.kernel), names.end())
        << c.name << ": not a kernel of kernels.def";
}

// Runs without a GPU: every case is a valid program that the CPU runs (or
// fails as the case expects), and the bf16 tolerance holds for operands
// rounded to bf16 on the CPU.
TEST(CudaBackend, CasesRunOnTheCpu) {
  for (const Case &c : allCases()) {
    if (!c.error.empty()) {
      expectFailure(c, Backend::Cpu, 2);
      continue;
    }
    Runs out;
    Status s = runCase(c, c.inputs, {Backend::Cpu, Precision::F32}, 1, &out);
    EXPECT_TRUE(s) << c.name << ": " << s.message();
    if (!s || c.check != FloatCheck::Bf16)
      continue;
    std::vector<HostTensor> rounded = c.inputs;
    for (HostTensor &t : rounded)
      for (int64_t i = 0; t.dtype == kF32 && i < t.numElements(); ++i)
        t.data<float>()[i] = roundToBf16(t.data<float>()[i]);
    Runs emulated;
    s = runCase(c, rounded, {Backend::Cpu, Precision::F32}, 1, &emulated);
    ASSERT_TRUE(s) << c.name << ": " << s.message();
    std::string m = mismatch(emulated[0][0], out[0][0], FloatCheck::Bf16);
    if (!m.empty())
      ADD_FAILURE() << c.name
                    << ": bf16-rounded operands miss the tolerance: " << m;
  }
}

class CudaKernel : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaKernel, MatchesCpu) {
  std::string why = cudaUnavailableReason();
  if (!why.empty())
    GTEST_SKIP() << "no CUDA GPU: " << why;
  for (const Case &c : allCases())
    if (c.kernel == GetParam())
      expectCudaMatchesCpu(c);
}

INSTANTIATE_TEST_SUITE_P(CudaBackend, CudaKernel,
                         ::testing::ValuesIn(kernelNames()),
                         [](const ::testing::TestParamInfo<std::string> &info) {
                           return info.param;
                         });

/// A small training step: w and step are carried from run to run.
/// Outputs: w_next, step_next, loss, t.
plan::Program trainingStep() {
  ProgramBuilder b;
  int w = b.input("w", kF32, {8, 16});
  int step = b.input("step", kI64, {});
  int x = b.input("x", kF32, {4, 8});
  auto emit = [&](const std::string &kernel, std::vector<int> operands,
                  DType dtype, Shape shape, Attrs attrs = {}) {
    int r = b.arena(dtype, shape);
    b.instruction(kernel, operands, {r}, attrs);
    return r;
  };
  int h = emit("matmul", {x, w}, kF32, {4, 16});
  int noise = emit("random_uniform", {step}, kF32, {4, 16},
                   {{"seed", ia({42})}, {"stream", ia({1})}});
  int t = emit("tanh", {emit("add", {h, noise}, kF32, {4, 16})}, kF32, {4, 16});
  int gw = emit("matmul", {x, t}, kF32, {8, 16}, {{"transpose_a", ia({1})}});
  int sum = emit("all_reduce", {gw}, kF32, {8, 16}, {{"axes", ia({0})}});
  int lr = emit("fill", {}, kF32, {1, 1}, {{"value", fa(0.05)}});
  int wNext =
      emit("sub", {w, emit("mul", {sum, lr}, kF32, {8, 16})}, kF32, {8, 16});
  int one = emit("fill", {}, kI64, {}, {{"value", ia({1})}});
  int stepNext = emit("add", {step, one}, kI64, {});
  int loss = emit("reduce_sum", {t}, kF32, {}, {{"axes", ia({0, 1})}});
  b.output(wNext, "w_next");
  b.output(stepNext, "step_next");
  b.output(loss, "loss");
  b.output(t, "t");
  return b.program;
}

/// Three runs of trainingStep(), x changing before the third; after each
/// run, the outputs and then the carried inputs w and step.
Status driveTrainingStep(Backend backend, Runs *seen) {
  std::unique_ptr<StepRunner> runner;
  if (Status s = createRunner(trainingStep(), nullptr,
                              {backend, Precision::F32}, &runner);
      !s)
    return s;
  for (size_t i : {0, 1})
    if (Status s = runner->carry(i, i); !s)
      return s;
  std::vector<HostTensor> inputs = {randomF32({8, 16}, 901), i64({}, {5}),
                                    randomF32({4, 8}, 902)};
  for (size_t i = 0; i < inputs.size(); ++i)
    if (Status s = runner->setInput(i, inputs[i]); !s)
      return s;
  for (int r = 0; r < 3; ++r) {
    if (r == 2)
      if (Status s = runner->setInput(2, randomF32({4, 8}, 903)); !s)
        return s;
    if (Status s = runner->run(); !s)
      return Status::error("run " + std::to_string(r + 1) + ": " + s.message());
    std::vector<HostTensor> outs(6);
    for (size_t o = 0; o < 4; ++o)
      if (Status s = runner->getOutput(o, &outs[o]); !s)
        return s;
    for (size_t i = 0; i < 2; ++i)
      if (Status s = runner->getInput(i, &outs[4 + i]); !s)
        return s;
    seen->push_back(std::move(outs));
  }
  return Status::ok();
}

TEST(CudaBackend, GraphReplayWithCarry) {
  Runs cpu;
  Status s = driveTrainingStep(Backend::Cpu, &cpu);
  ASSERT_TRUE(s) << "CPU: " << s.message();
  ASSERT_EQ(cpu.size(), 3u);
  EXPECT_EQ(values<int64_t>(cpu[2][1]), std::vector<int64_t>{8});
  EXPECT_EQ(values<int64_t>(cpu[2][5]), std::vector<int64_t>{8});
  std::string why = cudaUnavailableReason();
  if (!why.empty())
    GTEST_SKIP() << "no CUDA GPU: " << why;
  Runs cuda;
  s = driveTrainingStep(Backend::Cuda, &cuda);
  ASSERT_TRUE(s) << "CUDA: " << s.message();
  const char *names[] = {"w_next", "step_next", "loss",
                         "t",      "input w",   "input step"};
  for (size_t r = 0; r < cuda.size(); ++r)
    for (size_t o = 0; o < cuda[r].size(); ++o) {
      std::string m = mismatch(cuda[r][o], cpu[r][o], FloatCheck::Near);
      if (!m.empty())
        ADD_FAILURE() << names[o] << " after run " << r + 1 << ": " << m;
    }
}

} // namespace

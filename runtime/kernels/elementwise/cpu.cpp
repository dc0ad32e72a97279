//===- cpu.cpp - Elementwise, comparison and logical kernels --------------===//
//
// Same-shape operands take a flat loop the compiler can vectorise; broadcast
// operands go through StridedLoop, whose coalesced inner dim usually has unit
// or zero strides, which get their own loops.
//
//===----------------------------------------------------------------------===//

#include "core/fused_ops.h"
#include "core/int_arith.h"
#include "core/kernel_math.h"
#include "cpu/cpu_kernel.h"

#include <cmath>
#include <limits>
#include <type_traits>

namespace cleave::rt {
namespace {

struct ElementwiseGeometry {
  /// Every operand has the result's shape.
  bool contiguous = true;
  int64_t numElements = 0;
  StridedLoop loop;
};

ElementwiseGeometry makePlan(const TensorType &result,
                             const std::vector<const TensorType *> &operands) {
  ElementwiseGeometry plan;
  plan.numElements = result.numElements();
  std::vector<std::vector<int64_t>> strides;
  for (const TensorType *op : operands) {
    plan.contiguous &= op->shape == result.shape;
    strides.push_back(broadcastStrides(op->shape, result.shape));
  }
  if (!plan.contiguous)
    plan.loop = StridedLoop::build(result.shape, strides);
  return plan;
}

template <typename Out, typename A, typename F>
void unaryLoop(int64_t n, const A *a, Out *out, F f) {
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i)
    out[i] = f(a[i]);
}

template <typename Out, typename A, typename B, typename F>
void binaryLoop(const ElementwiseGeometry &plan, const A *a, const B *b,
                Out *out, F f) {
  if (plan.contiguous) {
    int64_t n = plan.numElements;
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
    for (int64_t i = 0; i < n; ++i)
      out[i] = f(a[i], b[i]);
    return;
  }
  const StridedLoop &loop = plan.loop;
  int64_t inner = loop.innerSize();
  int64_t sa = loop.innerStride(0), sb = loop.innerStride(1);
  loop.forEachRow([&](int64_t o, const int64_t *off) {
    const A *pa = a + off[0];
    const B *pb = b + off[1];
    Out *po = out + o;
    if (sa == 1 && sb == 1) {
      for (int64_t i = 0; i < inner; ++i)
        po[i] = f(pa[i], pb[i]);
    } else if (sa == 1 && sb == 0) {
      B vb = *pb;
      for (int64_t i = 0; i < inner; ++i)
        po[i] = f(pa[i], vb);
    } else if (sa == 0 && sb == 1) {
      A va = *pa;
      for (int64_t i = 0; i < inner; ++i)
        po[i] = f(va, pb[i]);
    } else {
      for (int64_t i = 0; i < inner; ++i)
        po[i] = f(pa[i * sa], pb[i * sb]);
    }
  });
}

template <typename T>
void selectLoop(const ElementwiseGeometry &plan, const uint8_t *c, const T *a,
                const T *b, T *out) {
  if (plan.contiguous) {
    int64_t n = plan.numElements;
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
    for (int64_t i = 0; i < n; ++i)
      out[i] = c[i] ? a[i] : b[i];
    return;
  }
  const StridedLoop &loop = plan.loop;
  int64_t inner = loop.innerSize();
  int64_t sc = loop.innerStride(0), sa = loop.innerStride(1),
          sb = loop.innerStride(2);
  // Elements [lo, hi) of one row; the patterns ReLU's and masks' adjoints
  // produce (a full condition, one side a broadcast zero) get loops the
  // compiler vectorises.
  auto row = [&](const uint8_t *pc, const T *pa, const T *pb, T *po, int64_t lo,
                 int64_t hi) {
    if (sc == 1 && sa == 1 && sb == 0) {
      T vb = *pb;
      for (int64_t i = lo; i < hi; ++i)
        po[i] = pc[i] ? pa[i] : vb;
    } else if (sc == 1 && sa == 0 && sb == 1) {
      T va = *pa;
      for (int64_t i = lo; i < hi; ++i)
        po[i] = pc[i] ? va : pb[i];
    } else if (sc == 1 && sa == 1 && sb == 1) {
      for (int64_t i = lo; i < hi; ++i)
        po[i] = pc[i] ? pa[i] : pb[i];
    } else {
      for (int64_t i = lo; i < hi; ++i)
        po[i] = pc[i * sc] ? pa[i * sa] : pb[i * sb];
    }
  };
  if (loop.outerSize() == 1) {
    // One long row (a scalar broadcast coalesces the whole tensor): the
    // threads share it.
    constexpr int64_t kBlock = 16384;
    int64_t blocks = (inner + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (inner > kParallelThreshold)
    for (int64_t k = 0; k < blocks; ++k)
      row(c + loop.baseOffset[0], a + loop.baseOffset[1],
          b + loop.baseOffset[2], out, k * kBlock,
          std::min(inner, (k + 1) * kBlock));
    return;
  }
  loop.forEachRow([&](int64_t o, const int64_t *off) {
    row(c + off[0], a + off[1], b + off[2], out + o, 0, inner);
  });
}

//===----------------------------------------------------------------------===//
// Arithmetic
//===----------------------------------------------------------------------===//

enum class BinaryOp { Add, Sub, Mul, Div, Pow, Max, Min };

template <typename T> T maxOf(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    // NaN propagates, as in torch.maximum.
    if (std::isnan(a))
      return a;
    if (std::isnan(b))
      return b;
  }
  return a < b ? b : a;
}
template <typename T> T minOf(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a))
      return a;
    if (std::isnan(b))
      return b;
  }
  return b < a ? b : a;
}

template <typename T>
KernelFn makeBinary(BinaryOp op, std::shared_ptr<ElementwiseGeometry> plan) {
  auto run = [plan](auto f) -> KernelFn {
    return [plan, f](const KernelArgs &args) {
      binaryLoop(*plan, static_cast<const T *>(args.operands[0]),
                 static_cast<const T *>(args.operands[1]),
                 static_cast<T *>(args.results[0]), f);
      return Status::ok();
    };
  };
  constexpr bool isFloat = std::is_floating_point_v<T>;
  switch (op) {
  case BinaryOp::Add:
    if constexpr (isFloat)
      return run([](T a, T b) { return a + b; });
    else
      return run([](T a, T b) { return wrapAdd(a, b); });
  case BinaryOp::Sub:
    if constexpr (isFloat)
      return run([](T a, T b) { return a - b; });
    else
      return run([](T a, T b) { return wrapSub(a, b); });
  case BinaryOp::Mul:
    if constexpr (isFloat)
      return run([](T a, T b) { return a * b; });
    else
      return run([](T a, T b) { return wrapMul(a, b); });
  case BinaryOp::Div:
    if constexpr (isFloat) {
      return run([](T a, T b) { return a / b; });
    } else {
      // Division by zero (checked in prepareBinary) and MIN / -1 trap on
      // x86; the latter wraps like negation.
      return run(
          [](T a, T b) { return b == -1 ? wrapSub(T(0), a) : T(a / b); });
    }
  case BinaryOp::Pow:
    if constexpr (isFloat)
      return run([](T a, T b) { return std::pow(a, b); });
    else
      return run([](T a, T b) { return intPow(a, b); });
  case BinaryOp::Max:
    return run([](T a, T b) { return maxOf(a, b); });
  case BinaryOp::Min:
    return run([](T a, T b) { return minOf(a, b); });
  }
  return nullptr;
}

Status prepareBinary(const KernelInfo &info, KernelFn *fn, BinaryOp op) {
  const TensorType &a = info.operand(0), &b = info.operand(1),
                   &r = info.result(0);
  auto plan = std::make_shared<ElementwiseGeometry>(makePlan(r, {&a, &b}));
  switch (r.dtype) {
  case DType::F32:
    *fn = makeBinary<float>(op, plan);
    return Status::ok();
  case DType::I32:
    *fn = makeBinary<int32_t>(op, plan);
    break;
  case DType::I64:
    *fn = makeBinary<int64_t>(op, plan);
    break;
  default:
    return Status::error(std::string("unsupported dtype ") +
                         dtypeName(r.dtype) + " (expects f32, i32 or i64)");
  }
  if (op == BinaryOp::Div) {
    // Wrap the integer division with a zero-divisor check over operand 1.
    int64_t divisorCount = b.numElements();
    size_t elemSize = dtypeSize(b.dtype);
    KernelFn divide = std::move(*fn);
    *fn = [divide, divisorCount, elemSize](const KernelArgs &args) {
      const void *divisor = args.operands[1];
      for (int64_t i = 0; i < divisorCount; ++i) {
        int64_t v = elemSize == 4 ? static_cast<const int32_t *>(divisor)[i]
                                  : static_cast<const int64_t *>(divisor)[i];
        if (v == 0)
          return Status::error("integer division by zero (divisor element " +
                               std::to_string(i) + ")");
      }
      return divide(args);
    };
  }
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Comparisons and logic
//===----------------------------------------------------------------------===//

enum class CmpOp { Eq, Ne, Lt, Le, Gt, Ge };

/// The value compared: bools by truth, so that a stray non-canonical byte
/// still compares as true.
template <typename T, bool IsBool> auto compareKey(T x) {
  if constexpr (IsBool)
    return x != 0;
  else
    return x;
}

template <typename T, bool IsBool = false>
KernelFn makeCompare(CmpOp op, std::shared_ptr<ElementwiseGeometry> plan) {
  auto k = [](T x) { return compareKey<T, IsBool>(x); };
  auto run = [plan](auto f) -> KernelFn {
    return [plan, f](const KernelArgs &args) {
      binaryLoop(*plan, static_cast<const T *>(args.operands[0]),
                 static_cast<const T *>(args.operands[1]),
                 static_cast<uint8_t *>(args.results[0]), f);
      return Status::ok();
    };
  };
  switch (op) {
  case CmpOp::Eq:
    return run([k](T a, T b) -> uint8_t { return k(a) == k(b); });
  case CmpOp::Ne:
    return run([k](T a, T b) -> uint8_t { return k(a) != k(b); });
  case CmpOp::Lt:
    return run([k](T a, T b) -> uint8_t { return k(a) < k(b); });
  case CmpOp::Le:
    return run([k](T a, T b) -> uint8_t { return k(a) <= k(b); });
  case CmpOp::Gt:
    return run([k](T a, T b) -> uint8_t { return k(a) > k(b); });
  case CmpOp::Ge:
    return run([k](T a, T b) -> uint8_t { return k(a) >= k(b); });
  }
  return nullptr;
}

Status prepareCompare(const KernelInfo &info, KernelFn *fn, CmpOp op) {
  const TensorType &a = info.operand(0), &b = info.operand(1),
                   &r = info.result(0);
  auto plan = std::make_shared<ElementwiseGeometry>(makePlan(r, {&a, &b}));
  switch (a.dtype) {
  case DType::F32:
    *fn = makeCompare<float>(op, plan);
    break;
  case DType::I32:
    *fn = makeCompare<int32_t>(op, plan);
    break;
  case DType::I64:
    *fn = makeCompare<int64_t>(op, plan);
    break;
  case DType::Bool:
    *fn = makeCompare<uint8_t, /*IsBool=*/true>(op, plan);
    break;
  default: // Storage dtypes: kernels.def's kAny excludes them.
    return Status::error(std::string("unsupported dtype ") +
                         dtypeName(a.dtype));
  }
  return Status::ok();
}

enum class LogicOp { And, Or, Xor };

Status prepareLogic(const KernelInfo &info, KernelFn *fn, LogicOp op) {
  const TensorType &a = info.operand(0), &b = info.operand(1),
                   &r = info.result(0);
  auto plan = std::make_shared<ElementwiseGeometry>(makePlan(r, {&a, &b}));
  auto run = [plan](auto f) -> KernelFn {
    return [plan, f](const KernelArgs &args) {
      binaryLoop(*plan, static_cast<const uint8_t *>(args.operands[0]),
                 static_cast<const uint8_t *>(args.operands[1]),
                 static_cast<uint8_t *>(args.results[0]), f);
      return Status::ok();
    };
  };
  switch (op) {
  case LogicOp::And:
    *fn = run(
        [](uint8_t a, uint8_t b) -> uint8_t { return (a != 0) & (b != 0); });
    break;
  case LogicOp::Or:
    *fn = run(
        [](uint8_t a, uint8_t b) -> uint8_t { return (a != 0) | (b != 0); });
    break;
  case LogicOp::Xor:
    *fn = run(
        [](uint8_t a, uint8_t b) -> uint8_t { return (a != 0) ^ (b != 0); });
    break;
  }
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Unary
//===----------------------------------------------------------------------===//

template <typename T, typename F> KernelFn makeUnary(int64_t n, F f) {
  return [n, f](const KernelArgs &args) {
    unaryLoop(n, static_cast<const T *>(args.operands[0]),
              static_cast<T *>(args.results[0]), f);
    return Status::ok();
  };
}

/// A float-only unary kernel computing \p f.
template <typename F>
Status prepareFloatUnary(const KernelInfo &info, KernelFn *fn, F f) {
  *fn = makeUnary<float>(info.result(0).numElements(), f);
  return Status::ok();
}

/// A unary kernel on f32, i32 and i64; \p f is a generic lambda.
template <typename F>
Status prepareNumericUnary(const KernelInfo &info, KernelFn *fn, F f) {
  int64_t n = info.result(0).numElements();
  switch (info.result(0).dtype) {
  case DType::F32:
    *fn = makeUnary<float>(n, [f](float x) { return f(x); });
    break;
  case DType::I32:
    *fn = makeUnary<int32_t>(n, [f](int32_t x) { return f(x); });
    break;
  default:
    *fn = makeUnary<int64_t>(n, [f](int64_t x) { return f(x); });
    break;
  }
  return Status::ok();
}

} // namespace

#define BINARY(NAME, OP)                                                       \
  Status prepare_##NAME(const KernelInfo &info, KernelFn *fn) {                \
    return prepareBinary(info, fn, BinaryOp::OP);                              \
  }
BINARY(add, Add)
BINARY(sub, Sub)
BINARY(mul, Mul)
BINARY(div, Div)
BINARY(pow, Pow)
BINARY(max, Max)
BINARY(min, Min)
#undef BINARY

#define COMPARE(NAME, OP)                                                      \
  Status prepare_##NAME(const KernelInfo &info, KernelFn *fn) {                \
    return prepareCompare(info, fn, CmpOp::OP);                                \
  }
COMPARE(cmp_eq, Eq)
COMPARE(cmp_ne, Ne)
COMPARE(cmp_lt, Lt)
COMPARE(cmp_le, Le)
COMPARE(cmp_gt, Gt)
COMPARE(cmp_ge, Ge)
#undef COMPARE

Status prepare_and(const KernelInfo &info, KernelFn *fn) {
  return prepareLogic(info, fn, LogicOp::And);
}
Status prepare_or(const KernelInfo &info, KernelFn *fn) {
  return prepareLogic(info, fn, LogicOp::Or);
}
Status prepare_xor(const KernelInfo &info, KernelFn *fn) {
  return prepareLogic(info, fn, LogicOp::Xor);
}

Status prepare_not(const KernelInfo &info, KernelFn *fn) {
  const TensorType &r = info.result(0);
  *fn = makeUnary<uint8_t>(r.numElements(),
                           [](uint8_t x) -> uint8_t { return x == 0; });
  return Status::ok();
}

Status prepare_select(const KernelInfo &info, KernelFn *fn) {
  const TensorType &c = info.operand(0), &a = info.operand(1),
                   &b = info.operand(2), &r = info.result(0);
  auto plan = std::make_shared<ElementwiseGeometry>(makePlan(r, {&c, &a, &b}));
  // Selection only moves bits, so the element size is all that matters.
  auto make = [plan](auto tag) -> KernelFn {
    using T = decltype(tag);
    return [plan](const KernelArgs &args) {
      selectLoop(*plan, static_cast<const uint8_t *>(args.operands[0]),
                 static_cast<const T *>(args.operands[1]),
                 static_cast<const T *>(args.operands[2]),
                 static_cast<T *>(args.results[0]));
      return Status::ok();
    };
  };
  switch (dtypeSize(r.dtype)) {
  case 1:
    *fn = make(uint8_t());
    break;
  case 2: // mixed precision's bf16 / f16
    *fn = make(uint16_t());
    break;
  case 4:
    *fn = make(uint32_t());
    break;
  default:
    *fn = make(uint64_t());
    break;
  }
  return Status::ok();
}

Status prepare_neg(const KernelInfo &info, KernelFn *fn) {
  return prepareNumericUnary(info, fn, [](auto x) -> decltype(x) {
    if constexpr (std::is_integral_v<decltype(x)>)
      return wrapSub(decltype(x)(0), x);
    else
      return -x;
  });
}

Status prepare_abs(const KernelInfo &info, KernelFn *fn) {
  return prepareNumericUnary(info, fn, [](auto x) -> decltype(x) {
    if constexpr (std::is_integral_v<decltype(x)>)
      return x < 0 ? wrapSub(decltype(x)(0), x) : x;
    else
      return std::fabs(x);
  });
}

// The formulas are fused_ops.h's, which elementwise fusion and the CUDA
// backend use too: one definition, the same bits fused or not.
#define FLOAT_UNARY(NAME, CODE)                                                \
  Status prepare_##NAME(const KernelInfo &info, KernelFn *fn) {                \
    return prepareFloatUnary(                                                  \
        info, fn, [](float x) { return applyFused(FusedCode::CODE, x, x); });  \
  }
FLOAT_UNARY(exp, Exp)
FLOAT_UNARY(log, Log)
FLOAT_UNARY(sqrt, Sqrt)
FLOAT_UNARY(rsqrt, Rsqrt)
FLOAT_UNARY(reciprocal, Reciprocal)
FLOAT_UNARY(tanh, Tanh)
FLOAT_UNARY(sigmoid, Sigmoid)
FLOAT_UNARY(relu, Relu)
FLOAT_UNARY(erf, Erf)
#undef FLOAT_UNARY
Status prepare_sin(const KernelInfo &info, KernelFn *fn) {
  return prepareFloatUnary(info, fn, [](float x) { return sine(x); });
}
Status prepare_cos(const KernelInfo &info, KernelFn *fn) {
  return prepareFloatUnary(info, fn, [](float x) { return cosine(x); });
}

Status prepare_gelu(const KernelInfo &info, KernelFn *fn) {
  if (!info.params<schema::Kernel::k_gelu>().approximate)
    return prepareFloatUnary(info, fn, [](float x) { return geluErf(x); });
  return prepareFloatUnary(info, fn, [](float x) { return geluTanh(x); });
}

Status prepare_leaky_relu(const KernelInfo &info, KernelFn *fn) {
  float a =
      static_cast<float>(info.params<schema::Kernel::k_leaky_relu>().alpha);
  return prepareFloatUnary(info, fn, [a](float x) { return leakyRelu(x, a); });
}

} // namespace cleave::rt

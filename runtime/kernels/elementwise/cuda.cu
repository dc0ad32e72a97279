//===- cuda.cu - Elementwise, comparison and logical kernels on the GPU ---===//
//
// The CUDA counterparts of cpu.cpp beside this file. Each
// functor uses the CPU kernel's formula (integer wrap-around, NaN handling,
// bool truth as != 0) so that both backends agree. Same-shape operands take a
// flat grid-stride loop; broadcast operands map each result index through an
// Indexer, whose coalesced dims keep the div/mod work per element small.
//
//===----------------------------------------------------------------------===//

#include "core/fused_ops.h"
#include "core/int_arith.h"
#include "core/kernel_math.h"
#include "cuda/cuda_common.cuh"

#include <string>
#include <type_traits>
#include <vector>

namespace cleave::rt::cuda {
namespace {

struct ElementwiseGeometry {
  /// Every operand has the result's shape.
  bool contiguous = true;
  int64_t numElements = 0;
  /// Operand offsets per result element when not contiguous.
  Indexer indexer;
  /// Fewer than 2^32 result elements, so every coalesced dim fits 32 bits.
  bool narrow = true;
};

Status makePlan(const TensorType &result,
                const std::vector<const TensorType *> &operands,
                ElementwiseGeometry *plan) {
  plan->numElements = result.numElements();
  plan->contiguous = true;
  plan->narrow = plan->numElements <= int64_t(UINT32_MAX);
  std::vector<std::vector<int64_t>> strides;
  for (const TensorType *op : operands) {
    plan->contiguous = plan->contiguous && op->shape == result.shape;
    strides.push_back(broadcastStrides(op->shape, result.shape));
  }
  if (plan->contiguous)
    return Status::ok();
  return makeIndexer(result.shape, strides, &plan->indexer);
}

//===----------------------------------------------------------------------===//
// Generic kernels
//===----------------------------------------------------------------------===//

// Pointers are not __restrict__: with one load per operand and one store per
// element there is nothing to gain, and a result aliasing a same-shape operand
// stays correct.

template <typename T, typename Out, typename F>
__global__ void unaryKernel(int64_t n, const T *a, Out *out, F f) {
  CLEAVE_GRID_LOOP(i, n) { out[i] = f(a[i]); }
}

/// Indexer::offsets, dividing in 32 bits when \p narrow: 64-bit division is a
/// long instruction sequence on the GPU and would dominate broadcast kernels.
template <int Count>
__device__ void operandOffsets(const Indexer &ix, bool narrow, int64_t linear,
                               int64_t *out) {
  if (!narrow) {
    ix.offsets(linear, Count, out);
    return;
  }
  for (int k = 0; k < Count; ++k)
    out[k] = 0;
  uint32_t rest = static_cast<uint32_t>(linear);
  for (int d = ix.rank - 1; d >= 0; --d) {
    uint32_t dim = static_cast<uint32_t>(ix.dims[d]);
    uint32_t i = rest % dim;
    rest /= dim;
    for (int k = 0; k < Count; ++k)
      out[k] += int64_t(i) * ix.strides[k][d];
  }
}

template <typename T, typename Out, typename F>
__global__ void binaryFlat(int64_t n, const T *a, const T *b, Out *out, F f) {
  CLEAVE_GRID_LOOP(i, n) { out[i] = f(a[i], b[i]); }
}

template <typename T, typename Out, typename F>
__global__ void binaryStrided(int64_t n, Indexer ix, bool narrow, const T *a,
                              const T *b, Out *out, F f) {
  CLEAVE_GRID_LOOP(i, n) {
    int64_t off[2];
    operandOffsets<2>(ix, narrow, i, off);
    out[i] = f(a[off[0]], b[off[1]]);
  }
}

template <typename T>
__global__ void selectFlat(int64_t n, const uint8_t *c, const T *a, const T *b,
                           T *out) {
  CLEAVE_GRID_LOOP(i, n) { out[i] = c[i] ? a[i] : b[i]; }
}

template <typename T>
__global__ void selectStrided(int64_t n, Indexer ix, bool narrow,
                              const uint8_t *c, const T *a, const T *b,
                              T *out) {
  CLEAVE_GRID_LOOP(i, n) {
    int64_t off[3];
    operandOffsets<3>(ix, narrow, i, off);
    out[i] = c[off[0]] ? a[off[1]] : b[off[2]];
  }
}

/// A DeviceFn applying \p f to the n same-shape elements of operand 0.
template <typename T, typename Out = T, typename F>
DeviceFn unaryFn(int64_t n, F f, std::string name) {
  return [n, f, name](const KernelArgs &args, Context &ctx) -> Status {
    if (n == 0)
      return Status::ok();
    unaryKernel<<<gridFor(n), kBlock, 0, ctx.stream>>>(
        n, static_cast<const T *>(args.operands[0]),
        static_cast<Out *>(args.results[0]), f);
    return launchStatus(name.c_str());
  };
}

template <typename T, typename Out, typename F>
Status launchBinary(const ElementwiseGeometry &plan, const KernelArgs &args,
                    cudaStream_t stream, F f, const std::string &name) {
  int64_t n = plan.numElements;
  if (n == 0)
    return Status::ok();
  const T *a = static_cast<const T *>(args.operands[0]);
  const T *b = static_cast<const T *>(args.operands[1]);
  Out *out = static_cast<Out *>(args.results[0]);
  if (plan.contiguous)
    binaryFlat<<<gridFor(n), kBlock, 0, stream>>>(n, a, b, out, f);
  else
    binaryStrided<<<gridFor(n), kBlock, 0, stream>>>(n, plan.indexer,
                                                     plan.narrow, a, b, out, f);
  return launchStatus(name.c_str());
}

/// A DeviceFn applying the stateless functor \p f to operands 0 and 1.
template <typename T, typename Out, typename F>
DeviceFn binaryFn(const ElementwiseGeometry &plan, F f, std::string name) {
  return [plan, f, name](const KernelArgs &args, Context &ctx) {
    return launchBinary<T, Out>(plan, args, ctx.stream, f, name);
  };
}

//===----------------------------------------------------------------------===//
// Arithmetic
//===----------------------------------------------------------------------===//

enum class BinaryOp { Add, Sub, Mul, Div, Pow, Max, Min };

/// Every binary op but integer division (which needs the error flag).
template <typename T, BinaryOp Op> struct Arith {
  __device__ T operator()(T a, T b) const {
    constexpr bool isFloat = std::is_floating_point_v<T>;
    if constexpr (Op == BinaryOp::Add) {
      if constexpr (isFloat)
        return a + b;
      else
        return wrapAdd(a, b);
    } else if constexpr (Op == BinaryOp::Sub) {
      if constexpr (isFloat)
        return a - b;
      else
        return wrapSub(a, b);
    } else if constexpr (Op == BinaryOp::Mul) {
      if constexpr (isFloat)
        return a * b;
      else
        return wrapMul(a, b);
    } else if constexpr (Op == BinaryOp::Div) {
      static_assert(isFloat, "integer division is IntDiv");
      return a / b;
    } else if constexpr (Op == BinaryOp::Pow) {
      if constexpr (isFloat)
        return powf(a, b);
      else
        return intPow(a, b);
    } else if constexpr (Op == BinaryOp::Max) {
      // NaN propagates (torch.maximum); fmaxf would drop it.
      if constexpr (isFloat) {
        if (isnan(a))
          return a;
        if (isnan(b))
          return b;
      }
      return a < b ? b : a;
    } else {
      if constexpr (isFloat) {
        if (isnan(a))
          return a;
        if (isnan(b))
          return b;
      }
      return b < a ? b : a;
    }
  }
};

/// Integer division truncating toward zero. MIN / -1 wraps like negation; a
/// zero divisor is a data error (the CPU backend fails the run), and the
/// element gets 0 rather than the hardware's arbitrary quotient.
template <typename T> struct IntDiv {
  int *errorFlag;
  int instruction;
  __device__ T operator()(T a, T b) const {
    if (b == 0) {
      reportError(errorFlag, instruction, kErrorDivisionByZero);
      return 0;
    }
    return b == -1 ? wrapSub(T(0), a) : T(a / b);
  }
};

/// Reports a zero among \p n divisors; used only when the result is empty, so
/// that the division kernel never sees them (the CPU checks every divisor).
template <typename T>
__global__ void checkDivisors(int64_t n, const T *b, int *errorFlag,
                              int instruction) {
  CLEAVE_GRID_LOOP(i, n) {
    if (b[i] == 0)
      reportError(errorFlag, instruction, kErrorDivisionByZero);
  }
}

template <typename T>
DeviceFn intDivFn(const ElementwiseGeometry &plan, int64_t divisorCount,
                  std::string name) {
  return [plan, divisorCount, name](const KernelArgs &args,
                                    Context &ctx) -> Status {
    if (plan.numElements == 0) {
      if (divisorCount == 0)
        return Status::ok();
      checkDivisors<<<gridFor(divisorCount), kBlock, 0, ctx.stream>>>(
          divisorCount, static_cast<const T *>(args.operands[1]), ctx.errorFlag,
          ctx.instruction);
      return launchStatus(name.c_str());
    }
    return launchBinary<T, T>(plan, args, ctx.stream,
                              IntDiv<T>{ctx.errorFlag, ctx.instruction}, name);
  };
}

template <typename T, BinaryOp Op>
DeviceFn makeBinary(const ElementwiseGeometry &plan, const TensorType &divisor,
                    const std::string &name) {
  if constexpr (Op == BinaryOp::Div && !std::is_floating_point_v<T>)
    return intDivFn<T>(plan, divisor.numElements(), name);
  else
    return binaryFn<T, T>(plan, Arith<T, Op>(), name);
}

template <BinaryOp Op>
Status prepareBinary(const KernelInfo &info, DeviceFn *fn) {
  const TensorType &b = info.operand(1), &r = info.result(0);
  ElementwiseGeometry plan;
  if (Status s = makePlan(r, {&info.operand(0), &b}, &plan); !s)
    return s;
  switch (r.dtype) {
  case DType::F32:
    *fn = makeBinary<float, Op>(plan, b, info.kernel);
    break;
  case DType::I32:
    *fn = makeBinary<int32_t, Op>(plan, b, info.kernel);
    break;
  case DType::I64:
    *fn = makeBinary<int64_t, Op>(plan, b, info.kernel);
    break;
  default:
    return Status::error(std::string("unsupported dtype ") +
                         dtypeName(r.dtype) + " (expects f32, i32 or i64)");
  }
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Comparisons and logic
//===----------------------------------------------------------------------===//

enum class CmpOp { Eq, Ne, Lt, Le, Gt, Ge };

template <typename T, CmpOp Op, bool IsBool> struct Compare {
  template <typename K> static __device__ uint8_t apply(K a, K b) {
    if constexpr (Op == CmpOp::Eq)
      return a == b;
    else if constexpr (Op == CmpOp::Ne)
      return a != b;
    else if constexpr (Op == CmpOp::Lt)
      return a < b;
    else if constexpr (Op == CmpOp::Le)
      return a <= b;
    else if constexpr (Op == CmpOp::Gt)
      return a > b;
    else
      return a >= b;
  }
  __device__ uint8_t operator()(T a, T b) const {
    // Bools compare by truth, so a stray non-canonical byte is still true.
    if constexpr (IsBool)
      return apply<bool>(a != 0, b != 0);
    else
      return apply<T>(a, b);
  }
};

template <CmpOp Op>
Status prepareCompare(const KernelInfo &info, DeviceFn *fn) {
  const TensorType &a = info.operand(0), &r = info.result(0);
  ElementwiseGeometry plan;
  if (Status s = makePlan(r, {&a, &info.operand(1)}, &plan); !s)
    return s;
  const std::string &name = info.kernel;
  switch (a.dtype) {
  case DType::F32:
    *fn = binaryFn<float, uint8_t>(plan, Compare<float, Op, false>(), name);
    break;
  case DType::I32:
    *fn = binaryFn<int32_t, uint8_t>(plan, Compare<int32_t, Op, false>(), name);
    break;
  case DType::I64:
    *fn = binaryFn<int64_t, uint8_t>(plan, Compare<int64_t, Op, false>(), name);
    break;
  case DType::Bool:
    *fn = binaryFn<uint8_t, uint8_t>(plan, Compare<uint8_t, Op, true>(), name);
    break;
  }
  return Status::ok();
}

enum class LogicOp { And, Or, Xor };

template <LogicOp Op> struct Logic {
  __device__ uint8_t operator()(uint8_t a, uint8_t b) const {
    if constexpr (Op == LogicOp::And)
      return (a != 0) & (b != 0);
    else if constexpr (Op == LogicOp::Or)
      return (a != 0) | (b != 0);
    else
      return (a != 0) ^ (b != 0);
  }
};

template <LogicOp Op>
Status prepareLogic(const KernelInfo &info, DeviceFn *fn) {
  ElementwiseGeometry plan;
  if (Status s =
          makePlan(info.result(0), {&info.operand(0), &info.operand(1)}, &plan);
      !s)
    return s;
  *fn = binaryFn<uint8_t, uint8_t>(plan, Logic<Op>(), info.kernel);
  return Status::ok();
}

struct LogicalNot {
  __device__ uint8_t operator()(uint8_t x) const { return x == 0; }
};

//===----------------------------------------------------------------------===//
// Unary
//===----------------------------------------------------------------------===//

enum class UnaryOp {
  Exp,
  Log,
  Sqrt,
  Rsqrt,
  Reciprocal,
  Tanh,
  Sigmoid,
  Relu,
  Erf,
  Sin,
  Cos,
  GeluErf,
  GeluTanh,
};

/// Float-only unary ops: fused_ops.h's formulas where it has them (the ones
/// elementwise fusion runs, and the CPU's), the precise (non-intrinsic)
/// functions otherwise, to stay within rounding of the CPU.
template <UnaryOp Op> struct FloatUnary {
  static constexpr FusedCode code() {
    switch (Op) {
    case UnaryOp::Exp:
      return FusedCode::Exp;
    case UnaryOp::Log:
      return FusedCode::Log;
    case UnaryOp::Sqrt:
      return FusedCode::Sqrt;
    case UnaryOp::Rsqrt:
      return FusedCode::Rsqrt;
    case UnaryOp::Reciprocal:
      return FusedCode::Reciprocal;
    case UnaryOp::Tanh:
      return FusedCode::Tanh;
    case UnaryOp::Sigmoid:
      return FusedCode::Sigmoid;
    case UnaryOp::Relu:
      return FusedCode::Relu;
    case UnaryOp::Erf:
      return FusedCode::Erf;
    default:
      return FusedCode::Identity;
    }
  }
  __device__ float operator()(float x) const {
    if constexpr (code() != FusedCode::Identity) {
      return applyFused(code(), x, x);
    } else if constexpr (Op == UnaryOp::Sin) {
      return sine(x);
    } else if constexpr (Op == UnaryOp::Cos) {
      return cosine(x);
    } else if constexpr (Op == UnaryOp::GeluErf) {
      return geluErf(x);
    } else {
      return geluTanh(x);
    }
  }
};

struct LeakyRelu {
  float alpha;
  __device__ float operator()(float x) const { return leakyRelu(x, alpha); }
};

template <typename T> struct Negate {
  __device__ T operator()(T x) const {
    if constexpr (std::is_integral_v<T>)
      return wrapSub(T(0), x);
    else
      return -x;
  }
};

template <typename T> struct Absolute {
  __device__ T operator()(T x) const {
    if constexpr (std::is_integral_v<T>)
      return x < 0 ? wrapSub(T(0), x) : x;
    else
      return fabsf(x);
  }
};

template <typename F>
Status prepareFloatUnary(const KernelInfo &info, DeviceFn *fn, F f) {
  *fn = unaryFn<float>(info.result(0).numElements(), f, info.kernel);
  return Status::ok();
}

/// A unary kernel on f32, i32 and i64 computing Op<T>.
template <template <typename> class Op>
Status prepareNumericUnary(const KernelInfo &info, DeviceFn *fn) {
  const TensorType &r = info.result(0);
  int64_t n = r.numElements();
  switch (r.dtype) {
  case DType::F32:
    *fn = unaryFn<float>(n, Op<float>(), info.kernel);
    break;
  case DType::I32:
    *fn = unaryFn<int32_t>(n, Op<int32_t>(), info.kernel);
    break;
  case DType::I64:
    *fn = unaryFn<int64_t>(n, Op<int64_t>(), info.kernel);
    break;
  default:
    return Status::error(std::string("unsupported dtype ") +
                         dtypeName(r.dtype) + " (expects f32, i32 or i64)");
  }
  return Status::ok();
}

} // namespace

#define BINARY(NAME, OP)                                                       \
  Status prepare_##NAME(const KernelInfo &info, DeviceFn *fn) {                \
    return prepareBinary<BinaryOp::OP>(info, fn);                              \
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
  Status prepare_##NAME(const KernelInfo &info, DeviceFn *fn) {                \
    return prepareCompare<CmpOp::OP>(info, fn);                                \
  }
COMPARE(cmp_eq, Eq)
COMPARE(cmp_ne, Ne)
COMPARE(cmp_lt, Lt)
COMPARE(cmp_le, Le)
COMPARE(cmp_gt, Gt)
COMPARE(cmp_ge, Ge)
#undef COMPARE

Status prepare_and(const KernelInfo &info, DeviceFn *fn) {
  return prepareLogic<LogicOp::And>(info, fn);
}
Status prepare_or(const KernelInfo &info, DeviceFn *fn) {
  return prepareLogic<LogicOp::Or>(info, fn);
}
Status prepare_xor(const KernelInfo &info, DeviceFn *fn) {
  return prepareLogic<LogicOp::Xor>(info, fn);
}

Status prepare_not(const KernelInfo &info, DeviceFn *fn) {
  *fn =
      unaryFn<uint8_t>(info.result(0).numElements(), LogicalNot(), info.kernel);
  return Status::ok();
}

Status prepare_select(const KernelInfo &info, DeviceFn *fn) {
  const TensorType &r = info.result(0);
  ElementwiseGeometry plan;
  if (Status s = makePlan(
          r, {&info.operand(0), &info.operand(1), &info.operand(2)}, &plan);
      !s)
    return s;
  // Selection only moves bits, so the element size is all that matters.
  auto make = [&plan](auto tag) -> DeviceFn {
    using T = decltype(tag);
    return [plan](const KernelArgs &args, Context &ctx) -> Status {
      int64_t n = plan.numElements;
      if (n == 0)
        return Status::ok();
      const uint8_t *c = static_cast<const uint8_t *>(args.operands[0]);
      const T *a = static_cast<const T *>(args.operands[1]);
      const T *b = static_cast<const T *>(args.operands[2]);
      T *out = static_cast<T *>(args.results[0]);
      if (plan.contiguous)
        selectFlat<<<gridFor(n), kBlock, 0, ctx.stream>>>(n, c, a, b, out);
      else
        selectStrided<<<gridFor(n), kBlock, 0, ctx.stream>>>(
            n, plan.indexer, plan.narrow, c, a, b, out);
      return launchStatus("select");
    };
  };
  switch (dtypeSize(r.dtype)) {
  case 1:
    *fn = make(uint8_t());
    break;
  case 4:
    *fn = make(uint32_t());
    break;
  case 8:
    *fn = make(uint64_t());
    break;
  default:
    return Status::error(std::string("select: unsupported dtype ") +
                         dtypeName(r.dtype));
  }
  return Status::ok();
}

Status prepare_neg(const KernelInfo &info, DeviceFn *fn) {
  return prepareNumericUnary<Negate>(info, fn);
}
Status prepare_abs(const KernelInfo &info, DeviceFn *fn) {
  return prepareNumericUnary<Absolute>(info, fn);
}

#define FLOAT_UNARY(NAME, OP)                                                  \
  Status prepare_##NAME(const KernelInfo &info, DeviceFn *fn) {                \
    return prepareFloatUnary(info, fn, FloatUnary<UnaryOp::OP>());             \
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
FLOAT_UNARY(sin, Sin)
FLOAT_UNARY(cos, Cos)
#undef FLOAT_UNARY

Status prepare_gelu(const KernelInfo &info, DeviceFn *fn) {
  if (!info.params<schema::Kernel::k_gelu>().approximate)
    return prepareFloatUnary(info, fn, FloatUnary<UnaryOp::GeluErf>());
  return prepareFloatUnary(info, fn, FloatUnary<UnaryOp::GeluTanh>());
}

Status prepare_leaky_relu(const KernelInfo &info, DeviceFn *fn) {
  double alpha = info.params<schema::Kernel::k_leaky_relu>().alpha;
  return prepareFloatUnary(info, fn, LeakyRelu{static_cast<float>(alpha)});
}

} // namespace cleave::rt::cuda

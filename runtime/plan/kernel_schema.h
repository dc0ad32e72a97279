//===- kernel_schema.h - Typed kernel parameters ----------------*- C++ -*-===//
//
// What kernels.def generates for both sides of the plan: an enum of kernels,
// one parameter struct per kernel (Params<Kernel::k_matmul> has fields
// transpose_a and transpose_b), and the operand/result rules the runtime's
// one validator checks. Header-only and free of protobuf, so the compiler
// (plan_writer.h), the runtime core and the CUDA plugin share it.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_KERNEL_SCHEMA_H
#define CLEAVE_RUNTIME_KERNEL_SCHEMA_H

#include <cstdint>
#include <optional>
#include <string_view>
#include <variant>
#include <vector>

namespace cleave::rt::schema {

/// Dtype masks of operand and result rules.
enum DTypeMask : uint16_t {
  kF32 = 1,
  kI64 = 2,
  kI32 = 4,
  kBool = 8,
  kInteger = kI32 | kI64,
  kNumeric = kF32 | kI32 | kI64,
  kAny = kNumeric | kBool,
  /// The storage dtypes (f64, f16, bf16, i8, i16, u8, u16, u32), one bit
  /// each from kF64 up: cast reads them all; the kernels of mixed precision
  /// (matmul, convolutions, collectives) read f16 and bf16.
  kF64 = 16,
  kF16 = 32,
  kBF16 = 64,
  kHalf = kF16 | kBF16,
  kI8 = 128,
  kFloat = kF32 | kHalf,
  kStorage = 0xff0,
  kAll = kAny | kStorage,
  /// Not a dtype: the value must be a scalar (rank 0).
  kScalarOnly = 0x1000,
};
/// An Ints attribute of any length.
constexpr int kAnyCount = -1;

enum class Presence { Required, Optional, Variadic };
enum class Tie { Free, Tied };
enum class AttrType { Bool, Int, Float, Scalar, Ints };
enum class AttrRule { Required, Optional, Default };

enum class Kernel : uint8_t {
#define CLEAVE_KERNEL_BEGIN(K) k_##K,
#include "plan/kernels.def"
};

constexpr size_t kNumKernels = 0
#define CLEAVE_KERNEL_BEGIN(K) +1
#include "plan/kernels.def"
    ;

/// A Scalar attribute: a float (for an f32 result) or an integer.
struct ScalarValue {
  bool isFloat = false;
  double f = 0;
  int64_t i = 0;
};

namespace detail {
using Bool = bool;
using Int = int64_t;
using Float = double;
using Scalar = ScalarValue;
using Ints = std::vector<int64_t>;
template <typename T> T blank(int) { return T{}; }
template <> inline Ints blank<Ints>(int count) {
  return Ints(count > 0 ? static_cast<size_t>(count) : 0, 0);
}
} // namespace detail

template <Kernel K> struct Params;

// A Required field starts well-formed for the schema (an Ints of COUNT
// zeros), so a default Params round-trips; the emitter sets every one.
#define CLEAVE_SCHEMA_FIELD_Required(TYPE, NAME, COUNT, ...)                   \
  detail::TYPE NAME = detail::blank<detail::TYPE>(COUNT);
#define CLEAVE_SCHEMA_FIELD_Optional(TYPE, NAME, COUNT, ...)                   \
  std::optional<detail::TYPE> NAME;
#define CLEAVE_SCHEMA_FIELD_Default(TYPE, NAME, COUNT, ...)                    \
  detail::TYPE NAME = detail::TYPE{__VA_ARGS__};
#define CLEAVE_KERNEL_BEGIN(K)                                                 \
  template <> struct Params<Kernel::k_##K> {                                   \
    static constexpr Kernel kKernel = Kernel::k_##K;
#define CLEAVE_ATTR(K, NAME, TYPE, COUNT, RULE, ...)                           \
  CLEAVE_SCHEMA_FIELD_##RULE(TYPE, NAME, COUNT, __VA_ARGS__)
#define CLEAVE_KERNEL_END(K)                                                   \
  }                                                                            \
  ;
#include "plan/kernels.def"
#undef CLEAVE_SCHEMA_FIELD_Required
#undef CLEAVE_SCHEMA_FIELD_Optional
#undef CLEAVE_SCHEMA_FIELD_Default

/// Any kernel's parameters; monostate for instructions the schema does not
/// describe (the runtime's own fused_elementwise).
using AnyParams = std::variant<std::monostate
#define CLEAVE_KERNEL_BEGIN(K) , Params<Kernel::k_##K>
#include "plan/kernels.def"
                               >;

/// The kernel's name in plans.
constexpr const char *kernelName(Kernel k) {
  constexpr const char *names[] = {
#define CLEAVE_KERNEL_BEGIN(K) #K,
#include "plan/kernels.def"
  };
  return names[static_cast<size_t>(k)];
}

/// The kernel called \p name, if kernels.def lists it.
inline std::optional<Kernel> kernelNamed(std::string_view name) {
  for (size_t i = 0; i < kNumKernels; ++i)
    if (name == kernelName(static_cast<Kernel>(i)))
      return static_cast<Kernel>(i);
  return std::nullopt;
}

/// One operand or result of a kernel.
struct ValueRule {
  const char *name;
  Presence presence;
  Tie tie;
  uint16_t dtypes; ///< DTypeMask (kScalarOnly: rank 0 too)
};

/// One attribute of a kernel.
struct AttrRuleInfo {
  const char *name;
  AttrType type;
  int count; ///< Ints: kAnyCount or the exact number; 1 otherwise
  AttrRule rule;
};

/// What the validator checks of an instruction before any backend sees it.
struct KernelSignature {
  const char *name;
  std::vector<ValueRule> operands, results;
  std::vector<AttrRuleInfo> attrs;
};

} // namespace cleave::rt::schema

#endif // CLEAVE_RUNTIME_KERNEL_SCHEMA_H

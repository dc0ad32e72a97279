//===- fused_ops.h - Semantics of fusable elementwise ops -------*- C++ -*-===//
//
// The element functions of the f32 kernels that elementwise fusion
// (fusion.h) may merge, written once for the host and the device: the CPU's
// fused loop gives bit-identical results to the separate kernels (each step
// still rounds to f32), and the CUDA interpreter computes the same formulas.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_CORE_FUSED_OPS_H
#define CLEAVE_RUNTIME_CORE_FUSED_OPS_H

#include <cmath>
#include <cstdint>

#include "core/convert.h"
#include "core/host_device.h"
#include "core/vector_math.h"

namespace cleave::rt {

enum class FusedCode : uint8_t {
  Add,
  Sub,
  Mul,
  Div,
  Max,
  Min,
  Pow,
  /// Comparisons: 1 or 0, the register of a bool (select's condition or a
  /// bool output); false whenever an operand is NaN, except Ne.
  Eq,
  Ne,
  Lt,
  Le,
  Gt,
  Ge,
  Neg,
  Abs,
  Exp,
  Log,
  Sqrt,
  Rsqrt,
  Reciprocal,
  Tanh,
  Erf,
  Sigmoid,
  Relu,
  /// a itself: broadcast and copy, which only move values, and a bf16 or
  /// f16 input widened (a cast, its rounding done when it was stored).
  Identity,
  /// a rounded to bf16 / f16 and back: a cast to half precision, whose
  /// output is stored in that dtype (exactly, being already rounded).
  RoundBf16,
  RoundF16,
  /// a ? b : c, a being a bool condition loaded as 0 or 1.
  Select,
};

/// Operands of op \p c.
CLEAVE_HOST_DEVICE inline int fusedArity(FusedCode c) {
  return c == FusedCode::Select ? 3 : c <= FusedCode::Ge ? 2 : 1;
}

/// The f32 result of op \p c on \p a (and \p b), as the CPU kernels compute
/// it (runtime/kernels/elementwise/cpu.cpp).
CLEAVE_HOST_DEVICE inline float applyFused(FusedCode c, float a, float b) {
  switch (c) {
  case FusedCode::Add:
    return a + b;
  case FusedCode::Sub:
    return a - b;
  case FusedCode::Mul:
    return a * b;
  case FusedCode::Div:
    return a / b;
  case FusedCode::Max:
    // NaN propagates, as in torch.maximum.
    return a != a ? a : b != b ? b : (a < b ? b : a);
  case FusedCode::Min:
    return a != a ? a : b != b ? b : (b < a ? b : a);
  case FusedCode::Pow:
    return ::powf(a, b);
  case FusedCode::Eq:
    return a == b ? 1.0f : 0.0f;
  case FusedCode::Ne:
    return a != b ? 1.0f : 0.0f;
  case FusedCode::Lt:
    return a < b ? 1.0f : 0.0f;
  case FusedCode::Le:
    return a <= b ? 1.0f : 0.0f;
  case FusedCode::Gt:
    return a > b ? 1.0f : 0.0f;
  case FusedCode::Ge:
    return a >= b ? 1.0f : 0.0f;
  case FusedCode::Neg:
    return -a;
  case FusedCode::Abs:
    return ::fabsf(a);
  case FusedCode::Exp:
    return CLEAVE_VEC_MATH(Exp, exp)(a);
  case FusedCode::Log:
    return ::logf(a);
  case FusedCode::Sqrt:
    return ::sqrtf(a);
  case FusedCode::Rsqrt:
    return 1.0f / ::sqrtf(a);
  case FusedCode::Reciprocal:
    return 1.0f / a;
  case FusedCode::Tanh:
    return CLEAVE_VEC_MATH(Tanh, tanh)(a);
  case FusedCode::Erf:
    return CLEAVE_VEC_MATH(Erf, erf)(a);
  case FusedCode::Sigmoid: {
    // exp of a non-positive argument only, so large |x| cannot overflow.
    float e = CLEAVE_VEC_MATH(Exp, exp)(-::fabsf(a));
    return a >= 0 ? 1.0f / (1.0f + e) : e / (1.0f + e);
  }
  case FusedCode::Relu:
    return a < 0.0f ? 0.0f : a;
  case FusedCode::Identity:
    return a;
  case FusedCode::RoundBf16:
    return bf16ToFloat(floatToBf16(a));
  case FusedCode::RoundF16:
    return halfToFloat(floatToHalf(a));
  case FusedCode::Select: // three operands: see applySelect
    break;
  }
  return a;
}

/// select: the value itself is copied, NaN payloads included.
CLEAVE_HOST_DEVICE inline float applySelect(float cond, float a, float b) {
  return cond != 0.0f ? a : b;
}

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_CORE_FUSED_OPS_H

//===- kernel_math.h - Formulas both backends compute ----------*- C++ -*-===//
//
// The element and row functions of kernels that elementwise fusion does not
// merge (fused_ops.h has those), written once for the host and the device:
// the CPU and CUDA kernels both call them, so a formula is never written
// twice (test/contract/kernel-formulas.test checks that no formula line
// stands in both backends).
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_CORE_KERNEL_MATH_H
#define CLEAVE_RUNTIME_CORE_KERNEL_MATH_H

#include <cmath>
#include <cstdint>

#include "core/host_device.h"
#include "core/vector_math.h"

namespace cleave::rt {

/// GELU, exact: x * Phi(x), Phi through erf (torch's approximate='none').
CLEAVE_HOST_DEVICE inline float geluErf(float x) {
  return 0.5f * x *
         (1.0f + CLEAVE_VEC_MATH(Erf, erf)(x * 0.70710678118654752f));
}

/// GELU, tanh approximation (torch's approximate='tanh').
CLEAVE_HOST_DEVICE inline float geluTanh(float x) {
  constexpr float kSqrt2OverPi = 0.79788456080286536f;
  float inner = kSqrt2OverPi * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + CLEAVE_VEC_MATH(Tanh, tanh)(inner));
}

/// leaky_relu with slope \p alpha below zero.
CLEAVE_HOST_DEVICE inline float leakyRelu(float x, float alpha) {
  return x < 0.0f ? alpha * x : x;
}

/// sin and cos, the precise (non-intrinsic) functions on the device too.
CLEAVE_HOST_DEVICE inline float sine(float x) { return ::sinf(x); }
CLEAVE_HOST_DEVICE inline float cosine(float x) { return ::cosf(x); }

/// A row's mean (or variance) from its sum (of squared deviations),
/// accumulated in double and rounded to f32, as the statistics outputs are;
/// 0 for an empty row.
CLEAVE_HOST_DEVICE inline float rowMean(double sum, int64_t n) {
  return n ? static_cast<float>(sum / n) : 0.0f;
}

/// 1 / sqrt(var + eps): the normalisations' scale (layer_norm, batch_norm).
CLEAVE_HOST_DEVICE inline float invStdOf(float var, float eps) {
  return 1.0f / ::sqrtf(var + eps);
}

/// softmax's 1 / sum, from a sum of exponentials accumulated in double.
CLEAVE_HOST_DEVICE inline float softmaxScale(double sum) {
  return static_cast<float>(1.0 / sum);
}

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_CORE_KERNEL_MATH_H

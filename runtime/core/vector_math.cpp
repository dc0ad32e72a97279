//===- vector_math.cpp - exp, erf, tanh and sigmoid over arrays -----------===//

#include "core/vector_math.h"
#include "core/convert.h"
#include "core/fused_ops.h"

namespace cleave::rt {

CLEAVE_CLONES void expArray(const float *in, float shift, float *out,
                            int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = vecExp(in[i] - shift);
}

CLEAVE_CLONES void erfArray(const float *in, float *out, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = vecErf(in[i]);
}

CLEAVE_CLONES void tanhArray(const float *in, float *out, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = vecTanh(in[i]);
}

CLEAVE_CLONES void sigmoidArray(const float *in, float *out, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = applyFused(FusedCode::Sigmoid, in[i], 0.0f);
}

CLEAVE_CLONES void widenBf16Array(const uint16_t *in, float *out, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = bf16ToFloat(in[i]);
}

CLEAVE_CLONES void narrowBf16Array(const float *in, uint16_t *out, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = floatToBf16(in[i]);
}

} // namespace cleave::rt

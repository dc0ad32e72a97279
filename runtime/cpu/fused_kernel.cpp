//===- fused_kernel.cpp - The CPU kernel of fused_elementwise -------------===//

#include "core/fusion.h"
#include "cpu/cpu_kernel.h"

#include <algorithm>
#include <cstring>

namespace cleave::rt {

namespace {

/// Loads \p len elements from \p base on of a Broadcast input: the
/// multi-index of \p base over \p dims, then an odometer.
template <typename T>
void loadBroadcast(const T *in, const std::vector<int64_t> &dims,
                   const std::vector<int64_t> &strides, int64_t base,
                   int64_t len, float *out) {
  int rank = static_cast<int>(dims.size());
  int64_t idx[FusedProgram::kMaxDims];
  int64_t offset = 0, rest = base;
  for (int d = rank - 1; d >= 0; --d) {
    idx[d] = rest % dims[d];
    rest /= dims[d];
    offset += idx[d] * strides[d];
  }
  for (int64_t t = 0; t < len; ++t) {
    out[t] = static_cast<float>(in[offset]);
    for (int d = rank - 1; d >= 0; --d) {
      offset += strides[d];
      if (++idx[d] < dims[d])
        break;
      offset -= dims[d] * strides[d];
      idx[d] = 0;
    }
  }
}

/// The CPU kernel: blocks of elements through registers, each op a loop the
/// compiler vectorises.
} // namespace

KernelFn fusedCpuKernel(std::shared_ptr<const FusedProgram> fp) {
  return [fp](const KernelArgs &args) {
    constexpr int64_t kChunk = 256;
    const FusedProgram &f = *fp;
    int64_t n = f.numElements;
    int64_t chunks = (n + kChunk - 1) / kChunk;
    size_t numInputs = f.inputs.size();
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
    for (int64_t c = 0; c < chunks; ++c) {
      float regs[FusedProgram::kMaxRegisters][kChunk];
      int64_t base = c * kChunk, len = std::min(kChunk, n - base);
      for (size_t k = 0; k < numInputs; ++k) {
        if (f.inputIsBool[k]) {
          const auto *in = static_cast<const uint8_t *>(args.operands[k]);
          if (f.inputs[k] == FusedInput::Broadcast)
            loadBroadcast(in, f.dims, f.strides[k], base, len, regs[k]);
          else
            for (int64_t t = 0; t < len; ++t)
              regs[k][t] = in[f.inputs[k] == FusedInput::Scalar ? 0 : base + t];
          continue;
        }
        const float *in = static_cast<const float *>(args.operands[k]);
        switch (f.inputs[k]) {
        case FusedInput::Full:
          std::memcpy(regs[k], in + base, sizeof(float) * len);
          break;
        case FusedInput::Scalar:
          std::fill(regs[k], regs[k] + len, in[0]);
          break;
        case FusedInput::Broadcast:
          loadBroadcast(in, f.dims, f.strides[k], base, len, regs[k]);
          break;
        }
      }
      for (const FusedOp &op : f.ops) {
        float *d = regs[op.dst];
        const float *a = regs[op.a], *b = regs[op.b];
        switch (op.code) {
#define CLEAVE_FUSED_CASE(CODE)                                                \
  case FusedCode::CODE:                                                        \
    for (int64_t t = 0; t < len; ++t)                                          \
      d[t] = applyFused(FusedCode::CODE, a[t], b[t]);                          \
    break;
          CLEAVE_FUSED_CASE(Add)
          CLEAVE_FUSED_CASE(Sub)
          CLEAVE_FUSED_CASE(Mul)
          CLEAVE_FUSED_CASE(Div)
          CLEAVE_FUSED_CASE(Max)
          CLEAVE_FUSED_CASE(Min)
          CLEAVE_FUSED_CASE(Pow)
          CLEAVE_FUSED_CASE(Neg)
          CLEAVE_FUSED_CASE(Abs)
          CLEAVE_FUSED_CASE(Exp)
          CLEAVE_FUSED_CASE(Log)
          CLEAVE_FUSED_CASE(Sqrt)
          CLEAVE_FUSED_CASE(Rsqrt)
          CLEAVE_FUSED_CASE(Reciprocal)
          CLEAVE_FUSED_CASE(Tanh)
          CLEAVE_FUSED_CASE(Erf)
          CLEAVE_FUSED_CASE(Sigmoid)
          CLEAVE_FUSED_CASE(Relu)
          CLEAVE_FUSED_CASE(Identity)
#undef CLEAVE_FUSED_CASE
        case FusedCode::Select: {
          const float *c = regs[op.c];
          for (int64_t t = 0; t < len; ++t)
            d[t] = applySelect(a[t], b[t], c[t]);
          break;
        }
        }
      }
      for (size_t o = 0; o < f.outputRegisters.size(); ++o)
        std::memcpy(static_cast<float *>(args.results[o]) + base,
                    regs[f.outputRegisters[o]], sizeof(float) * len);
    }
    return Status::ok();
  };
}

} // namespace cleave::rt

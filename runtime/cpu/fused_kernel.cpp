//===- fused_kernel.cpp - The CPU kernel of fused_elementwise -------------===//

#include "core/fusion.h"
#include "cpu/cpu_kernel.h"

#include <algorithm>
#include <cstring>

namespace cleave::rt {

namespace {

/// Loads \p len elements from \p base on of a Broadcast input: the
/// multi-index of \p base over \p dims, then runs along the innermost dim
/// (one value repeated where it broadcasts, as a per-channel scale over an
/// image plane does), an odometer between them.
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
  int last = rank - 1;
  int64_t inner = dims[last], step = strides[last];
  for (int64_t t = 0; t < len;) {
    int64_t run = std::min(len - t, inner - idx[last]);
    if (step == 0)
      std::fill(out + t, out + t + run, static_cast<float>(in[offset]));
    else
      for (int64_t u = 0; u < run; ++u)
        out[t + u] = static_cast<float>(in[offset + u * step]);
    t += run;
    offset += run * step;
    idx[last] += run;
    for (int d = last; d > 0 && idx[d] == dims[d]; --d) {
      offset += strides[d - 1] - dims[d] * strides[d];
      idx[d] = 0;
      ++idx[d - 1];
    }
  }
}

/// How one op reads its operands: both as vectors, or one of a binary op's
/// as a single f32 (a scalar input: the optimizers' hyperparameters, the
/// constants of every formula), read once rather than filled per chunk.
enum class OpMode : uint8_t { Vectors, ScalarB, ScalarA };

template <typename Apply>
inline void runOp(OpMode mode, int64_t len, float *d, const float *a,
                  const float *b, float as, float bs, Apply apply) {
  switch (mode) {
  case OpMode::Vectors:
    for (int64_t t = 0; t < len; ++t)
      d[t] = apply(a[t], b[t]);
    break;
  case OpMode::ScalarB:
    for (int64_t t = 0; t < len; ++t)
      d[t] = apply(a[t], bs);
    break;
  case OpMode::ScalarA:
    for (int64_t t = 0; t < len; ++t)
      d[t] = apply(as, b[t]);
    break;
  }
}

/// What the kernel precomputes from a FusedProgram: per op its mode, per
/// input whether it is read in place (full f32) or must be filled.
struct CpuPlan {
  std::vector<OpMode> modes;
  std::vector<uint8_t> inPlace, fill;
};

CpuPlan planCpu(const FusedProgram &f) {
  CpuPlan plan;
  size_t numInputs = f.inputs.size();
  auto scalar = [&](uint8_t r) {
    return r < numInputs && f.inputs[r] == FusedInput::Scalar &&
           !f.inputIsBool[r];
  };
  plan.fill.assign(numInputs, 0);
  plan.inPlace.assign(numInputs, 0);
  for (size_t k = 0; k < numInputs; ++k)
    plan.inPlace[k] = f.inputs[k] == FusedInput::Full && !f.inputIsBool[k];
  for (const FusedOp &op : f.ops) {
    OpMode mode = OpMode::Vectors;
    if (fusedArity(op.code) == 2 && scalar(op.b) && !scalar(op.a))
      mode = OpMode::ScalarB;
    else if (fusedArity(op.code) == 2 && scalar(op.a) && !scalar(op.b))
      mode = OpMode::ScalarA;
    plan.modes.push_back(mode);
  }
  // Scalars that ops read as vectors (unary ops, select, two scalars) are
  // filled per chunk.
  for (size_t o = 0; o < f.ops.size(); ++o) {
    const FusedOp &op = f.ops[o];
    int arity = fusedArity(op.code);
    auto read = [&](uint8_t r) {
      if (r < numInputs && f.inputs[r] == FusedInput::Scalar)
        plan.fill[r] = true;
    };
    if (plan.modes[o] == OpMode::Vectors) {
      read(op.a);
      if (arity > 1)
        read(op.b);
      if (arity > 2)
        read(op.c);
    }
  }
  return plan;
}

} // namespace

/// The CPU kernel: blocks of elements through registers, each op a loop the
/// compiler vectorises. Full f32 inputs are read where they are.
KernelFn fusedCpuKernel(std::shared_ptr<const FusedProgram> fp) {
  auto plan = std::make_shared<CpuPlan>(planCpu(*fp));
  return [fp, plan](const KernelArgs &args) {
    constexpr int64_t kChunk = 256;
    const FusedProgram &f = *fp;
    const CpuPlan &cp = *plan;
    int64_t n = f.numElements;
    int64_t chunks = (n + kChunk - 1) / kChunk;
    size_t numInputs = f.inputs.size();
    // Scalar inputs' values, for the ops that read them as such.
    float scalars[FusedProgram::kMaxInputs] = {};
    for (size_t k = 0; k < numInputs; ++k)
      if (f.inputs[k] == FusedInput::Scalar && !f.inputIsBool[k])
        scalars[k] = static_cast<const float *>(args.operands[k])[0];
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
    for (int64_t c = 0; c < chunks; ++c) {
      float regs[FusedProgram::kMaxRegisters][kChunk];
      const float *reg[FusedProgram::kMaxRegisters];
      int64_t base = c * kChunk, len = std::min(kChunk, n - base);
      for (int r = 0; r < f.numRegisters; ++r)
        reg[r] = regs[r];
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
        if (cp.inPlace[k])
          reg[k] = in + base;
        else if (f.inputs[k] == FusedInput::Broadcast)
          loadBroadcast(in, f.dims, f.strides[k], base, len, regs[k]);
        else if (cp.fill[k])
          std::fill(regs[k], regs[k] + len, in[0]);
      }
      for (size_t o = 0; o < f.ops.size(); ++o) {
        const FusedOp &op = f.ops[o];
        float *d = regs[op.dst];
        const float *a = reg[op.a], *b = reg[op.b];
        float as = scalars[op.a < numInputs ? op.a : 0];
        float bs = scalars[op.b < numInputs ? op.b : 0];
        OpMode mode = cp.modes[o];
        switch (op.code) {
#define CLEAVE_FUSED_CASE(CODE)                                                \
  case FusedCode::CODE:                                                        \
    runOp(mode, len, d, a, b, as, bs,                                          \
          [](float x, float y) { return applyFused(FusedCode::CODE, x, y); }); \
    break;
          CLEAVE_FUSED_CASE(Add)
          CLEAVE_FUSED_CASE(Sub)
          CLEAVE_FUSED_CASE(Mul)
          CLEAVE_FUSED_CASE(Div)
          CLEAVE_FUSED_CASE(Max)
          CLEAVE_FUSED_CASE(Min)
          CLEAVE_FUSED_CASE(Pow)
          CLEAVE_FUSED_CASE(Eq)
          CLEAVE_FUSED_CASE(Ne)
          CLEAVE_FUSED_CASE(Lt)
          CLEAVE_FUSED_CASE(Le)
          CLEAVE_FUSED_CASE(Gt)
          CLEAVE_FUSED_CASE(Ge)
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
          const float *cnd = reg[op.c];
          for (int64_t t = 0; t < len; ++t)
            d[t] = applySelect(a[t], b[t], cnd[t]);
          break;
        }
        }
      }
      for (size_t o = 0; o < f.outputRegisters.size(); ++o) {
        const float *r = reg[f.outputRegisters[o]];
        if (f.outputIsBool[o]) {
          auto *out = static_cast<uint8_t *>(args.results[o]) + base;
          for (int64_t t = 0; t < len; ++t)
            out[t] = r[t] != 0.0f;
        } else {
          std::memcpy(static_cast<float *>(args.results[o]) + base, r,
                      sizeof(float) * len);
        }
      }
    }
    return Status::ok();
  };
}

} // namespace cleave::rt

//===- fused_kernel.cpp - The CPU kernel of fused_elementwise -------------===//

#include "core/convert.h"
#include "core/fusion.h"
#include "core/reduce_plan.h"
#include "core/vector_math.h"
#include "cpu/cpu_kernel.h"
#include "cpu/fused_jit.h"

#include <algorithm>
#include <cstring>
#include <omp.h>

namespace cleave::rt {

namespace {

/// Loads \p len elements from \p base on of a Broadcast input: the
/// multi-index of \p base over \p dims, then runs along the innermost dim
/// (one value repeated where it broadcasts, as a per-channel scale over an
/// image plane does), an odometer between them.
template <typename T, typename Widen>
void loadBroadcast(const T *in, const std::vector<int64_t> &dims,
                   const std::vector<int64_t> &strides, int64_t base,
                   int64_t len, float *out, Widen widen) {
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
      std::fill(out + t, out + t + run, widen(in[offset]));
    else
      for (int64_t u = 0; u < run; ++u)
        out[t + u] = widen(in[offset + u * step]);
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

float asFloat(float x) { return x; }
float boolToFloat(uint8_t x) { return static_cast<float>(x); }

template <typename Apply>
inline void runOp(OperandMode mode, int64_t len, float *d, const float *a,
                  const float *b, float as, float bs, Apply apply) {
  switch (mode) {
  case OperandMode::Vectors:
    for (int64_t t = 0; t < len; ++t)
      d[t] = apply(a[t], b[t]);
    break;
  case OperandMode::ScalarB:
    for (int64_t t = 0; t < len; ++t)
      d[t] = apply(a[t], bs);
    break;
  case OperandMode::ScalarA:
    for (int64_t t = 0; t < len; ++t)
      d[t] = apply(as, b[t]);
    break;
  }
}

/// What the kernel precomputes from a FusedProgram: per op its mode, per
/// input whether it is read in place (full f32) or must be filled.
struct CpuPlan {
  std::vector<OperandMode> modes;
  std::vector<uint8_t> inPlace, fill;
  /// The ops compiled (fused_jit.h), or null: interpreted.
  std::shared_ptr<const FusedJit> jit;
};

CpuPlan planCpu(const FusedProgram &f) {
  CpuPlan plan;
  size_t numInputs = f.inputs.size();
  plan.fill.assign(numInputs, 0);
  plan.inPlace.assign(numInputs, 0);
  for (size_t k = 0; k < numInputs; ++k)
    plan.inPlace[k] = f.inputs[k] == FusedInput::Full && !f.inputIsBool[k] &&
                      f.inputStorage[k] == DType::F32;
  plan.modes = operandModes(f);
  for (size_t o = 0; o < f.ops.size(); ++o) {
    // Scalars that ops read as vectors (unary ops, select, two scalars)
    // are filled per chunk.
    if (plan.modes[o] != OperandMode::Vectors)
      continue;
    const FusedOp &op = f.ops[o];
    for (uint8_t r : {op.a, op.b, op.c})
      if (r < numInputs && f.inputs[r] == FusedInput::Scalar)
        plan.fill[r] = true;
  }
  plan.jit = compileFusedJit(f);
  return plan;
}

constexpr int64_t kChunk = 256;

/// One thread's registers over a segment of at most kChunk elements.
struct Registers {
  float regs[FusedProgram::kMaxRegisters][kChunk];
  const float *reg[FusedProgram::kMaxRegisters];
};

/// The interpreter: ops over elements [from, len) of the registers, each op
/// a loop over them. Per instruction set, everything inlined (flatten).
CLEAVE_CLONES __attribute__((flatten)) void
runOps(const FusedProgram &f, const CpuPlan &cp, const float *scalars,
       int64_t from, int64_t len, Registers &r) {
  size_t numInputs = f.inputs.size();
  int64_t n = len - from;
  for (size_t o = 0; o < f.ops.size(); ++o) {
    const FusedOp &op = f.ops[o];
    float *d = r.regs[op.dst] + from;
    const float *a = r.reg[op.a] + from, *b = r.reg[op.b] + from;
    float as = scalars[op.a < numInputs ? op.a : 0];
    float bs = scalars[op.b < numInputs ? op.b : 0];
    OperandMode mode = cp.modes[o];
    switch (op.code) {
#define CLEAVE_FUSED_CASE(CODE)                                                \
  case FusedCode::CODE:                                                        \
    runOp(mode, n, d, a, b, as, bs,                                            \
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
      CLEAVE_FUSED_CASE(Log)
      CLEAVE_FUSED_CASE(Sqrt)
      CLEAVE_FUSED_CASE(Rsqrt)
      CLEAVE_FUSED_CASE(Reciprocal)
      CLEAVE_FUSED_CASE(Relu)
      CLEAVE_FUSED_CASE(Identity)
      CLEAVE_FUSED_CASE(RoundBf16)
      CLEAVE_FUSED_CASE(RoundF16)
#undef CLEAVE_FUSED_CASE
    // Unary ops read a register; these loops are compiled per instruction
    // set (core/vector_math.cpp).
    case FusedCode::Exp:
      expArray(a, 0.0f, d, n);
      break;
    case FusedCode::Tanh:
      tanhArray(a, d, n);
      break;
    case FusedCode::Erf:
      erfArray(a, d, n);
      break;
    case FusedCode::Sigmoid:
      sigmoidArray(a, d, n);
      break;
    case FusedCode::Select: {
      const float *cnd = r.reg[op.c] + from;
      for (int64_t t = 0; t < n; ++t)
        d[t] = applySelect(a[t], b[t], cnd[t]);
      break;
    }
    }
  }
}

/// Runs the chain over elements [base, base + len) (len <= kChunk): loads
/// the inputs (full f32 ones read where they are), runs the ops, writes the
/// outputs. Afterwards r.reg[k] holds the values of every register an
/// output or a reduction reads (compiled ops keep the others in vector
/// registers).
/// Per instruction set, everything it calls inlined (flatten): the ops'
/// loops are its time.
CLEAVE_CLONES __attribute__((flatten)) void
evalSegment(const FusedProgram &f, const CpuPlan &cp, const KernelArgs &args,
            const float *scalars, int64_t base, int64_t len, Registers &r) {
  size_t numInputs = f.inputs.size();
  for (int k = 0; k < f.numRegisters; ++k)
    r.reg[k] = r.regs[k];
  for (size_t k = 0; k < numInputs; ++k) {
    float *dst = r.regs[k];
    if (f.inputIsBool[k]) {
      const auto *in = static_cast<const uint8_t *>(args.operands[k]);
      if (f.inputs[k] == FusedInput::Broadcast)
        loadBroadcast(in, f.dims, f.strides[k], base, len, dst, boolToFloat);
      else
        for (int64_t t = 0; t < len; ++t)
          dst[t] = in[f.inputs[k] == FusedInput::Scalar ? 0 : base + t];
      continue;
    }
    if (DType d = f.inputStorage[k]; d != DType::F32) {
      // Read by a widening cast, whose operand has the chain's shape. One
      // loop per type: a type test inside kept the loop scalar.
      const auto *in = static_cast<const uint16_t *>(args.operands[k]) + base;
      if (d == DType::BF16)
        widenBf16Array(in, dst, len);
      else
        for (int64_t t = 0; t < len; ++t)
          dst[t] = halfToFloat(in[t]);
      continue;
    }
    const float *in = static_cast<const float *>(args.operands[k]);
    if (cp.inPlace[k])
      r.reg[k] = in + base;
    else if (f.inputs[k] == FusedInput::Broadcast)
      loadBroadcast(in, f.dims, f.strides[k], base, len, dst, asFloat);
    else if (cp.fill[k])
      std::fill(dst, dst + len, in[0]);
  }
  // The compiled ops take the whole vectors, the interpreter the rest.
  int64_t from = 0;
  if (cp.jit) {
    from = len / FusedJit::kLanes * FusedJit::kLanes;
    if (from > 0)
      cp.jit->run(r.reg, scalars, from);
  }
  if (from < len)
    runOps(f, cp, scalars, from, len, r);
  for (size_t o = 0; o < f.outputRegisters.size(); ++o) {
    const float *v = r.reg[f.outputRegisters[o]];
    if (f.outputIsBool[o]) {
      auto *out = static_cast<uint8_t *>(args.results[o]) + base;
      for (int64_t t = 0; t < len; ++t)
        out[t] = v[t] != 0.0f;
    } else if (DType d = f.outputStorage[o]; d != DType::F32) {
      // Already rounded (RoundBf16 / RoundF16): the narrowing is exact.
      auto *out = static_cast<uint16_t *>(args.results[o]) + base;
      if (d == DType::BF16)
        narrowBf16Array(v, out, len);
      else
        for (int64_t t = 0; t < len; ++t)
          out[t] = floatToHalf(v[t]);
    } else {
      std::memcpy(static_cast<float *>(args.results[o]) + base, v,
                  sizeof(float) * len);
    }
  }
}

/// A reduction's additions, lane by lane (each lane's own order), compiled
/// per instruction set: the OpenMP body that calls them is not, and its
/// baseline loops took as long as the chain that feeds them.
CLEAVE_CLONES void addLanes(double *acc, const float *v, int64_t len) {
  for (int64_t l = 0; l < len; ++l)
    acc[l] += static_cast<double>(v[l]);
}

CLEAVE_CLONES void addSplitLanes(double *part, const float *v, int64_t len) {
  addSplit(part, v, len);
}

/// A chain ending in reductions, walked as the reduce kernels walk their
/// operand (reduce_plan.h) and adding in their order, so that the results
/// are the separate kernels' bit for bit: each output's elements are
/// evaluated in segments along its runs, every element exactly once.
void runReductions(const FusedProgram &f, const CpuPlan &cp,
                   const ReduceGeometry &g, const KernelArgs &args,
                   const float *scalars) {
  size_t numReductions = f.reductions.size();
  size_t first = f.outputRegisters.size();
  auto finish = [&](size_t k, double acc) {
    return static_cast<float>(
        f.reductions[k].mean ? acc / static_cast<double>(g.reduceCount) : acc);
  };
  bool parallel = f.numElements > kParallelThreshold;
  if (g.lanes > 0) {
    // Each task walks a strip of lanes down every reduced row, as wide as
    // the threads allow (up to kStrip), a segment of the registers' width
    // at a time: each row's strip is one contiguous read, rather than
    // 256-lane strips that revisit every row. Each lane adds its rows in
    // order either way.
    constexpr int64_t kStrip = 4 * kChunk;
    int64_t blocks = g.numOutputs / g.lanes;
    int64_t threads = parallel ? std::max(1, omp_get_max_threads()) : 1;
    int64_t perThread = (g.lanes * blocks + threads - 1) / threads;
    int64_t strip = std::clamp<int64_t>(
        (perThread + kChunk - 1) / kChunk * kChunk, kChunk, kStrip);
    int64_t chunks = (g.lanes + strip - 1) / strip;
#pragma omp parallel for schedule(static) if (parallel && blocks * chunks > 1)
    for (int64_t t = 0; t < blocks * chunks; ++t) {
      Registers r;
      int64_t block = t / chunks, lane0 = (t % chunks) * strip;
      int64_t width = std::min(strip, g.lanes - lane0);
      // Only the lanes and reductions in use are zeroed (up to 64 KiB).
      double acc[FusedProgram::kMaxReductions][kStrip];
      for (size_t k = 0; k < numReductions; ++k)
        std::fill(acc[k], acc[k] + width, 0.0);
      walkReduced(g, keptBase(g, block) + lane0, [&](int64_t offset) {
        for (int64_t at = 0; at < width; at += kChunk) {
          int64_t len = std::min(kChunk, width - at);
          evalSegment(f, cp, args, scalars, offset + at, len, r);
          for (size_t k = 0; k < numReductions; ++k)
            addLanes(acc[k] + at, r.reg[f.reductions[k].reg], len);
        }
      });
      for (size_t k = 0; k < numReductions; ++k) {
        float *dst = static_cast<float *>(args.results[first + k]) +
                     block * g.lanes + lane0;
        for (int64_t l = 0; l < width; ++l)
          dst[l] = finish(k, acc[k][l]);
      }
    }
    return;
  }
  int64_t run = g.innerRun;
  bool split = run >= kSplitSums;
#pragma omp parallel for schedule(static) if (parallel && g.numOutputs > 1)
  for (int64_t o = 0; o < g.numOutputs; ++o) {
    Registers r;
    double part[FusedProgram::kMaxReductions][kSplitSums] = {};
    walkReduced(g, keptBase(g, o), [&](int64_t offset) {
      for (int64_t at = 0; at < run; at += kChunk) {
        int64_t len = std::min(kChunk, run - at);
        evalSegment(f, cp, args, scalars, offset + at, len, r);
        for (size_t k = 0; k < numReductions; ++k) {
          const float *v = r.reg[f.reductions[k].reg];
          // Element i of the run into part[i % kSplitSums] (kChunk is a
          // multiple), else one sum in order, as runReduce.
          if (split)
            addSplitLanes(part[k], v, len);
          else
            for (int64_t t = 0; t < len; ++t)
              part[k][0] += static_cast<double>(v[t]);
        }
      }
    });
    for (size_t k = 0; k < numReductions; ++k)
      static_cast<float *>(args.results[first + k])[o] =
          finish(k, split ? combineSplit(part[k]) : part[k][0]);
  }
}

} // namespace

/// The CPU kernel: blocks of elements through registers, each op a loop the
/// compiler vectorises; chains that end in reductions walk their reduction.
KernelFn fusedCpuKernel(std::shared_ptr<const FusedProgram> fp) {
  auto plan = std::make_shared<CpuPlan>(planCpu(*fp));
  std::shared_ptr<ReduceGeometry> geometry;
  if (!fp->reductions.empty()) {
    std::vector<bool> reduced(fp->shape.size(), false);
    for (int64_t axis : fp->reduceAxes)
      reduced[axis] = true;
    geometry =
        std::make_shared<ReduceGeometry>(planReduction(fp->shape, reduced));
  }
  return [fp, plan, geometry](const KernelArgs &args) {
    const FusedProgram &f = *fp;
    int64_t n = f.numElements;
    size_t numInputs = f.inputs.size();
    // Scalar inputs' values, for the ops that read them as such.
    float scalars[FusedProgram::kMaxInputs] = {};
    for (size_t k = 0; k < numInputs; ++k)
      if (f.inputs[k] == FusedInput::Scalar && !f.inputIsBool[k])
        scalars[k] = static_cast<const float *>(args.operands[k])[0];
    if (geometry) {
      runReductions(f, *plan, *geometry, args, scalars);
      return Status::ok();
    }
    int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
    for (int64_t c = 0; c < chunks; ++c) {
      Registers r;
      int64_t base = c * kChunk;
      evalSegment(f, *plan, args, scalars, base, std::min(kChunk, n - base), r);
    }
    return Status::ok();
  };
}

} // namespace cleave::rt

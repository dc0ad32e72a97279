//===- fused_jit.h - Fused chains compiled to AVX-512 at load ---*- C++ -*-===//
//
// The CPU's fused kernel interprets a chain op by op over segments of 256
// elements, each op a pass through L1 (about 0.1 ns an element an op on
// this machine's cores): a GELU chain of 17 ops spent more time in those
// passes than in its erf. When the machine has AVX-512, each chain's ops
// are instead compiled (Xbyak) into one loop over 16 lanes that keeps its
// values in vector registers, storing only the registers the outputs and
// reductions read. Every op is the instruction sequence of the element
// function in core/fused_ops.h and core/vector_math.h (no FMA: the runtime
// is built with -ffp-contract=off), so the values are the interpreter's bit
// for bit, NaNs' payloads aside. Chains with an op it does not compile
// (pow, log, the f16 rounding) or more live values than registers run as
// before.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_CPU_FUSED_JIT_H
#define CLEAVE_RUNTIME_CPU_FUSED_JIT_H

#include "core/fusion.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace cleave::rt {

/// A chain's ops as machine code: registers 0..inputs-1 are read from
/// reg[k] (the interpreter's loaded inputs; scalars that ops read as such
/// from scalars[k]); the registers outputs and reductions read are written
/// to reg[k], a register array of the segment.
class FusedJit {
public:
  virtual ~FusedJit() = default;
  /// Elements [0, n) of the segment, n a multiple of kLanes.
  virtual void run(const float *const *reg, const float *scalars,
                   int64_t n) const = 0;
  static constexpr int64_t kLanes = 16;
};

/// How one op reads its operands: both as vectors, or one of a binary op's
/// as a single f32 (a scalar input: the optimizers' hyperparameters, the
/// constants of every formula), read once rather than filled per chunk.
enum class OperandMode : uint8_t { Vectors, ScalarB, ScalarA };

/// Per op of \p program, its mode: the interpreter's and the compiled
/// loop's alike.
std::vector<OperandMode> operandModes(const FusedProgram &program);

/// The compiled chain, or null where the machine lacks AVX-512, the chain
/// has an op this does not compile or more live values than registers, or
/// $CLEAVE_NO_JIT is set (to compare).
std::unique_ptr<FusedJit> compileFusedJit(const FusedProgram &program);

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_CPU_FUSED_JIT_H

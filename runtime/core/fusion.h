//===- fusion.h - Merges chains of elementwise instructions -----*- C++ -*-===//
//
// A run of consecutive f32 elementwise instructions over one shape (the
// optimizer update, GELU, residual and scaling chains) becomes one
// instruction that reads each input once, keeps the chain's intermediates in
// registers and writes only the values used after it: one pass over memory
// instead of one per op, and intermediates never touch the arena. Both
// backends run the same fused program (the CPU in blocks of elements, CUDA
// one thread per element), so the rewrite is checked on every CPU test: the
// CPU's fused results are bit-identical to the separate kernels'.
//
// Runs are consecutive in the plan's order, so the plan's buffer
// assignments stay valid: writing a value later inside its own lifetime is
// safe, and an input whose bytes a chain output reuses must cover exactly
// the same bytes (element i is read before it is written, by the same
// thread) or none of them.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_CORE_FUSION_H
#define CLEAVE_RUNTIME_CORE_FUSION_H

#include "cleave/runtime/types.h"
#include "core/fused_ops.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace cleave::rt {

struct LoadedProgram;

struct FusedOp {
  FusedCode code;
  uint8_t dst, a, b, c;
};

/// How a fused input is read for result element e.
enum class FusedInput : uint8_t {
  Full,      ///< the result's shape: element e
  Scalar,    ///< one element, for every e
  Broadcast, ///< dims of 1 broadcast: offset from e's index (dims, strides)
};

/// A sum or mean of one register over FusedProgram::reduceAxes.
struct FusedReduction {
  uint8_t reg;
  bool mean;
};

/// One fused instruction: registers 0..inputs-1 are loaded from the
/// operands, each op writes a new register, and the outputs are stored from
/// their registers.
struct FusedProgram {
  static constexpr int kMaxReductions = 8;
  static constexpr int kMaxInputs = 16;
  static constexpr int kMaxOutputs = 8;
  static constexpr int kMaxRegisters = 48;
  static constexpr int kMaxDims = 6;
  int64_t numElements = 0;
  int numRegisters = 0;
  std::vector<FusedInput> inputs;
  /// Per input: bool (1 byte, loaded as 0 or 1: select's condition) rather
  /// than f32.
  std::vector<uint8_t> inputIsBool;
  /// Per input and per output: stored in bf16 or f16 (mixed precision's
  /// values, widened when loaded and rounded when stored), else F32 (bool
  /// ones are marked by inputIsBool / outputIsBool). A half input is read
  /// by a widening cast, so it has the chain's shape (Full).
  std::vector<DType> inputStorage, outputStorage;
  /// The result's dims, coalesced where every Broadcast input allows (outer
  /// first), and per input the element stride along each (Broadcast inputs
  /// only; empty for the others).
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> strides;
  std::vector<FusedOp> ops;
  std::vector<uint8_t> outputRegisters;
  /// Per output: bool (a comparison's 0 or 1, written as one byte) rather
  /// than f32.
  std::vector<uint8_t> outputIsBool;
  /// Reductions the chain ends in (a BatchNorm's statistics, its backward's
  /// sums), all over the same sorted dims of the chain's \p shape; their
  /// results follow the outputs. Only the CPU backend asks for them.
  std::vector<FusedReduction> reductions;
  std::vector<int64_t> shape, reduceAxes;
};

/// Per value: how many instruction operands and program outputs name it.
std::vector<int> useCounts(const LoadedProgram &program);

/// Per value: whether a value that no instruction produces (a view: a
/// reshape shares its value's bytes) is read while it holds the value's
/// bytes (the value is among the latest writers of the view's bytes before
/// the read). A fusion that stops writing a value must not stop writing one
/// whose bytes are read under another name.
std::vector<bool> viewedValues(const LoadedProgram &program);

/// Rewrites chains of fusable instructions of \p program into
/// "fused_elementwise" instructions (ProgramInstruction::fused, origin -1);
/// each backend brings its kernel for them. With \p reductions, sums and
/// means of a chain's values join it (the backend's fused kernel must
/// compute them). Does nothing when $CLEAVE_NO_FUSION is set (to compare).
void fuseElementwise(LoadedProgram &program, bool reductions = false);

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_CORE_FUSION_H

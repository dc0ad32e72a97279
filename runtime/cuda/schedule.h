//===- schedule.h - Steps, fusions and waits of a GPU program ---*- C++ -*-===//
//
// Private to the CUDA backend, and pure C++ (no CUDA), so that the unit
// tests check it on machines without a GPU. It decides, from the program
// alone, what the executor enqueues: which matmul + bias-add pairs become
// one cuBLASLt call, and before which step the compute stream must wait for
// which collective (they run on a communication stream).
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_CUDA_SCHEDULE_H
#define CLEAVE_RUNTIME_CUDA_SCHEDULE_H

#include "core/program.h"

#include <functional>
#include <vector>

namespace cleave::rt::cuda {

struct ScheduledStep {
  /// The (first) instruction.
  size_t index = 0;
  /// Set when the step is instruction index (a matmul) and index + 1 (an
  /// add of a bias over the matmul's rows) as one call: the bias's position
  /// among the add's operands.
  int biasOperand = -1;
  /// Value ids: the instruction's, or for a fused pair: a, b, bias, the
  /// add's two operands; the add's result, the matmul's result.
  std::vector<int32_t> operands, results;
  bool collective = false;
  /// For a collective: its number among the program's collectives.
  int collectiveIndex = -1;
  /// Collectives the compute stream waits for before this step.
  std::vector<int> waitFor;
};

struct Schedule {
  std::vector<ScheduledStep> steps;
  /// Collectives still running after the last step (joined at the end).
  std::vector<int> finalWaits;
};

/// Kernels that run on the communication stream.
bool isCollective(const std::string &kernel);

/// Whether instruction \p add only adds a bias (a vector over the last dim,
/// broadcast over the rows) to the result of matmul \p mm, which nothing
/// else reads (under its id or a view), and whose buffers the fused call
/// can use (no byte of the result shared with an operand or the bias; one
/// cuBLASLt call without batches). Returns the bias's position in the add,
/// or -1.
int biasOperand(const LoadedProgram &program, const ProgramInstruction &mm,
                const ProgramInstruction &add, const std::vector<int> &uses,
                const std::vector<bool> &viewed);

/// The steps of \p program. \p fuseBias allows matmul + bias fusion, for
/// biases \p biasAligned accepts (the device address must suit cuBLASLt).
Schedule schedule(const LoadedProgram &program, bool fuseBias,
                  const std::function<bool(int32_t)> &biasAligned);

} // namespace cleave::rt::cuda

#endif // CLEAVE_RUNTIME_CUDA_SCHEDULE_H

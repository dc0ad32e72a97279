//===- executor.h - Executes a plan Program on the CPU ----------*- C++ -*-===//
//
// The runtime's public API. No MLIR or LLVM header may be included from
// runtime/: the plan (plan.proto) is the only contract with the compiler.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_EXECUTOR_H
#define CLEAVE_RUNTIME_EXECUTOR_H

#include "cleave/runtime/types.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace cleave::plan {
class Program;
} // namespace cleave::plan

namespace cleave::rt {

class Communicator;
class StepProfiler;

/// A loaded program: kernels bound, arena allocated, ready to run repeatedly.
class Executor {
public:
  /// Validates \p program (kernel names, value ids, types, arena bounds,
  /// constant sizes) and binds its kernels. On failure returns an error naming
  /// the offending instruction or value.
  ///
  /// Collective instructions run over \p comm (not owned; it must outlive
  /// the executor); their mesh axes and group sizes are checked against it
  /// here. Without one, the program runs alone on a mesh of shape [1], where
  /// every group has one member.
  static Status create(const plan::Program &program,
                       std::unique_ptr<Executor> *result,
                       Communicator *comm = nullptr);
  ~Executor();

  /// Runs the program. \p inputs must match the program's inputs in order,
  /// dtype and shape (a mismatch is an error naming the input). Fills
  /// \p outputs in the program's output order, reusing the storage of the
  /// tensors it already holds (kernels write most outputs there directly,
  /// so after a failed run their contents are unspecified).
  ///
  /// Each (input, output) pair of \p donated (pairs canDonate accepted)
  /// writes the output over that input's buffer instead, leaving
  /// (*outputs)[output] untouched: the caller then holds the new value in
  /// its input tensor, as it would after moving the output there.
  Status run(const std::vector<HostTensor> &inputs,
             std::vector<HostTensor> *outputs,
             const std::vector<std::pair<size_t, size_t>> &donated = {});

  /// Whether output \p output may be written over input \p input's buffer
  /// during a run (an optimizer's new state over its old one): the
  /// instruction producing it is a fused elementwise chain without
  /// reductions that reads the input element for element, is the input's
  /// last reader, and writes no output straight from an input register; the
  /// output is written directly (no view of it read later) with the input's
  /// type. Writing in place saves the read-for-ownership of a second buffer
  /// per element.
  bool canDonate(size_t input, size_t output) const;
  /// Whether the last run failed before any kernel wrote over an input's
  /// buffer (a donated output): the caller's inputs hold what they held
  /// before it, so a failed step can be retried or skipped.
  bool lastRunKeptInputs() const;

  /// Times every instruction of each later run into \p profiler (null:
  /// stop); it must outlive the runs.
  void setProfiler(StepProfiler *profiler);

  const std::vector<std::string> &inputNames() const;
  const std::vector<std::string> &outputNames() const;
  /// Declared dtype and shape of input \p i.
  DType inputDType(size_t i) const;
  const std::vector<int64_t> &inputShape(size_t i) const;

  struct Impl;

private:
  explicit Executor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_EXECUTOR_H

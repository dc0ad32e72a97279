//===- runner.h - Runs a train-step program on a backend --------*- C++ -*-===//
//
// The trainer drives a program through this interface so that state can
// stay where the backend computes: the CUDA backend keeps parameters,
// buffers and optimizer state on the GPU across steps and copies them to the
// host only when asked (checkpoints, dumps); the CPU backend keeps them in
// host memory.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_RUNNER_H
#define CLEAVE_RUNTIME_RUNNER_H

#include "cleave/runtime/executor.h"

#include <memory>
#include <string>
#include <vector>

namespace cleave::rt {

class Communicator;
class StepProfiler;

enum class Backend { Cpu, Cuda, Auto };
enum class Precision { F32, BF16 };

struct BackendOptions {
  Backend backend = Backend::Cpu;
  /// bf16: matmuls take bf16 operands and accumulate in f32; parameters,
  /// optimizer state and reductions stay f32. CUDA only.
  Precision precision = Precision::F32;
};

/// Parses "cpu" / "cuda" / "auto" and "f32" / "bf16" (errors name the flag).
Status parseBackend(const std::string &text, Backend *out);
Status parsePrecision(const std::string &text, Precision *out);
const char *backendName(Backend backend);

/// A loaded program that runs repeatedly. Inputs keep their value across
/// runs until set again; a carried input (carry()) takes the value of its
/// output after every run, without passing through the host.
class StepRunner {
public:
  virtual ~StepRunner() = default;
  /// The backend actually running (Auto resolved).
  virtual Backend backend() const = 0;
  /// After each run, output \p output becomes input \p input. Both must
  /// have the same dtype and shape.
  virtual Status carry(size_t input, size_t output) = 0;
  /// Sets input \p i (dtype and shape must match the program's); the CPU
  /// backend takes the bytes over.
  virtual Status setInput(size_t i, HostTensor value) = 0;
  virtual Status run() = 0;
  /// After a failed run: whether every input still holds what it held
  /// before it (the step's state untouched). Backends that cannot tell
  /// say no.
  virtual bool keptInputs() const { return false; }
  /// Copies input \p i (after a run: a carried input's new value).
  virtual Status getInput(size_t i, HostTensor *value) = 0;
  /// Moves input \p i out (another program takes the state over); it must
  /// be set again before the next run. Backends that cannot give up its
  /// memory copy it.
  virtual Status takeInput(size_t i, HostTensor *value) {
    return getInput(i, value);
  }
  /// Copies output \p o of the last run.
  virtual Status getOutput(size_t o, HostTensor *value) = 0;

  /// Times each instruction of later runs into \p profiler (profile.h);
  /// an error where the backend cannot.
  virtual Status setProfiler(StepProfiler *profiler) {
    (void)profiler;
    return Status::error("the " + std::string(backendName(backend())) +
                         " backend has no per-kernel profile");
  }

  virtual size_t numInputs() const = 0;
  virtual DType inputDType(size_t i) const = 0;
  virtual const std::vector<int64_t> &inputShape(size_t i) const = 0;
};

/// Loads \p program on the backend \p options ask for: Cuda fails with a
/// clear message where no GPU or no CUDA backend is present; Auto picks CUDA
/// when a GPU is present and the CPU otherwise. Collectives run over \p comm
/// (see Executor::create).
Status createRunner(const plan::Program &program, Communicator *comm,
                    const BackendOptions &options,
                    std::unique_ptr<StepRunner> *result);

/// Why the CUDA backend cannot run here ("" when it can): no plugin, no
/// driver, no GPU.
std::string cudaUnavailableReason();

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_RUNNER_H

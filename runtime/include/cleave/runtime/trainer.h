//===- trainer.h - Runs a compiled training bundle --------------*- C++ -*-===//
//
// A bundle is a directory: plan.pb (the versioned plan: the train-step
// program, the tensor table, how it was compiled) and weights/ (the initial
// value of each parameter and buffer as .npy). The trainer owns the training
// state (parameters, buffers, optimizer state, step counter), feeds each step
// its batch and writes what --dump asks for.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_TRAINER_H
#define CLEAVE_RUNTIME_TRAINER_H

#include "cleave/runtime/executor.h"

#include <cstdint>
#include <ostream>
#include <string>

namespace cleave::plan {
class Plan;
} // namespace cleave::plan

namespace cleave::rt {

class Communicator;

/// The plan format this runtime reads and the compiler writes.
constexpr uint32_t kPlanFormatVersion = 2;
/// File names inside a bundle directory.
constexpr const char *kBundlePlanFile = "plan.pb";
constexpr const char *kBundleWeightsDir = "weights";

/// Reads and checks BUNDLE/plan.pb (presence, parse, format version).
Status loadBundlePlan(const std::string &bundleDir, plan::Plan *plan);

struct TrainOptions {
  std::string bundleDir;
  int64_t steps = 1;
  /// NAME.npy per model input, or folders step-0, step-1, ... of them.
  std::string inputsDir;
  /// Where loss.npy, parameters, buffers and last gradients go (if set).
  std::string dumpDir;
  /// Progress: a line every this many steps (0: choose from --steps).
  int64_t logEvery = 0;
  std::ostream *log = nullptr;
  /// This process's rank of the bundle's mesh (tensor parallelism); null:
  /// one process. Each rank loads its slices of the weights; rank 0 logs and
  /// writes the dumps (full, gathered tensors).
  Communicator *comm = nullptr;
};

/// Runs \p options.steps training steps. Errors name the file or tensor.
Status train(const TrainOptions &options);

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_TRAINER_H

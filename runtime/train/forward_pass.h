//===- forward_pass.h - The bundle's forward passes on the step's state ---===//
//
// Model.forward, Model.evaluate and `cleave run --eval` run the bundle's
// "forward" (training mode) or "forward_eval" program with the train
// step's own state chunks: the compiler split both alike, so each rank's
// chunks are fed as they are, with no collective.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_TRAIN_FORWARD_PASS_H
#define CLEAVE_RUNTIME_TRAIN_FORWARD_PASS_H

#include "cleave/runtime/data.h"
#include "cleave/runtime/runner.h"
#include "plan/plan.pb.h"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace cleave::rt {

/// One forward program, the model inputs it takes, and its runner, made
/// on first use.
struct ForwardPass {
  const plan::Program *program = nullptr;
  std::vector<InputSlot> inputs;
  std::unique_ptr<StepRunner> runner;
};

/// Where the step holds the state a binding names (its input index).
using StateIndex = std::function<std::optional<size_t>(const plan::Binding &)>;

/// The model inputs \p program takes (every INPUT binding), whole: those
/// split over \p dp data-parallel ranks at dp times their rows.
std::vector<InputSlot> forwardInputsOf(const plan::Program &program,
                                       int64_t dp);

/// Where this rank sits on the data-parallel axis: its index of \p dp.
struct DpPlace {
  int64_t rank = 0, dp = 1;
};

/// Runs \p pass on \p batch: its inputs from the batch (this rank's rows
/// of those split over dp, by \p place), its weights and buffers copied
/// from \p step's inputs (\p stateIndex), dropout drawing as step
/// \p stepNumber; the model's outputs (OUTPUT bindings) by name, whole.
Status runForwardPass(ForwardPass &pass, Communicator *comm,
                      const BackendOptions &backend,
                      const std::map<std::string, HostTensor> &batch,
                      StepRunner &step, const StateIndex &stateIndex,
                      int64_t stepNumber, DpPlace place,
                      std::vector<std::pair<std::string, HostTensor>> *outputs);

/// The loss of one batch from the model's first output \p first:
/// \p lossKind "auto" (it is the loss), "cross_entropy" (over its last axis
/// against the batch's "labels", labels -100 ignored, the mean over the
/// others) or "mse" (against "labels"), as the train step appends them.
Status batchLoss(const std::string &lossKind,
                 const std::map<std::string, HostTensor> &batch,
                 const HostTensor &first, double *loss);

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_TRAIN_FORWARD_PASS_H

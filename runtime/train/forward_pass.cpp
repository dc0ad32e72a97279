//===- forward_pass.cpp - The bundle's forward passes on the step's state -===//

#include "forward_pass.h"

#include "cleave/runtime/store.h"
#include "cleave/runtime/trainer.h"
#include "cleave/runtime/types.h"

#include <algorithm>
#include <cmath>

namespace cleave::rt {

namespace pb = ::cleave::plan;
using Batch = std::map<std::string, HostTensor>;

std::vector<InputSlot> forwardInputsOf(const pb::Program &program, int64_t dp) {
  std::vector<InputSlot> out;
  for (int i = 0; i < program.input_bindings_size(); ++i) {
    const pb::Binding &b = program.input_bindings(i);
    if (b.role() != pb::Binding::INPUT)
      continue;
    const pb::TensorType &t = program.values(program.inputs(i)).type();
    out.push_back({b.name(), fromPlan(t.dtype()),
                   globalInputShape(program, i, dp), false});
  }
  return out;
}

namespace {

/// The forward program's input \p i from the batch, the step's state or
/// the step count.
Status forwardInput(const pb::Binding &b, size_t i, const Batch &batch,
                    StepRunner &step, const StateIndex &stateIndex,
                    int64_t stepNumber, DpPlace place, StepRunner &runner) {
  auto fits = [&](const HostTensor &t) {
    return t.dtype == runner.inputDType(i) && t.shape == runner.inputShape(i);
  };
  switch (b.role()) {
  case pb::Binding::INPUT: {
    auto it = batch.find(b.name());
    if (it == batch.end())
      return Status::error("the batch has no '" + b.name() + "'");
    // Split over dp: this rank's rows (the batch was checked whole).
    HostTensor value = it->second;
    if (b.has_split_dim() && place.dp > 1 && b.split_dim() >= 0 &&
        b.split_dim() < static_cast<int64_t>(value.shape.size()) &&
        value.shape[b.split_dim()] % place.dp == 0)
      value = chunkOf(value, splitOf(b), place.rank, place.dp);
    if (!fits(value))
      return Status::error(
          "batch input '" + b.name() + "' is " +
          describeTensor(it->second.dtype, it->second.shape) +
          "; the forward pass needs " +
          describeTensor(runner.inputDType(i), runner.inputShape(i)) +
          (place.dp > 1 ? " on each of " + std::to_string(place.dp) +
                              " data-parallel ranks"
                        : ""));
    return runner.setInput(i, std::move(value));
  }
  case pb::Binding::PARAMETER:
  case pb::Binding::BUFFER: {
    std::optional<size_t> at = stateIndex(b);
    HostTensor value;
    if (!at)
      return Status::error("the forward pass reads '" + b.name() +
                           "', which the train step does not hold");
    if (Status s = step.getInput(*at, &value); !s)
      return s;
    if (!fits(value))
      return Status::error("the forward pass holds '" + b.name() +
                           "' split otherwise than the train step");
    return runner.setInput(i, std::move(value));
  }
  case pb::Binding::STEP: {
    HostTensor counter = HostTensor::zeros(DType::I64, {});
    *counter.data<int64_t>() = stepNumber;
    return runner.setInput(i, std::move(counter));
  }
  default:
    return Status::error("the forward pass takes '" + b.name() +
                         "', which is no input, weight or step");
  }
}

} // namespace

Status
runForwardPass(ForwardPass &pass, Communicator *comm,
               const BackendOptions &backend, const Batch &batch,
               StepRunner &step, const StateIndex &stateIndex,
               int64_t stepNumber, DpPlace place,
               std::vector<std::pair<std::string, HostTensor>> *outputs) {
  const pb::Program &program = *pass.program;
  if (!pass.runner)
    if (Status s = createRunner(program, comm, backend, &pass.runner); !s)
      return s;
  const std::vector<InputSlot> &inputs = pass.inputs;
  for (const auto &[name, value] : batch)
    if (std::none_of(inputs.begin(), inputs.end(),
                     [&](const InputSlot &in) { return in.name == name; }))
      return Status::error("the batch has '" + name +
                           "', which is not an input of the forward pass");
  for (int i = 0; i < program.input_bindings_size(); ++i)
    if (Status s = forwardInput(program.input_bindings(i), i, batch, step,
                                stateIndex, stepNumber, place, *pass.runner);
        !s)
      return s;
  if (Status s = pass.runner->run(); !s)
    return s;
  // The model's outputs; a forward writes no state (training-mode
  // BatchNorm's new running statistics are dropped).
  outputs->clear();
  for (int o = 0; o < program.output_bindings_size(); ++o) {
    if (program.output_bindings(o).role() != pb::Binding::OUTPUT)
      continue;
    HostTensor value;
    if (Status s = pass.runner->getOutput(o, &value); !s)
      return s;
    outputs->emplace_back(program.output_bindings(o).name(), std::move(value));
  }
  return Status::ok();
}

namespace {

/// Cross-entropy over the last axis of \p logits (f32) against \p labels
/// (i64, the logits' shape without it), labels -100 ignored.
Status crossEntropy(const HostTensor &logits, const HostTensor &labels,
                    double *loss) {
  if (logits.shape.empty() || labels.dtype != DType::I64 ||
      std::vector<int64_t>(logits.shape.begin(), logits.shape.end() - 1) !=
          labels.shape)
    return Status::error(
        "the labels are " + describeTensor(labels.dtype, labels.shape) +
        "; cross-entropy of " + describeTensor(logits.dtype, logits.shape) +
        " needs int64 labels of its shape without the "
        "classes (its last dimension)");
  int64_t classes = logits.shape.back();
  const float *x = logits.data<float>();
  const int64_t *y = labels.data<int64_t>();
  double sum = 0;
  int64_t counted = 0;
  for (int64_t row = 0; row < labels.numElements(); ++row) {
    if (y[row] == -100)
      continue;
    if (y[row] < 0 || y[row] >= classes)
      return Status::error("label " + std::to_string(y[row]) +
                           " is outside the " + std::to_string(classes) +
                           " classes");
    const float *r = x + row * classes;
    double top = *std::max_element(r, r + classes), exps = 0;
    for (int64_t c = 0; c < classes; ++c)
      exps += std::exp(r[c] - top);
    sum += std::log(exps) + top - r[y[row]];
    ++counted;
  }
  *loss = counted ? sum / counted : NAN;
  return Status::ok();
}

} // namespace

Status batchLoss(const std::string &lossKind, const Batch &batch,
                 const HostTensor &first, double *loss) {
  if (first.dtype != DType::F32)
    return Status::error("the model's first output is " +
                         describeTensor(first.dtype, first.shape) +
                         ", not float32");
  if (lossKind == "auto" || lossKind.empty()) {
    if (first.numElements() != 1)
      return Status::error("the model's first output is " +
                           describeTensor(first.dtype, first.shape) +
                           ", not its loss");
    *loss = *first.data<float>();
    return Status::ok();
  }
  auto labels = batch.find("labels");
  if (labels == batch.end())
    return Status::error("the batch has no 'labels' (the loss is appended)");
  if (lossKind == "cross_entropy")
    return crossEntropy(first, labels->second, loss);
  if (labels->second.dtype != DType::F32 || labels->second.shape != first.shape)
    return Status::error(
        "the labels are " +
        describeTensor(labels->second.dtype, labels->second.shape) +
        "; mean squared error needs the output's " +
        describeTensor(first.dtype, first.shape));
  const float *p = first.data<float>(), *t = labels->second.data<float>();
  double sum = 0;
  for (int64_t i = 0; i < first.numElements(); ++i)
    sum += (double(p[i]) - t[i]) * (double(p[i]) - t[i]);
  *loss = sum / std::max<int64_t>(1, first.numElements());
  return Status::ok();
}

} // namespace cleave::rt

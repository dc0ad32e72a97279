//===- runner.cpp - The CPU backend's StepRunner --------------------------===//

#include "cpu/runner.h"

namespace cleave::rt {

namespace {

/// Runs on the host through the Executor; state moves between runs instead
/// of being copied.
class CpuRunner final : public StepRunner {
public:
  // Inputs are allocated when first needed, not here: the trainer loads
  // the state into tensors of its own and moves them in, and zeros made
  // here first would double a rank's weights while it loads.
  explicit CpuRunner(std::unique_ptr<Executor> executor)
      : executor_(std::move(executor)) {
    inputs_.resize(executor_->inputNames().size());
  }
  Backend backend() const override { return Backend::Cpu; }
  Status carry(size_t input, size_t output) override {
    // Where the kernel can write the new value over the old one, it does
    // (no second buffer to stream through); otherwise the two buffers
    // trade places after each run.
    if (executor_->canDonate(input, output))
      donated_.emplace_back(input, output);
    else
      carried_.emplace_back(input, output);
    return Status::ok();
  }
  Status setInput(size_t i, HostTensor value) override {
    if (i >= inputs_.size())
      return Status::error("no input " + std::to_string(i));
    inputs_[i] = std::move(value);
    return Status::ok();
  }
  Status run() override {
    for (size_t i = 0; i < inputs_.size(); ++i)
      allocate(i);
    if (Status s = executor_->run(inputs_, &outputs_, donated_); !s)
      return s;
    // The input's old buffer becomes the output's: the next run writes its
    // new value there, with no allocation.
    for (auto [input, output] : carried_)
      std::swap(inputs_[input], outputs_[output]);
    return Status::ok();
  }
  bool keptInputs() const override { return executor_->lastRunKeptInputs(); }
  Status getInput(size_t i, HostTensor *value) override {
    if (i >= inputs_.size())
      return Status::error("no input " + std::to_string(i));
    allocate(i);
    *value = inputs_[i];
    return Status::ok();
  }
  Status takeInput(size_t i, HostTensor *value) override {
    if (i >= inputs_.size())
      return Status::error("no input " + std::to_string(i));
    allocate(i);
    *value = std::move(inputs_[i]);
    inputs_[i] = HostTensor();
    // The buffer a carried output swaps with holds the value before the
    // last run: let it go too.
    for (auto [input, output] : carried_)
      if (input == i && output < outputs_.size())
        outputs_[output] = HostTensor();
    return Status::ok();
  }
  Status getOutput(size_t o, HostTensor *value) override {
    if (o >= outputs_.size())
      return Status::error("output " + std::to_string(o) +
                           " is not available before a run");
    // A carried output was moved into its input, a donated one written
    // there.
    for (const auto &pairs : {carried_, donated_})
      for (auto [input, output] : pairs)
        if (output == o) {
          *value = inputs_[input];
          return Status::ok();
        }
    *value = outputs_[o];
    return Status::ok();
  }
  Status setProfiler(StepProfiler *profiler) override {
    executor_->setProfiler(profiler);
    return Status::ok();
  }
  size_t numInputs() const override { return inputs_.size(); }
  DType inputDType(size_t i) const override { return executor_->inputDType(i); }
  const std::vector<int64_t> &inputShape(size_t i) const override {
    return executor_->inputShape(i);
  }

private:
  std::unique_ptr<Executor> executor_;
  /// Zeros for input \p i if nothing was set yet.
  void allocate(size_t i) {
    if (inputs_[i].shape.empty() && inputs_[i].bytes.empty())
      inputs_[i] =
          HostTensor::zeros(executor_->inputDType(i), executor_->inputShape(i));
  }
  std::vector<HostTensor> inputs_, outputs_;
  std::vector<std::pair<size_t, size_t>> carried_, donated_;
};

} // namespace

std::unique_ptr<StepRunner> makeCpuRunner(std::unique_ptr<Executor> executor) {
  return std::make_unique<CpuRunner>(std::move(executor));
}

} // namespace cleave::rt

//===- runner.cpp - Backend choice, the CPU runner, the CUDA plugin -------===//
//
// The CUDA backend is a plugin (lib/libcleave_cuda.so beside bin/) loaded
// with dlopen only when a run asks for it: the cleave binary itself links no
// CUDA library, so it runs on machines without CUDA, and `--backend auto`
// falls back to the CPU when the plugin, the driver or a GPU is missing.
//
//===----------------------------------------------------------------------===//

#include "cleave/runtime/runner.h"
#include "cleave/runtime/comm.h"
#include "program.h"

#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <mutex>

namespace cleave::rt {

Status parseBackend(const std::string &text, Backend *out) {
  if (text == "cpu")
    *out = Backend::Cpu;
  else if (text == "cuda")
    *out = Backend::Cuda;
  else if (text == "auto")
    *out = Backend::Auto;
  else
    return Status::error("--backend must be cpu, cuda or auto, not '" + text +
                         "'");
  return Status::ok();
}

Status parsePrecision(const std::string &text, Precision *out) {
  if (text == "f32" || text == "fp32")
    *out = Precision::F32;
  else if (text == "bf16")
    *out = Precision::BF16;
  else
    return Status::error("--precision must be f32 or bf16, not '" + text + "'");
  return Status::ok();
}

const char *backendName(Backend backend) {
  switch (backend) {
  case Backend::Cpu:
    return "cpu";
  case Backend::Cuda:
    return "cuda";
  case Backend::Auto:
    return "auto";
  }
  return "?";
}

namespace {

/// Runs on the host through the Executor; state moves between runs instead
/// of being copied.
class CpuRunner final : public StepRunner {
public:
  explicit CpuRunner(std::unique_ptr<Executor> executor)
      : executor_(std::move(executor)) {
    inputs_.resize(executor_->inputNames().size());
    for (size_t i = 0; i < inputs_.size(); ++i)
      inputs_[i] =
          HostTensor::zeros(executor_->inputDType(i), executor_->inputShape(i));
  }
  Backend backend() const override { return Backend::Cpu; }
  Status carry(size_t input, size_t output) override {
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
    if (Status s = executor_->run(inputs_, &outputs_); !s)
      return s;
    for (auto [input, output] : carried_)
      inputs_[input] = std::move(outputs_[output]);
    return Status::ok();
  }
  Status getInput(size_t i, HostTensor *value) override {
    *value = inputs_.at(i);
    return Status::ok();
  }
  Status getOutput(size_t o, HostTensor *value) override {
    if (o >= outputs_.size())
      return Status::error("output " + std::to_string(o) +
                           " is not available before a run");
    // A carried output was moved into its input.
    for (auto [input, output] : carried_)
      if (output == o) {
        *value = inputs_[input];
        return Status::ok();
      }
    *value = outputs_[o];
    return Status::ok();
  }
  size_t numInputs() const override { return inputs_.size(); }
  DType inputDType(size_t i) const override { return executor_->inputDType(i); }
  const std::vector<int64_t> &inputShape(size_t i) const override {
    return executor_->inputShape(i);
  }

private:
  std::unique_ptr<Executor> executor_;
  std::vector<HostTensor> inputs_, outputs_;
  std::vector<std::pair<size_t, size_t>> carried_;
};

// The plugin's entry points (runtime/cuda/executor.cpp). C++ types cross the
// boundary: the plugin is built by the same build with the same compiler.
using ProbeFn = int (*)(std::string *reason);
using CreateFn = int (*)(const LoadedProgram *program, Communicator *comm,
                         int precision, StepRunner **result,
                         std::string *error);

struct Plugin {
  ProbeFn probe = nullptr;
  CreateFn create = nullptr;
  /// Why it cannot be used ("" when probe found a GPU).
  std::string unavailable;
};

/// BINDIR/../lib/libcleave_cuda.so for the running binary; $CLEAVE_CUDA_PLUGIN
/// when set (tests run from other directories).
std::string pluginPath() {
  if (const char *env = std::getenv("CLEAVE_CUDA_PLUGIN"); env && *env)
    return env;
  char exe[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0)
    return "libcleave_cuda.so";
  std::string path(exe, static_cast<size_t>(n));
  for (int up = 0; up < 2; ++up)
    path = path.substr(0, path.find_last_of('/'));
  return path + "/lib/libcleave_cuda.so";
}

const Plugin &plugin() {
  static Plugin loaded;
  static std::once_flag once;
  std::call_once(once, [] {
    std::string path = pluginPath();
    if (::access(path.c_str(), F_OK) != 0) {
      loaded.unavailable = "this cleave was built without the CUDA backend "
                           "(no '" +
                           path + "')";
      return;
    }
    void *handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      loaded.unavailable =
          std::string("cannot load the CUDA backend: ") + ::dlerror();
      return;
    }
    loaded.probe =
        reinterpret_cast<ProbeFn>(::dlsym(handle, "cleave_cuda_probe"));
    loaded.create =
        reinterpret_cast<CreateFn>(::dlsym(handle, "cleave_cuda_create"));
    if (!loaded.probe || !loaded.create) {
      loaded.unavailable = "'" + path + "' is not Cleave's CUDA backend";
      return;
    }
    std::string reason;
    if (loaded.probe(&reason) <= 0)
      loaded.unavailable = reason.empty() ? "no CUDA GPU is present" : reason;
  });
  return loaded;
}

} // namespace

std::string cudaUnavailableReason() { return plugin().unavailable; }

Status createRunner(const plan::Program &program, Communicator *comm,
                    const BackendOptions &options,
                    std::unique_ptr<StepRunner> *result) {
  Backend backend = options.backend;
  if (backend != Backend::Cpu) {
    std::string why = cudaUnavailableReason();
    if (!why.empty() && backend == Backend::Cuda)
      return Status::error("--backend cuda: " + why);
    backend = why.empty() ? Backend::Cuda : Backend::Cpu;
  }
  if (options.precision == Precision::BF16 && backend != Backend::Cuda)
    return Status::error("--precision bf16 needs the CUDA backend (this run "
                         "is on the CPU)");
  if (backend == Backend::Cpu) {
    std::unique_ptr<Executor> executor;
    if (Status s = Executor::create(program, &executor, comm); !s)
      return s;
    *result = std::make_unique<CpuRunner>(std::move(executor));
    return Status::ok();
  }
  // The runner keeps the communicator: without one it runs alone, on a
  // process-wide single-member mesh that outlives it.
  static std::unique_ptr<Communicator> alone = makeSingleProcessCommunicator();
  if (!comm)
    comm = alone.get();
  LoadedProgram loaded;
  if (Status s = loadProgram(program, comm, &loaded); !s)
    return s;
  StepRunner *runner = nullptr;
  std::string error;
  if (plugin().create(&loaded, comm,
                      options.precision == Precision::BF16 ? 1 : 0, &runner,
                      &error) != 0)
    return Status::error("CUDA backend: " + error);
  result->reset(runner);
  return Status::ok();
}

} // namespace cleave::rt

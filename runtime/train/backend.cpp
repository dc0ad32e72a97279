//===- backend.cpp - Backend choice and the CUDA plugin's host side -------===//
//
// The CUDA backend is a plugin (lib/libcleave_cuda.so beside bin/) loaded
// with dlopen only when a run asks for it: the cleave binary itself links no
// CUDA library, so it runs on machines without CUDA, and `--backend auto`
// falls back to the CPU when the plugin, the driver or a GPU is missing.
//
//===----------------------------------------------------------------------===//

#include "cleave/runtime/runner.h"

#include "cleave/runtime/backend_plugin.h"
#include "cleave/runtime/comm.h"
#include "core/plan_reader.h"
#include "core/program.h"
#include "cpu/runner.h"
#include "plan/plan.pb.h"

#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
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

// The plugin's entry points (runtime/cuda/executor.cpp), C functions of
// backend_plugin.h: no C++ type crosses the boundary.
struct Plugin {
  cleave_plugin_probe_fn probe = nullptr;
  cleave_plugin_create_fn create = nullptr;
  /// Why it cannot be used ("" when probe found a GPU).
  std::string unavailable;
};

constexpr size_t kErrorSize = 2048;

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

/// Binds the plugin at \p path into \p loaded (unavailable says why not).
void bindPlugin(const std::string &path, Plugin &loaded) {
  void *handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    loaded.unavailable =
        std::string("cannot load the CUDA backend: ") + ::dlerror();
    return;
  }
  auto version = reinterpret_cast<cleave_plugin_abi_version_fn>(
      ::dlsym(handle, "cleave_cuda_abi_version"));
  loaded.probe = reinterpret_cast<cleave_plugin_probe_fn>(
      ::dlsym(handle, "cleave_cuda_probe"));
  loaded.create = reinterpret_cast<cleave_plugin_create_fn>(
      ::dlsym(handle, "cleave_cuda_create"));
  if (!version || !loaded.probe || !loaded.create) {
    loaded.unavailable = "'" + path + "' is not Cleave's CUDA backend";
    return;
  }
  if (uint32_t v = version(); v != CLEAVE_PLUGIN_ABI_VERSION) {
    loaded.unavailable = "'" + path + "' speaks plugin interface version " +
                         std::to_string(v) + ", this cleave version " +
                         std::to_string(CLEAVE_PLUGIN_ABI_VERSION) +
                         " (rebuild it with this cleave)";
    return;
  }
  char reason[kErrorSize] = "";
  if (loaded.probe(reason, sizeof(reason)) <= 0)
    loaded.unavailable = reason[0] ? reason : "no CUDA GPU is present";
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
    bindPlugin(path, loaded);
  });
  return loaded;
}

/// The host's communicator, as the plugin reaches it.
int meshBroadcast(void *context, void *buf, int64_t bytes, int32_t root,
                  const int64_t *axes, int32_t numAxes, char *error,
                  size_t errorSize) {
  auto *comm = static_cast<Communicator *>(context);
  Status s = comm->broadcast(buf, bytes, root,
                             std::vector<int64_t>(axes, axes + numAxes));
  if (s)
    return 0;
  std::snprintf(error, errorSize, "%s", s.message().c_str());
  return 1;
}

/// A program running in the plugin, behind backend_plugin.h's table.
class PluginRunner final : public StepRunner {
public:
  PluginRunner(cleave_runner runner, LoadedProgram program)
      : runner_(runner), program_(std::move(program)) {}
  ~PluginRunner() override { runner_.destroy(runner_.runner); }

  Backend backend() const override { return Backend::Cuda; }
  Status carry(size_t input, size_t output) override {
    return call([&](char *e, size_t n) {
      return runner_.carry(runner_.runner, static_cast<int32_t>(input),
                           static_cast<int32_t>(output), e, n);
    });
  }
  Status setInput(size_t i, HostTensor value) override {
    if (i >= program_.inputs.size())
      return Status::error("no input " + std::to_string(i));
    const ProgramValue &v = program_.values[program_.inputs[i]];
    if (value.dtype != v.type.dtype || value.shape != v.type.shape ||
        static_cast<int64_t>(value.bytes.size()) != v.numBytes)
      return Status::error("input " + std::to_string(i) + " ('" +
                           program_.inputNames[i] + "'): expected " +
                           v.type.str() + ", got " +
                           describeTensor(value.dtype, value.shape));
    return call([&](char *e, size_t n) {
      return runner_.set_input(runner_.runner, static_cast<int32_t>(i),
                               value.bytes.data(),
                               static_cast<int64_t>(value.bytes.size()), e, n);
    });
  }
  Status run() override {
    return call(
        [&](char *e, size_t n) { return runner_.run(runner_.runner, e, n); });
  }
  Status getInput(size_t i, HostTensor *value) override {
    if (i >= program_.inputs.size())
      return Status::error("no input " + std::to_string(i));
    *value = zerosOf(program_.inputs[i]);
    return call([&](char *e, size_t n) {
      return runner_.get_input(runner_.runner, static_cast<int32_t>(i),
                               value->bytes.data(),
                               static_cast<int64_t>(value->bytes.size()), e, n);
    });
  }
  Status getOutput(size_t o, HostTensor *value) override {
    if (o >= program_.outputs.size())
      return Status::error("no output " + std::to_string(o));
    *value = zerosOf(program_.outputs[o]);
    return call([&](char *e, size_t n) {
      return runner_.get_output(
          runner_.runner, static_cast<int32_t>(o), value->bytes.data(),
          static_cast<int64_t>(value->bytes.size()), e, n);
    });
  }
  size_t numInputs() const override { return program_.inputs.size(); }
  DType inputDType(size_t i) const override {
    return program_.values[program_.inputs[i]].type.dtype;
  }
  const std::vector<int64_t> &inputShape(size_t i) const override {
    return program_.values[program_.inputs[i]].type.shape;
  }

private:
  HostTensor zerosOf(int32_t value) const {
    const TensorType &t = program_.values[value].type;
    return HostTensor::zeros(t.dtype, t.shape);
  }
  template <typename Fn> static Status call(Fn fn) {
    char error[kErrorSize] = "";
    if (fn(error, sizeof(error)) == 0)
      return Status::ok();
    return Status::error(error[0] ? error : "the CUDA backend failed");
  }

  cleave_runner runner_;
  /// The host's load of the program: its inputs' and outputs' types.
  LoadedProgram program_;
};

} // namespace

std::string cudaUnavailableReason() { return plugin().unavailable; }

/// The program in the plugin. The host loads it too, for its inputs' and
/// outputs' types; the plugin's own load runs the same validator and shape
/// rules (core/shape_rules.h), so both backends refuse the same programs
/// with the same words, and no CPU kernel is bound for a CUDA run.
static Status createPluginRunner(const plan::Program &program,
                                 Communicator *comm, Precision precision,
                                 std::unique_ptr<StepRunner> *result) {
  PlanView view(program);
  LoadedProgram loaded;
  if (Status s = loadProgram(view.program(), comm, nullptr, &loaded); !s)
    return s;
  const std::vector<int64_t> &shape = comm->meshShape();
  cleave_mesh mesh{comm->rank(), static_cast<int32_t>(shape.size()),
                   shape.data(), comm->timeoutSeconds(),
                   comm,         &meshBroadcast};
  cleave_runner runner{};
  char error[kErrorSize] = "";
  if (plugin().create(&view.program(), &mesh,
                      precision == Precision::BF16 ? 1 : 0, &runner, error,
                      sizeof(error)) != 0)
    return Status::error(std::string("CUDA backend: ") + error);
  *result = std::make_unique<PluginRunner>(runner, std::move(loaded));
  return Status::ok();
}

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
    *result = makeCpuRunner(std::move(executor));
    return Status::ok();
  }
  // The runner keeps the communicator: without one it runs alone, on a
  // process-wide single-member mesh that outlives it.
  static std::unique_ptr<Communicator> alone = makeSingleProcessCommunicator();
  return createPluginRunner(program, comm ? comm : alone.get(),
                            options.precision, result);
}

} // namespace cleave::rt

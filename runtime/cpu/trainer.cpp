//===- trainer.cpp - Runs a compiled training bundle ----------------------===//

#include "cleave/runtime/trainer.h"
#include "cleave/runtime/comm.h"

#include "plan/plan.pb.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <sstream>

namespace cleave::rt {

namespace fs = std::filesystem;
namespace pb = ::cleave::plan;

namespace {

DType fromPlan(pb::DType d) {
  switch (d) {
  case pb::I64:
    return DType::I64;
  case pb::I32:
    return DType::I32;
  case pb::BOOL:
    return DType::Bool;
  default:
    return DType::F32;
  }
}

std::string describe(DType dtype, const std::vector<int64_t> &shape) {
  std::ostringstream os;
  os << dtypeName(dtype) << " [";
  for (size_t i = 0; i < shape.size(); ++i)
    os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

std::vector<int64_t> shapeOf(const pb::TensorType &t) {
  return {t.shape().begin(), t.shape().end()};
}

Status checkTensor(const HostTensor &t, DType dtype,
                   const std::vector<int64_t> &shape, const std::string &what,
                   const std::string &file) {
  if (t.dtype != dtype || t.shape != shape)
    return Status::error(what + " in '" + file + "' is " +
                         describe(t.dtype, t.shape) +
                         "; the train step needs " + describe(dtype, shape));
  return Status::ok();
}

std::string stateKey(const pb::Binding &b) {
  switch (b.role()) {
  case pb::Binding::PARAMETER:
    return "p:" + b.name();
  case pb::Binding::BUFFER:
    return "b:" + b.name();
  case pb::Binding::OPTIMIZER_STATE:
    return "o:" + b.name() + "\x1f" + b.slot();
  default:
    return {};
  }
}

/// Chunk \p k of \p parts along \p dim of \p t; with \p blocks, chunk k of
/// each of that many equal blocks of the dimension.
HostTensor chunkOf(const HostTensor &t, int64_t dim, int64_t k, int64_t parts,
                   int64_t blocks) {
  std::vector<int64_t> shape = t.shape;
  shape[dim] /= parts;
  HostTensor out = HostTensor::zeros(t.dtype, shape);
  size_t elem = dtypeSize(t.dtype);
  int64_t outer = blocks, inner = 1;
  for (int64_t d = 0; d < dim; ++d)
    outer *= shape[d];
  for (size_t d = dim; d < shape.size(); ++d)
    inner *= shape[d];
  inner /= blocks;
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(out.bytes.data() + o * inner * elem,
                t.bytes.data() + (o * parts + k) * inner * elem, inner * elem);
  return out;
}

/// The full tensor from every rank's chunk along \p dim (collective).
Status gatherAlong(Communicator &comm, const HostTensor &local, int64_t dim,
                   int64_t blocks, HostTensor *full) {
  std::vector<int64_t> axes{0};
  int64_t parts = comm.groupSize(axes);
  std::vector<uint8_t> all(local.bytes.size() * parts);
  if (Status s = comm.allGather(local.bytes.data(), all.data(),
                                local.bytes.size(), axes);
      !s)
    return s;
  std::vector<int64_t> shape = local.shape;
  shape[dim] *= parts;
  *full = HostTensor::zeros(local.dtype, shape);
  size_t elem = dtypeSize(local.dtype);
  int64_t outer = blocks, inner = 1;
  for (int64_t d = 0; d < dim; ++d)
    outer *= shape[d];
  for (size_t d = dim; d < local.shape.size(); ++d)
    inner *= local.shape[d];
  inner /= blocks;
  for (int64_t k = 0; k < parts; ++k)
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(full->bytes.data() + (o * parts + k) * inner * elem,
                  all.data() + (k * outer + o) * inner * elem, inner * elem);
  return Status::ok();
}

} // namespace

Status loadBundlePlan(const std::string &bundleDir, pb::Plan *plan) {
  fs::path path = fs::path(bundleDir) / kBundlePlanFile;
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return Status::error("'" + bundleDir + "' is not a bundle: cannot read " +
                         path.string() + " (compile one with cleave compile)");
  if (!plan->ParseFromIstream(&in))
    return Status::error("bundle plan '" + path.string() +
                         "' is corrupt or truncated");
  if (plan->format_version() != kPlanFormatVersion)
    return Status::error("bundle plan '" + path.string() + "' has format " +
                         "version " + std::to_string(plan->format_version()) +
                         "; this cleave reads version " +
                         std::to_string(kPlanFormatVersion) + " (recompile)");
  if (plan->programs_size() != 1)
    return Status::error("bundle plan '" + path.string() +
                         "' must hold exactly one program");
  const pb::Program &p = plan->programs(0);
  if (p.input_bindings_size() != p.inputs_size() ||
      p.output_bindings_size() != p.outputs_size())
    return Status::error("bundle plan '" + path.string() +
                         "' has no train-step bindings");
  return Status::ok();
}

Status train(const TrainOptions &options) {
  pb::Plan plan;
  if (Status s = loadBundlePlan(options.bundleDir, &plan); !s)
    return s;
  const pb::Program &program = plan.programs(0);
  int64_t tp = plan.mesh_size() ? plan.mesh(0) : 1;
  std::unique_ptr<Communicator> single;
  Communicator *comm = options.comm;
  if (!comm) {
    if (tp != 1)
      return Status::error("bundle '" + options.bundleDir +
                           "' is compiled for tp = " + std::to_string(tp) +
                           "; run it with --ranks " + std::to_string(tp));
    single = makeSingleProcessCommunicator();
    comm = single.get();
  }
  if (comm->size() != tp)
    return Status::error("bundle '" + options.bundleDir +
                         "' is compiled for tp = " + std::to_string(tp) +
                         " but runs on " + std::to_string(comm->size()) +
                         " ranks");
  bool leader = comm->rank() == 0;
  std::unique_ptr<Executor> executor;
  if (Status s = Executor::create(program, &executor, comm); !s)
    return Status::error("bundle '" + options.bundleDir + "': " + s.message());
  // Which dimension of each state tensor this rank holds a chunk of.
  std::map<std::string, std::pair<int64_t, int64_t>> splitOf;
  for (const auto &bindings :
       {program.input_bindings(), program.output_bindings()})
    for (const pb::Binding &b : bindings)
      if (b.has_split_dim())
        splitOf[stateKey(b)] = {b.split_dim(),
                                b.has_split_blocks() ? b.split_blocks() : 1};
  auto splitDim = [&](const std::string &key) {
    auto it = splitOf.find(key);
    return it == splitOf.end() ? int64_t(-1) : it->second.first;
  };
  auto splitBlocks = [&](const std::string &key) {
    auto it = splitOf.find(key);
    return it == splitOf.end() ? int64_t(1) : it->second.second;
  };
  if (options.steps < 1)
    return Status::error("--steps must be at least 1");

  // Training state: parameters and buffers from the bundle, optimizer state
  // from zeros.
  std::map<std::string, HostTensor> state;
  for (const pb::TensorEntry &t : plan.tensors()) {
    if (t.file().empty())
      return Status::error("bundle '" + options.bundleDir +
                           "' holds no weights (it was compiled with "
                           "--plan-only): compile it again without it to "
                           "train");
    std::string file = (fs::path(options.bundleDir) / t.file()).string();
    HostTensor value;
    if (Status s = readNpy(file, &value); !s)
      return Status::error("bundle '" + options.bundleDir +
                           "': " + s.message());
    if (Status s =
            checkTensor(value, fromPlan(t.type().dtype()), shapeOf(t.type()),
                        "tensor '" + t.name() + "'", file);
        !s)
      return s;
    pb::Binding b;
    b.set_role(t.role());
    b.set_name(t.name());
    std::string key = stateKey(b);
    if (int64_t d = splitDim(key); d >= 0) {
      int64_t blocks = splitBlocks(key);
      if (d >= static_cast<int64_t>(value.shape.size()) || blocks < 1 ||
          value.shape[d] % (tp * blocks))
        return Status::error("bundle '" + options.bundleDir + "': tensor '" +
                             t.name() + "' cannot be split along dimension " +
                             std::to_string(d) + " into " + std::to_string(tp));
      value = chunkOf(value, d, comm->groupRank({0}), tp, blocks);
    }
    state[key] = std::move(value);
  }
  size_t numInputs = program.inputs_size();
  for (size_t i = 0; i < numInputs; ++i) {
    const pb::Binding &b = program.input_bindings(i);
    std::string key = stateKey(b);
    if (key.empty() || state.count(key))
      continue;
    if (b.role() != pb::Binding::OPTIMIZER_STATE)
      return Status::error("bundle '" + options.bundleDir +
                           "' has no initial value for '" + b.name() + "'");
    state[key] =
        HostTensor::zeros(executor->inputDType(i), executor->inputShape(i));
  }

  // Data: per-step folders step-0, step-1, ... or one folder for every step.
  bool perStep = !options.inputsDir.empty() &&
                 fs::is_directory(fs::path(options.inputsDir) / "step-0");
  std::map<std::string, HostTensor> fixedBatch;
  auto loadBatch = [&](int64_t step,
                       std::map<std::string, HostTensor> *batch) -> Status {
    fs::path dir = options.inputsDir;
    if (perStep) {
      dir /= "step-" + std::to_string(step);
      if (!fs::is_directory(dir))
        return Status::error("no data for step " + std::to_string(step) +
                             ": '" + dir.string() + "' does not exist");
    }
    for (size_t i = 0; i < numInputs; ++i) {
      const pb::Binding &b = program.input_bindings(i);
      if (b.role() != pb::Binding::INPUT)
        continue;
      if (options.inputsDir.empty())
        return Status::error("the model has input '" + b.name() +
                             "'; give --inputs DIR with " +
                             sanitizeFileName(b.name()) + ".npy");
      std::string file = (dir / (sanitizeFileName(b.name()) + ".npy")).string();
      if (!fs::exists(file))
        return Status::error("missing input file '" + file +
                             "' for model input '" + b.name() + "'");
      HostTensor t;
      if (Status s = readNpy(file, &t); !s)
        return s;
      if (Status s =
              checkTensor(t, executor->inputDType(i), executor->inputShape(i),
                          "input '" + b.name() + "'", file);
          !s)
        return s;
      (*batch)[b.name()] = std::move(t);
    }
    return Status::ok();
  };
  if (!perStep)
    if (Status s = loadBatch(0, &fixedBatch); !s)
      return s;

  int64_t logEvery = options.logEvery > 0
                         ? options.logEvery
                         : (options.steps <= 20 ? 1 : options.steps / 20);
  std::vector<float> losses;
  std::map<std::string, HostTensor> lastGrads;
  std::vector<HostTensor> args(numInputs), outputs;
  for (int64_t step = 0; step < options.steps; ++step) {
    std::map<std::string, HostTensor> stepBatch;
    if (perStep)
      if (Status s = loadBatch(step, &stepBatch); !s)
        return s;
    std::map<std::string, HostTensor> &batch = perStep ? stepBatch : fixedBatch;
    for (size_t i = 0; i < numInputs; ++i) {
      const pb::Binding &b = program.input_bindings(i);
      switch (b.role()) {
      case pb::Binding::INPUT:
        // The fixed batch is reused, so it is copied; a step's is moved.
        args[i] = perStep ? std::move(batch[b.name()]) : batch[b.name()];
        break;
      case pb::Binding::STEP:
        args[i] = HostTensor::zeros(DType::I64, {});
        *args[i].data<int64_t>() = step + 1;
        break;
      default:
        args[i] = std::move(state[stateKey(b)]);
      }
    }
    auto start = std::chrono::steady_clock::now();
    if (Status s = executor->run(args, &outputs); !s)
      return Status::error("step " + std::to_string(step) + ": " + s.message());
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    // State not returned by the step (a frozen buffer) goes back unchanged.
    for (size_t i = 0; i < numInputs; ++i) {
      std::string key = stateKey(program.input_bindings(i));
      if (!key.empty())
        state[key] = std::move(args[i]);
    }
    float loss = 0;
    for (size_t o = 0; o < outputs.size(); ++o) {
      const pb::Binding &b = program.output_bindings(o);
      if (b.role() == pb::Binding::LOSS)
        loss = *outputs[o].data<float>();
      else if (b.role() == pb::Binding::GRADIENT)
        lastGrads[b.name()] = std::move(outputs[o]);
      else if (std::string key = stateKey(b); !key.empty())
        state[key] = std::move(outputs[o]);
    }
    losses.push_back(loss);
    if (options.log && leader &&
        ((step + 1) % logEvery == 0 || step == 0 ||
         step + 1 == options.steps)) {
      *options.log << "step " << std::setw(5) << step + 1 << "/"
                   << options.steps << "  loss " << std::fixed
                   << std::setprecision(6) << loss << "  "
                   << std::setprecision(1) << seconds * 1e3 << " ms"
                   << std::defaultfloat << std::endl;
    }
  }

  if (options.dumpDir.empty())
    return Status::ok();
  std::error_code ec;
  if (leader)
    fs::create_directories(options.dumpDir, ec);
  if (ec)
    return Status::error("cannot create '" + options.dumpDir +
                         "': " + ec.message());
  // Every rank takes part in gathering split tensors; rank 0 writes.
  auto writeFull = [&](const std::string &file, const HostTensor &t,
                       const std::string &key) -> Status {
    HostTensor full;
    const HostTensor *out = &t;
    if (int64_t d = splitDim(key); d >= 0) {
      if (Status s = gatherAlong(*comm, t, d, splitBlocks(key), &full); !s)
        return s;
      out = &full;
    }
    if (!leader)
      return Status::ok();
    return writeNpy((fs::path(options.dumpDir) / file).string(), *out);
  };
  auto write = [&](const std::string &file, const HostTensor &t) {
    return leader ? writeNpy((fs::path(options.dumpDir) / file).string(), t)
                  : Status::ok();
  };
  HostTensor lossTensor =
      HostTensor::zeros(DType::F32, {static_cast<int64_t>(losses.size())});
  std::copy(losses.begin(), losses.end(), lossTensor.data<float>());
  if (Status s = write("loss.npy", lossTensor); !s)
    return s;
  for (const pb::TensorEntry &t : plan.tensors()) {
    pb::Binding b;
    b.set_role(t.role());
    b.set_name(t.name());
    if (Status s = writeFull(sanitizeFileName(t.name()) + ".npy",
                             state[stateKey(b)], stateKey(b));
        !s)
      return s;
  }
  for (const auto &[name, grad] : lastGrads) {
    pb::Binding b;
    b.set_role(pb::Binding::PARAMETER);
    b.set_name(name);
    if (Status s =
            writeFull(sanitizeFileName(name) + ".grad.npy", grad, stateKey(b));
        !s)
      return s;
  }
  return Status::ok();
}

} // namespace cleave::rt

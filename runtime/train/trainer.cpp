//===- trainer.cpp - Runs a compiled training bundle ----------------------===//

#include "train_session.h"

#include "cleave/runtime/checkpoint.h"
#include "cleave/runtime/comm.h"
#include "cleave/runtime/files.h"
#include "cleave/runtime/lr_schedule.h"
#include "cleave/runtime/npy.h"
#include "cleave/runtime/profile.h"
#include "cleave/runtime/runner.h"
#include "cleave/runtime/store.h"
#include "forward_pass.h"
#include "progress.h"

#include "cpu/runner.h"
#include "plan/plan.pb.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <limits>
#include <map>
#include <random>
#include <sstream>

namespace cleave::rt {

namespace fs = std::filesystem;

namespace {

std::vector<int64_t> shapeOf(const pb::TensorType &t) {
  return {t.shape().begin(), t.shape().end()};
}

} // namespace

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

Status checkMesh(const pb::Plan &plan) {
  bool named = plan.mesh_axes_size() > 0;
  if (plan.mesh_size() > 3 ||
      (named && plan.mesh_axes_size() != plan.mesh_size()))
    return Status::error("has a mesh this runtime cannot run (at most three "
                         "axes: dp, tp and tp_inner)");
  std::vector<std::string> seen;
  for (int i = 0; i < plan.mesh_size(); ++i) {
    std::string axis = named ? plan.mesh_axes(i) : "tp";
    bool known = axis == "dp" || axis == "tp" ||
                 (axis == "tp_inner" && !seen.empty() && seen.back() == "tp");
    if (plan.mesh(i) < 1 || !known ||
        std::find(seen.begin(), seen.end(), axis) != seen.end())
      return Status::error("has a mesh this runtime cannot run (axes dp, tp "
                           "and tp_inner after tp, each once, sizes at "
                           "least 1)");
    seen.push_back(axis);
  }
  return Status::ok();
}

MeshGeometry meshOf(const pb::Plan &plan) {
  MeshGeometry m;
  for (int i = 0; i < plan.mesh_size(); ++i) {
    std::string axis = plan.mesh_axes_size() ? plan.mesh_axes(i) : "tp";
    m.shape.push_back(plan.mesh(i));
    if (axis == "dp") {
      m.dpAxis = i;
      m.dp = plan.mesh(i);
    } else if (axis == "tp_inner") {
      m.tpInnerAxis = i;
      m.tp *= plan.mesh(i);
    } else {
      m.tpAxis = i;
      m.tp *= plan.mesh(i);
    }
  }
  if (m.shape.empty())
    m.shape = {1};
  return m;
}

std::vector<int64_t> MeshGeometry::tpAxes() const {
  std::vector<int64_t> axes;
  for (int64_t a : {tpAxis, tpInnerAxis})
    if (a >= 0)
      axes.push_back(a);
  return axes;
}

int64_t MeshGeometry::tensorParts() const {
  return shape.size() > 1 ? tp : shape[0];
}

int64_t MeshGeometry::ranks() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string MeshGeometry::str() const {
  if (tpInnerAxis >= 0)
    return (dpAxis < 0 ? "" : "dp = " + std::to_string(dp) + ", ") +
           "tp = " + std::to_string(tp) + " (" + std::to_string(shape[tpAxis]) +
           " x " + std::to_string(shape[tpInnerAxis]) + ")";
  if (dpAxis < 0)
    return "tp = " + std::to_string(tp);
  if (tpAxis < 0)
    return "dp = " + std::to_string(dp);
  return "dp = " + std::to_string(dp) + ", tp = " + std::to_string(tp);
}

std::vector<int64_t> globalInputShape(const pb::Program &program, int i,
                                      int64_t dp) {
  const pb::Binding &b = program.input_bindings(i);
  std::vector<int64_t> shape =
      shapeOf(program.values(program.inputs(i)).type());
  if (b.has_split_dim() && b.split_dim() >= 0 &&
      b.split_dim() < static_cast<int64_t>(shape.size()))
    shape[b.split_dim()] *= dp;
  return shape;
}

bool isForwardProgram(const pb::Program &program) {
  return program.name() == "forward" || program.name() == "forward_eval";
}

namespace {

/// Train steps for shapes 0, 1, ... in order, each followed by its
/// shape's "forward" programs, then its "forward_eval" ones.
bool programsInOrder(const pb::Plan &plan) {
  int32_t shape = -1;
  std::string last;
  for (const pb::Program &p : plan.programs()) {
    if (!isForwardProgram(p)) {
      if (p.shape() != ++shape)
        return false;
    } else if (shape < 0 || p.shape() != shape || p.name() < last) {
      return false;
    }
    last = isForwardProgram(p) ? p.name() : "";
  }
  return shape >= 0;
}

} // namespace

Status loadBundlePlan(const std::string &bundleDir, pb::Plan *plan) {
  fs::path path = fs::path(bundleDir) / kBundlePlanFile;
  std::error_code ec;
  if (!fs::is_directory(bundleDir, ec))
    return Status::error("'" + bundleDir + "' is not a bundle: " +
                         (fs::exists(bundleDir, ec)
                              ? "it is not a directory"
                              : "there is no such directory") +
                         " (compile one with cleave compile)");
  if (!fs::exists(path, ec))
    return Status::error("'" + bundleDir + "' is not a bundle: it has no " +
                         std::string(kBundlePlanFile) +
                         " (compile one with cleave compile)");
  quietProtobufLogs();
  std::string bytes;
  if (Status s = readWholeFile(path.string(), "bundle plan", &bytes); !s)
    return s;
  if (bytes.empty())
    return Status::error("bundle plan '" + path.string() + "' is empty");
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max()) ||
      !plan->ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return Status::error("bundle plan '" + path.string() +
                         "' is corrupt or truncated");
  if (plan->format_version() != kPlanFormatVersion)
    return Status::error("bundle plan '" + path.string() + "' has format " +
                         "version " + std::to_string(plan->format_version()) +
                         "; this cleave reads version " +
                         std::to_string(kPlanFormatVersion) + " (recompile)");
  if (Status s = checkMesh(*plan); !s)
    return Status::error("bundle plan '" + path.string() + "' " + s.message());
  if (Status s =
          checkStoredNames(plan->tensors(), plan->files(), plan->model_file(),
                           "bundle plan '" + path.string() + "'");
      !s)
    return s;
  if (!programsInOrder(*plan))
    return Status::error("bundle plan '" + path.string() +
                         "' must hold a train step per batch shape, each "
                         "followed by its forward passes");
  for (const pb::Program &p : plan->programs())
    if (p.input_bindings_size() != p.inputs_size() ||
        p.output_bindings_size() != p.outputs_size())
      return Status::error("bundle plan '" + path.string() +
                           "' has no train-step bindings");
  return Status::ok();
}

namespace {

/// The checkpoint/bundle key of an optimizer state tensor.
std::string optimizerKey(const std::string &name, const std::string &slot) {
  // The step's own state (no parameter's) is "optimizer/loss_scale".
  return "optimizer/" + slot + (name.empty() ? "" : "/" + name);
}

/// Uniform values of standard deviation 0.02 (a transformer's usual
/// initialisation scale) from a generator seeded by the tensor's name, so
/// every rank draws the same values for a replicated tensor.
void fillRandom(const std::string &name, HostTensor *value) {
  DType held = value->dtype;
  if (held != DType::F32 && held != DType::BF16 && held != DType::F16)
    return;
  HostTensor wide = HostTensor::zeros(DType::F32, value->shape);
  std::mt19937_64 gen(std::hash<std::string>()(name));
  std::uniform_real_distribution<float> dist(-0.0346f, 0.0346f);
  float *data = wide.data<float>();
  for (int64_t i = 0; i < wide.numElements(); ++i)
    data[i] = dist(gen);
  if (held != DType::F32) // a frozen weight held in half precision
    narrowFromF32(&wide, held);
  *value = std::move(wide);
}

} // namespace

std::string stateKeyOf(const pb::TensorEntry &e) {
  pb::Binding b;
  b.set_role(e.role());
  b.set_name(e.name());
  b.set_slot(e.slot());
  return stateKey(b);
}

Status TrainSession::open() {
  if (Status s = loadBundlePlan(options.bundleDir, &plan); !s)
    return s;
  // Checkpoints carry the bundle's model copy: one that leads out of the
  // bundle is refused now, not after the run's steps.
  if (!options.checkpointDir.empty() && !plan.model_file().empty()) {
    std::string model;
    if (Status s = resolveStoredName(options.bundleDir, plan.model_file(),
                                     bundle(), "the model copy", &model);
        !s)
      return s;
  }
  mesh = meshOf(plan);
  for (const pb::Program &p : plan.programs()) {
    if (!isForwardProgram(p)) {
      shapes.emplace_back();
      shapes.back().program = &p;
      continue;
    }
    ForwardPass &pass = (p.name() == "forward" ? shapes.back().forwardPasses
                                               : shapes.back().evalPasses)
                            .emplace_back();
    pass.program = &p;
    pass.inputs = forwardInputsOf(p, mesh.dp);
  }
  // Shape 0 is the active one: its members become the session's.
  std::swap(static_cast<ShapeStep &>(*this), shapes[0]);
  comm = options.comm;
  if (!comm) {
    if (mesh.ranks() != 1)
      return Status::error(bundle() + " is compiled for " + mesh.str() +
                           "; run it with --ranks " +
                           std::to_string(mesh.ranks()));
    single = makeSingleProcessCommunicator();
    comm = single.get();
  }
  if (comm->size() != mesh.ranks() ||
      (mesh.shape.size() > 1 && comm->meshShape() != mesh.shape))
    return Status::error(bundle() + " is compiled for " + mesh.str() +
                         " but runs on " + std::to_string(comm->size()) +
                         " ranks");
  // Tensors are split over one axis: the tp axis of a 2-D mesh, whose
  // tp group loads, gathers and checkpoints them, or a 1-D mesh's only axis
  // (tp, or dp for ZeRO's optimizer state).
  if (mesh.shape.size() > 1) {
    tpView = makeAxisView(*comm, mesh.tpAxes());
    if (mesh.dpAxis >= 0)
      dpView = makeAxisView(*comm, mesh.dpAxis);
  }
  tpComm = tpView ? tpView.get() : comm;
  dpComm = dpView.get();
  tp = mesh.tensorParts();
  dpRank = mesh.dpAxis >= 0 ? comm->groupRank({mesh.dpAxis}) : 0;
  if (options.steps < 0 ||
      (options.steps == 0 &&
       (options.resumeFrom.empty() || options.checkpointDir.empty())))
    return Status::error("--steps must be at least 1 (0 only with --resume "
                         "and --checkpoint: re-sharding a checkpoint)");
  rank = tpComm->rank();
  leader = comm->rank() == 0;
  if (Status s = createRunner(*program, comm, options.backend, &executor); !s)
    return Status::error(bundle() + ": " + s.message());
  if (options.profile || !options.traceFile.empty()) {
    profiler = std::make_unique<StepProfiler>(comm->rank(),
                                              !options.traceFile.empty());
    if (Status s = executor->setProfiler(profiler.get()); !s)
      return Status::error((options.profile ? "--profile" : "--trace") +
                           std::string(": ") + s.message());
    feedSite = profiler->addSite("(feed the batch)", "", SiteKind::Host, {});
  }
  if (leader && options.log && options.backend.backend == Backend::Auto) {
    std::string why = cudaUnavailableReason();
    *options.log << "backend: " << backendName(executor->backend())
                 << (why.empty() ? "" : " (" + why + ")") << "\n";
  }
  numInputs = program->inputs_size();
  return Status::ok();
}

/// The state table: the bundle's parameters and buffers, then the optimizer
/// state, each with the layout the program keeps it in.
Status TrainSession::buildTable() {
  for (const auto &bindings :
       {program->input_bindings(), program->output_bindings()})
    for (const pb::Binding &b : bindings) {
      if (b.has_split_dim())
        (b.role() == pb::Binding::GRADIENT ? gradientLayout[b.name()]
                                           : layoutOf[stateKey(b)]) =
            splitOf(b);
      if (b.has_dp_split_dim()) {
        Split dp;
        dp.dim = b.dp_split_dim();
        (b.role() == pb::Binding::GRADIENT ? gradientDpLayout[b.name()]
                                           : dpLayoutOf[stateKey(b)]) = dp;
      }
    }
  if ((!dpLayoutOf.empty() || !gradientDpLayout.empty()) && !dpComm)
    return Status::error(bundle() + " splits tensors over a dp axis of a "
                                    "2-D mesh, and this mesh has none");
  for (const pb::TensorEntry &t : plan.tensors()) {
    if (t.slices_size() == 0 && !options.randomWeights)
      return Status::error(bundle() +
                           " holds no weights (it was compiled with "
                           "--plan-only): compile it again without it to "
                           "train");
    table.push_back(t);
    bundleEntry[stateKeyOf(t)] = &t;
  }
  // Every shape's batch inputs are known from the start (a batch is
  // checked against them all); its runner is made on first use.
  if (Status s = readDataInputs(); !s)
    return s;
  for (size_t k = 1; k < shapes.size(); ++k) {
    std::swap(static_cast<ShapeStep &>(*this), shapes[k]);
    numInputs = program->inputs_size();
    Status s = readDataInputs();
    std::swap(static_cast<ShapeStep &>(*this), shapes[k]);
    if (!s)
      return s;
  }
  for (size_t i = 0; i < numInputs; ++i) {
    const pb::Binding &b = program->input_bindings(i);
    std::string key = stateKey(b);
    if (key.empty() || bundleEntry.count(key))
      continue;
    if (b.role() != pb::Binding::OPTIMIZER_STATE)
      return Status::error(bundle() + " has no initial value for '" + b.name() +
                           "'");
    if (b.name().empty()) {
      // The step's own state (fp16's loss scale): a replicated scalar that
      // starts at zero.
      pb::TensorEntry e;
      e.set_role(pb::Binding::OPTIMIZER_STATE);
      e.set_slot(b.slot());
      e.set_key(optimizerKey("", b.slot()));
      e.mutable_type()->set_dtype(pb::F32);
      for (int64_t d : executor->inputShape(i))
        e.mutable_type()->add_shape(d);
      table.push_back(e);
      continue;
    }
    pb::Binding param;
    param.set_role(pb::Binding::PARAMETER);
    param.set_name(b.name());
    auto it = bundleEntry.find(stateKey(param));
    if (it == bundleEntry.end())
      return Status::error(bundle() + " has optimizer state for '" + b.name() +
                           "', which is not one of its parameters");
    pb::TensorEntry e;
    e.set_name(b.name());
    e.set_role(pb::Binding::OPTIMIZER_STATE);
    e.set_slot(b.slot());
    e.set_key(optimizerKey(b.name(), b.slot()));
    *e.mutable_type() = it->second->type();
    e.set_segment_of(it->second->segment_of());
    e.set_segment_dim(it->second->segment_dim());
    e.set_segment_offset(it->second->segment_offset());
    table.push_back(e);
  }
  for (pb::TensorEntry &e : table) {
    e.clear_slices();
    auto it = layoutOf.find(stateKeyOf(e));
    setSplit(&e, it != layoutOf.end() ? it->second : Split());
  }
  return Status::ok();
}

/// The active step's batch inputs: names, types, dp splits.
Status TrainSession::readDataInputs() {
  for (size_t i = 0; i < numInputs; ++i) {
    const pb::Binding &b = program->input_bindings(i);
    if (b.role() != pb::Binding::INPUT)
      continue;
    if (b.micro_batch() > 0) {
      // Another micro-batch's copy of an input listed before.
      microBatches = std::max(microBatches, b.micro_batch() + 1);
      continue;
    }
    // A data-parallel input is split along its batch: the feed gives the
    // global batch and each rank takes its rows.
    const pb::TensorType &type = program->values(program->inputs(i)).type();
    if (b.has_split_dim()) {
      if (b.split_dim() < 0 || b.split_dim() >= type.shape_size())
        return Status::error(bundle() + ": input '" + b.name() +
                             "' is split along a dimension it lacks");
      inputSplit[b.name()] = splitOf(b);
    }
    std::vector<int64_t> shape =
        globalInputShape(*program, static_cast<int>(i), mesh.dp);
    // The feed builds only this rank's rows of a batch split along
    // dimension 0 (the dp split).
    dataInputs.push_back({b.name(), fromPlan(type.dtype()), shape,
                          b.has_split_dim() && b.split_dim() == 0});
    if (dataInputs.back().splitRows) {
      rowCount = shape[0] / mesh.dp;
      rowFirst = dpRank * rowCount;
    }
  }
  return Status::ok();
}

// Stores hold each rank's real rows; the program sees chunks padded to a
// common extent where tp does not divide a dimension.
void TrainSession::padChunk(const pb::TensorEntry &e, HostTensor *value) const {
  Split split = splitOf(e);
  if (split.isSplit() && isPadded(e.type().shape(split.dim), split, tp))
    *value = toLocal(*value, split, e.type().shape(split.dim), rank, tp);
}

/// Initial state: from the bundle (optimizer state zero), or from a
/// checkpoint in whatever layout it was written.
Status TrainSession::loadState() {
  return options.resumeFrom.empty() ? loadBundle() : loadCheckpoint();
}

Status TrainSession::loadCheckpoint() {
  std::string dir;
  pb::Checkpoint ckpt;
  if (Status s = findCheckpoint(options.resumeFrom, &dir, &ckpt); !s)
    return s;
  std::string what = "checkpoint '" + dir + "'";
  std::map<std::string, const pb::TensorEntry *> saved;
  for (const pb::TensorEntry &e : ckpt.tensors())
    saved[stateKeyOf(e)] = &e;
  StoreReader reader(dir, what, ckpt.files());
  for (const pb::TensorEntry &e : table) {
    auto it = saved.find(stateKeyOf(e));
    std::string label =
        e.name() + (e.slot().empty() ? "" : " (" + e.slot() + ")");
    if (it == saved.end())
      return Status::error(what + " has no '" + label +
                           "': it was written by another model or "
                           "optimizer");
    const pb::TensorEntry &c = *it->second;
    if (c.type().dtype() != e.type().dtype() ||
        shapeOf(c.type()) != shapeOf(e.type()))
      return Status::error(
          what + " holds '" + label + "' as " +
          describeTensor(fromPlan(c.type().dtype()), shapeOf(c.type())) +
          "; this bundle's model has " +
          describeTensor(fromPlan(e.type().dtype()), shapeOf(e.type())));
    if (Status s =
            reader.readChunk(c, splitOf(e), rank, tp, &state[stateKeyOf(e)]);
        !s)
      return s;
    padChunk(e, &state[stateKeyOf(e)]);
    takeDpChunk(stateKeyOf(e), &state[stateKeyOf(e)]);
    saved.erase(it);
  }
  if (!saved.empty())
    return Status::error(what + " holds '" + saved.begin()->second->name() +
                         "', which this bundle's model does not have");
  first = ckpt.step();
  resumedData = ckpt.data();
  // The base rate a run set (Model.set_lr) goes on from its checkpoint.
  if (auto it = ckpt.train_config().hyperparameters().find("lr");
      it != ckpt.train_config().hyperparameters().end())
    (*plan.mutable_train_config()->mutable_hyperparameters())["lr"] =
        it->second;
  return Status::ok();
}

Status TrainSession::loadBundle() {
  StoreReader reader(options.bundleDir, bundle(), plan.files());
  for (const pb::TensorEntry &e : table) {
    HostTensor &value = state[stateKeyOf(e)];
    if (e.role() == pb::Binding::OPTIMIZER_STATE || options.randomWeights)
      continue; // zeros or random, in checkInputs
    if (Status s = reader.readChunk(*bundleEntry[stateKeyOf(e)], splitOf(e),
                                    rank, tp, &value);
        !s)
      return s;
    padChunk(e, &value);
    takeDpChunk(stateKeyOf(e), &value);
  }
  return Status::ok();
}

/// Fills what the bundle does not hold (zero optimizer state, random
/// weights) and checks every state input against the step's types.
Status TrainSession::checkInputs() {
  for (size_t i = 0; i < numInputs; ++i) {
    const pb::Binding &b = program->input_bindings(i);
    std::string key = stateKey(b);
    if (key.empty())
      continue;
    HostTensor &value = state[key];
    if (value.bytes.empty() && options.resumeFrom.empty() &&
        (b.role() == pb::Binding::OPTIMIZER_STATE || options.randomWeights)) {
      value =
          HostTensor::zeros(executor->inputDType(i), executor->inputShape(i));
      // A frozen weight is random like the parameters (a LoRA base); the
      // statistics stay zero.
      if (b.role() == pb::Binding::PARAMETER || b.frozen()) {
        fillRandom(b.name(), &value);
        // The program relies on parameters being zero in their padding.
        auto entry = bundleEntry.find(key);
        Split split = splitOf(b);
        if (entry != bundleEntry.end() && split.isSplit()) {
          int64_t size = entry->second->type().shape(split.dim);
          if (isPadded(size, split, tp))
            value = toLocal(fromLocal(value, split, size, rank, tp), split,
                            size, rank, tp);
        }
      }
    }
    if (value.dtype != executor->inputDType(i) ||
        value.shape != executor->inputShape(i))
      return Status::error(
          bundle() + ": '" + b.name() + "' loads as " +
          describeTensor(value.dtype, value.shape) + "; the train step takes " +
          describeTensor(executor->inputDType(i), executor->inputShape(i)));
  }
  return Status::ok();
}

Status TrainSession::openData() {
  DataOptions data = options.data;
  // A run that evaluates reads whole batches: the forward pass returns the
  // whole batch's outputs, which the loss compares with all the labels.
  data.rowFirst = options.evaluate ? 0 : rowFirst;
  data.rowCount = options.evaluate ? 0 : rowCount;
  if (Status s = DataFeed::create(data, dataInputs, &feed); !s)
    return s;
  // A resumed run continues the same sequence of batches only if it is fed
  // the same way.
  if (!options.resumeFrom.empty() && resumedData != feed->description())
    return Status::error("the checkpoint was written by a run fed " +
                         resumedData + "; this run is fed " +
                         feed->description() +
                         ": resume with the same data flags (--text, "
                         "--inputs, --shuffle, --seed)");
  last = first + options.steps;
  progress = std::make_unique<Progress>(options, first, last, *feed);
  if (leader)
    if (Status s = progress->openMetrics(!options.resumeFrom.empty()); !s)
      return s;
  return Status::ok();
}

/// The state lives in the runner (on the GPU for CUDA): load it there, let
/// every state output feed its input, and copy it back only to save it.
Status TrainSession::bindState() {
  if (Status s = mapState(); !s)
    return s;
  for (const auto &[key, i] : stateInput) {
    if (Status s = executor->setInput(i, std::move(state[key])); !s)
      return Status::error("'" + program->input_bindings(i).name() +
                           "': " + s.message());
    state[key] = HostTensor();
  }
  return Status::ok();
}

/// Where the active step takes and returns each state tensor.
Status TrainSession::mapState() {
  for (size_t i = 0; i < numInputs; ++i)
    if (std::string key = stateKey(program->input_bindings(i)); !key.empty())
      stateInput[key] = i;
  for (int o = 0; o < program->output_bindings_size(); ++o) {
    const pb::Binding &b = program->output_bindings(o);
    if (b.role() == pb::Binding::LOSS)
      lossOutput = o;
    std::string key = stateKey(b);
    if (key.empty())
      continue;
    auto it = stateInput.find(key);
    if (it == stateInput.end())
      return Status::error(bundle() + ": the step returns '" + b.name() +
                           "', which it does not take");
    if (Status s = executor->carry(it->second, o); !s)
      return s;
  }
  return Status::ok();
}

/// The learning rate's input and schedule, and the reported outputs.
Status TrainSession::bindSchedule() {
  if (Status s = mapSchedule(); !s)
    return s;
  const pb::TrainConfig &config = plan.train_config();
  if (!config.lr_schedule().empty())
    schedule.name = config.lr_schedule();
  schedule.warmupSteps = config.warmup_steps();
  schedule.totalSteps = config.total_steps();
  if (Status s = checkLrSchedule(schedule, baseLr()); !s)
    return Status::error(bundle() + ": " + s.message());
  return Status::ok();
}

/// The active step's learning-rate input and reported outputs.
Status TrainSession::mapSchedule() {
  for (size_t i = 0; i < numInputs; ++i) {
    const pb::Binding &b = program->input_bindings(i);
    if (b.role() != pb::Binding::HYPERPARAMETER)
      continue;
    if (b.name() != "lr" || executor->inputDType(i) != DType::F32 ||
        !executor->inputShape(i).empty())
      return Status::error(bundle() + ": the step takes a hyperparameter '" +
                           b.name() + "' this runtime does not feed");
    lrInput = static_cast<int>(i);
  }
  for (int o = 0; o < program->output_bindings_size(); ++o)
    if (program->output_bindings(o).role() == pb::Binding::METRIC)
      metricOutputs.emplace_back(program->output_bindings(o).name(), o);
  return Status::ok();
}

Status TrainSession::setUpShape() {
  if (Status s = createRunner(*program, comm, options.backend, &executor); !s)
    return Status::error(bundle() + ": " + s.message());
  if (profiler)
    if (Status s = executor->setProfiler(profiler.get()); !s)
      return s;
  numInputs = program->inputs_size();
  if (Status s = mapState(); !s)
    return s;
  return mapSchedule();
}

Status TrainSession::profileEveryShape(StepProfiler *to) {
  for (size_t j = 0; j < shapes.size(); ++j)
    if (StepRunner *runner = shapeStep(j).executor.get())
      if (Status s = runner->setProfiler(to); !s)
        return s;
  return Status::ok();
}

Status TrainSession::useShape(size_t k) {
  if (k == activeShape)
    return Status::ok();
  ShapeStep &to = shapes[k];
  auto swapIn = [&] { std::swap(static_cast<ShapeStep &>(*this), to); };
  if (!to.executor) {
    swapIn();
    Status s = setUpShape();
    swapIn();
    if (!s) {
      // Made again on the next try, not used half set up: what
      // setUpShape sets goes.
      to.executor.reset();
      to.numInputs = 0;
      to.stateInput.clear();
      to.lrInput = to.lossOutput = -1;
      to.metricOutputs.clear();
      return s;
    }
  }
  // Every state tensor is held alike in every shape's step (the compiler
  // checked): checked again before any moves, so a refusal moves nothing.
  for (const auto &[key, i] : stateInput) {
    auto j = to.stateInput.find(key);
    if (j == to.stateInput.end() ||
        to.executor->inputDType(j->second) != executor->inputDType(i) ||
        to.executor->inputShape(j->second) != executor->inputShape(i))
      return Status::error(
          bundle() + ": batch shape " + std::to_string(k) + "'s step holds '" +
          program->input_bindings(i).name() + "' otherwise than batch shape " +
          std::to_string(activeShape) + "'s");
  }
  if (to.stateInput.size() != stateInput.size())
    return Status::error(bundle() + ": batch shape " + std::to_string(k) +
                         "'s step holds other state than batch shape " +
                         std::to_string(activeShape) + "'s");
  for (const auto &[key, i] : stateInput) {
    HostTensor value;
    Status s = executor->takeInput(i, &value);
    if (s)
      s = to.executor->setInput(to.stateInput[key], std::move(value));
    if (!s) {
      keptState = false;
      return s;
    }
  }
  swapIn();
  std::swap(to, shapes[activeShape]);
  activeShape = k;
  return Status::ok();
}

Status TrainSession::batchShapeOf(const Batch &batch, bool forward,
                                  size_t *k) const {
  std::vector<const std::vector<InputSlot> *> each;
  if (forward) {
    // An eval-mode pass takes its training-mode twin's arguments.
    for (const ForwardPass *pass : allForwardPasses())
      each.push_back(&pass->inputs);
    if (each.empty())
      return Status::ok(); // the forward says why it has none
    return DataFeed::matchBatch(batch, each, k, "forward pass");
  } else {
    for (size_t j = 0; j < shapes.size(); ++j)
      each.push_back(&shapeStep(j).dataInputs);
  }
  return DataFeed::matchBatch(batch, each, k);
}

std::vector<const ForwardPass *> TrainSession::allForwardPasses() const {
  std::vector<const ForwardPass *> all;
  for (size_t j = 0; j < shapes.size(); ++j)
    for (const ForwardPass &pass : shapeStep(j).forwardPasses)
      all.push_back(&pass);
  return all;
}

Status TrainSession::findForwardPass(const Batch &batch, bool eval,
                                     ForwardPass **found) {
  // Eval mode runs the training-mode programs only where the model's two
  // graphs are one (the compiler made no other and said nothing missing).
  std::vector<ForwardPass *> candidates;
  for (size_t j = 0; j < shapes.size(); ++j) {
    ShapeStep &at = shapeStep(j);
    std::vector<ForwardPass> &passes =
        eval && (!at.evalPasses.empty() || !plan.eval_missing().empty())
            ? at.evalPasses
            : at.forwardPasses;
    for (ForwardPass &pass : passes)
      candidates.push_back(&pass);
  }
  const std::string &missing = eval && !plan.eval_missing().empty()
                                   ? plan.eval_missing()
                                   : plan.forward_missing();
  std::string mode = eval ? " in eval mode" : "";
  if (candidates.empty())
    return Status::error(bundle() + " has no forward pass" + mode + ": " +
                         (missing.empty() ? "compile it again" : missing));
  std::vector<const std::vector<InputSlot> *> each;
  for (ForwardPass *pass : candidates)
    each.push_back(&pass->inputs);
  size_t k = 0;
  if (Status s = DataFeed::matchBatch(batch, each, &k, "forward pass"); !s)
    return Status::error(s.message() + (missing.empty()
                                            ? ""
                                            : " (the bundle has no other "
                                              "forward pass" +
                                                  mode + ": " + missing + ")"));
  *found = candidates[k];
  return Status::ok();
}

Status TrainSession::fetchState() {
  for (const auto &[key, i] : stateInput)
    if (Status s = executor->getInput(i, &state[key]); !s)
      return s;
  return Status::ok();
}

Status TrainSession::save(int64_t steps, std::string *writtenTo) {
  if (Status s = fetchState(); !s)
    return s;
  std::vector<StateTensor> tensors;
  // A checkpoint holds tp chunks: dp-split state is gathered over dp first
  // (every dp rank takes part; the first writes).
  std::map<std::string, HostTensor> tpLocal;
  for (const pb::TensorEntry &e : table) {
    std::string key = stateKeyOf(e);
    HostTensor *value = &state[key];
    if (auto it = dpLayoutOf.find(key); it != dpLayoutOf.end()) {
      if (Status s = gatherDp(*value, it->second, &tpLocal[key]); !s)
        return s;
      value = &tpLocal[key];
    }
    tensors.push_back({&e, value});
  }
  std::string written;
  // dp replicas hold the same state: the first writes it, the others wait
  // for it and learn how it went.
  Status wrote = Status::ok();
  // (A mesh of dp alone splits the state over it: every rank writes.)
  bool dpReplicas = mesh.dpAxis >= 0 && mesh.tpAxis >= 0;
  bool replica = dpReplicas && dpRank > 0;
  if (!replica)
    wrote =
        saveCheckpoint(options.checkpointDir, steps, plan, options.bundleDir,
                       tensors, feed->description(), *tpComm, &written);
  if (dpReplicas)
    if (Status s = shareOverDp(&wrote, &written); !s)
      return s;
  if (!wrote)
    return wrote;
  if (writtenTo)
    *writtenTo = written;
  if (leader) {
    progress->note("checkpoint " + written);
    if (options.keepCheckpoints > 0)
      if (Status s =
              pruneCheckpoints(options.checkpointDir, options.keepCheckpoints);
          !s)
        return s;
  }
  return Status::ok();
}

/// The first dp rank's checkpoint status and directory, on every dp rank.
Status TrainSession::shareOverDp(Status *status, std::string *text) {
  std::string message = *status ? "" : status->message();
  std::string payload = (*status ? "1" : "0") + *text + '\0' + message;
  int64_t size = static_cast<int64_t>(payload.size());
  std::vector<int64_t> axis{mesh.dpAxis};
  if (Status s = comm->broadcast(&size, sizeof size, 0, axis); !s)
    return s;
  payload.resize(static_cast<size_t>(size));
  if (Status s = comm->broadcast(payload.data(), size, 0, axis); !s)
    return s;
  size_t nul = payload.find('\0');
  *text = payload.substr(1, nul - 1);
  *status =
      payload[0] == '1' ? Status::ok() : Status::error(payload.substr(nul + 1));
  return Status::ok();
}

Status TrainSession::setStepInputs(int64_t step,
                                   const std::vector<const Batch *> *given) {
  // A caller's batch is read in place: each rank copies only what it
  // keeps (its rows of a split input, the whole of the others). Under
  // gradient accumulation the feed's batches are micro-batches, a step
  // reading the next microBatches of them.
  std::vector<Batch> fed;
  if (given) {
    if (static_cast<int64_t>(given->size()) != microBatches)
      return Status::error("the step sums the gradients of " +
                           std::to_string(microBatches) + " micro-batch" +
                           (microBatches == 1 ? "" : "es") +
                           " (gradient accumulation); it was given " +
                           std::to_string(given->size()));
    for (const Batch *batch : *given)
      if (Status s = DataFeed::checkBatch(*batch, dataInputs); !s)
        return s;
  } else {
    fed.resize(microBatches);
    for (int64_t j = 0; j < microBatches; ++j)
      if (Status s = feed->batch(step * microBatches + j, &fed[j]); !s)
        return s;
  }
  for (size_t i = 0; i < numInputs; ++i) {
    const pb::Binding &b = program->input_bindings(i);
    Status s = Status::ok();
    if (b.role() == pb::Binding::INPUT) {
      int64_t micro = b.micro_batch();
      if (micro < 0 || micro >= microBatches)
        return Status::error(bundle() + ": input '" + b.name() +
                             "' feeds micro-batch " + std::to_string(micro) +
                             " of " + std::to_string(microBatches));
      const Batch &batch = given ? *(*given)[micro] : fed[micro];
      auto found = batch.find(b.name());
      if (found == batch.end())
        return Status::error("step " + std::to_string(step) +
                             ": the batch has no '" + b.name() + "'");
      const HostTensor &value = found->second;
      auto split = inputSplit.find(b.name());
      bool fedRows = !given && rowCount > 0 && split != inputSplit.end() &&
                     split->second.dim == 0;
      if (split != inputSplit.end() && !fedRows)
        s = executor->setInput(i,
                               chunkOf(value, split->second, dpRank, mesh.dp));
      else if (given)
        s = executor->setInput(i, value);
      else
        s = executor->setInput(i, std::move(fed[micro][b.name()]));
    } else if (b.role() == pb::Binding::STEP) {
      HostTensor counter = HostTensor::zeros(DType::I64, {});
      *counter.data<int64_t>() = step + 1;
      s = executor->setInput(i, std::move(counter));
    } else if (static_cast<int>(i) == lrInput) {
      // The update of step `step` (0-based) at the schedule's rate.
      double lr = baseLr() * lrFactor(schedule, step, baseLr());
      HostTensor rate = HostTensor::zeros(DType::F32, {});
      *rate.data<float>() = static_cast<float>(lr);
      metrics["lr"] = lr;
      s = executor->setInput(i, std::move(rate));
    }
    if (!s)
      return Status::error("step " + std::to_string(step) + ": '" + b.name() +
                           "': " + s.message());
  }
  return Status::ok();
}

Status TrainSession::runForward(
    const Batch &batch, bool eval,
    std::vector<std::pair<std::string, HostTensor>> *outputs) {
  // The forward pass of the batch's shape and arguments reads the state
  // where the active step holds it.
  ForwardPass *pass = nullptr;
  if (Status s = findForwardPass(batch, eval, &pass); !s)
    return s;
  auto index = [&](const pb::Binding &b) -> std::optional<size_t> {
    auto it = stateInput.find(stateKey(b));
    return it == stateInput.end() ? std::nullopt
                                  : std::optional<size_t>(it->second);
  };
  // Dropout draws as the next step would.
  return runForwardPass(*pass, comm, options.backend, batch, *executor, index,
                        next + 1, {dpRank, mesh.dp}, outputs);
}

Status TrainSession::evaluate(int64_t batches, double *mean) {
  double sum = 0;
  for (int64_t k = 0; k < batches; ++k) {
    Batch batch;
    std::vector<std::pair<std::string, HostTensor>> outputs;
    double loss = 0;
    if (Status s = feed->batch(k, &batch); !s)
      return s;
    // The feed's batch holds the labels an appended loss reads; the
    // forward pass takes the model's inputs only.
    Batch inputs;
    if (std::vector<const ForwardPass *> passes = allForwardPasses();
        !passes.empty())
      for (const InputSlot &in : passes.front()->inputs)
        if (auto it = batch.find(in.name); it != batch.end())
          inputs[in.name] = it->second;
    if (Status s = runForward(inputs, /*eval=*/true, &outputs); !s)
      return Status::error("batch " + std::to_string(k) + ": " + s.message());
    if (outputs.empty())
      return Status::error(bundle() + ": the forward pass has no output");
    if (Status s = batchLoss(plan.train_config().loss(), batch,
                             outputs.front().second, &loss);
        !s)
      return Status::error("batch " + std::to_string(k) + ": " + s.message());
    sum += loss;
  }
  *mean = batches ? sum / batches : 0;
  return Status::ok();
}

Status TrainSession::runStep(float *lossOut,
                             const std::vector<const Batch *> *batch) {
  if (next >= last)
    return Status::error("the run's " + std::to_string(last - first) +
                         " steps are done");
  int64_t step = next;
  // A step refused before the program writes any state leaves the run as
  // it was (the same step next, the same weights); past that, the run's
  // state is the program's half-written one (and useShape says so where a
  // move between shapes failed halfway).
  keptState = true;
  // The step of the batch's shape (the feed's batches have the first).
  size_t k = 0;
  if (batch && !batch->empty() && shapes.size() > 1)
    if (Status s = batchShapeOf(*batch->front(), /*forward=*/false, &k); !s)
      return s;
  if (Status s = useShape(k); !s)
    return s;
  auto start = std::chrono::steady_clock::now();
  // The first step of a run pays for first touches of the arena and the
  // thread pools' start: traced, never counted.
  if (profiler)
    profiler->beginStep(step, step > std::max(first, profileFrom));
  int64_t feedStart = profiler ? StepProfiler::nowNs() : 0;
  if (Status s = setStepInputs(step, batch); !s)
    return s;
  if (profiler)
    profiler->record(feedSite, feedStart, StepProfiler::nowNs());
  if (Status s = executor->run(); !s) {
    keptState = executor->keptInputs();
    return Status::error("step " + std::to_string(step) + ": " + s.message());
  }
  keptState = false;
  if (profiler)
    profiler->endStep();
  float loss = 0;
  if (lossOutput >= 0) {
    HostTensor value;
    if (Status s = executor->getOutput(lossOutput, &value); !s)
      return s;
    loss = *value.data<float>();
  }
  for (const auto &[name, o] : metricOutputs) {
    HostTensor value;
    if (Status s = executor->getOutput(o, &value); !s)
      return s;
    metrics[name] = value.dtype == DType::F32 && value.bytes.size() == 4
                        ? *value.data<float>()
                        : NAN;
  }
  losses.push_back(loss);
  ++next;
  // A step the guard refused (cleave-optimizer's guard-nonfinite) changed
  // no parameter or state and counts as skipped, as GradScaler's do.
  if (auto it = metrics.find("nonfinite");
      it != metrics.end() && it->second != 0) {
    if (plan.train_config().on_nonfinite() != "skip") {
      keptState = true;
      return Status::error("step " + std::to_string(step) + ": " +
                           firstNonfinite(loss) +
                           "; the update was not applied (on_nonfinite "
                           "'stop'; 'skip' goes on past such steps)");
    }
    if (leader)
      progress->note("step " + std::to_string(step + 1) + ": " +
                     firstNonfinite(loss) + "; the update was skipped");
  }
  if (lossOut)
    *lossOut = loss;
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  if (leader)
    progress->step(step, loss, seconds, metrics, schedule.name != "constant");
  if (!options.checkpointDir.empty() &&
      ((options.saveEvery > 0 && (step + 1) % options.saveEvery == 0) ||
       step + 1 == last))
    if (Status s = save(step + 1); !s)
      return s;
  return Status::ok();
}

std::string TrainSession::firstNonfinite(float loss) {
  if (!std::isfinite(loss))
    return std::string("the loss is ") + (std::isnan(loss) ? "NaN" : "inf");
  for (int o = 0; o < program->output_bindings_size(); ++o) {
    const pb::Binding &b = program->output_bindings(o);
    HostTensor value;
    if (b.role() != pb::Binding::GRADIENT || !executor->getOutput(o, &value) ||
        value.dtype != DType::F32)
      continue;
    const float *x = value.data<float>();
    for (size_t i = 0; i < value.bytes.size() / 4; ++i)
      if (!std::isfinite(x[i]))
        return "the gradient of '" + b.name() + "' holds " +
               (std::isnan(x[i]) ? "NaN" : "inf");
  }
  return "a gradient holds inf or NaN (in another rank's shard)";
}

Status TrainSession::finish() {
  if (options.steps == 0)
    if (Status s = save(first); !s)
      return s;
  if (Status s = finishProfile(); !s)
    return s;
  return options.dumpDir.empty() ? Status::ok() : dump();
}

Status TrainSession::finishProfile() {
  if (!profiler)
    return Status::ok();
  return reportProfile(options.profile, options.log, options.traceFile);
}

Status TrainSession::reportProfile(bool report, std::ostream *log,
                                   const std::string &traceFile) {
  if (report) {
    MachineRates rates = measureMachineRates();
    std::ostringstream text;
    if (Status s = profiler->report(*comm, rates, text); !s)
      return Status::error("--profile: " + s.message());
    if (leader && log)
      *log << text.str() << std::flush;
  }
  if (traceFile.empty())
    return Status::ok();
  std::string json;
  std::string title =
      program->name() + " of " + options.bundleDir + " (" + mesh.str() + ")";
  if (Status s = profiler->gatherTrace(*comm, title, &json); !s)
    return Status::error("--trace: " + s.message());
  if (!leader)
    return Status::ok();
  if (Status s = writeFileAtomic(traceFile, json); !s)
    return Status::error("--trace: " + s.message());
  if (options.log)
    *options.log << "trace: " << traceFile << " ("
                 << (json.size() + 1023) / 1024
                 << " KiB; open in ui.perfetto.dev or chrome://tracing)\n";
  return Status::ok();
}

Trainer::Trainer(std::unique_ptr<TrainSession> session)
    : session_(std::move(session)) {}
Trainer::~Trainer() = default;

Status Trainer::open(const TrainerOptions &options,
                     std::unique_ptr<Trainer> *result) {
  auto session = std::make_unique<TrainSession>(options);
  if (Status s = session->openAll(); !s)
    return s;
  result->reset(new Trainer(std::move(session)));
  return Status::ok();
}

int64_t Trainer::stepsDone() const { return session_->next; }
bool Trainer::lastStepKeptState() const { return session_->keptState; }
double Trainer::learningRate() const { return session_->baseLr(); }
Status Trainer::setLearningRate(double lr) {
  if (session_->lrInput < 0)
    return Status::error(
        "this bundle's step holds its learning rate as a constant: compile "
        "it again to change it");
  if (!(lr > 0) || !std::isfinite(lr))
    return Status::error("the learning rate must be a finite number > 0, "
                         "not " +
                         std::to_string(lr));
  if (Status s = checkLrSchedule(session_->schedule, lr); !s)
    return s;
  (*session_->plan.mutable_train_config()->mutable_hyperparameters())["lr"] =
      lr;
  return Status::ok();
}
const std::map<std::string, double> &Trainer::lastMetrics() const {
  return session_->metrics;
}
int64_t Trainer::lastStep() const { return session_->last; }
Status Trainer::step(float *loss) { return session_->runStep(loss); }
Status Trainer::step(const Batch &batch, float *loss) {
  std::vector<const Batch *> one{&batch};
  return session_->runStep(loss, &one);
}
Status Trainer::step(const std::vector<Batch> &batches, float *loss) {
  std::vector<const Batch *> each;
  for (const Batch &b : batches)
    each.push_back(&b);
  return session_->runStep(loss, &each);
}
int64_t Trainer::microBatches() const { return session_->microBatches; }
Status
Trainer::forward(const Batch &batch, bool eval,
                 std::vector<std::pair<std::string, HostTensor>> *outputs) {
  return session_->runForward(batch, eval, outputs);
}
Status Trainer::evaluate(int64_t batches, double *mean) {
  if (batches < 1)
    return Status::error("evaluate needs at least one batch");
  if (Status s = session_->evaluate(batches, mean); !s)
    return s;
  if (session_->leader && session_->options.log) {
    std::ostringstream line;
    line << "eval_loss " << std::setprecision(7) << *mean << " over " << batches
         << " batch" << (batches == 1 ? "" : "es")
         << " (eval mode, no update)\n";
    *session_->options.log << line.str() << std::flush;
  }
  return Status::ok();
}
const std::vector<InputSlot> &Trainer::forwardInputs() const {
  static const std::vector<InputSlot> none;
  const std::vector<ForwardPass> &passes = session_->shapeStep(0).forwardPasses;
  return passes.empty() ? none : passes.front().inputs;
}
Status Trainer::checkBatch(const Batch &batch, bool forward) const {
  size_t k = 0;
  return session_->batchShapeOf(batch, forward, &k);
}
std::vector<std::vector<InputSlot>> Trainer::batchShapes(bool forward) const {
  std::vector<std::vector<InputSlot>> out;
  if (forward)
    for (const ForwardPass *pass : session_->allForwardPasses())
      out.push_back(pass->inputs);
  else
    for (size_t k = 0; k < session_->shapeCount(); ++k)
      out.push_back(session_->shapeStep(k).dataInputs);
  return out;
}
Status Trainer::saveCheckpoint(const std::string &root, std::string *written) {
  if (!root.empty())
    session_->options.checkpointDir = root;
  if (session_->options.checkpointDir.empty())
    return Status::error("no checkpoint directory was given");
  return session_->save(session_->next, written);
}
// A frozen weight that mixed precision holds in bf16 is read and written
// as f32 here (numpy has no bfloat16), rounded once on the way in.
Status Trainer::readTensor(const std::string &name, HostTensor *value) {
  if (Status s = session_->readTensor(name, value); !s)
    return s;
  widenToF32(value);
  return Status::ok();
}
Status Trainer::writeTensor(const std::string &name, const HostTensor &value) {
  HostTensor held = value;
  if (Status s = heldAs(name, &held); !s)
    return s;
  return session_->writeTensor(name, held);
}
Status Trainer::checkTensorWrite(const std::string &name,
                                 const HostTensor &value) const {
  ModelTensor t;
  HostTensor held = value;
  if (Status s = heldAs(name, &held); !s)
    return s;
  return session_->checkTensorWrite(name, held, &t);
}
Status Trainer::heldAs(const std::string &name, HostTensor *value) const {
  ModelTensor t;
  if (Status s = session_->findTensor(name, &t); !s)
    return s;
  DType held = fromPlan(t.entries.front()->type().dtype());
  if (value->dtype == DType::F32 && held != DType::F32)
    narrowFromF32(value, held);
  return Status::ok();
}
std::vector<std::pair<std::string, bool>> Trainer::tensorNames() const {
  std::vector<std::pair<std::string, bool>> names;
  std::vector<ModelTensor> tensors;
  if (!modelTensors(session_->plan.tensors(), &tensors))
    return names;
  for (const ModelTensor &t : tensors)
    names.push_back(
        {t.name, t.entries.front()->role() == pb::Binding::PARAMETER});
  return names;
}
const std::vector<InputSlot> &Trainer::inputs() const {
  return session_->shapeStep(0).dataInputs;
}
Status Trainer::finish() { return session_->finish(); }

Status Trainer::startProfile(bool keepTrace) {
  TrainSession &s = *session_;
  if (s.profiler)
    return Status::error("the steps are already being profiled");
  auto profiler = std::make_unique<StepProfiler>(s.comm->rank(), keepTrace);
  if (Status st = s.profileEveryShape(profiler.get()); !st) {
    (void)s.profileEveryShape(nullptr);
    return st;
  }
  s.feedSite = profiler->addSite("(feed the batch)", "", SiteKind::Host, {});
  s.profiler = std::move(profiler);
  s.profileFrom = s.next;
  return Status::ok();
}

Status Trainer::profileReport(const std::string &traceFile, std::string *text) {
  TrainSession &s = *session_;
  if (!s.profiler)
    return Status::error("no profile was started");
  std::ostringstream out;
  Status st = s.next <= s.profileFrom + 1
                  ? Status::error("profile at least 2 steps: the first one "
                                  "is not counted")
                  : s.reportProfile(true, &out, traceFile);
  // Timing stops whatever happened, in every shape's runner.
  (void)s.profileEveryShape(nullptr);
  s.profiler.reset();
  *text = out.str();
  return st;
}

Status train(const TrainerOptions &options) {
  std::unique_ptr<Trainer> trainer;
  if (Status s = Trainer::open(options, &trainer); !s)
    return s;
  if (options.evaluate) {
    double mean = 0;
    return trainer->evaluate(options.steps, &mean);
  }
  while (trainer->stepsDone() < trainer->lastStep())
    if (Status s = trainer->step(); !s)
      return s;
  return trainer->finish();
}

} // namespace cleave::rt

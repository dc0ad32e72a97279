//===- Extension.cpp - cleave._cleave: the package's native half ----------===//
//
// The compiler (include/cleave/Driver/Driver.h) and the trainer (runtime/train)
// in the Python process, no subprocess: compile, inspect and export, and a
// Session holding one trainer per rank of this process (every rank on
// threads, or this process's MPI rank). The pure-Python package (cleave/)
// is the API users see; this module is its engine. Long calls release the
// GIL; every failure raises cleave.Error with the message the CLI prints.
//
//===----------------------------------------------------------------------===//

#include "cleave/Driver/Bundle.h"
#include "cleave/Driver/Driver.h"
#include "cleave/runtime/comm.h"
#include "cleave/runtime/data.h"
#include "cleave/runtime/thread_ranks.h"
#include "cleave/runtime/trainer.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "plan/plan.pb.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <mutex>

namespace py = pybind11;
namespace rt = ::cleave::rt;
namespace driver = ::cleave::driver;

namespace {

/// What every failure raises: cleave.Error carries the CLI's message.
struct CleaveError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void check(const rt::Status &s) {
  if (!s)
    throw CleaveError(s.message());
}

//===----------------------------------------------------------------------===//
// numpy <-> HostTensor
//===----------------------------------------------------------------------===//

struct DTypeName {
  rt::DType dtype;
  const char *numpy;
};
constexpr DTypeName kDTypes[] = {
    {rt::DType::F32, "float32"}, {rt::DType::I64, "int64"},
    {rt::DType::I32, "int32"},   {rt::DType::Bool, "bool"},
    {rt::DType::F64, "float64"}, {rt::DType::F16, "float16"},
    {rt::DType::I8, "int8"},     {rt::DType::I16, "int16"},
    {rt::DType::U8, "uint8"},    {rt::DType::U16, "uint16"},
    {rt::DType::U32, "uint32"},
};

rt::HostTensor fromNumpy(const std::string &what, const py::array &array) {
  std::string name = py::str(array.dtype()).cast<std::string>();
  const DTypeName *match = nullptr;
  for (const DTypeName &d : kDTypes)
    if (name == d.numpy)
      match = &d;
  if (!match)
    throw CleaveError(what + " has dtype " + name +
                      ", which Cleave does not take");
  py::array c = py::array::ensure(array, py::array::c_style);
  rt::HostTensor t;
  t.dtype = match->dtype;
  t.shape.assign(c.shape(), c.shape() + c.ndim());
  t.bytes.resize(static_cast<size_t>(c.nbytes()));
  if (!t.bytes.empty())
    std::memcpy(t.bytes.data(), c.data(), t.bytes.size());
  return t;
}

py::array toNumpy(const rt::HostTensor &t) {
  const char *name = nullptr;
  for (const DTypeName &d : kDTypes)
    if (d.dtype == t.dtype)
      name = d.numpy;
  if (!name)
    throw CleaveError(std::string("a tensor of dtype ") +
                      rt::dtypeName(t.dtype) + " has no numpy dtype");
  py::array out(py::dtype(name), t.shape);
  if (!t.bytes.empty())
    std::memcpy(out.mutable_data(), t.bytes.data(), t.bytes.size());
  return out;
}

std::map<std::string, rt::HostTensor> batchFromDict(const py::dict &batch) {
  std::map<std::string, rt::HostTensor> out;
  for (auto item : batch) {
    std::string name = py::str(item.first).cast<std::string>();
    out[name] =
        fromNumpy("batch input '" + name + "'", py::array::ensure(item.second));
  }
  return out;
}

//===----------------------------------------------------------------------===//
// Compiling
//===----------------------------------------------------------------------===//

/// Collects MLIR's diagnostics as the lines the CLI would print, without
/// the "cleave: " prefix.
class DiagnosticCollector {
public:
  explicit DiagnosticCollector(mlir::MLIRContext &context)
      : handler(&context, [this](mlir::Diagnostic &diag) {
          bool error = diag.getSeverity() == mlir::DiagnosticSeverity::Error;
          add((error ? "" : "note: ") + diag.str());
          for (const mlir::Diagnostic &note : diag.getNotes())
            if (!llvm::StringRef(note.str()).starts_with("see current"))
              add("note: " + note.str());
          return mlir::success();
        }) {}
  std::string text;

private:
  void add(const std::string &line) {
    text += (text.empty() ? "" : "\n") + line;
  }
  mlir::ScopedDiagnosticHandler handler;
};

void compile(const driver::CompileOptions &options) {
  std::string message;
  {
    py::gil_scoped_release release;
    mlir::MLIRContext context(mlir::MLIRContext::Threading::DISABLED);
    driver::setUpContext(context);
    DiagnosticCollector diagnostics(context);
    rt::Status s = driver::compileBundle(context, options);
    if (!s)
      message = s.message().empty() ? diagnostics.text : s.message();
    if (!s && message.empty())
      message = "compiling '" + options.model + "' failed";
  }
  if (!message.empty())
    throw CleaveError(message);
}

std::string inspect(const std::string &bundle, bool json) {
  std::string out;
  check(driver::inspectBundle(bundle, json, &out));
  return out;
}

//===----------------------------------------------------------------------===//
// Training
//===----------------------------------------------------------------------===//

struct SessionOptions {
  std::string bundle, resume, ranks = "threads", backend = "cpu";
  std::string precision = "f32";
  double timeout = 60;
  int64_t steps = int64_t(1) << 40;
  rt::DataOptions data;
};

/// The trainers of this process: every rank of the mesh (threads), or this
/// process's rank (MPI), driven in lockstep.
class Session {
public:
  explicit Session(const SessionOptions &o) {
    rt::TrainerOptions t;
    t.bundleDir = o.bundle;
    t.steps = o.steps;
    t.data = o.data;
    t.resumeFrom = o.resume;
    check(rt::parseBackend(o.backend, &t.backend.backend));
    check(rt::parsePrecision(o.precision, &t.backend.precision));
    if (!(o.timeout > 0))
      throw CleaveError("timeout must be a positive number of seconds");
    ::cleave::plan::Plan plan;
    check(rt::loadBundlePlan(o.bundle, &plan));
    rt::MeshGeometry mesh = rt::meshOf(plan);
    loss_ = plan.train_config().loss();
    tp_ = mesh.tp;
    ranks_count_ = mesh.ranks();
    py::gil_scoped_release release;
    if (o.ranks == "mpi") {
      check(rt::makeMpiCommunicator(mesh.shape, o.timeout, &mpi_));
      t.comm = mpi_.get();
      trainers_.resize(1);
      check(rt::Trainer::open(t, &trainers_[0]));
      return;
    }
    if (o.ranks != "threads")
      throw CleaveError("ranks must be 'threads' or 'mpi', not '" + o.ranks +
                        "'");
    check(rt::ThreadRanks::create(mesh.shape, o.timeout, &ranks_));
    trainers_.resize(ranks_count_);
    check(ranks_->run([&](int rank) {
      rt::TrainerOptions own = t;
      own.comm = &ranks_->comm(rank);
      return rt::Trainer::open(own, &trainers_[rank]);
    }));
  }

  /// One step on \p batch (a dict of arrays, or a list of them: the
  /// micro-batches of one update), or on the feed's next batch.
  float step(const py::object &batch) {
    std::vector<std::map<std::string, rt::HostTensor>> tensors;
    bool given = !batch.is_none();
    if (py::isinstance<py::dict>(batch)) {
      tensors.push_back(batchFromDict(batch.cast<py::dict>()));
    } else if (given) {
      for (py::handle one : batch.cast<py::list>())
        tensors.push_back(batchFromDict(one.cast<py::dict>()));
    }
    int64_t wanted = trainers_[0]->microBatches();
    if (given && static_cast<int64_t>(tensors.size()) != wanted)
      throw CleaveError("the step sums the gradients of " +
                        std::to_string(wanted) + " micro-batch" +
                        (wanted == 1 ? "" : "es") +
                        " (gradient_accumulation_steps); it was given " +
                        std::to_string(tensors.size()));
    // Checked here, once: a bad batch must not break the mesh.
    for (const auto &one : tensors)
      check(trainers_[0]->checkBatch(one, /*forward=*/false));
    std::vector<float> losses(trainers_.size());
    py::gil_scoped_release release;
    // A step refused before any rank wrote its state (a label out of
    // range found by the loss's kernel) leaves the model usable.
    check(onRanks(
        [&](int r) {
          return given ? trainers_[r]->step(tensors, &losses[r])
                       : trainers_[r]->step(&losses[r]);
        },
        [&](int r) { return trainers_[r]->lastStepKeptState(); }));
    return losses[0];
  }

  /// The model's outputs on \p batch (name, array), computed sharded with
  /// the current weights: no update.
  py::list forward(const py::dict &batch, bool eval) {
    std::map<std::string, rt::HostTensor> tensors = batchFromDict(batch);
    // (Without a forward pass the trainer says why.)
    if (!trainers_[0]->forwardInputs().empty())
      check(trainers_[0]->checkBatch(tensors, /*forward=*/true));
    std::vector<std::vector<std::pair<std::string, rt::HostTensor>>> outs(
        trainers_.size());
    {
      py::gil_scoped_release release;
      // A forward writes no state: a refused one leaves the model usable.
      check(onRanks(
          [&](int r) { return trainers_[r]->forward(tensors, eval, &outs[r]); },
          [](int) { return true; }));
    }
    py::list out;
    for (const auto &[name, value] : outs[0])
      out.append(py::make_tuple(name, toNumpy(value)));
    return out;
  }

  std::vector<std::tuple<std::string, std::string, std::vector<int64_t>>>
  forwardInputs() const {
    return describe(trainers_[0]->forwardInputs());
  }

  /// Every batch shape's inputs (of its step, or its forward pass).
  std::vector<
      std::vector<std::tuple<std::string, std::string, std::vector<int64_t>>>>
  batchShapes(bool forward) const {
    std::vector<
        std::vector<std::tuple<std::string, std::string, std::vector<int64_t>>>>
        out;
    for (const auto &slots : trainers_[0]->batchShapes(forward))
      out.push_back(describe(slots));
    return out;
  }

  py::array read(const std::string &name) {
    std::vector<rt::HostTensor> values(trainers_.size());
    {
      py::gil_scoped_release release;
      check(onRanks(
          [&](int r) { return trainers_[r]->readTensor(name, &values[r]); }));
    }
    return toNumpy(values[0]);
  }

  void write(const std::string &name, const py::array &value) {
    rt::HostTensor t = fromNumpy("'" + name + "'", value);
    // Refused here, before any rank writes: a refusal must not break the
    // mesh (ThreadRanks::run aborts it on any rank's failure).
    check(trainers_[0]->checkTensorWrite(name, t));
    py::gil_scoped_release release;
    check(onRanks([&](int r) { return trainers_[r]->writeTensor(name, t); }));
  }

  std::string saveCheckpoint(const std::string &root) {
    std::vector<std::string> written(trainers_.size());
    py::gil_scoped_release release;
    auto work = [&](int r) {
      return trainers_[r]->saveCheckpoint(root, &written[r]);
    };
    // The ranks agree on every failure of a checkpoint (a full disk, a
    // folder that cannot be written), so one leaves the model usable.
    check(ranks_ ? ranks_->runAgreed(work) : onRanks(work));
    return written[0];
  }

  /// Refuses \p name with \p value as write would, writing nothing.
  void checkWrite(const std::string &name, const py::array &value) {
    check(trainers_[0]->checkTensorWrite(name,
                                         fromNumpy("'" + name + "'", value)));
  }

  void startProfile(bool keepTrace) {
    py::gil_scoped_release release;
    check(
        onRanks([&](int r) { return trainers_[r]->startProfile(keepTrace); }));
  }

  /// Rank 0's report of the steps since startProfile (this process's first
  /// trainer's under MPI: rank 0 holds the text there).
  std::string profileReport(const std::string &trace) {
    std::vector<std::string> texts(trainers_.size());
    py::gil_scoped_release release;
    check(onRanks(
        [&](int r) { return trainers_[r]->profileReport(trace, &texts[r]); }));
    return texts[0];
  }

  std::vector<std::pair<std::string, bool>> tensors() const {
    return trainers_[0]->tensorNames();
  }

  /// (name, numpy dtype, shape) of every input a step takes.
  std::vector<std::tuple<std::string, std::string, std::vector<int64_t>>>
  inputs() const {
    return describe(trainers_[0]->inputs());
  }

  static std::vector<std::tuple<std::string, std::string, std::vector<int64_t>>>
  describe(const std::vector<rt::InputSlot> &slots) {
    std::vector<std::tuple<std::string, std::string, std::vector<int64_t>>> out;
    for (const rt::InputSlot &slot : slots) {
      std::string dtype = rt::dtypeName(slot.dtype);
      for (const DTypeName &d : kDTypes)
        if (d.dtype == slot.dtype)
          dtype = d.numpy;
      out.emplace_back(slot.name, dtype, slot.shape);
    }
    return out;
  }

  int64_t stepsDone() const { return trainers_[0]->stepsDone(); }
  int64_t microBatches() const { return trainers_[0]->microBatches(); }
  /// How the step's loss was made: "auto" (the model's first output),
  /// "cross_entropy" or "mse" (appended).
  const std::string &lossKind() const { return loss_; }
  /// A new base learning rate on every rank (the ranks check alike, so a
  /// refusal comes from the first and changes none).
  void setLr(double lr) {
    for (auto &t : trainers_)
      check(t->setLearningRate(lr));
  }
  double lr() const { return trainers_[0]->learningRate(); }
  std::map<std::string, double> metrics() const {
    return trainers_[0]->lastMetrics();
  }
  int64_t tp() const { return tp_; }
  int rank() const { return mpi_ ? mpi_->rank() : 0; }

private:
  rt::Status onRanks(const std::function<rt::Status(int)> &work,
                     const std::function<bool(int)> &kept = nullptr) {
    if (ranks_)
      return ranks_->run(work, kept);
    rt::Status s = work(0);
    if (!s && mpi_)
      return rt::Status::error("rank " + std::to_string(mpi_->rank()) + ": " +
                               s.message());
    return s;
  }

  int64_t tp_ = 1, ranks_count_ = 1;
  std::string loss_;
  std::unique_ptr<rt::ThreadRanks> ranks_;
  std::unique_ptr<rt::Communicator> mpi_;
  std::vector<std::unique_ptr<rt::Trainer>> trainers_;
};

} // namespace

PYBIND11_MODULE(_cleave, m) {
  m.doc() = "Cleave's compiler and trainer, in-process (use the cleave "
            "package, not this module)";
  py::register_exception<CleaveError>(m, "Error");

  py::class_<driver::CompileOptions>(m, "CompileOptions")
      .def(py::init<>())
      .def_readwrite("model", &driver::CompileOptions::model)
      .def_readwrite("output", &driver::CompileOptions::output)
      .def_readwrite("inputs", &driver::CompileOptions::inputs)
      .def_readwrite("loss", &driver::CompileOptions::loss)
      .def_readwrite("optimizer", &driver::CompileOptions::optimizer)
      .def_readwrite("lr", &driver::CompileOptions::lr)
      .def_readwrite("weight_decay", &driver::CompileOptions::weightDecay)
      .def_readwrite("momentum", &driver::CompileOptions::momentum)
      .def_readwrite("beta1", &driver::CompileOptions::beta1)
      .def_readwrite("beta2", &driver::CompileOptions::beta2)
      .def_readwrite("eps", &driver::CompileOptions::eps)
      .def_readwrite("seed", &driver::CompileOptions::seed)
      .def_readwrite("tp", &driver::CompileOptions::tp)
      .def_readwrite("dp", &driver::CompileOptions::dp)
      .def_readwrite("zero", &driver::CompileOptions::zero)
      .def_readwrite("devices", &driver::CompileOptions::devices)
      .def_readwrite("memory_per_device",
                     &driver::CompileOptions::memoryPerDevice)
      .def_readwrite("plan", &driver::CompileOptions::planFile)
      .def_readwrite("weights", &driver::CompileOptions::weightsFile)
      .def_readwrite("plan_only", &driver::CompileOptions::planOnly)
      .def_readwrite("precision", &driver::CompileOptions::precision)
      .def_readwrite("recompute", &driver::CompileOptions::recompute)
      .def_readwrite("sequence_parallel",
                     &driver::CompileOptions::sequenceParallel)
      .def_readwrite("lr_schedule", &driver::CompileOptions::lrSchedule)
      .def_readwrite("warmup_steps", &driver::CompileOptions::warmupSteps)
      .def_readwrite("total_steps", &driver::CompileOptions::totalSteps)
      .def_readwrite("clip_grad_norm", &driver::CompileOptions::clipGradNorm)
      .def_readwrite("clip_grad_value", &driver::CompileOptions::clipGradValue)
      .def_readwrite("on_nonfinite", &driver::CompileOptions::onNonfinite)
      .def_readwrite("accumulate", &driver::CompileOptions::accumulate)
      .def_readwrite("eval_model", &driver::CompileOptions::evalModel)
      .def_readwrite("unlabeled_model", &driver::CompileOptions::unlabeledModel)
      .def_readwrite("unlabeled_eval_model",
                     &driver::CompileOptions::unlabeledEvalModel)
      .def_readwrite("freeze", &driver::CompileOptions::freeze)
      .def_readwrite("frozen_names", &driver::CompileOptions::frozenNames)
      .def(
          "add_shape",
          [](driver::CompileOptions &o, const std::string &model,
             const std::string &evalModel,
             const std::map<std::string, std::string> &inputs,
             const std::string &unlabeledModel,
             const std::string &unlabeledEvalModel) {
            o.moreShapes.push_back(
                {model, evalModel, inputs, unlabeledModel, unlabeledEvalModel});
          },
          py::arg("model"), py::arg("eval_model"), py::arg("inputs"),
          py::arg("unlabeled_model") = "", py::arg("unlabeled_eval_model") = "",
          "One more batch shape (cleave compile --shape): its model file "
          "(\"\": the first's) and its inputs' specs");
  m.def("compile", &compile, "Writes a bundle (cleave compile)");
  m.def("inspect", &inspect, py::arg("bundle"), py::arg("json"),
        "cleave inspect [--json]");
  m.def(
      "export",
      [](const std::string &source, const std::string &output,
         bool trainableOnly) {
        py::gil_scoped_release release;
        check(driver::exportModel(source, output, trainableOnly));
      },
      py::arg("source"), py::arg("output"), py::arg("trainable_only") = false,
      "cleave export SOURCE -o OUTPUT [--trainable-only]");
  m.def("mpi_launched", &rt::launchedByMpi,
        "Whether an MPI launcher started this process");
  m.def("finalize_mpi", &rt::finalizeMpi, "MPI_Finalize, if MPI is active");

  py::class_<SessionOptions>(m, "SessionOptions")
      .def(py::init<>())
      .def_readwrite("bundle", &SessionOptions::bundle)
      .def_readwrite("resume", &SessionOptions::resume)
      .def_readwrite("ranks", &SessionOptions::ranks)
      .def_readwrite("backend", &SessionOptions::backend)
      .def_readwrite("precision", &SessionOptions::precision)
      .def_readwrite("timeout", &SessionOptions::timeout)
      .def_readwrite("steps", &SessionOptions::steps)
      .def_property(
          "text", [](const SessionOptions &o) { return o.data.textFile; },
          [](SessionOptions &o, const std::string &v) { o.data.textFile = v; })
      .def_property(
          "inputs", [](const SessionOptions &o) { return o.data.inputsDir; },
          [](SessionOptions &o, const std::string &v) { o.data.inputsDir = v; })
      .def_property(
          "batch_from_arrays",
          [](const SessionOptions &o) { return o.data.batchFromArrays; },
          [](SessionOptions &o, bool v) { o.data.batchFromArrays = v; })
      .def_property(
          "shuffle", [](const SessionOptions &o) { return o.data.shuffle; },
          [](SessionOptions &o, bool v) { o.data.shuffle = v; })
      .def_property(
          "seed", [](const SessionOptions &o) { return o.data.seed; },
          [](SessionOptions &o, uint64_t v) { o.data.seed = v; })
      .def_property(
          "fed_by_caller",
          [](const SessionOptions &o) { return o.data.fedByCaller; },
          [](SessionOptions &o, bool v) { o.data.fedByCaller = v; });

  py::class_<Session>(m, "Session")
      .def(py::init<const SessionOptions &>())
      .def("step", &Session::step, py::arg("batch") = py::none())
      .def("read", &Session::read)
      .def("write", &Session::write)
      .def("check_write", &Session::checkWrite)
      .def("save_checkpoint", &Session::saveCheckpoint)
      .def("start_profile", &Session::startProfile)
      .def("profile_report", &Session::profileReport)
      .def("tensors", &Session::tensors)
      .def("inputs", &Session::inputs)
      .def("forward_inputs", &Session::forwardInputs)
      .def("batch_shapes", &Session::batchShapes, py::arg("forward") = false)
      .def("forward", &Session::forward, py::arg("batch"),
           py::arg("eval") = false)
      .def_property_readonly("loss_kind",
                             [](const Session &s) { return s.lossKind(); })
      .def("set_lr", &Session::setLr)
      .def_property_readonly("lr", &Session::lr)
      .def_property_readonly("metrics", &Session::metrics)
      .def_property_readonly("steps_done", &Session::stepsDone)
      .def_property_readonly("micro_batches",
                             [](const Session &s) { return s.microBatches(); })
      .def_property_readonly("tp", &Session::tp)
      .def_property_readonly("rank", &Session::rank);
}

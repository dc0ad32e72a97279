//===- Compile.cpp - cleave compile as a library --------------------------===//
//
// Model loading (ONNX or TorchScript), the training pipeline and the bundle
// writer, for the cleave binary and the Python package alike.
//
//===----------------------------------------------------------------------===//

#include "Cleave/CleaveAttrNames.h"
#include "Cleave/CleaveDialect.h"
#include "cleave/Autodiff/Autodiff.h"
#include "cleave/Driver/Bundle.h"
#include "cleave/Driver/Driver.h"
#include "cleave/Evaluate/ConstantEvaluator.h"
#include "cleave/Import/TorchImporter.h"
#include "cleave/Pipelines/Pipelines.h"
#include "cleave/Sharding/Sharding.h"
#include "cleave/runtime/files.h"
#include "cleave/runtime/lr_schedule.h"
#include "cleave/runtime/store.h"
#include "cleave/runtime/trainer.h"
#include "cleave/runtime/types.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "onnx/onnx_pb.h"
#include "plan/plan.pb.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FileUtilities.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Regex.h"

#include <cmath>
#include <map>
#include <tuple>

using namespace mlir;
namespace rt = ::cleave::rt;

namespace cleave::driver {

void setUpContext(MLIRContext &context) {
  DialectRegistry registry;
  registry.insert<mlir::cleave::CleaveDialect, func::FuncDialect>();
  mlir::cleave::registerDifferentiationRules(registry);
  mlir::cleave::registerShardingRules(registry);
  context.appendDialectRegistry(registry);
  context.loadDialect<mlir::cleave::CleaveDialect, func::FuncDialect>();
}

static rt::Status
parseInputSpecs(MLIRContext &ctx,
                const std::map<std::string, std::string> &inputs,
                mlir::cleave::OnnxImportOptions &options) {
  options.foldConstants = mlir::cleave::foldConstantOps;
  for (const auto &[name, spec] : inputs) {
    mlir::cleave::InputSpec parsed;
    std::string error = mlir::cleave::parseInputSpec(&ctx, spec, parsed);
    if (!error.empty())
      return rt::Status::error("--input " + name + ": " + error);
    options.inputs[name] = parsed;
  }
  return rt::Status::ok();
}

rt::Status loadModel(MLIRContext &ctx, const std::string &path,
                     const std::map<std::string, std::string> &inputs,
                     mlir::cleave::OnnxImportOptions &options,
                     std::unique_ptr<mlir::cleave::OnnxModel> *result) {
  if (rt::Status s = parseInputSpecs(ctx, inputs, options); !s)
    return s;
  if (rt::Status s = rt::checkReadable(path, "model"); !s)
    return s;
  std::string error;
  llvm::StringRef ext = llvm::sys::path::extension(path);
  if (ext != ".pt" && ext != ".pth" && ext != ".torchscript") {
    *result = mlir::cleave::OnnxModel::load(path, error);
    return *result ? rt::Status::ok() : rt::Status::error(error);
  }
  *result = mlir::cleave::loadTorchScript(
      &ctx, path, options.inputs, error,
      mlir::cleave::TorchIsolation::Subprocess, options.maxArchiveBytes);
  if (!*result)
    return rt::Status::error(error);
  // Parameters with requires_grad=False are not trained.
  for (const auto &entry : (*result)->proto().metadata_props())
    if (entry.key() == "cleave.frozen")
      for (llvm::StringRef rest = entry.value(); !rest.empty();) {
        auto [name, tail] = rest.split(',');
        options.frozen.push_back("^" + llvm::Regex::escape(name) + "$");
        rest = tail;
      }
  return rt::Status::ok();
}

/// The learning rate's schedule and gradient clipping, checked.
static rt::Status scheduleOptions(const CompileOptions &o,
                                  mlir::cleave::TrainStepOptions *train) {
  rt::LrSchedule schedule{o.lrSchedule, o.warmupSteps, o.totalSteps};
  if (rt::Status s = rt::checkLrSchedule(schedule, train->lr); !s)
    return rt::Status::error("--lr-schedule: " + s.message());
  for (auto [name, value] :
       {std::pair<const char *, double>{"--clip-grad-norm", o.clipGradNorm},
        {"--clip-grad-value", o.clipGradValue}})
    if (!std::isfinite(value) || value < 0)
      return rt::Status::error(std::string(name) +
                               " must be a finite number >= 0 (0: no "
                               "clipping), not " +
                               std::to_string(value));
  if (o.onNonfinite != "stop" && o.onNonfinite != "skip" &&
      o.onNonfinite != "ignore")
    return rt::Status::error("--on-nonfinite must be stop, skip or ignore, "
                             "not '" +
                             o.onNonfinite + "'");
  // fp16's loss scaling skips such steps itself (they set its scale).
  train->guardNonfinite = o.onNonfinite != "ignore";
  if (o.accumulate < 1)
    return rt::Status::error("--accumulate must be at least 1 (micro-batches "
                             "per update), not " +
                             std::to_string(o.accumulate));
  train->accumulate = o.accumulate;
  train->lrInput = true;
  train->maxGradNorm = o.clipGradNorm;
  train->clipGradValue = o.clipGradValue;
  return rt::Status::ok();
}

/// The training hyperparameters, checked: values that are not finite train
/// nothing but NaNs.
static rt::Status trainOptions(const CompileOptions &o,
                               mlir::cleave::TrainStepOptions *train) {
  bool adam = o.optimizer == "adamw";
  train->loss = o.loss;
  train->optimizer = o.optimizer;
  train->lr = o.lr.value_or(adam ? 1e-3 : 1e-2);
  train->momentum = o.momentum;
  train->weightDecay = o.weightDecay.value_or(adam ? 1e-2 : 0.0);
  train->beta1 = o.beta1;
  train->beta2 = o.beta2;
  train->eps = o.eps;
  for (auto [name, value] : {std::pair<const char *, double>{"--lr", train->lr},
                             {"--momentum", o.momentum},
                             {"--weight-decay", train->weightDecay},
                             {"--beta1", o.beta1},
                             {"--beta2", o.beta2},
                             {"--eps", o.eps}})
    if (!std::isfinite(value))
      return rt::Status::error(std::string(name) +
                               " must be a finite number, not " +
                               std::to_string(value));
  if (o.tp < 1)
    return rt::Status::error("--tp must be at least 1");
  if (o.dp < 1)
    return rt::Status::error("--mesh dp must be at least 1");
  if (o.tpInner < 0 || (o.tpInner > 0 && o.tp % o.tpInner != 0))
    return rt::Status::error("--tp-inner " + std::to_string(o.tpInner) +
                             " must divide --tp " + std::to_string(o.tp) +
                             " (0: the compiler chooses)");
  // (More batch shapes take the first's layouts as --plan rules, which
  // name no layout over two tp axes.)
  bool factorable = o.zero == 0 && o.planFile.empty() &&
                    o.sequenceParallel != "on" && o.devices == 0 &&
                    o.moreShapes.empty();
  if (o.tpInner > 1 && o.tpInner < o.tp && !factorable)
    return rt::Status::error(
        "--tp-inner factors the tp ranks of a mesh whose layouts the "
        "compiler chooses: not with --zero, --plan, --sequence-parallel on, "
        "--devices or more batch shapes than one");
  train->tp = o.tp;
  // 0: the partitioner prices one tp axis and each factoring of it.
  train->tpInner = o.tpInner == 0     ? (factorable ? 0 : 1)
                   : o.tpInner < o.tp ? o.tpInner
                                      : 1;
  train->dp = o.dp;
  train->zero = o.zero;
  train->planFile = o.planFile;
  train->fuse = o.fusion;
  if (o.precision != "f32" && o.precision != "bf16" && o.precision != "fp16")
    return rt::Status::error("--precision must be f32, bf16 or fp16, not '" +
                             o.precision + "'");
  train->precision = o.precision;
  if (o.recompute != "none" && o.recompute != "selective" &&
      o.recompute != "full" && o.recompute != "auto")
    return rt::Status::error("--recompute must be none, selective, full or "
                             "auto, not '" +
                             o.recompute + "'");
  train->recompute = o.recompute == "auto" ? "none" : o.recompute;
  if (o.sequenceParallel != "on" && o.sequenceParallel != "off" &&
      o.sequenceParallel != "auto")
    return rt::Status::error("--sequence-parallel must be on, off or auto, "
                             "not '" +
                             o.sequenceParallel + "'");
  if (o.sequenceParallel == "on" && o.tp == 1 && o.devices == 0)
    return rt::Status::error("--sequence-parallel on splits activations over "
                             "the tp ranks: give --tp 2 or more (or "
                             "--devices)");
  train->sequenceParallel = o.sequenceParallel == "on";
  return scheduleOptions(o, train);
}

/// Compiles \p model's forward pass split by \p layouts into \p program,
/// named \p name; false (the compiler's errors in \p why) where it fails.
static bool compileForwardOf(MLIRContext &ctx, mlir::cleave::OnnxModel &model,
                             const mlir::cleave::OnnxImportOptions &options,
                             const llvm::StringMap<Attribute> &layouts,
                             const CompileOptions &mesh, const char *name,
                             int32_t shape, ::cleave::plan::Program &program,
                             std::string *why) {
  ScopedDiagnosticHandler capture(&ctx, [&](Diagnostic &d) {
    if (d.getSeverity() == DiagnosticSeverity::Error)
      *why += (why->empty() ? "" : "; ") + d.str();
    return success();
  });
  OwningOpRef<ModuleOp> module = mlir::cleave::importOnnx(&ctx, model, options);
  if (!module || failed(mlir::cleave::compileShardedForward(
                     *module, mesh.tp, mesh.dp, mesh.zero, mesh.fusion, layouts,
                     program, mesh.tpInner)))
    return false;
  program.set_name(name);
  program.set_shape(shape);
  return true;
}

/// How \p program takes its input \p i: its local type and split, as text
/// to compare.
static std::string heldAs(const ::cleave::plan::Program &program, int i) {
  const ::cleave::plan::Binding &b = program.input_bindings(i);
  return program.values(program.inputs(i)).type().SerializeAsString() + "|" +
         std::to_string(b.has_split_dim() ? b.split_dim() : -1) + "," +
         std::to_string(b.split_blocks()) + "," +
         std::to_string(b.split_granule()) + "," +
         std::to_string(b.split_parts()) + "," +
         std::to_string(b.split_copies()) + "," +
         std::to_string(b.has_dp_split_dim() ? b.dp_split_dim() : -1);
}

/// Where \p forward takes a weight or buffer split otherwise than \p step
/// holds it (the runtime feeds it the step's chunks as they are): why;
/// empty where it takes every one as held.
static std::string heldOtherwise(const ::cleave::plan::Program &step,
                                 const ::cleave::plan::Program &forward) {
  using ::cleave::plan::Binding;
  std::map<std::pair<int, std::string>, std::string> want;
  for (int i = 0; i < step.input_bindings_size(); ++i)
    want[{step.input_bindings(i).role(), step.input_bindings(i).name()}] =
        heldAs(step, i);
  for (int i = 0; i < forward.input_bindings_size(); ++i) {
    const Binding &b = forward.input_bindings(i);
    if (b.role() != Binding::PARAMETER && b.role() != Binding::BUFFER)
      continue;
    auto it = want.find({b.role(), b.name()});
    if (it == want.end())
      return "it reads '" + b.name() + "', which the train step does not hold";
    if (it->second != heldAs(forward, i))
      return "it holds '" + b.name() + "' otherwise than the train step";
  }
  return "";
}

namespace {
/// One set of arguments a forward pass is compiled for: the model (loaded,
/// or its file) and its eval-mode export ("": the eval graph is the same).
struct ForwardVariant {
  mlir::cleave::OnnxModel *model = nullptr;
  std::string path, evalPath;
  std::string what; ///< "", or " without labels"
};
} // namespace

static void noteMissing(std::string *field, const std::string &why) {
  *field += (field->empty() ? "" : "; ") + why;
}

/// The step's state layouts by name (parameters and buffers), as the
/// forward passes take them.
static llvm::StringMap<Attribute> stateLayouts(func::FuncOp trainMain) {
  llvm::StringMap<Attribute> layouts;
  for (unsigned i = 0, e = trainMain.getNumArguments(); i < e; ++i) {
    auto name =
        trainMain.getArgAttrOfType<StringAttr>(i, mlir::cleave::kParameterAttr);
    if (!name)
      name =
          trainMain.getArgAttrOfType<StringAttr>(i, mlir::cleave::kBufferAttr);
    auto layout = trainMain.getArgAttrOfType<mlir::cleave::LayoutAttr>(
        i, mlir::cleave::kLayoutAttr);
    if (name && layout && layout.getDim() >= 0)
      layouts[name.getValue()] = mlir::cleave::LayoutAttr::get(
          trainMain.getContext(), layout.getDim(), layout.getBlocks(),
          layout.getGranule(), -1, layout.getParts(), layout.getCopies());
  }
  return layouts;
}

/// The model's forward passes beside the train step of batch shape
/// \p shape (Model.forward, evaluate), one per variant of its arguments,
/// each in eval mode too where the variant gives that graph: imported
/// again and split as \p trainMain's state is. Where one cannot be made
/// the bundle says why instead: training does not need it.
static void addForwardPrograms(MLIRContext &ctx,
                               const std::vector<ForwardVariant> &variants,
                               mlir::cleave::OnnxImportOptions options,
                               func::FuncOp trainMain,
                               const ::cleave::plan::Program &step,
                               const CompileOptions &mesh, int32_t shape,
                               ::cleave::plan::Plan &plan) {
  if (!mesh.forwardPass) {
    plan.set_forward_missing("it was compiled with --no-forward-pass");
    return;
  }
  options.notFinite = nullptr;
  llvm::StringMap<Attribute> layouts = stateLayouts(trainMain);
  std::string its =
      shape > 0 ? "batch shape " + std::to_string(shape) + "'s" : "its";
  std::vector<::cleave::plan::Program> made;
  for (const ForwardVariant &v : variants) {
    std::string why;
    std::unique_ptr<mlir::cleave::OnnxModel> loaded;
    mlir::cleave::OnnxModel *model = v.model;
    if (!model) {
      if (rt::Status s = loadModel(ctx, v.path, {}, options, &loaded); !s)
        why = s.message();
      model = loaded.get();
    }
    std::string forward = its + " forward pass" + v.what;
    // A pass the runtime cannot feed the step's chunks as they are is left
    // out, as one that does not compile.
    auto compile = [&](mlir::cleave::OnnxModel &m, const char *name) {
      ::cleave::plan::Program &program = made.emplace_back();
      if (compileForwardOf(ctx, m, options, layouts, mesh, name, shape, program,
                           &why) &&
          (why = heldOtherwise(step, program)).empty())
        return true;
      made.pop_back();
      return false;
    };
    if (!model || !compile(*model, "forward")) {
      noteMissing(plan.mutable_forward_missing(),
                  forward + " did not compile: " + why);
      continue;
    }
    if (v.evalPath.empty())
      continue;
    std::unique_ptr<mlir::cleave::OnnxModel> evalModel;
    why.clear();
    if (rt::Status s = loadModel(ctx, v.evalPath, {}, options, &evalModel); !s)
      why = s.message();
    else if (compile(*evalModel, "forward_eval"))
      continue;
    // Eval mode then has no program of its own: refused, never run as
    // training mode.
    noteMissing(plan.mutable_eval_missing(),
                forward + " in eval mode did not compile: " + why);
  }
  // Each shape's training-mode passes before its eval-mode ones.
  std::stable_sort(made.begin(), made.end(), [](const auto &a, const auto &b) {
    return a.name() < b.name();
  });
  for (::cleave::plan::Program &p : made)
    *plan.add_programs() = std::move(p);
}

/// \p shape's forward variants: with its labels (\p model) and without.
static std::vector<ForwardVariant>
forwardVariants(mlir::cleave::OnnxModel &model,
                const CompileOptions::BatchShape &shape) {
  std::vector<ForwardVariant> variants{{&model, "", shape.evalModel, ""}};
  if (!shape.unlabeledModel.empty())
    variants.push_back({nullptr, shape.unlabeledModel, shape.unlabeledEvalModel,
                        " without labels"});
  return variants;
}

/// The step's parameter layouts as --plan rules of exact names and
/// layouts (Layout::str()'s spelling), for another batch shape's step.
static std::string layoutRules(func::FuncOp main) {
  std::string rules;
  for (unsigned i = 0, e = main.getNumArguments(); i < e; ++i) {
    auto name =
        main.getArgAttrOfType<StringAttr>(i, mlir::cleave::kParameterAttr);
    if (!name)
      continue;
    auto attr = main.getArgAttrOfType<mlir::cleave::LayoutAttr>(
        i, mlir::cleave::kLayoutAttr);
    mlir::cleave::Layout layout;
    if (attr && attr.getDim() >= 0)
      layout = mlir::cleave::Layout::split(attr.getDim(), attr.getBlocks(),
                                           attr.getGranule());
    rules +=
        "^" + llvm::Regex::escape(name.getValue()) + "$ " + layout.str() + "\n";
  }
  return rules;
}

/// Where \p step holds its state and data inputs otherwise than \p first
/// (a tensor split or typed otherwise, an input more or less): why; empty
/// where one set of weights serves both.
static std::string differsFrom(const ::cleave::plan::Program &first,
                               const ::cleave::plan::Program &step) {
  using ::cleave::plan::Binding;
  auto key = [](const Binding &b) {
    return std::to_string(b.role()) + "/" + b.name() + "/" + b.slot() + "/" +
           std::to_string(b.micro_batch());
  };
  std::map<std::string, std::string> names; // key -> the binding's name
  std::map<std::string, std::string> want;
  for (int i = 0; i < first.input_bindings_size(); ++i) {
    const Binding &b = first.input_bindings(i);
    if (b.role() != Binding::STEP && b.role() != Binding::HYPERPARAMETER) {
      want[key(b)] = b.role() == Binding::INPUT ? "" : heldAs(first, i);
      names[key(b)] = b.name().empty() ? b.slot() : b.name();
    }
  }
  for (int i = 0; i < step.input_bindings_size(); ++i) {
    const Binding &b = step.input_bindings(i);
    if (b.role() == Binding::STEP || b.role() == Binding::HYPERPARAMETER)
      continue;
    auto it = want.find(key(b));
    if (it == want.end())
      return "it takes '" + b.name() + "', which the first shape's does not";
    if (b.role() != Binding::INPUT && it->second != heldAs(step, i))
      return "it holds '" + b.name() + "' split otherwise";
    want.erase(it);
  }
  if (!want.empty())
    return "it does not take '" + names[want.begin()->first] +
           "', which the first shape's does";
  return "";
}

/// The inner axis's size where the partitioner factored the tp ranks into
/// two mesh axes (cleave.mesh_axes "[dp,]tp,tp_inner"), else 1.
static int64_t factoredTp(ModuleOp module) {
  auto axes = module->getAttrOfType<StringAttr>(mlir::cleave::kMeshAxesAttr);
  auto shape =
      module->getAttrOfType<DenseI64ArrayAttr>(mlir::cleave::kMeshAttr);
  if (!axes || !axes.getValue().ends_with("tp,tp_inner") || !shape ||
      shape.size() < 2)
    return 1;
  return shape[shape.size() - 1];
}

/// Compiles batch shape \p index (1, 2, ...) of \p o.moreShapes: its train
/// step on the first step's layouts (\p main), then its forward passes.
static rt::Status addBatchShape(MLIRContext &ctx, const CompileOptions &o,
                                size_t index,
                                mlir::cleave::OnnxImportOptions options,
                                mlir::cleave::TrainStepOptions train,
                                const CompileOptions &mesh, func::FuncOp main,
                                ::cleave::plan::Plan &plan) {
  const CompileOptions::BatchShape &shape = o.moreShapes[index - 1];
  std::string what = "batch shape " + std::to_string(index);
  // Its step would take the first's layouts as --plan rules, which name no
  // layout over two tp axes.
  if (train.tpInner > 1)
    return rt::Status::error(what + ": more batch shapes than one are not "
                                    "supported with --tp-inner yet");
  std::map<std::string, std::string> inputs = o.inputs;
  for (const auto &[name, spec] : shape.inputs)
    inputs[name] = spec;
  std::unique_ptr<mlir::cleave::OnnxModel> model;
  options.notFinite = nullptr;
  const std::string &path = shape.model.empty() ? o.model : shape.model;
  if (rt::Status s = loadModel(ctx, path, inputs, options, &model); !s)
    return rt::Status::error(what + ": " + s.message());
  std::string why;
  ScopedDiagnosticHandler capture(&ctx, [&](Diagnostic &d) {
    if (d.getSeverity() == DiagnosticSeverity::Error)
      why += (why.empty() ? "" : "; ") + d.str();
    return success();
  });
  // The first step's layouts, as rules the partitioner applies without a
  // search: every state tensor is then held alike in every shape's step.
  llvm::SmallString<128> rulesPath;
  std::optional<llvm::FileRemover> remove;
  if (mesh.tp > 1) {
    int fd = -1;
    if (llvm::sys::fs::createTemporaryFile("cleave-layouts", "txt", fd,
                                           rulesPath))
      return rt::Status::error(what + ": cannot write a temporary file");
    remove.emplace(rulesPath);
    llvm::raw_fd_ostream out(fd, /*shouldClose=*/true);
    out << layoutRules(main);
  }
  train.planFile = rulesPath.str().str();
  OwningOpRef<ModuleOp> module =
      mlir::cleave::importOnnx(&ctx, *model, options);
  ::cleave::plan::Program program;
  if (!module ||
      failed(mlir::cleave::compileTrainStep(*module, train, program)))
    return rt::Status::error(what + " did not compile: " + why);
  program.set_shape(static_cast<int32_t>(index));
  const ::cleave::plan::Program &first = plan.programs(0);
  if (std::string differs = differsFrom(first, program); !differs.empty())
    return rt::Status::error(what +
                             "'s step cannot share the first shape's "
                             "weights: " +
                             differs);
  // The mesh was chosen (or given) for the first shape: a budget this
  // shape's step exceeds is said, never silently passed.
  if (o.memoryPerDevice > 0) {
    std::vector<std::pair<std::string, int64_t>> axes;
    if (mesh.dp > 1)
      axes.push_back({"dp", mesh.dp});
    if (mesh.tp > 1 || mesh.dp == 1)
      axes.push_back({"tp", mesh.tp});
    int64_t need = estimateStep(program, axes, o.topology).memoryBytes;
    if (need > o.memoryPerDevice)
      return rt::Status::error(
          what + " (" + batchShapeText(program, mesh.dp) + ") needs " +
          std::to_string(need) +
          " B per device on the first shape's mesh "
          "and recomputation, over --memory-per-device " +
          std::to_string(o.memoryPerDevice) +
          " B: give the largest shape first, so that they are chosen for "
          "it");
  }
  for (const ::cleave::plan::Program &p : plan.programs())
    if (!rt::isForwardProgram(p) &&
        batchShapeText(p, mesh.dp) == batchShapeText(program, mesh.dp))
      return rt::Status::error(what + " (" + batchShapeText(program, mesh.dp) +
                               ") repeats batch shape " +
                               std::to_string(p.shape()));
  *plan.add_programs() = std::move(program);
  // Protobuf's repeated messages stay where they are as more are added.
  const ::cleave::plan::Program &step = plan.programs(plan.programs_size() - 1);
  addForwardPrograms(ctx, forwardVariants(*model, shape), options,
                     module->lookupSymbol<func::FuncOp>("main"), step, mesh,
                     static_cast<int32_t>(index), plan);
  return rt::Status::ok();
}

/// What the plan records of how it was compiled.
static void recordConfig(const CompileOptions &o,
                         const mlir::cleave::TrainStepOptions &train,
                         ::cleave::plan::Plan &plan) {
  ::cleave::plan::TrainConfig *config = plan.mutable_train_config();
  config->set_source(o.model);
  config->set_loss(train.loss);
  config->set_optimizer(train.optimizer);
  auto &hp = *config->mutable_hyperparameters();
  hp["lr"] = train.lr;
  hp["weight_decay"] = train.weightDecay;
  if (train.optimizer == "adamw") {
    hp["beta1"] = train.beta1;
    hp["beta2"] = train.beta2;
    hp["eps"] = train.eps;
  } else {
    hp["momentum"] = train.momentum;
  }
  config->set_seed(o.seed);
  if (train.precision != "f32")
    config->set_precision(train.precision);
  if (train.recompute != "none")
    config->set_recompute(train.recompute);
  config->set_sequence_parallel(train.sequenceParallel);
  if (o.lrSchedule != "constant") {
    config->set_lr_schedule(o.lrSchedule);
    config->set_warmup_steps(o.warmupSteps);
    config->set_total_steps(o.totalSteps);
  }
  if (o.onNonfinite != "ignore")
    config->set_on_nonfinite(o.onNonfinite);
  if (train.accumulate > 1)
    config->set_accumulate(train.accumulate);
  if (train.maxGradNorm > 0)
    hp["max_grad_norm"] = train.maxGradNorm;
  if (train.clipGradValue > 0)
    hp["clip_grad_value"] = train.clipGradValue;
  if (o.tp > 1)
    hp["tp"] = o.tp;
  if (o.dp > 1)
    hp["dp"] = o.dp;
  if (o.zero > 0)
    hp["zero"] = o.zero;
}

/// --devices: compiles \p module for every mesh of o.devices devices (a copy
/// each), keeps the chosen one's module in \p module and program in \p plan,
/// records the candidates in the plan, and sets \p mesh's and \p train's
/// dp, tp and zero to the choice.
/// The largest dimension of any float argument of main that is not a data
/// input (the weights and buffers): tp past it splits no weight over all
/// its ranks, and each rank would still be written its own weights file.
/// 0 when the model has none.
static int64_t widestWeightDim(OwningOpRef<ModuleOp> &module) {
  auto main = module->lookupSymbol<func::FuncOp>("main");
  int64_t widest = 0;
  if (!main)
    return 0;
  for (BlockArgument arg : main.getArguments()) {
    if (main.getArgAttr(arg.getArgNumber(), mlir::cleave::kInputAttr))
      continue;
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (!type || !isa<FloatType>(type.getElementType()))
      continue;
    for (int64_t d : type.getShape())
      widest = std::max(widest, d);
  }
  return widest;
}

static rt::Status chooseMeshFor(MLIRContext &ctx, OwningOpRef<ModuleOp> &module,
                                const CompileOptions &o,
                                mlir::cleave::TrainStepOptions &train,
                                ::cleave::plan::Plan &plan,
                                CompileOptions &mesh) {
  if (o.devices > 0 && (o.tp != 1 || o.dp != 1 || o.zero != 0))
    return rt::Status::error(
        "give either --devices (the compiler chooses the mesh) or --tp, "
        "--mesh and --zero, not both");
  std::map<std::tuple<int64_t, int64_t, int64_t, std::string, bool>,
           OwningOpRef<ModuleOp>>
      copies;
  int64_t widest = widestWeightDim(module);
  auto compile = [&](const MeshTrial &trial, ::cleave::plan::Program &program,
                     std::string &error) {
    if (widest > 0 && trial.tp > widest) {
      error = "more tp ranks than the widest weight dimension (" +
              std::to_string(widest) + ") can be split over";
      return false;
    }
    mlir::cleave::TrainStepOptions t = train;
    t.dp = trial.dp;
    t.tp = trial.tp;
    t.zero = trial.zero;
    t.recompute = trial.recompute;
    t.sequenceParallel = trial.sequenceParallel;
    OwningOpRef<ModuleOp> &copy =
        copies[{trial.dp, trial.tp, trial.zero, trial.recompute,
                trial.sequenceParallel}];
    copy = module->clone();
    // A trial's errors name why it is refused; they are not the user's.
    ScopedDiagnosticHandler quiet(&ctx, [&](Diagnostic &d) {
      if (d.getSeverity() == DiagnosticSeverity::Error && error.empty())
        error = d.str();
      return success();
    });
    return succeeded(mlir::cleave::compileTrainStep(*copy, t, program));
  };
  // --recompute auto: none, then what fits the budget; a policy given is
  // every trial's.
  bool ladder = o.recompute == "auto" && o.memoryPerDevice > 0;
  std::string policy = o.recompute == "auto" ? "none" : o.recompute;
  std::vector<MeshTrial> trials =
      o.devices > 0 ? meshTrials(o.devices, policy)
                    : std::vector<MeshTrial>{{o.dp, o.tp, o.zero, policy}};
  for (MeshTrial &t : trials)
    t.sequenceParallel = train.sequenceParallel && t.tp > 1;
  bool sequenceLadder = o.sequenceParallel == "auto" && o.memoryPerDevice > 0;
  std::string error;
  MeshTrial trial;
  if (!chooseMesh(trials, o.devices, o.memoryPerDevice, ladder, sequenceLadder,
                  o.topology, compile, *plan.mutable_mesh_choice(),
                  *plan.add_programs(), trial, error))
    return rt::Status::error(error);
  module = std::move(copies[{trial.dp, trial.tp, trial.zero, trial.recompute,
                             trial.sequenceParallel}]);
  mesh.dp = train.dp = trial.dp;
  mesh.tp = train.tp = trial.tp;
  mesh.zero = train.zero = trial.zero;
  train.recompute = trial.recompute;
  train.sequenceParallel = trial.sequenceParallel;
  return rt::Status::ok();
}

/// "trains 14 tensors (1,234 values); frozen 2: a, b; scalars that train:
/// logit_scale" for the imported @main: what trains is never a silent
/// choice (an exporter's literal stored as an initializer trains like a
/// learned temperature until it is frozen).
static std::string trainSummary(func::FuncOp main,
                                ArrayRef<std::string> notFinite) {
  using mlir::cleave::kFrozenAttr;
  using mlir::cleave::kParameterAttr;
  int64_t tensors = 0, values = 0;
  SmallVector<std::string> frozen, scalars;
  for (unsigned i = 0; i < main.getNumArguments(); ++i) {
    auto name = main.getArgAttrOfType<StringAttr>(i, kParameterAttr);
    if (!name)
      continue;
    if (main.getArgAttr(i, kFrozenAttr)) {
      frozen.push_back(name.str() +
                       (llvm::is_contained(notFinite, name.getValue())
                            ? " (not finite)"
                            : ""));
      continue;
    }
    auto type = cast<RankedTensorType>(main.getArgument(i).getType());
    ++tensors;
    values += type.getNumElements();
    if (type.getNumElements() == 1)
      scalars.push_back(name.str());
  }
  auto list = [](ArrayRef<std::string> names) {
    constexpr size_t kShown = 8;
    std::string out;
    for (size_t i = 0; i < names.size() && i < kShown; ++i)
      out += (i ? ", " : "") + names[i];
    if (names.size() > kShown)
      out += " and " + std::to_string(names.size() - kShown) + " more";
    return out;
  };
  std::string line = "trains " + std::to_string(tensors) + " tensor" +
                     (tensors == 1 ? "" : "s") + " (" + std::to_string(values) +
                     " values)";
  line += frozen.empty() ? "; none frozen"
                         : "; frozen " + std::to_string(frozen.size()) + ": " +
                               list(frozen);
  if (!scalars.empty())
    line += "; scalars that train (--freeze one that is a constant): " +
            list(scalars);
  return line;
}

rt::Status compileBundle(MLIRContext &ctx, const CompileOptions &o) {
  if (o.output.empty() || o.output == "-")
    return rt::Status::error("give the bundle directory to write with -o "
                             "BUNDLE");
  // Before any work: a folder that is not a bundle is never replaced.
  if (rt::Status s = checkReplaceable(o.output); !s)
    return s;
  for (auto [path, what] :
       {std::pair<const std::string &, const char *>{o.planFile, "--plan file"},
        {o.weightsFile, "--weights file"}})
    if (!path.empty())
      if (rt::Status s = rt::checkReadable(path, what); !s)
        return s;
  mlir::cleave::TrainStepOptions train;
  if (rt::Status s = trainOptions(o, &train); !s)
    return s;
  mlir::cleave::OnnxImportOptions options;
  options.seed = o.seed;
  options.frozen.assign(o.freeze.begin(), o.freeze.end());
  options.maxArchiveBytes = o.maxArchiveBytes;
  std::unique_ptr<mlir::cleave::OnnxModel> model;
  if (rt::Status s = loadModel(ctx, o.model, o.inputs, options, &model); !s)
    return s;
  llvm::StringSet<> initializers;
  for (const auto &t : model->proto().graph().initializer())
    initializers.insert(t.name());
  for (const std::string &name : o.frozenNames)
    if (initializers.contains(name))
      options.frozen.push_back("^" + llvm::Regex::escape(name) + "$");
  WeightSource weights(ctx, *model);
  if (!o.weightsFile.empty()) {
    if (rt::Status s = weights.useSafetensors(o.weightsFile); !s)
      return s;
    // A frozen weight the checkpoint holds in bf16 / f16 stays so (the
    // importer applies it to frozen weights only).
    for (const auto &t : model->proto().graph().initializer())
      if (std::optional<rt::DType> d = weights.storedDType(t.name());
          d && (*d == rt::DType::BF16 || *d == rt::DType::F16) &&
          t.data_type() == onnx::TensorProto::FLOAT)
        options.heldTypes[t.name()] = mlir::cleave::elementTypeOf(&ctx, *d);
  }
  std::vector<std::string> notFinite;
  options.notFinite = &notFinite;
  OwningOpRef<ModuleOp> module =
      mlir::cleave::importOnnx(&ctx, *model, options);
  if (!module)
    return rt::Status::error("");
  // Said once the bundle is written: a failed compile prints its error
  // alone.
  std::string summary =
      trainSummary(module->lookupSymbol<func::FuncOp>("main"), notFinite);
  ::cleave::plan::Plan plan;
  plan.set_format_version(rt::kPlanFormatVersion);
  CompileOptions mesh = o;
  if (o.devices > 0 || o.memoryPerDevice > 0) {
    if (rt::Status s = chooseMeshFor(ctx, module, o, train, plan, mesh); !s)
      return s;
  } else if (int64_t widest = widestWeightDim(module);
             widest > 0 && o.tp > widest) {
    return rt::Status::error("--tp " + std::to_string(o.tp) +
                             " is more ranks than the widest "
                             "weight dimension of '" +
                             o.model + "' (" + std::to_string(widest) +
                             ") can be split over: use at most --tp " +
                             std::to_string(widest));
  } else if (failed(mlir::cleave::compileTrainStep(*module, train,
                                                   *plan.add_programs()))) {
    return rt::Status::error("");
  }
  // The tp ranks as the partitioner factored them (tp-inner, chosen or
  // given): the forward passes are split alike.
  mesh.tpInner = train.tpInner = factoredTp(*module);
  // Mesh axes, outermost first: dp, then tp (ranks of one tp group are
  // neighbours, as on a node).
  if (mesh.dp > 1) {
    plan.add_mesh(mesh.dp);
    plan.add_mesh_axes("dp");
  }
  if (train.tpInner > 1) {
    plan.add_mesh(mesh.tp / train.tpInner);
    plan.add_mesh_axes("tp");
    plan.add_mesh(train.tpInner);
    plan.add_mesh_axes("tp_inner");
  } else if (mesh.tp > 1 || mesh.dp == 1) {
    plan.add_mesh(mesh.tp);
    plan.add_mesh_axes("tp");
  }
  recordConfig(mesh, train, plan);
  auto main = module->lookupSymbol<func::FuncOp>("main");
  CompileOptions::BatchShape first{
      "", mesh.evalModel, {}, mesh.unlabeledModel, mesh.unlabeledEvalModel};
  const ::cleave::plan::Program &step = plan.programs(0);
  addForwardPrograms(ctx, forwardVariants(*model, first), options, main, step,
                     mesh, 0, plan);
  for (size_t k = 1; k <= o.moreShapes.size(); ++k)
    if (rt::Status s =
            addBatchShape(ctx, o, k, options, train, mesh, main, plan);
        !s)
      return s;
  rt::Status written =
      writeBundle(*model, weights, main, plan, o.output, o.planOnly);
  if (written && o.report)
    o.report(summary);
  return written;
}

} // namespace cleave::driver

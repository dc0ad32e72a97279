//===- cleave.cpp - The Cleave driver ---------------------------*- C++ -*-===//
//
// `cleave import` prints a model as cleave IR; `cleave compile` builds the
// train step of a model into a bundle; `cleave run BUNDLE` trains with it
// (`cleave run MODEL --forward` executes a model's forward pass instead).
// Every failure prints one "cleave: error: ..." message and exits non-zero.
//
//===----------------------------------------------------------------------===//

#include "Cleave/CleaveDialect.h"
#include "cleave/Autodiff/Autodiff.h"
#include "cleave/Driver/Bundle.h"
#include "cleave/Driver/Driver.h"
#include "cleave/Driver/Inspect.h"
#include "cleave/Evaluate/ConstantEvaluator.h"
#include "cleave/Import/OnnxImporter.h"
#include "cleave/Import/TorchImporter.h"
#include "cleave/Lowering/EmitPlan.h"
#include "cleave/Pipelines/Pipelines.h"
#include "cleave/Sharding/Sharding.h"
#include "cleave/runtime/comm.h"
#include "cleave/runtime/executor.h"
#include "cleave/runtime/files.h"
#include "cleave/runtime/npy.h"
#include "cleave/runtime/run_flags.h"
#include "cleave/runtime/trainer.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"
#include "onnx/onnx_pb.h"
#include "plan/plan.pb.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Regex.h"
#include "llvm/Support/Signals.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <thread>
#include <unistd.h>

using namespace mlir;
namespace cl = llvm::cl;
namespace rt = ::cleave::rt;

static cl::SubCommand importCmd("import", "Import a model and print its IR");
static cl::SubCommand compileCmd("compile",
                                 "Compile a model's training step into a "
                                 "bundle");
static cl::SubCommand inspectCmd("inspect",
                                 "Show a bundle's sharding, collectives and "
                                 "memory");
static cl::opt<std::string> inspectPath(cl::Positional, cl::desc("BUNDLE"),
                                        cl::Required, cl::sub(inspectCmd));
static cl::opt<bool> inspectJson("json", cl::desc("Print JSON"),
                                 cl::sub(inspectCmd));
static cl::SubCommand
    launchCmd("launch", "Start an MPI job of N ranks running a script (each "
                        "rank one process: cleave.tensor_parallel(..., "
                        "distributed=True))");
static cl::opt<int64_t> launchRanksFlag("n", cl::desc("Ranks to start"),
                                        cl::init(0), cl::sub(launchCmd));
static cl::opt<std::string> launchProgram(cl::Positional,
                                          cl::desc("SCRIPT.py | PROGRAM"),
                                          cl::Required, cl::sub(launchCmd));
static cl::list<std::string> launchArgs(cl::ConsumeAfter, cl::desc("ARGS..."),
                                        cl::sub(launchCmd));
static cl::SubCommand runCmd("run", "Train with a bundle (or run a model's "
                                    "forward pass with --forward)");

static cl::opt<std::string>
    modelPath(cl::Positional, cl::desc("MODEL.onnx | MODEL.pt | BUNDLE"),
              cl::Required, cl::sub(importCmd), cl::sub(compileCmd),
              cl::sub(runCmd));
static cl::list<std::string>
    inputSpecs("input", cl::desc("Fix a graph input: NAME=8x128[xi64]"),
               cl::value_desc("NAME=DIMS"), cl::sub(importCmd),
               cl::sub(compileCmd), cl::sub(runCmd));
static cl::list<std::string> shapeSpecs(
    "shape",
    cl::desc("Also compile the step for another batch shape (repeatable; "
             "the inputs' dims over --input's): one set of weights trains "
             "on every shape"),
    cl::value_desc("NAME=DIMS[,NAME=DIMS...]"), cl::sub(compileCmd));
static cl::opt<std::string> outputPath("o",
                                       cl::desc("Output file (bundle "
                                                "directory for compile)"),
                                       cl::init("-"), cl::sub(importCmd),
                                       cl::sub(compileCmd));
static cl::opt<std::string> maxArchiveBytes(
    "max-archive-bytes",
    cl::desc("Refuse a TorchScript archive whose records inflate to more "
             "bytes in all (default: 64 times its size, at least 1 GiB)"),
    cl::value_desc("BYTES"), cl::sub(importCmd), cl::sub(compileCmd),
    cl::sub(runCmd));
static cl::opt<std::string> lossKind("loss",
                                     cl::desc("auto | cross_entropy | mse"),
                                     cl::init("auto"), cl::sub(compileCmd));
static cl::opt<std::string> optimizerKind("optimizer", cl::desc("sgd | adamw"),
                                          cl::init("sgd"), cl::sub(compileCmd));
static cl::opt<double> lr("lr",
                          cl::desc("Learning rate (default 0.01 for sgd, "
                                   "0.001 for adamw)"),
                          cl::sub(compileCmd));
static cl::opt<double> momentum("momentum", cl::desc("SGD momentum"),
                                cl::init(0.0), cl::sub(compileCmd));
static cl::opt<double> weightDecay("weight-decay",
                                   cl::desc("Weight decay (default 0 for "
                                            "sgd, 0.01 for adamw)"),
                                   cl::sub(compileCmd));
static cl::opt<double> beta1("beta1", cl::desc("AdamW beta1"), cl::init(0.9),
                             cl::sub(compileCmd));
static cl::opt<double> beta2("beta2", cl::desc("AdamW beta2"), cl::init(0.999),
                             cl::sub(compileCmd));
static cl::opt<double> eps("eps", cl::desc("AdamW epsilon"), cl::init(1e-8),
                           cl::sub(compileCmd));
static cl::opt<int64_t> seed("seed",
                             cl::desc("Seed of the random streams (dropout; "
                                      "the data order with --shuffle)"),
                             cl::init(0), cl::sub(compileCmd));
static cl::opt<int64_t> tpSize("tp", cl::desc("Tensor-parallel ranks"),
                               cl::init(1), cl::sub(compileCmd));
static cl::opt<int64_t> tpInnerFlag(
    "tp-inner",
    cl::desc("Factor the tp ranks into groups of N neighbours, two mesh axes "
             "whose layouts are chosen one after the other: K/V heads fewer "
             "than the ranks are then held by the group whose query heads "
             "read them, their gradients summed within it. 1: one tp axis; "
             "0 (default): the compiler prices each factoring"),
    cl::value_desc("N"), cl::init(0), cl::sub(compileCmd));
static cl::opt<std::string>
    meshSpec("mesh",
             cl::desc("The device mesh: tp=N (as --tp N) or dp=N (data "
                      "parallelism: the batch split over N ranks)"),
             cl::value_desc("AXIS=N[,AXIS=N]"), cl::sub(compileCmd));
static cl::opt<int64_t>
    zeroStage("zero",
              cl::desc("ZeRO stage over the dp axis: 1 splits the optimizer "
                       "state over the dp ranks; 2 also reduce-scatters the "
                       "gradients; 3 also splits the parameters"),
              cl::init(0), cl::sub(compileCmd));
static cl::opt<int64_t>
    devicesFlag("devices",
                cl::desc("Let the compiler choose the mesh (dp x tp and the "
                         "ZeRO stage) for N devices, by its cost model"),
                cl::value_desc("N"), cl::init(0), cl::sub(compileCmd));
static cl::opt<std::string> memoryPerDeviceFlag(
    "memory-per-device",
    cl::desc("The memory of one device (bytes, or with KB/MB/GB/KiB/MiB/"
             "GiB): --devices refuses meshes needing more per rank, and "
             "--recompute auto recomputes what does not fit"),
    cl::value_desc("BYTES"), cl::sub(compileCmd));
static cl::opt<std::string> recomputeFlag(
    "recompute",
    cl::desc("What the forward keeps for the backward: none (everything it "
             "reads), selective (norms, softmax and elementwise values made "
             "again), full (only the cheapest cuts of the forward kept, the "
             "rest run again), or auto (default: the least that fits "
             "--memory-per-device; none without it)"),
    cl::value_desc("none|selective|full|auto"), cl::init("auto"),
    cl::sub(compileCmd));
static cl::opt<std::string> sequenceParallelFlag(
    "sequence-parallel",
    cl::desc("Megatron's sequence parallelism: the activations between the "
             "tensor-parallel blocks (residual adds, norms) split over the "
             "tp ranks, each block's all-reduce a reduce-scatter and an "
             "all-gather: on, off, or auto (default: where "
             "--memory-per-device is not met without it)"),
    cl::value_desc("on|off|auto"), cl::init("auto"), cl::sub(compileCmd));
static cl::opt<std::string> lrScheduleFlag(
    "lr-schedule",
    cl::desc("The learning rate's schedule over the updates, Hugging "
             "Face's: constant (default), constant_with_warmup, linear, "
             "cosine, cosine_with_restarts, polynomial, inverse_sqrt"),
    cl::value_desc("NAME"), cl::init("constant"), cl::sub(compileCmd));
static cl::opt<int64_t>
    warmupStepsFlag("warmup-steps",
                    cl::desc("Updates the rate warms up over, from 0"),
                    cl::init(0), cl::sub(compileCmd));
static cl::opt<int64_t> totalStepsFlag(
    "total-steps",
    cl::desc("Updates a decaying schedule runs over (linear, cosine, "
             "cosine_with_restarts, polynomial)"),
    cl::init(0), cl::sub(compileCmd));
static cl::opt<double> clipGradNormFlag(
    "clip-grad-norm",
    cl::desc("Clip the gradients' global L2 norm to this, as "
             "clip_grad_norm_ (0, the default: no clipping); the norm is "
             "reported per step"),
    cl::init(0.0), cl::sub(compileCmd));
static cl::opt<double> clipGradValueFlag(
    "clip-grad-value",
    cl::desc("Clamp each gradient element to [-V, V], as clip_grad_value_ "
             "(0, the default: none)"),
    cl::init(0.0), cl::sub(compileCmd));
static cl::opt<int64_t> accumulateFlag(
    "accumulate",
    cl::desc("Gradient accumulation: each update sums the gradients of N "
             "micro-batches of the compiled batch shape (one micro-batch's "
             "activations in memory at a time; the loss is the update's, "
             "token-count-correct; default 1)"),
    cl::value_desc("N"), cl::init(1), cl::sub(compileCmd));
static cl::opt<std::string> onNonfiniteFlag(
    "on-nonfinite",
    cl::desc("A step whose loss or a gradient is inf or NaN: stop (one "
             "error naming the step and the value; the update is not "
             "applied), skip (go on without its update) or ignore (default: "
             "apply it, as PyTorch does)"),
    cl::value_desc("stop|skip|ignore"), cl::init("ignore"),
    cl::sub(compileCmd));
static cl::opt<std::string>
    linkFlag("link",
             cl::desc("With --devices: link speeds per device in GB/s "
                      "(default intra=450,inter=50)"),
             cl::value_desc("intra=G,inter=G"), cl::sub(compileCmd));
static cl::opt<int64_t>
    nodeSizeFlag("node-size",
                 cl::desc("With --devices: devices per node, on the intra "
                          "links (default 8)"),
                 cl::init(8), cl::sub(compileCmd));
static cl::opt<double>
    deviceTflopsFlag("device-tflops",
                     cl::desc("With --devices: a device's dense float32 "
                              "rate in TFLOP/s (default 400)"),
                     cl::init(400), cl::sub(compileCmd));
static cl::opt<std::string>
    planPath("plan",
             cl::desc("Layout rules: lines of 'REGEX colwise|rowwise|"
                      "replicate|vocab' for parameter names"),
             cl::value_desc("FILE"), cl::sub(compileCmd));
static cl::opt<bool>
    noFusion("no-fusion",
             cl::desc("Keep attention (matmul, softmax, matmul) and "
                      "cross-entropy (its reductions) unfused instead of the "
                      "fused attention and cross_entropy ops: to compare "
                      "the two"),
             cl::sub(compileCmd));
static cl::opt<bool> noForwardPass(
    "no-forward-pass",
    cl::desc("Leave out the model's forward pass (cleave run --eval, "
             "Model(batch)): the bundle only trains"),
    cl::sub(compileCmd));
static cl::opt<std::string> compilePrecision(
    "precision",
    cl::desc("f32 (default), or mixed precision: bf16 (or fp16) copies of "
             "the weights and activations feed every matmul and "
             "convolution, accumulated in f32; f32 master weights, "
             "optimizer state, reductions and update"),
    cl::value_desc("f32|bf16|fp16"), cl::init("f32"), cl::sub(compileCmd));
static cl::opt<bool>
    planOnly("plan-only",
             cl::desc("Write the plan without the weights (to inspect the "
                      "sharding of a model whose weights are not at hand); "
                      "such a bundle cannot train"),
             cl::sub(compileCmd));
static cl::opt<std::string>
    weightsPath("weights",
                cl::desc("Take the weights from this safetensors file, or "
                         "a sharded checkpoint's index (.safetensors.index."
                         "json), with the model's initializers' names"),
                cl::value_desc("FILE"), cl::sub(compileCmd));
static cl::SubCommand exportCmd("export",
                                "Write a checkpoint's or bundle's weights "
                                "as the original ONNX model or safetensors");
static cl::opt<std::string> exportSource(cl::Positional,
                                         cl::desc("CHECKPOINT | BUNDLE"),
                                         cl::Required, cl::sub(exportCmd));
static cl::opt<std::string> exportOutput("o",
                                         cl::desc("OUTPUT.onnx or "
                                                  "OUTPUT.safetensors"),
                                         cl::Required, cl::sub(exportCmd));
static cl::opt<bool> exportTrainableOnly(
    "trainable-only",
    cl::desc("Write only the tensors that train (adapters on a frozen base), "
             "as OUTPUT.safetensors"),
    cl::sub(exportCmd));
static cl::list<std::string>
    freezePatterns("freeze",
                   cl::desc("Do not train initializers whose names match "
                            "this regular expression (frozen weights: split "
                            "like the others, without gradient or state)"),
                   cl::value_desc("REGEX"), cl::sub(compileCmd));
static cl::opt<bool> forward("forward", cl::desc("Run the forward pass only"),
                             cl::sub(runCmd));

/// cleave run's bundle flags: one option per entry of the table that
/// cleave-run parses too (cleave/runtime/run_flags.h), all read as text
/// and checked by the table. Leaked: LLVM's registry keeps pointers to them
/// until exit.
static std::vector<std::pair<const rt::RunFlag *, cl::Option *>> &
runFlagOptions() {
  static auto *options =
      new std::vector<std::pair<const rt::RunFlag *, cl::Option *>>();
  return *options;
}

static void registerRunFlags() {
  for (const rt::RunFlag &flag : rt::runFlags()) {
    cl::Option *option;
    if (flag.isSwitch())
      option = new cl::opt<bool>(llvm::StringRef(flag.name),
                                 cl::desc(flag.help), cl::sub(runCmd));
    else
      option = new cl::opt<std::string>(
          llvm::StringRef(flag.name), cl::desc(flag.help),
          cl::value_desc(flag.valueName), cl::sub(runCmd));
    runFlagOptions().push_back({&flag, option});
  }
}

/// The run flags given, set in \p args through the table; the one line to
/// print when a value is bad.
static std::optional<std::string> runFlagsGiven(rt::RunBundleArgs &args) {
  for (auto [flag, option] : runFlagOptions()) {
    if (!option->getNumOccurrences())
      continue;
    std::string value =
        flag->isSwitch()
            ? std::string(static_cast<cl::opt<bool> *>(option)->getValue() ? "1"
                                                                           : "")
            : static_cast<cl::opt<std::string> *>(option)->getValue();
    if (flag->isSwitch() && value.empty())
      continue; // --threads=false
    if (!flag->set(args, value))
      return "bad value '" + value + "' for --" + flag->name +
             "; see cleave --help";
  }
  return std::nullopt;
}

/// The command line as given, for starting the other ranks.
static std::vector<std::string> originalArgs;

static int fail(const llvm::Twine &message) {
  llvm::errs() << "cleave: error: " << message << "\n";
  return 1;
}

/// Prints diagnostics as one "cleave: error:" line each, without the file
/// location (the message itself names the node and op).
struct DiagnosticPrinter {
  explicit DiagnosticPrinter(MLIRContext &context)
      : handler(&context, [](Diagnostic &diag) {
          llvm::raw_ostream &os = llvm::errs();
          os << "cleave: "
             << (diag.getSeverity() == DiagnosticSeverity::Error ? "error: "
                                                                 : "note: ")
             << diag.str() << "\n";
          // MLIR's "see current operation" dump is for compiler developers.
          for (const Diagnostic &note : diag.getNotes())
            if (!StringRef(note.str()).starts_with("see current operation"))
              os << "cleave: note: " << note.str() << "\n";
          return success();
        }) {}
  ScopedDiagnosticHandler handler;
};

static DenseElementsAttr toAttr(MLIRContext &ctx, const rt::HostTensor &t) {
  Type element = mlir::cleave::elementTypeOf(&ctx, t.dtype);
  return mlir::cleave::hostTensorToAttr(RankedTensorType::get(t.shape, element),
                                        t);
}

namespace {
using mlir::cleave::InputSpec;
using mlir::cleave::OnnxImportOptions;
using mlir::cleave::OnnxModel;
} // namespace

/// The --input flags as NAME -> spec; false after printing an error.
static bool inputFlags(std::map<std::string, std::string> &specs) {
  for (const std::string &spec : inputSpecs) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0)
      return fail("--input '" + spec + "' must look like NAME=8x128[xi64]"),
             false;
    specs[spec.substr(0, eq)] = spec.substr(eq + 1);
  }
  return true;
}

/// The --shape flags as batch shapes; false after printing an error.
static bool
shapeFlags(std::vector<::cleave::driver::CompileOptions::BatchShape> &shapes) {
  for (const std::string &spec : shapeSpecs) {
    ::cleave::driver::CompileOptions::BatchShape shape;
    for (llvm::StringRef rest = spec; !rest.empty();) {
      auto [item, tail] = rest.split(',');
      rest = tail;
      auto [name, dims] = item.split('=');
      if (name.empty() || dims.empty() || shape.inputs.count(name.str()))
        return fail("--shape '" + spec +
                    "' must look like NAME=4x32[xi64][,NAME=DIMS...], each "
                    "input once"),
               false;
      shape.inputs[name.str()] = dims.str();
    }
    if (shape.inputs.empty())
      return fail("--shape '' gives no input's dims"), false;
    shapes.push_back(std::move(shape));
  }
  return true;
}

/// Loads MODEL with the --input flags into \p options; false after printing
/// an error.
/// --max-archive-bytes as a count; false after printing an error.
static bool archiveBudget(uint64_t &bytes) {
  bytes = 0;
  if (maxArchiveBytes.getNumOccurrences() == 0)
    return true;
  if (llvm::StringRef(maxArchiveBytes).getAsInteger(10, bytes) || bytes == 0)
    return fail("--max-archive-bytes '" + maxArchiveBytes +
                "' must be a positive number of bytes"),
           false;
  return true;
}

static bool loadModelFlags(MLIRContext &ctx, OnnxImportOptions &options,
                           std::unique_ptr<OnnxModel> &model) {
  std::map<std::string, std::string> specs;
  if (!inputFlags(specs) || !archiveBudget(options.maxArchiveBytes))
    return false;
  if (rt::Status s =
          ::cleave::driver::loadModel(ctx, modelPath, specs, options, &model);
      !s)
    return fail(s.message()), false;
  return true;
}

/// Loads and imports MODEL with the --input flags; null after printing an
/// error.
static OwningOpRef<ModuleOp> importModel(MLIRContext &ctx,
                                         OnnxImportOptions &options,
                                         std::unique_ptr<OnnxModel> &model) {
  if (!loadModelFlags(ctx, options, model))
    return nullptr;
  return mlir::cleave::importOnnx(&ctx, *model, options);
}

/// Writes \p what to \p path ("-": stdout) through \p print: into a
/// temporary sibling, renamed into place only once complete and flushed,
/// so that a full disk or a signal leaves the previous file whole and no
/// temporary behind; a write error is one `cleave: error:` line (LLVM's
/// streams would report it with report_fatal_error at close).
static int writeOutput(const std::string &path, const std::string &what,
                       llvm::function_ref<void(raw_ostream &)> print) {
  namespace fs = llvm::sys::fs;
  // Standard output by any name is written as "-" is: reopening the name
  // would truncate the file the shell's >> appends to.
  if (path == "-" || path == "/dev/stdout" || path == "/dev/fd/1" ||
      path == "/proc/self/fd/1") {
    print(llvm::outs());
    llvm::outs().flush();
    if (llvm::outs().has_error()) {
      std::string why = llvm::outs().error().message();
      llvm::outs().clear_error();
      return fail("cannot write " + what + " to standard output: " + why);
    }
    return 0;
  }
  if (fs::is_directory(path))
    return fail("cannot write " + what + " to '" + path +
                "': it is a directory");
  // The file a link names is the one replaced; a device or a FIFO
  // (/dev/null, a pipe) is written in place: a rename would put a regular
  // file where the device was.
  llvm::SmallString<256> target(path);
  llvm::StringRef named(path);
  // /dev/stdout resolves to whatever fd 1 is (a log opened for appending):
  // such names are written through, never replaced.
  bool special = named.starts_with("/dev/") || named.starts_with("/proc/");
  std::optional<fs::perms> mode;
  if (fs::exists(path)) {
    if (std::error_code ec = fs::real_path(path, target))
      return fail("cannot write " + what + " to '" + path +
                  "': " + ec.message());
    if (special || !fs::is_regular_file(target)) {
      std::error_code ec;
      llvm::raw_fd_ostream os(path, ec, special ? fs::OF_Append : fs::OF_None);
      if (!ec) {
        print(os);
        os.close();
        if (os.has_error())
          ec = os.error();
        os.clear_error();
      }
      if (ec)
        return fail("cannot write " + what + " to '" + path +
                    "': " + ec.message());
      return 0;
    }
    if (llvm::ErrorOr<fs::perms> perms = fs::getPermissions(target))
      mode = *perms; // the replacement keeps the file's mode
  }
  llvm::SmallString<256> tmp;
  int fd;
  std::string model = std::string(target) + ".tmp-%%%%%%";
  if (std::error_code ec = fs::createUniqueFile(model, fd, tmp))
    return fail("cannot write " + what + " to '" + path + "': " + ec.message());
  // Removed on the way out, also when a signal (Ctrl-C) ends the write.
  llvm::sys::RemoveFileOnSignal(tmp);
  auto cleanup = llvm::make_scope_exit([&] {
    fs::remove(tmp);
    llvm::sys::DontRemoveFileOnSignal(tmp);
  });
  std::error_code failed;
  if (mode)
    failed = fs::setPermissions(fd, *mode);
  if (failed)
    ::close(fd);
  else {
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    print(os);
    os.flush();
    if (!os.has_error() && ::fsync(fd) != 0)
      failed = std::error_code(errno, std::generic_category());
    os.close();
    if (os.has_error())
      failed = os.error();
    os.clear_error();
  }
  if (!failed)
    failed = fs::rename(tmp, target);
  llvm::sys::DontRemoveFileOnSignal(tmp);
  if (failed)
    return fail("cannot write " + what + " to '" + path +
                "': " + failed.message());
  cleanup.release();
  return 0;
}

static int runImport(MLIRContext &ctx) {
  OnnxImportOptions options;
  std::unique_ptr<OnnxModel> model;
  OwningOpRef<ModuleOp> module = importModel(ctx, options, model);
  if (!module)
    return 1;
  return writeOutput(outputPath, "the imported IR", [&](raw_ostream &os) {
    module->print(os);
    os << "\n";
  });
}

static int runForward(MLIRContext &ctx) {
  rt::RunBundleArgs runArgs;
  if (std::optional<std::string> error = runFlagsGiven(runArgs)) {
    llvm::errs() << "cleave: error: " << *error << "\n";
    return 2;
  }
  if (!forward) {
    if (!llvm::sys::fs::is_directory(modelPath))
      return fail("'" + modelPath +
                  "' is not a bundle; compile one with cleave compile, or "
                  "pass --forward to run a model's forward pass");
    runArgs.bundle = modelPath;
    runArgs.argv = originalArgs;
    return rt::runBundle(runArgs);
  }
  for (auto [flag, option] : runFlagOptions()) {
    llvm::StringRef name = flag->name;
    if (!option->getNumOccurrences() || name == "inputs" || name == "dump")
      continue;
    if (name == "backend" || name == "precision") {
      if (runArgs.backend != "cpu" || runArgs.precision != "f32")
        return fail("--backend and --precision apply to training a bundle; "
                    "--forward runs on the CPU");
      continue;
    }
    return fail("--" + name +
                " applies to training a bundle; --forward runs the "
                "model's forward pass once (it takes --inputs and --dump)");
  }
  const std::string &inputsDir = runArgs.data.inputsDir;
  const std::string &dumpDir = runArgs.dumpDir;
  OnnxImportOptions options;
  std::unique_ptr<OnnxModel> model;
  if (!loadModelFlags(ctx, options, model))
    return 1;

  // Inputs: one NAME.npy each. Their shapes fix symbolic dims; small ones
  // also specialise shape operands that the model computes from inputs.
  std::map<std::string, rt::HostTensor> inputValues;
  for (const std::string &name : model->graphInputNames()) {
    if (inputsDir.empty())
      return fail("the model has input '" + name + "'; give --inputs DIR");
    llvm::SmallString<256> path(inputsDir);
    llvm::sys::path::append(path, rt::sanitizeFileName(name) + ".npy");
    if (!llvm::sys::fs::exists(path))
      return fail("missing input file '" + path.str().str() +
                  "' for graph input '" + name + "'");
    rt::HostTensor tensor;
    rt::Status status = rt::readNpy(std::string(path), &tensor);
    if (!status)
      return fail(status.message());
    for (const auto &in : model->proto().graph().input())
      if (in.name() == name &&
          in.type().tensor_type().elem_type() == onnx::TensorProto::BOOL)
        rt::conformInput(tensor, rt::DType::Bool);
    if (!options.inputs.count(name))
      options.inputs[name].shape = tensor.shape;
    if (tensor.numElements() <= 4096)
      options.knownInputs[name] = toAttr(ctx, tensor);
    inputValues[name] = std::move(tensor);
  }

  OwningOpRef<ModuleOp> module =
      mlir::cleave::importOnnx(&ctx, *model, options);
  if (!module)
    return 1;
  ::cleave::plan::Program program;
  if (failed(mlir::cleave::compileForward(*module, program)))
    return 1;

  auto main = module->lookupSymbol<func::FuncOp>("main");
  std::vector<rt::HostTensor> args;
  for (BlockArgument arg : main.getArguments()) {
    auto type = cast<RankedTensorType>(arg.getType());
    unsigned i = arg.getArgNumber();
    if (auto name =
            main.getArgAttrOfType<StringAttr>(i, mlir::cleave::kInputAttr)) {
      rt::HostTensor &t = inputValues[name.str()];
      if (t.dtype != mlir::cleave::runtimeDType(type.getElementType()) ||
          t.shape != std::vector<int64_t>(type.getShape().begin(),
                                          type.getShape().end())) {
        std::string want;
        llvm::raw_string_ostream os(want);
        os << type;
        return fail("input '" + name.str() + "' has dtype " +
                    rt::dtypeName(t.dtype) + " and " +
                    std::to_string(t.shape.size()) +
                    " dims in its file; the model needs " + want);
      }
      args.push_back(std::move(t));
      continue;
    }
    if (main.getArgAttr(i, mlir::cleave::kStepAttr)) {
      // Training-mode dropout draws its mask from the step: one forward
      // pass is step 1.
      rt::HostTensor step = rt::HostTensor::zeros(rt::DType::I64, {});
      *step.data<int64_t>() = 1;
      args.push_back(std::move(step));
      continue;
    }
    auto param =
        main.getArgAttrOfType<StringAttr>(i, mlir::cleave::kParameterAttr);
    if (!param)
      param = main.getArgAttrOfType<StringAttr>(i, mlir::cleave::kBufferAttr);
    if (!param)
      return fail("the forward pass takes argument " + std::to_string(i) +
                  ", which is no input, weight or step of the model");
    rt::HostTensor t;
    if (rt::Status s =
            ::cleave::driver::WeightSource(ctx, *model).read(param.str(), &t);
        !s)
      return fail(s.message());
    args.push_back(std::move(t));
  }

  std::unique_ptr<rt::Executor> executor;
  rt::Status status = rt::Executor::create(program, &executor);
  if (!status)
    return fail(status.message());
  std::vector<rt::HostTensor> outputs;
  status = executor->run(args, &outputs);
  if (!status)
    return fail(status.message());

  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string &name = executor->outputNames()[i];
    llvm::outs() << name << ": " << rt::dtypeName(outputs[i].dtype) << "[";
    for (size_t d = 0; d < outputs[i].shape.size(); ++d)
      llvm::outs() << (d ? "x" : "") << outputs[i].shape[d];
    llvm::outs() << "]\n";
    if (dumpDir.empty())
      continue;
    if (std::error_code ec = llvm::sys::fs::create_directories(dumpDir))
      return fail("cannot create '" + dumpDir + "': " + ec.message());
    llvm::SmallString<256> path(dumpDir);
    llvm::sys::path::append(path, rt::sanitizeFileName(name) + ".npy");
    status = rt::writeNpy(std::string(path), outputs[i]);
    if (!status)
      return fail(status.message());
  }
  return 0;
}

/// "80GB", "24GiB", "1000000": bytes; -1 if malformed.
static int64_t parseBytes(llvm::StringRef text) {
  static const std::pair<const char *, double> units[] = {
      {"KiB", 1024.0},
      {"MiB", 1024.0 * 1024},
      {"GiB", 1024.0 * 1024 * 1024},
      {"TiB", 1024.0 * 1024 * 1024 * 1024},
      {"KB", 1e3},
      {"MB", 1e6},
      {"GB", 1e9},
      {"TB", 1e12},
      {"B", 1.0}};
  double scale = 1;
  for (auto [unit, factor] : units)
    if (text.consume_back(unit)) {
      scale = factor;
      break;
    }
  double value = 0;
  // Under one byte would read as 0, "no budget".
  if (text.trim().getAsDouble(value) || !(value * scale >= 1) ||
      value * scale > 9e18)
    return -1;
  return static_cast<int64_t>(value * scale);
}

/// --devices and what its cost model reads.
static rt::Status meshChoiceFlags(::cleave::driver::CompileOptions &o) {
  bool given = devicesFlag.getNumOccurrences();
  for (const cl::Option *flag : std::initializer_list<const cl::Option *>{
           &linkFlag, &nodeSizeFlag, &deviceTflopsFlag})
    if (!given && flag->getNumOccurrences())
      return rt::Status::error("--" + flag->ArgStr.str() +
                               " is for --devices N (the compiler's choice "
                               "of the mesh)");
  if (!memoryPerDeviceFlag.empty()) {
    o.memoryPerDevice = parseBytes(memoryPerDeviceFlag);
    if (o.memoryPerDevice < 0)
      return rt::Status::error("--memory-per-device '" + memoryPerDeviceFlag +
                               "' must be a positive size such as 80GB, "
                               "24GiB or 1000000");
  }
  if (!given)
    return rt::Status::ok();
  // Every divisor of N is compiled: a mesh beyond any machine's is a typo.
  constexpr int64_t kMaxDevices = 1 << 20;
  if (devicesFlag < 1 || devicesFlag > kMaxDevices)
    return rt::Status::error("--devices must be between 1 and " +
                             std::to_string(kMaxDevices));
  if (tpSize.getNumOccurrences() || !meshSpec.empty() ||
      zeroStage.getNumOccurrences())
    return rt::Status::error("give either --devices (the compiler chooses "
                             "the mesh) or --tp, --mesh and --zero, not both");
  o.devices = devicesFlag;
  for (llvm::StringRef rest = linkFlag; !rest.empty();) {
    auto [item, tail] = rest.split(',');
    rest = tail;
    auto [key, value] = item.split('=');
    double gbps = 0;
    if (value.getAsDouble(gbps) || !(gbps > 0) || !std::isfinite(gbps) ||
        (key != "intra" && key != "inter"))
      return rt::Status::error("--link '" + linkFlag +
                               "' must look like intra=450,inter=50 (GB/s "
                               "per device, positive)");
    (key == "intra" ? o.topology.intraGBps : o.topology.interGBps) = gbps;
  }
  if (nodeSizeFlag < 1)
    return rt::Status::error("--node-size must be at least 1");
  if (!(deviceTflopsFlag > 0) || !std::isfinite(deviceTflopsFlag))
    return rt::Status::error("--device-tflops must be a positive number");
  o.topology.nodeSize = nodeSizeFlag;
  o.topology.deviceTflops = deviceTflopsFlag;
  return rt::Status::ok();
}

/// Writes the bundle (lib/Driver/Compile.cpp): replaced whole or not at
/// all.
static int runCompile(MLIRContext &ctx) {
  ::cleave::driver::CompileOptions o;
  o.model = modelPath;
  o.output = outputPath;
  if (!inputFlags(o.inputs) || !shapeFlags(o.moreShapes))
    return 1;
  o.loss = lossKind;
  o.optimizer = optimizerKind;
  if (lr.getNumOccurrences())
    o.lr = lr;
  if (weightDecay.getNumOccurrences())
    o.weightDecay = weightDecay;
  o.momentum = momentum;
  o.beta1 = beta1;
  o.beta2 = beta2;
  o.eps = eps;
  o.seed = seed;
  o.tp = tpSize;
  o.tpInner = tpInnerFlag;
  o.zero = zeroStage;
  if (!meshSpec.empty()) {
    if (tpSize.getNumOccurrences())
      return fail("give either --tp or --mesh, not both");
    bool seen[2] = {false, false};
    for (llvm::StringRef rest = meshSpec; !rest.empty();) {
      auto [item, tail] = rest.split(',');
      rest = tail;
      auto [axis, size] = item.split('=');
      int64_t n = 0;
      if (size.getAsInteger(10, n) || n < 1 || (axis != "dp" && axis != "tp"))
        return fail("--mesh '" + meshSpec +
                    "' must look like dp=2,tp=4 (axes dp and tp, sizes at "
                    "least 1)");
      bool &again = seen[axis == "dp" ? 0 : 1];
      if (again)
        return fail("--mesh '" + meshSpec + "' gives the axis " + axis +
                    " twice");
      again = true;
      (axis == "dp" ? o.dp : o.tp) = n;
    }
  }
  if (rt::Status s = meshChoiceFlags(o); !s)
    return fail(s.message());
  // ZeRO shards over the dp axis: without one asked for, --zero is a slip
  // (an explicit dp=1 is the plain step).
  if (zeroStage.getNumOccurrences() && zeroStage != 0 &&
      !llvm::StringRef(meshSpec).contains("dp="))
    return fail("--zero " + std::to_string(zeroStage) +
                " shards over the dp axis: give --mesh dp=N (dp=1 shards "
                "nothing)");
  if (!archiveBudget(o.maxArchiveBytes))
    return 1;
  o.planFile = planPath;
  o.weightsFile = weightsPath;
  o.planOnly = planOnly;
  o.fusion = !noFusion;
  o.forwardPass = !noForwardPass;
  o.precision = compilePrecision;
  o.recompute = recomputeFlag;
  o.sequenceParallel = sequenceParallelFlag;
  o.lrSchedule = lrScheduleFlag;
  o.warmupSteps = warmupStepsFlag;
  o.totalSteps = totalStepsFlag;
  o.clipGradNorm = clipGradNormFlag;
  o.clipGradValue = clipGradValueFlag;
  o.onNonfinite = onNonfiniteFlag;
  o.accumulate = accumulateFlag;
  o.freeze.assign(freezePatterns.begin(), freezePatterns.end());
  o.report = [](const std::string &line) {
    llvm::outs() << "cleave: " << line << "\n";
  };
  rt::Status s = ::cleave::driver::compileBundle(ctx, o);
  if (s)
    return 0;
  // An empty message: MLIR's diagnostics said it already.
  return s.message().empty() ? 1 : fail(s.message());
}

/// `cleave launch -n N script.py ARGS...`: mpirun of /usr/bin/python3 (a
/// .py script) or of the program, once per rank, waiting for the job.
static int runLaunch() {
  if (launchRanksFlag < 1)
    return fail("give the number of ranks with -n N (at least 1)");
  if (rt::Status s = rt::checkReadable(launchProgram, "script"); !s)
    return fail(s.message());
  std::vector<std::string> argv;
  if (llvm::StringRef(launchProgram).ends_with(".py"))
    argv.push_back(llvm::sys::fs::exists("/usr/bin/python3")
                       ? "/usr/bin/python3"
                       : "python3");
  argv.push_back(launchProgram);
  argv.insert(argv.end(), launchArgs.begin(), launchArgs.end());
  rt::Status s =
      rt::launchRanks(argv, static_cast<int>(launchRanksFlag), /*timeout=*/0);
  if (s)
    return 0;
  // The ranks printed their own errors; mpirun's absence is ours to say.
  if (s.message().find("PATH") != std::string::npos)
    return fail(s.message());
  return 1;
}

static int runExport() {
  if (rt::Status s = ::cleave::driver::exportModel(exportSource, exportOutput,
                                                   exportTrainableOnly);
      !s)
    return fail(s.message());
  return 0;
}

/// Parses the command line; on a mistake, the one line to print. LLVM's
/// parser words its complaints over up to four lines of its own format
/// ("cleave: Unknown command line argument '--x'.  Try: '/path/cleave
/// --help'", "cleave: Did you mean '--y'?"); they become one.
static std::optional<std::string> parseCommandLine(int argc, char **argv) {
  static constexpr llvm::StringLiteral kCommands[] = {
      "import", "compile", "run", "inspect", "export", "launch"};
  // A first word that is no command would otherwise be blamed on the
  // model file that follows it.
  if (argc > 1 && argv[1][0] != '-' &&
      !llvm::is_contained(kCommands, llvm::StringRef(argv[1])))
    return "unknown command '" + std::string(argv[1]) +
           "'; the commands are import, compile, run, inspect, export and "
           "launch (see cleave --help)";
  // LLVM's own options (hundreds, of its code generators) are registered at
  // the top level; `cleave --help` lists the commands, not them.
  static cl::OptionCategory cleaveCategory("cleave");
  cl::HideUnrelatedOptions(cleaveCategory, cl::SubCommand::getTopLevel());
  std::string text;
  llvm::raw_string_ostream os(text);
  // A bad option value is reported straight to stderr, whatever stream the
  // parser is given: stderr goes to a file while it parses.
  std::FILE *captured = std::tmpfile();
  int saved = captured ? ::dup(2) : -1;
  if (saved >= 0)
    ::dup2(::fileno(captured), 2);
  bool parsed = cl::ParseCommandLineOptions(
      argc, argv, "Cleave: a tensor-parallel training compiler\n", &os);
  llvm::errs().flush();
  if (saved >= 0) {
    ::dup2(saved, 2);
    ::close(saved);
    std::rewind(captured);
    char buffer[4096];
    for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, captured)) > 0;)
      text.append(buffer, n);
  }
  if (captured)
    std::fclose(captured);
  if (parsed) {
    llvm::errs() << text; // warnings, if any
    return std::nullopt;
  }
  llvm::StringRef program = llvm::sys::path::filename(argv[0]);
  std::string message, hint;
  SmallVector<llvm::StringRef> lines;
  llvm::StringRef(text).trim().split(lines, '\n');
  for (llvm::StringRef line : lines) {
    line = line.trim();
    if (line.consume_front(program) && !line.consume_front(":"))
      continue;
    line = line.trim();
    if (line.empty())
      continue;
    if (line.starts_with("Did you mean")) {
      hint = line.rtrim('?').str();
      continue;
    }
    if (!message.empty())
      continue;
    // "... .  Try: '/path/cleave --help'" and a closing "!" add nothing.
    line = line.split("  Try:").first.rtrim(".!").trim();
    message = line.str();
  }
  if (message.empty())
    message = "cannot read the command line";
  message[0] = static_cast<char>(std::tolower(message[0]));
  if (!hint.empty()) {
    hint[0] = static_cast<char>(std::tolower(hint[0]));
    message += " (" + hint + "?)";
  }
  return message + "; see cleave --help";
}

int main(int argc, char **argv) {
  originalArgs.assign(argv, argv + argc);
  // The other ranks run this very binary, wherever the shell found it.
  originalArgs[0] = llvm::sys::fs::getMainExecutable(
      argv[0], reinterpret_cast<void *>(&fail));
  llvm::InitLLVM init(argc, argv);
  registerRunFlags();
  if (std::optional<std::string> error = parseCommandLine(argc, argv)) {
    llvm::errs() << "cleave: error: " << *error << "\n";
    return 2;
  }
  MLIRContext context;
  ::cleave::driver::setUpContext(context);
  DiagnosticPrinter printer(context);
  if (importCmd)
    return runImport(context);
  if (compileCmd)
    return runCompile(context);
  if (inspectCmd)
    return ::cleave::driver::runInspect(inspectPath, inspectJson);
  if (exportCmd)
    return runExport();
  if (runCmd)
    return runForward(context);
  if (launchCmd)
    return runLaunch();
  return fail("give a command: import, compile, run, inspect, export or "
              "launch (see "
              "--help)");
}

//===- cleave.cpp - The Cleave driver ---------------------------*- C++ -*-===//
//
// `cleave import` prints a model as cleave IR; `cleave run MODEL --forward`
// compiles it in memory and executes its forward pass on the CPU runtime.
// Every failure prints one "cleave: error: ..." message and exits non-zero.
//
//===----------------------------------------------------------------------===//

#include "Cleave/CleaveDialect.h"
#include "cleave/Import/OnnxImporter.h"
#include "cleave/Lowering/ConstantEvaluator.h"
#include "cleave/Lowering/EmitPlan.h"
#include "cleave/Pipelines/Pipelines.h"
#include "cleave/runtime/executor.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"
#include "plan/plan.pb.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
namespace cl = llvm::cl;
namespace rt = ::cleave::rt;

static cl::SubCommand importCmd("import", "Import a model and print its IR");
static cl::SubCommand runCmd("run", "Compile and execute a model");

static cl::opt<std::string> modelPath(cl::Positional, cl::desc("MODEL.onnx"),
                                      cl::Required, cl::sub(importCmd),
                                      cl::sub(runCmd));
static cl::list<std::string>
    inputSpecs("input", cl::desc("Fix a graph input: NAME=8x128[xi64]"),
               cl::value_desc("NAME=DIMS"), cl::sub(importCmd),
               cl::sub(runCmd));
static cl::opt<std::string> outputPath("o", cl::desc("Output file"),
                                       cl::init("-"), cl::sub(importCmd));
static cl::opt<bool> forward("forward", cl::desc("Run the forward pass only"),
                             cl::sub(runCmd));
static cl::opt<std::string> inputsDir("inputs",
                                      cl::desc("Directory of NAME.npy inputs"),
                                      cl::sub(runCmd));
static cl::opt<std::string> dumpDir("dump",
                                    cl::desc("Directory for NAME.npy outputs"),
                                    cl::sub(runCmd));

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
          for (const Diagnostic &note : diag.getNotes())
            os << "cleave: note: " << note.str() << "\n";
          return success();
        }) {}
  ScopedDiagnosticHandler handler;
};

static DenseElementsAttr toAttr(MLIRContext &ctx, const rt::HostTensor &t) {
  Builder b(&ctx);
  Type element = t.dtype == rt::DType::I64    ? b.getI64Type()
                 : t.dtype == rt::DType::I32  ? b.getI32Type()
                 : t.dtype == rt::DType::Bool ? b.getI1Type()
                                              : Type(b.getF32Type());
  return mlir::cleave::hostTensorToAttr(RankedTensorType::get(t.shape, element),
                                        t);
}

namespace {
using mlir::cleave::InputSpec;
using mlir::cleave::OnnxImportOptions;
using mlir::cleave::OnnxModel;
} // namespace

static LogicalResult parseInputFlags(MLIRContext &ctx,
                                     OnnxImportOptions &options) {
  for (const std::string &spec : inputSpecs) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0)
      return fail("--input '" + spec + "' must look like NAME=8x128[xi64]"),
             failure();
    InputSpec parsed;
    std::string error =
        mlir::cleave::parseInputSpec(&ctx, spec.substr(eq + 1), parsed);
    if (!error.empty())
      return fail("--input " + spec.substr(0, eq) + ": " + error), failure();
    options.inputs[spec.substr(0, eq)] = parsed;
  }
  return success();
}

static int runImport(MLIRContext &ctx) {
  OnnxImportOptions options;
  if (failed(parseInputFlags(ctx, options)))
    return 1;
  std::string error;
  std::unique_ptr<OnnxModel> model = OnnxModel::load(modelPath, error);
  if (!model)
    return fail(error);
  OwningOpRef<ModuleOp> module =
      mlir::cleave::importOnnx(&ctx, *model, options);
  if (!module)
    return 1;
  std::string errorMessage;
  auto output = openOutputFile(outputPath, &errorMessage);
  if (!output)
    return fail(errorMessage);
  module->print(output->os());
  output->os() << "\n";
  output->keep();
  return 0;
}

static int runForward(MLIRContext &ctx) {
  if (!forward)
    return fail("training runs need a compiled bundle (cleave compile); "
                "pass --forward to run a model's forward pass");
  OnnxImportOptions options;
  if (failed(parseInputFlags(ctx, options)))
    return 1;
  std::string error;
  std::unique_ptr<OnnxModel> model = OnnxModel::load(modelPath, error);
  if (!model)
    return fail(error);

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
    auto param =
        main.getArgAttrOfType<StringAttr>(i, mlir::cleave::kParameterAttr);
    FailureOr<mlir::cleave::TensorData> data =
        model->readInitializer(&ctx, param.str(), error);
    if (failed(data))
      return fail(error);
    rt::HostTensor t;
    t.dtype = mlir::cleave::runtimeDType(data->elementType);
    t.shape = data->shape;
    t.bytes.assign(data->bytes.begin(), data->bytes.end());
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

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::ParseCommandLineOptions(argc, argv,
                              "Cleave: a tensor-parallel training compiler\n");
  MLIRContext context;
  context.loadDialect<mlir::cleave::CleaveDialect, func::FuncDialect>();
  DiagnosticPrinter printer(context);
  if (importCmd)
    return runImport(context);
  if (runCmd)
    return runForward(context);
  return fail("give a command: import or run (see --help)");
}

//===- cleave-gradcheck.cpp - Finite-difference gradient checks -*- C++ -*-===//
//
// For every function of an input file: its float arguments become
// parameters, its float results are folded into a scalar loss with a random
// projection, --cleave-autodiff derives the gradients, and each gradient
// entry is compared with a central finite difference of the loss, both run
// on the CPU runtime. This checks every differentiation rule numerically,
// independent of the rule's own algebra.
//
// Argument attributes steer the random inputs:
//   gradcheck.range = [lo, hi]   floats uniform in [lo, hi]; ints in [lo, hi)
//   gradcheck.min_abs = m        floats at least m away from 0 (kinks)
//
// With --print-gradient-ir the tool prints each function's gradient IR (after
// canonicalization) instead, for FileCheck tests of what each rule builds.
//
//===----------------------------------------------------------------------===//

#include "Cleave/CleaveDialect.h"
#include "Cleave/CleaveOps.h"
#include "cleave/Autodiff/Autodiff.h"
#include "cleave/Autodiff/Passes.h"
#include "cleave/Evaluate/ConstantEvaluator.h"
#include "cleave/Lowering/EmitPlan.h"
#include "cleave/Pipelines/Pipelines.h"
#include "cleave/runtime/executor.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "plan/plan.pb.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <random>

using namespace mlir;
using namespace mlir::cleave;
namespace cl = llvm::cl;
namespace rt = ::cleave::rt;

static cl::opt<std::string> inputFile(cl::Positional, cl::desc("<input.mlir>"),
                                      cl::Required);
static cl::opt<bool> printIR("print-gradient-ir",
                             cl::desc("Print the gradient IR of each function "
                                      "instead of checking it"));
static cl::opt<double> step("h", cl::desc("Finite-difference step"),
                            cl::init(1e-3));
static cl::opt<double> rtol("rtol", cl::desc("Relative tolerance"),
                            cl::init(2e-2));
static cl::opt<double> absTol("atol", cl::desc("Absolute tolerance"),
                              cl::init(3e-3));
static cl::opt<unsigned> maxEntries("max-entries",
                                    cl::desc("Entries checked per argument"),
                                    cl::init(48));

namespace {

/// A fresh module holding \p fn as @main, its float arguments parameters and
/// its float results projected onto a random direction and summed: the loss.
OwningOpRef<ModuleOp> buildLossModule(func::FuncOp fn, std::mt19937 &rng) {
  OpBuilder b(fn.getContext());
  OwningOpRef<ModuleOp> module = ModuleOp::create(fn.getLoc());
  auto main = cast<func::FuncOp>(fn->clone());
  main.setName("main");
  module->push_back(main);
  for (BlockArgument arg : main.getArguments()) {
    auto type = cast<RankedTensorType>(arg.getType());
    std::string name = "arg" + std::to_string(arg.getArgNumber());
    main.setArgAttr(arg.getArgNumber(),
                    isa<FloatType>(type.getElementType()) ? kParameterAttr
                                                          : kInputAttr,
                    b.getStringAttr(name));
  }
  auto ret = cast<func::ReturnOp>(main.getBody().front().getTerminator());
  b.setInsertionPoint(ret);
  std::uniform_real_distribution<float> uni(-1, 1);
  Value loss;
  for (Value r : ret.getOperands()) {
    auto type = cast<RankedTensorType>(r.getType());
    if (!type.getElementType().isF32())
      continue;
    SmallVector<float> weights(type.getNumElements());
    for (float &w : weights)
      w = uni(rng);
    Value proj = ConstantOp::create(
        b, ret.getLoc(),
        DenseElementsAttr::get(type, ArrayRef<float>(weights)));
    Value term = MulOp::create(b, ret.getLoc(), r, proj);
    if (type.getRank() > 0)
      term = ReduceOp::create(
          b, ret.getLoc(), ReduceKind::sum, term,
          llvm::to_vector(llvm::seq<int64_t>(0, type.getRank())), false);
    loss = loss ? AddOp::create(b, ret.getLoc(), loss, term).getResult() : term;
  }
  func::ReturnOp::create(b, ret.getLoc(), ValueRange{loss});
  ret.erase();
  main.setType(FunctionType::get(fn.getContext(), main.getArgumentTypes(),
                                 {loss.getType()}));
  main.setResultAttr(0, kLossAttr, b.getUnitAttr());
  return module;
}

rt::HostTensor randomInput(func::FuncOp fn, BlockArgument arg,
                           std::mt19937 &rng) {
  auto type = cast<RankedTensorType>(arg.getType());
  rt::HostTensor t =
      rt::HostTensor::zeros(runtimeDType(type.getElementType()),
                            {type.getShape().begin(), type.getShape().end()});
  double lo = -1, hi = 1, minAbs = 0;
  if (auto range = fn.getArgAttrOfType<ArrayAttr>(arg.getArgNumber(),
                                                  "gradcheck.range")) {
    auto value = [](Attribute a) {
      if (auto f = dyn_cast<FloatAttr>(a))
        return f.getValueAsDouble();
      return static_cast<double>(cast<IntegerAttr>(a).getInt());
    };
    lo = value(range[0]);
    hi = value(range[1]);
  }
  if (auto m = fn.getArgAttrOfType<FloatAttr>(arg.getArgNumber(),
                                              "gradcheck.min_abs"))
    minAbs = m.getValueAsDouble();
  int64_t n = t.numElements();
  if (t.dtype == rt::DType::F32) {
    std::uniform_real_distribution<double> uni(lo, hi);
    for (int64_t i = 0; i < n; ++i) {
      double v = uni(rng);
      if (minAbs > 0 && std::fabs(v) < minAbs)
        v = v < 0 ? -minAbs - std::fabs(v) : minAbs + std::fabs(v);
      t.data<float>()[i] = static_cast<float>(v);
    }
  } else if (t.dtype == rt::DType::Bool) {
    std::bernoulli_distribution coin(0.5);
    for (int64_t i = 0; i < n; ++i)
      t.data<uint8_t>()[i] = coin(rng);
  } else {
    std::uniform_int_distribution<int64_t> uni(static_cast<int64_t>(lo),
                                               std::max<int64_t>(lo, hi - 1));
    for (int64_t i = 0; i < n; ++i) {
      if (t.dtype == rt::DType::I64)
        t.data<int64_t>()[i] = uni(rng);
      else
        t.data<int32_t>()[i] = static_cast<int32_t>(uni(rng));
    }
  }
  return t;
}

/// Checks one function; prints a PASS/FAIL line. Returns false on failure.
bool check(func::FuncOp fn, std::mt19937 &rng) {
  std::string name = fn.getName().str();
  OwningOpRef<ModuleOp> lossModule = buildLossModule(fn, rng);
  if (printIR) {
    PassManager pm(fn.getContext());
    pm.addNestedPass<func::FuncOp>(createAutodiffPass());
    pm.addPass(createCanonicalizerPass());
    pm.addPass(createCSEPass());
    if (failed(pm.run(*lossModule)))
      return false;
    auto main = lossModule->lookupSymbol<func::FuncOp>("main");
    main.setName(name);
    main.print(llvm::outs());
    llvm::outs() << "\n";
    return true;
  }
  OwningOpRef<ModuleOp> gradModule = lossModule->clone();
  ::cleave::plan::Program forward, gradient;
  if (failed(compileForward(*lossModule, forward)))
    return false;
  {
    PassManager pm(fn.getContext());
    pm.addNestedPass<func::FuncOp>(createAutodiffPass());
    buildForwardPipeline(pm);
    if (failed(pm.run(*gradModule)))
      return false;
    auto main = gradModule->lookupSymbol<func::FuncOp>("main");
    if (failed(emitPlan(main, gradient)))
      return false;
  }
  std::unique_ptr<rt::Executor> fwd, grad;
  for (auto [program, exec] : {std::pair{&forward, &fwd}, {&gradient, &grad}})
    if (rt::Status s = rt::Executor::create(*program, exec); !s) {
      llvm::errs() << "error: " << s.message() << "\n";
      return false;
    }

  std::vector<rt::HostTensor> inputs;
  for (BlockArgument arg : fn.getArguments())
    inputs.push_back(randomInput(fn, arg, rng));
  std::vector<rt::HostTensor> outputs;
  if (rt::Status s = grad->run(inputs, &outputs); !s) {
    llvm::errs() << "error: " << s.message() << "\n";
    return false;
  }
  auto lossAt = [&](std::vector<rt::HostTensor> &in) -> double {
    std::vector<rt::HostTensor> out;
    if (rt::Status s = fwd->run(in, &out); !s) {
      llvm::errs() << "error: " << s.message() << "\n";
      return NAN;
    }
    return *out[0].data<float>();
  };

  bool ok = true;
  double worst = 0;
  unsigned checked = 0, gradIndex = 1;
  for (auto [i, arg] : llvm::enumerate(fn.getArguments())) {
    if (inputs[i].dtype != rt::DType::F32)
      continue;
    const rt::HostTensor &g = outputs[gradIndex++];
    int64_t n = inputs[i].numElements();
    std::vector<int64_t> entries(n);
    for (int64_t k = 0; k < n; ++k)
      entries[k] = k;
    std::shuffle(entries.begin(), entries.end(), rng);
    entries.resize(std::min<int64_t>(n, maxEntries));
    for (int64_t k : entries) {
      float &x = inputs[i].data<float>()[k];
      float saved = x;
      x = saved + static_cast<float>(step);
      double up = lossAt(inputs);
      x = saved - static_cast<float>(step);
      double down = lossAt(inputs);
      x = saved;
      double fd = (up - down) / (2 * step);
      double an = g.data<float>()[k];
      double err = std::fabs(fd - an);
      double tol = absTol + rtol * std::max(std::fabs(fd), std::fabs(an));
      worst = std::max(worst, err / tol);
      ++checked;
      if (!(err <= tol)) {
        if (ok)
          llvm::outs() << "FAIL @" << name << "\n";
        ok = false;
        llvm::outs() << "  arg " << i << " entry " << k << ": autodiff " << an
                     << ", finite difference " << fd << "\n";
      }
    }
  }
  if (ok)
    llvm::outs() << "PASS @" << name << " (" << checked
                 << " entries, worst error " << llvm::format("%.2f", worst)
                 << " of tolerance)\n";
  return ok;
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::ParseCommandLineOptions(argc, argv, "Cleave gradient checker\n");
  DialectRegistry registry;
  registry.insert<CleaveDialect, func::FuncDialect>();
  registerDifferentiationRules(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  llvm::SourceMgr sources;
  OwningOpRef<ModuleOp> module =
      parseSourceFile<ModuleOp>(inputFile, sources, &context);
  if (!module)
    return 1;
  std::mt19937 rng(20261129);
  bool ok = true;
  for (auto fn : llvm::to_vector(module->getOps<func::FuncOp>()))
    ok &= check(fn, rng);
  return ok ? 0 : 1;
}

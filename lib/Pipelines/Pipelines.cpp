//===- Pipelines.cpp - Composed pass pipelines ------------------*- C++ -*-===//
//
// Composition only: no patterns or rewrites live here.
//
//===----------------------------------------------------------------------===//

#include "cleave/Pipelines/Pipelines.h"
#include "cleave/Lowering/EmitPlan.h"
#include "cleave/Lowering/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;
using namespace mlir::cleave;

void mlir::cleave::buildForwardPipeline(OpPassManager &pm) {
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  pm.addNestedPass<func::FuncOp>(createPlanBuffersPass());
}

void mlir::cleave::registerPipelines() {
  PassPipelineRegistration<>(
      "cleave-forward-pipeline",
      "Lowers imported cleave IR to planned straight-line functions",
      buildForwardPipeline);
}

LogicalResult mlir::cleave::compileForward(ModuleOp module,
                                           ::cleave::plan::Program &program) {
  PassManager pm(module.getContext());
  buildForwardPipeline(pm);
  if (failed(pm.run(module)))
    return failure();
  auto main = module.lookupSymbol<func::FuncOp>("main");
  if (!main)
    return module.emitError("the module has no @main function");
  return emitPlan(main, program);
}

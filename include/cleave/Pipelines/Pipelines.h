//===- Pipelines.h - Composed pass pipelines --------------------*- C++ -*-===//

#ifndef CLEAVE_PIPELINES_PIPELINES_H
#define CLEAVE_PIPELINES_PIPELINES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"

namespace cleave::plan {
class Program;
} // namespace cleave::plan

namespace mlir::cleave {

/// Forward lowering: canonicalize (folds the shape arithmetic), CSE, then
/// static buffer planning of every function.
void buildForwardPipeline(OpPassManager &pm);

/// Registers `cleave-forward-pipeline` with the pass registry.
void registerPipelines();

/// Runs the forward pipeline on \p module and emits the plan of its @main.
LogicalResult compileForward(ModuleOp module, ::cleave::plan::Program &program);

} // namespace mlir::cleave

#endif // CLEAVE_PIPELINES_PIPELINES_H

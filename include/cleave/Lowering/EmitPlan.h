//===- EmitPlan.h - cleave IR to a plan Program -----------------*- C++ -*-===//

#ifndef CLEAVE_LOWERING_EMITPLAN_H
#define CLEAVE_LOWERING_EMITPLAN_H

#include "Cleave/CleaveAttrNames.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace cleave::plan {
class Program;
} // namespace cleave::plan

namespace mlir::cleave {

/// Translates \p func, already through cleave-plan-buffers, into \p program:
/// one instruction per op, in order, with kernel names from kernels.def.
/// Emits a diagnostic and fails on an op the runtime has no kernel for.
LogicalResult emitPlan(func::FuncOp func, ::cleave::plan::Program &program);

} // namespace mlir::cleave

#endif // CLEAVE_LOWERING_EMITPLAN_H

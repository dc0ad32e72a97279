//===- EmitPlan.h - cleave IR to a plan Program -----------------*- C++ -*-===//

#ifndef CLEAVE_LOWERING_EMITPLAN_H
#define CLEAVE_LOWERING_EMITPLAN_H

#include "Cleave/CleaveAttrNames.h"
#include "Cleave/CleaveDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace cleave::plan {
class Program;
} // namespace cleave::plan

namespace mlir::cleave {

/// Translates \p func, already through cleave-plan-buffers, into \p program:
/// one instruction per op, in order, with kernel names from kernels.def.
/// Emits a diagnostic and fails on an op the runtime has no kernel for.
LogicalResult emitPlan(func::FuncOp func, ::cleave::plan::Program &program);

/// Copies \p layout into the split fields a plan message carries for a split
/// tensor (a Binding's, a TensorEntry's): split_dim with its blocks and
/// granule where they are not 1, parts and copies where tp is factored,
/// and dp_split_dim.
template <typename Message>
void recordLayout(LayoutAttr layout, Message &message) {
  if (layout.getDpDim() >= 0)
    message.set_dp_split_dim(layout.getDpDim());
  if (!layout.isSplit())
    return;
  message.set_split_dim(layout.getDim());
  if (layout.getBlocks() > 1)
    message.set_split_blocks(layout.getBlocks());
  if (layout.getGranule() > 1)
    message.set_split_granule(layout.getGranule());
  if (layout.getParts() > 0)
    message.set_split_parts(layout.getParts());
  if (layout.getCopies() > 1)
    message.set_split_copies(layout.getCopies());
}

} // namespace mlir::cleave

#endif // CLEAVE_LOWERING_EMITPLAN_H

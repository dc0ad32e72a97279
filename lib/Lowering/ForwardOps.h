//===- ForwardOps.h - The forward ops of a train step ------------*- C++
//-*-===//
//
// Private to lib/Lowering: what --cleave-narrow-saved and
// --cleave-recompute-elementwise call the forward, whose values read later
// are the ones the step keeps for its backward.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_LIB_LOWERING_FORWARDOPS_H
#define CLEAVE_LIB_LOWERING_FORWARDOPS_H

#include "Cleave/CleaveAttrNames.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"

namespace mlir::cleave {

/// The forward: every op the loss and the model's outputs are computed by.
/// Its values read by any other op (the backward's, the update's) are the
/// ones the step keeps from the forward to the backward.
inline llvm::DenseSet<Operation *> forwardOps(func::FuncOp func) {
  llvm::DenseSet<Operation *> forward;
  SmallVector<Operation *> work;
  Operation *ret = func.getBody().front().getTerminator();
  for (unsigned i = 0; i < func.getNumResults(); ++i)
    if (func.getResultAttr(i, kLossAttr) || func.getResultAttr(i, kOutputAttr))
      if (Operation *def = ret->getOperand(i).getDefiningOp())
        if (forward.insert(def).second)
          work.push_back(def);
  while (!work.empty()) {
    Operation *op = work.pop_back_val();
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp())
        if (forward.insert(def).second)
          work.push_back(def);
  }
  return forward;
}

/// A one-block bf16 mixed-precision step (cleave.precision = "bf16"): the
/// programs the bf16 storage passes rewrite.
inline bool isBf16Step(func::FuncOp func) {
  auto precision = func->getAttrOfType<StringAttr>(kPrecisionAttr);
  return precision && precision.getValue() == "bf16" &&
         func.getBody().hasOneBlock();
}

} // namespace mlir::cleave

#endif // CLEAVE_LIB_LOWERING_FORWARDOPS_H

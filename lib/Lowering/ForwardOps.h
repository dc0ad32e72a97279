//===- ForwardOps.h - The forward ops of a train step ------------*- C++
//-*-===//
//
// Private to lib/Lowering: what --cleave-narrow-saved,
// --cleave-recompute-elementwise and --cleave-save-derivatives call the
// forward, whose values read later are the ones the step keeps for its
// backward, and the elementwise ops they move between it and the backward.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_LIB_LOWERING_FORWARDOPS_H
#define CLEAVE_LIB_LOWERING_FORWARDOPS_H

#include "Cleave/CleaveAttrNames.h"
#include "Cleave/CleaveOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/DenseSet.h"

namespace mlir::cleave {

/// The forward: every op the loss and the model's outputs are computed by,
/// and those marked cleave.forward with theirs. Its values read by any
/// other op (the backward's, the update's) are the ones the step keeps from
/// the forward to the backward.
inline llvm::DenseSet<Operation *> forwardOps(func::FuncOp func) {
  llvm::DenseSet<Operation *> forward;
  SmallVector<Operation *> work;
  Operation *ret = func.getBody().front().getTerminator();
  for (unsigned i = 0; i < func.getNumResults(); ++i)
    if (func.getResultAttr(i, kLossAttr) || func.getResultAttr(i, kOutputAttr))
      if (Operation *def = ret->getOperand(i).getDefiningOp())
        if (forward.insert(def).second)
          work.push_back(def);
  for (Operation &op : func.getBody().front())
    if (op.hasAttr(kForwardAttr) && forward.insert(&op).second)
      work.push_back(&op);
  while (!work.empty()) {
    Operation *op = work.pop_back_val();
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp())
        if (forward.insert(def).second)
          work.push_back(def);
  }
  return forward;
}

/// Ops whose result is a cheap function of their operands, element by
/// element: recomputing one costs a few instructions per element of bytes
/// the backward's fused chain reads anyway.
inline bool isCheapElementwise(Operation *op) {
  if (auto c = dyn_cast<CastOp>(op))
    return isa<FloatType>(getElementTypeOrSelf(c.getInput().getType())) &&
           isa<FloatType>(getElementTypeOrSelf(c.getType()));
  return isa<AddOp, SubOp, MulOp, DivOp, NegOp, ExpOp, ErfOp, TanhOp, SigmoidOp,
             SqrtOp, RsqrtOp, ReciprocalOp, GeluOp>(op);
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

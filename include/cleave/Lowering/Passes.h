//===- Passes.h - Lowering passes -------------------------------*- C++ -*-===//

#ifndef CLEAVE_LOWERING_PASSES_H
#define CLEAVE_LOWERING_PASSES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::cleave {

#define GEN_PASS_DECL
#include "cleave/Lowering/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "cleave/Lowering/Passes.h.inc"

} // namespace mlir::cleave

#endif // CLEAVE_LOWERING_PASSES_H

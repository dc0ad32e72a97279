//===- Passes.h - Training-step passes --------------------------*- C++ -*-===//

#ifndef CLEAVE_AUTODIFF_PASSES_H
#define CLEAVE_AUTODIFF_PASSES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::cleave {

#define GEN_PASS_DECL
#include "cleave/Autodiff/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "cleave/Autodiff/Passes.h.inc"

} // namespace mlir::cleave

#endif // CLEAVE_AUTODIFF_PASSES_H

//===- Passes.h - Tensor-parallel passes ------------------------*- C++ -*-===//

#ifndef CLEAVE_SHARDING_PASSES_H
#define CLEAVE_SHARDING_PASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::cleave {

#define GEN_PASS_DECL
#include "cleave/Sharding/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "cleave/Sharding/Passes.h.inc"

} // namespace mlir::cleave

#endif // CLEAVE_SHARDING_PASSES_H

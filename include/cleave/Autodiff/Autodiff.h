//===- Autodiff.h - Training-step construction ------------------*- C++ -*-===//
//
// The registration of the differentiation rules. The loss builders that
// --cleave-append-loss shares with the importer are the dialect's
// (Cleave/CleaveLosses.h).
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_AUTODIFF_AUTODIFF_H
#define CLEAVE_AUTODIFF_AUTODIFF_H

#include "Cleave/CleaveAttrNames.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/Value.h"

namespace mlir::cleave {

/// Attaches the DifferentiableOpInterface models of the cleave ops.
void registerDifferentiationRules(DialectRegistry &registry);

} // namespace mlir::cleave

#endif // CLEAVE_AUTODIFF_AUTODIFF_H

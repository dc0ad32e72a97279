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
#include "mlir/Interfaces/FunctionInterfaces.h"

namespace mlir::cleave {

/// Whether argument \p i of \p func is a weight that trains: a parameter
/// not marked cleave.frozen (a frozen one is read like any other but gets
/// no gradient, no optimizer state and no new value).
inline bool isTrainedParameter(FunctionOpInterface func, unsigned i) {
  return func.getArgAttr(i, kParameterAttr) && !func.getArgAttr(i, kFrozenAttr);
}

/// Attaches the DifferentiableOpInterface models of the cleave ops.
void registerDifferentiationRules(DialectRegistry &registry);

} // namespace mlir::cleave

#endif // CLEAVE_AUTODIFF_AUTODIFF_H

//===- CausalMask.h - Masks as functions of a score's position --*- C++ -*-===//
//
// Private to lib/Autodiff. A causal mask is a constant only while it is
// small: past 2^16 elements (256 tokens) the importers leave it the ops that
// build it (iota or aranges, a subtraction, a comparison, a select), and a
// 2048-token mask is never folded (4M booleans, 32 MB of int64 on the way).
// These describe such a value as a function of the row and column of the
// scores it masks, without evaluating it, so that attention at the lengths
// models train at is recognised as at 16 tokens.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_LIB_AUTODIFF_CAUSALMASK_H
#define CLEAVE_LIB_AUTODIFF_CAUSALMASK_H

#include "mlir/IR/Value.h"

#include <optional>

namespace mlir::cleave {

/// Whether boolean \p mask (broadcasting to scores [..., rows, cols], its
/// other dims 1) is \p maskedWhen exactly on the keys causal attention
/// excludes: column j > i + cols - rows in row i.
bool isCausalMask(Value mask, int64_t rows, int64_t cols, bool maskedWhen);

/// Whether float \p bias, added to scores [..., rows, cols] that are then
/// multiplied by \p scale, is exactly 0 on the causal keys and at most
/// \p maskedAtMost (after the scale) on the others.
bool isCausalBias(Value bias, int64_t rows, int64_t cols, double scale,
                  double maskedAtMost);

/// The value of a splat float constant.
std::optional<double> splatFloat(Value v);

} // namespace mlir::cleave

#endif // CLEAVE_LIB_AUTODIFF_CAUSALMASK_H

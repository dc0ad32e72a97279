//===- Accumulate.h - Gradient accumulation over micro-batches --*- C++ -*-===//
//
// Part of --cleave-autodiff (its micro-batches option): the differentiated
// step repeated for each micro-batch of one update, gradients summed.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_LIB_AUTODIFF_ACCUMULATE_H
#define CLEAVE_LIB_AUTODIFF_ACCUMULATE_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlir::cleave {

/// Makes \p func, already differentiated (results: loss, gradients, then
/// buffers; \p seed the backward's seed), the step of \p microBatches
/// micro-batches: each graph input gains N-1 copies (cleave.micro_batch =
/// 1..N-1), the forward and backward run once per micro-batch in turn (one
/// micro-batch's activations live at a time), gradients are summed and
/// buffers (BatchNorm statistics) carried from one to the next.
///
/// The loss is the whole update's: a loss that divides by a count the
/// parameters do not change (cross-entropy's valid tokens under
/// ignore_index) divides every micro-batch's sum by the update's total
/// count (token-count-correct, as Trainer since transformers 4.46); any
/// other loss is the mean of the micro-batches' (each seeded with 1/N).
LogicalResult accumulateMicroBatches(func::FuncOp func, Value seed,
                                     int64_t microBatches);

} // namespace mlir::cleave

#endif // CLEAVE_LIB_AUTODIFF_ACCUMULATE_H

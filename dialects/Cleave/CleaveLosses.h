//===- CleaveLosses.h - Losses spelled in cleave ops ------------*- C++ -*-===//
//
// How a loss is written in the dialect's ops. Two stages build losses: the
// importer (ONNX's SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss)
// and Autodiff's --cleave-append-loss. Neither owns the other, so the
// builders live with the ops they are made of.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_DIALECT_CLEAVELOSSES_H
#define CLEAVE_DIALECT_CLEAVELOSSES_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/Value.h"

#include <optional>

namespace mlir::cleave {

enum class LossReduction { Mean, Sum, None };

/// Softmax cross-entropy of \p logits over \p classAxis against integer
/// \p labels (logits' shape without the class axis). Labels equal to
/// \p ignoreIndex contribute nothing and are not counted by the mean.
/// \p weights (optional, [C]) weighs each class. With \p logProbs the logits
/// are already log-probabilities (negative log-likelihood). Built from
/// reductions over the class axis (max, sum of exponentials, target logit) so
/// that a split class axis needs only all-reduces of those. Returns the loss
/// (scalar unless None) or null after emitting an error at \p loc.
Value buildCrossEntropy(OpBuilder &b, Location loc, Value logits, Value labels,
                        int64_t classAxis, std::optional<int64_t> ignoreIndex,
                        Value weights, LossReduction reduction, bool logProbs);

/// Mean squared error between \p prediction and \p target (same type).
Value buildMeanSquaredError(OpBuilder &b, Location loc, Value prediction,
                            Value target);

} // namespace mlir::cleave

#endif // CLEAVE_DIALECT_CLEAVELOSSES_H

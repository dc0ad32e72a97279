//===- Autodiff.h - Training-step construction -------------------*- C++
//-*-===//
//
// The registration of the differentiation rules, and the loss
// builders shared by the importer (ONNX loss ops) and --cleave-append-loss.
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

#endif // CLEAVE_AUTODIFF_AUTODIFF_H

//===- ShardingRule.h - Factor-based sharding rules -------------*- C++ -*-===//
//
// What ShardingRuleOpInterface returns: an op written as an einsum over
// named factors, as in OpenXLA Shardy. Each factor has a size and says which
// dimension of each operand and result carries it (-1: none, e.g. a
// broadcast size-1 dimension). Splitting a factor across a mesh axis splits
// every dimension carrying it; a split Reduction factor leaves the results
// partial (sum, or max/min); a Whole factor must not be split.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_DIALECT_SHARDINGRULE_H
#define CLEAVE_DIALECT_SHARDINGRULE_H

#include "Cleave/CleaveDialect.h"
#include "llvm/ADT/SmallVector.h"

#include <optional>

namespace mlir::cleave {

struct ShardingFactor {
  enum class Kind { Parallel, Reduction, Whole };
  int64_t size = 1;
  Kind kind = Kind::Parallel;
  /// For Reduction factors: how the partial results combine.
  ReduceKind combine = ReduceKind::sum;
  llvm::SmallVector<int64_t, 4> operandDims;
  llvm::SmallVector<int64_t, 2> resultDims;
  /// For split Reduction factors over padded dims: per operand (empty: all
  /// default), the reduction whose identity that operand needs in the
  /// padding when it is not `combine`'s (cross_entropy sums, but its logits
  /// must be -inf there and its class ids no class).
  llvm::SmallVector<std::optional<ReduceKind>, 4> operandPads;
};

struct ShardingRule {
  llvm::SmallVector<ShardingFactor> factors;
  /// Linearity, which lets a partial sum flow through the op unreduced:
  /// `additive` ops (add, sub, concat) map all-partial operands to a partial
  /// result; a `scalingOperands` operand may be partial when every other
  /// operand is replicated (mul, the numerator of div, matmul, reshape).
  bool additive = false;
  llvm::SmallVector<bool, 4> scalingOperands;
};

} // namespace mlir::cleave

#endif // CLEAVE_DIALECT_SHARDINGRULE_H

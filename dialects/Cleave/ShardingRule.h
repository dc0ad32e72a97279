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
#include "llvm/ADT/StringRef.h"

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

/// How an op's layouts go beyond its factors, for the index maps an einsum
/// cannot state. The partitioner, the layout search and the passes around
/// them read these and never an op's kind: a new op is a rule.
enum class ShardingForm : uint8_t {
  Einsum,  ///< the factors say it all
  Regroup, ///< the result is operand 0 with its dimensions regrouped: a
           ///< split survives on the result dimension whose leading
           ///< extents divide it (a reshape)
  Window,  ///< a window of operand 0 (or operand 0 placed in a window of
           ///< the result): whole blocks of a blocked split stay local
  Join,    ///< the operands joined along joinDim: blocked splits along it
           ///< join into more blocks (a concat)
};

/// What an op makes of zeros in the padding of a split dimension (a
/// padded chunk's tail), given which operands carry that dimension.
enum class PadFlow : uint8_t {
  None,    ///< garbage, whatever the operands hold
  Moves,   ///< zero where every carrying operand is zero (transpose, neg)
  Sums,    ///< zero where every operand carries it and is zero (add, concat)
  Product, ///< zero where some operand carries it and every one of those
           ///< is zero (matmul, mul; 0 * inf would be NaN otherwise)
  Always,  ///< always zero (a scatter into zeros)
};

struct ShardingWindow {
  /// true: the result is the window of operand 0 (slice); false: operand 0
  /// fills the window of the result (slice_scatter).
  bool takes = true;
  llvm::SmallVector<int64_t, 4> starts, steps;
  /// The attribute holding starts, rewritten per rank.
  llvm::StringRef startsAttr;
};

/// A lookup in a table along one axis (gather reads operand 0's rows,
/// scatter_add adds into the result's): split along the axis, each rank
/// handles the indices in its range, found as one chunk.
struct ShardingLookup {
  int64_t axis = 0;
  bool intoResult = false;
};

struct ShardingRule {
  llvm::SmallVector<ShardingFactor> factors;
  ShardingForm form = ShardingForm::Einsum;
  std::optional<ShardingWindow> window; // Window
  int64_t joinDim = -1;                 // Join
  std::optional<ShardingLookup> lookup;
  /// A product contracting its Reduction factor (matmul): with a weight
  /// operand its partial results are Megatron's reductions.
  bool contraction = false;
  /// Moves operand 0's elements and nothing else (reshape, transpose,
  /// broadcast, cast): a weight seen through it is still the weight.
  bool movesOperand = false;
  /// A mean over the Reduction factors: a rank's mean of its share is
  /// scaled by its share's size over the whole's.
  bool mean = false;
  PadFlow padFlow = PadFlow::None;
  /// Linearity, which lets a partial sum flow through the op unreduced:
  /// `additive` ops (add, sub, concat) map all-partial operands to a partial
  /// result; a `scalingOperands` operand may be partial when every other
  /// operand is replicated (mul, the numerator of div, matmul, reshape).
  bool additive = false;
  llvm::SmallVector<bool, 4> scalingOperands;
};

} // namespace mlir::cleave

#endif // CLEAVE_DIALECT_SHARDINGRULE_H

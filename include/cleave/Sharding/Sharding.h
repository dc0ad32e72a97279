//===- Sharding.h - Tensor-parallel layouts and partitioning ----*- C++ -*-===//
//
// The state of a tensor on the tensor-parallel mesh axis, the cost model, and
// the partitioner that both scores a choice of parameter layouts (dry run)
// and rewrites the train step into its per-rank (SPMD) form.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_SHARDING_SHARDING_H
#define CLEAVE_SHARDING_SHARDING_H

#include "Cleave/CleaveAttrNames.h"
#include "Cleave/CleaveDialect.h"
#include "Cleave/ShardingRule.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "llvm/ADT/StringMap.h"

#include <memory>
#include <string>
#include <vector>

namespace mlir::cleave {

/// A value's state on the tp axis: replicated, split along one dimension, or
/// a pending partial result (each rank holds an addend, or a candidate for
/// the max/min).
/// Kept to 16 bytes: a dry run of the search reads one per value of the
/// step, and they stay in cache.
struct Layout {
  enum class Kind : uint8_t { Replicated, Split, Partial };
  Kind kind = Kind::Replicated;
  int16_t dim = -1;
  ReduceKind combine = ReduceKind::sum;
  /// Split: the dimension is this many equal blocks (a fused q/k/v
  /// projection), each split across the ranks; 1 for a plain split.
  int32_t blocks = 1;
  /// Split: each rank's chunk of a block is a whole number of granules
  /// (heads of this width), ceil(granules / tp) of them; the last ranks'
  /// chunks end in padding. 1: chunks of ceil(block / tp) indices.
  int32_t granule = 1;

  static Layout replicated() { return {}; }
  static Layout split(int64_t d, int64_t blocks = 1, int64_t granule = 1) {
    return {Kind::Split, static_cast<int16_t>(d), ReduceKind::sum,
            static_cast<int32_t>(blocks), static_cast<int32_t>(granule)};
  }
  static Layout partial(ReduceKind c = ReduceKind::sum) {
    return {Kind::Partial, -1, c, 1, 1};
  }
  /// The extent of every rank's chunk of one block of \p block indices.
  int64_t chunk(int64_t block, int64_t tp) const {
    int64_t g = granule;
    return (block + g * tp - 1) / (g * tp) * g;
  }
  /// The same split with the granule dropped where it changes nothing:
  /// every rank's chunk of a block of \p size / blocks is as long without
  /// it (tp times the granule divides the block, or 6 heads on 4 ranks in
  /// units of 1 or 2: 2 each), so the ranks hold the same indices.
  Layout canonical(int64_t size, int64_t tp) const {
    Layout l = *this;
    int64_t block = size / l.blocks;
    if (l.isSplit() && l.granule > 1 &&
        split(l.dim, l.blocks).chunk(block, tp) == l.chunk(block, tp))
      l.granule = 1;
    return l;
  }
  bool isReplicated() const { return kind == Kind::Replicated; }
  bool isSplit() const { return kind == Kind::Split; }
  bool isPartial() const { return kind == Kind::Partial; }
  bool operator==(const Layout &o) const {
    return kind == o.kind && dim == o.dim && blocks == o.blocks &&
           granule == o.granule &&
           (kind != Kind::Partial || combine == o.combine);
  }
  bool operator!=(const Layout &o) const { return !(*this == o); }
  /// "R", "S(1)", "S(1,3)" (3 blocks), "S(1,3;64)" (granule 64), "P(sum)".
  std::string str() const;
};

/// Alpha-beta communication cost (seconds) on a ring of `tp` ranks.
struct CostModel {
  double alpha = 10e-6;     // per collective
  double beta = 1.0 / 25e9; // per byte on the wire
  /// Seconds charged per byte of per-rank memory (parameters, gradients,
  /// optimizer state): the exchange rate that makes sharding a weight pay
  /// for the communication it causes.
  double memory = 100.0 / 25e9;
};

/// How much worse (communication plus memory charge) a plan that gathers
/// no value carrying a parameter's split (PartitionResult's
/// gatheredProducts) may be than one that does, and still be chosen: the
/// layout search's second phase, and the choice between factorings of tp.
constexpr double kGatherTolerance = 0.25;

/// Parameter layouts by parameter name.
using ParameterLayouts = llvm::StringMap<Layout>;
/// Per parameter the search chose: what its cheapest other layout would
/// have cost, in words (for the reasons of the collectives it causes).
using LayoutAlternatives = llvm::StringMap<std::string>;

struct PartitionResult {
  double seconds = 0;      // communication cost of one step
  int64_t memoryBytes = 0; // per rank: parameters, gradients, optimizer state
  /// Argument numbers of split parameters that some use needs whole (an
  /// all-gather of the parameter itself every step): state sharding in the
  /// manner of ZeRO, which the search does not choose (see chooseLayouts).
  std::vector<unsigned> gatheredParameters;
  /// Argument numbers of split parameters a value carrying whose split (a
  /// column-parallel product, its activation, its gradient) is gathered
  /// whole: the same trade, which the search removes (see chooseLayouts).
  std::vector<unsigned> gatheredProducts;
};

/// Scores (\p rewrite false) or applies (\p rewrite true) \p layouts to the
/// train step \p func for a tp axis of \p tp ranks. Rewriting turns every
/// value into its local form and inserts the collectives; the function's
/// parameter-like arguments and results get a #cleave.layout (kLayoutAttr).
/// What the many dry runs of one search share: the step's values and ops
/// numbered once, with their sharding rules, sizes and use counts, so a dry
/// run walks arrays instead of the IR. Valid while \p func is unchanged.
class PartitionIndex {
public:
  explicit PartitionIndex(func::FuncOp func);
  ~PartitionIndex();
  struct Impl;
  std::unique_ptr<Impl> impl;
};

/// How partition() treats two choices that are the search's, plan-wide.
struct PartitionOptions {
  /// A reshape that a value carrying a parameter's split cannot keep split
  /// makes each rank's chunk a partial sum (zeros elsewhere) instead of
  /// gathering it.
  bool embedProducts = false;
  /// A partial sum read by several ops stays partial into each of them
  /// where they allow it (by default it is reduced before it fans out).
  bool partialFanOut = false;
  /// Data parallelism: every data input (labels included) whose first
  /// dimension is the batch (the first dimension most inputs share) is
  /// split along it, which the axis must divide; other inputs stay whole;
  /// parameters stay as \p layouts say (replicated for plain dp).
  bool splitInputs = false;
  /// The mesh axis the ranks lie on: the collectives' and shard ops'
  /// axes (a 2-D mesh is partitioned once per axis: dp, then tp).
  int64_t meshAxis = 0;
  /// Gradients summed over the axis are flattened and reduced as one
  /// bucket. Off where another axis is partitioned afterwards: flattening
  /// would undo that axis's splits.
  bool bucketGradients = true;
  /// ZeRO stage 1 on this axis: optimizer state split along its first
  /// dimension where the axis divides it (each rank updates its shard of
  /// every parameter, which is then gathered whole).
  bool shardOptimizerState = false;
  /// ZeRO stage 2: a gradient whose update needs only this rank's shard
  /// is reduce-scattered as soon as it is final (not all-reduced where the
  /// optimizer reads it, then sliced), so the full sum is never held and
  /// the reduction overlaps the rest of the backward pass.
  bool scatterGradients = false;
  /// ZeRO stage 3: parameters kept split like their optimizer state, and
  /// gathered whole at each use (forward and backward) rather than once,
  /// so a gathered copy lives only until its op has read it.
  bool shardParameters = false;
  /// Where sum-partial gradients are reduced. -1: where the update first
  /// reads them (one bucket of all of them, when bucketing). 0: each right
  /// after the op that finishes it. N > 0: in buckets of at least N bytes,
  /// each reduced right after the gradient that fills it (the rest where
  /// the update reads them). Early reductions free the backward pass's
  /// tail to overlap them.
  int64_t earlyBucketBytes = -1;
  /// ZeRO on a dp x tp mesh: the tp layouts, chosen before the dp pass.
  /// The dp split of a parameter's state (and, at stage 3, the parameter)
  /// avoids the dimension tp splits, and is recorded as the layout's
  /// dp_dim beside the tp pass's dim (data inputs keep dim alone).
  const ParameterLayouts *tensorLayouts = nullptr;
  /// Sequence parallelism (Megatron-SP): a partial activation that an op
  /// reads split is reduce-scattered into that split rather than
  /// all-reduced whole and sliced. The walk then keeps the token-wise ops
  /// after a row-parallel product (residual adds, norms) on each rank's
  /// tokens, and the next op that needs the value whole gathers it: the
  /// bytes of the all-reduce, and 1/tp of the activations between.
  bool sequenceParallel = false;
  /// tp factored into two axes, this the inner one: a partial sum that
  /// reaches an all-reduce over the other axis is summed there (the two
  /// then become one all-reduce over both axes) rather than carried through
  /// it and summed on its own later.
  bool joinOtherAxisSums = false;
};

/// Rewriting, \p alternatives (from chooseLayouts) go into the reasons of
/// the collectives that a parameter's layout causes.
FailureOr<PartitionResult>
partition(func::FuncOp func, int64_t tp, const ParameterLayouts &layouts,
          const CostModel &cost, bool rewrite,
          const PartitionIndex *index = nullptr,
          const LayoutAlternatives *alternatives = nullptr,
          PartitionOptions options = {});

/// Reads a --plan file's `REGEX KIND` rules (KIND colwise, rowwise,
/// replicate, vocab, or a layout in Layout::str()'s spelling, R or
/// S(DIM[,BLOCKS][;GRANULE])) into layouts of \p func's parameters for \p tp
/// ranks; errors name the file and line.
LogicalResult readLayoutPlan(func::FuncOp func, StringRef planFile, int64_t tp,
                             ParameterLayouts &layouts);

/// Chooses parameter layouts for \p func: \p fixed ones (from --plan) stay,
/// the others are searched to minimise communication plus the cost model's
/// memory charge. Fills \p alternatives, when given, for the searched ones.
/// \p options, when given, says how partition() must rewrite the chosen
/// plan.
FailureOr<ParameterLayouts>
chooseLayouts(func::FuncOp func, int64_t tp, const ParameterLayouts &fixed,
              const CostModel &cost, LayoutAlternatives *alternatives = nullptr,
              PartitionOptions *options = nullptr);

/// What --cleave-choose-layouts recorded on a function: every parameter's
/// layout (replicated where none is recorded), why the searched ones were
/// chosen, and how the search scored them.
struct RecordedLayouts {
  ParameterLayouts layouts;
  LayoutAlternatives why;
  /// Present where cleave.partition_how is.
  std::optional<PartitionOptions> how;
};

/// Reads --cleave-choose-layouts's record off \p func, leaving it there:
/// layouts empty where none was recorded (no cleave.layouts_for and no split
/// #cleave.layout on a parameter), else every parameter's; an error where
/// it was chosen for another tp, or names an unknown way of scoring. The
/// passes that apply it (--cleave-partition-data for ZeRO's splits,
/// --cleave-partition) share this one reader.
FailureOr<RecordedLayouts> readRecordedLayouts(func::FuncOp func, int64_t tp);

/// Attaches the ShardingRuleOpInterface models of the cleave ops.
void registerShardingRules(DialectRegistry &registry);

/// \p op's sharding rule (ShardingRuleOpInterface), if it has one: what
/// the passes read instead of an op's kind.
std::optional<ShardingRule> shardingRuleOf(Operation *op);

/// Whether \p def (null: no) only moves its one operand's elements, all of
/// them, by its sharding rule: a reshape or a transpose.
bool movesOnly(Operation *def);

/// Whether \p v is a sum (adds and subs) of half-precision products widened
/// to f32, as mixed precision's backward accumulates an input's gradient
/// (the input gradients of q, k and v): such a partial sum passes through
/// the widening casts and crosses the wire once, in bf16.
bool isSumOfHalfProducts(Value v);

} // namespace mlir::cleave

#endif // CLEAVE_SHARDING_SHARDING_H

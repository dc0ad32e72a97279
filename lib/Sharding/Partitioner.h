//===- Partitioner.h - The partitioner, shared by its parts -----*- C++ -*-===//
//
// Private to lib/Sharding: the step's index and the Partitioner, whose
// definitions are split between Partitioner.cpp (the walk, the op rules, the
// collectives) and PartitionShapes.cpp (reshapes, block slices, and the
// padding of split values).
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_LIB_SHARDING_PARTITIONER_H
#define CLEAVE_LIB_SHARDING_PARTITIONER_H

#include "Cleave/CleaveAttrNames.h"
#include "Cleave/CleaveInterfaces.h"
#include "Cleave/CleaveOps.h"
#include "Cleave/TensorSize.h"
#include "cleave/Sharding/Sharding.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseSet.h"

#include <limits>
#include <string>
#include <vector>

namespace mlir::cleave {

struct PartitionIndex::Impl {
  /// How the partitioner visits an op: by its rule's form (ShardingForm),
  /// by its factors, or whole; never by its kind.
  enum class Kind : uint8_t {
    Source, // no operands and no rule (a constant): replicated
    Regroup,
    Window,
    Join,
    Ruled,
    Replicated
  };
  struct OpEntry {
    Operation *op;
    Kind kind;
    int32_t rule = -1; // into rules
    uint32_t firstOperand, numOperands;
    uint32_t firstResult, numResults;
  };
  std::vector<Value> values;
  llvm::DenseMap<Value, int32_t> ids;
  std::vector<int64_t> bytes;
  std::vector<uint8_t> isFloat, oneUse;
  /// Per value id, its uses among the ops (op index, operand number):
  /// users[userStart[id] .. userStart[id + 1]).
  std::vector<uint32_t> userStart;
  std::vector<std::pair<uint32_t, uint32_t>> users;
  std::vector<int32_t> operands; // all ops' operand ids, op after op
  std::vector<OpEntry> ops;
  std::vector<ShardingRule> rules;
  /// Per argument: the parameter whose layout it takes (itself or the one
  /// whose optimizer state it is), empty for data, buffers and the step.
  std::vector<StringRef> argParameter;
  std::vector<uint8_t> argIsParameter;
  /// Per argument: a parameter that does not train (no gradient).
  std::vector<uint8_t> argIsFrozen;
  /// Per result: the parameter whose layout it is kept in (new parameters,
  /// gradients, optimizer state; empty for the loss and buffers) and the
  /// phase its collectives belong to.
  std::vector<StringRef> resultParameter;
  std::vector<const char *> resultPhase;
  std::vector<uint8_t> resultIsGradient;
  /// Values the step returns as a parameter's gradient, by value id.
  llvm::DenseMap<int32_t, StringRef> gradientOf;
  /// Under mixed precision (cleave.precision), the type an activation's
  /// partial sum crosses the wire in (bf16: half the bytes, as Megatron's
  /// bf16 all-reduces); null in f32. Gradient sums stay f32.
  Type wireType;
  /// Per value id, under mixed precision: isSumOfHalfProducts, found once
  /// here rather than on each of the layout search's dry runs.
  std::vector<uint8_t> sumOfHalfProducts;

  explicit Impl(func::FuncOp func) {
    if (auto p = func->getAttrOfType<StringAttr>(kPrecisionAttr))
      wireType = p.getValue() == "bf16"
                     ? Type(BFloat16Type::get(func.getContext()))
                     : Type(Float16Type::get(func.getContext()));
    auto add = [&](Value v) {
      ids[v] = values.size();
      values.push_back(v);
      bytes.push_back(storageBytes(v.getType()));
      isFloat.push_back(
          isa<FloatType>(cast<RankedTensorType>(v.getType()).getElementType()));
      oneUse.push_back(v.hasOneUse());
    };
    for (BlockArgument arg : func.getArguments()) {
      add(arg);
      unsigned i = arg.getArgNumber();
      StringRef param;
      auto name = func.getArgAttrOfType<StringAttr>(i, kParameterAttr);
      if (name)
        param = name.getValue();
      else if (auto state =
                   func.getArgAttrOfType<ArrayAttr>(i, kOptimizerStateAttr))
        param = cast<StringAttr>(state[0]).getValue();
      argParameter.push_back(param);
      argIsParameter.push_back(static_cast<bool>(name));
      argIsFrozen.push_back(name && func.getArgAttr(i, kFrozenAttr));
    }
    for (Operation &op : func.getBody().front().without_terminator()) {
      OpEntry e{&op,
                Kind::Replicated,
                -1,
                static_cast<uint32_t>(operands.size()),
                op.getNumOperands(),
                static_cast<uint32_t>(values.size()),
                op.getNumResults()};
      for (Value v : op.getOperands())
        operands.push_back(ids.lookup(v));
      for (Value r : op.getResults())
        add(r);
      if (auto ruled = dyn_cast<ShardingRuleOpInterface>(op)) {
        ShardingRule rule;
        if (succeeded(ruled.getShardingRule(rule))) {
          e.rule = rules.size();
          e.kind = rule.form == ShardingForm::Regroup  ? Kind::Regroup
                   : rule.form == ShardingForm::Window ? Kind::Window
                   : rule.form == ShardingForm::Join   ? Kind::Join
                                                       : Kind::Ruled;
          rules.push_back(std::move(rule));
        }
      }
      if (e.rule < 0 && op.getNumOperands() == 0)
        e.kind = Kind::Source;
      ops.push_back(e);
    }
    userStart.assign(values.size() + 1, 0);
    for (const OpEntry &e : ops)
      for (unsigned i = 0; i < e.numOperands; ++i)
        ++userStart[operands[e.firstOperand + i] + 1];
    for (size_t v = 0; v < values.size(); ++v)
      userStart[v + 1] += userStart[v];
    users.resize(userStart.back());
    std::vector<uint32_t> fill(userStart.begin(), userStart.end() - 1);
    for (auto [k, e] : llvm::enumerate(ops))
      for (unsigned i = 0; i < e.numOperands; ++i)
        users[fill[operands[e.firstOperand + i]]++] = {static_cast<uint32_t>(k),
                                                       i};
    for (unsigned i = 0; i < func.getNumResults(); ++i) {
      StringRef param;
      if (auto name = func.getResultAttrOfType<StringAttr>(i, kParameterAttr))
        param = name.getValue();
      else if (auto name =
                   func.getResultAttrOfType<StringAttr>(i, kGradientAttr))
        param = name.getValue();
      else if (auto state =
                   func.getResultAttrOfType<ArrayAttr>(i, kOptimizerStateAttr))
        param = cast<StringAttr>(state[0]).getValue();
      resultParameter.push_back(param);
      // Gradients are formed in the backward pass and updates in the
      // optimizer; their collectives belong there.
      resultIsGradient.push_back(
          static_cast<bool>(func.getResultAttr(i, kGradientAttr)));
      if (auto name = func.getResultAttrOfType<StringAttr>(i, kGradientAttr))
        gradientOf[ids.lookup(
            func.getBody().front().getTerminator()->getOperand(i))] =
            name.getValue();
      resultPhase.push_back(func.getResultAttr(i, kGradientAttr) ? "backward"
                            : func.getResultAttr(i, kLossAttr)   ? "forward"
                                                                 : "optimizer");
    }
    if (wireType)
      for (Value v : values)
        sumOfHalfProducts.push_back(isSumOfHalfProducts(v));
  }
};

namespace partitioning {

inline constexpr double kInfinity = std::numeric_limits<double>::infinity();

inline RankedTensorType typeOf(Value v) {
  return cast<RankedTensorType>(v.getType());
}

using Index = PartitionIndex::Impl;
using OpEntry = Index::OpEntry;

/// A dimension that tp does not divide is split in equal chunks (Layout::chunk)
/// (Megatron pads its vocabulary the same way): the chunks of the last ranks
/// end in padding. What a padded value holds there: garbage, or a known
/// constant (parameters and optimizer state are kept zero-padded; masks make
/// a reduction's identity).
enum class Pad : uint8_t { Unknown, Zero, NegInf, PosInf };

/// The identity of \p combine, which a reduction over a padded dimension
/// needs in the padding.
inline Pad identityOf(ReduceKind combine) {
  return combine == ReduceKind::max   ? Pad::NegInf
         : combine == ReduceKind::min ? Pad::PosInf
                                      : Pad::Zero;
}

/// A value in a layout: (value id and layout code, granule).
using ConversionKey = std::pair<uint64_t, int64_t>;

class Partitioner {
public:
  Partitioner(func::FuncOp func, int64_t tp, const CostModel &cost,
              bool rewrite, const Index &index,
              const LayoutAlternatives *alternatives, PartitionOptions options)
      : func(func), tp(tp), cost(cost), rewrite(rewrite),
        embedProducts(options.embedProducts),
        partialFanOut(options.partialFanOut), splitInputs(options.splitInputs),
        meshAxis(options.meshAxis), bucketGradients(options.bucketGradients),
        shardOptimizerState(options.shardOptimizerState),
        scatterGradients(options.scatterGradients),
        shardParameters(options.shardParameters),
        earlyBucketBytes(options.earlyBucketBytes),
        sequenceParallel(options.sequenceParallel),
        joinOtherAxisSums(options.joinOtherAxisSums),
        tensorLayouts(options.tensorLayouts), builder(func.getContext()),
        index(index), layouts(index.values.size()),
        pads(index.values.size(), Pad::Unknown),
        splitSource(index.values.size(), -1), alternatives(alternatives),
        embedOrigin(index.values.size(), -1),
        embeddedRegroup(index.values.size(), -1) {}

  FailureOr<PartitionResult> run(const ParameterLayouts &params);

private:
  Layout stateLayout(RankedTensorType type, Layout param, StringRef name) const;
  int64_t batchSize();
  func::FuncOp func;
  int64_t tp;
  const CostModel &cost;
  bool rewrite;
  // Defaults as PartitionOptions's, should the constructor miss one.
  bool embedProducts = false, partialFanOut = false, splitInputs = false;
  int64_t meshAxis = 0;
  bool bucketGradients = true, shardOptimizerState = false,
       scatterGradients = false, shardParameters = false;
  int64_t earlyBucketBytes = -1;
  bool sequenceParallel = false, joinOtherAxisSums = false;
  /// tp-inner's inner pass: \p op is the other axis's all-reduce, which
  /// sums a partial operand with its own (PartitionOptions).
  bool joinsOtherAxisSum(Operation *op) const {
    return joinOtherAxisSums && isa<AllReduceOp>(op);
  }
  const ParameterLayouts *tensorLayouts = nullptr;
  /// The parameters' layouts of the run in progress.
  const ParameterLayouts *runParams = nullptr;
  /// The layout of the parameter whose gradient op \p e makes (none when
  /// it makes none, or the parameter is whole).
  std::optional<Layout> gradientHome(const OpEntry &e) const;
  /// earlyBucketBytes: the bytes of gradients waiting in the open bucket,
  /// and one of them (-1: none).
  int64_t pendingBytes = 0;
  /// The latest finished gradient of each element type (mixed precision
  /// returns bf16 and f32 ones): a bucket is one type, concatenated.
  SmallVector<std::pair<Type, int32_t>, 2> pendingGradients;
  size_t finishedGradients = 0;
  /// Adds the gradients \p e finishes to the open bucket and reduces it
  /// once full (PartitionOptions::earlyBucketBytes).
  void reduceFinishedGradients(const OpEntry &e);
  void recordSplits(ArrayRef<Layout> argLayouts,
                    ArrayRef<Layout> resultLayouts);
  OpBuilder builder;
  const Index &index;
  PartitionResult result;
  /// By value id.
  std::vector<Layout> layouts;
  /// By value id: what a padded split value holds in its padding.
  std::vector<Pad> pads;
  /// By value id: the parameter (argument number) whose split a split
  /// value carries (a column-parallel product, its activation, its
  /// gradient), or -1 (a split sliced from a whole value).
  std::vector<int32_t> splitSource;
  /// Results of \p e split as their operands: the source of the first
  /// operand that stays split.
  void carrySplitSource(const OpEntry &e, ArrayRef<Layout> to);
  /// The padding of converted values, by key(value id, target layout).
  llvm::DenseMap<ConversionKey, Pad> convertedPads;
  /// Masked copies of local values, by (value, fill).
  llvm::DenseMap<std::pair<Value, int>, Value> masks;
  /// Rewriting only: the reasons `cleave inspect` shows. The op being
  /// visited (as the user needing a conversion), why it gathers the operand
  /// being converted, and the op whose split contraction made each partial
  /// value.
  const LayoutAlternatives *alternatives;
  std::string user, why;
  llvm::DenseMap<int32_t, Operation *> partialFrom;
  /// The reason for reducing partial value \p id, and whether the
  /// reduction is one of Megatron's.
  std::pair<std::string, bool> reduceReason(int32_t id) const;
  std::string alternativeOf(StringRef param) const {
    if (alternatives)
      if (auto it = alternatives->find(param); it != alternatives->end())
        return it->second;
    // The dp walk chooses no layout: the batch is split, and ZeRO's state.
    if (splitInputs &&
        (shardOptimizerState || scatterGradients || shardParameters))
      return "ZeRO splits its state over the dp ranks";
    if (splitInputs)
      return "each dp rank holds it whole and sums its gradient over a "
             "share of the batch";
    return "its layout was fixed by --plan";
  }
  /// Sets the phase and the reason on a collective just built.
  void tag(Operation *collective, StringRef reason, bool megatron, int32_t id) {
    collective->setAttr(kPhaseAttr, builder.getStringAttr(phase));
    collective->setAttr(kCarriesAttr,
                        builder.getStringAttr(std::to_string(meshAxis) + ":" +
                                              std::to_string(viewRoot(id))));
    collective->setAttr(kOriginAttr, builder.getStringAttr(originOf(id)));
    collective->setAttr(kReasonAttr, builder.getStringAttr(reason));
    if (megatron)
      collective->setAttr(kMegatronAttr, builder.getUnitAttr());
  }
  IRMapping mapping;
  /// Conversions done (a partial value is reduced once for all its users),
  /// by key(value id, target layout); the converted values when rewriting.
  llvm::DenseSet<ConversionKey> countedConversions;
  llvm::DenseMap<ConversionKey, Value> converted;
  static ConversionKey key(int32_t id, Layout l) {
    assert(l.dim < 63 && l.blocks < (1 << 20) && "layout code overflow");
    uint64_t code = (static_cast<uint64_t>(l.kind) << 30) |
                    (static_cast<uint64_t>(l.combine) << 26) |
                    (static_cast<uint64_t>(l.dim + 1) << 20) |
                    static_cast<uint64_t>(l.blocks);
    return {(static_cast<uint64_t>(id) << 32) | code, l.granule};
  }
  std::string phase = "forward";
  /// The next gradient bucket's number (kBucketAttr).
  int64_t buckets = 0;
  /// forward: the loss depends on it; optimizer: it depends on optimizer
  /// state or the step, or only feeds new parameters; backward: the rest.
  llvm::DenseMap<Operation *, std::string> phaseOf;
  void classifyPhases();
  Location loc = UnknownLoc::get(func.getContext());

  int32_t idOf(Value v) const { return index.ids.lookup(v); }
  int32_t operandId(const OpEntry &e, unsigned i) const {
    return index.operands[e.firstOperand + i];
  }

  /// A value's layout; once a partial sum was reduced for one user, the
  /// reduced copy serves the others (who would otherwise carry the partial
  /// on and reduce it again).
  Layout layoutOf(int32_t id) const {
    Layout l = layouts[id];
    if (l.isPartial() &&
        countedConversions.count(key(id, Layout::replicated())))
      return Layout::replicated();
    if (l.isPartial())
      if (auto it = scattered.find(id); it != scattered.end())
        return it->second;
    return l;
  }
  /// Sequence parallelism: partial values reduce-scattered into a split,
  /// which their later users read (gathered where they need them whole).
  llvm::DenseMap<int32_t, Layout> scattered;
  /// Sequence parallelism: partial activation \p id goes to split \p to
  /// by one reduce-scatter (plain, even chunks; a view of a partial value
  /// is reduced through its source, as without).
  bool scattersPartial(int32_t id, Layout to) const {
    Layout from = layoutOf(id);
    return sequenceParallel && from.isPartial() &&
           from.combine == ReduceKind::sum && index.isFloat[id] &&
           !index.gradientOf.count(id) && to.isSplit() && to.blocks == 1 &&
           to.granule == 1 && !isPadded(id, to) && movedPartialSource(id) < 0 &&
           embeddedRegroup[id] < 0;
  }
  /// Sequence parallelism: the split value a split view \p id (a reshape
  /// or transpose) is made from, whose gathered whole serves every view of
  /// it (the backward reads a norm's output as [b * t, d] where the
  /// forward gathered it as [b, t, d]); -1 where there is none.
  int32_t gatheredViewSource(int32_t id) const {
    if (!sequenceParallel || !layoutOf(id).isSplit())
      return -1;
    Operation *def = index.values[id].getDefiningOp();
    if (!def || !movesOnlyOp(def))
      return -1;
    int32_t parent = idOf(def->getOperand(0));
    return layoutOf(parent).isSplit() ? parent : -1;
  }
  /// Whether split value \p id's whole is made already (its own gather, or
  /// a gather of the value it is a view of).
  bool gatheredAlready(int32_t id) const {
    if (!sequenceParallel)
      return false;
    for (; id >= 0; id = gatheredViewSource(id))
      if (countedConversions.count(key(id, Layout::replicated())))
        return true;
    return false;
  }
  static bool movesOnlyOp(Operation *def);
  /// Sequence parallelism splits the tokens, and at long sequences a
  /// weight is smaller than the tokens' activations: op by op, gathering
  /// the weight for a token-split product would look cheaper than
  /// gathering the activation, and the walk would turn tensor parallelism
  /// into data parallelism with every weight gathered each step (what the
  /// layout search rules out). A split weight (or its cast copy) is
  /// therefore gathered only where nothing else can be.
  double weightGatherPenalty(int32_t id) const {
    if (!sequenceParallel)
      return 0;
    Value v = index.values[id];
    while (Operation *def = v.getDefiningOp()) {
      if (def->getNumOperands() != 1 || def->getNumResults() != 1)
        return 0;
      v = def->getOperand(0);
    }
    return index.argIsParameter[cast<BlockArgument>(v).getArgNumber()] ? 1.0
                                                                       : 0;
  }
  /// Partial value \p id (\p local when rewriting) reduce-scattered into
  /// split \p to.
  Value scatterPartial(int32_t id, Layout to, bool counted, Value local);
  /// The type a partial sum of value \p id crosses the wire in under mixed
  /// precision (bf16 for a sum of bf16 products), null for its own.
  Type wireTypeOf(int32_t id, Layout from) const {
    return index.wireType && from.combine == ReduceKind::sum &&
                   typeOf(index.values[id]).getElementType().isF32() &&
                   index.sumOfHalfProducts[id]
               ? index.wireType
               : Type();
  }

  int64_t bytesOf(int32_t id) const { return index.bytes[id]; }
  /// Bytes of each rank's chunk of value \p id in layout \p l, padding
  /// included (computed, not built: dry runs run in parallel).
  int64_t localBytes(int32_t id, Layout l) const {
    if (!l.isSplit())
      return bytesOf(id);
    int64_t size = typeOf(index.values[id]).getDimSize(l.dim);
    return bytesOf(id) / size * l.blocks * l.chunk(size / l.blocks, tp);
  }
  /// What gathering value \p id split as \p l moves: every rank's chunk.
  int64_t gatheredBytes(int32_t id, Layout l) const {
    return localBytes(id, l) * tp;
  }

  RankedTensorType localType(RankedTensorType t, Layout l) const {
    if (!l.isSplit())
      return t;
    SmallVector<int64_t> shape(t.getShape());
    shape[l.dim] = l.blocks * l.chunk(shape[l.dim] / l.blocks, tp);
    return RankedTensorType::get(shape, t.getElementType());
  }
  /// Whether \p l splits \p t in chunks that end in padding (tp, or tp
  /// granules, do not divide a block).
  bool isPadded(RankedTensorType t, Layout l) const {
    if (!l.isSplit())
      return false;
    int64_t block = t.getDimSize(l.dim) / l.blocks;
    return l.chunk(block, tp) * tp != block;
  }
  bool isPadded(int32_t id, Layout l) const {
    return isPadded(typeOf(index.values[id]), l);
  }
  /// The padding of value \p id once converted to \p to.
  Pad padAfter(int32_t id, Layout to) const {
    if (layoutOf(id) == to)
      return pads[id];
    return convertedPads.lookup(key(id, to));
  }
  /// \p whole with each of the \p blocks blocks of dimension \p dim cut or
  /// padded with zeros (at its end) to the extent \p to has (a gathered
  /// padded value to the real one, or the reverse).
  Value resizeBlocks(Value whole, RankedTensorType to, int64_t dim,
                     int64_t blocks);
  /// \p local (value \p id in layout \p l) with \p fill in its padding.
  Value mask(Value local, int32_t id, Layout l, Pad fill);

  double collectiveCost(double wireBytes) const {
    return cost.alpha + cost.beta * wireBytes;
  }
  double allReduceCost(int64_t bytes) const {
    return collectiveCost(2.0 * (tp - 1) / tp * bytes);
  }
  double allGatherCost(int64_t bytes) const {
    return collectiveCost(1.0 * (tp - 1) / tp * bytes);
  }

  /// An all_to_all: each rank keeps 1/tp of its chunk and sends the rest.
  double allToAllCost(int64_t localBytes) const {
    return collectiveCost(1.0 * (tp - 1) / tp * localBytes);
  }
  /// Set while exchangeInstead's choice converts its operands: their
  /// splits move by all_to_all. Elsewhere a split goes to another split
  /// by a gather and a slice: priced op by op, an all_to_all is so cheap
  /// that the walk would take one wherever a split meets another and pay
  /// for the chains of them later (the backward of a row-split softmax).
  bool exchanging = false;
  /// Whether value \p id split as \p from reaches the split \p to by one
  /// all_to_all: two plain splits (one block, no granule, tp dividing both
  /// dimensions) of an op's result (a parameter's layout is the search's).
  bool movesByAllToAll(int32_t id, Layout from, Layout to) const {
    auto plain = [&](Layout l) {
      return l.isSplit() && l.blocks == 1 && l.granule == 1 && !isPadded(id, l);
    };
    return id >= static_cast<int32_t>(index.argParameter.size()) &&
           plain(from) && plain(to) && from.dim != to.dim;
  }

  /// \p l for value \p id, in the one form of the splits that put the
  /// same indices on each rank (Layout::canonical).
  Layout canonicalFor(int32_t id, Layout l) const {
    if (!l.isSplit() || l.granule == 1)
      return l;
    return l.canonical(typeOf(index.values[id]).getDimSize(l.dim), tp);
  }

  /// ZeRO 2: partial gradient \p id goes to split \p to by a reduce-scatter
  /// (plain, even chunks; anything else is reduced whole and sliced).
  bool scattersGradient(int32_t id, Layout to) const {
    Layout from = layoutOf(id);
    return scatterGradients && from.isPartial() &&
           from.combine == ReduceKind::sum && index.gradientOf.count(id) &&
           to.isSplit() && to.blocks == 1 && to.granule == 1 &&
           !isPadded(id, to);
  }

  /// Cost of bringing value \p id from its layout to \p to.
  double conversionCost(int32_t id, Layout to) const {
    // ZeRO 3: outside the update a parameter is used whole, gathered there
    // (its split is over the batch's axis: keeping it would mix the two).
    if (shardedParameter(id) && phase != "optimizer" && !to.isReplicated())
      return kInfinity;
    to = canonicalFor(id, to);
    Layout from = layoutOf(id);
    if (from == to)
      return 0;
    int64_t bytes = bytesOf(id);
    // Slicing a replicated value is local; a small charge keeps the choice
    // that needs no slicing on a tie.
    double slice = 1e-15 * bytes;
    // A replicated float joins a partial sum as its 1/tp share (local).
    if (to.isPartial())
      return from.isReplicated() && to.combine == ReduceKind::sum &&
                     index.isFloat[id]
                 ? slice
                 : kInfinity;
    // Sequence parallelism: half an all-reduce (its gather comes later,
    // where a user needs the value whole).
    if (scattersPartial(id, to))
      return allGatherCost(wireTypeOf(id, from) ? bytes / 2 : bytes);
    // ZeRO 2: a gradient goes to a shard by one reduce-scatter; to its
    // optimizer state's split by preference (a tie otherwise, as for
    // AdamW's g * g, may take another split and gather the state for it).
    if (scattersGradient(id, to) && from.isPartial()) {
      Layout home = stateLayout(typeOf(index.values[id]), Layout(),
                                index.gradientOf.lookup(id));
      return allGatherCost(bytes) + (to == home ? 0 : 2e-15 * bytes);
    }
    double toReplicated =
        from.isReplicated() ? 0
        : from.isSplit()
            ? (gatheredAlready(id) ? 0
                                   : allGatherCost(gatheredBytes(id, from)) +
                                         weightGatherPenalty(id))
            : allReduceCost(bytes);
    return to.isReplicated() ? toReplicated : toReplicated + slice;
  }

  /// Value \p id in layout \p to: the new value when rewriting, null in a
  /// dry run. Adds the communication to the result.
  Value convert(int32_t id, Layout to);
  /// ZeRO 3: value \p id is a parameter kept split, gathered anew for each
  /// use that needs it whole.
  bool regathers(int32_t id, Layout to) const {
    return to.isReplicated() && shardedParameter(id);
  }
  bool shardedParameter(int32_t id) const {
    return shardParameters &&
           id < static_cast<int32_t>(index.argIsParameter.size()) &&
           index.argIsParameter[id] && layouts[id].isSplit();
  }
  /// ZeRO 2: partial gradient \p id (\p local when rewriting) reduced to
  /// this rank's chunk in layout \p to, right after it is final.
  Value scatterGradient(int32_t id, Layout to, bool counted, Value local);
  /// Partial gradient \p id reduced (the local value when rewriting). The
  /// first one needed whole reduces, in one collective, every partial
  /// gradient defined by then (gradients are complete once the backward
  /// ends, and the optimizer reads them after): one latency per bucket, as
  /// data-parallel trainers bucket theirs.
  Value reduceGradients(int32_t id);
  /// Values with ids below this are defined (the op being visited is the
  /// first not to be).
  int32_t definedBelow = 0;
  /// Split value \p id as a partial sum: each rank's chunk in place, zeros
  /// elsewhere (local; null in a dry run).
  Value embed(int32_t id, Layout from);
  llvm::DenseMap<int32_t, Value> embedded;
  /// By value id: for a partial sum that descends from an embedded split,
  /// the split value; -1 otherwise.
  std::vector<int32_t> embedOrigin;
  /// For partial value \p id made by a reshape or transpose of partial
  /// value \p source (-1 if none): reduced, it is \p source reduced and
  /// moved, so one all-reduce serves every view of a value (dv read as
  /// [b, t, kv] and as [1, b * t, kv] by the two matmuls of its backward).
  int32_t movedPartialSource(int32_t id) const;
  /// By value id: for a reshape of an embedded split, that split value; -1
  /// otherwise. Reduced, it is the split value made whole (once, however
  /// many reshapes embed it) and reshaped.
  std::vector<int32_t> embeddedRegroup;
  /// Partial value \p id (\p local when rewriting) summed whole.
  Value reducePartial(int32_t id, Layout from, bool counted, Value local);
  /// Split value \p split made whole by an all-reduce of its embedding,
  /// once (cached as its replicated conversion), for its reshape \p view.
  Value reduceEmbedded(int32_t split, int32_t view);
  /// The value \p id is a reshape or transpose of (through any number of
  /// them), or \p id itself.
  int32_t viewRoot(int32_t id) const;
  /// Where value \p id was made: the location of the op whose split left
  /// it partial, else of the op that made it (or its view's root).
  std::string originOf(int32_t id) const;

  LogicalResult visit(const OpEntry &e);
  /// ShardingForm::Regroup (a reshape): the split moves to the result
  /// dimension that keeps it, else the value is gathered (or, a weight's
  /// product, embedded as a partial sum).
  LogicalResult visitRegroup(const OpEntry &e);
  /// ShardingForm::Join: joining along their split dimension values split
  /// so (dq, dk, dv into the fused gradient) gives the blocked split;
  /// fails (nothing emitted) otherwise.
  LogicalResult visitBlockJoin(const OpEntry &e, const ShardingRule &rule);
  /// ShardingForm::Window: a window taking whole blocks of its input's
  /// split dimension (q out of a fused qkv), or placing its input's whole
  /// blocks into zeros (padding included), takes or places whole local
  /// blocks; fails (nothing emitted) otherwise.
  LogicalResult visitBlockWindow(const OpEntry &e, const ShardingRule &rule);
  struct Candidates;
  LogicalResult visitWithRule(const OpEntry &e, const ShardingRule &rule);
  /// Expert parallelism's combine: for contraction \p e, whose cheapest
  /// layout \p best splits a reduced factor (its result partial, reduced
  /// later by an all-reduce), the kept factor whose split its operands
  /// reach by all_to_all (the others sliced locally) and whose result,
  /// gathered whole, costs less than that all-reduce; -1 if none.
  int exchangeInstead(const OpEntry &e, const ShardingRule &rule,
                      const Candidates &cands, int best, double bestCost) const;
  /// Whether an op reading partial value \p id cannot take it partial (no
  /// rule passes it on, or another operand is split), so that it will be
  /// reduced anyway and had better be reduced once for all its users.
  bool someUserNeedsWhole(int32_t id) const;
  /// For a split along a padded factor \p f: masks the operands a reduction
  /// over it reads, or records the padding of the results.
  void padOperandsAndResults(const OpEntry &e, const ShardingFactor &f,
                             ArrayRef<Layout> to, SmallVector<Value> &operands);
  /// Replicates every operand and runs the op whole (ops without a rule).
  LogicalResult visitReplicated(const OpEntry &e);
  /// Sets the results' layouts and, rewriting, clones the op on
  /// \p operands (converted) with local result types.
  void emit(const OpEntry &e, ArrayRef<Value> operands, ArrayRef<Layout> outs);
  /// convert() of every operand of \p e to its layout in \p to.
  SmallVector<Value> convertOperands(const OpEntry &e, ArrayRef<Layout> to);
};

} // namespace partitioning
} // namespace mlir::cleave

#endif // CLEAVE_LIB_SHARDING_PARTITIONER_H

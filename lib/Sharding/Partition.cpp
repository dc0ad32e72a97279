//===- Partition.cpp - Layout propagation and SPMD partitioning -*- C++ -*-===//
//
// One walk over the straight-line train step does both jobs: given the
// parameters' layouts it picks, op by op, the factor to split (from the op's
// ShardingRuleOpInterface) that needs the least communication for the
// operands' current layouts, and either only adds up the cost (the search's
// dry run) or also rebuilds the op on local shapes with the collectives that
// the chosen layouts need. Partial sums stay pending through linear ops, so
// two partial branches meeting in an add share one all-reduce.
//
//===----------------------------------------------------------------------===//

#include "Cleave/CleaveInterfaces.h"
#include "Cleave/CleaveOps.h"
#include "cleave/Autodiff/Autodiff.h"
#include "cleave/Lowering/EmitPlan.h"
#include "cleave/Lowering/PlanBuffers.h"
#include "cleave/Sharding/Sharding.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <limits>
#include <numeric>

using namespace mlir;
using namespace mlir::cleave;

std::string Layout::str() const {
  switch (kind) {
  case Kind::Replicated:
    return "R";
  case Kind::Split:
    return "S(" + std::to_string(dim) +
           (blocks > 1 ? "," + std::to_string(blocks) : std::string()) +
           (granule > 1 ? ";" + std::to_string(granule) : std::string()) + ")";
  case Kind::Partial:
    return ("P(" + stringifyReduceKind(combine) + ")").str();
  }
  return "?";
}

struct PartitionIndex::Impl {
  enum class Kind : uint8_t {
    Constant,
    Reshape,
    Slice,
    Concat,
    SliceScatter,
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
  /// Per result: the parameter whose layout it is kept in (new parameters,
  /// gradients, optimizer state; empty for the loss and buffers) and the
  /// phase its collectives belong to.
  std::vector<StringRef> resultParameter;
  std::vector<const char *> resultPhase;
  std::vector<uint8_t> resultIsGradient;
  /// Values the step returns as a parameter's gradient, by value id.
  llvm::DenseMap<int32_t, StringRef> gradientOf;

  explicit Impl(func::FuncOp func) {
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
      if (isa<ConstantOp>(op))
        e.kind = Kind::Constant;
      else if (isa<ReshapeOp>(op))
        e.kind = Kind::Reshape;
      else if (isa<SliceOp>(op))
        e.kind = Kind::Slice;
      else if (isa<ConcatOp>(op))
        e.kind = Kind::Concat;
      else if (isa<SliceScatterOp>(op))
        e.kind = Kind::SliceScatter;
      if (auto ruled = dyn_cast<ShardingRuleOpInterface>(op)) {
        ShardingRule rule;
        if (succeeded(ruled.getShardingRule(rule))) {
          e.rule = rules.size();
          rules.push_back(std::move(rule));
          if (e.kind == Kind::Replicated)
            e.kind = Kind::Ruled;
        }
      }
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
  }
};

PartitionIndex::PartitionIndex(func::FuncOp func)
    : impl(std::make_unique<Impl>(func)) {}
PartitionIndex::~PartitionIndex() = default;

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

std::string locationString(Location loc) {
  std::string s;
  llvm::raw_string_ostream os(s);
  loc.print(os);
  return s;
}

using Index = PartitionIndex::Impl;
using OpEntry = Index::OpEntry;

/// A dimension that tp does not divide is split in chunks of ceil(size / tp)
/// (Megatron pads its vocabulary the same way): the chunks of the last ranks
/// end in padding. What a padded value holds there: garbage, or a known
/// constant (parameters and optimizer state are kept zero-padded; masks make
/// a reduction's identity).
enum class Pad : uint8_t { Unknown, Zero, NegInf, PosInf };

/// The identity of \p combine, which a reduction over a padded dimension
/// needs in the padding.
Pad identityOf(ReduceKind combine) {
  return combine == ReduceKind::max   ? Pad::NegInf
         : combine == ReduceKind::min ? Pad::PosInf
                                      : Pad::Zero;
}

/// An op as a user reads it: the model's node name where the importer kept
/// one, with the cleave op.
std::string describe(Operation *op) {
  Location loc = op->getLoc();
  if (auto fused = dyn_cast<FusedLoc>(loc);
      fused && !fused.getLocations().empty())
    loc = fused.getLocations().front();
  std::string name;
  if (auto named = dyn_cast<NameLoc>(loc))
    name = "'" + named.getName().str() + "'";
  else if (auto file = dyn_cast<FileLineColLoc>(loc))
    name = (file.getFilename().str() + ":" + std::to_string(file.getLine()) +
            ":" + std::to_string(file.getColumn()));
  else
    name = locationString(loc);
  return name + " (" + op->getName().getStringRef().str() + ")";
}

/// Whether \p v is a parameter, seen through the ops that only move it
/// (the transposed weight of a backward matmul).
bool isParameterValue(Value v, const PartitionIndex::Impl &index) {
  while (Operation *def = v.getDefiningOp()) {
    if (!isa<ReshapeOp, TransposeOp, BroadcastOp, CastOp>(def))
      return false;
    v = def->getOperand(0);
  }
  auto arg = cast<BlockArgument>(v);
  return index.argIsParameter[arg.getArgNumber()];
}

/// Whether the value \p op reduces comes from a weight's product: looks
/// up through elementwise ops to the first matmul or gather on each path
/// (the vocab-parallel loss reduces the LM head's logits; a softmax over
/// scores reduces a product of two activations).
bool reducesWeightProduct(Operation *op, const PartitionIndex::Impl &index) {
  llvm::SmallPtrSet<Operation *, 16> seen;
  SmallVector<Operation *> work{op};
  while (!work.empty() && seen.size() < 64) {
    Operation *at = work.pop_back_val();
    if (!seen.insert(at).second)
      continue;
    if (auto mm = dyn_cast<MatmulOp>(at); mm && at != op) {
      if (isParameterValue(mm.getLhs(), index) ||
          isParameterValue(mm.getRhs(), index))
        return true;
      continue;
    }
    if (auto gather = dyn_cast<GatherOp>(at))
      if (isParameterValue(gather.getData(), index))
        return true;
    for (Value v : at->getOperands())
      if (Operation *def = v.getDefiningOp())
        work.push_back(def);
  }
  return false;
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
        partialFanOut(options.partialFanOut), builder(func.getContext()),
        index(index), layouts(index.values.size()),
        pads(index.values.size(), Pad::Unknown),
        splitSource(index.values.size(), -1), alternatives(alternatives),
        embedOrigin(index.values.size(), -1) {}

  FailureOr<PartitionResult> run(const ParameterLayouts &params);

private:
  func::FuncOp func;
  int64_t tp;
  const CostModel &cost;
  bool rewrite;
  bool embedProducts, partialFanOut;
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
    return "its layout was fixed by --plan";
  }
  /// Sets the phase and the reason on a collective just built.
  void tag(Operation *collective, StringRef reason, bool megatron) {
    collective->setAttr(kPhaseAttr, builder.getStringAttr(phase));
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
    return l;
  }

  int64_t bytesOf(int32_t id) const { return index.bytes[id]; }

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

  /// Cost of bringing value \p id from its layout to \p to.
  double conversionCost(int32_t id, Layout to) const {
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
    double toReplicated = from.isReplicated() ? 0
                          : from.isSplit()    ? allGatherCost(bytes)
                                              : allReduceCost(bytes);
    return to.isReplicated() ? toReplicated : toReplicated + slice;
  }

  /// Value \p id in layout \p to: the new value when rewriting, null in a
  /// dry run. Adds the communication to the result.
  Value convert(int32_t id, Layout to);
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

  LogicalResult visit(const OpEntry &e);
  LogicalResult visitReshape(const OpEntry &e);
  /// A slice taking whole blocks of a dimension split in blocks (q out of a
  /// fused qkv) stays local; fails (nothing emitted) otherwise.
  LogicalResult visitBlockSlice(const OpEntry &e);
  /// Concatenating along their split dimension values split so (dq, dk, dv
  /// into the fused gradient) gives the blocked split; fails otherwise.
  LogicalResult visitBlockConcat(const OpEntry &e);
  /// The adjoint of visitBlockSlice: placing whole blocks into zeros.
  LogicalResult visitBlockSliceScatter(const OpEntry &e);
  struct Candidates;
  LogicalResult visitWithRule(const OpEntry &e, const ShardingRule &rule);
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

Value Partitioner::convert(int32_t id, Layout to) {
  Layout from = layoutOf(id);
  Value v = index.values[id];
  Value local = rewrite ? mapping.lookupOrNull(v) : Value();
  if (from.isReplicated() && layouts[id] != from && rewrite)
    local = converted[key(id, Layout::replicated())]; // the reduced copy
  if (from == to)
    return local;
  ConversionKey k = key(id, to);
  if (rewrite)
    if (auto it = converted.find(k); it != converted.end())
      return it->second;
  bool counted = !countedConversions.insert(k).second;
  // A splat constant becomes a local splat; anything else is sliced.
  auto constant = v.getDefiningOp<ConstantOp>();
  auto dense = constant ? dyn_cast<DenseElementsAttr>(constant.getValue())
                        : DenseElementsAttr();
  if (dense && !dense.isSplat())
    dense = DenseElementsAttr();
  if (to.isSplit() && isPadded(id, to)) {
    // A splat keeps its value in the padding, a slice of the zero-padded
    // whole has zeros there.
    bool zero = !dense || (isa<FloatType>(dense.getElementType())
                               ? dense.getSplatValue<APFloat>().isZero()
                               : dense.getElementType().isIntOrIndex() &&
                                     dense.getSplatValue<APInt>().isZero());
    convertedPads[k] = zero ? Pad::Zero : Pad::Unknown;
  }
  if (!rewrite && counted)
    return Value();
  auto global = typeOf(v);
  SmallVector<int64_t> axes{0};
  if (to.isPartial()) {
    // Replicated to partial: every rank adds 1/tp of it (exact for tp a
    // power of two).
    Value out;
    if (rewrite) {
      SmallVector<int64_t> ones(global.getRank(), 1);
      auto scalarType = RankedTensorType::get(ones, global.getElementType());
      Value share = ConstantOp::create(
          builder, loc,
          DenseElementsAttr::get(
              scalarType,
              builder.getFloatAttr(global.getElementType(), 1.0 / tp)));
      out = MulOp::create(builder, loc, local, share);
      converted[k] = out;
    }
    return out;
  }
  // First to replicated.
  Value full = local;
  if (from.isSplit()) {
    if (!counted) {
      result.seconds += allGatherCost(bytesOf(id));
      if (splitSource[id] == id)
        result.gatheredParameters.push_back(id);
      else if (splitSource[id] >= 0)
        result.gatheredProducts.push_back(splitSource[id]);
    }
    if (rewrite) {
      // A padded split gathers the padded whole and drops the padding.
      auto gathered = typeOf(local);
      SmallVector<int64_t> shape(gathered.getShape());
      shape[from.dim] *= tp;
      full = AllGatherOp::create(
          builder, loc, RankedTensorType::get(shape, global.getElementType()),
          local, axes, from.dim, from.blocks);
      tag(full.getDefiningOp(), why, /*megatron=*/false);
      if (shape[from.dim] != global.getDimSize(from.dim))
        full = resizeBlocks(full, global, from.dim, from.blocks);
    }
  } else if (from.isPartial() && from.combine == ReduceKind::sum &&
             index.gradientOf.count(id)) {
    full = reduceGradients(id);
  } else if (from.isPartial()) {
    if (!counted) {
      result.seconds += allReduceCost(bytesOf(id));
      // An embedded split summed before anything shrank it to half is a
      // gather at more traffic: the same trade as one.
      if (int32_t origin = embedOrigin[id];
          origin >= 0 && 2 * bytesOf(id) > bytesOf(origin))
        result.gatheredProducts.push_back(splitSource[origin]);
    }
    if (rewrite) {
      full = AllReduceOp::create(builder, loc, from.combine, local, axes);
      auto [reason, megatron] = reduceReason(id);
      tag(full.getDefiningOp(), reason, megatron);
    }
  }
  if (!rewrite)
    return Value();
  Value out = full;
  if (to.isSplit()) {
    RankedTensorType part = localType(global, to);
    if (dense) {
      out = ConstantOp::create(
          builder, loc,
          DenseElementsAttr::get(part, dense.getSplatValue<Attribute>()));
    } else {
      if (isPadded(global, to)) {
        // Each block padded with zeros to tp chunks, then each rank's chunk.
        SmallVector<int64_t> shape(global.getShape());
        shape[to.dim] = part.getDimSize(to.dim) * tp;
        full = resizeBlocks(
            full, RankedTensorType::get(shape, global.getElementType()), to.dim,
            to.blocks);
      }
      out = ShardSliceOp::create(builder, loc, part, full, axes, to.dim,
                                 to.blocks);
    }
  }
  converted[k] = out;
  return out;
}

Value Partitioner::resizeBlocks(Value whole, RankedTensorType to, int64_t dim,
                                int64_t blocks) {
  auto from = typeOf(whole);
  Type elem = from.getElementType();
  int64_t have = from.getDimSize(dim) / blocks,
          want = to.getDimSize(dim) / blocks;
  // Blocks as a dimension of their own, so that one slice or concat
  // resizes all of them.
  SmallVector<int64_t> shape(from.getShape());
  shape[dim] = have;
  shape.insert(shape.begin() + dim, blocks);
  Value v = whole;
  if (blocks > 1)
    v = ReshapeOp::create(builder, loc, RankedTensorType::get(shape, elem), v);
  int64_t at = blocks > 1 ? dim + 1 : dim;
  if (blocks == 1)
    shape.erase(shape.begin() + dim);
  if (want < have) {
    shape[at] = want;
    v = SliceOp::create(builder, loc, RankedTensorType::get(shape, elem), v,
                        SmallVector<int64_t>(shape.size(), 0),
                        SmallVector<int64_t>(shape.size(), 1));
  } else {
    shape[at] = want - have;
    Value zeros = ConstantOp::create(
        builder, loc,
        DenseElementsAttr::get(RankedTensorType::get(shape, elem),
                               builder.getZeroAttr(elem)));
    shape[at] = want;
    v = ConcatOp::create(builder, loc, RankedTensorType::get(shape, elem),
                         ValueRange{v, zeros}, static_cast<uint64_t>(at));
  }
  if (blocks > 1)
    v = ReshapeOp::create(builder, loc, to, v);
  return v;
}

Value Partitioner::reduceGradients(int32_t id) {
  ConversionKey whole = key(id, Layout::replicated());
  if (rewrite)
    if (Value done = converted.lookup(whole))
      return done;
  SmallVector<int32_t> bucket{id};
  for (auto [g, name] : index.gradientOf)
    if (g != id && g < definedBelow && layouts[g].isPartial() &&
        layouts[g].combine == ReduceKind::sum &&
        !countedConversions.count(key(g, Layout::replicated())))
      bucket.push_back(g);
  llvm::sort(bucket.begin() + 1, bucket.end());
  int64_t bytes = 0;
  for (int32_t g : bucket) {
    bytes += bytesOf(g);
    countedConversions.insert(key(g, Layout::replicated()));
  }
  result.seconds += allReduceCost(bytes);
  if (!rewrite)
    return Value();
  SmallVector<int64_t> axes{0};
  if (bucket.size() == 1) {
    Value out = AllReduceOp::create(builder, loc, ReduceKind::sum,
                                    mapping.lookup(index.values[id]), axes);
    auto [reason, megatron] = reduceReason(id);
    tag(out.getDefiningOp(), reason, megatron);
    converted[whole] = out;
    return out;
  }
  // Flattened, concatenated, reduced once and cut apart again.
  Type elem = typeOf(index.values[id]).getElementType();
  SmallVector<Value> flat;
  SmallVector<int64_t> sizes;
  for (int32_t g : bucket) {
    auto type = typeOf(index.values[g]);
    sizes.push_back(type.getNumElements());
    flat.push_back(ReshapeOp::create(
        builder, loc, RankedTensorType::get({sizes.back()}, elem),
        mapping.lookup(index.values[g])));
  }
  int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t(0));
  auto allType = RankedTensorType::get({total}, elem);
  Value all = ConcatOp::create(builder, loc, allType, flat, uint64_t(0));
  all = AllReduceOp::create(builder, loc, ReduceKind::sum, all, axes);
  std::string others;
  for (int32_t g : ArrayRef<int32_t>(bucket).drop_front())
    others +=
        (others.empty() ? "'" : ", '") + index.gradientOf.lookup(g).str() + "'";
  tag(all.getDefiningOp(),
      "one bucket: the gradient of parameter '" +
          index.gradientOf.lookup(id).str() + "' and those of " + others +
          " are partial sums on every rank (their uses see the values whole "
          "but each rank's share of the results); for '" +
          index.gradientOf.lookup(id).str() + "', " +
          alternativeOf(index.gradientOf.lookup(id)),
      false);
  int64_t at = 0;
  for (auto [g, n] : llvm::zip(bucket, sizes)) {
    Value piece =
        SliceOp::create(builder, loc, RankedTensorType::get({n}, elem), all,
                        SmallVector<int64_t>{at}, SmallVector<int64_t>{1});
    converted[key(g, Layout::replicated())] =
        ReshapeOp::create(builder, loc, typeOf(index.values[g]), piece);
    at += n;
  }
  return converted[whole];
}

std::pair<std::string, bool> Partitioner::reduceReason(int32_t id) const {
  if (auto it = index.gradientOf.find(id); it != index.gradientOf.end())
    return {"the gradient of parameter '" + it->second.str() +
                "' is a partial sum on every rank (its uses see the value "
                "whole but each rank's share of the result); " +
                alternativeOf(it->second),
            false};
  Operation *source = partialFrom.lookup(id);
  if (!source)
    return {user + " needs a partial sum whole", false};
  // Megatron's reductions: a split contraction with a weight (row-parallel
  // forward, column-parallel input gradient), a split table or a reduction
  // over a split vocabulary. Two activations contracted over a split
  // dimension (scores over a head's dimensions) are not.
  auto matmul = dyn_cast<MatmulOp>(source);
  bool megatron = matmul ? isParameterValue(matmul.getLhs(), index) ||
                               isParameterValue(matmul.getRhs(), index)
                         : isa<GatherOp, ScatterAddOp>(source) ||
                               reducesWeightProduct(source, index);
  return {"sums the partial results of " + describe(source) +
              (matmul ? ", which contracts a split dimension" +
                            std::string(megatron ? " with a weight"
                                                 : " of two activations")
               : isa<ReshapeOp>(source)
                   ? ", which cannot keep its operand's split (each rank "
                     "gives its chunk, zeros elsewhere)"
                   : ", which reduces over a split dimension") +
              "; " + user + " needs them whole",
          megatron};
}

Value Partitioner::embed(int32_t id, Layout from) {
  if (!rewrite)
    return Value();
  if (Value done = embedded.lookup(id))
    return done;
  Value local = mapping.lookup(index.values[id]);
  auto global = typeOf(index.values[id]);
  auto part = typeOf(local);
  Type elem = global.getElementType();
  int64_t d = from.dim, chunk = part.getDimSize(d), rank = part.getRank();
  // Every rank's chunk position holds a copy of the local chunk ...
  SmallVector<int64_t> shape(part.getShape());
  shape.insert(shape.begin() + d, 1);
  Value v = ReshapeOp::create(builder, loc, RankedTensorType::get(shape, elem),
                              local);
  shape[d] = tp;
  v = BroadcastOp::create(builder, loc, RankedTensorType::get(shape, elem), v);
  v = ReshapeOp::create(builder, loc, global, v);
  // ... and a row of a [tp, size] constant, each rank taking its own, keeps
  // only the rank's own.
  int64_t size = global.getDimSize(d);
  SmallVector<bool> rows(tp * size, false);
  for (int64_t r = 0; r < tp; ++r)
    std::fill(rows.begin() + r * size + r * chunk,
              rows.begin() + r * size + (r + 1) * chunk, true);
  Type i1 = builder.getI1Type();
  Value all = ConstantOp::create(
      builder, loc,
      DenseElementsAttr::get(RankedTensorType::get({tp, size}, i1), rows));
  SmallVector<int64_t> axes{0};
  Value mine = ShardSliceOp::create(
      builder, loc, RankedTensorType::get({1, size}, i1), all, axes, 0, 1);
  SmallVector<int64_t> maskShape(rank, 1);
  maskShape[d] = size;
  mine = ReshapeOp::create(builder, loc, RankedTensorType::get(maskShape, i1),
                           mine);
  SmallVector<int64_t> ones(rank, 1);
  Value zero = ConstantOp::create(
      builder, loc,
      DenseElementsAttr::get(RankedTensorType::get(ones, elem),
                             builder.getZeroAttr(elem)));
  Value out = SelectOp::create(builder, loc, global, mine, v, zero);
  embedded[id] = out;
  return out;
}

Value Partitioner::mask(Value local, int32_t id, Layout l, Pad fill) {
  if (!rewrite)
    return Value(); // masks are local: the dry run has nothing to add
  auto [it, fresh] = masks.try_emplace({local, static_cast<int>(fill)});
  if (!fresh)
    return it->second;
  auto global = typeOf(index.values[id]);
  auto part = typeOf(local);
  Type elem = part.getElementType();
  int64_t d = l.dim, block = global.getDimSize(d) / l.blocks,
          chunk = part.getDimSize(d) / l.blocks;
  // Which of the padded whole's indices are real (the first of each
  // block's), as a constant every rank takes its chunk of.
  SmallVector<int64_t> shape(part.getRank(), 1);
  shape[d] = l.blocks * chunk * tp;
  SmallVector<bool> real(shape[d], false);
  for (int64_t b = 0; b < l.blocks; ++b)
    std::fill_n(real.begin() + b * chunk * tp, block, true);
  Type i1 = builder.getI1Type();
  Value all = ConstantOp::create(
      builder, loc,
      DenseElementsAttr::get(RankedTensorType::get(shape, i1), real));
  shape[d] = l.blocks * chunk;
  SmallVector<int64_t> axes{0};
  Value mine = ShardSliceOp::create(
      builder, loc, RankedTensorType::get(shape, i1), all, axes, d, l.blocks);
  Attribute value;
  bool negative = fill == Pad::NegInf;
  if (auto f = dyn_cast<FloatType>(elem))
    value = fill == Pad::Zero
                ? builder.getFloatAttr(f, 0.0)
                : builder.getFloatAttr(
                      f, APFloat::getInf(f.getFloatSemantics(), negative));
  else if (elem.isInteger(1))
    value = builder.getIntegerAttr(elem, fill == Pad::PosInf ? 1 : 0);
  else
    value = builder.getIntegerAttr(
        elem, fill == Pad::Zero ? APInt::getZero(elem.getIntOrFloatBitWidth())
              : negative
                  ? APInt::getSignedMinValue(elem.getIntOrFloatBitWidth())
                  : APInt::getSignedMaxValue(elem.getIntOrFloatBitWidth()));
  SmallVector<int64_t> ones(part.getRank(), 1);
  Value fillValue = ConstantOp::create(
      builder, loc,
      DenseElementsAttr::get(RankedTensorType::get(ones, elem), value));
  Value out = SelectOp::create(builder, loc, part, mine, local, fillValue);
  it->second = out;
  return out;
}

SmallVector<Value> Partitioner::convertOperands(const OpEntry &e,
                                                ArrayRef<Layout> to) {
  SmallVector<Value> operands;
  for (unsigned i = 0; i < e.numOperands; ++i)
    operands.push_back(convert(operandId(e, i), to[i]));
  return operands;
}

void Partitioner::emit(const OpEntry &e, ArrayRef<Value> operands,
                       ArrayRef<Layout> outs) {
  for (unsigned i = 0; i < e.numResults; ++i)
    layouts[e.firstResult + i] = outs[i];
  // A partial result of an embedded split keeps its origin, unless it
  // joins a partial sum of another kind, whose reduction it then shares.
  for (unsigned r = 0; r < e.numResults; ++r) {
    if (!outs[r].isPartial())
      continue;
    int32_t origin = -1;
    bool onlyEmbedded = true;
    for (unsigned i = 0; i < e.numOperands; ++i)
      if (layoutOf(operandId(e, i)).isPartial()) {
        origin = embedOrigin[operandId(e, i)];
        onlyEmbedded &= origin >= 0;
      }
    embedOrigin[e.firstResult + r] = onlyEmbedded ? origin : -1;
  }
  if (!rewrite)
    return;
  // A partial result carries on its partial operand's source, or is new.
  for (unsigned r = 0; r < e.numResults; ++r) {
    if (!outs[r].isPartial())
      continue;
    Operation *source = e.op;
    for (unsigned i = 0; i < e.numOperands; ++i)
      if (layoutOf(operandId(e, i)).isPartial())
        if (Operation *s = partialFrom.lookup(operandId(e, i)))
          source = s;
    partialFrom[e.firstResult + r] = source;
  }
  Operation *op = e.op;
  IRMapping local;
  for (auto [old, now] : llvm::zip(op->getOperands(), operands))
    local.map(old, now);
  Operation *copy = builder.clone(*op, local);
  // Ranks holding a slice of a gather's table (or of a scatter's result)
  // shift the indices into their range and skip the others.
  if (auto gather = dyn_cast<GatherOp>(op)) {
    Layout data = layoutOf(idOf(gather.getData()));
    if (data.isSplit() && data.dim == static_cast<int64_t>(gather.getAxis())) {
      copy->setAttr(kShardAxesAttr, builder.getDenseI64ArrayAttr({0}));
      copy->setAttr(kShardSizeAttr,
                    builder.getI64IntegerAttr(
                        typeOf(gather.getData()).getDimSize(data.dim)));
    }
  }
  if (auto scatter = dyn_cast<ScatterAddOp>(op))
    if (outs[0].isSplit() &&
        outs[0].dim == static_cast<int64_t>(scatter.getAxis())) {
      copy->setAttr(kShardAxesAttr, builder.getDenseI64ArrayAttr({0}));
      copy->setAttr(kShardSizeAttr,
                    builder.getI64IntegerAttr(
                        typeOf(scatter.getResult()).getDimSize(outs[0].dim)));
    }
  for (auto [i, r] : llvm::enumerate(copy->getResults())) {
    r.setType(localType(typeOf(op->getResult(i)), outs[i]));
    mapping.map(op->getResult(i), r);
  }
}

LogicalResult Partitioner::visitReplicated(const OpEntry &e) {
  if (rewrite)
    why = user + " has no sharding rule, so it runs whole on every rank";
  SmallVector<Layout, 4> to(e.numOperands, Layout::replicated());
  SmallVector<Layout, 2> outs(e.numResults, Layout::replicated());
  emit(e, convertOperands(e, to), outs);
  return success();
}

LogicalResult Partitioner::visitReshape(const OpEntry &e) {
  auto op = cast<ReshapeOp>(e.op);
  int32_t input = operandId(e, 0);
  Layout in = layoutOf(input);
  if (!in.isSplit()) {
    emit(e, {convert(input, in)}, {in});
    return success();
  }
  // Group dims with equal products. In the group's flattened index space a
  // split is O outer blocks, each cut in tp chunks (O = blocks times the
  // extents of the group's dims before the split one). It survives as a
  // split of the first output dim e of the group whose leading extents
  // divide O, with the rest of O as e's blocks.
  ArrayRef<int64_t> a = typeOf(op.getInput()).getShape();
  ArrayRef<int64_t> b = typeOf(op.getResult()).getShape();
  size_t i = 0, j = 0;
  std::optional<Layout> target;
  while (i < a.size() && j < b.size()) {
    size_t i0 = i, j0 = j;
    int64_t pa = a[i++], pb = b[j++];
    while (pa != pb) {
      if (pa < pb && i < a.size())
        pa *= a[i++];
      else if (pb < pa && j < b.size())
        pb *= b[j++];
      else
        break;
    }
    // Trailing size-1 dims belong to no group in particular.
    while (i < a.size() && a[i] == 1 && j < b.size() && b[j] == 1)
      ++i, ++j;
    if (in.dim < static_cast<int64_t>(i0) || in.dim >= static_cast<int64_t>(i))
      continue;
    // Flattened, each outer block holds `block` real rows of `innerIn`
    // indices and every rank a chunk of `chunk` rows, the padding (if any)
    // at the block's end. An output dim e with `innerOut` indices after it
    // in the group keeps the split where a rank's chunk and the block are
    // whole rows of e, and, padded, a granule is too: the padding then
    // stays at the end of e's blocks.
    int64_t outer = in.blocks, innerIn = 1;
    for (int64_t d = i0; d < in.dim; ++d)
      outer *= a[d];
    for (size_t d = in.dim + 1; d < i; ++d)
      innerIn *= a[d];
    int64_t block = a[in.dim] / in.blocks;
    int64_t chunk = in.chunk(block, tp) * innerIn;
    bool padded = chunk * tp != block * innerIn;
    block *= innerIn;
    int64_t granule = in.granule * innerIn;
    int64_t pre = 1;
    for (size_t d = j0; d < j; ++d) {
      if (outer % pre)
        break;
      int64_t innerOut = 1;
      for (size_t k = d + 1; k < j; ++k)
        innerOut *= b[k];
      int64_t blocks = outer / pre;
      if (chunk % innerOut == 0 && block % innerOut == 0 &&
          b[d] == blocks * (block / innerOut) &&
          (!padded || granule % innerOut == 0)) {
        target = Layout::split(static_cast<int64_t>(d), blocks,
                               padded ? granule / innerOut : 1);
        break;
      }
      pre *= b[d];
    }
    break;
  }
  if (target) {
    emit(e, {convert(input, in)}, {*target});
    pads[e.firstResult] = pads[input];
    splitSource[e.firstResult] = splitSource[input];
    return success();
  }
  // A parameter's split the reshape cannot keep (a head split by query
  // heads reshaped into [K/V heads, repeats]): each rank's chunk as a partial
  // sum, reduced where something needs it whole (often after the reduction
  // over the repeats shrinks it), rather than gathered.
  if (embedProducts && splitSource[input] >= 0 && in.blocks == 1 &&
      !isPadded(input, in) && index.isFloat[input]) {
    emit(e, {embed(input, in)}, {Layout::partial()});
    embedOrigin[e.firstResult] = input;
    return success();
  }
  if (rewrite) {
    llvm::raw_string_ostream os(why);
    why.clear();
    os << user << " reshapes [";
    llvm::interleaveComma(a, os);
    os << "] to [";
    llvm::interleaveComma(b, os);
    os << "]: the split of dimension " << in.dim
       << " has no dimension to stay on"
       << (isPadded(input, in) ? " (its padding would land inside a merged "
                                 "dimension)"
                               : "");
  }
  emit(e, {convert(input, Layout::replicated())}, {Layout::replicated()});
  return success();
}

LogicalResult Partitioner::visitBlockSlice(const OpEntry &e) {
  auto op = cast<SliceOp>(e.op);
  Layout in = layoutOf(operandId(e, 0));
  if (!in.isSplit())
    return failure();
  int64_t d = in.dim;
  ArrayRef<int64_t> a = typeOf(op.getInput()).getShape();
  ArrayRef<int64_t> b = typeOf(op.getResult()).getShape();
  for (size_t i = 0; i < a.size(); ++i)
    if (static_cast<int64_t>(i) != d &&
        (a[i] != b[i] || op.getStarts()[i] != 0 || op.getSteps()[i] != 1))
      return failure();
  int64_t block = a[d] / in.blocks, start = op.getStarts()[d];
  if (op.getSteps()[d] != 1 || start % block || b[d] % block || b[d] == a[d])
    return failure();
  // Padded blocks keep their padding: whole local blocks are taken.
  Layout out = Layout::split(d, b[d] / block, in.granule);
  layouts[e.firstResult] = out;
  pads[e.firstResult] = pads[operandId(e, 0)];
  splitSource[e.firstResult] = splitSource[operandId(e, 0)];
  if (!rewrite)
    return success();
  SmallVector<int64_t> starts(op.getStarts());
  starts[d] = start / block * in.chunk(block, tp);
  Value local = SliceOp::create(
      builder, op.getLoc(), localType(typeOf(op.getResult()), out),
      mapping.lookup(op.getInput()), starts, op.getSteps());
  mapping.map(op.getResult(), local);
  return success();
}

LogicalResult Partitioner::visitBlockSliceScatter(const OpEntry &e) {
  auto op = cast<SliceScatterOp>(e.op);
  Layout in = layoutOf(operandId(e, 0));
  if (!in.isSplit())
    return failure();
  int64_t d = in.dim;
  ArrayRef<int64_t> a = typeOf(op.getResult()).getShape();
  ArrayRef<int64_t> b = typeOf(op.getInput()).getShape();
  for (size_t i = 0; i < a.size(); ++i)
    if (static_cast<int64_t>(i) != d &&
        (a[i] != b[i] || op.getStarts()[i] != 0 || op.getSteps()[i] != 1))
      return failure();
  int64_t block = b[d] / in.blocks, start = op.getStarts()[d];
  if (op.getSteps()[d] != 1 || start % block || a[d] % block || a[d] == b[d])
    return failure();
  // The blocks around are zeros, padding included.
  Layout out = Layout::split(d, a[d] / block, in.granule);
  layouts[e.firstResult] = out;
  pads[e.firstResult] = pads[operandId(e, 0)];
  splitSource[e.firstResult] = splitSource[operandId(e, 0)];
  if (!rewrite)
    return success();
  SmallVector<int64_t> starts(op.getStarts());
  starts[d] = start / block * in.chunk(block, tp);
  Value local = SliceScatterOp::create(
      builder, op.getLoc(), localType(typeOf(op.getResult()), out),
      mapping.lookup(op.getInput()), starts, op.getSteps());
  mapping.map(op.getResult(), local);
  return success();
}

LogicalResult Partitioner::visitBlockConcat(const OpEntry &e) {
  auto op = cast<ConcatOp>(e.op);
  int64_t axis = op.getAxis(), blocks = 0, block = -1;
  SmallVector<Layout, 4> ins;
  bool zero = true;
  for (unsigned i = 0; i < e.numOperands; ++i) {
    Layout l = layoutOf(operandId(e, i));
    int64_t size = typeOf(op->getOperand(i)).getDimSize(axis);
    if (!l.isSplit() || l.dim != axis ||
        (block >= 0 &&
         (size / l.blocks != block || l.granule != ins[0].granule)))
      return failure();
    block = size / l.blocks;
    blocks += l.blocks;
    zero &= pads[operandId(e, i)] == Pad::Zero;
    ins.push_back(l);
  }
  carrySplitSource(e, ins);
  emit(e, convertOperands(e, ins),
       {Layout::split(axis, blocks, ins[0].granule)});
  pads[e.firstResult] = zero ? Pad::Zero : Pad::Unknown;
  return success();
}

/// The layouts visitWithRule chooses among for one op: everything
/// replicated, partial sums flowing through, or a split of one factor.
struct Partitioner::Candidates {
  enum : int { kReplicated = -2, kPartial = -1 };
  const Partitioner &p;
  const OpEntry &e;
  const ShardingRule &rule;
  int partialOperand = -1;

  /// How a factor is cut: the blocks of a fused projection and the granule
  /// of a head-aligned split carry over from an operand split so.
  struct Cut {
    int64_t blocks = 1, granule = 1;
  };
  Cut cutOf(const ShardingFactor &f) const {
    for (auto [i, d] : llvm::enumerate(f.operandDims)) {
      Layout l = p.layoutOf(p.operandId(e, i));
      if (d >= 0 && l.isSplit() && l.dim == d) {
        if (f.size % l.blocks || (f.size / l.blocks) % l.granule)
          return {};
        return {l.blocks, l.granule};
      }
    }
    return {};
  }
  /// Whether the split of \p f cut so pads the ranks' chunks.
  bool padded(const ShardingFactor &f, Cut cut) const {
    int64_t block = f.size / cut.blocks;
    return Layout::split(0, cut.blocks, cut.granule).chunk(block, p.tp) *
               p.tp !=
           block;
  }
  Layout operandLayout(int c, Cut cut, unsigned i) const {
    if (c == kReplicated)
      return Layout::replicated();
    if (c == kPartial)
      return rule.additive || static_cast<int>(i) == partialOperand
                 ? Layout::partial()
                 : Layout::replicated();
    int64_t d = rule.factors[c].operandDims[i];
    return d >= 0 ? Layout::split(d, cut.blocks, cut.granule)
                  : Layout::replicated();
  }
  double cost(int c, Cut cut) const {
    double sum = 0;
    for (unsigned i = 0; i < e.numOperands; ++i)
      sum += p.conversionCost(p.operandId(e, i), operandLayout(c, cut, i));
    return sum;
  }
  bool splittable(const ShardingFactor &f) const {
    return f.kind != ShardingFactor::Kind::Whole && f.size >= p.tp;
  }
  std::string str(int c, Cut cut) const {
    if (c == kReplicated)
      return "every operand whole";
    if (c == kPartial)
      return "partial sums passed through";
    const ShardingFactor &f = rule.factors[c];
    std::string s =
        f.kind == ShardingFactor::Kind::Reduction
            ? "a split of its reduced dimension"
            : "a split of result dimension " +
                  std::to_string(f.resultDims.empty() ? -1
                                                      : f.resultDims.front());
    s += " (size " + std::to_string(f.size) + ")";
    if (cut.blocks > 1)
      s += " in " + std::to_string(cut.blocks) + " blocks";
    if (cut.granule > 1)
      s += " by " + std::to_string(cut.granule) + "-wide heads";
    return s;
  }
  /// Why operand \p i, split now, is gathered for the choice \p best.
  std::string gatherReason(unsigned i, int best, Cut bestCut,
                           double bestCost) const;
};

std::string Partitioner::Candidates::gatherReason(unsigned i, int best,
                                                  Cut bestCut,
                                                  double bestCost) const {
  Layout have = p.layoutOf(p.operandId(e, i));
  int keep = kReplicated;
  Cut keepCut;
  double keepCost = kInfinity;
  for (auto [c, f] : llvm::enumerate(rule.factors)) {
    if (!splittable(f))
      continue;
    Cut cut = cutOf(f);
    if (operandLayout(c, cut, i) != have)
      continue;
    if (double t = cost(c, cut); t < keepCost)
      keep = c, keepCut = cut, keepCost = t;
  }
  std::string s;
  llvm::raw_string_ostream os(s);
  os << p.user << " takes operand #" << i << " whole: its cheapest layout, "
     << str(best, bestCut) << ", costs " << llvm::format("%.1f", bestCost * 1e6)
     << " us here";
  if (keepCost == kInfinity)
    os << "; none of its layouts keeps the operand " << have.str();
  else
    os << "; keeping the operand " << have.str() << ", " << str(keep, keepCut)
       << ", would cost " << llvm::format("%.1f", keepCost * 1e6) << " us";
  return s;
}

LogicalResult Partitioner::visitWithRule(const OpEntry &e,
                                         const ShardingRule &rule) {
  unsigned numOperands = e.numOperands;
  // Costed without being built: the dry runs of the search visit every op
  // many times. Cheapest wins, the earlier on a tie.
  // A partial value with several users is reduced once, before it fans
  // out: each user keeping it partial would need its own reduction later
  // (the LayerNorm backward reads its incoming gradient three times).
  Candidates cands{*this, e, rule};
  int numPartial = 0;
  bool fansOut = false;
  for (unsigned i = 0; i < numOperands; ++i) {
    int32_t id = operandId(e, i);
    Layout l = layoutOf(id);
    if (l.isPartial() && l.combine == ReduceKind::sum) {
      cands.partialOperand = i;
      ++numPartial;
      fansOut |= !index.oneUse[id];
    }
  }
  // A partial sum passed on is reduced later at its new size, so a
  // contraction or scatter that would make it bigger (a scatter into a
  // table, a weight gradient from a small input gradient) takes it reduced
  // (a broadcast into an elementwise op usually joins a partial of the
  // same size). A gradient that fans out (into the optimizer's moments) is
  // reduced before, for all of them.
  bool grows = false;
  if (isa<MatmulOp, ScatterAddOp>(e.op) && cands.partialOperand >= 0)
    for (unsigned r = 0; r < e.numResults; ++r)
      grows |= bytesOf(e.firstResult + r) >
               bytesOf(operandId(e, cands.partialOperand));
  bool fanOutAllowed = partialFanOut;
  for (unsigned i = 0; i < numOperands && fanOutAllowed; ++i) {
    int32_t id = operandId(e, i);
    if (layoutOf(id).isPartial() && !index.oneUse[id])
      fanOutAllowed = !index.gradientOf.count(id) && !someUserNeedsWhole(id);
  }
  bool partialCandidate =
      numPartial > 0 && !grows && (!fansOut || fanOutAllowed) &&
      (rule.additive ||
       (numPartial == 1 && rule.scalingOperands[cands.partialOperand]));
  using Cut = Candidates::Cut;
  int best = Candidates::kReplicated;
  Cut bestCut;
  double bestCost = cands.cost(best, bestCut);
  if (partialCandidate) {
    double c = cands.cost(Candidates::kPartial, Cut());
    if (c < bestCost)
      best = Candidates::kPartial, bestCost = c;
  }
  for (auto [c, f] : llvm::enumerate(rule.factors)) {
    if (!cands.splittable(f))
      continue;
    Cut cut = cands.cutOf(f);
    double cost = cands.cost(c, cut);
    if (cost < bestCost)
      best = c, bestCut = cut, bestCost = cost;
  }
  if (bestCost == kInfinity)
    return e.op->emitOpError("has no layout its operands can reach");
  SmallVector<Layout, 4> to;
  for (unsigned i = 0; i < numOperands; ++i)
    to.push_back(cands.operandLayout(best, bestCut, i));
  SmallVector<Layout, 2> outs;
  for (unsigned r = 0; r < e.numResults; ++r) {
    if (best == Candidates::kReplicated) {
      outs.push_back(Layout::replicated());
      continue;
    }
    if (best == Candidates::kPartial) {
      outs.push_back(Layout::partial());
      continue;
    }
    const ShardingFactor &f = rule.factors[best];
    int64_t d = f.resultDims[r];
    outs.push_back(d >= 0 ? Layout::split(d, bestCut.blocks, bestCut.granule)
                   : f.kind == ShardingFactor::Kind::Reduction
                       ? Layout::partial(f.combine)
                       : Layout::replicated());
  }
  SmallVector<Value> operands;
  for (unsigned i = 0; i < numOperands; ++i) {
    int32_t id = operandId(e, i);
    if (rewrite && layoutOf(id).isSplit() && layoutOf(id) != to[i])
      why = cands.gatherReason(i, best, bestCut, bestCost);
    operands.push_back(convert(id, to[i]));
  }
  if (best >= 0 && cands.padded(rule.factors[best], bestCut))
    padOperandsAndResults(e, rule.factors[best], to, operands);
  carrySplitSource(e, to);
  emit(e, operands, outs);
  return success();
}

bool Partitioner::someUserNeedsWhole(int32_t id) const {
  for (uint32_t u = index.userStart[id]; u < index.userStart[id + 1]; ++u) {
    auto [k, operand] = index.users[u];
    const OpEntry &user = index.ops[k];
    if (user.kind == Index::Kind::Reshape)
      continue;
    if (user.rule < 0)
      return true;
    const ShardingRule &rule = index.rules[user.rule];
    if (rule.additive)
      continue;
    if (!rule.scalingOperands[operand])
      return true;
    for (unsigned j = 0; j < user.numOperands; ++j) {
      int32_t other = operandId(user, j);
      if (j != operand && other < definedBelow && layoutOf(other).isSplit())
        return true;
    }
  }
  return false;
}

void Partitioner::carrySplitSource(const OpEntry &e, ArrayRef<Layout> to) {
  int32_t source = -1;
  for (unsigned i = 0; i < e.numOperands && source < 0; ++i) {
    int32_t id = operandId(e, i);
    if (to[i].isSplit() && layoutOf(id) == to[i])
      source = splitSource[id];
  }
  for (unsigned r = 0; r < e.numResults; ++r)
    splitSource[e.firstResult + r] = source;
}

void Partitioner::padOperandsAndResults(const OpEntry &e,
                                        const ShardingFactor &f,
                                        ArrayRef<Layout> to,
                                        SmallVector<Value> &operands) {
  // A reduction over the padded factor must see its identity there; a
  // gather never reads the rows past the table's size.
  bool reduces = f.kind == ShardingFactor::Kind::Reduction;
  if (reduces && !isa<GatherOp>(e.op)) {
    Pad want = identityOf(f.combine);
    for (unsigned i = 0; i < e.numOperands; ++i) {
      int32_t id = operandId(e, i);
      if (f.operandDims[i] >= 0 && padAfter(id, to[i]) != want)
        operands[i] = mask(operands[i], id, to[i], want);
    }
    return;
  }
  // What the results hold in the padding, where it is known: zeros
  // scattered nowhere, products and sums of zeros, moved zeros.
  auto carried = [&](unsigned i) { return f.operandDims[i] >= 0; };
  auto zero = [&](unsigned i) {
    return padAfter(operandId(e, i), to[i]) == Pad::Zero;
  };
  bool anyZero = false, allZero = true, allCarry = true;
  for (unsigned i = 0; i < e.numOperands; ++i) {
    if (!carried(i)) {
      allCarry = false;
      continue;
    }
    anyZero |= zero(i);
    allZero &= zero(i);
  }
  Pad out = Pad::Unknown;
  if (isa<ScatterAddOp>(e.op) || (isa<MatmulOp, MulOp>(e.op) && anyZero) ||
      (isa<AddOp, SubOp, ConcatOp>(e.op) && allCarry && allZero) ||
      (isa<TransposeOp, NegOp, SliceOp>(e.op) && allZero))
    out = Pad::Zero;
  for (unsigned r = 0; r < e.numResults; ++r)
    if (f.resultDims[r] >= 0)
      pads[e.firstResult + r] = out;
}

LogicalResult Partitioner::visit(const OpEntry &e) {
  definedBelow = static_cast<int32_t>(e.firstResult);
  if (rewrite) {
    loc = e.op->getLoc();
    phase = phaseOf.lookup(e.op);
    user = describe(e.op);
    why = user + " needs it whole";
  }
  using Kind = Index::Kind;
  switch (e.kind) {
  case Kind::Constant:
    emit(e, {}, {Layout::replicated()});
    return success();
  case Kind::Reshape:
    return visitReshape(e);
  case Kind::Slice:
    if (succeeded(visitBlockSlice(e)))
      return success();
    break;
  case Kind::Concat:
    if (succeeded(visitBlockConcat(e)))
      return success();
    break;
  case Kind::SliceScatter:
    if (succeeded(visitBlockSliceScatter(e)))
      return success();
    break;
  case Kind::Ruled:
  case Kind::Replicated:
    break;
  }
  if (e.rule >= 0)
    return visitWithRule(e, index.rules[e.rule]);
  return visitReplicated(e);
}

FailureOr<PartitionResult> Partitioner::run(const ParameterLayouts &params) {
  Block &body = func.getBody().front();
  if (rewrite)
    classifyPhases();
  auto layoutOfParameter = [&](StringRef name) {
    auto it = params.find(name);
    return it == params.end() ? Layout::replicated() : it->second;
  };
  // Argument layouts: parameters and their optimizer state as chosen, the
  // rest (data, buffers, step) replicated. Parameters, their gradients and
  // their optimizer state count towards the per-rank memory.
  SmallVector<Layout> argLayouts;
  for (BlockArgument arg : func.getArguments()) {
    unsigned i = arg.getArgNumber();
    StringRef param = index.argParameter[i];
    Layout l = param.empty() ? Layout() : layoutOfParameter(param);
    if (l.isSplit()) {
      int64_t size = typeOf(arg).getDimSize(l.dim);
      if (size < tp || size % l.blocks || (size / l.blocks) % l.granule ||
          l != l.canonical(size, tp))
        return func.emitError("parameter ")
               << func.getArgAttr(i, kParameterAttr) << " of type "
               << arg.getType() << ": dimension " << l.dim << " of size "
               << size << " cannot be split "
               << (l.blocks > 1 ? "in " + std::to_string(l.blocks) + " blocks "
                                : std::string())
               << (l.granule > 1
                       ? "by granules of " + std::to_string(l.granule) + " "
                       : std::string())
               << "over tp = " << tp;
    }
    layouts[i] = l;
    if (l.isSplit() && index.argIsParameter[i])
      splitSource[i] = static_cast<int32_t>(i);
    // The runtime loads parameters and optimizer state zero-padded.
    pads[i] = Pad::Zero;
    argLayouts.push_back(l);
    // (Counted without building types: dry runs run in parallel.)
    if (!param.empty()) {
      int64_t bytes = index.bytes[i];
      if (l.isSplit()) {
        int64_t size = typeOf(arg).getDimSize(l.dim);
        bytes = bytes / size * (l.blocks * l.chunk(size / l.blocks, tp));
      }
      result.memoryBytes += bytes * (index.argIsParameter[i] ? 2 : 1);
    }
  }

  Block *newBody = nullptr;
  if (rewrite) {
    newBody = new Block();
    for (BlockArgument arg : func.getArguments())
      mapping.map(arg,
                  newBody->addArgument(
                      localType(typeOf(arg), argLayouts[arg.getArgNumber()]),
                      arg.getLoc()));
    builder.setInsertionPointToEnd(newBody);
  }
  for (const OpEntry &e : index.ops)
    if (failed(visit(e))) {
      delete newBody;
      return failure();
    }

  definedBelow = static_cast<int32_t>(index.values.size());
  // Results in the layouts the trainer keeps: the loss replicated; new
  // parameters, gradients and optimizer state as their parameter.
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  loc = ret.getLoc();
  SmallVector<Value> results;
  SmallVector<Layout> resultLayouts;
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    StringRef param = index.resultParameter[i];
    Layout want = param.empty() ? Layout() : layoutOfParameter(param);
    phase = index.resultPhase[i];
    int32_t id = idOf(v);
    if (rewrite) {
      user = "the step's result #" + std::to_string(i);
      why = param.empty()
                ? user + " is returned whole"
                : user + " is kept like parameter '" + param.str() + "' (" +
                      want.str() + "); " + alternativeOf(param);
    }
    Value out = convert(id, want);
    // State carried into the next step stays zero-padded (gradients are
    // only read back trimmed).
    if (isPadded(id, want) && padAfter(id, want) != Pad::Zero &&
        !index.resultIsGradient[i])
      out = mask(out, id, want, Pad::Zero);
    results.push_back(out);
    resultLayouts.push_back(want);
  }
  if (!rewrite)
    return result;

  func::ReturnOp::create(builder, ret.getLoc(), results);
  body.dropAllDefinedValueUses();
  body.dropAllReferences();
  func.getBody().push_back(newBody);
  body.erase();
  func.setType(FunctionType::get(func.getContext(), newBody->getArgumentTypes(),
                                 ValueRange(results).getTypes()));
  Builder b(func.getContext());
  for (auto [i, l] : llvm::enumerate(argLayouts))
    if (l.isSplit()) {
      func.setArgAttr(i, kSplitDimAttr, b.getI64IntegerAttr(l.dim));
      if (l.blocks > 1)
        func.setArgAttr(i, kSplitBlocksAttr, b.getI64IntegerAttr(l.blocks));
      if (l.granule > 1)
        func.setArgAttr(i, kSplitGranuleAttr, b.getI64IntegerAttr(l.granule));
    }
  for (auto [i, l] : llvm::enumerate(resultLayouts))
    if (l.isSplit()) {
      func.setResultAttr(i, kSplitDimAttr, b.getI64IntegerAttr(l.dim));
      if (l.blocks > 1)
        func.setResultAttr(i, kSplitBlocksAttr, b.getI64IntegerAttr(l.blocks));
      if (l.granule > 1)
        func.setResultAttr(i, kSplitGranuleAttr,
                           b.getI64IntegerAttr(l.granule));
    }
  return result;
}

void Partitioner::classifyPhases() {
  Block &body = func.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  llvm::DenseSet<Operation *> forward, optimizer, feedsGradient;
  SmallVector<Operation *> work;
  auto markBackwards = [&](Value root, llvm::DenseSet<Operation *> &set) {
    if (Operation *d = root.getDefiningOp())
      work.push_back(d);
    while (!work.empty()) {
      Operation *op = work.pop_back_val();
      if (!set.insert(op).second)
        continue;
      for (Value v : op->getOperands())
        if (Operation *d = v.getDefiningOp())
          work.push_back(d);
    }
  };
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    if (func.getResultAttr(i, kLossAttr))
      markBackwards(v, forward);
    else if (func.getResultAttr(i, kGradientAttr) ||
             func.getResultAttr(i, kBufferAttr))
      markBackwards(v, feedsGradient);
  }
  for (Operation &op : body.without_terminator()) {
    bool fromState = llvm::any_of(op.getOperands(), [&](Value v) {
      if (auto arg = dyn_cast<BlockArgument>(v))
        return func.getArgAttr(arg.getArgNumber(), kOptimizerStateAttr) ||
               func.getArgAttr(arg.getArgNumber(), kStepAttr);
      return optimizer.contains(v.getDefiningOp());
    });
    if (forward.contains(&op))
      phaseOf[&op] = "forward";
    else if (fromState || !feedsGradient.contains(&op)) {
      optimizer.insert(&op);
      phaseOf[&op] = "optimizer";
    } else {
      phaseOf[&op] = "backward";
    }
  }
}

} // namespace

FailureOr<PartitionResult> mlir::cleave::partition(
    func::FuncOp func, int64_t tp, const ParameterLayouts &layouts,
    const CostModel &cost, bool rewrite, const PartitionIndex *index,
    const LayoutAlternatives *alternatives, PartitionOptions options) {
  std::optional<PartitionIndex> own;
  if (!index)
    index = &own.emplace(func);
  Partitioner p(func, tp, cost, rewrite, *index->impl, alternatives, options);
  return p.run(layouts);
}

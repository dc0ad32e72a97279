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
#include "llvm/Support/raw_ostream.h"

#include <limits>

using namespace mlir;
using namespace mlir::cleave;

std::string Layout::str() const {
  switch (kind) {
  case Kind::Replicated:
    return "R";
  case Kind::Split:
    return "S(" + std::to_string(dim) +
           (blocks > 1 ? "," + std::to_string(blocks) : std::string()) + ")";
  case Kind::Partial:
    return ("P(" + stringifyReduceKind(combine) + ")").str();
  }
  return "?";
}

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

std::string locationString(Location loc) {
  std::string s;
  llvm::raw_string_ostream os(s);
  loc.print(os);
  return s;
}

class Partitioner {
public:
  Partitioner(func::FuncOp func, int64_t tp, const CostModel &cost,
              bool rewrite, ShardingRuleCache *rules)
      : func(func), tp(tp), cost(cost), rewrite(rewrite),
        builder(func.getContext()), rules(rules) {}

  FailureOr<PartitionResult> run(const ParameterLayouts &params);

private:
  func::FuncOp func;
  int64_t tp;
  const CostModel &cost;
  bool rewrite;
  OpBuilder builder;
  ShardingRuleCache *rules;
  PartitionResult result;
  llvm::DenseMap<Value, Layout> layouts;
  IRMapping mapping;
  /// Converted values, so one partial value is reduced once for all uses.
  /// Keys are (value, layout code); see code().
  using Key = std::pair<void *, int64_t>;
  llvm::DenseMap<Key, Value> converted;
  llvm::DenseSet<Key> countedConversions;
  static int64_t code(Layout l) {
    return (static_cast<int64_t>(l.kind) << 40) ^
           (static_cast<int64_t>(l.combine) << 36) ^ ((l.dim + 1) << 20) ^
           l.blocks;
  }
  std::string phase = "forward";
  /// forward: the loss depends on it; optimizer: it depends on optimizer
  /// state or the step, or only feeds new parameters; backward: the rest.
  llvm::DenseMap<Operation *, std::string> phaseOf;
  void classifyPhases();
  Location loc = UnknownLoc::get(func.getContext());

  /// A value's layout; once a partial sum was reduced for one user, the
  /// reduced copy serves the others (who would otherwise carry the partial
  /// on and reduce it again).
  Layout layoutOf(Value v) const {
    Layout l = layouts.lookup(v);
    if (l.isPartial() && countedConversions.count({v.getAsOpaquePointer(),
                                                   code(Layout::replicated())}))
      return Layout::replicated();
    return l;
  }

  int64_t bytesOf(Value v) const { return storageBytes(v.getType()); }

  RankedTensorType localType(RankedTensorType t, Layout l) const {
    if (!l.isSplit())
      return t;
    SmallVector<int64_t> shape(t.getShape());
    shape[l.dim] /= tp;
    return RankedTensorType::get(shape, t.getElementType());
  }

  double collectiveCost(double wireBytes) const {
    return cost.alpha + cost.beta * wireBytes;
  }
  double allReduceCost(int64_t bytes) const {
    return collectiveCost(2.0 * (tp - 1) / tp * bytes);
  }
  double allGatherCost(int64_t bytes) const {
    return collectiveCost(1.0 * (tp - 1) / tp * bytes);
  }

  /// Cost of bringing \p v from its layout to \p to.
  double conversionCost(Value v, Layout to) const {
    Layout from = layoutOf(v);
    if (from == to)
      return 0;
    int64_t bytes = bytesOf(v);
    // Slicing a replicated value is local; a small charge keeps the choice
    // that needs no slicing on a tie.
    double slice = 1e-15 * bytes;
    // A replicated float joins a partial sum as its 1/tp share (local).
    if (to.isPartial())
      return from.isReplicated() && to.combine == ReduceKind::sum &&
                     isa<FloatType>(typeOf(v).getElementType())
                 ? slice
                 : kInfinity;
    double toReplicated = from.isReplicated() ? 0
                          : from.isSplit()    ? allGatherCost(bytes)
                                              : allReduceCost(bytes);
    return to.isReplicated() ? toReplicated : toReplicated + slice;
  }

  void record(StringRef kind, Value v) {
    if (!rewrite)
      return; // the dry run only adds up the cost
    Collective c;
    c.kind = kind.str();
    c.phase = phase;
    c.bytes = bytesOf(v);
    c.source = locationString(loc);
    result.collectives.push_back(c);
  }

  /// \p v (an original value) in layout \p to: the new value when
  /// rewriting, null in a dry run. Adds the communication to the result.
  Value convert(Value v, Layout to) {
    Layout from = layoutOf(v);
    Value local = rewrite ? mapping.lookupOrNull(v) : Value();
    Key replicatedKey{v.getAsOpaquePointer(), code(Layout::replicated())};
    if (from.isReplicated() && layouts.lookup(v) != from && rewrite)
      local = converted[replicatedKey]; // the replicated copy
    if (from == to)
      return local;
    Key key{v.getAsOpaquePointer(), code(to)};
    if (auto it = converted.find(key); it != converted.end())
      return it->second;
    bool counted = !countedConversions.insert(key).second;
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
        converted[key] = out;
      }
      return out;
    }
    // First to replicated.
    Value full = local;
    if (from.isSplit()) {
      if (!counted) {
        result.seconds += allGatherCost(bytesOf(v));
        record("all_gather", v);
      }
      if (rewrite) {
        full = AllGatherOp::create(builder, loc, global, local, axes, from.dim,
                                   from.blocks);
        full.getDefiningOp()->setAttr(kPhaseAttr, builder.getStringAttr(phase));
      }
    } else if (from.isPartial()) {
      if (!counted) {
        result.seconds += allReduceCost(bytesOf(v));
        record("all_reduce", v);
      }
      if (rewrite) {
        full = AllReduceOp::create(builder, loc, from.combine, local, axes);
        full.getDefiningOp()->setAttr(kPhaseAttr, builder.getStringAttr(phase));
      }
    }
    Value out = full;
    if (to.isSplit() && rewrite) {
      auto splat = v.getDefiningOp<ConstantOp>();
      auto dense = splat ? dyn_cast<DenseElementsAttr>(splat.getValue())
                         : DenseElementsAttr();
      if (dense && dense.isSplat())
        out = ConstantOp::create(
            builder, loc,
            DenseElementsAttr::get(localType(global, to),
                                   dense.getSplatValue<Attribute>()));
      else
        out = ShardSliceOp::create(builder, loc, localType(global, to), full,
                                   axes, to.dim, to.blocks);
    }
    if (rewrite)
      converted[key] = out;
    return out;
  }

  LogicalResult visit(Operation *op);
  LogicalResult visitReshape(ReshapeOp op);
  /// A slice taking whole blocks of a dimension split in blocks (q out of a
  /// fused qkv) stays local; fails (nothing emitted) otherwise.
  LogicalResult visitBlockSlice(SliceOp op);
  /// Concatenating along their split dimension values split so (dq, dk, dv
  /// into the fused gradient) gives the blocked split; fails otherwise.
  LogicalResult visitBlockConcat(ConcatOp op);
  /// The adjoint of visitBlockSlice: placing whole blocks into zeros.
  LogicalResult visitBlockSliceScatter(SliceScatterOp op);
  LogicalResult visitWithRule(Operation *op, const ShardingRule &rule);
  /// Replicates every operand and runs \p op whole (ops without a rule).
  LogicalResult visitReplicated(Operation *op);
  /// Clones \p op on converted operands with results in \p outs.
  void emit(Operation *op, ArrayRef<Value> operands, ArrayRef<Layout> outs);
};

void Partitioner::emit(Operation *op, ArrayRef<Value> operands,
                       ArrayRef<Layout> outs) {
  for (auto [r, l] : llvm::zip(op->getResults(), outs))
    layouts[r] = l;
  if (!rewrite)
    return;
  IRMapping local;
  for (auto [old, now] : llvm::zip(op->getOperands(), operands))
    local.map(old, now);
  Operation *copy = builder.clone(*op, local);
  // Ranks holding a slice of a gather's table (or of a scatter's result)
  // shift the indices into their range and skip the others.
  if (auto gather = dyn_cast<GatherOp>(op)) {
    Layout data = layoutOf(gather.getData());
    if (data.isSplit() && data.dim == gather.getAxis())
      copy->setAttr(kShardAxesAttr, builder.getDenseI64ArrayAttr({0}));
  }
  if (auto scatter = dyn_cast<ScatterAddOp>(op))
    if (outs[0].isSplit() && outs[0].dim == scatter.getAxis())
      copy->setAttr(kShardAxesAttr, builder.getDenseI64ArrayAttr({0}));
  for (auto [i, r] : llvm::enumerate(copy->getResults())) {
    r.setType(localType(typeOf(op->getResult(i)), outs[i]));
    mapping.map(op->getResult(i), r);
  }
}

LogicalResult Partitioner::visitReplicated(Operation *op) {
  SmallVector<Value> operands;
  for (Value v : op->getOperands())
    operands.push_back(convert(v, Layout::replicated()));
  SmallVector<Layout> outs(op->getNumResults(), Layout::replicated());
  emit(op, operands, outs);
  return success();
}

LogicalResult Partitioner::visitReshape(ReshapeOp op) {
  Layout in = layoutOf(op.getInput());
  if (!in.isSplit()) {
    emit(op, {convert(op.getInput(), in)}, {in});
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
  std::optional<std::pair<int64_t, int64_t>> target;
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
    int64_t outer = in.blocks;
    for (int64_t d = i0; d < in.dim; ++d)
      outer *= a[d];
    int64_t pre = 1;
    for (size_t e = j0; e < j; ++e) {
      if (outer % pre)
        break;
      int64_t blocks = outer / pre;
      if (b[e] % (blocks * tp) == 0) {
        target = {static_cast<int64_t>(e), blocks};
        break;
      }
      pre *= b[e];
    }
    break;
  }
  if (target) {
    emit(op, {convert(op.getInput(), in)},
         {Layout::split(target->first, target->second)});
    return success();
  }
  emit(op, {convert(op.getInput(), Layout::replicated())},
       {Layout::replicated()});
  return success();
}

LogicalResult Partitioner::visitBlockSlice(SliceOp op) {
  Layout in = layoutOf(op.getInput());
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
  Layout out = Layout::split(d, b[d] / block);
  layouts[op.getResult()] = out;
  if (!rewrite)
    return success();
  SmallVector<int64_t> starts(op.getStarts());
  starts[d] = start / block * (block / tp);
  Value local = SliceOp::create(
      builder, op.getLoc(), localType(typeOf(op.getResult()), out),
      mapping.lookup(op.getInput()), starts, op.getSteps());
  mapping.map(op.getResult(), local);
  return success();
}

LogicalResult Partitioner::visitBlockSliceScatter(SliceScatterOp op) {
  Layout in = layoutOf(op.getInput());
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
  if (op.getSteps()[d] != 1 || start % block || a[d] % block || a[d] == b[d] ||
      block % tp)
    return failure();
  Layout out = Layout::split(d, a[d] / block);
  layouts[op.getResult()] = out;
  if (!rewrite)
    return success();
  SmallVector<int64_t> starts(op.getStarts());
  starts[d] = start / block * (block / tp);
  Value local = SliceScatterOp::create(
      builder, op.getLoc(), localType(typeOf(op.getResult()), out),
      mapping.lookup(op.getInput()), starts, op.getSteps());
  mapping.map(op.getResult(), local);
  return success();
}

LogicalResult Partitioner::visitBlockConcat(ConcatOp op) {
  int64_t axis = op.getAxis(), blocks = 0, block = -1;
  for (Value v : op.getInputs()) {
    Layout l = layoutOf(v);
    int64_t size = typeOf(v).getDimSize(axis);
    if (!l.isSplit() || l.dim != axis ||
        (block >= 0 && size / l.blocks != block))
      return failure();
    block = size / l.blocks;
    blocks += l.blocks;
  }
  SmallVector<Value> operands;
  for (Value v : op.getInputs())
    operands.push_back(convert(v, layoutOf(v)));
  emit(op, operands, {Layout::split(axis, blocks)});
  return success();
}

LogicalResult Partitioner::visitWithRule(Operation *op,
                                         const ShardingRule &rule) {
  unsigned numOperands = op->getNumOperands();
  struct Candidate {
    SmallVector<Layout> operands, results;
    double cost = 0;
  };
  SmallVector<Candidate> candidates;
  // Replicated.
  {
    Candidate c;
    c.operands.assign(numOperands, Layout::replicated());
    c.results.assign(op->getNumResults(), Layout::replicated());
    candidates.push_back(c);
  }
  // Partial sums flowing through a linear op.
  // A partial value with several users is reduced once, before it fans
  // out: each user keeping it partial would need its own reduction later
  // (the LayerNorm backward reads its incoming gradient three times).
  SmallVector<unsigned> partialOperands;
  bool fansOut = false;
  for (unsigned i = 0; i < numOperands; ++i) {
    Value v = op->getOperand(i);
    Layout l = layoutOf(v);
    if (l.isPartial() && l.combine == ReduceKind::sum) {
      partialOperands.push_back(i);
      fansOut |= !v.hasOneUse();
    }
  }
  if (fansOut)
    partialOperands.clear();
  if (!partialOperands.empty()) {
    Candidate c;
    c.results.assign(op->getNumResults(), Layout::partial());
    if (rule.additive) {
      c.operands.assign(numOperands, Layout::partial());
      candidates.push_back(c);
    } else if (partialOperands.size() == 1 &&
               rule.scalingOperands[partialOperands[0]]) {
      c.operands.assign(numOperands, Layout::replicated());
      c.operands[partialOperands[0]] = Layout::partial();
      candidates.push_back(c);
    }
  }
  // One candidate per splittable factor.
  for (const ShardingFactor &f : rule.factors) {
    if (f.kind == ShardingFactor::Kind::Whole || f.size % tp || f.size < tp)
      continue;
    // Blocks of a fused projection carry over from an operand split so.
    int64_t blocks = 1;
    for (auto [i, d] : llvm::enumerate(f.operandDims)) {
      Layout l = layoutOf(op->getOperand(i));
      if (d >= 0 && l.isSplit() && l.dim == d) {
        blocks = l.blocks;
        break;
      }
    }
    if (f.size % (blocks * tp))
      blocks = 1;
    Candidate c;
    for (int64_t d : f.operandDims)
      c.operands.push_back(d >= 0 ? Layout::split(d, blocks)
                                  : Layout::replicated());
    for (int64_t d : f.resultDims)
      c.results.push_back(d >= 0 ? Layout::split(d, blocks)
                          : f.kind == ShardingFactor::Kind::Reduction
                              ? Layout::partial(f.combine)
                              : Layout::replicated());
    candidates.push_back(c);
  }
  Candidate *best = nullptr;
  for (Candidate &c : candidates) {
    for (unsigned i = 0; i < numOperands; ++i)
      c.cost += conversionCost(op->getOperand(i), c.operands[i]);
    if (!best || c.cost < best->cost)
      best = &c;
  }
  if (!best || best->cost == kInfinity)
    return op->emitOpError("has no layout its operands can reach");
  SmallVector<Value> operands;
  for (unsigned i = 0; i < numOperands; ++i)
    operands.push_back(convert(op->getOperand(i), best->operands[i]));
  emit(op, operands, best->results);
  return success();
}

LogicalResult Partitioner::visit(Operation *op) {
  loc = op->getLoc();
  phase = phaseOf.lookup(op);
  if (isa<ConstantOp>(op)) {
    emit(op, {}, {Layout::replicated()});
    return success();
  }
  if (auto reshape = dyn_cast<ReshapeOp>(op))
    return visitReshape(reshape);
  if (auto slice = dyn_cast<SliceOp>(op))
    if (succeeded(visitBlockSlice(slice)))
      return success();
  if (auto concat = dyn_cast<ConcatOp>(op))
    if (succeeded(visitBlockConcat(concat)))
      return success();
  if (auto scatter = dyn_cast<SliceScatterOp>(op))
    if (succeeded(visitBlockSliceScatter(scatter)))
      return success();
  if (auto ruled = dyn_cast<ShardingRuleOpInterface>(op)) {
    if (rules) {
      auto [it, fresh] = rules->try_emplace(op);
      if (fresh) {
        ShardingRule rule;
        if (succeeded(ruled.getShardingRule(rule)))
          it->second = std::move(rule);
      }
      if (it->second)
        return visitWithRule(op, *it->second);
      return visitReplicated(op);
    }
    ShardingRule rule;
    if (succeeded(ruled.getShardingRule(rule)))
      return visitWithRule(op, rule);
  }
  return visitReplicated(op);
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
  // rest (data, buffers, step) replicated.
  SmallVector<Layout> argLayouts;
  for (BlockArgument arg : func.getArguments()) {
    unsigned i = arg.getArgNumber();
    Layout l;
    if (auto name = func.getArgAttrOfType<StringAttr>(i, kParameterAttr))
      l = layoutOfParameter(name.getValue());
    else if (auto state =
                 func.getArgAttrOfType<ArrayAttr>(i, kOptimizerStateAttr))
      l = layoutOfParameter(cast<StringAttr>(state[0]).getValue());
    if (l.isSplit()) {
      int64_t size = typeOf(arg).getDimSize(l.dim);
      if (size % tp)
        return func.emitError("parameter ")
               << func.getArgAttr(i, kParameterAttr) << " of type "
               << arg.getType() << ": dimension " << l.dim << " of size "
               << size << " is not divisible by tp = " << tp;
    }
    layouts[arg] = l;
    argLayouts.push_back(l);
    if (l.isSplit() || func.getArgAttr(i, kParameterAttr) ||
        func.getArgAttr(i, kOptimizerStateAttr))
      result.memoryBytes += bytesOf(arg) / (l.isSplit() ? tp : 1);
  }
  // Gradients are as large as their parameters.
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (auto name = func.getArgAttrOfType<StringAttr>(i, kParameterAttr))
      result.memoryBytes +=
          bytesOf(func.getArgument(i)) / (argLayouts[i].isSplit() ? tp : 1);

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
  for (Operation &op : body.without_terminator())
    if (failed(visit(&op))) {
      delete newBody;
      return failure();
    }

  // Results in the layouts the trainer keeps: the loss replicated; new
  // parameters, gradients and optimizer state as their parameter.
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  loc = ret.getLoc();
  SmallVector<Value> results;
  SmallVector<Layout> resultLayouts;
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    Layout want;
    if (auto name = func.getResultAttrOfType<StringAttr>(i, kParameterAttr))
      want = layoutOfParameter(name.getValue());
    else if (auto name = func.getResultAttrOfType<StringAttr>(i, kGradientAttr))
      want = layoutOfParameter(name.getValue());
    else if (auto state =
                 func.getResultAttrOfType<ArrayAttr>(i, kOptimizerStateAttr))
      want = layoutOfParameter(cast<StringAttr>(state[0]).getValue());
    // Gradients are formed in the backward pass and updates in the
    // optimizer; their collectives belong there.
    phase = func.getResultAttr(i, kGradientAttr) ? "backward"
            : func.getResultAttr(i, kLossAttr)   ? "forward"
                                                 : "optimizer";
    results.push_back(convert(v, want));
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
    }
  for (auto [i, l] : llvm::enumerate(resultLayouts))
    if (l.isSplit()) {
      func.setResultAttr(i, kSplitDimAttr, b.getI64IntegerAttr(l.dim));
      if (l.blocks > 1)
        func.setResultAttr(i, kSplitBlocksAttr, b.getI64IntegerAttr(l.blocks));
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

FailureOr<PartitionResult>
mlir::cleave::partition(func::FuncOp func, int64_t tp,
                        const ParameterLayouts &layouts, const CostModel &cost,
                        bool rewrite, ShardingRuleCache *rules) {
  Partitioner p(func, tp, cost, rewrite, rules);
  return p.run(layouts);
}

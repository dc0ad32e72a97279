//===- Partitioner.cpp - Layout propagation, SPMD partitioning --*- C++ -*-===//
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

#include "Partitioner.h"
#include "Cleave/CleaveAttrNames.h"
#include "Cleave/CleaveInterfaces.h"
#include "Cleave/CleaveOps.h"
#include "cleave/Sharding/Sharding.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <limits>
#include <map>
#include <numeric>

using namespace mlir;
using namespace mlir::cleave;
using namespace mlir::cleave::partitioning;

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

PartitionIndex::PartitionIndex(func::FuncOp func)
    : impl(std::make_unique<Impl>(func)) {}
PartitionIndex::~PartitionIndex() = default;

namespace {

std::string locationString(Location loc) {
  std::string s;
  llvm::raw_string_ostream os(s);
  loc.print(os);
  return s;
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
    std::optional<ShardingRule> rule = shardingRuleOf(def);
    if (!rule || !rule->movesOperand)
      return false;
    v = def->getOperand(0);
  }
  auto arg = cast<BlockArgument>(v);
  return index.argIsParameter[arg.getArgNumber()];
}

/// Whether some operand of \p op is a parameter (seen through moves).
bool readsParameter(Operation *op, const PartitionIndex::Impl &index) {
  return llvm::any_of(op->getOperands(),
                      [&](Value v) { return isParameterValue(v, index); });
}

/// Whether \p rule looks rows up in a table that is its operand 0 (a
/// gather, not a scatter into its result).
bool readsTable(const std::optional<ShardingRule> &rule) {
  return rule && rule->lookup && !rule->lookup->intoResult;
}

/// Whether the value \p op reduces comes from a weight's product: looks
/// up through elementwise ops to the first contraction or lookup on each
/// path (the vocab-parallel loss reduces the LM head's logits; a softmax
/// over scores reduces a product of two activations).
bool reducesWeightProduct(Operation *op, const PartitionIndex::Impl &index) {
  llvm::SmallPtrSet<Operation *, 16> seen;
  SmallVector<Operation *> work{op};
  while (!work.empty() && seen.size() < 64) {
    Operation *at = work.pop_back_val();
    if (!seen.insert(at).second)
      continue;
    std::optional<ShardingRule> rule = shardingRuleOf(at);
    if (rule && rule->contraction && at != op) {
      if (readsParameter(at, index))
        return true;
      continue;
    }
    if (readsTable(rule) && isParameterValue(at->getOperand(0), index))
      return true;
    for (Value v : at->getOperands())
      if (Operation *def = v.getDefiningOp())
        work.push_back(def);
  }
  return false;
}

/// Whether reduction \p op sums values made elementwise from the step's
/// gradients (their squares for the global norm, the check that they are
/// finite): Megatron's optimizer all-reduces the same scalar each step
/// (its grad-norm and found-inf reductions).
bool reducesGradients(Operation *op, const PartitionIndex::Impl &index) {
  llvm::SmallPtrSet<Operation *, 16> seen;
  SmallVector<Operation *> work{op};
  while (!work.empty() && seen.size() < 16) {
    Operation *at = work.pop_back_val();
    if (!seen.insert(at).second)
      continue;
    std::optional<ShardingRule> rule = shardingRuleOf(at);
    if (rule && rule->contraction)
      continue;
    for (Value v : at->getOperands()) {
      if (index.gradientOf.count(index.ids.lookup(v)))
        return true;
      if (Operation *def = v.getDefiningOp())
        work.push_back(def);
    }
  }
  return false;
}

} // namespace

Value Partitioner::convert(int32_t id, Layout to) {
  to = canonicalFor(id, to);
  Layout from = layoutOf(id);
  Value v = index.values[id];
  Value local = rewrite ? mapping.lookupOrNull(v) : Value();
  if (from.isReplicated() && layouts[id] != from && rewrite)
    local = converted[key(id, Layout::replicated())]; // the reduced copy
  if (from.isSplit() && layouts[id].isPartial() && rewrite)
    local = converted[key(id, from)]; // the reduce-scattered copy
  if (from == to)
    return local;
  ConversionKey k = key(id, to);
  if (rewrite && !regathers(id, to))
    if (auto it = converted.find(k); it != converted.end())
      return it->second;
  bool counted = !countedConversions.insert(k).second && !regathers(id, to);
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
  SmallVector<int64_t> axes{meshAxis};
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
  if (exchanging && movesByAllToAll(id, from, to)) {
    if (!counted)
      result.seconds += allToAllCost(localBytes(id, from));
    if (!rewrite)
      return Value();
    Value out = AllToAllOp::create(builder, loc, localType(global, to), local,
                                   axes, to.dim, from.dim);
    tag(out.getDefiningOp(),
        user + " reads it split along dim " + std::to_string(to.dim) +
            ", not " + std::to_string(from.dim) + ": an all_to_all moves 1/" +
            std::to_string(tp) + " of what gathering it would",
        /*megatron=*/false, id);
    converted[k] = out;
    return out;
  }
  // First to replicated.
  Value full = local;
  if (int32_t source = gatheredViewSource(id); source >= 0) {
    // The view's source made whole (once, for every view of it), viewed.
    Value whole = convert(source, Layout::replicated());
    if (rewrite) {
      IRMapping viewed;
      Operation *def = v.getDefiningOp();
      viewed.map(def->getOperand(0), whole);
      full = builder.clone(*def, viewed)->getResult(0);
    }
  } else if (from.isSplit()) {
    if (!counted) {
      result.seconds += allGatherCost(gatheredBytes(id, from));
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
      tag(full.getDefiningOp(), why, /*megatron=*/false, id);
      if (shape[from.dim] != global.getDimSize(from.dim))
        full = resizeBlocks(full, global, from.dim, from.blocks);
    }
  } else if (from.isPartial() && from.combine == ReduceKind::sum &&
             index.gradientOf.count(id)) {
    if (scattersGradient(id, to) && !dense) {
      Value out = scatterGradient(id, to, counted, local);
      if (rewrite)
        converted[k] = out;
      return out;
    }
    full = reduceGradients(id);
  } else if (from.isPartial() && scattersPartial(id, to) && !dense) {
    Value out = scatterPartial(id, to, counted, local);
    scattered[id] = to;
    if (rewrite)
      converted[k] = out;
    return out;
  } else if (from.isPartial()) {
    full = reducePartial(id, from, counted, local);
    // Reduced on the way to a split, the whole sum serves later users too.
    ConversionKey whole = key(id, Layout::replicated());
    if (k != whole) {
      countedConversions.insert(whole);
      if (rewrite)
        converted[whole] = full;
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

Value Partitioner::scatterGradient(int32_t id, Layout to, bool counted,
                                   Value local) {
  // A reduce-scatter moves what an all-gather of the result does.
  if (!counted)
    result.seconds += allGatherCost(bytesOf(id));
  if (!rewrite)
    return Value();
  Value grad = index.values[id];
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointAfterValue(local);
  std::string saved = phase;
  if (Operation *def = grad.getDefiningOp())
    phase = phaseOf.lookup(def).empty() ? phase : phaseOf.lookup(def);
  SmallVector<int64_t> axes{meshAxis};
  Value out = ReduceScatterOp::create(
      builder, grad.getLoc(), localType(typeOf(grad), to), local, axes, to.dim);
  tag(out.getDefiningOp(),
      "ZeRO: the gradient of parameter '" + index.gradientOf.lookup(id).str() +
          "' is a partial sum on every rank, and its update needs only this "
          "rank's shard (its optimizer state is split); reduced to that shard "
          "as soon as it is final",
      /*megatron=*/false, id);
  phase = saved;
  return out;
}

void Partitioner::reduceFinishedGradients(const OpEntry &e) {
  for (unsigned r = 0; r < e.numResults; ++r) {
    int32_t id = static_cast<int32_t>(e.firstResult + r);
    finishedGradients += index.gradientOf.count(id);
    if (!index.gradientOf.count(id) || !layouts[id].isPartial() ||
        layouts[id].combine != ReduceKind::sum ||
        countedConversions.count(key(id, Layout::replicated())))
      continue;
    // The gradient is final here: reduced now, its sum is ready long before
    // the update reads it.
    definedBelow = static_cast<int32_t>(e.firstResult + e.numResults);
    if (!bucketGradients) {
      reduceGradients(id);
      continue;
    }
    pendingBytes += bytesOf(id);
    Type elem = typeOf(index.values[id]).getElementType();
    auto it = llvm::find_if(pendingGradients,
                            [&](const auto &p) { return p.first == elem; });
    if (it == pendingGradients.end())
      pendingGradients.push_back({elem, id});
    else
      it->second = id;
  }
  // The last bucket goes when the backward pass has finished every
  // gradient, full or not.
  bool last = finishedGradients == index.gradientOf.size();
  if (pendingGradients.empty() || (pendingBytes < earlyBucketBytes && !last))
    return;
  for (auto [elem, pending] : pendingGradients)
    reduceGradients(pending); // takes every gradient of its type
  pendingGradients.clear();
  pendingBytes = 0;
}

Value Partitioner::reduceGradients(int32_t id) {
  ConversionKey whole = key(id, Layout::replicated());
  if (rewrite)
    if (Value done = converted.lookup(whole))
      return done;
  // One bucket per element type (they are concatenated).
  Type elem = typeOf(index.values[id]).getElementType();
  SmallVector<int32_t> bucket{id};
  for (auto [g, name] : index.gradientOf)
    if (bucketGradients && g != id && g < definedBelow &&
        layouts[g].isPartial() && layouts[g].combine == ReduceKind::sum &&
        typeOf(index.values[g]).getElementType() == elem &&
        !countedConversions.count(key(g, Layout::replicated())))
      bucket.push_back(g);
  llvm::sort(bucket.begin() + 1, bucket.end());
  int64_t bytes = 0;
  for (int32_t g : bucket) {
    bytes += bytesOf(g);
    countedConversions.insert(key(g, Layout::replicated()));
    // As for any partial sum: an embedded split summed before anything
    // shrank it to half is a gather at more traffic.
    if (int32_t origin = embedOrigin[g];
        origin >= 0 && 2 * bytesOf(g) > bytesOf(origin))
      result.gatheredProducts.push_back(splitSource[origin]);
  }
  result.seconds += allReduceCost(bytes);
  if (!rewrite)
    return Value();
  SmallVector<int64_t> axes{meshAxis};
  if (bucket.size() == 1) {
    Value out = AllReduceOp::create(builder, loc, ReduceKind::sum,
                                    mapping.lookup(index.values[id]), axes);
    auto [reason, megatron] = reduceReason(id);
    tag(out.getDefiningOp(), reason, megatron, id);
    converted[whole] = out;
    return out;
  }
  // One all-reduce per member, each marked with the bucket:
  // --cleave-bucket-gradients sums them as one flat tensor.
  std::string others;
  for (int32_t g : ArrayRef<int32_t>(bucket).drop_front())
    others +=
        (others.empty() ? "'" : ", '") + index.gradientOf.lookup(g).str() + "'";
  std::string reason =
      "one bucket: the gradient of parameter '" +
      index.gradientOf.lookup(id).str() + "' and those of " + others +
      " are partial sums on every rank (their uses see the values whole "
      "but each rank's share of the results); for '" +
      index.gradientOf.lookup(id).str() + "', " +
      alternativeOf(index.gradientOf.lookup(id));
  IntegerAttr number = builder.getI64IntegerAttr(buckets++);
  for (int32_t g : bucket) {
    Value out = AllReduceOp::create(builder, loc, ReduceKind::sum,
                                    mapping.lookup(index.values[g]), axes);
    tag(out.getDefiningOp(), reason, false, g);
    out.getDefiningOp()->setAttr(kBucketAttr, number);
    converted[key(g, Layout::replicated())] = out;
  }
  return converted[whole];
}

bool mlir::cleave::movesOnly(Operation *def) {
  if (!def || def->getNumOperands() != 1 || def->getNumResults() != 1)
    return false;
  std::optional<ShardingRule> rule = shardingRuleOf(def);
  if (!rule || !(rule->form == ShardingForm::Regroup || rule->movesOperand))
    return false;
  auto in = cast<RankedTensorType>(def->getOperand(0).getType());
  auto out = cast<RankedTensorType>(def->getResult(0).getType());
  return in.getElementType() == out.getElementType() &&
         in.getNumElements() == out.getNumElements();
}

bool Partitioner::movesOnlyOp(Operation *def) { return movesOnly(def); }

int32_t Partitioner::viewRoot(int32_t id) const {
  while (movesOnly(index.values[id].getDefiningOp()))
    id = idOf(index.values[id].getDefiningOp()->getOperand(0));
  return id;
}

Value Partitioner::reducePartial(int32_t id, Layout from, bool counted,
                                 Value local) {
  // A view of a partial value, or a reshape of an embedded split: the
  // source made whole once for every view of it, and viewed.
  int32_t source = movedPartialSource(id);
  if (source >= 0 || embeddedRegroup[id] >= 0) {
    Value full = source >= 0 ? convert(source, Layout::replicated())
                             : reduceEmbedded(embeddedRegroup[id], id);
    if (!rewrite)
      return Value();
    IRMapping whole;
    Operation *def = index.values[id].getDefiningOp();
    whole.map(def->getOperand(0), full);
    return builder.clone(*def, whole)->getResult(0);
  }
  // Under mixed precision a sum of bf16 products crosses the wire in
  // bf16, rounded once (Megatron's fused QKV input gradient is one bf16
  // all-reduce); a partial that has met an f32 value (a residual) keeps
  // f32, or each layer would round the residual stream.
  Type wire = wireTypeOf(id, from);
  if (!counted) {
    result.seconds += allReduceCost(wire ? bytesOf(id) / 2 : bytesOf(id));
    // An embedded split summed before anything shrank it to half is a
    // gather at more traffic: the same trade as one.
    if (int32_t origin = embedOrigin[id];
        origin >= 0 && 2 * bytesOf(id) > bytesOf(origin))
      result.gatheredProducts.push_back(splitSource[origin]);
  }
  if (!rewrite)
    return Value();
  SmallVector<int64_t> axes{meshAxis};
  Value sent = local;
  auto localF32 = cast<RankedTensorType>(local.getType());
  if (wire)
    sent = CastOp::create(
        builder, loc, RankedTensorType::get(localF32.getShape(), wire), local);
  Value full = AllReduceOp::create(builder, loc, from.combine, sent, axes);
  auto [reason, megatron] = reduceReason(id);
  tag(full.getDefiningOp(), reason, megatron, id);
  if (wire)
    full = CastOp::create(builder, loc, localF32, full);
  return full;
}

Value Partitioner::scatterPartial(int32_t id, Layout to, bool counted,
                                  Value local) {
  Type wire = wireTypeOf(id, layouts[id]);
  if (!counted)
    result.seconds += allGatherCost(wire ? bytesOf(id) / 2 : bytesOf(id));
  if (!rewrite)
    return Value();
  SmallVector<int64_t> axes{meshAxis};
  auto part = localType(typeOf(index.values[id]), to);
  Value sent = local;
  if (wire)
    sent = CastOp::create(
        builder, loc,
        RankedTensorType::get(
            cast<RankedTensorType>(local.getType()).getShape(), wire),
        local);
  Value out = ReduceScatterOp::create(
      builder, loc, wire ? RankedTensorType::get(part.getShape(), wire) : part,
      sent, axes, to.dim);
  auto [reason, megatron] = reduceReason(id);
  tag(out.getDefiningOp(),
      "sequence parallelism: " + reason + "; " + user +
          " reads it split along dim " + std::to_string(to.dim) +
          ", so it is reduce-scattered there (half the all-reduce's bytes; "
          "the other half gathers it where it is needed whole)",
      /*megatron=*/false, id);
  if (wire)
    out = CastOp::create(builder, loc, part, out);
  return out;
}

Value Partitioner::reduceEmbedded(int32_t split, int32_t view) {
  ConversionKey whole = key(split, Layout::replicated());
  if (countedConversions.insert(whole).second) {
    result.seconds += allReduceCost(bytesOf(split));
    result.gatheredProducts.push_back(splitSource[split]);
  }
  if (!rewrite)
    return Value();
  if (Value done = converted.lookup(whole))
    return done;
  SmallVector<int64_t> axes{meshAxis};
  Value full = AllReduceOp::create(builder, loc, ReduceKind::sum,
                                   embed(split, layoutOf(split)), axes);
  auto [reason, megatron] = reduceReason(view);
  tag(full.getDefiningOp(), reason, megatron, split);
  converted[whole] = full;
  return full;
}

std::string Partitioner::originOf(int32_t id) const {
  Operation *op = partialFrom.lookup(id);
  if (!op)
    op = index.values[viewRoot(id)].getDefiningOp();
  if (!op)
    return "";
  std::string s;
  llvm::raw_string_ostream os(s);
  op->getLoc().print(os);
  return s;
}

int32_t Partitioner::movedPartialSource(int32_t id) const {
  Operation *def = index.values[id].getDefiningOp();
  if (!movesOnly(def))
    return -1;
  int32_t source = idOf(def->getOperand(0));
  Layout l = layoutOf(source);
  // Summed the same way, crossing the wire in the same type.
  if (!l.isPartial() || l.combine != layoutOf(id).combine ||
      (index.wireType &&
       index.sumOfHalfProducts[source] != index.sumOfHalfProducts[id]) ||
      index.gradientOf.count(source))
    return -1;
  return source;
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
  // over a split vocabulary. A weight's product contracted over the
  // weight's split with a whole activation is one too (a dense mixture's
  // expert outputs combined over the experts each rank holds). Two split
  // activations contracted over a split dimension (scores over a head's
  // dimensions) are not.
  std::optional<ShardingRule> rule = shardingRuleOf(source);
  bool contraction = rule && rule->contraction;
  bool withWeight = contraction && readsParameter(source, index);
  int splitProducts = 0, splitOthers = 0;
  if (contraction && !withWeight)
    for (Value v : source->getOperands()) {
      int32_t operand = idOf(v);
      if (layoutOf(operand).isSplit())
        ++(splitSource[operand] >= 0 ? splitProducts : splitOthers);
    }
  bool ofProduct = splitProducts == 1 && splitOthers == 0;
  bool megatron = contraction ? withWeight || ofProduct
                              : (rule && rule->lookup) ||
                                    reducesWeightProduct(source, index) ||
                                    reducesGradients(source, index);
  return {"sums the partial results of " + describe(source) +
              (contraction
                   ? ", which contracts a split dimension" +
                         std::string(withWeight  ? " with a weight"
                                     : ofProduct ? " of a weight's product"
                                                 : " of two activations")
               : rule && rule->form == ShardingForm::Regroup
                   ? ", which cannot keep its operand's split (each rank "
                     "gives its chunk, zeros elsewhere)"
                   : ", which reduces over a split dimension") +
              "; " + user + " needs them whole",
          megatron};
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
    layouts[e.firstResult + i] = canonicalFor(e.firstResult + i, outs[i]);
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
  const ShardingRule *rule = e.rule >= 0 ? &index.rules[e.rule] : nullptr;
  // Ranks holding a slice of a lookup's table (a gather's operand, a
  // scatter's result) shift the indices into their range and skip the
  // others.
  if (rule && rule->lookup) {
    Value table =
        rule->lookup->intoResult ? op->getResult(0) : op->getOperand(0);
    Layout l = rule->lookup->intoResult ? outs[0] : layoutOf(idOf(table));
    if (l.isSplit() && l.dim == rule->lookup->axis) {
      // Split over a second tp axis (tp-inner) too: the rank's offset is
      // its index over both axes times its chunk, the inner chunks tiling
      // the outer one (as the partition pass checks of the table's
      // layout), and the table's size stays the outer pass's, the global.
      SmallVector<int64_t> axes;
      auto was = op->getAttrOfType<DenseI64ArrayAttr>(kShardAxesAttr);
      if (was)
        llvm::append_range(axes, was.asArrayRef());
      axes.push_back(meshAxis);
      copy->setAttr(kShardAxesAttr, builder.getDenseI64ArrayAttr(axes));
      if (!was)
        copy->setAttr(kShardSizeAttr, builder.getI64IntegerAttr(
                                          typeOf(table).getDimSize(l.dim)));
    }
  }
  for (auto [i, r] : llvm::enumerate(copy->getResults())) {
    r.setType(localType(typeOf(op->getResult(i)), outs[i]));
    mapping.map(op->getResult(i), r);
  }
  // A mean over a split dimension: each rank's mean of its n rows, times
  // n / N, is its share of the global mean's sum (padding rows are zeros).
  if (rule && rule->mean && outs[0].isPartial()) {
    int64_t local = 1, global = 1;
    for (const ShardingFactor &f : rule->factors)
      if (f.kind == ShardingFactor::Kind::Reduction) {
        local *= typeOf(operands[0]).getDimSize(f.operandDims[0]);
        global *= typeOf(op->getOperand(0)).getDimSize(f.operandDims[0]);
      }
    if (local != global) {
      Value r = copy->getResult(0);
      auto type = typeOf(r);
      SmallVector<int64_t> ones(type.getRank(), 1);
      Value scale = ConstantOp::create(
          builder, loc,
          DenseElementsAttr::get(
              RankedTensorType::get(ones, type.getElementType()),
              builder.getFloatAttr(type.getElementType(),
                                   static_cast<double>(local) / global)));
      mapping.map(op->getResult(0), MulOp::create(builder, loc, r, scale));
    }
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
  /// A factor smaller than tp (3 K/V groups on 4 ranks) is not split
  /// here, but a split that reaches it (whole heads, one group per rank,
  /// the last rank padding) is kept.
  bool splittable(const ShardingFactor &f) const {
    if (f.kind == ShardingFactor::Kind::Whole || f.size <= 1)
      return false;
    if (f.size >= p.tp)
      return true;
    for (auto [i, d] : llvm::enumerate(f.operandDims)) {
      Layout l = p.layoutOf(p.operandId(e, i));
      if (d >= 0 && l.isSplit() && l.dim == d)
        return true;
    }
    return false;
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
  // Costed without being built (the search's dry runs visit every op many
  // times); cheapest wins, the earlier on a tie. A partial value with
  // several users is reduced once, before it fans out: each user keeping it
  // partial would need its own reduction later (the LayerNorm backward
  // reads its incoming gradient three times).
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
  // Several partial results of one partial operand (a norm's backward:
  // input and parameter gradients) multiply the reductions as readers do.
  fansOut |= numPartial > 0 && e.numResults > 1;
  // A partial sum passed on is reduced later at its new size, so a
  // contraction or scatter that would make it bigger (a scatter into a
  // table, a weight gradient from a small input gradient) takes it reduced
  // (a broadcast into an elementwise op usually joins a partial of the
  // same size). A gradient that fans out (into the optimizer's moments) is
  // reduced before, for all of them.
  bool grows = false;
  if ((rule.contraction || (rule.lookup && rule.lookup->intoResult)) &&
      cands.partialOperand >= 0)
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
      numPartial > 0 && !grows && !joinsOtherAxisSum(e.op) &&
      (!fansOut || fanOutAllowed) &&
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
  // A parameter's gradient made here takes, on a tie, the parameter's own
  // layout: a table's gradient scattered into its rows stays sharded like
  // the table, rather than built whole on every rank and sliced for the
  // update (LLaMA-3-8B's embedding: 2.1 GB a rank).
  std::optional<Layout> home = gradientHome(e);
  bool bestAtHome = false;
  for (auto [c, f] : llvm::enumerate(rule.factors)) {
    if (!cands.splittable(f))
      continue;
    Cut cut = cands.cutOf(f);
    // A lookup sharded along its table's axis finds each rank's rows as
    // one chunk, not as blocks.
    if (cut.blocks > 1 && rule.lookup &&
        (rule.lookup->intoResult
             ? !f.resultDims.empty() && f.resultDims[0] == rule.lookup->axis
             : f.operandDims[0] == rule.lookup->axis))
      continue;
    double cost = cands.cost(c, cut);
    // Sequence parallelism splits the tokens, which the backward's scatters
    // and weight products reduce over: a partial result bigger than the
    // operand split (the embedding table's gradient from the tokens') costs
    // at least its reduce-scatter later, where gathering the operand costs
    // only the operand's bytes now. Results that keep the split dimension
    // (a norm's input gradient beside its scale's) are not partial.
    if (sequenceParallel && f.kind == ShardingFactor::Kind::Reduction) {
      int64_t in = 0, out = 0;
      for (auto [i, d] : llvm::enumerate(f.operandDims))
        if (d >= 0)
          in = std::max(in, bytesOf(operandId(e, i)));
      for (unsigned r = 0; r < e.numResults; ++r)
        if (f.resultDims[r] < 0)
          out += bytesOf(e.firstResult + r);
      if (out > in)
        cost += allGatherCost(out);
    }
    bool atHome =
        home && f.resultDims[0] >= 0 &&
        canonicalFor(e.firstResult, Layout::split(f.resultDims[0], cut.blocks,
                                                  cut.granule)) == *home;
    if (cost < bestCost || (cost == bestCost && atHome && !bestAtHome))
      best = c, bestCut = cut, bestCost = cost, bestAtHome = atHome;
  }
  if (bestCost == kInfinity)
    return e.op->emitOpError("has no layout its operands can reach");
  int exchange = exchangeInstead(e, rule, cands, best, bestCost);
  if (exchange >= 0)
    best = exchange, bestCut = Cut();
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
  exchanging = exchange >= 0;
  for (unsigned i = 0; i < numOperands; ++i) {
    int32_t id = operandId(e, i);
    if (rewrite && layoutOf(id).isSplit() && layoutOf(id) != to[i])
      why = cands.gatherReason(i, best, bestCut, bestCost);
    operands.push_back(convert(id, to[i]));
  }
  exchanging = false;
  if (best >= 0 && cands.padded(rule.factors[best], bestCut))
    padOperandsAndResults(e, rule.factors[best], to, operands);
  carrySplitSource(e, to);
  emit(e, operands, outs);
  if (exchange >= 0) {
    // Gathered where it is made: its users see it whole, as they would
    // the all-reduced sum, and the split carries no parameter's.
    int32_t id = e.firstResult;
    splitSource[id] = -1;
    if (rewrite)
      why = user + " is computed split after an all_to_all and gathered "
                   "whole: the two move less than the all-reduce of its "
                   "partial sum over the split factor would";
    Value whole = convert(id, Layout::replicated());
    layouts[id] = Layout::replicated();
    if (rewrite)
      mapping.map(index.values[id], whole);
  }
  return success();
}

int Partitioner::exchangeInstead(const OpEntry &e, const ShardingRule &rule,
                                 const Candidates &cands, int best,
                                 double bestCost) const {
  // Not on the data-parallel axis (expert parallelism over dp, with the
  // experts' weights split there, is not built), nor for a parameter's
  // gradient, which the buckets and ZeRO's reduce-scatter reduce.
  if (splitInputs || index.gradientOf.count(e.firstResult))
    return -1;
  if (best < 0 || e.numResults != 1 || !rule.contraction ||
      rule.factors[best].kind != ShardingFactor::Kind::Reduction ||
      rule.factors[best].combine != ReduceKind::sum ||
      !index.isFloat[e.firstResult])
    return -1;
  int64_t resultBytes = bytesOf(e.firstResult);
  double reduced = bestCost + allReduceCost(resultBytes);
  int chosen = -1;
  for (auto [c, f] : llvm::enumerate(rule.factors)) {
    if (f.kind != ShardingFactor::Kind::Parallel || f.resultDims[0] < 0 ||
        !cands.splittable(f) || cands.padded(f, Candidates::Cut()))
      continue;
    bool exchanges = false, local = true;
    double cost = 0;
    for (unsigned i = 0; i < e.numOperands && local; ++i) {
      int32_t id = operandId(e, i);
      Layout have = layoutOf(id),
             want = canonicalFor(id, cands.operandLayout(c, {}, i));
      if (have == want || (have.isReplicated() && !want.isPartial())) {
        cost += conversionCost(id, want);
        continue;
      }
      local = movesByAllToAll(id, have, want);
      exchanges |= local;
      cost += allToAllCost(localBytes(id, have));
    }
    if (!exchanges || !local)
      continue;
    Layout out = Layout::split(f.resultDims[0]);
    cost += allGatherCost(gatheredBytes(e.firstResult, out));
    if (cost < reduced)
      chosen = c, reduced = cost;
  }
  return chosen;
}

bool Partitioner::someUserNeedsWhole(int32_t id) const {
  for (uint32_t u = index.userStart[id]; u < index.userStart[id + 1]; ++u) {
    auto [k, operand] = index.users[u];
    const OpEntry &user = index.ops[k];
    if (user.kind == Index::Kind::Regroup)
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
      if (j != operand && other < definedBelow &&
          (layoutOf(other).isSplit() || layoutOf(other).isPartial()))
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
  const ShardingRule &rule = index.rules[e.rule];
  bool reduces = f.kind == ShardingFactor::Kind::Reduction;
  if (reduces && !(rule.lookup && !rule.lookup->intoResult)) {
    for (unsigned i = 0; i < e.numOperands; ++i) {
      Pad want = i < f.operandPads.size() && f.operandPads[i]
                     ? identityOf(*f.operandPads[i])
                     : identityOf(f.combine);
      int32_t id = operandId(e, i);
      if (f.operandDims[i] >= 0 && padAfter(id, to[i]) != want)
        operands[i] = mask(operands[i], id, to[i], want);
    }
    return;
  }
  // What the results hold in the padding, where it is known: zeros
  // scattered nowhere, products and sums of zeros, moved zeros. A product
  // is zero there only where every operand that has the padding is: zero
  // times garbage may be NaN (0 * inf), so q with zero-padded heads times
  // scores with garbage ones is not known zero.
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
  bool zeros = false;
  switch (rule.padFlow) {
  case PadFlow::None:
    break;
  case PadFlow::Always:
    zeros = true;
    break;
  case PadFlow::Product:
    zeros = anyZero && allZero;
    break;
  case PadFlow::Sums:
    zeros = allCarry && allZero;
    break;
  case PadFlow::Moves:
    zeros = allZero;
    break;
  }
  if (zeros)
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
  // ZeRO 3: outside the update an op reads a parameter whole, gathered for
  // it alone. The op sees the parameter replicated, whatever its kind (a
  // reshape would otherwise carry the dp split into the activations).
  SmallVector<std::tuple<int32_t, Value, Layout>> shards;
  if (shardParameters && rewrite && phase != "optimizer")
    for (unsigned i = 0; i < e.numOperands; ++i) {
      int32_t id = operandId(e, i);
      if (!shardedParameter(id))
        continue;
      Value whole = convert(id, Layout::replicated());
      shards.push_back({id, mapping.lookup(index.values[id]), layouts[id]});
      mapping.map(index.values[id], whole);
      layouts[id] = Layout::replicated();
    }
  auto restore = llvm::make_scope_exit([&] {
    for (auto &[id, local, layout] : shards) {
      mapping.map(index.values[id], local);
      layouts[id] = layout;
    }
  });
  using Kind = Index::Kind;
  switch (e.kind) {
  case Kind::Source:
    emit(e, {}, {Layout::replicated()});
    return success();
  case Kind::Regroup:
    return visitRegroup(e);
  case Kind::Window:
    if (succeeded(visitBlockWindow(e, index.rules[e.rule])))
      return success();
    break;
  case Kind::Join:
    if (succeeded(visitBlockJoin(e, index.rules[e.rule])))
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

/// The batch that data parallelism splits: the first dimension most data
/// inputs share (ties: the larger). An input whose first dimension differs
/// (a [1, T] table of positions, a scalar) is the same on every rank.
int64_t Partitioner::batchSize() {
  std::map<int64_t, int> votes;
  for (BlockArgument arg : func.getArguments())
    if (func.getArgAttr(arg.getArgNumber(), kInputAttr) &&
        typeOf(arg).getRank() > 0)
      ++votes[typeOf(arg).getDimSize(0)];
  int64_t best = -1;
  int most = 0;
  for (auto [size, n] : votes)
    if (n >= most)
      best = size, most = n;
  return best;
}

/// ZeRO stage 1: optimizer state split along its first dimension the axis
/// divides (a vocabulary of 61 rows by its width); otherwise as its
/// parameter.
Layout Partitioner::stateLayout(RankedTensorType type, Layout param,
                                StringRef name) const {
  if (!shardOptimizerState)
    return param;
  // On a dp x tp mesh, not the dimension tp splits (then the two splits
  // are of different dimensions, each a plain chunk).
  int64_t tpDim = -1;
  if (tensorLayouts)
    if (auto it = tensorLayouts->find(name);
        it != tensorLayouts->end() && it->second.isSplit())
      tpDim = it->second.dim;
  for (int64_t d = 0; d < type.getRank(); ++d)
    if (d != tpDim && type.getDimSize(d) % tp == 0 && type.getDimSize(d) >= tp)
      return Layout::split(d);
  return param;
}

std::optional<Layout> Partitioner::gradientHome(const OpEntry &e) const {
  if (e.numResults != 1 || !runParams)
    return std::nullopt;
  auto g = index.gradientOf.find(e.firstResult);
  if (g == index.gradientOf.end())
    return std::nullopt;
  auto p = runParams->find(g->second);
  if (p == runParams->end() || !p->second.isSplit())
    return std::nullopt;
  return canonicalFor(e.firstResult, p->second);
}

FailureOr<PartitionResult> Partitioner::run(const ParameterLayouts &params) {
  Block &body = func.getBody().front();
  runParams = &params;
  if (rewrite) {
    classifyPhases();
    // Bucket numbers stay unique in the function across walks (the dp
    // pass's, then the tp pass's) until --cleave-bucket-gradients merges.
    func.walk([&](AllReduceOp op) {
      if (auto n = op->getAttrOfType<IntegerAttr>(kBucketAttr))
        buckets = std::max(buckets, n.getInt() + 1);
    });
  }
  auto layoutOfParameter = [&](StringRef name) {
    auto it = params.find(name);
    return it == params.end() ? Layout::replicated() : it->second;
  };
  // Argument layouts: parameters and their optimizer state as chosen, the
  // rest (data, buffers, step) replicated. Parameters, their gradients and
  // their optimizer state count towards the per-rank memory.
  SmallVector<Layout> argLayouts;
  int64_t batch = splitInputs ? batchSize() : -1;
  for (BlockArgument arg : func.getArguments()) {
    unsigned i = arg.getArgNumber();
    StringRef param = index.argParameter[i];
    Layout l = param.empty() ? Layout() : layoutOfParameter(param);
    if (!param.empty() && (!index.argIsParameter[i] || shardParameters))
      l = stateLayout(typeOf(arg), l, param);
    bool splitInput = splitInputs && func.getArgAttr(i, kInputAttr) &&
                      typeOf(arg).getRank() > 0 &&
                      typeOf(arg).getDimSize(0) == batch;
    if (splitInput) {
      auto type = typeOf(arg);
      if (type.getDimSize(0) % tp)
        return func.emitError("input ")
               << func.getArgAttr(i, kInputAttr) << " of type " << type
               << ": its batch of " << (type.getRank() ? type.getDimSize(0) : 0)
               << " rows does not divide over dp = " << tp
               << " (give a batch that is a multiple of dp)";
      l = Layout::split(0);
    }
    if (l.isSplit() && !splitInput) {
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
    // Arguments are the first values of the index. A weight that trains
    // also holds its gradient; a frozen one only itself.
    if (!param.empty())
      result.memoryBytes +=
          localBytes(static_cast<int32_t>(i), l) *
          (index.argIsParameter[i] && !index.argIsFrozen[i] ? 2 : 1);
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
  for (const OpEntry &e : index.ops) {
    if (failed(visit(e))) {
      delete newBody;
      return failure();
    }
    if (earlyBucketBytes >= 0)
      reduceFinishedGradients(e);
  }

  definedBelow = static_cast<int32_t>(index.values.size());
  // Results in the layouts the trainer keeps: the loss replicated; new
  // parameters, gradients and optimizer state as their parameter.
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  // Named for profiles: these collectives serve the step's results.
  loc = NameLoc::get(builder.getStringAttr("(step results)"), ret.getLoc());
  SmallVector<Value> results;
  SmallVector<Layout> resultLayouts;
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    StringRef param = index.resultParameter[i];
    Layout want = param.empty() ? Layout() : layoutOfParameter(param);
    if (!param.empty() && (func.getResultAttr(i, kOptimizerStateAttr) ||
                           (shardParameters && !index.resultIsGradient[i])))
      want = stateLayout(typeOf(v), want, param);
    phase = index.resultPhase[i];
    int32_t id = idOf(v);
    // ZeRO 2: a gradient reduce-scattered for its update is returned as
    // that shard, not reduced a second time.
    if (scatterGradients && index.resultIsGradient[i]) {
      Layout shard = canonicalFor(id, stateLayout(typeOf(v), want, param));
      if (countedConversions.count(key(id, shard)))
        want = shard;
    }
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
  recordSplits(argLayouts, resultLayouts);
  return result;
}

/// Marks the function's split arguments and results with their
/// #cleave.layout: the first axis's dim (and blocks, granule), or, for the
/// dp pass of ZeRO on a dp x tp mesh, dp_dim (data inputs keep dim: the
/// feed cuts them).
void Partitioner::recordSplits(ArrayRef<Layout> argLayouts,
                               ArrayRef<Layout> resultLayouts) {
  // Each dictionary is built whole and all are set at once (setArgAttr
  // rebuilds the array of every argument's dictionary per call).
  auto mark = [&](DictionaryAttr old, const Layout &l, bool dpSplit) {
    NamedAttrList attrs;
    if (old)
      attrs.append(old.getValue());
    // The dp pass of ZeRO on a dp x tp mesh runs first: each pass keeps
    // what the other recorded.
    MLIRContext *ctx = func.getContext();
    LayoutAttr was = old ? old.getAs<LayoutAttr>(kLayoutAttr) : LayoutAttr();
    if (dpSplit)
      attrs.set(kLayoutAttr,
                was ? LayoutAttr::get(ctx, was.getDim(), was.getBlocks(),
                                      was.getGranule(), l.dim)
                    : LayoutAttr::get(ctx, -1, 1, 1, l.dim));
    else if (l.isSplit())
      attrs.set(kLayoutAttr, LayoutAttr::get(ctx, l.dim, l.blocks, l.granule,
                                             was ? was.getDpDim() : -1));
    return attrs.getDictionary(func.getContext());
  };
  SmallVector<DictionaryAttr> args, results;
  for (auto [i, l] : llvm::enumerate(argLayouts))
    args.push_back(
        mark(func.getArgAttrDict(i), l,
             l.isSplit() && tensorLayouts && !func.getArgAttr(i, kInputAttr)));
  for (auto [i, l] : llvm::enumerate(resultLayouts))
    results.push_back(
        mark(func.getResultAttrDict(i), l, l.isSplit() && tensorLayouts));
  for (unsigned i = args.size(); i < func.getNumArguments(); ++i)
    args.push_back(func.getArgAttrDict(i));
  for (unsigned i = results.size(); i < func.getNumResults(); ++i)
    results.push_back(func.getResultAttrDict(i));
  func.setAllArgAttrs(args);
  func.setAllResultAttrs(results);
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
               func.getArgAttr(arg.getArgNumber(), kStepAttr) ||
               func.getArgAttr(arg.getArgNumber(), kHyperparameterAttr);
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

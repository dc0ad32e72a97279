//===- PartitionShapes.cpp - Reshapes, blocks, padding ----------*- C++ -*-===//
//
// The partitioner's shape-moving forms (ShardingForm): a regrouping keeps
// a split where the chunks stay whole rows of a dimension (heads, blocks,
// padding included), windows of whole blocks of a fused projection and
// their adjoints stay local, joins of blocked splits give more blocks; and
// the helpers that pad, trim, mask and embed local chunks.
//
//===----------------------------------------------------------------------===//

#include "Partitioner.h"

using namespace mlir;
using namespace mlir::cleave;
using namespace mlir::cleave::partitioning;

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
  // ... and a comparison of each index along d with the rank's own range
  // [r * chunk, (r + 1) * chunk) keeps only the rank's own: r is the rank's
  // slice of iota(tp). The IR stays the same size whatever the dimension's
  // (a constant would hold tp * size flags).
  int64_t size = global.getDimSize(d);
  Type i64 = builder.getI64Type();
  SmallVector<int64_t> maskShape(rank, 1);
  maskShape[d] = size;
  SmallVector<int64_t> ones(rank, 1);
  Value index =
      IotaOp::create(builder, loc, RankedTensorType::get(maskShape, i64),
                     builder.getI64IntegerAttr(d));
  Value ranks = IotaOp::create(builder, loc, RankedTensorType::get({tp}, i64),
                               builder.getI64IntegerAttr(0));
  SmallVector<int64_t> axes{meshAxis};
  Value rankId = ShardSliceOp::create(
      builder, loc, RankedTensorType::get({1}, i64), ranks, axes, 0, 1);
  rankId =
      ReshapeOp::create(builder, loc, RankedTensorType::get(ones, i64), rankId);
  Value chunkSize = ConstantOp::create(
      builder, loc,
      DenseElementsAttr::get(RankedTensorType::get(ones, i64),
                             builder.getI64IntegerAttr(chunk)));
  Value lo = MulOp::create(builder, loc, rankId, chunkSize);
  Value hi = AddOp::create(builder, loc, lo, chunkSize);
  Value mine = AndOp::create(
      builder, loc, CmpOp::create(builder, loc, CmpPredicate::ge, index, lo),
      CmpOp::create(builder, loc, CmpPredicate::lt, index, hi));
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
  // Which of the padded whole's indices are real: viewing dimension d as
  // [blocks, chunk * tp], the first `block` of each row; every rank takes
  // its chunk. An iota and a comparison, so that the IR does not grow with
  // the dimension (a constant would hold a flag per index).
  int64_t rank = part.getRank(), extent = chunk * tp;
  Type i64 = builder.getI64Type(), i1 = builder.getI1Type();
  SmallVector<int64_t> rows(rank + 1, 1);
  rows[d] = l.blocks;
  rows[d + 1] = extent;
  Value inRow = IotaOp::create(builder, loc, RankedTensorType::get(rows, i64),
                               builder.getI64IntegerAttr(d + 1));
  Value realCount = ConstantOp::create(
      builder, loc,
      DenseElementsAttr::get(
          RankedTensorType::get(SmallVector<int64_t>(rank + 1, 1), i64),
          builder.getI64IntegerAttr(block)));
  Value real = CmpOp::create(builder, loc, CmpPredicate::lt, inRow, realCount);
  SmallVector<int64_t> shape(rank, 1);
  shape[d] = l.blocks * extent;
  Value all =
      ReshapeOp::create(builder, loc, RankedTensorType::get(shape, i1), real);
  shape[d] = l.blocks * chunk;
  SmallVector<int64_t> axes{meshAxis};
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

LogicalResult Partitioner::visitRegroup(const OpEntry &e) {
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
  ArrayRef<int64_t> a = typeOf(e.op->getOperand(0)).getShape();
  ArrayRef<int64_t> b = typeOf(e.op->getResult(0)).getShape();
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
          b[d] == blocks * (block / innerOut)) {
        // Padded, e's chunks must hold the same rows: its granule is the
        // input's in rows of e where that is whole, else one row (6 heads
        // on 4 ranks, 2 each, reshaped into 3 groups of 2: one group each).
        Layout l = Layout::split(
            static_cast<int64_t>(d), blocks,
            padded && granule % innerOut == 0 ? granule / innerOut : 1);
        if (!padded || l.chunk(block / innerOut, tp) * innerOut == chunk) {
          target = l;
          break;
        }
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
    embeddedRegroup[e.firstResult] = input;
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

LogicalResult Partitioner::visitBlockWindow(const OpEntry &e,
                                            const ShardingRule &rule) {
  Layout in = layoutOf(operandId(e, 0));
  if (!in.isSplit() || !rule.window)
    return failure();
  const ShardingWindow &w = *rule.window;
  int64_t d = in.dim;
  Value input = e.op->getOperand(0), result = e.op->getResult(0);
  ArrayRef<int64_t> a = typeOf(input).getShape();
  ArrayRef<int64_t> b = typeOf(result).getShape();
  for (size_t i = 0; i < a.size(); ++i)
    if (static_cast<int64_t>(i) != d &&
        (a[i] != b[i] || w.starts[i] != 0 || w.steps[i] != 1))
      return failure();
  int64_t block = a[d] / in.blocks, start = w.starts[d];
  if (w.steps[d] != 1 || start % block || b[d] % block || b[d] == a[d])
    return failure();
  Layout out = Layout::split(d, b[d] / block, in.granule);
  layouts[e.firstResult] = canonicalFor(e.firstResult, out);
  pads[e.firstResult] = pads[operandId(e, 0)];
  splitSource[e.firstResult] = splitSource[operandId(e, 0)];
  if (!rewrite)
    return success();
  // The rank's op: the same window, its start moved to the local blocks.
  SmallVector<int64_t> starts(w.starts.begin(), w.starts.end());
  starts[d] = start / block * in.chunk(block, tp);
  IRMapping local;
  local.map(input, mapping.lookup(input));
  Operation *copy = builder.clone(*e.op, local);
  copy->setAttr(w.startsAttr, builder.getDenseI64ArrayAttr(starts));
  copy->getResult(0).setType(localType(typeOf(result), out));
  mapping.map(result, copy->getResult(0));
  return success();
}

LogicalResult Partitioner::visitBlockJoin(const OpEntry &e,
                                          const ShardingRule &rule) {
  int64_t axis = rule.joinDim, blocks = 0, block = -1;
  SmallVector<Layout, 4> ins;
  bool zero = true;
  for (unsigned i = 0; i < e.numOperands; ++i) {
    Layout l = layoutOf(operandId(e, i));
    int64_t size = typeOf(e.op->getOperand(i)).getDimSize(axis);
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

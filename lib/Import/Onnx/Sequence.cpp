//===- Sequence.cpp - ONNX sequence ops, resolved at import ---------------===//
//
// A sequence is a list of tensors. The exporters emit them where a split's
// sizes are not known to the tracer (torch.onnx turns `x.chunk(2, -1)` on a
// tensor reshaped with traced sizes into SplitToSequence + SequenceAt) and
// for lists built in loops. Shapes are static here, so every sequence has a
// known length and every position is a constant: the importer keeps the
// elements as a list of tensor values and the ops resolve to slices,
// concatenations or nothing at all. No cleave op or runtime kernel handles
// sequences.
//
//===----------------------------------------------------------------------===//

#include "NodeContext.h"

using namespace mlir;
using namespace mlir::cleave;
using namespace mlir::cleave::onnx_import;

namespace {

/// A constant position into a sequence of \p length (negative counts from
/// the end); \p insert allows position == length.
FailureOr<size_t> position(NodeContext &ctx, unsigned input, size_t length,
                           bool insert) {
  FailureOr<SmallVector<int64_t>> p = ctx.constantInts(input, "position");
  if (failed(p))
    return failure();
  if (p->size() != 1)
    return ctx.error() << "position must be a scalar";
  int64_t n = static_cast<int64_t>(length), i = (*p)[0];
  if (i < 0)
    i += n;
  if (i < 0 || i > n || (i == n && !insert))
    return ctx.error() << "position " << (*p)[0]
                       << " is out of range for a sequence of " << length
                       << " tensors";
  return static_cast<size_t>(i);
}

LogicalResult splitToSequence(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  int64_t rank = NodeContext::rankOf(*x);
  FailureOr<int64_t> axis = ctx.normaliseAxis(ctx.attrInt("axis", 0), rank);
  if (failed(axis))
    return failure();
  int64_t size = NodeContext::typeOf(*x).getDimSize(*axis);
  SmallVector<int64_t> sizes;
  bool squeeze = false;
  if (!ctx.hasInput(1)) {
    // Pieces of 1, squeezed unless keepdims.
    sizes.assign(size, 1);
    squeeze = ctx.attrInt("keepdims", 1) == 0;
  } else {
    auto split = ctx.constantInput(1);
    FailureOr<SmallVector<int64_t>> values = ctx.constantInts(1, "split");
    if (failed(values))
      return failure();
    if (split && split->getType().getRank() == 0) {
      int64_t chunk = (*values)[0];
      if (chunk <= 0)
        return ctx.error() << "split must be positive, got " << chunk;
      for (int64_t start = 0; start < size; start += chunk)
        sizes.push_back(std::min(chunk, size - start));
    } else {
      sizes = *values;
    }
  }
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0)
      return ctx.error() << "split sizes must be >= 0";
    total += s;
  }
  if (total != size)
    return ctx.error() << "split sizes sum to " << total << ", dimension "
                       << *axis << " has size " << size;
  SmallVector<Value> elements;
  int64_t start = 0;
  for (int64_t s : sizes) {
    Value piece = ctx.sliceAxis(*x, *axis, start, s);
    start += s;
    if (squeeze) {
      SmallVector<int64_t> shape(NodeContext::typeOf(piece).getShape());
      shape.erase(shape.begin() + *axis);
      piece = ctx.reshape(piece, shape);
    }
    elements.push_back(piece);
  }
  ctx.setSequenceOutput(0, std::move(elements));
  return success();
}

LogicalResult sequenceAt(NodeContext &ctx) {
  FailureOr<SmallVector<Value>> seq = ctx.sequenceInput(0);
  if (failed(seq))
    return failure();
  FailureOr<size_t> i = position(ctx, 1, seq->size(), false);
  if (failed(i))
    return failure();
  ctx.setOutput(0, (*seq)[*i]);
  return success();
}

LogicalResult sequenceConstruct(NodeContext &ctx) {
  SmallVector<Value> elements;
  for (unsigned i = 0; i < ctx.numInputs(); ++i) {
    FailureOr<Value> v = ctx.input(i);
    if (failed(v))
      return failure();
    elements.push_back(*v);
  }
  ctx.setSequenceOutput(0, std::move(elements));
  return success();
}

LogicalResult sequenceEmpty(NodeContext &ctx) {
  ctx.setSequenceOutput(0, {});
  return success();
}

LogicalResult sequenceInsert(NodeContext &ctx) {
  FailureOr<SmallVector<Value>> seq = ctx.sequenceInput(0);
  FailureOr<Value> v = ctx.input(1);
  if (failed(seq) || failed(v))
    return failure();
  size_t at = seq->size();
  if (ctx.hasInput(2)) {
    FailureOr<size_t> i = position(ctx, 2, seq->size(), true);
    if (failed(i))
      return failure();
    at = *i;
  }
  seq->insert(seq->begin() + at, *v);
  ctx.setSequenceOutput(0, std::move(*seq));
  return success();
}

LogicalResult sequenceErase(NodeContext &ctx) {
  FailureOr<SmallVector<Value>> seq = ctx.sequenceInput(0);
  if (failed(seq))
    return failure();
  if (seq->empty())
    return ctx.error() << "erases from an empty sequence";
  size_t at = seq->size() - 1;
  if (ctx.hasInput(1)) {
    FailureOr<size_t> i = position(ctx, 1, seq->size(), false);
    if (failed(i))
      return failure();
    at = *i;
  }
  seq->erase(seq->begin() + at);
  ctx.setSequenceOutput(0, std::move(*seq));
  return success();
}

LogicalResult sequenceLength(NodeContext &ctx) {
  FailureOr<SmallVector<Value>> seq = ctx.sequenceInput(0);
  if (failed(seq))
    return failure();
  auto type = RankedTensorType::get({}, ctx.b.getI64Type());
  ctx.setOutput(0, ConstantOp::create(
                       ctx.b, DenseElementsAttr::get(
                                  type, ctx.b.getI64IntegerAttr(seq->size()))));
  return success();
}

/// Concat along axis, or (new_axis) stacked along a new one.
LogicalResult concatFromSequence(NodeContext &ctx) {
  FailureOr<SmallVector<Value>> seq = ctx.sequenceInput(0);
  if (failed(seq))
    return failure();
  if (seq->empty())
    return ctx.error() << "concatenates an empty sequence";
  bool stack = ctx.attrInt("new_axis", 0) != 0;
  int64_t rank = NodeContext::rankOf(seq->front());
  FailureOr<int64_t> axis =
      ctx.normaliseAxis(ctx.attrInt("axis", 0), stack ? rank + 1 : rank);
  if (failed(axis))
    return failure();
  SmallVector<Value> parts;
  for (Value v : *seq) {
    if (NodeContext::rankOf(v) != rank)
      return ctx.error() << "sequence elements differ in rank";
    if (stack) {
      SmallVector<int64_t> shape(NodeContext::typeOf(v).getShape());
      shape.insert(shape.begin() + *axis, 1);
      v = ctx.reshape(v, shape);
    }
    parts.push_back(v);
  }
  Value out = ctx.concat(parts, *axis);
  if (!out)
    return failure();
  ctx.setOutput(0, out);
  return success();
}

} // namespace

void onnx_import::registerSequenceHandlers(HandlerTable &t) {
  t.on("SplitToSequence", 11, splitToSequence);
  t.on("SequenceAt", 11, sequenceAt);
  t.on("SequenceConstruct", 11, sequenceConstruct);
  t.on("SequenceEmpty", 11, sequenceEmpty);
  t.on("SequenceInsert", 11, sequenceInsert);
  t.on("SequenceErase", 11, sequenceErase);
  t.on("SequenceLength", 11, sequenceLength);
  t.on("ConcatFromSequence", 11, concatFromSequence);
}

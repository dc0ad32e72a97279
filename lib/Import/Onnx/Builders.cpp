//===- Builders.cpp - NodeContext's helpers for building cleave ops -------===//
//
// The small pieces every handler composes (reshapes, rank alignment,
// splats, slices along one axis, concatenation, transposes, axis
// normalisation), kept apart from the graph walk in OnnxImporter.cpp.
//
//===----------------------------------------------------------------------===//

#include "NodeContext.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::cleave;
using namespace mlir::cleave::onnx_import;

// Null in, null out (as Expr's ops): a failed step of a composed
// lowering (a diagnostic already emitted) reaches the handler's check.
Value NodeContext::reshape(Value v, ArrayRef<int64_t> shape) {
  if (!v)
    return Value();
  auto type = RankedTensorType::get(shape, typeOf(v).getElementType());
  if (type == v.getType())
    return v;
  return b.createOrFold<ReshapeOp>(type, v);
}

Value NodeContext::alignRank(Value v, int64_t rank) {
  int64_t have = rankOf(v);
  if (have >= rank)
    return v;
  SmallVector<int64_t> shape(rank - have, 1);
  llvm::append_range(shape, typeOf(v).getShape());
  return reshape(v, shape);
}

SmallVector<Value> NodeContext::alignRanks(ArrayRef<Value> vs) {
  int64_t rank = 0;
  for (Value v : vs)
    rank = std::max(rank, rankOf(v));
  SmallVector<Value> out;
  for (Value v : vs)
    out.push_back(alignRank(v, rank));
  return out;
}

/// \p value truncated into integer type \p element's range (NaN: 0).
static int64_t saturateToInt(double value, Type element) {
  unsigned width = std::min(element.getIntOrFloatBitWidth(), 64u);
  bool isUnsigned = element.isUnsignedInteger() || width == 1;
  double lo = isUnsigned ? 0 : -std::ldexp(1.0, width - 1);
  double hi =
      isUnsigned ? std::ldexp(1.0, width) - 1 : std::ldexp(1.0, width - 1) - 1;
  if (value != value)
    return 0;
  if (value <= lo)
    return width == 64 && !isUnsigned ? std::numeric_limits<int64_t>::min()
                                      : static_cast<int64_t>(lo);
  if (value >= hi)
    return width == 64 ? std::numeric_limits<int64_t>::max()
                       : static_cast<int64_t>(hi);
  return static_cast<int64_t>(value);
}

Value NodeContext::splat(Type element, ArrayRef<int64_t> shape, double value) {
  auto type = RankedTensorType::get(shape, element);
  Attribute scalar;
  if (isa<FloatType>(element))
    scalar = b.getFloatAttr(element, value);
  else
    // Saturated to the type, as the runtime's casts are: Clip-6's float
    // bounds (+-3.4e38 by default) applied to integers must not overflow.
    scalar = b.getIntegerAttr(element, saturateToInt(value, element));
  return ConstantOp::create(b, DenseElementsAttr::get(type, scalar));
}

Value NodeContext::sliceAxis(Value v, int64_t axis, int64_t start,
                             int64_t size) {
  if (!v)
    return Value();
  auto type = typeOf(v);
  SmallVector<int64_t> starts(type.getRank(), 0), steps(type.getRank(), 1);
  SmallVector<int64_t> shape(type.getShape());
  starts[axis] = size ? start : 0;
  shape[axis] = size;
  return b.createOrFold<SliceOp>(type.clone(shape), v,
                                 b.getDenseI64ArrayAttr(starts),
                                 b.getDenseI64ArrayAttr(steps));
}

Value NodeContext::concat(ArrayRef<Value> parts, int64_t axis) {
  SmallVector<int64_t> shape(typeOf(parts[0]).getShape());
  shape[axis] = 0;
  for (Value p : parts)
    shape[axis] += typeOf(p).getDimSize(axis);
  auto type = typeOf(parts[0]).clone(shape);
  SmallVector<Value> nonEmpty;
  for (Value p : parts)
    if (typeOf(p).getNumElements() != 0)
      nonEmpty.push_back(p);
  if (nonEmpty.empty())
    return splat(type.getElementType(), shape, 0.0);
  if (nonEmpty.size() == 1)
    return nonEmpty.front();
  return ConcatOp::create(b, type, nonEmpty, b.getI64IntegerAttr(axis));
}

Value NodeContext::transpose(Value v, ArrayRef<int64_t> perm) {
  TransposeOp::Properties props;
  props.permutation = b.getDenseI64ArrayAttr(perm);
  FailureOr<TransposeOp> t = create<TransposeOp>({v}, props);
  return succeeded(t) ? t->getResult() : Value();
}

FailureOr<int64_t> NodeContext::normaliseAxis(int64_t axis, int64_t rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    return error() << "axis " << axis << " is out of range for rank " << rank;
  return a;
}

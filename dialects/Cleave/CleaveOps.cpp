//===- CleaveOps.cpp - Verifiers, shape inference, folders ------*- C++ -*-===//
//
// Result-type inference doubles as the verifier of most ops: a bad operand
// shape is reported once, by the code that computes the result shape.
//
//===----------------------------------------------------------------------===//

#include "Cleave/CleaveOps.h"
#include "Cleave/CleaveAttrNames.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace mlir::cleave;

static ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}
static Type elementTypeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getElementType();
}

/// Normalises a possibly negative dimension; failure when out of range.
static FailureOr<int64_t> normaliseDim(std::optional<Location> loc, int64_t dim,
                                       int64_t rank, StringRef what) {
  int64_t d = dim < 0 ? dim + rank : dim;
  if (d < 0 || d >= rank)
    return emitOptionalError(loc, what, " ", dim, " is out of range for rank ",
                             rank);
  return d;
}

FailureOr<SmallVector<int64_t>>
mlir::cleave::broadcastShapes(std::optional<Location> loc,
                              ArrayRef<ArrayRef<int64_t>> shapes) {
  SmallVector<int64_t> result(shapes.front());
  for (ArrayRef<int64_t> shape : shapes.drop_front()) {
    if (shape.size() != result.size())
      return emitOptionalError(loc, "operands must have the same rank, got ",
                               result.size(), " and ", shape.size());
    for (auto [r, s] : llvm::zip(result, shape)) {
      if (r == s || s == 1)
        continue;
      if (r != 1)
        return emitOptionalError(loc,
                                 "operand shapes do not broadcast: "
                                 "dimension sizes ",
                                 r, " and ", s);
      r = s;
    }
  }
  return result;
}

/// Infers the broadcast result of operands that share one element type.
static LogicalResult inferBroadcast(std::optional<Location> loc,
                                    ValueRange operands, Type resultElement,
                                    SmallVectorImpl<Type> &inferred) {
  SmallVector<ArrayRef<int64_t>> shapes;
  for (Value v : operands)
    shapes.push_back(shapeOf(v));
  FailureOr<SmallVector<int64_t>> shape = broadcastShapes(loc, shapes);
  if (failed(shape))
    return failure();
  inferred.push_back(RankedTensorType::get(*shape, resultElement));
  return success();
}

static LogicalResult sameElementTypes(std::optional<Location> loc,
                                      ValueRange operands) {
  Type first = elementTypeOf(operands.front());
  for (Value v : operands.drop_front())
    if (elementTypeOf(v) != first)
      return emitOptionalError(loc, "operands must have one element type, got ",
                               first, " and ", elementTypeOf(v));
  return success();
}

#define CLEAVE_INFER_BINARY(OP)                                                \
  LogicalResult OP::inferReturnTypes(                                          \
      MLIRContext *, std::optional<Location> loc, Adaptor adaptor,             \
      SmallVectorImpl<Type> &inferred) {                                       \
    ValueRange operands = adaptor.getOperands();                               \
    if (failed(sameElementTypes(loc, operands)))                               \
      return failure();                                                        \
    return inferBroadcast(loc, operands, elementTypeOf(operands[0]),           \
                          inferred);                                           \
  }
CLEAVE_INFER_BINARY(AddOp)
CLEAVE_INFER_BINARY(SubOp)
CLEAVE_INFER_BINARY(MulOp)
CLEAVE_INFER_BINARY(DivOp)
CLEAVE_INFER_BINARY(PowOp)
CLEAVE_INFER_BINARY(MaxOp)
CLEAVE_INFER_BINARY(MinOp)
CLEAVE_INFER_BINARY(AndOp)
CLEAVE_INFER_BINARY(OrOp)
CLEAVE_INFER_BINARY(XorOp)
#undef CLEAVE_INFER_BINARY

/// Whether \p attr is a splat equal to \p value (float or integer).
static bool isSplatOf(Attribute attr, double value) {
  auto dense = dyn_cast_if_present<DenseElementsAttr>(attr);
  if (!dense || !dense.isSplat())
    return false;
  if (isa<FloatType>(dense.getElementType()))
    return dense.getSplatValue<APFloat>().convertToDouble() == value;
  if (dense.getElementType().isSignlessInteger(1))
    return false;
  return static_cast<double>(dense.getSplatValue<APInt>().getSExtValue()) ==
         value;
}

/// `x op c` is `x` when the constant \p rhs is the identity and \p lhs
/// already has the result's type (a broadcast would change the shape).
static OpFoldResult foldRightIdentity(Value lhs, Attribute rhs, Type result,
                                      double identity) {
  if (lhs.getType() == result && isSplatOf(rhs, identity))
    return lhs;
  return {};
}

OpFoldResult AddOp::fold(FoldAdaptor adaptor) {
  if (OpFoldResult r =
          foldRightIdentity(getLhs(), adaptor.getRhs(), getType(), 0.0))
    return r;
  return foldRightIdentity(getRhs(), adaptor.getLhs(), getType(), 0.0);
}

OpFoldResult SubOp::fold(FoldAdaptor adaptor) {
  return foldRightIdentity(getLhs(), adaptor.getRhs(), getType(), 0.0);
}

OpFoldResult MulOp::fold(FoldAdaptor adaptor) {
  if (OpFoldResult r =
          foldRightIdentity(getLhs(), adaptor.getRhs(), getType(), 1.0))
    return r;
  return foldRightIdentity(getRhs(), adaptor.getLhs(), getType(), 1.0);
}

OpFoldResult DivOp::fold(FoldAdaptor adaptor) {
  return foldRightIdentity(getLhs(), adaptor.getRhs(), getType(), 1.0);
}

LogicalResult CmpOp::inferReturnTypes(MLIRContext *ctx,
                                      std::optional<Location> loc,
                                      Adaptor adaptor,
                                      SmallVectorImpl<Type> &inferred) {
  ValueRange operands = {adaptor.getLhs(), adaptor.getRhs()};
  if (failed(sameElementTypes(loc, operands)))
    return failure();
  return inferBroadcast(loc, operands, IntegerType::get(ctx, 1), inferred);
}

LogicalResult SelectOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &inferred) {
  ValueRange values = {adaptor.getOnTrue(), adaptor.getOnFalse()};
  if (failed(sameElementTypes(loc, values)))
    return failure();
  return inferBroadcast(loc, adaptor.getOperands(),
                        elementTypeOf(adaptor.getOnTrue()), inferred);
}

//===----------------------------------------------------------------------===//
// ConstantOp, CastOp
//===----------------------------------------------------------------------===//

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

LogicalResult CastOp::verify() {
  if (shapeOf(getInput()) != shapeOf(getResult()))
    return emitOpError("changes the shape from ")
           << getInput().getType() << " to " << getType();
  return success();
}

OpFoldResult CastOp::fold(FoldAdaptor) {
  if (getInput().getType() == getType())
    return getInput();
  // x -> wider float -> x's type is x: widening a float is exact (bf16 and
  // f16 to f32 or f64, f32 to f64), so the round trip changes nothing.
  auto inner = getInput().getDefiningOp<CastOp>();
  if (!inner)
    return {};
  // A small integer widened, then converted: one conversion (an int8
  // weight's i8 -> i32 -> f32 is i8 -> f32, which the matmul then reads).
  auto narrowInt = dyn_cast<IntegerType>(elementTypeOf(inner.getInput()));
  auto midInt = dyn_cast<IntegerType>(elementTypeOf(getInput()));
  Type to = elementTypeOf(getResult());
  if (narrowInt && midInt && narrowInt.getWidth() <= 16 &&
      narrowInt.getWidth() > 1 && midInt.getWidth() > narrowInt.getWidth() &&
      (isa<FloatType>(to) ||
       (to.isInteger() && to.getIntOrFloatBitWidth() >= midInt.getWidth()))) {
    getInputMutable().assign(inner.getInput());
    return getResult();
  }
  if (inner.getInput().getType() != getType())
    return {};
  auto from = dyn_cast<FloatType>(elementTypeOf(getResult()));
  auto mid = dyn_cast<FloatType>(elementTypeOf(getInput()));
  bool exact = from && mid && (mid.isF32() || mid.isF64()) &&
               (from.isBF16() || from.isF16() || from.isF32()) &&
               mid.getWidth() > from.getWidth();
  if (exact)
    return inner.getInput();
  return {};
}

//===----------------------------------------------------------------------===//
// MatmulOp, ReduceOp, softmax, norms
//===----------------------------------------------------------------------===//

LogicalResult
MatmulDequantOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                  Adaptor adaptor,
                                  SmallVectorImpl<Type> &inferred) {
  auto lhs = cast<RankedTensorType>(adaptor.getLhs().getType());
  auto weight = cast<RankedTensorType>(adaptor.getWeight().getType());
  Type w = weight.getElementType();
  if (!lhs.getElementType().isF32())
    return emitOptionalError(loc, "lhs must be f32, got ", lhs);
  if (!w.isSignlessInteger(8) && !w.isBF16() && !w.isF16())
    return emitOptionalError(loc, "weight must be i8, bf16 or f16, got ", w);
  if (lhs.getRank() < 2 || weight.getRank() != 2)
    return emitOptionalError(loc, "lhs must have rank >= 2 and the weight 2, ",
                             "got ", lhs, " and ", weight);
  int64_t rows = weight.getDimSize(0);
  bool t = adaptor.getTransposeRhs();
  int64_t k = t ? weight.getDimSize(1) : rows;
  int64_t n = t ? rows : weight.getDimSize(1);
  if (lhs.getShape().back() != k)
    return emitOptionalError(loc, "contracting dimensions differ: ",
                             lhs.getShape().back(), " and ", k);
  if (Value s = adaptor.getScale()) {
    auto scale = cast<RankedTensorType>(s.getType());
    int64_t cols = weight.getDimSize(1);
    int64_t groups = scale.getRank() == 2 ? scale.getDimSize(1) : 1;
    if (!scale.getElementType().isF32() || scale.getRank() < 1 ||
        scale.getRank() > 2 || scale.getDimSize(0) != rows || groups < 1 ||
        cols % groups != 0)
      return emitOptionalError(
          loc, "scale must be f32 [", rows, "] (one per weight row) or [", rows,
          ", groups] (groups dividing ", cols, "), got ", scale);
  }
  SmallVector<int64_t> shape(lhs.getShape());
  shape.back() = n;
  inferred.push_back(RankedTensorType::get(shape, lhs.getElementType()));
  return success();
}

LogicalResult MatmulOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &inferred) {
  ArrayRef<int64_t> a = shapeOf(adaptor.getLhs());
  ArrayRef<int64_t> b = shapeOf(adaptor.getRhs());
  if (failed(sameElementTypes(loc, adaptor.getOperands())))
    return failure();
  if (a.size() < 2 || a.size() != b.size())
    return emitOptionalError(loc, "operands must have one rank >= 2, got ",
                             a.size(), " and ", b.size());
  size_t r = a.size();
  int64_t m = adaptor.getTransposeLhs() ? a[r - 1] : a[r - 2];
  int64_t ka = adaptor.getTransposeLhs() ? a[r - 2] : a[r - 1];
  int64_t kb = adaptor.getTransposeRhs() ? b[r - 1] : b[r - 2];
  int64_t n = adaptor.getTransposeRhs() ? b[r - 2] : b[r - 1];
  if (ka != kb)
    return emitOptionalError(loc, "contracting dimensions differ: ", ka,
                             " and ", kb);
  FailureOr<SmallVector<int64_t>> batch =
      broadcastShapes(loc, {a.drop_back(2), b.drop_back(2)});
  if (failed(batch))
    return failure();
  batch->append({m, n});
  inferred.push_back(
      RankedTensorType::get(*batch, elementTypeOf(adaptor.getLhs())));
  return success();
}

LogicalResult ReduceOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &inferred) {
  ArrayRef<int64_t> shape = shapeOf(adaptor.getInput());
  ArrayRef<int64_t> dims = adaptor.getDims();
  for (auto [i, d] : llvm::enumerate(dims)) {
    if (d < 0 || d >= static_cast<int64_t>(shape.size()))
      return emitOptionalError(loc, "reduced dimension ", d,
                               " is out of range for rank ", shape.size());
    if (i > 0 && dims[i - 1] >= d)
      return emitOptionalError(loc, "reduced dimensions must be sorted and "
                                    "unique");
  }
  Type element = elementTypeOf(adaptor.getInput());
  if (adaptor.getKind() == ReduceKind::mean && !isa<FloatType>(element))
    return emitOptionalError(loc, "mean needs a float element type");
  SmallVector<int64_t> result;
  for (auto [i, size] : llvm::enumerate(shape)) {
    if (!llvm::is_contained(dims, static_cast<int64_t>(i)))
      result.push_back(size);
    else if (adaptor.getKeepDims())
      result.push_back(1);
  }
  inferred.push_back(RankedTensorType::get(result, element));
  return success();
}

static LogicalResult verifyAxis(Operation *op, int64_t axis, Value input) {
  int64_t rank = shapeOf(input).size();
  if (axis < 0 || axis >= rank)
    return op->emitOpError("axis ")
           << axis << " is out of range for rank " << rank;
  return success();
}

LogicalResult SoftmaxOp::verify() {
  return verifyAxis(*this, getAxis(), getInput());
}
LogicalResult LogSoftmaxOp::verify() {
  return verifyAxis(*this, getAxis(), getInput());
}

/// Attention's results' element type: f32 for bf16 / f16 operands (the
/// products accumulate in f32), else the operands'.
static Type accumulatedType(Value q) {
  Type t = elementTypeOf(q);
  if (isa<BFloat16Type, Float16Type>(t))
    return Float32Type::get(q.getContext());
  return t;
}

/// Checks attention's operand shapes (AttentionOp's description) and gives
/// the result's and the log-sum-exp's shapes.
static LogicalResult attentionShapes(std::optional<Location> loc, Value q,
                                     Value k, Value v, Value bias,
                                     SmallVectorImpl<int64_t> &out,
                                     SmallVectorImpl<int64_t> &lse) {
  if (failed(sameElementTypes(loc, ValueRange{q, k, v})))
    return failure();
  // Mixed precision's bf16 / f16 q, k, v keep an f32 bias (a mask's -inf,
  // a position bias).
  Type biasWant = accumulatedType(q);
  if (bias && elementTypeOf(bias) != biasWant)
    return emitOptionalError(loc, "bias must be ", biasWant, ", not ",
                             elementTypeOf(bias));
  ArrayRef<int64_t> qs = shapeOf(q), ks = shapeOf(k), vs = shapeOf(v);
  if (qs.size() != 4 || ks.size() != 4 || vs.size() != 4)
    return emitOptionalError(loc, "query, key and value must have rank 4");
  if (ks[0] != qs[0] || vs[0] != qs[0] || vs[1] != ks[1] || vs[2] != ks[2] ||
      ks[3] != qs[3])
    return emitOptionalError(
        loc, "query [B, H, Sq, D], key [B, Hk, Sk, D] and value [B, Hk, Sk, "
             "Dv] disagree");
  if (ks[1] < 1 || qs[1] % ks[1] != 0)
    return emitOptionalError(loc, "query heads ", qs[1],
                             " are not a multiple of key heads ", ks[1]);
  if (bias) {
    ArrayRef<int64_t> bs = shapeOf(bias);
    int64_t full[4] = {qs[0], qs[1], qs[2], ks[2]};
    if (bs.size() != 4)
      return emitOptionalError(loc, "bias must have rank 4");
    for (int d = 0; d < 4; ++d)
      if (bs[d] != 1 && bs[d] != full[d])
        return emitOptionalError(loc, "bias dimension ", d, " (", bs[d],
                                 ") does not broadcast to ", full[d]);
  }
  out.assign({qs[0], qs[1], qs[2], vs[3]});
  lse.assign({qs[0], qs[1], qs[2]});
  return success();
}

LogicalResult AttentionOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &inferred) {
  SmallVector<int64_t> out, lse;
  if (failed(attentionShapes(loc, adaptor.getQuery(), adaptor.getKey(),
                             adaptor.getValue(), adaptor.getBias(), out, lse)))
    return failure();
  Type t = accumulatedType(adaptor.getQuery());
  inferred.push_back(RankedTensorType::get(out, t));
  inferred.push_back(RankedTensorType::get(lse, t));
  return success();
}

LogicalResult AttentionBackwardOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &inferred) {
  SmallVector<int64_t> out, lse;
  if (failed(attentionShapes(loc, adaptor.getQuery(), adaptor.getKey(),
                             adaptor.getValue(), adaptor.getBias(), out, lse)))
    return failure();
  if (shapeOf(adaptor.getOutput()) != ArrayRef<int64_t>(out) ||
      shapeOf(adaptor.getGrad()) != ArrayRef<int64_t>(out) ||
      shapeOf(adaptor.getLse()) != ArrayRef<int64_t>(lse))
    return emitOptionalError(loc, "output, lse and grad must have the "
                                  "forward's result shapes");
  Type grad = elementTypeOf(adaptor.getGrad());
  if (grad != elementTypeOf(adaptor.getQuery()))
    return emitOptionalError(loc, "grad must be of the query's type, not ",
                             grad);
  Type t = accumulatedType(adaptor.getQuery());
  for (Value v : {adaptor.getQuery(), adaptor.getKey(), adaptor.getValue()})
    inferred.push_back(RankedTensorType::get(shapeOf(v), t));
  return success();
}

/// Checks cross_entropy's operands; gives the kept (class axis 1) shape.
static LogicalResult crossEntropyShapes(std::optional<Location> loc,
                                        Value logits, Value labels,
                                        Value classIds, Value shift,
                                        int64_t axis,
                                        SmallVectorImpl<int64_t> &kept) {
  ArrayRef<int64_t> x = shapeOf(logits);
  int64_t rank = static_cast<int64_t>(x.size());
  if (axis < 0 || axis >= rank)
    return emitOptionalError(loc, "axis ", axis, " is out of range for rank ",
                             rank);
  kept.assign(x.begin(), x.end());
  kept[axis] = 1;
  SmallVector<int64_t> ids(rank, 1);
  ids[axis] = x[axis];
  if (shapeOf(labels) != ArrayRef<int64_t>(kept) ||
      shapeOf(shift) != ArrayRef<int64_t>(kept))
    return emitOptionalError(loc, "labels and shift must have the logits' "
                                  "shape with the class axis 1");
  if (shapeOf(classIds) != ArrayRef<int64_t>(ids))
    return emitOptionalError(loc, "class ids must be 1 but along the class "
                                  "axis, of its size");
  if (elementTypeOf(labels) != elementTypeOf(classIds) ||
      elementTypeOf(shift) != elementTypeOf(logits))
    return emitOptionalError(loc, "labels and class ids, and shift and "
                                  "logits, must share element types");
  return success();
}

LogicalResult
CrossEntropyOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                 Adaptor adaptor,
                                 SmallVectorImpl<Type> &inferred) {
  SmallVector<int64_t> kept;
  if (failed(crossEntropyShapes(loc, adaptor.getLogits(), adaptor.getLabels(),
                                adaptor.getClassIds(), adaptor.getShift(),
                                adaptor.getAxis(), kept)))
    return failure();
  Type t = RankedTensorType::get(kept, elementTypeOf(adaptor.getLogits()));
  inferred.append({t, t});
  return success();
}

LogicalResult CrossEntropyBackwardOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &inferred) {
  SmallVector<int64_t> kept;
  if (failed(crossEntropyShapes(loc, adaptor.getLogits(), adaptor.getLabels(),
                                adaptor.getClassIds(), adaptor.getShift(),
                                adaptor.getAxis(), kept)))
    return failure();
  if (adaptor.getSumExpGrad().getType() != adaptor.getShift().getType() ||
      adaptor.getTargetGrad().getType() != adaptor.getShift().getType())
    return emitOptionalError(loc, "the results' gradients must have the "
                                  "shift's type");
  inferred.push_back(adaptor.getLogits().getType());
  return success();
}

/// A norm's input type and its statistics' shape (the normalised dims
/// [axis, rank) set to 1), or failure for an axis out of range.
static FailureOr<std::pair<RankedTensorType, SmallVector<int64_t>>>
normShapes(std::optional<Location> loc, Value input, int64_t axis) {
  auto type = cast<RankedTensorType>(input.getType());
  int64_t rank = type.getRank();
  if (axis < 0 || axis >= rank)
    return emitOptionalError(loc, "axis ", axis, " is out of range for rank ",
                             rank);
  SmallVector<int64_t> statShape(type.getShape());
  for (int64_t i = axis; i < rank; ++i)
    statShape[i] = 1;
  return std::make_pair(type, statShape);
}

LogicalResult LayerNormOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &inferred) {
  int64_t axis = adaptor.getAxis();
  auto shapes = normShapes(loc, adaptor.getInput(), axis);
  if (failed(shapes))
    return failure();
  auto [type, statShape] = *shapes;
  ArrayRef<int64_t> normalised = type.getShape().drop_front(axis);
  for (Value v : {adaptor.getScale(), adaptor.getBias()}) {
    if (v &&
        (shapeOf(v) != normalised || elementTypeOf(v) != type.getElementType()))
      return emitOptionalError(
          loc, "scale and bias must have type ",
          RankedTensorType::get(normalised, type.getElementType()), ", got ",
          v.getType());
  }
  auto stat = RankedTensorType::get(statShape, type.getElementType());
  inferred.append({type, stat, stat});
  return success();
}

LogicalResult LayerNormBackwardOp::inferReturnTypes(
    MLIRContext *ctx, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &inferred) {
  int64_t axis = adaptor.getAxis();
  auto shapes = normShapes(loc, adaptor.getInput(), axis);
  if (failed(shapes))
    return failure();
  auto [type, statShape] = *shapes;
  if (shapeOf(adaptor.getGrad()) != type.getShape())
    return emitOptionalError(loc, "grad must have the input's shape ",
                             type.getShape(), ", got ",
                             adaptor.getGrad().getType());
  for (Value v : {adaptor.getInput(), adaptor.getGrad()})
    if (!elementTypeOf(v).isF32() && !elementTypeOf(v).isBF16())
      return emitOptionalError(loc, "input and grad must be f32 or bf16, got ",
                               v.getType());
  Type f32 = Float32Type::get(ctx);
  for (Value v : {adaptor.getMean(), adaptor.getInvStdDev()})
    if (shapeOf(v) != ArrayRef<int64_t>(statShape) || elementTypeOf(v) != f32)
      return emitOptionalError(loc, "mean and inv_std_dev must have type ",
                               RankedTensorType::get(statShape, f32), ", got ",
                               v.getType());
  ArrayRef<int64_t> normalised = type.getShape().drop_front(axis);
  auto params = RankedTensorType::get(normalised, f32);
  if (Value scale = adaptor.getScale(); scale && scale.getType() != params)
    return emitOptionalError(loc, "scale must have type ", params, ", got ",
                             scale.getType());
  inferred.append(
      {RankedTensorType::get(type.getShape(), f32), params, params});
  return success();
}

LogicalResult BatchNormOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &inferred) {
  auto type = cast<RankedTensorType>(adaptor.getInput().getType());
  if (type.getRank() < 2)
    return emitOptionalError(loc, "input must have rank >= 2 [N, C, ...]");
  auto channel =
      RankedTensorType::get({type.getDimSize(1)}, type.getElementType());
  for (Value v : {adaptor.getScale(), adaptor.getBias(), adaptor.getMean(),
                  adaptor.getVariance()})
    if (v.getType() != channel)
      return emitOptionalError(loc, "statistics must have type ", channel,
                               ", got ", v.getType());
  inferred.push_back(type);
  return success();
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::verify() {
  auto in = cast<RankedTensorType>(getInput().getType());
  auto out = cast<RankedTensorType>(getType());
  if (in.getElementType() != out.getElementType())
    return emitOpError("changes the element type");
  if (in.getNumElements() != out.getNumElements())
    return emitOpError("changes the element count from ")
           << in.getNumElements() << " to " << out.getNumElements();
  return success();
}

OpFoldResult ReshapeOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType())
    return getInput();
  if (auto producer = getInput().getDefiningOp<ReshapeOp>()) {
    setOperand(producer.getInput());
    return getResult();
  }
  if (auto dense = dyn_cast_if_present<DenseElementsAttr>(adaptor.getInput()))
    return dense.reshape(cast<ShapedType>(getType()));
  return {};
}

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &inferred) {
  auto type = cast<RankedTensorType>(adaptor.getInput().getType());
  ArrayRef<int64_t> perm = adaptor.getPermutation();
  if (static_cast<int64_t>(perm.size()) != type.getRank())
    return emitOptionalError(loc, "permutation has ", perm.size(),
                             " entries for rank ", type.getRank());
  SmallVector<bool> seen(perm.size(), false);
  SmallVector<int64_t> shape;
  for (int64_t p : perm) {
    if (p < 0 || p >= type.getRank() || seen[p])
      return emitOptionalError(loc, "invalid permutation");
    seen[p] = true;
    shape.push_back(type.getDimSize(p));
  }
  inferred.push_back(RankedTensorType::get(shape, type.getElementType()));
  return success();
}

OpFoldResult TransposeOp::fold(FoldAdaptor) {
  for (auto [i, p] : llvm::enumerate(getPermutation()))
    if (static_cast<int64_t>(i) != p)
      return {};
  return getInput();
}

LogicalResult BroadcastOp::verify() {
  ArrayRef<int64_t> in = shapeOf(getInput()), out = shapeOf(getResult());
  if (elementTypeOf(getInput()) != elementTypeOf(getResult()))
    return emitOpError("changes the element type");
  if (in.size() != out.size())
    return emitOpError("operand rank ")
           << in.size() << " differs from result rank " << out.size();
  for (auto [i, o] : llvm::zip(in, out))
    if (i != o && i != 1)
      return emitOpError("cannot broadcast dimension of size ")
             << i << " to " << o;
  return success();
}

OpFoldResult BroadcastOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType())
    return getInput();
  if (auto dense = dyn_cast_if_present<DenseElementsAttr>(adaptor.getInput()))
    if (dense.isSplat())
      return DenseElementsAttr::get(cast<ShapedType>(getType()),
                                    dense.getSplatValue<Attribute>());
  return {};
}

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &inferred) {
  ValueRange inputs = adaptor.getInputs();
  if (inputs.empty())
    return emitOptionalError(loc, "needs at least one operand");
  if (failed(sameElementTypes(loc, inputs)))
    return failure();
  SmallVector<int64_t> shape(shapeOf(inputs[0]));
  int64_t axis = adaptor.getAxis();
  if (axis < 0 || axis >= static_cast<int64_t>(shape.size()))
    return emitOptionalError(loc, "axis ", axis, " is out of range for rank ",
                             shape.size());
  for (Value v : inputs.drop_front()) {
    ArrayRef<int64_t> s = shapeOf(v);
    if (s.size() != shape.size())
      return emitOptionalError(loc, "operands must have one rank");
    for (size_t d = 0; d < s.size(); ++d)
      if (static_cast<int64_t>(d) != axis && s[d] != shape[d])
        return emitOptionalError(loc, "operands differ in dimension ", d,
                                 " which is not the concatenation axis");
    shape[axis] += s[axis];
  }
  inferred.push_back(RankedTensorType::get(shape, elementTypeOf(inputs[0])));
  return success();
}

namespace {
/// concat_i(reshape(broadcast(reshape(slice_i x)))) along d, where slice_i
/// is x's i-th unit slice along d for every i in order and each piece
/// repeats it r times in place, is x with every index along d repeated r
/// times: reshape x to [.., n, 1, ..], broadcast to [.., n, r, ..], merge.
/// That is repeat_interleave as torch.onnx exports it (Split into unit
/// slices, Unsqueeze, Expand, Reshape, Concat), and the whole-value form is
/// what a split of d (K/V heads across ranks) survives.
struct ConcatOfRepeatedSlices : OpRewritePattern<ConcatOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ConcatOp op,
                                PatternRewriter &rewriter) const override {
    int64_t d = op.getAxis();
    Value source;
    int64_t repeats = -1;
    for (auto [i, piece] : llvm::enumerate(op.getInputs())) {
      auto merge = piece.getDefiningOp<ReshapeOp>();
      auto wide =
          merge ? merge.getInput().getDefiningOp<BroadcastOp>() : BroadcastOp();
      auto unit =
          wide ? wide.getInput().getDefiningOp<ReshapeOp>() : ReshapeOp();
      auto slice = unit ? unit.getInput().getDefiningOp<SliceOp>() : SliceOp();
      if (!slice || (source && slice.getInput() != source))
        return failure();
      source = slice.getInput();
      ArrayRef<int64_t> x = shapeOf(source), s = shapeOf(slice.getResult());
      // The i-th unit slice along d, everything else whole.
      for (size_t k = 0; k < x.size(); ++k)
        if (slice.getSteps()[k] != 1 ||
            (static_cast<int64_t>(k) == d
                 ? s[k] != 1 || slice.getStarts()[k] != static_cast<int64_t>(i)
                 : s[k] != x[k] || slice.getStarts()[k] != 0))
          return failure();
      // [.., 1, 1, ..] at d, d+1; broadcast to [.., a, b, ..]; merged to
      // [.., a*b, ..]: a*b copies of the slice.
      SmallVector<int64_t> twoUnits(s);
      twoUnits.insert(twoUnits.begin() + d, 1);
      ArrayRef<int64_t> w = shapeOf(wide.getResult());
      if (shapeOf(unit.getResult()) != ArrayRef<int64_t>(twoUnits) ||
          w.size() != x.size() + 1)
        return failure();
      int64_t r = w[d] * w[d + 1];
      for (size_t k = 0; k < w.size(); ++k)
        if (static_cast<int64_t>(k) != d && static_cast<int64_t>(k) != d + 1 &&
            w[k] != twoUnits[k])
          return failure();
      SmallVector<int64_t> merged(s);
      merged[d] = r;
      if (shapeOf(merge.getResult()) != ArrayRef<int64_t>(merged) ||
          (repeats >= 0 && r != repeats))
        return failure();
      repeats = r;
    }
    if (!source ||
        static_cast<int64_t>(op.getInputs().size()) != shapeOf(source)[d])
      return failure();
    ArrayRef<int64_t> x = shapeOf(source);
    Type element = elementTypeOf(source);
    SmallVector<int64_t> shape(x);
    shape.insert(shape.begin() + d + 1, 1);
    Value v = ReshapeOp::create(rewriter, op.getLoc(),
                                RankedTensorType::get(shape, element), source);
    shape[d + 1] = repeats;
    v = BroadcastOp::create(rewriter, op.getLoc(),
                            RankedTensorType::get(shape, element), v);
    rewriter.replaceOpWithNewOp<ReshapeOp>(op, op.getType(), v);
    return success();
  }
};
} // namespace

void ConcatOp::getCanonicalizationPatterns(RewritePatternSet &patterns,
                                           MLIRContext *context) {
  patterns.add<ConcatOfRepeatedSlices>(context);
}

/// Checks that reading `starts[d] + i * steps[d]` for every index `i` of
/// \p window stays inside \p whole. \p verb says whether the op reads or
/// writes those positions, for the message.
static LogicalResult verifyStridedWindow(Operation *op, Value whole,
                                         Value window, ArrayRef<int64_t> starts,
                                         ArrayRef<int64_t> steps,
                                         StringRef verb) {
  ArrayRef<int64_t> in = shapeOf(whole), out = shapeOf(window);
  if (elementTypeOf(whole) != elementTypeOf(window))
    return op->emitOpError("changes the element type");
  if (in.size() != out.size() || starts.size() != in.size() ||
      steps.size() != in.size())
    return op->emitOpError("needs one start and one step per dimension and a "
                           "result of the operand's rank");
  for (size_t d = 0; d < in.size(); ++d) {
    int64_t start = starts[d], step = steps[d];
    if (step == 0)
      return op->emitOpError("step of dimension ") << d << " is zero";
    if (out[d] == 0)
      continue;
    int64_t last = start + (out[d] - 1) * step;
    if (start < 0 || start >= in[d] || last < 0 || last >= in[d])
      return op->emitOpError()
             << verb << " out of bounds in dimension " << d << ": indices "
             << start << " to " << last << " of size " << in[d];
  }
  return success();
}

LogicalResult SliceOp::verify() {
  return verifyStridedWindow(*this, getInput(), getResult(), getStarts(),
                             getSteps(), "reads");
}

LogicalResult GatherOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &inferred) {
  ArrayRef<int64_t> data = shapeOf(adaptor.getData());
  int64_t axis = adaptor.getAxis();
  if (axis < 0 || axis >= static_cast<int64_t>(data.size()))
    return emitOptionalError(loc, "axis ", axis, " is out of range for rank ",
                             data.size());
  SmallVector<int64_t> shape(data.take_front(axis));
  llvm::append_range(shape, shapeOf(adaptor.getIndices()));
  llvm::append_range(shape, data.drop_front(axis + 1));
  inferred.push_back(
      RankedTensorType::get(shape, elementTypeOf(adaptor.getData())));
  return success();
}

//===----------------------------------------------------------------------===//
// Convolution and pooling
//===----------------------------------------------------------------------===//

/// Output extent of a window sweep; ceil rounds as ONNX's ceil_mode does.
static int64_t windowOutput(int64_t size, int64_t padBegin, int64_t padEnd,
                            int64_t kernel, int64_t stride, int64_t dilation,
                            bool ceil) {
  int64_t span = size + padBegin + padEnd - dilation * (kernel - 1) - 1;
  if (span < 0)
    return 0;
  int64_t out = (ceil ? (span + stride - 1) / stride : span / stride) + 1;
  // A window must start inside the input or the begin padding.
  if (ceil && (out - 1) * stride >= size + padBegin)
    --out;
  return out;
}

static LogicalResult checkWindowAttrs(std::optional<Location> loc,
                                      ArrayRef<int64_t> strides,
                                      ArrayRef<int64_t> pads,
                                      ArrayRef<int64_t> dilations) {
  if (strides.size() != 2 || dilations.size() != 2 || pads.size() != 4)
    return emitOptionalError(loc, "needs 2 strides, 2 dilations and 4 pads");
  for (int64_t v : llvm::concat<const int64_t>(strides, dilations))
    if (v < 1)
      return emitOptionalError(loc, "strides and dilations must be >= 1");
  for (int64_t p : pads)
    if (p < 0)
      return emitOptionalError(loc, "pads must be >= 0");
  return success();
}

LogicalResult Conv2DOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &inferred) {
  ArrayRef<int64_t> x = shapeOf(adaptor.getInput());
  ArrayRef<int64_t> w = shapeOf(adaptor.getFilter());
  if (x.size() != 4 || w.size() != 4)
    return emitOptionalError(loc, "input and filter must have rank 4");
  if (failed(checkWindowAttrs(loc, adaptor.getStrides(), adaptor.getPads(),
                              adaptor.getDilations())))
    return failure();
  int64_t groups = adaptor.getGroups();
  if (groups < 1 || x[1] % groups || w[0] % groups || x[1] / groups != w[1])
    return emitOptionalError(loc, "channels do not match: input has ", x[1],
                             ", filter expects ", w[1], " x ", groups,
                             " groups");
  if (Value bias = adaptor.getBias())
    if (shapeOf(bias) != ArrayRef<int64_t>{w[0]})
      return emitOptionalError(loc, "bias must have shape [", w[0], "]");
  ArrayRef<int64_t> s = adaptor.getStrides(), p = adaptor.getPads(),
                    d = adaptor.getDilations();
  int64_t oh = windowOutput(x[2], p[0], p[2], w[2], s[0], d[0], false);
  int64_t ow = windowOutput(x[3], p[1], p[3], w[3], s[1], d[1], false);
  inferred.push_back(RankedTensorType::get({x[0], w[0], oh, ow},
                                           elementTypeOf(adaptor.getInput())));
  return success();
}

/// Checks that pooling \p input with \p op's window gives the shape of
/// \p output (the op's result, or the gradient of a pool's adjoint).
template <typename Op>
static LogicalResult verifyPoolWindow(Op op, Value input, Value output,
                                      StringRef what) {
  ArrayRef<int64_t> x = shapeOf(input), y = shapeOf(output);
  if (x.size() != 4 || y.size() != 4)
    return op.emitOpError("input and ") << what << " must have rank 4";
  if (failed(checkWindowAttrs(op.getLoc(), op.getStrides(), op.getPads(),
                              op.getDilations())))
    return failure();
  ArrayRef<int64_t> k = op.getKernel(), s = op.getStrides(), p = op.getPads(),
                    d = op.getDilations();
  if (k.size() != 2 || k[0] < 1 || k[1] < 1)
    return op.emitOpError("needs a 2-D kernel of sizes >= 1");
  if (y[0] != x[0] || y[1] != x[1])
    return op.emitOpError("changes batch or channel dimensions");
  if (elementTypeOf(input) != elementTypeOf(output))
    return op.emitOpError("changes the element type");
  for (int i = 0; i < 2; ++i) {
    int64_t lo =
        windowOutput(x[2 + i], p[i], p[2 + i], k[i], s[i], d[i], false);
    int64_t hi = windowOutput(x[2 + i], p[i], p[2 + i], k[i], s[i], d[i], true);
    if (y[2 + i] != lo && y[2 + i] != hi)
      return op.emitOpError("spatial dimension ")
             << i << " of the " << what << " is " << y[2 + i] << ", expected "
             << lo << (lo != hi ? " or " + std::to_string(hi) : std::string());
  }
  return success();
}

template <typename PoolOp> static LogicalResult verifyPool(PoolOp op) {
  return verifyPoolWindow(op, op.getInput(), op.getResult(), "result");
}

LogicalResult MaxPool2DOp::verify() { return verifyPool(*this); }
LogicalResult AvgPool2DOp::verify() { return verifyPool(*this); }

//===----------------------------------------------------------------------===//
// Training ops
//===----------------------------------------------------------------------===//

LogicalResult ScatterAddOp::verify() {
  ArrayRef<int64_t> data = shapeOf(getResult());
  int64_t axis = getAxis();
  if (axis < 0 || axis >= static_cast<int64_t>(data.size()))
    return emitOpError("axis ")
           << axis << " is out of range for rank " << data.size();
  SmallVector<int64_t> expected(data.take_front(axis));
  llvm::append_range(expected, shapeOf(getIndices()));
  llvm::append_range(expected, data.drop_front(axis + 1));
  if (shapeOf(getUpdates()) != ArrayRef<int64_t>(expected))
    return emitOpError("updates must have the gathered shape [")
           << llvm::make_range(expected.begin(), expected.end()) << "]";
  if (elementTypeOf(getUpdates()) != elementTypeOf(getResult()))
    return emitOpError("changes the element type");
  return success();
}

LogicalResult SliceScatterOp::verify() {
  // The operand is what slice would read from the result.
  return verifyStridedWindow(*this, getResult(), getInput(), getStarts(),
                             getSteps(), "writes");
}

/// Checks that conv2d of \p input by \p filter with the op's attributes has
/// the type of \p output.
template <typename Op>
static LogicalResult verifyConvAdjoint(Op op, Value input, Value filter,
                                       Value output) {
  ArrayRef<int64_t> x = shapeOf(input), w = shapeOf(filter),
                    y = shapeOf(output);
  if (x.size() != 4 || w.size() != 4 || y.size() != 4)
    return op.emitOpError("input, filter and gradient must have rank 4");
  if (failed(checkWindowAttrs(op.getLoc(), op.getStrides(), op.getPads(),
                              op.getDilations())))
    return failure();
  int64_t groups = op.getGroups();
  if (groups < 1 || x[1] % groups || w[0] % groups || x[1] / groups != w[1])
    return op.emitOpError("channels do not match: input has ")
           << x[1] << ", filter expects " << w[1] << " x " << groups
           << " groups";
  ArrayRef<int64_t> s = op.getStrides(), p = op.getPads(),
                    d = op.getDilations();
  int64_t oh = windowOutput(x[2], p[0], p[2], w[2], s[0], d[0], false);
  int64_t ow = windowOutput(x[3], p[1], p[3], w[3], s[1], d[1], false);
  if (y[0] != x[0] || y[1] != w[0] || y[2] != oh || y[3] != ow)
    return op.emitOpError("gradient shape does not match the convolution: "
                          "expected [")
           << x[0] << ", " << w[0] << ", " << oh << ", " << ow << "]";
  return success();
}

LogicalResult Conv2DBackwardInputOp::verify() {
  return verifyConvAdjoint(*this, getResult(), getFilter(), getGrad());
}

LogicalResult Conv2DBackwardFilterOp::verify() {
  return verifyConvAdjoint(*this, getInput(), getResult(), getGrad());
}

LogicalResult MaxPool2DBackwardOp::verify() {
  if (getInput().getType() != getResult().getType())
    return emitOpError("result must have the input's type");
  return verifyPoolWindow(*this, getInput(), getGrad(), "gradient");
}

LogicalResult AvgPool2DBackwardOp::verify() {
  return verifyPoolWindow(*this, getResult(), getGrad(), "gradient");
}

LogicalResult IotaOp::verify() {
  int64_t rank = getType().getRank();
  if (getDim() < 0 || getDim() >= rank)
    return emitOpError("dim ")
           << getDim() << " is out of range for rank " << rank;
  return success();
}

LogicalResult CheckIndexOp::verify() {
  if (getBound() < 0)
    return emitOpError("bound must not be negative, got ") << getBound();
  return success();
}

LogicalResult RandomUniformOp::verify() {
  if (!shapeOf(getStep()).empty())
    return emitOpError("step must be a scalar (rank 0)");
  return success();
}

//===----------------------------------------------------------------------===//
// Tensor parallelism
//===----------------------------------------------------------------------===//

/// The module's mesh shape (`cleave.mesh`), if \p op is inside one that has
/// it.
static std::optional<ArrayRef<int64_t>> meshOf(Operation *op) {
  for (Operation *p = op->getParentOp(); p; p = p->getParentOp())
    if (auto mesh = p->getAttrOfType<DenseI64ArrayAttr>(kMeshAttr))
      return mesh.asArrayRef();
  return std::nullopt;
}

/// Checks `axes` (sorted, distinct, inside the mesh) and returns the group
/// size, or 0 when the mesh is unknown.
static FailureOr<int64_t> verifyGroup(Operation *op, ArrayRef<int64_t> axes) {
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i] < 0 || (i && axes[i] <= axes[i - 1]))
      return op->emitOpError("mesh axes must be sorted, distinct and >= 0");
  std::optional<ArrayRef<int64_t>> mesh = meshOf(op);
  if (!mesh)
    return 0;
  int64_t size = 1;
  for (int64_t a : axes) {
    if (a >= static_cast<int64_t>(mesh->size()))
      return op->emitOpError("mesh axis ")
             << a << " is outside the mesh of rank " << mesh->size();
    size *= (*mesh)[a];
  }
  return size;
}

/// Checks that \p small is \p big with dimension \p dim divided by the group
/// size (\p group, 0 when unknown).
static LogicalResult verifyChunk(Operation *op, Value big, Value small,
                                 int64_t dim, int64_t group) {
  ArrayRef<int64_t> b = shapeOf(big), s = shapeOf(small);
  if (elementTypeOf(big) != elementTypeOf(small))
    return op->emitOpError("changes the element type");
  if (b.size() != s.size() || dim < 0 || dim >= static_cast<int64_t>(b.size()))
    return op->emitOpError("dim ") << dim << " is out of range, or the ranks "
                                   << "differ";
  for (size_t d = 0; d < b.size(); ++d) {
    if (static_cast<int64_t>(d) == dim)
      continue;
    if (b[d] != s[d])
      return op->emitOpError("shapes differ in dimension ")
             << d << ", which is not the split dimension";
  }
  if (s[dim] == 0 || b[dim] % s[dim] || (group && b[dim] != s[dim] * group))
    return op->emitOpError("dimension ")
           << dim << " of size " << b[dim] << " is not " << s[dim]
           << " times the group size";
  return success();
}

LogicalResult AllReduceOp::verify() {
  if (failed(verifyGroup(*this, getAxes())))
    return failure();
  if (getKind() != ReduceKind::sum && getKind() != ReduceKind::max &&
      getKind() != ReduceKind::min)
    return emitOpError("reduces with sum, max or min");
  return success();
}

LogicalResult AllGatherOp::verify() {
  FailureOr<int64_t> group = verifyGroup(*this, getAxes());
  if (failed(group))
    return failure();
  if (getBlocks() < 1 || shapeOf(getInput())[getDim()] % getBlocks())
    return emitOpError("blocks must be >= 1 and divide the local dimension");
  return verifyChunk(*this, getResult(), getInput(), getDim(), *group);
}

LogicalResult ReduceScatterOp::verify() {
  FailureOr<int64_t> group = verifyGroup(*this, getAxes());
  if (failed(group))
    return failure();
  return verifyChunk(*this, getInput(), getResult(), getDim(), *group);
}

LogicalResult AllToAllOp::verify() {
  FailureOr<int64_t> group = verifyGroup(*this, getAxes());
  if (failed(group))
    return failure();
  ArrayRef<int64_t> in = shapeOf(getInput()), out = shapeOf(getResult());
  int64_t split = getSplitDim(), concat = getConcatDim();
  int64_t rank = static_cast<int64_t>(in.size());
  if (split < 0 || split >= rank || concat < 0 || concat >= rank ||
      split == concat)
    return emitOpError("split_dim and concat_dim must be two dimensions of "
                       "the operand");
  // Without a mesh (group 0) only the dimensions it does not move are
  // known.
  int64_t g = *group;
  bool mismatch = getInput().getType().getElementType() !=
                      getResult().getType().getElementType() ||
                  static_cast<int64_t>(out.size()) != rank ||
                  (g && in[split] % g);
  for (int64_t d = 0; d < rank && !mismatch; ++d)
    mismatch = d == split    ? g && out[d] != in[d] / g
               : d == concat ? g && out[d] != in[d] * g
                             : out[d] != in[d];
  if (mismatch)
    return emitOpError("result must be the operand split along split_dim "
                       "and concatenated along concat_dim over the group");
  return success();
}

LogicalResult ShardSliceOp::verify() {
  FailureOr<int64_t> group = verifyGroup(*this, getAxes());
  if (failed(group))
    return failure();
  if (getBlocks() < 1 || shapeOf(getResult())[getDim()] % getBlocks())
    return emitOpError("blocks must be >= 1 and divide the local dimension");
  return verifyChunk(*this, getInput(), getResult(), getDim(), *group);
}

#define GET_OP_CLASSES
#include "Cleave/CleaveOps.cpp.inc"

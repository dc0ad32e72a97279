//===- Elementwise.cpp - ONNX elementwise ops -------------------*- C++ -*-===//
//
// Arithmetic, comparisons, logic, unary math, Clip, Where, Cast. ONNX's
// multidirectional broadcasting becomes explicit rank alignment plus the
// cleave ops' size-1 broadcasting.
//
//===----------------------------------------------------------------------===//

#include "NodeContext.h"

using namespace mlir;
using namespace mlir::cleave;
using namespace mlir::cleave::onnx_import;

namespace {

/// Sets output 0 to \p result, or fails.
LogicalResult output(NodeContext &ctx, FailureOr<Value> result) {
  if (failed(result))
    return failure();
  ctx.setOutput(0, *result);
  return success();
}

template <typename OpTy> LogicalResult binary(NodeContext &ctx) {
  FailureOr<Value> a = ctx.input(0), b = ctx.input(1);
  if (failed(a) || failed(b))
    return failure();
  return output(ctx, ctx.createBroadcasting<OpTy>({*a, *b}));
}

/// Max, Min, Sum: variadic, folded pairwise.
template <typename OpTy> LogicalResult variadic(NodeContext &ctx) {
  FailureOr<Value> acc = ctx.input(0);
  for (unsigned i = 1; i < ctx.numInputs() && succeeded(acc); ++i) {
    FailureOr<Value> next = ctx.input(i);
    if (failed(next))
      return failure();
    acc = ctx.createBroadcasting<OpTy>({*acc, *next});
  }
  return output(ctx, acc);
}

/// Opsets before 7 broadcast only when `broadcast` is 1, and then B's dims
/// line up with A's from `axis` on (the suffix by default), not numpy's way.
/// B is given A's rank with size-1 dims around it; the rest is numpy's rule.
FailureOr<Value> legacyOperand(NodeContext &ctx, Value a, Value b) {
  int64_t rankA = NodeContext::rankOf(a), rankB = NodeContext::rankOf(b);
  if (!ctx.attrInt("broadcast", 0) || rankB >= rankA)
    return b;
  int64_t axis = ctx.attrInt("axis", rankA - rankB);
  if (axis < 0)
    axis += rankA;
  if (axis < 0 || axis + rankB > rankA)
    return ctx.error() << "axis " << ctx.attrInt("axis", 0)
                       << " does not place B of rank " << rankB
                       << " inside A of rank " << rankA;
  SmallVector<int64_t> shape(rankA, 1);
  llvm::copy(NodeContext::typeOf(b).getShape(), shape.begin() + axis);
  return ctx.reshape(b, shape);
}

template <typename OpTy> LogicalResult legacyBinary(NodeContext &ctx) {
  FailureOr<Value> a = ctx.input(0), b = ctx.input(1);
  if (failed(a) || failed(b))
    return failure();
  FailureOr<Value> bb = legacyOperand(ctx, *a, *b);
  if (failed(bb))
    return failure();
  return output(ctx, ctx.createBroadcasting<OpTy>({*a, *bb}));
}

template <CmpPredicate P> LogicalResult legacyCompare(NodeContext &ctx) {
  FailureOr<Value> a = ctx.input(0), b = ctx.input(1);
  if (failed(a) || failed(b))
    return failure();
  FailureOr<Value> bb = legacyOperand(ctx, *a, *b);
  if (failed(bb))
    return failure();
  return output(ctx, ctx.compare(P, *a, *bb));
}

template <CmpPredicate P> LogicalResult compare(NodeContext &ctx) {
  FailureOr<Value> a = ctx.input(0), b = ctx.input(1);
  if (failed(a) || failed(b))
    return failure();
  return output(ctx, ctx.compare(P, *a, *b));
}

/// Unary ops defined on floats only check their operand's type, so a model
/// applying Exp to integers gets a message instead of a verifier failure.
template <typename OpTy, bool FloatOnly = true>
LogicalResult unary(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  Type element = NodeContext::typeOf(*x).getElementType();
  if (FloatOnly && !isa<FloatType>(element))
    return ctx.error() << "needs a float input, got " << element;
  ctx.setOutput(0, ctx.b.createOrFold<OpTy>(*x));
  return success();
}

LogicalResult power(NodeContext &ctx) {
  FailureOr<Value> a = ctx.input(0), b = ctx.input(1);
  if (failed(a) || failed(b))
    return failure();
  if (ctx.opset < 7 && failed(b = legacyOperand(ctx, *a, *b)))
    return failure();
  // The result has the base's type; the exponent is converted to it. An
  // exponent stored as an initializer is the graph's literal (baked: x^c
  // with c trained would take log(x), NaN below zero).
  Type element = NodeContext::typeOf(*a).getElementType();
  Value exponent = *b;
  if (isa<BlockArgument>(exponent))
    if (std::optional<DenseElementsAttr> c = ctx.constantInput(1);
        c && c->getNumElements() == 1)
      exponent = ConstantOp::create(ctx.b, *c);
  if (NodeContext::typeOf(exponent).getElementType() != element)
    exponent = ctx.b.createOrFold<CastOp>(
        NodeContext::typeOf(exponent).clone(element), exponent);
  return output(ctx, ctx.createBroadcasting<PowOp>({*a, exponent}));
}

LogicalResult leakyRelu(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  ctx.setOutput(
      0, LeakyReluOp::create(
             ctx.b, *x, ctx.b.getF32FloatAttr(ctx.attrFloat("alpha", 0.01f))));
  return success();
}

LogicalResult gelu(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  std::string approximate = ctx.attrString("approximate", "none");
  if (approximate != "none" && approximate != "tanh")
    return ctx.error() << "unknown approximate='" << approximate << "'";
  auto op = GeluOp::create(ctx.b, *x);
  if (approximate == "tanh")
    op.setApproximate(true);
  ctx.setOutput(0, op);
  return success();
}

LogicalResult where(NodeContext &ctx) {
  FailureOr<Value> c = ctx.input(0), t = ctx.input(1), f = ctx.input(2);
  if (failed(c) || failed(t) || failed(f))
    return failure();
  if (!NodeContext::typeOf(*c).getElementType().isInteger(1))
    return ctx.error() << "condition must be bool";
  return output(ctx, ctx.createBroadcasting<SelectOp>({*c, *t, *f}));
}

/// Clip with optional min/max given as inputs (opset >= 11) or attributes.
LogicalResult clipWith(NodeContext &ctx, Value x, std::optional<Value> lo,
                       std::optional<Value> hi) {
  for (std::optional<Value> bound : {lo, hi})
    if (bound && NodeContext::typeOf(*bound).getNumElements() != 1)
      return ctx.error() << "min and max must be scalars";
  // Bounds become rank-aligned size-1 tensors, never widening the result.
  SmallVector<int64_t> ones(NodeContext::rankOf(x), 1);
  FailureOr<Value> y = x;
  if (lo)
    y = ctx.createBroadcasting<MaxOp>({*y, ctx.reshape(*lo, ones)});
  if (hi && succeeded(y))
    y = ctx.createBroadcasting<MinOp>({*y, ctx.reshape(*hi, ones)});
  return output(ctx, y);
}

LogicalResult clip11(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  std::optional<Value> lo, hi;
  if (ctx.hasInput(1)) {
    FailureOr<Value> v = ctx.input(1);
    if (failed(v))
      return failure();
    lo = *v;
  }
  if (ctx.hasInput(2)) {
    FailureOr<Value> v = ctx.input(2);
    if (failed(v))
      return failure();
    hi = *v;
  }
  return clipWith(ctx, *x, lo, hi);
}

LogicalResult clip6(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  Type element = NodeContext::typeOf(*x).getElementType();
  return clipWith(ctx, *x,
                  ctx.splat(element, {}, ctx.attrFloat("min", -3.4028234e38f)),
                  ctx.splat(element, {}, ctx.attrFloat("max", 3.4028234e38f)));
}

LogicalResult castTo(NodeContext &ctx, int64_t to) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  Type element = elementTypeFromOnnx(ctx.b.getContext(), to);
  if (!element)
    return ctx.error() << "cast to ONNX type " << to << " is not supported";
  // To a storage dtype: its rounding (or wrapping), then widened again.
  auto type = NodeContext::typeOf(*x).clone(element);
  Value y = ctx.b.createOrFold<CastOp>(type, *x);
  if (Type compute = computeTypeOf(element); compute != element)
    y = ctx.b.createOrFold<CastOp>(type.clone(compute), y);
  ctx.setOutput(0, y);
  return success();
}

LogicalResult castOp(NodeContext &ctx) {
  return castTo(ctx, ctx.attrInt("to", 0));
}

// CastLike: to the element type the model declares for the second input
// (its storage dtype), else the one it computes in.
LogicalResult castLike(NodeContext &ctx) {
  FailureOr<Value> like = ctx.input(1);
  if (failed(like))
    return failure();
  if (int32_t declared = ctx.declaredOnnxType(1))
    return castTo(ctx, declared);
  Type e = NodeContext::typeOf(*like).getElementType();
  int64_t to = e.isF32()                 ? onnx::TensorProto::FLOAT
               : e.isSignlessInteger(64) ? onnx::TensorProto::INT64
               : e.isSignlessInteger(32) ? onnx::TensorProto::INT32
                                         : onnx::TensorProto::BOOL;
  return castTo(ctx, to);
}

LogicalResult identity(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  ctx.setOutput(0, *x);
  return success();
}

} // namespace

void onnx_import::registerElementwiseHandlers(HandlerTable &t) {
  // Since-versions: the oldest version whose semantics these handlers
  // implement (numpy broadcasting arrived at 7; before it, the legacy forms).
  t.on("Add", 1, legacyBinary<AddOp>);
  t.on("Sub", 1, legacyBinary<SubOp>);
  t.on("Mul", 1, legacyBinary<MulOp>);
  t.on("Div", 1, legacyBinary<DivOp>);
  t.on("Pow", 1, power);
  t.on("And", 1, legacyBinary<AndOp>);
  t.on("Or", 1, legacyBinary<OrOp>);
  t.on("Xor", 1, legacyBinary<XorOp>);
  t.on("Equal", 1, legacyCompare<CmpPredicate::eq>);
  t.on("Less", 1, legacyCompare<CmpPredicate::lt>);
  t.on("Greater", 1, legacyCompare<CmpPredicate::gt>);
  // Before 8 every operand had one shape, which numpy's rule accepts too.
  t.on("Max", 1, variadic<MaxOp>);
  t.on("Min", 1, variadic<MinOp>);
  t.on("Sum", 1, variadic<AddOp>);
  t.on("Add", 7, binary<AddOp>);
  t.on("Sub", 7, binary<SubOp>);
  t.on("Mul", 7, binary<MulOp>);
  t.on("Div", 7, binary<DivOp>);
  t.on("Pow", 7, power);
  t.on("And", 7, binary<AndOp>);
  t.on("Or", 7, binary<OrOp>);
  t.on("Xor", 7, binary<XorOp>);
  t.on("Max", 8, variadic<MaxOp>);
  t.on("Min", 8, variadic<MinOp>);
  t.on("Sum", 8, variadic<AddOp>);
  t.on("Equal", 7, compare<CmpPredicate::eq>);
  t.on("Less", 7, compare<CmpPredicate::lt>);
  t.on("LessOrEqual", 12, compare<CmpPredicate::le>);
  t.on("Greater", 7, compare<CmpPredicate::gt>);
  t.on("GreaterOrEqual", 12, compare<CmpPredicate::ge>);
  t.on("Where", 9, where);
  t.on("Not", 1, unary<NotOp, false>);
  t.on("Neg", 6, unary<NegOp, false>);
  t.on("Abs", 6, unary<AbsOp, false>);
  t.on("Exp", 6, unary<ExpOp>);
  t.on("Log", 6, unary<LogOp>);
  t.on("Sqrt", 6, unary<SqrtOp>);
  t.on("Reciprocal", 6, unary<ReciprocalOp>);
  t.on("Tanh", 6, unary<TanhOp>);
  t.on("Sigmoid", 6, unary<SigmoidOp>);
  t.on("Relu", 6, unary<ReluOp>);
  t.on("Erf", 9, unary<ErfOp>);
  t.on("Sin", 7, unary<SinOp>);
  t.on("Cos", 7, unary<CosOp>);
  t.on("LeakyRelu", 6, leakyRelu);
  t.on("Gelu", 20, gelu);
  t.on("Clip", 6, clip6);
  t.on("Clip", 11, clip11);
  t.on("Cast", 6, castOp);
  t.on("CastLike", 15, castLike);
  t.on("Identity", 1, identity);
}

//===- Activations.cpp - ONNX activations and elementwise predicates ------===//
//
// HardSigmoid, HardSwish, Elu, Selu, Celu, Softplus, Softsign, Mish,
// ThresholdedRelu, Shrink, PRelu, Sign, IsNaN, IsInf, Mean, Floor, Ceil,
// Round, Mod, Tan and the hyperbolic functions, each written
// in the dialect's existing ops (as torch.onnx's decompositions do): they
// then have kernels on both backends, differentiation rules and sharding
// rules without a line of their own, and a split tensor stays split through
// them. Where one branch of a select would overflow (exp of a large x), its
// operand is clamped to the branch's own domain first, so that the branch
// the select discards cannot turn a gradient into 0 * inf = NaN.
//
//===----------------------------------------------------------------------===//

#include "Expr.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::cleave;
using namespace mlir::cleave::onnx_import;

namespace {

/// Input 0, which must be a float tensor.
FailureOr<Value> floatInput(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  Type element = NodeContext::typeOf(*x).getElementType();
  if (!isa<FloatType>(element))
    return ctx.error() << "needs a float input, got " << element;
  return x;
}

Type elementOf(Value v) { return NodeContext::typeOf(v).getElementType(); }

/// Input 0, which must be a number tensor (not bool).
FailureOr<Value> numericInput(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  if (elementOf(*x).isInteger(1))
    return ctx.error() << "needs a numeric input, got bool";
  return x;
}

/// max(0, min(1, alpha * x + beta)).
Value hardSigmoidOf(Expr &e, Value x, double alpha, double beta) {
  return e.max(e.k(0.0),
               e.min(e.k(1.0), e.add(e.mul(e.k(alpha), x), e.k(beta))));
}

LogicalResult hardSigmoid(NodeContext &ctx) {
  FailureOr<Value> x = floatInput(ctx);
  if (failed(x))
    return failure();
  Expr e(ctx, elementOf(*x));
  return e.result(hardSigmoidOf(e, *x, ctx.attrFloat("alpha", 0.2f),
                                ctx.attrFloat("beta", 0.5f)));
}

LogicalResult hardSwish(NodeContext &ctx) {
  FailureOr<Value> x = floatInput(ctx);
  if (failed(x))
    return failure();
  Expr e(ctx, elementOf(*x));
  return e.result(e.mul(*x, hardSigmoidOf(e, *x, 1.0 / 6.0, 0.5)));
}

LogicalResult elu(NodeContext &ctx) {
  FailureOr<Value> x = floatInput(ctx);
  if (failed(x))
    return failure();
  Expr e(ctx, elementOf(*x));
  Value negative = e.expm1Negative(*x, ctx.attrFloat("alpha", 1.0f));
  return e.result(
      e.select(e.cmp(CmpPredicate::lt, *x, e.k(0.0)), negative, *x));
}

LogicalResult selu(NodeContext &ctx) {
  FailureOr<Value> x = floatInput(ctx);
  if (failed(x))
    return failure();
  Expr e(ctx, elementOf(*x));
  double alpha = ctx.attrFloat("alpha", 1.67326319217681884765625f);
  double gamma = ctx.attrFloat("gamma", 1.05070102214813232421875f);
  Value inner = e.select(e.cmp(CmpPredicate::le, *x, e.k(0.0)),
                         e.expm1Negative(*x, alpha), *x);
  return e.result(e.mul(e.k(gamma), inner));
}

/// max(0, x) + min(0, alpha * (exp(x / alpha) - 1)); the second term is
/// already <= 0 where it is not 0.
LogicalResult celu(NodeContext &ctx) {
  FailureOr<Value> x = floatInput(ctx);
  if (failed(x))
    return failure();
  Expr e(ctx, elementOf(*x));
  double alpha = ctx.attrFloat("alpha", 1.0f);
  if (alpha == 0)
    return ctx.error() << "alpha must not be 0";
  return e.result(
      e.add(e.max(*x, e.k(0.0)), e.expm1Negative(*x, alpha, alpha)));
}

LogicalResult softplus(NodeContext &ctx) {
  FailureOr<Value> x = floatInput(ctx);
  if (failed(x))
    return failure();
  Expr e(ctx, elementOf(*x));
  return e.result(e.softplus(*x));
}

LogicalResult softsign(NodeContext &ctx) {
  FailureOr<Value> x = floatInput(ctx);
  if (failed(x))
    return failure();
  Expr e(ctx, elementOf(*x));
  return e.result(e.div(*x, e.add(e.k(1.0), e.unary<AbsOp>(*x))));
}

LogicalResult mish(NodeContext &ctx) {
  FailureOr<Value> x = floatInput(ctx);
  if (failed(x))
    return failure();
  Expr e(ctx, elementOf(*x));
  return e.result(e.mul(*x, e.unary<TanhOp>(e.softplus(*x))));
}

LogicalResult thresholdedRelu(NodeContext &ctx) {
  FailureOr<Value> x = floatInput(ctx);
  if (failed(x))
    return failure();
  Expr e(ctx, elementOf(*x));
  Value above = e.cmp(CmpPredicate::gt, *x, e.k(ctx.attrFloat("alpha", 1.0f)));
  return e.result(e.select(above, *x, e.k(0.0)));
}

/// x + bias below -lambd, x - bias above lambd, 0 between; any numeric type.
LogicalResult shrink(NodeContext &ctx) {
  FailureOr<Value> x = numericInput(ctx);
  if (failed(x))
    return failure();
  Type element = elementOf(*x);
  Expr e(ctx, element);
  double lambd = ctx.attrFloat("lambd", 0.5f), bias = ctx.attrFloat("bias", 0);
  Value low = e.cmp(CmpPredicate::lt, *x, e.k(-lambd));
  Value high = e.cmp(CmpPredicate::gt, *x, e.k(lambd));
  return e.result(e.select(low, e.add(*x, e.k(bias)),
                           e.select(high, e.sub(*x, e.k(bias)), e.k(0.0))));
}

/// slope * x below 0, x elsewhere; slope broadcasts to x.
LogicalResult prelu(NodeContext &ctx) {
  FailureOr<Value> x = floatInput(ctx);
  FailureOr<Value> slope = ctx.input(1);
  if (failed(x) || failed(slope))
    return failure();
  if (NodeContext::rankOf(*slope) > NodeContext::rankOf(*x))
    return ctx.error() << "slope has a higher rank than X";
  Expr e(ctx, elementOf(*x));
  Value y =
      e.select(e.cmp(CmpPredicate::lt, *x, e.k(0.0)), e.mul(*slope, *x), *x);
  if (y && NodeContext::typeOf(y) != NodeContext::typeOf(*x))
    return ctx.error() << "slope of type " << NodeContext::typeOf(*slope)
                       << " does not broadcast to X of type "
                       << NodeContext::typeOf(*x);
  return e.result(y);
}

/// Before opset 7 a slope of C values is one per channel (dim 1 of X), not
/// numpy-broadcast against X's last dim.
LogicalResult prelu6(NodeContext &ctx) {
  FailureOr<Value> x = floatInput(ctx);
  FailureOr<Value> slope = ctx.input(1);
  if (failed(x) || failed(slope))
    return failure();
  auto xs = NodeContext::typeOf(*x).getShape();
  auto ss = NodeContext::typeOf(*slope).getShape();
  if (ss.size() != 1 || xs.size() < 2 || (ss[0] != 1 && ss[0] != xs[1]))
    return ctx.error() << "slope must hold 1 or C values for X of type "
                       << NodeContext::typeOf(*x);
  SmallVector<int64_t> shape(xs.size() - 1, 1);
  shape[0] = ss[0];
  Value perChannel = ctx.reshape(*slope, shape);
  Expr e(ctx, elementOf(*x));
  return e.result(e.select(e.cmp(CmpPredicate::lt, *x, e.k(0.0)),
                           e.mul(perChannel, *x), *x));
}

/// (x > 0) - (x < 0) in x's type; NaN stays NaN.
LogicalResult sign(NodeContext &ctx) {
  FailureOr<Value> x = numericInput(ctx);
  if (failed(x))
    return failure();
  Type element = elementOf(*x);
  Expr e(ctx, element);
  Value y = e.sub(e.cast(e.cmp(CmpPredicate::gt, *x, e.k(0.0)), element),
                  e.cast(e.cmp(CmpPredicate::lt, *x, e.k(0.0)), element));
  if (isa<FloatType>(element))
    y = e.select(e.cmp(CmpPredicate::ne, *x, *x), *x, y);
  return e.result(y);
}

LogicalResult isNaN(NodeContext &ctx) {
  FailureOr<Value> x = floatInput(ctx);
  if (failed(x))
    return failure();
  Expr e(ctx, elementOf(*x));
  return e.result(e.cmp(CmpPredicate::ne, *x, *x));
}

LogicalResult isInf(NodeContext &ctx) {
  FailureOr<Value> x = floatInput(ctx);
  if (failed(x))
    return failure();
  Expr e(ctx, elementOf(*x));
  const double inf = std::numeric_limits<double>::infinity();
  bool positive = ctx.attrInt("detect_positive", 1) != 0;
  bool negative = ctx.attrInt("detect_negative", 1) != 0;
  Value pos = e.cmp(CmpPredicate::eq, *x, e.k(inf));
  Value neg = e.cmp(CmpPredicate::eq, *x, e.k(-inf));
  if (positive && negative)
    return e.result(e.op<OrOp>({pos, neg}));
  if (positive || negative)
    return e.result(positive ? pos : neg);
  // Neither: false everywhere (no x is both), in x's shape.
  return e.result(e.op<AndOp>({pos, neg}));
}

/// The elementwise mean of the inputs, broadcasting.
LogicalResult mean(NodeContext &ctx) {
  FailureOr<Value> acc = floatInput(ctx);
  if (failed(acc))
    return failure();
  Expr e(ctx, elementOf(*acc));
  Value sum = *acc;
  for (unsigned i = 1; i < ctx.numInputs(); ++i) {
    FailureOr<Value> next = ctx.input(i);
    if (failed(next))
      return failure();
    sum = e.add(sum, *next);
  }
  return e.result(e.div(sum, e.k(static_cast<double>(ctx.numInputs()))));
}

/// Floor, Ceil and Round (half to even) on floats, through a round trip
/// to i64 (which truncates) where it is exact: |x| < 2^23, below which a
/// float can have a fraction; larger values, infinities and NaN are already
/// their own rounding and pass through. (Their gradient is 0 almost
/// everywhere, as in PyTorch, except that those pass-through values carry
/// x's gradient.)
enum class Rounding { Floor, Ceil, HalfEven };

template <Rounding R> LogicalResult rounding(NodeContext &ctx) {
  FailureOr<Value> x = floatInput(ctx);
  if (failed(x))
    return failure();
  Type element = elementOf(*x);
  Expr e(ctx, element);
  auto floorOf = [&](Value v) {
    Value t = e.cast(e.cast(v, ctx.b.getI64Type()), element);
    return e.sub(t, e.cast(e.cmp(CmpPredicate::gt, t, v), element));
  };
  Value r;
  if (R == Rounding::Floor) {
    r = floorOf(*x);
  } else if (R == Rounding::Ceil) {
    Value t = e.cast(e.cast(*x, ctx.b.getI64Type()), element);
    r = e.add(t, e.cast(e.cmp(CmpPredicate::lt, t, *x), element));
  } else {
    // floor(x), plus 1 above the half, and at the half when floor is odd.
    Value f = floorOf(*x);
    Value frac = e.sub(*x, f);
    Value odd =
        e.cmp(CmpPredicate::ne,
              e.sub(f, e.mul(e.k(2.0), floorOf(e.mul(f, e.k(0.5))))), e.k(0.0));
    Value up = e.op<OrOp>(
        {e.cmp(CmpPredicate::gt, frac, e.k(0.5)),
         e.op<AndOp>({e.cmp(CmpPredicate::eq, frac, e.k(0.5)), odd})});
    r = e.add(f, e.cast(up, element));
  }
  Value exact = e.cmp(CmpPredicate::lt, e.unary<AbsOp>(*x), e.k(8388608.0));
  return e.result(e.select(exact, r, *x));
}

/// tan, sinh, cosh and the inverse hyperbolics from exp, log, sqrt, sin,
/// cos (within float32 rounding of the library functions on the domains
/// models use them on).
enum class Trig { Tan, Sinh, Cosh, Asinh, Acosh, Atanh, Atan, Asin, Acos };

/// atan(x) in float32 as Cephes' atanf: the argument reduced to
/// [0, tan(pi / 8)] (by pi / 2 - atan(1 / a) above tan(3 pi / 8), by
/// pi / 4 + atan((a - 1) / (a + 1)) between), then an odd polynomial
/// (relative error about 1e-7). Each branch's operand is clamped to its
/// own range, so the branches the selects discard stay finite for any x,
/// infinities included.
Value atanOf(Expr &e, Value x) {
  constexpr double kTan3Pi8 = 2.414213562373095, kTanPi8 = 0.4142135623730950;
  Value a = e.unary<AbsOp>(x);
  Value big = e.cmp(CmpPredicate::gt, a, e.k(kTan3Pi8));
  Value mid = e.cmp(CmpPredicate::gt, a, e.k(kTanPi8));
  Value tBig = e.div(e.k(-1.0), e.max(a, e.k(kTan3Pi8)));
  Value am = e.min(a, e.k(kTan3Pi8));
  Value tMid = e.div(e.sub(am, e.k(1.0)), e.add(am, e.k(1.0)));
  Value t = e.select(big, tBig, e.select(mid, tMid, a));
  Value base =
      e.select(big, e.k(M_PI / 2), e.select(mid, e.k(M_PI / 4), e.k(0.0)));
  Value z = e.mul(t, t);
  Value p = e.sub(e.mul(e.add(e.mul(e.sub(e.mul(e.k(8.05374449538e-2), z),
                                          e.k(1.38776856032e-1)),
                                    z),
                              e.k(1.99777106478e-1)),
                        z),
                  e.k(3.33329491539e-1));
  Value r = e.add(base, e.add(e.mul(e.mul(p, z), t), t));
  Value negative = e.cmp(CmpPredicate::lt, x, e.k(0.0));
  return e.select(negative, e.unary<NegOp>(r), r);
}

template <Trig T> LogicalResult trig(NodeContext &ctx) {
  FailureOr<Value> x = floatInput(ctx);
  if (failed(x))
    return failure();
  Expr e(ctx, elementOf(*x));
  auto log = [&](Value v) { return e.unary<LogOp>(v); };
  auto sqrt = [&](Value v) { return e.unary<SqrtOp>(v); };
  Value half = e.k(0.5), one = e.k(1.0);
  switch (T) {
  case Trig::Tan:
    return e.result(e.div(e.unary<SinOp>(*x), e.unary<CosOp>(*x)));
  case Trig::Sinh:
    return e.result(e.mul(half, e.sub(e.exp(*x), e.exp(e.unary<NegOp>(*x)))));
  case Trig::Cosh:
    return e.result(e.mul(half, e.add(e.exp(*x), e.exp(e.unary<NegOp>(*x)))));
  case Trig::Asinh: {
    // Odd: computed on |x| so that large negative x does not cancel.
    Value a = e.unary<AbsOp>(*x);
    Value r = log(e.add(a, sqrt(e.add(e.mul(a, a), one))));
    Value negative = e.cmp(CmpPredicate::lt, *x, e.k(0.0));
    return e.result(e.select(negative, e.unary<NegOp>(r), r));
  }
  case Trig::Acosh:
    return e.result(log(e.add(*x, sqrt(e.sub(e.mul(*x, *x), one)))));
  case Trig::Atanh:
    return e.result(e.mul(half, log(e.div(e.add(one, *x), e.sub(one, *x)))));
  case Trig::Atan:
    return e.result(atanOf(e, *x));
  case Trig::Asin:
    // x / sqrt((1 - x)(1 + x)): the product keeps its precision near 1.
    return e.result(
        atanOf(e, e.div(*x, sqrt(e.mul(e.sub(one, *x), e.add(one, *x))))));
  case Trig::Acos:
    // 2 atan(sqrt((1 - x) / (1 + x))): accurate near 1, where pi / 2 -
    // asin(x) would cancel.
    return e.result(e.mul(
        e.k(2.0), atanOf(e, sqrt(e.div(e.sub(one, *x), e.add(one, *x))))));
  }
  return failure();
}

/// Mod: with fmod = 1 C's fmod (the dividend's sign); with fmod = 0
/// (integers only) Python's % (the divisor's sign). Both from a truncating
/// quotient: integer division truncates, floats go through rounding's i64
/// round trip where the quotient has a fraction.
LogicalResult mod(NodeContext &ctx) {
  FailureOr<Value> a = ctx.input(0), b = ctx.input(1);
  if (failed(a) || failed(b))
    return failure();
  Type element = elementOf(*a);
  if (element != elementOf(*b))
    return ctx.error() << "A and B must have one element type, got " << element
                       << " and " << elementOf(*b);
  if (element.isInteger(1))
    return ctx.error() << "needs numeric inputs, got bool";
  bool fmod = ctx.attrInt("fmod", 0) != 0;
  bool isFloat = isa<FloatType>(element);
  if (isFloat && !fmod)
    return ctx.error() << "fmod must be 1 for float inputs";
  Expr e(ctx, element);
  Value q = e.div(*a, *b);
  if (isFloat) {
    Value t = e.cast(e.cast(q, ctx.b.getI64Type()), element);
    Value exact = e.cmp(CmpPredicate::lt, e.unary<AbsOp>(q), e.k(8388608.0));
    q = e.select(exact, t, q);
  }
  Value r = e.sub(*a, e.mul(*b, q));
  if (!fmod) {
    Value zero = e.k(0.0);
    Value wrong =
        e.op<AndOp>({e.cmp(CmpPredicate::ne, r, zero),
                     e.op<XorOp>({e.cmp(CmpPredicate::lt, r, zero),
                                  e.cmp(CmpPredicate::lt, *b, zero)})});
    r = e.select(wrong, e.add(r, *b), r);
  }
  return e.result(r);
}

} // namespace

void onnx_import::registerActivationHandlers(HandlerTable &t) {
  t.on("HardSigmoid", 6, hardSigmoid);
  t.on("HardSwish", 14, hardSwish);
  t.on("Elu", 6, elu);
  t.on("Selu", 6, selu);
  t.on("Celu", 12, celu);
  t.on("Softplus", 1, softplus);
  t.on("Softsign", 1, softsign);
  t.on("Mish", 18, mish);
  t.on("ThresholdedRelu", 10, thresholdedRelu);
  t.on("Shrink", 9, shrink);
  t.on("PRelu", 1, prelu6);
  t.on("PRelu", 7, prelu);
  t.on("Sign", 9, sign);
  t.on("IsNaN", 9, isNaN);
  t.on("IsInf", 10, isInf);
  t.on("Mean", 1, mean);
  t.on("Floor", 6, rounding<Rounding::Floor>);
  t.on("Ceil", 6, rounding<Rounding::Ceil>);
  t.on("Round", 11, rounding<Rounding::HalfEven>);
  t.on("Tan", 7, trig<Trig::Tan>);
  t.on("Sinh", 9, trig<Trig::Sinh>);
  t.on("Cosh", 9, trig<Trig::Cosh>);
  t.on("Asinh", 9, trig<Trig::Asinh>);
  t.on("Acosh", 9, trig<Trig::Acosh>);
  t.on("Atanh", 9, trig<Trig::Atanh>);
  t.on("Atan", 7, trig<Trig::Atan>);
  t.on("Asin", 7, trig<Trig::Asin>);
  t.on("Acos", 7, trig<Trig::Acos>);
  t.on("Mod", 10, mod);
}

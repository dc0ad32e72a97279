//===- Expr.h - Formulas over one node's operands ---------------*- C++ -*-===//
//
// Handlers that write an ONNX op as a formula of the dialect's ops build it
// through Expr: numpy's rank alignment on every step, and a failure anywhere
// leaves a null value (the failing op's diagnostic already emitted) that
// every later step passes on, so a formula checks once, at its end.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_LIB_IMPORT_ONNX_EXPR_H
#define CLEAVE_LIB_IMPORT_ONNX_EXPR_H

#include "NodeContext.h"

namespace mlir::cleave::onnx_import {

/// Builds an expression over one node's operands: each step broadcasts
/// (numpy's rank alignment) and a failure anywhere leaves a null value and
/// the diagnostic the failing op emitted.
class Expr {
public:
  Expr(NodeContext &ctx, Type element) : ctx(ctx), element(element) {}

  Value k(double v) { return ctx.splat(element, {}, v); }
  template <typename OpTy> Value op(ArrayRef<Value> operands) {
    for (Value v : operands)
      if (!v)
        return {};
    FailureOr<Value> r = ctx.createBroadcasting<OpTy>(operands);
    return succeeded(r) ? *r : Value();
  }
  Value add(Value a, Value b) { return op<AddOp>({a, b}); }
  Value sub(Value a, Value b) { return op<SubOp>({a, b}); }
  Value mul(Value a, Value b) { return op<MulOp>({a, b}); }
  Value div(Value a, Value b) { return op<DivOp>({a, b}); }
  Value max(Value a, Value b) { return op<MaxOp>({a, b}); }
  Value min(Value a, Value b) { return op<MinOp>({a, b}); }
  Value select(Value c, Value t, Value f) { return op<SelectOp>({c, t, f}); }
  template <typename OpTy> Value unary(Value a) {
    return a ? ctx.b.createOrFold<OpTy>(a) : Value();
  }
  Value exp(Value a) { return unary<ExpOp>(a); }
  Value cmp(CmpPredicate p, Value a, Value b) {
    if (!a || !b)
      return {};
    FailureOr<Value> r = ctx.compare(p, a, b);
    return succeeded(r) ? *r : Value();
  }
  Value cast(Value a, Type to) {
    if (!a)
      return {};
    return ctx.b.createOrFold<CastOp>(NodeContext::typeOf(a).clone(to), a);
  }
  /// alpha * (exp(min(x, 0) / scale) - 1): the negative branch of the ELU
  /// family, finite for every x.
  Value expm1Negative(Value x, double alpha, double scale = 1.0) {
    Value e = min(x, k(0.0));
    if (scale != 1.0)
      e = div(e, k(scale));
    return mul(k(alpha), sub(exp(e), k(1.0)));
  }
  /// log(1 + exp(x)) as max(x, 0) + log(1 + exp(-|x|)): no overflow.
  Value softplus(Value x) {
    Value t = exp(unary<NegOp>(unary<AbsOp>(x)));
    return add(max(x, k(0.0)), unary<LogOp>(add(k(1.0), t)));
  }

  LogicalResult result(Value v) {
    if (!v)
      return failure();
    ctx.setOutput(0, v);
    return success();
  }

private:
  NodeContext &ctx;
  Type element;
};

} // namespace mlir::cleave::onnx_import

#endif // CLEAVE_LIB_IMPORT_ONNX_EXPR_H

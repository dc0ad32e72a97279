//===- DifferentiationRules.cpp - VJPs of the cleave ops --------*- C++ -*-===//
//
// One vector-Jacobian product per differentiable op, attached to the ops as
// external models of DifferentiableOpInterface. Each rule reuses the forward
// op's operands and results (the backward pass never recomputes a forward
// value it can read) and reduces gradients of broadcast operands back to the
// operand's shape. Conventions where PyTorch defines a subgradient are
// PyTorch's, so trained parameters match it: relu'(0) = 0, ties of max/min
// share the gradient, max pooling routes to the first maximum.
//
//===----------------------------------------------------------------------===//

#include "Cleave/CleaveInterfaces.h"
#include "Cleave/CleaveOps.h"
#include "cleave/Autodiff/Autodiff.h"

#include <cmath>

using namespace mlir;
using namespace mlir::cleave;

namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// Rule-building helpers bound to one builder and location.
struct Emitter {
  OpBuilder &b;
  Location loc;

  /// A splat of \p value with the rank of \p like and all dimensions 1, so it
  /// broadcasts against \p like in elementwise ops.
  Value scalar(Value like, double value) {
    auto type = typeOf(like);
    SmallVector<int64_t> ones(type.getRank(), 1);
    auto t = RankedTensorType::get(ones, type.getElementType());
    Attribute v;
    if (isa<FloatType>(type.getElementType()))
      v = b.getFloatAttr(type.getElementType(), value);
    else
      v = b.getIntegerAttr(type.getElementType(), static_cast<int64_t>(value));
    return ConstantOp::create(b, loc, DenseElementsAttr::get(t, v));
  }
  Value add(Value x, Value y) { return AddOp::create(b, loc, x, y); }
  Value sub(Value x, Value y) { return SubOp::create(b, loc, x, y); }
  Value mul(Value x, Value y) { return MulOp::create(b, loc, x, y); }
  Value div(Value x, Value y) { return DivOp::create(b, loc, x, y); }
  Value neg(Value x) { return NegOp::create(b, loc, x); }
  Value mul(Value x, double c) { return mul(x, scalar(x, c)); }
  Value cmp(CmpPredicate p, Value x, Value y) {
    return CmpOp::create(b, loc, p, x, y);
  }
  Value select(Value c, Value x, Value y) {
    return SelectOp::create(b, loc, c, x, y);
  }
  Value reduce(ReduceKind kind, Value x, ArrayRef<int64_t> dims, bool keep) {
    return ReduceOp::create(b, loc, kind, x, dims, keep);
  }
  Value reshape(Value x, RankedTensorType type) {
    if (x.getType() == type)
      return x;
    return ReshapeOp::create(b, loc, type, x);
  }
  Value broadcastTo(Value x, RankedTensorType type) {
    if (x.getType() == type)
      return x;
    return BroadcastOp::create(b, loc, type, x);
  }

  /// Sums \p grad (of a broadcast result's shape) over the dimensions where
  /// \p target has extent 1, giving the gradient of the broadcast operand.
  Value reduceTo(Value grad, Type target) {
    auto t = cast<RankedTensorType>(target);
    if (grad.getType() == t)
      return grad;
    auto g = typeOf(grad);
    SmallVector<int64_t> dims;
    for (int64_t d = 0; d < t.getRank(); ++d)
      if (t.getDimSize(d) == 1 && g.getDimSize(d) != 1)
        dims.push_back(d);
    Value r = dims.empty() ? grad : reduce(ReduceKind::sum, grad, dims, true);
    return reshape(r, t);
  }
};

/// The reduced dimensions' shape kept as 1 (the keep_dims form of a reduce).
RankedTensorType keptType(ReduceOp op) {
  auto in = typeOf(op.getInput());
  SmallVector<int64_t> shape(in.getShape());
  for (int64_t d : op.getDims())
    shape[d] = 1;
  return RankedTensorType::get(shape, in.getElementType());
}

//===----------------------------------------------------------------------===//
// The external model: a rule function per op type.
//===----------------------------------------------------------------------===//

template <typename OpTy>
LogicalResult vjp(OpTy op, Emitter &e, ArrayRef<Value> g, ArrayRef<bool> needed,
                  MutableArrayRef<Value> out);

template <typename OpTy>
struct Rule
    : public DifferentiableOpInterface::ExternalModel<Rule<OpTy>, OpTy> {
  LogicalResult buildVJP(Operation *op, OpBuilder &builder,
                         ArrayRef<Value> resultGrads, ArrayRef<bool> needed,
                         MutableArrayRef<Value> operandGrads) const {
    // The forward op's location, tagged: profiles tell an op's backward
    // from its forward, and messages still name the model's node.
    Emitter e{builder, FusedLoc::get(builder.getContext(), {op->getLoc()},
                                     builder.getStringAttr("backward"))};
    return vjp(cast<OpTy>(op), e, resultGrads, needed, operandGrads);
  }
};

// --- Elementwise binary ------------------------------------------------------

template <>
LogicalResult vjp(AddOp op, Emitter &e, ArrayRef<Value> g,
                  ArrayRef<bool> needed, MutableArrayRef<Value> out) {
  if (needed[0])
    out[0] = e.reduceTo(g[0], op.getLhs().getType());
  if (needed[1])
    out[1] = e.reduceTo(g[0], op.getRhs().getType());
  return success();
}

template <>
LogicalResult vjp(SubOp op, Emitter &e, ArrayRef<Value> g,
                  ArrayRef<bool> needed, MutableArrayRef<Value> out) {
  if (needed[0])
    out[0] = e.reduceTo(g[0], op.getLhs().getType());
  if (needed[1])
    out[1] = e.reduceTo(e.neg(g[0]), op.getRhs().getType());
  return success();
}

template <>
LogicalResult vjp(MulOp op, Emitter &e, ArrayRef<Value> g,
                  ArrayRef<bool> needed, MutableArrayRef<Value> out) {
  if (needed[0])
    out[0] = e.reduceTo(e.mul(g[0], op.getRhs()), op.getLhs().getType());
  if (needed[1])
    out[1] = e.reduceTo(e.mul(g[0], op.getLhs()), op.getRhs().getType());
  return success();
}

template <>
LogicalResult vjp(DivOp op, Emitter &e, ArrayRef<Value> g,
                  ArrayRef<bool> needed, MutableArrayRef<Value> out) {
  Value gOverY = e.div(g[0], op.getRhs());
  if (needed[0])
    out[0] = e.reduceTo(gOverY, op.getLhs().getType());
  if (needed[1]) // d(x/y)/dy = -(x/y)/y
    out[1] =
        e.reduceTo(e.neg(e.mul(gOverY, op.getResult())), op.getRhs().getType());
  return success();
}

template <>
LogicalResult vjp(PowOp op, Emitter &e, ArrayRef<Value> g,
                  ArrayRef<bool> needed, MutableArrayRef<Value> out) {
  Value x = op.getLhs(), y = op.getRhs();
  if (needed[0]) {
    Value yMinus1 = e.sub(y, e.scalar(y, 1.0));
    Value d = e.mul(y, PowOp::create(e.b, e.loc, x, yMinus1));
    out[0] = e.reduceTo(e.mul(g[0], d), x.getType());
  }
  if (needed[1]) {
    Value d = e.mul(op.getResult(), LogOp::create(e.b, e.loc, x));
    out[1] = e.reduceTo(e.mul(g[0], d), y.getType());
  }
  return success();
}

/// max/min: the winner gets the gradient; a tie splits it (PyTorch's rule
/// for maximum/minimum).
template <typename OpTy>
LogicalResult extremumVJP(OpTy op, Emitter &e, ArrayRef<Value> g,
                          ArrayRef<bool> needed, MutableArrayRef<Value> out,
                          CmpPredicate wins) {
  Value x = op.getLhs(), y = op.getRhs();
  Value gx = e.select(e.cmp(wins, x, y), g[0],
                      e.select(e.cmp(CmpPredicate::eq, x, y), e.mul(g[0], 0.5),
                               e.scalar(g[0], 0.0)));
  if (needed[0])
    out[0] = e.reduceTo(gx, x.getType());
  if (needed[1])
    out[1] = e.reduceTo(e.sub(g[0], gx), y.getType());
  return success();
}

template <>
LogicalResult vjp(MaxOp op, Emitter &e, ArrayRef<Value> g,
                  ArrayRef<bool> needed, MutableArrayRef<Value> out) {
  return extremumVJP(op, e, g, needed, out, CmpPredicate::gt);
}

template <>
LogicalResult vjp(MinOp op, Emitter &e, ArrayRef<Value> g,
                  ArrayRef<bool> needed, MutableArrayRef<Value> out) {
  return extremumVJP(op, e, g, needed, out, CmpPredicate::lt);
}

template <>
LogicalResult vjp(SelectOp op, Emitter &e, ArrayRef<Value> g,
                  ArrayRef<bool> needed, MutableArrayRef<Value> out) {
  Value zero = e.scalar(g[0], 0.0);
  if (needed[1])
    out[1] = e.reduceTo(e.select(op.getCond(), g[0], zero),
                        op.getOnTrue().getType());
  if (needed[2])
    out[2] = e.reduceTo(e.select(op.getCond(), zero, g[0]),
                        op.getOnFalse().getType());
  return success();
}

// --- Elementwise unary -------------------------------------------------------

/// Rules of the form grad_in = grad_out * f'(x, y) with y the result.
template <typename OpTy, typename Fn>
LogicalResult unary(OpTy op, Emitter &e, ArrayRef<Value> g,
                    ArrayRef<bool> needed, MutableArrayRef<Value> out, Fn fn) {
  if (needed[0])
    out[0] = fn(op.getInput(), op.getResult(), g[0]);
  return success();
}

#define CLEAVE_UNARY_RULE(OP, BODY)                                            \
  template <>                                                                  \
  LogicalResult vjp(OP op, Emitter &e, ArrayRef<Value> g,                      \
                    ArrayRef<bool> needed, MutableArrayRef<Value> out) {       \
    return unary(op, e, g, needed,                                             \
                 out, [&](Value x, Value y, Value gy)->Value BODY);            \
  }

CLEAVE_UNARY_RULE(NegOp, { return e.neg(gy); })
CLEAVE_UNARY_RULE(AbsOp, {
  (void)y;
  Value zero = e.scalar(x, 0.0);
  Value sign = e.select(
      e.cmp(CmpPredicate::gt, x, zero), e.scalar(x, 1.0),
      e.select(e.cmp(CmpPredicate::lt, x, zero), e.scalar(x, -1.0), zero));
  return e.mul(gy, sign);
})
CLEAVE_UNARY_RULE(ExpOp, { return e.mul(gy, y); })
CLEAVE_UNARY_RULE(LogOp, { return e.div(gy, x); })
CLEAVE_UNARY_RULE(SqrtOp, { return e.div(gy, e.mul(y, 2.0)); })
CLEAVE_UNARY_RULE(RsqrtOp, {
  // d x^(-1/2) = -1/2 x^(-3/2) = -1/2 y^3
  return e.mul(e.mul(gy, e.mul(y, e.mul(y, y))), -0.5);
})
CLEAVE_UNARY_RULE(ReciprocalOp, { return e.neg(e.mul(gy, e.mul(y, y))); })
CLEAVE_UNARY_RULE(TanhOp,
                  { return e.mul(gy, e.sub(e.scalar(y, 1.0), e.mul(y, y))); })
CLEAVE_UNARY_RULE(SigmoidOp,
                  { return e.mul(gy, e.mul(y, e.sub(e.scalar(y, 1.0), y))); })
CLEAVE_UNARY_RULE(ReluOp, {
  // From the result, as PyTorch's threshold_backward: y > 0 exactly when
  // x > 0 (NaN and -0 included), and y is usually kept anyway (the next
  // layer's input), so x need not survive to the backward pass.
  (void)x;
  Value zero = e.scalar(y, 0.0);
  return e.select(e.cmp(CmpPredicate::gt, y, zero), gy, zero);
})
CLEAVE_UNARY_RULE(ErfOp, {
  (void)y;
  Value gauss = ExpOp::create(e.b, e.loc, e.neg(e.mul(x, x)));
  return e.mul(gy, e.mul(gauss, 2.0 / std::sqrt(M_PI)));
})
CLEAVE_UNARY_RULE(SinOp, {
  (void)y;
  return e.mul(gy, CosOp::create(e.b, e.loc, x));
})
CLEAVE_UNARY_RULE(CosOp, {
  (void)y;
  return e.neg(e.mul(gy, SinOp::create(e.b, e.loc, x)));
})

template <>
LogicalResult vjp(LeakyReluOp op, Emitter &e, ArrayRef<Value> g,
                  ArrayRef<bool> needed, MutableArrayRef<Value> out) {
  if (!needed[0])
    return success();
  Value x = op.getInput();
  Value positive = e.cmp(CmpPredicate::gt, x, e.scalar(x, 0.0));
  out[0] =
      e.select(positive, g[0], e.mul(g[0], op.getAlpha().convertToDouble()));
  return success();
}

template <>
LogicalResult vjp(GeluOp op, Emitter &e, ArrayRef<Value> g,
                  ArrayRef<bool> needed, MutableArrayRef<Value> out) {
  if (!needed[0])
    return success();
  Value x = op.getInput();
  Value d;
  if (!op.getApproximate()) {
    // Phi(x) + x phi(x)
    Value cdf = e.mul(
        e.add(e.scalar(x, 1.0), ErfOp::create(e.b, e.loc, e.mul(x, M_SQRT1_2))),
        0.5);
    Value pdf = e.mul(ExpOp::create(e.b, e.loc, e.mul(e.mul(x, x), -0.5)),
                      1.0 / std::sqrt(2.0 * M_PI));
    d = e.add(cdf, e.mul(x, pdf));
  } else {
    // PyTorch's derivative of 0.5 x (1 + tanh(beta (x + kappa x^3))).
    const double beta = std::sqrt(2.0 / M_PI), kappa = 0.044715;
    Value x2 = e.mul(x, x);
    Value inner = e.mul(e.add(x, e.mul(e.mul(x2, x), kappa)), beta);
    Value t = TanhOp::create(e.b, e.loc, inner);
    Value left = e.mul(e.add(e.scalar(x, 1.0), t), 0.5);
    Value dInner = e.mul(e.add(e.scalar(x, 1.0), e.mul(x2, 3.0 * kappa)), beta);
    Value right = e.mul(
        e.mul(e.mul(x, 0.5), e.sub(e.scalar(x, 1.0), e.mul(t, t))), dInner);
    d = e.add(left, right);
  }
  out[0] = e.mul(g[0], d);
  return success();
}

// --- Matmul
// --------------------------------------------------------------------

/// Whether every batch dimension (all but the last two) of \p type is 1.
bool unitBatch(RankedTensorType type) {
  return llvm::all_of(type.getShape().drop_back(2),
                      [](int64_t d) { return d == 1; });
}

template <>
LogicalResult vjp(MatmulOp op, Emitter &e, ArrayRef<Value> g,
                  ArrayRef<bool> needed, MutableArrayRef<Value> out) {
  Value a = op.getLhs(), b = op.getRhs(), gc = g[0];
  bool ta = op.getTransposeLhs(), tb = op.getTransposeRhs();
  auto mm = [&](Value x, Value y, bool tx, bool ty) -> Value {
    return MatmulOp::create(e.b, e.loc, x, y, tx, ty);
  };
  auto ga = typeOf(a), gb = typeOf(b), gt = typeOf(gc);
  int64_t rank = gt.getRank();
  if (needed[0]) {
    // C = A' B' gives dA' = G B'^T.
    out[0] = e.reduceTo(ta ? mm(b, gc, tb, true) : mm(gc, b, false, !tb),
                        a.getType());
  }
  if (needed[1]) {
    if (rank > 2 && unitBatch(gb) && !unitBatch(ga) && !ta &&
        llvm::equal(ga.getShape().drop_back(2), gt.getShape().drop_back(2))) {
      // A weight shared by every batch element (x W with x [..., m, k]): fold
      // the batch into the rows so one large product replaces a batch of
      // small ones and the sum over the batch.
      int64_t rows = ga.getNumElements() / ga.getShape().back();
      SmallVector<int64_t> flatA(rank - 2, 1), flatG(rank - 2, 1);
      flatA.append({rows, ga.getShape().back()});
      flatG.append({rows, gt.getShape().back()});
      Value af =
          e.reshape(a, RankedTensorType::get(flatA, ga.getElementType()));
      Value gf =
          e.reshape(gc, RankedTensorType::get(flatG, gt.getElementType()));
      // dB' = A^T G; dB = (dB')^T = G^T A when B is read transposed.
      out[1] = tb ? mm(gf, af, true, false) : mm(af, gf, true, false);
    } else {
      out[1] = e.reduceTo(tb ? mm(gc, a, true, ta) : mm(a, gc, !ta, false),
                          b.getType());
    }
  }
  return success();
}

// --- Reductions and normalisations
// --------------------------------------------

template <>
LogicalResult vjp(ReduceOp op, Emitter &e, ArrayRef<Value> g,
                  ArrayRef<bool> needed, MutableArrayRef<Value> out) {
  if (!needed[0])
    return success();
  Value x = op.getInput();
  auto xType = typeOf(x);
  auto kept = keptType(op);
  Value gk = e.reshape(g[0], kept);
  switch (op.getKind()) {
  case ReduceKind::sum:
    out[0] = e.broadcastTo(gk, xType);
    return success();
  case ReduceKind::mean: {
    int64_t count =
        xType.getNumElements() / std::max<int64_t>(1, kept.getNumElements());
    out[0] = e.broadcastTo(e.mul(gk, 1.0 / static_cast<double>(count)), xType);
    return success();
  }
  case ReduceKind::max:
  case ReduceKind::min: {
    // Ties share the gradient evenly (PyTorch's amax/amin).
    Value y = e.reshape(op.getResult(), kept);
    Value hit =
        CastOp::create(e.b, e.loc, xType, e.cmp(CmpPredicate::eq, x, y));
    Value count = e.reduce(ReduceKind::sum, hit, op.getDims(), true);
    out[0] = e.mul(hit, e.div(gk, count));
    return success();
  }
  case ReduceKind::prod: {
    Value y = e.reshape(op.getResult(), kept);
    out[0] = e.div(e.mul(gk, y), x);
    return success();
  }
  }
  return op.emitOpError("has an unknown reduction kind");
}

template <>
LogicalResult vjp(SoftmaxOp op, Emitter &e, ArrayRef<Value> g,
                  ArrayRef<bool> needed, MutableArrayRef<Value> out) {
  if (!needed[0])
    return success();
  Value y = op.getResult();
  Value dot = e.reduce(ReduceKind::sum, e.mul(g[0], y),
                       {static_cast<int64_t>(op.getAxis())}, true);
  out[0] = e.mul(y, e.sub(g[0], dot));
  return success();
}

template <>
LogicalResult vjp(LogSoftmaxOp op, Emitter &e, ArrayRef<Value> g,
                  ArrayRef<bool> needed, MutableArrayRef<Value> out) {
  if (!needed[0])
    return success();
  Value softmax = ExpOp::create(e.b, e.loc, op.getResult());
  Value total = e.reduce(ReduceKind::sum, g[0],
                         {static_cast<int64_t>(op.getAxis())}, true);
  out[0] = e.sub(g[0], e.mul(softmax, total));
  return success();
}

/// \p x ([B, Hk, S, D], attention's keys or values) with each head repeated
/// for the query heads that read it: [B, heads, S, D]. One head is a plain
/// broadcast (what multi-query exporters write, and what the partitioner
/// splits by query heads); groups go through [B, Hk, group, S, D].
Value repeatHeads(Emitter &e, Value x, int64_t heads) {
  auto t = typeOf(x);
  int64_t kvHeads = t.getDimSize(1);
  Type f = t.getElementType();
  auto out = RankedTensorType::get(
      {t.getDimSize(0), heads, t.getDimSize(2), t.getDimSize(3)}, f);
  if (kvHeads == heads || kvHeads == 1)
    return e.broadcastTo(x, out);
  SmallVector<int64_t> five{t.getDimSize(0), kvHeads, 1, t.getDimSize(2),
                            t.getDimSize(3)};
  Value grouped = e.reshape(x, RankedTensorType::get(five, f));
  five[2] = heads / kvHeads;
  return e.reshape(e.broadcastTo(grouped, RankedTensorType::get(five, f)), out);
}

/// The gradient of attention's bias: the scores' gradient
/// `p (dout v^T - rowsum(dout out))`, with the probabilities re-formed from
/// the log-sum-exp, summed over the dims the bias broadcasts along. Only
/// learned biases (T5's relative positions) need it, and it is the one
/// place the scores are formed.
Value attentionBiasGrad(AttentionOp op, Emitter &e, Value grad) {
  Value q = op.getQuery();
  int64_t heads = typeOf(q).getDimSize(1);
  Value k = repeatHeads(e, op.getKey(), heads);
  Value v = repeatHeads(e, op.getValue(), heads);
  Value s = MatmulOp::create(e.b, e.loc, q, k, false, true);
  s = e.add(e.mul(s, op.getScale().convertToDouble()), op.getBias());
  auto sType = typeOf(s);
  auto lseType = RankedTensorType::get(
      {sType.getDimSize(0), sType.getDimSize(1), sType.getDimSize(2), 1},
      sType.getElementType());
  Value p =
      ExpOp::create(e.b, e.loc, e.sub(s, e.reshape(op.getLse(), lseType)));
  Value dp = MatmulOp::create(e.b, e.loc, grad, v, false, true);
  Value delta =
      e.reduce(ReduceKind::sum, e.mul(grad, op.getResult()), {3}, true);
  Value ds = e.mul(p, e.sub(dp, delta));
  if (op.getCausal()) {
    int64_t sq = sType.getDimSize(2), sk = sType.getDimSize(3);
    SmallVector<bool> keep(sq * sk);
    for (int64_t i = 0; i < sq; ++i)
      for (int64_t j = 0; j < sk; ++j)
        keep[i * sk + j] = j <= i + sk - sq;
    auto maskType = RankedTensorType::get({1, 1, sq, sk}, e.b.getI1Type());
    Value mask =
        ConstantOp::create(e.b, e.loc, DenseElementsAttr::get(maskType, keep));
    ds = e.select(mask, ds, e.scalar(ds, 0.0));
  }
  return e.reduceTo(ds, op.getBias().getType());
}

template <>
LogicalResult vjp(CrossEntropyOp op, Emitter &e, ArrayRef<Value> g,
                  ArrayRef<bool> needed, MutableArrayRef<Value> out) {
  // The shift only stabilises (the builders mark it no_grad), so only the
  // logits get a gradient; a missing result gradient is zero.
  if (!needed[0] || (!g[0] && !g[1]))
    return success();
  Value shift = op.getShift();
  auto zero = [&] {
    return e.broadcastTo(e.scalar(shift, 0.0), typeOf(shift));
  };
  Value gs = g[0] ? g[0] : zero();
  Value gt = g[1] ? g[1] : zero();
  out[0] = CrossEntropyBackwardOp::create(e.b, e.loc, op.getLogits(),
                                          op.getLabels(), op.getClassIds(),
                                          shift, gs, gt, op.getAxis());
  return success();
}

template <>
LogicalResult vjp(AttentionOp op, Emitter &e, ArrayRef<Value> g,
                  ArrayRef<bool> needed, MutableArrayRef<Value> out) {
  if (g[1])
    return op.emitOpError("log-sum-exp result is not differentiable");
  if (!g[0])
    return success();
  if (needed[0] || needed[1] || needed[2]) {
    // One K/V head for several query heads (multi-query): the backward
    // reads it repeated per query head and sums the gradients back, so
    // that split query heads leave a partial sum like any reduction.
    Value key = op.getKey(), value = op.getValue();
    int64_t heads = typeOf(op.getQuery()).getDimSize(1);
    bool repeat = typeOf(key).getDimSize(1) == 1 && heads > 1;
    if (repeat) {
      key = repeatHeads(e, key, heads);
      value = repeatHeads(e, value, heads);
    }
    auto back = AttentionBackwardOp::create(
        e.b, e.loc, op.getQuery(), key, value, op.getResult(), op.getLse(),
        g[0], op.getBias(), op.getScaleAttr(), op.getCausalAttr());
    for (int i = 0; i < 3; ++i)
      if (needed[i])
        out[i] = repeat && i > 0 ? e.reduceTo(back->getResult(i),
                                              op->getOperand(i).getType())
                                 : back->getResult(i);
  }
  if (op.getBias() && needed[3])
    out[3] = attentionBiasGrad(op, e, g[0]);
  return success();
}

template <>
LogicalResult vjp(LayerNormOp op, Emitter &e, ArrayRef<Value> g,
                  ArrayRef<bool> needed, MutableArrayRef<Value> out) {
  Value x = op.getInput();
  auto xType = typeOf(x);
  int64_t axis = op.getAxis(), rank = xType.getRank();
  SmallVector<int64_t> normDims, outerDims;
  for (int64_t d = 0; d < rank; ++d)
    (d >= axis ? normDims : outerDims).push_back(d);
  int64_t n = 1;
  for (int64_t d : normDims)
    n *= xType.getDimSize(d);
  // scale/bias have the normalised dims' shape; aligned to x's rank they
  // broadcast against x.
  auto aligned = [&](Value v) {
    SmallVector<int64_t> shape(axis, 1);
    llvm::append_range(shape, typeOf(v).getShape());
    return e.reshape(v, RankedTensorType::get(shape, xType.getElementType()));
  };
  Value mean = op.getMean(), inv = op.getInvStdDev();
  Value gy = g[0];
  unsigned scaleIdx = 1, biasIdx = op.getScale() ? 2 : 1;
  // The usual case, only the result's gradient: one op, whose kernel makes
  // the three gradients in two passes (its results are those of the
  // formulas below, bit for bit).
  if (gy && !g[1] && !g[2] && xType.getElementType().isF32() &&
      typeOf(gy).getElementType().isF32()) {
    auto back = LayerNormBackwardOp::create(e.b, e.loc, x, mean, inv, gy,
                                            op.getScale(), op.getAxisAttr());
    out[0] = needed[0] ? back.getGradInput() : Value();
    if (op.getScale() && needed[scaleIdx])
      out[scaleIdx] = e.reshape(back.getGradScale(), typeOf(op.getScale()));
    if (op.getBias() && needed[biasIdx])
      out[biasIdx] = e.reshape(back.getGradBias(), typeOf(op.getBias()));
    return success();
  }
  Value xhat = e.mul(e.sub(x, mean), inv);
  auto sumOuter = [&](Value v, Value like) {
    Value r =
        outerDims.empty() ? v : e.reduce(ReduceKind::sum, v, outerDims, false);
    return e.reshape(r, typeOf(like));
  };
  if (gy) {
    if (op.getBias() && needed[biasIdx])
      out[biasIdx] = sumOuter(gy, op.getBias());
    if (op.getScale() && needed[scaleIdx])
      out[scaleIdx] = sumOuter(e.mul(gy, xhat), op.getScale());
  }
  if (!needed[0])
    return success();
  Value gx;
  if (gy) {
    Value gxhat = op.getScale() ? e.mul(gy, aligned(op.getScale())) : gy;
    Value meanG = e.reduce(ReduceKind::mean, gxhat, normDims, true);
    Value meanGX =
        e.reduce(ReduceKind::mean, e.mul(gxhat, xhat), normDims, true);
    gx = e.mul(inv, e.sub(e.sub(gxhat, meanG), e.mul(xhat, meanGX)));
  }
  auto accumulate = [&](Value term) { gx = gx ? e.add(gx, term) : term; };
  if (Value gMean = g[1]) // d mean / dx = 1/n
    accumulate(e.broadcastTo(e.mul(gMean, 1.0 / n), xType));
  if (Value gInv = g[2]) // d inv / dx = -inv^2 xhat / n
    accumulate(e.mul(e.mul(e.mul(gInv, e.mul(inv, inv)), -1.0 / n), xhat));
  out[0] = gx ? gx : e.broadcastTo(e.scalar(x, 0.0), xType);
  return success();
}

template <>
LogicalResult vjp(BatchNormOp op, Emitter &e, ArrayRef<Value> g,
                  ArrayRef<bool> needed, MutableArrayRef<Value> out) {
  Value x = op.getInput();
  auto xType = typeOf(x);
  int64_t rank = xType.getRank(), channels = xType.getDimSize(1);
  SmallVector<int64_t> chShape(rank, 1), otherDims;
  chShape[1] = channels;
  for (int64_t d = 0; d < rank; ++d)
    if (d != 1)
      otherDims.push_back(d);
  auto chType = RankedTensorType::get(chShape, xType.getElementType());
  auto flatType = typeOf(op.getScale());
  auto perChannel = [&](Value v) { return e.reshape(v, chType); };
  auto sumOther = [&](Value v) {
    return e.reshape(e.reduce(ReduceKind::sum, v, otherDims, true), flatType);
  };
  Value scale = perChannel(op.getScale()), mean = perChannel(op.getMean());
  Value var = perChannel(op.getVariance());
  double eps = op.getEpsilon().convertToDouble();
  Value inv = RsqrtOp::create(e.b, e.loc, e.add(var, e.scalar(var, eps)));
  Value centered = e.sub(x, mean);
  Value gy = g[0];
  if (needed[0])
    out[0] = e.mul(gy, e.mul(scale, inv));
  if (needed[1])
    out[1] = sumOther(e.mul(gy, e.mul(centered, inv)));
  if (needed[2])
    out[2] = sumOther(gy);
  if (needed[3])
    out[3] = e.neg(sumOther(e.mul(gy, e.mul(scale, inv))));
  if (needed[4]) {
    // d/dvar of (x - m) (var + eps)^(-1/2) = -1/2 (x - m) inv^3
    Value inv3 = e.mul(inv, e.mul(inv, inv));
    out[4] =
        sumOther(e.mul(e.mul(gy, centered), e.mul(e.mul(scale, inv3), -0.5)));
  }
  return success();
}

// --- Data movement
// ---------------------------------------------------------------

template <>
LogicalResult vjp(ReshapeOp op, Emitter &e, ArrayRef<Value> g,
                  ArrayRef<bool> needed, MutableArrayRef<Value> out) {
  if (needed[0])
    out[0] = e.reshape(g[0], typeOf(op.getInput()));
  return success();
}

template <>
LogicalResult vjp(TransposeOp op, Emitter &e, ArrayRef<Value> g,
                  ArrayRef<bool> needed, MutableArrayRef<Value> out) {
  if (!needed[0])
    return success();
  ArrayRef<int64_t> perm = op.getPermutation();
  SmallVector<int64_t> inverse(perm.size());
  for (auto [i, p] : llvm::enumerate(perm))
    inverse[p] = i;
  out[0] = TransposeOp::create(e.b, e.loc, g[0], inverse);
  return success();
}

template <>
LogicalResult vjp(BroadcastOp op, Emitter &e, ArrayRef<Value> g,
                  ArrayRef<bool> needed, MutableArrayRef<Value> out) {
  if (needed[0])
    out[0] = e.reduceTo(g[0], op.getInput().getType());
  return success();
}

template <>
LogicalResult vjp(ConcatOp op, Emitter &e, ArrayRef<Value> g,
                  ArrayRef<bool> needed, MutableArrayRef<Value> out) {
  int64_t axis = op.getAxis(), offset = 0;
  int64_t rank = typeOf(g[0]).getRank();
  for (auto [i, input] : llvm::enumerate(op.getInputs())) {
    auto type = typeOf(input);
    if (needed[i]) {
      SmallVector<int64_t> starts(rank, 0), steps(rank, 1);
      starts[axis] = offset;
      out[i] = SliceOp::create(e.b, e.loc, type, g[0], starts, steps);
    }
    offset += type.getDimSize(axis);
  }
  return success();
}

template <>
LogicalResult vjp(SliceOp op, Emitter &e, ArrayRef<Value> g,
                  ArrayRef<bool> needed, MutableArrayRef<Value> out) {
  if (needed[0])
    out[0] = SliceScatterOp::create(e.b, e.loc, op.getInput().getType(), g[0],
                                    op.getStarts(), op.getSteps());
  return success();
}

// slice_scatter places its operand (a slice assignment's update); the
// gradient takes the same slice back.
template <>
LogicalResult vjp(SliceScatterOp op, Emitter &e, ArrayRef<Value> g,
                  ArrayRef<bool> needed, MutableArrayRef<Value> out) {
  if (needed[0])
    out[0] = SliceOp::create(e.b, e.loc, op.getInput().getType(), g[0],
                             op.getStarts(), op.getSteps());
  return success();
}

template <>
LogicalResult vjp(GatherOp op, Emitter &e, ArrayRef<Value> g,
                  ArrayRef<bool> needed, MutableArrayRef<Value> out) {
  if (needed[0])
    out[0] = ScatterAddOp::create(e.b, e.loc, op.getData().getType(), g[0],
                                  op.getIndices(), op.getAxis());
  return success();
}

/// scatter_add is gather's adjoint, so its own gradient is the gather.
template <>
LogicalResult vjp(ScatterAddOp op, Emitter &e, ArrayRef<Value> g,
                  ArrayRef<bool> needed, MutableArrayRef<Value> out) {
  if (needed[0])
    out[0] = GatherOp::create(e.b, e.loc, op.getUpdates().getType(), g[0],
                              op.getIndices(), op.getAxis());
  return success();
}

// --- Convolution and pooling
// -----------------------------------------------------

template <>
LogicalResult vjp(Conv2DOp op, Emitter &e, ArrayRef<Value> g,
                  ArrayRef<bool> needed, MutableArrayRef<Value> out) {
  if (needed[0])
    out[0] = Conv2DBackwardInputOp::create(
        e.b, e.loc, op.getInput().getType(), g[0], op.getFilter(),
        op.getStrides(), op.getPads(), op.getDilations(), op.getGroups());
  if (needed[1])
    out[1] = Conv2DBackwardFilterOp::create(
        e.b, e.loc, op.getFilter().getType(), op.getInput(), g[0],
        op.getStrides(), op.getPads(), op.getDilations(), op.getGroups());
  if (op.getBias() && needed[2])
    out[2] = e.reduce(ReduceKind::sum, g[0], {0, 2, 3}, false);
  return success();
}

/// conv2d_backward_input is linear in both operands and the adjoint of
/// conv2d: its input gradient is conv2d of the upstream gradient, its filter
/// gradient the filter adjoint with the roles of input and gradient swapped.
template <>
LogicalResult vjp(Conv2DBackwardInputOp op, Emitter &e, ArrayRef<Value> g,
                  ArrayRef<bool> needed, MutableArrayRef<Value> out) {
  if (needed[0])
    out[0] = Conv2DOp::create(e.b, e.loc, op.getGrad().getType(), g[0],
                              op.getFilter(), Value(), op.getStrides(),
                              op.getPads(), op.getDilations(), op.getGroups());
  if (needed[1])
    out[1] = Conv2DBackwardFilterOp::create(
        e.b, e.loc, op.getFilter().getType(), g[0], op.getGrad(),
        op.getStrides(), op.getPads(), op.getDilations(), op.getGroups());
  return success();
}

template <>
LogicalResult vjp(MaxPool2DOp op, Emitter &e, ArrayRef<Value> g,
                  ArrayRef<bool> needed, MutableArrayRef<Value> out) {
  if (needed[0])
    out[0] = MaxPool2DBackwardOp::create(
        e.b, e.loc, op.getInput().getType(), op.getInput(), g[0],
        op.getKernel(), op.getStrides(), op.getPads(), op.getDilations());
  return success();
}

template <>
LogicalResult vjp(AvgPool2DOp op, Emitter &e, ArrayRef<Value> g,
                  ArrayRef<bool> needed, MutableArrayRef<Value> out) {
  if (needed[0])
    out[0] = AvgPool2DBackwardOp::create(e.b, e.loc, op.getInput().getType(),
                                         g[0], op.getKernel(), op.getStrides(),
                                         op.getPads(), op.getDilations(),
                                         op.getCountIncludePad());
  return success();
}

template <typename... Ops> void attach(MLIRContext *ctx) {
  (Ops::template attachInterface<Rule<Ops>>(*ctx), ...);
}

} // namespace

void mlir::cleave::registerDifferentiationRules(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *ctx, CleaveDialect *) {
    attach<AddOp, SubOp, MulOp, DivOp, PowOp, MaxOp, MinOp, SelectOp, NegOp,
           AbsOp, ExpOp, LogOp, SqrtOp, RsqrtOp, ReciprocalOp, TanhOp,
           SigmoidOp, ReluOp, ErfOp, SinOp, CosOp, GeluOp, LeakyReluOp,
           MatmulOp, ReduceOp, SoftmaxOp, LogSoftmaxOp, AttentionOp,
           CrossEntropyOp, LayerNormOp, BatchNormOp, ReshapeOp, TransposeOp,
           BroadcastOp, ConcatOp, SliceOp, SliceScatterOp, GatherOp,
           ScatterAddOp, Conv2DOp, Conv2DBackwardInputOp, MaxPool2DOp,
           AvgPool2DOp>(ctx);
  });
}

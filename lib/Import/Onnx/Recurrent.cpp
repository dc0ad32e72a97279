//===- Recurrent.cpp - ONNX RNN, GRU and LSTM -------------------*- C++ -*-===//
//
// A recurrent layer over a sequence of static length is its cell unrolled:
// the input projection of every step as one matmul, then per step the
// recurrent matmul, the gates (ONNX's orders: LSTM i, o, f, c; GRU z, r, h)
// and their activations, in the dialect's existing ops. Both directions,
// peepholes, GRU's linear_before_reset, cell clipping, layout 1 and the
// activations ONNX lists all come out of the same few lines, and the layer
// gets its gradient (backpropagation through time) and sharding rules from
// the ops it is made of. Sequence lengths shorter than the sequence are
// refused: they make each batch row's last state data-dependent.
//
//===----------------------------------------------------------------------===//

#include "Expr.h"

using namespace mlir;
using namespace mlir::cleave;
using namespace mlir::cleave::onnx_import;

namespace {

enum class Cell { RNN, GRU, LSTM };

int64_t gateCount(Cell cell) {
  return cell == Cell::LSTM ? 4 : cell == Cell::GRU ? 3 : 1;
}

/// a [M, K] times b [N, K] transposed: [M, N].
Value matmulT(NodeContext &ctx, Value a, Value b) {
  if (!a || !b)
    return Value();
  MatmulOp::Properties props;
  props.transpose_rhs = ctx.b.getUnitAttr();
  FailureOr<Value> r = ctx.createBroadcasting<MatmulOp>({a, b}, props);
  return succeeded(r) ? *r : Value();
}

/// One of ONNX's activation functions, by name.
struct Activation {
  std::string name;
  double alpha = 0, beta = 0;
  Value apply(Expr &e, Value x) const {
    if (name == "Sigmoid")
      return e.unary<SigmoidOp>(x);
    if (name == "Tanh")
      return e.unary<TanhOp>(x);
    if (name == "Relu")
      return e.unary<ReluOp>(x);
    if (name == "HardSigmoid")
      return e.max(e.k(0.0),
                   e.min(e.k(1.0), e.add(e.mul(e.k(alpha), x), e.k(beta))));
    if (name == "LeakyRelu")
      return e.select(e.cmp(CmpPredicate::lt, x, e.k(0.0)),
                      e.mul(e.k(alpha), x), x);
    return e.mul(e.k(alpha),
                 e.unary<TanhOp>(e.mul(e.k(beta), x))); // ScaledTanh
  }
};

struct Layer {
  Cell cell;
  int64_t hidden = 0, seq = 0, batch = 0, dirs = 1;
  bool reverseOnly = false, linearBeforeReset = false;
  double clip = 0;
  SmallVector<Activation> acts; // per direction: f, g, h as the cell uses
};

FailureOr<SmallVector<Activation>> activations(NodeContext &ctx, Cell cell,
                                               int64_t dirs) {
  SmallVector<std::string> dflt = {"Sigmoid", "Tanh", "Tanh"};
  if (cell == Cell::RNN)
    dflt = {"Tanh"};
  if (cell == Cell::GRU)
    dflt = {"Sigmoid", "Tanh"};
  size_t per = dflt.size();
  SmallVector<Activation> out;
  const onnx::AttributeProto *names = ctx.attr("activations");
  const onnx::AttributeProto *alpha = ctx.attr("activation_alpha");
  const onnx::AttributeProto *beta = ctx.attr("activation_beta");
  if (names && names->strings_size() != static_cast<int>(per * dirs))
    return ctx.error() << "activations must name " << per * dirs
                       << " functions";
  static const char *const known[] = {"Sigmoid",     "Tanh",      "Relu",
                                      "HardSigmoid", "LeakyRelu", "ScaledTanh"};
  for (size_t i = 0; i < per * dirs; ++i) {
    Activation a;
    a.name = names ? names->strings(i) : dflt[i % per];
    if (!llvm::is_contained(known, a.name))
      return ctx.error() << "activation '" << a.name << "' is not supported";
    // Defaults as ONNX's: HardSigmoid 0.2, 0.5; LeakyRelu 0.01; ScaledTanh
    // 1, 1.
    a.alpha = a.name == "HardSigmoid" ? 0.2 : a.name == "LeakyRelu" ? 0.01 : 1;
    a.beta = a.name == "HardSigmoid" ? 0.5 : 1;
    if (alpha && static_cast<int>(i) < alpha->floats_size())
      a.alpha = alpha->floats(i);
    if (beta && static_cast<int>(i) < beta->floats_size())
      a.beta = beta->floats(i);
    out.push_back(a);
  }
  return out;
}

/// One direction of the layer over x [S, B, I]: returns (Y [S, B, H],
/// last H [B, H], last C [B, H] for LSTM).
struct DirectionResult {
  Value y, h, c;
};

FailureOr<DirectionResult> runDirection(NodeContext &ctx, const Layer &l,
                                        int64_t d, bool reverse, Value x,
                                        Value w, Value r, Value bias, Value h,
                                        Value c, Value peep) {
  Type f = NodeContext::typeOf(x).getElementType();
  Expr e(ctx, f);
  int64_t H = l.hidden, G = gateCount(l.cell), S = l.seq, B = l.batch;
  int64_t I = NodeContext::typeOf(x).getDimSize(2);
  auto pick = [&](Value v) { // direction d of a [D, ...] tensor, squeezed
    auto shape = NodeContext::typeOf(v).getShape();
    return ctx.reshape(ctx.sliceAxis(v, 0, d, 1),
                       SmallVector<int64_t>(shape.drop_front()));
  };
  Value wd = pick(w), rd = pick(r);
  // Every step's input projection at once: [S * B, G * H].
  Value xw = matmulT(ctx, ctx.reshape(x, {S * B, I}), wd);
  Value rb; // the recurrent bias, kept apart where GRU needs it apart
  if (bias) {
    Value bd = pick(bias); // [2 G H]: Wb then Rb
    Value wb = ctx.sliceAxis(bd, 0, 0, G * H),
          rbAll = ctx.sliceAxis(bd, 0, G * H, G * H);
    if (l.cell == Cell::GRU) {
      xw = e.add(xw, ctx.reshape(wb, {1, G * H}));
      xw = e.add(xw, ctx.reshape(ctx.concat({ctx.sliceAxis(rbAll, 0, 0, 2 * H),
                                             ctx.splat(f, {H}, 0.0)},
                                            0),
                                 {1, G * H}));
      rb = ctx.reshape(ctx.sliceAxis(rbAll, 0, 2 * H, H), {1, H});
    } else {
      xw = e.add(xw, ctx.reshape(e.add(wb, rbAll), {1, G * H}));
    }
  }
  if (!xw)
    return failure();
  xw = ctx.reshape(xw, {S, B, G * H});
  const Activation *acts = &l.acts[d * (l.cell == Cell::LSTM  ? 3
                                        : l.cell == Cell::GRU ? 2
                                                              : 1)];
  auto clipped = [&](Value v) {
    return l.clip > 0 ? e.min(e.max(v, e.k(-l.clip)), e.k(l.clip)) : v;
  };
  auto gate = [&](Value all, int64_t k) {
    return ctx.sliceAxis(all, 1, k * H, H);
  };
  SmallVector<Value> ys(S);
  for (int64_t step = 0; step < S; ++step) {
    int64_t t = reverse ? S - 1 - step : step;
    Value xt = ctx.reshape(ctx.sliceAxis(xw, 0, t, 1), {B, G * H});
    if (l.cell == Cell::GRU) {
      Value rzr = matmulT(ctx, h, ctx.sliceAxis(rd, 0, 0, 2 * H));
      Value z = acts[0].apply(e, clipped(e.add(gate(xt, 0), gate(rzr, 0))));
      Value rg = acts[0].apply(e, clipped(e.add(gate(xt, 1), gate(rzr, 1))));
      Value rh = ctx.sliceAxis(rd, 0, 2 * H, H);
      Value hh;
      if (l.linearBeforeReset) {
        Value hr = matmulT(ctx, h, rh);
        hh = e.mul(rg, rb ? e.add(hr, rb) : hr);
      } else {
        hh = matmulT(ctx, e.mul(rg, h), rh);
        hh = rb ? e.add(hh, rb) : hh;
      }
      Value cand = acts[1].apply(e, clipped(e.add(gate(xt, 2), hh)));
      h = e.add(e.mul(e.sub(e.k(1.0), z), cand), e.mul(z, h));
    } else {
      Value all = e.add(xt, matmulT(ctx, h, rd));
      if (l.cell == Cell::RNN) {
        h = acts[0].apply(e, clipped(all));
      } else {
        Value pi, po, pf;
        if (peep) {
          Value pd = ctx.reshape(pick(peep), {1, 3 * H});
          pi = ctx.sliceAxis(pd, 1, 0, H), po = ctx.sliceAxis(pd, 1, H, H),
          pf = ctx.sliceAxis(pd, 1, 2 * H, H);
        }
        Value ig = gate(all, 0), og = gate(all, 1), fg = gate(all, 2);
        if (peep) {
          ig = e.add(ig, e.mul(pi, c));
          fg = e.add(fg, e.mul(pf, c));
        }
        Value i = acts[0].apply(e, clipped(ig));
        Value fgate = acts[0].apply(e, clipped(fg));
        Value cand = acts[1].apply(e, clipped(gate(all, 3)));
        c = e.add(e.mul(fgate, c), e.mul(i, cand));
        if (peep)
          og = e.add(og, e.mul(po, c));
        Value o = acts[0].apply(e, clipped(og));
        h = e.mul(o, acts[2].apply(e, c));
      }
    }
    if (!h)
      return failure();
    ys[t] = ctx.reshape(h, {1, B, H});
  }
  return DirectionResult{ctx.concat(ys, 0), h, c};
}

/// Input \p i of [D, B, H] state (layout 1: [B, D, H]) as [D, B, H], or
/// zeros.
FailureOr<Value> initialState(NodeContext &ctx, unsigned i, const Layer &l,
                              bool batchFirst, Type f) {
  if (!ctx.hasInput(i))
    return ctx.splat(f, {l.dirs, l.batch, l.hidden}, 0.0);
  FailureOr<Value> v = ctx.input(i);
  if (failed(v))
    return failure();
  if (batchFirst) {
    Value t = ctx.transpose(*v, {1, 0, 2});
    if (!t)
      return failure();
    v = t;
  }
  if (NodeContext::typeOf(*v).getShape() !=
      ArrayRef<int64_t>{l.dirs, l.batch, l.hidden})
    return ctx.error() << "initial state " << i << " has type " << v->getType();
  return v;
}

template <Cell C> LogicalResult recurrent(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0), w = ctx.input(1), r = ctx.input(2);
  if (failed(x) || failed(w) || failed(r))
    return failure();
  Layer l;
  l.cell = C;
  l.hidden = ctx.attrInt("hidden_size", 0);
  bool batchFirst = ctx.attrInt("layout", 0) != 0;
  std::string direction = ctx.attrString("direction", "forward");
  l.dirs = direction == "bidirectional" ? 2 : 1;
  l.linearBeforeReset = ctx.attrInt("linear_before_reset", 0) != 0;
  l.clip = ctx.attrFloat("clip", 0.0f);
  if (direction != "forward" && direction != "reverse" &&
      direction != "bidirectional")
    return ctx.error() << "unknown direction '" << direction << "'";
  if (ctx.attrInt("input_forget", 0))
    return ctx.error() << "input_forget (coupled input and forget gates) is "
                          "not supported";
  auto xt = NodeContext::typeOf(*x);
  if (!xt.getElementType().isF32() || xt.getRank() != 3)
    return ctx.error() << "X must be a float32 [seq, batch, input] tensor";
  Value seqFirst = batchFirst ? ctx.transpose(*x, {1, 0, 2}) : *x;
  if (!seqFirst)
    return failure();
  auto xs = NodeContext::typeOf(seqFirst).getShape();
  l.seq = xs[0];
  l.batch = xs[1];
  int64_t G = gateCount(C), I = xs[2], H = l.hidden;
  Type f = xt.getElementType();
  if (H < 1 || l.seq < 1 ||
      NodeContext::typeOf(*w).getShape() !=
          ArrayRef<int64_t>{l.dirs, G * H, I} ||
      NodeContext::typeOf(*r).getShape() != ArrayRef<int64_t>{l.dirs, G * H, H})
    return ctx.error() << "W " << w->getType() << " and R " << r->getType()
                       << " do not fit hidden_size " << H << ", " << l.dirs
                       << " direction(s) and X " << x->getType();
  FailureOr<SmallVector<Activation>> acts = activations(ctx, C, l.dirs);
  FailureOr<Value> bias = ctx.optionalInput(3);
  if (failed(acts) || failed(bias))
    return failure();
  l.acts = *acts;
  if (*bias && NodeContext::typeOf(*bias).getShape() !=
                   ArrayRef<int64_t>{l.dirs, 2 * G * H})
    return ctx.error() << "B must have shape [" << l.dirs << ", " << 2 * G * H
                       << "]";
  if (ctx.hasInput(4)) {
    std::optional<DenseElementsAttr> lens = ctx.constantInput(4);
    if (!lens)
      return ctx.error() << "sequence_lens must be known when compiling";
    for (const APInt &v : lens->getValues<APInt>())
      if (v.getSExtValue() != l.seq)
        return ctx.error() << "sequence lengths shorter than the sequence ("
                           << v.getSExtValue() << " of " << l.seq
                           << ") are not supported";
  }
  FailureOr<Value> h0 = initialState(ctx, 5, l, batchFirst, f);
  FailureOr<Value> c0 = C == Cell::LSTM ? initialState(ctx, 6, l, batchFirst, f)
                                        : FailureOr<Value>(Value());
  FailureOr<Value> peep =
      C == Cell::LSTM ? ctx.optionalInput(7) : FailureOr<Value>(Value());
  if (failed(h0) || failed(c0) || failed(peep))
    return failure();
  if (*peep &&
      NodeContext::typeOf(*peep).getShape() != ArrayRef<int64_t>{l.dirs, 3 * H})
    return ctx.error() << "P must have shape [" << l.dirs << ", " << 3 * H
                       << "]";
  SmallVector<Value> ys, hs, cs;
  for (int64_t d = 0; d < l.dirs; ++d) {
    auto state = [&](Value s) {
      return s ? ctx.reshape(ctx.sliceAxis(s, 0, d, 1), {l.batch, H}) : s;
    };
    bool reverse = direction == "reverse" || d == 1;
    FailureOr<DirectionResult> res =
        runDirection(ctx, l, d, reverse, seqFirst, *w, *r, *bias, state(*h0),
                     state(*c0), *peep);
    if (failed(res))
      return failure();
    ys.push_back(ctx.reshape(res->y, {l.seq, 1, l.batch, H}));
    hs.push_back(ctx.reshape(res->h, {1, l.batch, H}));
    if (C == Cell::LSTM)
      cs.push_back(ctx.reshape(res->c, {1, l.batch, H}));
  }
  Value y = ctx.concat(ys, 1), yh = ctx.concat(hs, 0);
  Value yc = C == Cell::LSTM ? ctx.concat(cs, 0) : Value();
  if (batchFirst) {
    y = ctx.transpose(y, {2, 0, 1, 3});
    yh = ctx.transpose(yh, {1, 0, 2});
    yc = yc ? ctx.transpose(yc, {1, 0, 2}) : yc;
  }
  if (!y || !yh)
    return failure();
  if (ctx.hasOutput(0))
    ctx.setOutput(0, y);
  if (ctx.hasOutput(1))
    ctx.setOutput(1, yh);
  if (C == Cell::LSTM && ctx.hasOutput(2))
    ctx.setOutput(2, yc);
  return success();
}

} // namespace

void onnx_import::registerRecurrentHandlers(HandlerTable &t) {
  t.on("RNN", 7, recurrent<Cell::RNN>);
  t.on("GRU", 7, recurrent<Cell::GRU>);
  t.on("LSTM", 7, recurrent<Cell::LSTM>);
}

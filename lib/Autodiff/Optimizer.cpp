//===- Optimizer.cpp - The optimizer update inside the train ----*- C++ -*-===//
//
// The update is compiled into the step rather than run by the host: it is
// elementwise work the partitioner shards like any other op (each rank
// updates its own slice), and the runtime stays a plain program executor.
//
//===----------------------------------------------------------------------===//

#include "Cleave/CleaveAttrNames.h"
#include "Cleave/CleaveOps.h"
#include "cleave/Autodiff/Autodiff.h"
#include "cleave/Autodiff/Passes.h"

#include <cmath>

namespace mlir::cleave {
#define GEN_PASS_DEF_OPTIMIZERPASS
#include "cleave/Autodiff/Passes.h.inc"
} // namespace mlir::cleave

using namespace mlir;
using namespace mlir::cleave;

namespace {

struct Updater;

struct OptimizerPass
    : public mlir::cleave::impl::OptimizerPassBase<OptimizerPass> {
  using OptimizerPassBase::OptimizerPassBase;
  void runOnOperation() override;

  /// What gates the update: loss scaling's check (loss-scale) or the
  /// guard against a non-finite loss or gradient (guard-nonfinite).
  struct Gate {
    Value finite; ///< rank-0 i1; null: the update is not gated
    Value scaleExponent, goodSteps, skippedSteps;
  };
  /// Adds the gate's state arguments and its check on \p gradOf (unscaled
  /// in place under loss scaling); false, reported, on failure.
  bool openGate(func::FuncOp func, Updater &u, ArrayRef<BlockArgument> params,
                llvm::StringMap<Value> &gradOf, func::ReturnOp ret, Gate &gate);
  /// The gate's next state (and, for the guard, the "nonfinite" metric).
  void closeGate(Updater &u, const Gate &gate, SmallVectorImpl<Value> &states,
                 SmallVectorImpl<DictionaryAttr> &stateAttrs,
                 SmallVectorImpl<Value> &metrics,
                 SmallVectorImpl<DictionaryAttr> &metricAttrs);

  LogicalResult checkOptions(func::FuncOp func) {
    if (optimizer != "sgd" && optimizer != "adamw")
      return func.emitError("unknown optimizer '")
             << optimizer << "'; expected sgd or adamw";
    if (!(lr > 0) || weightDecay < 0 || momentum < 0 || !(beta1 >= 0) ||
        !(beta1 < 1) || !(beta2 >= 0) || !(beta2 < 1) || !(eps >= 0))
      return func.emitError(
          "invalid optimizer hyperparameters: lr must be > 0, weight decay "
          "and momentum >= 0, betas in [0, 1), eps >= 0");
    if (!(maxGradNorm >= 0) || !std::isfinite(maxGradNorm) ||
        !(clipGradValue >= 0) || !std::isfinite(clipGradValue))
      return func.emitError("gradient clipping: max-grad-norm and "
                            "clip-grad-value must be finite and >= 0");
    return success();
  }
};

/// Emits the update of one parameter.
struct Updater {
  OpBuilder &b;
  Location loc;

  Value scalar(int64_t rank, double v) {
    SmallVector<int64_t> ones(rank, 1);
    auto type = RankedTensorType::get(ones, b.getF32Type());
    return ConstantOp::create(
        b, loc, DenseElementsAttr::get(type, b.getF32FloatAttr(v)));
  }
  Value mul(Value x, Value y) { return MulOp::create(b, loc, x, y); }
  Value add(Value x, Value y) { return AddOp::create(b, loc, x, y); }
  Value sub(Value x, Value y) { return SubOp::create(b, loc, x, y); }
  Value div(Value x, Value y) { return DivOp::create(b, loc, x, y); }
  Value mul(Value x, double c) {
    return mul(x, scalar(cast<RankedTensorType>(x.getType()).getRank(), c));
  }
  struct AdamW {
    double lr, weightDecay, beta1, beta2, eps;
    /// The learning rate as a rank-0 value (an input), or null: `lr`.
    Value lrValue;
  };
  /// \p x times the learning rate: \p lrValue (rank 0) where the step
  /// reads it, else the constant \p lr.
  Value mulLr(Value x, double lr, Value lrValue) {
    if (!lrValue)
      return mul(x, lr);
    return mul(x,
               spread(lrValue, cast<RankedTensorType>(x.getType()).getRank()));
  }
  /// AdamW's new moments of parameter \p p (gradient \p g, moments \p m
  /// and \p v), and in \p updated its new value, as torch.optim.AdamW
  /// computes them.
  std::pair<Value, Value> adamw(Value p, Value g, Value m, Value v,
                                Value stepSize, Value correction2Sqrt,
                                const AdamW &h, Value *updated) {
    int64_t rank = cast<RankedTensorType>(p.getType()).getRank();
    Value decayed = p;
    if (h.weightDecay != 0 && !h.lrValue)
      decayed = mul(p, 1.0 - h.lr * h.weightDecay);
    else if (h.weightDecay != 0)
      decayed = mul(
          p, spread(sub(scalar(0, 1.0), mul(h.lrValue, h.weightDecay)), rank));
    Value m2 = add(mul(m, h.beta1), mul(g, 1.0 - h.beta1));
    Value v2 = add(mul(v, h.beta2), mul(mul(g, g), 1.0 - h.beta2));
    Value denom =
        add(div(SqrtOp::create(b, loc, v2), spread(correction2Sqrt, rank)),
            scalar(rank, h.eps));
    *updated = sub(decayed, mul(spread(stepSize, rank), div(m2, denom)));
    return {m2, v2};
  }

  /// The sum of every element of \p x (rank 0).
  Value sumAll(Value x) {
    int64_t rank = cast<RankedTensorType>(x.getType()).getRank();
    if (!rank)
      return x;
    SmallVector<int64_t> dims;
    for (int64_t d = 0; d < rank; ++d)
      dims.push_back(d);
    return ReduceOp::create(b, loc, ReduceKind::sum, x, dims, false);
  }

  /// A rank-0 value reshaped to broadcast against rank \p rank.
  Value spread(Value v, int64_t rank) {
    SmallVector<int64_t> ones(rank, 1);
    return ReshapeOp::create(
        b, loc,
        RankedTensorType::get(
            ones, cast<RankedTensorType>(v.getType()).getElementType()),
        v);
  }
  /// \p finite ? \p updated : \p old (a rank-0 condition).
  Value keepUnless(Value finite, Value updated, Value old) {
    int64_t rank = cast<RankedTensorType>(old.getType()).getRank();
    return SelectOp::create(b, loc, spread(finite, rank), updated, old);
  }
};

/// The slots in \p gradOf of the gradients of \p params, in order; fewer
/// (reported) when a parameter has none.
SmallVector<Value *> gradientsOf(func::FuncOp func,
                                 ArrayRef<BlockArgument> params,
                                 llvm::StringMap<Value> &gradOf) {
  SmallVector<Value *> grads;
  for (BlockArgument p : params) {
    auto name =
        func.getArgAttrOfType<StringAttr>(p.getArgNumber(), kParameterAttr);
    auto it = gradOf.find(name.getValue());
    if (it == gradOf.end()) {
      func.emitOpError("has no gradient for parameter '") << name << "'";
      break;
    }
    grads.push_back(&it->second);
  }
  return grads;
}

/// GradScaler's constants: growth after this many finite steps in a row.
constexpr double kGrowthInterval = 2000;

/// A rank-0 i1: whether every element of \p grads and of \p extra (a
/// rank-0 value, or null) is finite. Each rank sums its share, so a split
/// gradient's NaN reaches every rank through the partitioner's sum.
Value allFinite(Updater &u, ArrayRef<Value *> grads, Value extra) {
  OpBuilder &b = u.b;
  // x * 0 is NaN where x is inf or NaN, 0 elsewhere.
  Value poison = extra ? u.mul(extra, 0.0) : u.scalar(0, 0.0);
  for (Value *slot : grads)
    poison = u.add(poison, u.sumAll(u.mul(*slot, 0.0)));
  return CmpOp::create(b, u.loc, CmpPredicate::eq, poison, u.scalar(0, 0.0));
}

/// Dynamic loss scaling: \p grads unscaled in place (by 2^(exponent + 16)),
/// and whether all are finite.
Value unscaleAndCheck(Updater &u, Value scaleExponent,
                      ArrayRef<Value *> grads) {
  OpBuilder &b = u.b;
  Value scale = PowOp::create(b, u.loc, u.scalar(0, 2.0),
                              u.add(scaleExponent, u.scalar(0, 16.0)));
  Value inverse = u.div(u.scalar(0, 1.0), scale);
  for (Value *slot : grads)
    *slot = u.mul(
        *slot,
        u.spread(inverse, cast<RankedTensorType>(slot->getType()).getRank()));
  return allFinite(u, grads, Value());
}

/// Gradient clipping, as torch.nn.utils does it: each element of every
/// gradient of \p params (in \p gradOf, replaced) clamped to [-value,
/// value] where \p value > 0, then all scaled by min(1, maxNorm / (norm +
/// 1e-6)) where \p maxNorm > 0. Returns the global L2 norm before the
/// scaling (null without it).
Value clipGradients(Updater &u, ArrayRef<Value *> grads, double value,
                    double maxNorm) {
  OpBuilder &b = u.b;
  if (value > 0)
    for (Value *slot : grads) {
      int64_t rank = cast<RankedTensorType>(slot->getType()).getRank();
      Value low = MaxOp::create(b, u.loc, *slot, u.scalar(rank, -value));
      *slot = MinOp::create(b, u.loc, low, u.scalar(rank, value));
    }
  if (!(maxNorm > 0))
    return Value();
  Value total = u.scalar(0, 0.0);
  for (Value *slot : grads)
    total = u.add(total, u.sumAll(u.mul(*slot, *slot)));
  Value norm = SqrtOp::create(b, u.loc, total);
  Value coef = MinOp::create(
      b, u.loc, u.div(u.scalar(0, maxNorm), u.add(norm, u.scalar(0, 1e-6))),
      u.scalar(0, 1.0));
  for (Value *slot : grads)
    *slot = u.mul(
        *slot,
        u.spread(coef, cast<RankedTensorType>(slot->getType()).getRank()));
  return norm;
}

/// GradScaler's update of its state: the scale halved (its exponent less
/// one) after a step with an inf or NaN, doubled after kGrowthInterval
/// finite steps in a row; the finite run and the skipped steps counted.
SmallVector<Value> nextScaleState(Updater &u, Value finite, Value exponent,
                                  Value goodSteps, Value skippedSteps) {
  OpBuilder &b = u.b;
  auto scalarF32 = RankedTensorType::get({}, b.getF32Type());
  Value ok = CastOp::create(b, u.loc, scalarF32, finite);
  Value good = u.add(goodSteps, u.scalar(0, 1.0));
  Value grow = CastOp::create(b, u.loc, scalarF32,
                              CmpOp::create(b, u.loc, CmpPredicate::eq, good,
                                            u.scalar(0, kGrowthInterval)));
  Value next = SelectOp::create(b, u.loc, finite, u.add(exponent, grow),
                                u.sub(exponent, u.scalar(0, 1.0)));
  Value goodNext = u.mul(u.mul(good, u.sub(u.scalar(0, 1.0), grow)), ok);
  Value skipped = u.add(skippedSteps, u.sub(u.scalar(0, 1.0), ok));
  return {next, goodNext, skipped};
}

/// The gradients \p ret returns, by parameter name.
llvm::StringMap<Value> gradientsByName(func::FuncOp func, func::ReturnOp ret) {
  llvm::StringMap<Value> gradOf;
  for (unsigned i = 0; i < func.getNumResults(); ++i)
    if (auto name = func.getResultAttrOfType<StringAttr>(i, kGradientAttr))
      gradOf[name.getValue()] = ret.getOperand(i);
  return gradOf;
}

/// A new last argument of \p func of \p type in \p role.
Value appendArgument(func::FuncOp func, Type type, NamedAttribute role) {
  unsigned index = func.getNumArguments();
  (void)func.insertArgument(index, type,
                            DictionaryAttr::get(func.getContext(), {role}),
                            func.getLoc());
  return func.getBody().front().getArgument(index);
}

/// The step number's argument of \p func, added if it has none.
Value stepArgument(func::FuncOp func) {
  for (BlockArgument arg : func.getArguments())
    if (func.getArgAttr(arg.getArgNumber(), kStepAttr))
      return arg;
  Builder b(func.getContext());
  return appendArgument(func, RankedTensorType::get({}, b.getI64Type()),
                        b.getNamedAttr(kStepAttr, b.getUnitAttr()));
}

/// Where the update's ops of \p what are: tagged so that profiles and
/// traces file the update under the optimizer (and each parameter's under
/// its name), not under the model's file.
Location locationOf(func::FuncOp func, StringRef what) {
  Builder b(func.getContext());
  return FusedLoc::get(b.getContext(),
                       {NameLoc::get(b.getStringAttr(what), func.getLoc())},
                       b.getStringAttr("optimizer"));
}

/// Replaces \p ret: loss, new parameters, new optimizer state, then what
/// was there besides the loss (gradients, buffers).
void returnUpdate(func::FuncOp func, func::ReturnOp ret, OpBuilder &b,
                  ArrayRef<Value> newParams,
                  ArrayRef<DictionaryAttr> paramAttrs,
                  ArrayRef<Value> newStates,
                  ArrayRef<DictionaryAttr> stateAttrs, ArrayRef<Value> metrics,
                  ArrayRef<DictionaryAttr> metricAttrs) {
  SmallVector<Value> results;
  SmallVector<DictionaryAttr> resultAttrs;
  unsigned lossIndex = 0;
  for (unsigned i = 0; i < func.getNumResults(); ++i)
    if (func.getResultAttr(i, kLossAttr))
      lossIndex = i;
  results.push_back(ret.getOperand(lossIndex));
  resultAttrs.push_back(func.getResultAttrDict(lossIndex));
  llvm::append_range(results, newParams);
  llvm::append_range(resultAttrs, paramAttrs);
  llvm::append_range(results, newStates);
  llvm::append_range(resultAttrs, stateAttrs);
  llvm::append_range(results, metrics);
  llvm::append_range(resultAttrs, metricAttrs);
  for (unsigned i = 0; i < func.getNumResults(); ++i) {
    if (i == lossIndex)
      continue;
    results.push_back(ret.getOperand(i));
    resultAttrs.push_back(func.getResultAttrDict(i));
  }
  func::ReturnOp::create(b, ret.getLoc(), results);
  ret.erase();
  func.setType(FunctionType::get(func.getContext(), func.getArgumentTypes(),
                                 ValueRange(results).getTypes()));
  func.setAllResultAttrs(resultAttrs);
}

/// A global slot of optimizer state (no parameter's).
NamedAttribute globalState(Builder &attrs, StringRef slot) {
  return attrs.getNamedAttr(kOptimizerStateAttr,
                            attrs.getStrArrayAttr({"", slot}));
}

bool OptimizerPass::openGate(func::FuncOp func, Updater &u,
                             ArrayRef<BlockArgument> params,
                             llvm::StringMap<Value> &gradOf, func::ReturnOp ret,
                             Gate &gate) {
  if (!lossScale && !guardNonfinite)
    return true;
  Builder attrs(func.getContext());
  SmallVector<Value *> grads = gradientsOf(func, params, gradOf);
  if (grads.size() != params.size())
    return false;
  auto scalarF32 = RankedTensorType::get({}, attrs.getF32Type());
  // Skipped steps do not count for AdamW, as GradScaler skips
  // optimizer.step() and a refused step leaves the state as it was.
  auto addSkipped = [&] {
    gate.skippedSteps =
        appendArgument(func, scalarF32, globalState(attrs, "skipped_steps"));
  };
  if (!lossScale) {
    addSkipped();
    Value loss;
    for (unsigned i = 0; i < func.getNumResults(); ++i)
      if (func.getResultAttr(i, kLossAttr))
        loss = ret.getOperand(i);
    gate.finite = allFinite(u, grads, loss);
    return true;
  }
  // Dynamic loss scaling: the scale's exponent (cleave-autodiff's) and the
  // finite steps in a row.
  for (BlockArgument arg : func.getArguments())
    if (auto state = func.getArgAttrOfType<ArrayAttr>(arg.getArgNumber(),
                                                      kOptimizerStateAttr);
        state && state == attrs.getStrArrayAttr({"", "loss_scale"}))
      gate.scaleExponent = arg;
  if (!gate.scaleExponent) {
    func.emitOpError("has no loss scale; run cleave-autodiff with "
                     "loss-scale first");
    return false;
  }
  gate.goodSteps =
      appendArgument(func, scalarF32, globalState(attrs, "good_steps"));
  addSkipped();
  gate.finite = unscaleAndCheck(u, gate.scaleExponent, grads);
  return true;
}

void OptimizerPass::closeGate(Updater &u, const Gate &gate,
                              SmallVectorImpl<Value> &states,
                              SmallVectorImpl<DictionaryAttr> &stateAttrs,
                              SmallVectorImpl<Value> &metrics,
                              SmallVectorImpl<DictionaryAttr> &metricAttrs) {
  if (!gate.finite)
    return;
  Builder attrs(u.b.getContext());
  if (gate.scaleExponent) {
    states.append(nextScaleState(u, gate.finite, gate.scaleExponent,
                                 gate.goodSteps, gate.skippedSteps));
    for (StringRef slot : {"loss_scale", "good_steps", "skipped_steps"})
      stateAttrs.push_back(attrs.getDictionaryAttr(globalState(attrs, slot)));
    return;
  }
  auto scalarF32 = RankedTensorType::get({}, attrs.getF32Type());
  Value refused = u.sub(u.scalar(0, 1.0),
                        CastOp::create(u.b, u.loc, scalarF32, gate.finite));
  states.push_back(u.add(gate.skippedSteps, refused));
  stateAttrs.push_back(
      attrs.getDictionaryAttr(globalState(attrs, "skipped_steps")));
  metrics.push_back(refused);
  metricAttrs.push_back(attrs.getDictionaryAttr(
      attrs.getNamedAttr(kMetricAttr, attrs.getStringAttr("nonfinite"))));
}

void OptimizerPass::runOnOperation() {
  func::FuncOp func = getOperation();
  if (func.isExternal())
    return;
  if (failed(checkOptions(func)))
    return signalPassFailure();
  auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
  Builder attrs(&getContext());

  llvm::StringMap<Value> gradOf = gradientsByName(func, ret);
  if (gradOf.empty()) {
    func.emitOpError("returns no gradients; run cleave-autodiff first");
    return signalPassFailure();
  }

  auto addArg = [&](Type type, NamedAttribute role) {
    return appendArgument(func, type, role);
  };
  Value step = stepArgument(func);

  OpBuilder b(ret);
  auto optimizerLoc = [&](StringRef what) { return locationOf(func, what); };
  Location loc = optimizerLoc("step");
  Updater u{b, loc};
  auto scalarF32 = RankedTensorType::get({}, b.getF32Type());
  Value stepF = CastOp::create(b, loc, scalarF32, step);

  SmallVector<BlockArgument> params;
  for (BlockArgument arg : func.getArguments())
    if (isTrainedParameter(func, arg.getArgNumber()))
      params.push_back(arg);
  Gate gate;
  if (!openGate(func, u, params, gradOf, ret, gate))
    return signalPassFailure();
  Value finite = gate.finite;
  if (gate.skippedSteps)
    stepF = u.sub(stepF, gate.skippedSteps);

  // The rate the runtime's schedule feeds, and clipping after unscaling.
  Value lrValue;
  if (lrInput)
    lrValue = addArg(scalarF32, attrs.getNamedAttr(kHyperparameterAttr,
                                                   attrs.getStringAttr("lr")));
  SmallVector<Value> metrics;
  SmallVector<DictionaryAttr> metricAttrs;
  if (maxGradNorm > 0 || clipGradValue > 0) {
    u.loc = optimizerLoc("clip_grad");
    SmallVector<Value *> grads = gradientsOf(func, params, gradOf);
    if (grads.size() != params.size())
      return signalPassFailure();
    if (Value norm = clipGradients(u, grads, clipGradValue, maxGradNorm)) {
      metrics.push_back(norm);
      metricAttrs.push_back(attrs.getDictionaryAttr(
          attrs.getNamedAttr(kMetricAttr, attrs.getStringAttr("grad_norm"))));
    }
    u.loc = loc;
  }

  // AdamW's bias corrections, shared by every parameter.
  Value stepSize, correction2Sqrt;
  if (optimizer == "adamw") {
    auto corrected = [&](double beta) {
      Value pow = PowOp::create(b, loc, u.scalar(0, beta), stepF);
      return u.sub(u.scalar(0, 1.0), pow);
    };
    stepSize = u.div(lrValue ? lrValue : u.scalar(0, lr), corrected(beta1));
    correction2Sqrt = SqrtOp::create(b, loc, corrected(beta2));
  }

  SmallVector<Value> newParams, newStates;
  SmallVector<DictionaryAttr> paramAttrs, stateAttrs;
  auto stateSlot = [&](BlockArgument p, StringRef slot) {
    StringAttr name =
        func.getArgAttrOfType<StringAttr>(p.getArgNumber(), kParameterAttr);
    return attrs.getNamedAttr(
        kOptimizerStateAttr,
        attrs.getArrayAttr({name, attrs.getStringAttr(slot)}));
  };
  auto gated = [&](Value updated, Value old) {
    return finite ? u.keepUnless(finite, updated, old) : updated;
  };
  for (BlockArgument p : params) {
    auto name =
        func.getArgAttrOfType<StringAttr>(p.getArgNumber(), kParameterAttr);
    Value g = gradOf.lookup(name.getValue());
    if (!g) {
      func.emitOpError("has no gradient for parameter '") << name << "'";
      return signalPassFailure();
    }
    auto type = cast<RankedTensorType>(p.getType());
    Value updated;
    u.loc = optimizerLoc(name.getValue());
    if (optimizer == "sgd") {
      Value d = weightDecay != 0 ? u.add(g, u.mul(p, weightDecay)) : g;
      if (momentum != 0) {
        NamedAttribute role = stateSlot(p, "momentum_buffer");
        Value buf = addArg(type, role);
        d = u.add(u.mul(buf, momentum), d);
        newStates.push_back(gated(d, buf));
        stateAttrs.push_back(attrs.getDictionaryAttr(role));
      }
      updated = u.sub(p, u.mulLr(d, lr, lrValue));
    } else {
      NamedAttribute mRole = stateSlot(p, "exp_avg");
      NamedAttribute vRole = stateSlot(p, "exp_avg_sq");
      Value m = addArg(type, mRole), v = addArg(type, vRole);
      auto [m2, v2] =
          u.adamw(p, g, m, v, stepSize, correction2Sqrt,
                  {lr, weightDecay, beta1, beta2, eps, lrValue}, &updated);
      newStates.append({gated(m2, m), gated(v2, v)});
      stateAttrs.append(
          {attrs.getDictionaryAttr(mRole), attrs.getDictionaryAttr(vRole)});
    }
    newParams.push_back(gated(updated, p));
    paramAttrs.push_back(
        attrs.getDictionaryAttr(attrs.getNamedAttr(kParameterAttr, name)));
  }

  closeGate(u, gate, newStates, stateAttrs, metrics, metricAttrs);

  returnUpdate(func, ret, b, newParams, paramAttrs, newStates, stateAttrs,
               metrics, metricAttrs);
}

} // namespace

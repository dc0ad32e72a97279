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

namespace mlir::cleave {
#define GEN_PASS_DEF_OPTIMIZERPASS
#include "cleave/Autodiff/Passes.h.inc"
} // namespace mlir::cleave

using namespace mlir;
using namespace mlir::cleave;

namespace {

struct OptimizerPass
    : public mlir::cleave::impl::OptimizerPassBase<OptimizerPass> {
  using OptimizerPassBase::OptimizerPassBase;
  void runOnOperation() override;

  LogicalResult checkOptions(func::FuncOp func) {
    if (optimizer != "sgd" && optimizer != "adamw")
      return func.emitError("unknown optimizer '")
             << optimizer << "'; expected sgd or adamw";
    if (!(lr > 0) || weightDecay < 0 || momentum < 0 || !(beta1 >= 0) ||
        !(beta1 < 1) || !(beta2 >= 0) || !(beta2 < 1) || !(eps >= 0))
      return func.emitError(
          "invalid optimizer hyperparameters: lr must be > 0, weight decay "
          "and momentum >= 0, betas in [0, 1), eps >= 0");
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
  };
  /// AdamW's new moments of parameter \p p (gradient \p g, moments \p m
  /// and \p v), and in \p updated its new value, as torch.optim.AdamW
  /// computes them.
  std::pair<Value, Value> adamw(Value p, Value g, Value m, Value v,
                                Value stepSize, Value correction2Sqrt,
                                const AdamW &h, Value *updated) {
    int64_t rank = cast<RankedTensorType>(p.getType()).getRank();
    Value decayed = h.weightDecay != 0 ? mul(p, 1.0 - h.lr * h.weightDecay) : p;
    Value m2 = add(mul(m, h.beta1), mul(g, 1.0 - h.beta1));
    Value v2 = add(mul(v, h.beta2), mul(mul(g, g), 1.0 - h.beta2));
    Value denom =
        add(div(SqrtOp::create(b, loc, v2), spread(correction2Sqrt, rank)),
            scalar(rank, h.eps));
    *updated = sub(decayed, mul(spread(stepSize, rank), div(m2, denom)));
    return {m2, v2};
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

/// GradScaler's constants: growth after this many finite steps in a row.
constexpr double kGrowthInterval = 2000;

/// Dynamic loss scaling around the update: the gradients of \p params in
/// \p gradOf are unscaled in place, and the returned rank-0 i1 says whether
/// all are finite (each rank sums its share, so a split gradient's NaN
/// reaches every rank through the partitioner's sum); null, reported, when
/// a parameter has no gradient.
Value unscaleAndCheck(func::FuncOp func, Updater &u, Value scaleExponent,
                      ArrayRef<BlockArgument> params,
                      llvm::StringMap<Value> &gradOf) {
  SmallVector<Value *> grads;
  for (BlockArgument p : params) {
    auto name =
        func.getArgAttrOfType<StringAttr>(p.getArgNumber(), kParameterAttr);
    auto it = gradOf.find(name.getValue());
    if (it == gradOf.end()) {
      func.emitOpError("has no gradient for parameter '") << name << "'";
      return Value();
    }
    grads.push_back(&it->second);
  }
  OpBuilder &b = u.b;
  Value scale = PowOp::create(b, u.loc, u.scalar(0, 2.0),
                              u.add(scaleExponent, u.scalar(0, 16.0)));
  Value inverse = u.div(u.scalar(0, 1.0), scale);
  Value poison = u.scalar(0, 0.0); // NaN if any element is inf or NaN
  for (Value *slot : grads) {
    Value &g = *slot;
    int64_t rank = cast<RankedTensorType>(g.getType()).getRank();
    g = u.mul(g, u.spread(inverse, rank));
    SmallVector<int64_t> dims;
    for (int64_t d = 0; d < rank; ++d)
      dims.push_back(d);
    Value zeroed = u.mul(g, 0.0);
    Value sum =
        rank ? ReduceOp::create(b, u.loc, ReduceKind::sum, zeroed, dims, false)
                   .getResult()
             : zeroed;
    poison = u.add(poison, sum);
  }
  return CmpOp::create(b, u.loc, CmpPredicate::eq, poison, u.scalar(0, 0.0));
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

/// Replaces \p ret: loss, new parameters, new optimizer state, then what
/// was there besides the loss (gradients, buffers).
void returnUpdate(func::FuncOp func, func::ReturnOp ret, OpBuilder &b,
                  ArrayRef<Value> newParams,
                  ArrayRef<DictionaryAttr> paramAttrs,
                  ArrayRef<Value> newStates,
                  ArrayRef<DictionaryAttr> stateAttrs) {
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

void OptimizerPass::runOnOperation() {
  func::FuncOp func = getOperation();
  if (func.isExternal())
    return;
  if (failed(checkOptions(func)))
    return signalPassFailure();
  Block &body = func.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  MLIRContext *ctx = &getContext();
  Builder attrs(ctx);

  // Gradients by parameter name.
  llvm::StringMap<Value> gradOf;
  for (unsigned i = 0; i < func.getNumResults(); ++i)
    if (auto name = func.getResultAttrOfType<StringAttr>(i, kGradientAttr))
      gradOf[name.getValue()] = ret.getOperand(i);
  if (gradOf.empty()) {
    func.emitOpError("returns no gradients; run cleave-autodiff first");
    return signalPassFailure();
  }

  Value step;
  for (BlockArgument arg : func.getArguments())
    if (func.getArgAttr(arg.getArgNumber(), kStepAttr))
      step = arg;
  auto addArg = [&](Type type, NamedAttribute role) -> Value {
    unsigned index = func.getNumArguments();
    (void)func.insertArgument(index, type, attrs.getDictionaryAttr(role),
                              func.getLoc());
    return body.getArgument(index);
  };
  if (!step)
    step = addArg(RankedTensorType::get({}, attrs.getI64Type()),
                  attrs.getNamedAttr(kStepAttr, attrs.getUnitAttr()));

  OpBuilder b(ret);
  // Tagged so that profiles and traces file the update under the optimizer
  // (and each parameter's under its name), not under the model's file.
  auto optimizerLoc = [&](StringRef what) -> Location {
    return FusedLoc::get(b.getContext(),
                         {NameLoc::get(b.getStringAttr(what), func.getLoc())},
                         b.getStringAttr("optimizer"));
  };
  Location loc = optimizerLoc("step");
  Updater u{b, loc};
  auto scalarF32 = RankedTensorType::get({}, b.getF32Type());
  Value stepF = CastOp::create(b, loc, scalarF32, step);

  SmallVector<BlockArgument> params;
  for (BlockArgument arg : func.getArguments())
    if (isTrainedParameter(func, arg.getArgNumber()))
      params.push_back(arg);
  auto globalState = [&](StringRef slot) {
    return attrs.getNamedAttr(kOptimizerStateAttr,
                              attrs.getStrArrayAttr({"", slot}));
  };
  // Dynamic loss scaling: the scale's exponent (cleave-autodiff's), the
  // finite steps in a row and the steps skipped (AdamW counts only the
  // others, as GradScaler skips optimizer.step()).
  Value finite, scaleExponent, goodSteps, skippedSteps;
  if (lossScale) {
    for (BlockArgument arg : func.getArguments())
      if (auto state = func.getArgAttrOfType<ArrayAttr>(arg.getArgNumber(),
                                                        kOptimizerStateAttr);
          state && state == attrs.getStrArrayAttr({"", "loss_scale"}))
        scaleExponent = arg;
    if (!scaleExponent) {
      func.emitOpError("has no loss scale; run cleave-autodiff with "
                       "loss-scale first");
      return signalPassFailure();
    }
    goodSteps = addArg(scalarF32, globalState("good_steps"));
    skippedSteps = addArg(scalarF32, globalState("skipped_steps"));
    finite = unscaleAndCheck(func, u, scaleExponent, params, gradOf);
    if (!finite)
      return signalPassFailure();
    stepF = u.sub(stepF, skippedSteps);
  }

  // AdamW's bias corrections, shared by every parameter.
  Value stepSize, correction2Sqrt;
  if (optimizer == "adamw") {
    auto corrected = [&](double beta) {
      Value pow = PowOp::create(b, loc, u.scalar(0, beta), stepF);
      return u.sub(u.scalar(0, 1.0), pow);
    };
    stepSize = u.div(u.scalar(0, lr), corrected(beta1));
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
      updated = u.sub(p, u.mul(d, lr));
    } else {
      NamedAttribute mRole = stateSlot(p, "exp_avg");
      NamedAttribute vRole = stateSlot(p, "exp_avg_sq");
      Value m = addArg(type, mRole), v = addArg(type, vRole);
      auto [m2, v2] = u.adamw(p, g, m, v, stepSize, correction2Sqrt,
                              {lr, weightDecay, beta1, beta2, eps}, &updated);
      newStates.append({gated(m2, m), gated(v2, v)});
      stateAttrs.append(
          {attrs.getDictionaryAttr(mRole), attrs.getDictionaryAttr(vRole)});
    }
    newParams.push_back(gated(updated, p));
    paramAttrs.push_back(
        attrs.getDictionaryAttr(attrs.getNamedAttr(kParameterAttr, name)));
  }

  if (lossScale) {
    u.loc = optimizerLoc("loss_scale");
    newStates.append(
        nextScaleState(u, finite, scaleExponent, goodSteps, skippedSteps));
    for (StringRef slot : {"loss_scale", "good_steps", "skipped_steps"})
      stateAttrs.push_back(attrs.getDictionaryAttr(globalState(slot)));
  }

  returnUpdate(func, ret, b, newParams, paramAttrs, newStates, stateAttrs);
}

} // namespace

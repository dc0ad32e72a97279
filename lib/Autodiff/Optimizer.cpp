//===- Optimizer.cpp - The optimizer update inside the train step -*- C++
//-*-===//
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
  /// A rank-0 value reshaped to broadcast against rank \p rank.
  Value spread(Value v, int64_t rank) {
    SmallVector<int64_t> ones(rank, 1);
    return ReshapeOp::create(b, loc,
                             RankedTensorType::get(ones, b.getF32Type()), v);
  }
};

void OptimizerPass::runOnOperation() {
  func::FuncOp func = getOperation();
  if (func.isExternal())
    return;
  if (optimizer != "sgd" && optimizer != "adamw") {
    func.emitError("unknown optimizer '")
        << optimizer << "'; expected sgd or adamw";
    return signalPassFailure();
  }
  if (!(lr > 0) || weightDecay < 0 || momentum < 0 || !(beta1 >= 0) ||
      !(beta1 < 1) || !(beta2 >= 0) || !(beta2 < 1) || !(eps >= 0)) {
    func.emitError("invalid optimizer hyperparameters: lr must be > 0, "
                   "weight decay and momentum >= 0, betas in [0, 1), eps >= 0");
    return signalPassFailure();
  }
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
  Location loc = func.getLoc();
  Updater u{b, loc};
  Value stepF =
      CastOp::create(b, loc, RankedTensorType::get({}, b.getF32Type()), step);

  // AdamW's bias corrections, shared by every parameter.
  Value stepSize, correction2Sqrt;
  if (optimizer == "adamw") {
    auto corrected = [&](double beta) {
      Value pow = PowOp::create(
          b, loc,
          ConstantOp::create(
              b, loc,
              DenseElementsAttr::get(RankedTensorType::get({}, b.getF32Type()),
                                     b.getF32FloatAttr(beta))),
          stepF);
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
  SmallVector<BlockArgument> params;
  for (BlockArgument arg : func.getArguments())
    if (func.getArgAttr(arg.getArgNumber(), kParameterAttr))
      params.push_back(arg);
  for (BlockArgument p : params) {
    auto name =
        func.getArgAttrOfType<StringAttr>(p.getArgNumber(), kParameterAttr);
    Value g = gradOf.lookup(name.getValue());
    if (!g) {
      func.emitOpError("has no gradient for parameter '") << name << "'";
      return signalPassFailure();
    }
    auto type = cast<RankedTensorType>(p.getType());
    int64_t rank = type.getRank();
    Value updated;
    if (optimizer == "sgd") {
      Value d = weightDecay != 0 ? u.add(g, u.mul(p, weightDecay)) : g;
      if (momentum != 0) {
        NamedAttribute role = stateSlot(p, "momentum_buffer");
        Value buf = addArg(type, role);
        d = u.add(u.mul(buf, momentum), d);
        newStates.push_back(d);
        stateAttrs.push_back(attrs.getDictionaryAttr(role));
      }
      updated = u.sub(p, u.mul(d, lr));
    } else {
      NamedAttribute mRole = stateSlot(p, "exp_avg");
      NamedAttribute vRole = stateSlot(p, "exp_avg_sq");
      Value m = addArg(type, mRole), v = addArg(type, vRole);
      Value decayed =
          weightDecay != 0 ? u.mul(p, 1.0 - lr * weightDecay) : Value(p);
      Value m2 = u.add(u.mul(m, beta1), u.mul(g, 1.0 - beta1));
      Value v2 = u.add(u.mul(v, beta2), u.mul(u.mul(g, g), 1.0 - beta2));
      Value denom = u.add(
          u.div(SqrtOp::create(b, loc, v2), u.spread(correction2Sqrt, rank)),
          u.scalar(rank, eps));
      updated =
          u.sub(decayed, u.mul(u.spread(stepSize, rank), u.div(m2, denom)));
      newStates.append({m2, v2});
      stateAttrs.append(
          {attrs.getDictionaryAttr(mRole), attrs.getDictionaryAttr(vRole)});
    }
    newParams.push_back(updated);
    paramAttrs.push_back(
        attrs.getDictionaryAttr(attrs.getNamedAttr(kParameterAttr, name)));
  }

  // Results: loss, new parameters, new optimizer state, then what was there
  // besides the loss (gradients, buffers).
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
  func.setType(FunctionType::get(ctx, func.getArgumentTypes(),
                                 ValueRange(results).getTypes()));
  func.setAllResultAttrs(resultAttrs);
}

} // namespace

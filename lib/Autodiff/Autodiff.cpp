//===- Autodiff.cpp - Reverse-mode differentiation --------------*- C++ -*-===//
//
// Source-to-source reverse mode on a straight-line function: the backward
// ops are appended after the forward ones and read forward values directly,
// so the forward pass is the tape. Only "active" values (depending on a
// parameter and reaching the loss) get gradients.
//
//===----------------------------------------------------------------------===//

#include "cleave/Autodiff/Autodiff.h"
#include "Accumulate.h"
#include "Cleave/CleaveAttrNames.h"
#include "Cleave/CleaveInterfaces.h"
#include "Cleave/CleaveOps.h"
#include "cleave/Autodiff/Passes.h"
#include "llvm/ADT/DenseSet.h"

namespace mlir::cleave {
#define GEN_PASS_DEF_AUTODIFFPASS
#include "cleave/Autodiff/Passes.h.inc"
} // namespace mlir::cleave

using namespace mlir;
using namespace mlir::cleave;

namespace {

bool isFloatTensor(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && isa<FloatType>(t.getElementType());
}

/// The backward's seed: 1, or under loss scaling GradScaler's scale, kept
/// as its exponent over 2^16 (a new argument, the step's own optimizer
/// state) so that the state's zero start is the usual initial scale.
Value seedOf(func::FuncOp func, OpBuilder &b, Value loss, bool lossScale) {
  auto lossType = cast<RankedTensorType>(loss.getType());
  Type f = lossType.getElementType();
  Location loc = loss.getLoc();
  if (!lossScale)
    return ConstantOp::create(
        b, loc, DenseElementsAttr::get(lossType, b.getFloatAttr(f, 1.0)));
  auto scalar = RankedTensorType::get({}, f);
  unsigned index = func.getNumArguments();
  (void)func.insertArgument(
      index, scalar,
      b.getDictionaryAttr(b.getNamedAttr(
          kOptimizerStateAttr, b.getStrArrayAttr({"", "loss_scale"}))),
      loc);
  auto constant = [&](double v) {
    return ConstantOp::create(
        b, loc, DenseElementsAttr::get(scalar, b.getFloatAttr(f, v)));
  };
  Value exponent = AddOp::create(b, loc, func.getArgument(index), constant(16));
  Value scale = PowOp::create(b, loc, constant(2.0), exponent);
  return ReshapeOp::create(b, loc, lossType, scale);
}

struct AutodiffPass
    : public mlir::cleave::impl::AutodiffPassBase<AutodiffPass> {
  using AutodiffPassBase::AutodiffPassBase;
  void runOnOperation() override;
};

void AutodiffPass::runOnOperation() {
  func::FuncOp func = getOperation();
  if (func.isExternal())
    return;
  if (microBatches < 1) {
    func.emitOpError("micro-batches must be at least 1, not ")
        << static_cast<int64_t>(microBatches);
    return signalPassFailure();
  }
  std::optional<unsigned> lossIndex;
  for (unsigned i = 0; i < func.getNumResults(); ++i)
    if (func.getResultAttr(i, kLossAttr))
      lossIndex = i;
  if (!lossIndex) {
    func.emitOpError("has no result marked cleave.loss; run "
                     "cleave-append-loss first");
    return signalPassFailure();
  }
  Block &body = func.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  Value loss = ret.getOperand(*lossIndex);
  auto lossType = cast<RankedTensorType>(loss.getType());
  if (!isFloatTensor(loss) || lossType.getNumElements() != 1) {
    func.emitOpError("loss must be a float scalar, got ") << loss.getType();
    return signalPassFailure();
  }

  // Activity analysis: varied (depends on a parameter) and useful (reaches
  // the loss).
  SmallVector<BlockArgument> params;
  llvm::DenseSet<Value> varied, useful;
  for (BlockArgument arg : func.getArguments())
    if (isTrainedParameter(func, arg.getArgNumber())) {
      params.push_back(arg);
      if (isFloatTensor(arg))
        varied.insert(arg);
    }
  if (params.empty()) {
    func.emitOpError("has no weight that trains: every float32 initializer "
                     "is frozen, or the model holds none (a weight stored in "
                     "another dtype is read as a constant)");
    return signalPassFailure();
  }
  for (Operation &op : body.without_terminator()) {
    if (op.hasAttr(kNoGradAttr))
      continue;
    if (llvm::any_of(op.getOperands(),
                     [&](Value v) { return varied.contains(v); }))
      for (Value r : op.getResults())
        if (isFloatTensor(r))
          varied.insert(r);
  }
  useful.insert(loss);
  for (Operation &op : llvm::reverse(body.without_terminator()))
    if (llvm::any_of(op.getResults(),
                     [&](Value r) { return useful.contains(r); }))
      for (Value v : op.getOperands())
        useful.insert(v);
  auto active = [&](Value v) {
    return varied.contains(v) && useful.contains(v);
  };

  OpBuilder b(ret);
  llvm::DenseMap<Value, Value> grads;
  auto accumulate = [&](Value v, Value g) {
    Value &slot = grads[v];
    slot = slot ? AddOp::create(b, g.getLoc(), slot, g).getResult() : g;
  };
  Value seed = seedOf(func, b, loss, lossScale);
  grads[loss] = seed;

  SmallVector<Operation *> forward;
  for (Operation &op : body.without_terminator())
    forward.push_back(&op);
  for (Operation *op : llvm::reverse(forward)) {
    if (op->hasAttr(kNoGradAttr))
      continue;
    SmallVector<Value> resultGrads;
    bool any = false;
    for (Value r : op->getResults()) {
      resultGrads.push_back(active(r) ? grads.lookup(r) : Value());
      any |= static_cast<bool>(resultGrads.back());
    }
    if (!any)
      continue;
    SmallVector<bool> needed;
    for (Value v : op->getOperands())
      needed.push_back(active(v));
    if (llvm::none_of(needed, [](bool n) { return n; }))
      continue;
    auto rule = dyn_cast<DifferentiableOpInterface>(op);
    if (!rule) {
      op->emitOpError("has no differentiation rule, but the loss's gradient "
                      "must flow through it");
      return signalPassFailure();
    }
    b.setInsertionPoint(ret);
    SmallVector<Value> operandGrads(op->getNumOperands());
    if (failed(rule.buildVJP(b, resultGrads, needed, operandGrads)))
      return signalPassFailure();
    for (auto [i, v] : llvm::enumerate(op->getOperands())) {
      if (!needed[i] || !operandGrads[i])
        continue;
      if (operandGrads[i].getType() != v.getType()) {
        op->emitOpError("differentiation rule produced a gradient of type ")
            << operandGrads[i].getType() << " for operand " << i << " of type "
            << v.getType();
        return signalPassFailure();
      }
      accumulate(v, operandGrads[i]);
    }
  }

  // Results: loss, one gradient per parameter, then the updated buffers.
  b.setInsertionPoint(ret);
  SmallVector<Value> results{loss};
  SmallVector<DictionaryAttr> resultAttrs{
      b.getDictionaryAttr(b.getNamedAttr(kLossAttr, b.getUnitAttr()))};
  for (BlockArgument p : params) {
    Value g = grads.lookup(p);
    if (!g) {
      // A parameter the loss does not depend on has a zero gradient.
      auto type = cast<RankedTensorType>(p.getType());
      g = ConstantOp::create(
          b, p.getLoc(),
          DenseElementsAttr::get(type, b.getZeroAttr(type.getElementType())));
    }
    results.push_back(g);
    resultAttrs.push_back(b.getDictionaryAttr(b.getNamedAttr(
        kGradientAttr, func.getArgAttr(p.getArgNumber(), kParameterAttr))));
  }
  for (unsigned i = 0; i < func.getNumResults(); ++i)
    if (Attribute name = func.getResultAttr(i, kBufferAttr)) {
      results.push_back(ret.getOperand(i));
      resultAttrs.push_back(
          b.getDictionaryAttr(b.getNamedAttr(kBufferAttr, name)));
    }
  func::ReturnOp::create(b, ret.getLoc(), results);
  ret.erase();
  func.setType(FunctionType::get(func.getContext(), func.getArgumentTypes(),
                                 ValueRange(results).getTypes()));
  func.setAllResultAttrs(resultAttrs);
  if (failed(accumulateMicroBatches(func, seed, microBatches)))
    return signalPassFailure();
  func.setType(FunctionType::get(func.getContext(), func.getArgumentTypes(),
                                 func.getResultTypes()));
}

} // namespace

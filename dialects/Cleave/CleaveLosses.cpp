//===- CleaveLosses.cpp - Loss functions built from cleave ops --*- C++ -*-===//
//
// Cross-entropy is written as reductions over the class axis (max, sum of
// exponentials, target logit) rather than log_softmax + gather: with the
// class axis split across ranks each reduction is a local one plus an
// all-reduce, which is Megatron's vocab-parallel loss, and the logits are
// never gathered.
//
//===----------------------------------------------------------------------===//

#include "Cleave/CleaveLosses.h"
#include "Cleave/CleaveAttrNames.h"
#include "Cleave/CleaveOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"

using namespace mlir;
using namespace mlir::cleave;

static RankedTensorType typeOf(Value v) {
  return cast<RankedTensorType>(v.getType());
}

static Value splat(OpBuilder &b, Location loc, Type element,
                   ArrayRef<int64_t> shape, double value) {
  auto type = RankedTensorType::get(shape, element);
  Attribute scalar =
      isa<FloatType>(element)
          ? Attribute(b.getFloatAttr(element, value))
          : Attribute(b.getIntegerAttr(element, static_cast<int64_t>(value)));
  return ConstantOp::create(b, loc, DenseElementsAttr::get(type, scalar));
}

static Value reduceAll(OpBuilder &b, Location loc, ReduceKind kind, Value v) {
  SmallVector<int64_t> dims =
      llvm::to_vector(llvm::seq<int64_t>(0, typeOf(v).getRank()));
  if (dims.empty())
    return v;
  return ReduceOp::create(b, loc, kind, v, dims, false);
}

Value mlir::cleave::buildCrossEntropy(OpBuilder &b, Location loc, Value logits,
                                      Value labels, int64_t classAxis,
                                      std::optional<int64_t> ignoreIndex,
                                      Value weights, LossReduction reduction,
                                      bool logProbs) {
  // -log_softmax(x)[t] is x's cross-entropy (F.nll_loss(F.log_softmax(x))
  // as exported at every opset): built from x's reductions it fuses and
  // splits over the classes as SoftmaxCrossEntropyLoss does.
  if (auto ls = logits.getDefiningOp<LogSoftmaxOp>();
      logProbs && ls && static_cast<int64_t>(ls.getAxis()) == classAxis) {
    logits = ls.getInput();
    logProbs = false;
  }
  auto xType = typeOf(logits);
  auto lType = typeOf(labels);
  Type f = xType.getElementType(), idx = lType.getElementType();
  int64_t rank = xType.getRank();
  if (!isa<FloatType>(f) || rank < 1 || classAxis < 0 || classAxis >= rank)
    return emitError(loc) << "cross-entropy needs float logits with a class "
                             "dimension, got "
                          << xType,
           Value();
  if (!idx.isSignlessInteger(64) && !idx.isSignlessInteger(32))
    return emitError(loc) << "cross-entropy labels must be int64 or int32, got "
                          << lType,
           Value();
  SmallVector<int64_t> expected(xType.getShape());
  int64_t classes = expected[classAxis];
  expected.erase(expected.begin() + classAxis);
  if (lType.getShape() != ArrayRef<int64_t>(expected))
    return emitError(loc) << "labels have shape [" << lType.getShape()
                          << "], the logits " << xType << " need ["
                          << ArrayRef<int64_t>(expected) << "]",
           Value();
  if (weights && typeOf(weights) != RankedTensorType::get({classes}, f))
    return emitError(loc) << "class weights must be tensor<" << classes << "x"
                          << f << ">",
           Value();

  // Labels and per-class constants with the class axis kept as 1 / spread.
  SmallVector<int64_t> kept(xType.getShape()), classShape(rank, 1);
  kept[classAxis] = 1;
  classShape[classAxis] = classes;
  auto keptType = RankedTensorType::get(kept, f);
  // A label outside the classes matches no class id: the loss would be
  // the log-sum-exp alone, for no class. It stops the step instead
  // (PyTorch raises too).
  // Checked where they enter the step, if they only change shape on the
  // way: the error then names the input and the position in it.
  Value source = labels;
  while (auto reshape = source.getDefiningOp<ReshapeOp>())
    source = reshape.getInput();
  Location checkLoc = loc;
  if (auto arg = dyn_cast<BlockArgument>(source))
    if (auto fn = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp()))
      if (auto name =
              fn.getArgAttrOfType<StringAttr>(arg.getArgNumber(), kInputAttr))
        checkLoc = NameLoc::get(
            StringAttr::get(b.getContext(), "input '" + name.getValue() + "'"));
  if (checkLoc == loc)
    source = labels;
  Value checked = CheckIndexOp::create(
      b, checkLoc, source.getType(), source, b.getI64IntegerAttr(classes),
      ignoreIndex ? b.getI64IntegerAttr(*ignoreIndex) : IntegerAttr());
  if (checked.getType() != lType)
    checked = ReshapeOp::create(b, loc, lType, checked);
  Value labelsK =
      ReshapeOp::create(b, loc, RankedTensorType::get(kept, idx), checked);
  Value classIds =
      IotaOp::create(b, loc, RankedTensorType::get(classShape, idx),
                     b.getI64IntegerAttr(classAxis));
  Value isTarget = CmpOp::create(b, loc, CmpPredicate::eq, labelsK, classIds);
  Value zero = splat(b, loc, f, SmallVector<int64_t>(rank, 1), 0.0);
  auto sumClasses = [&](Value v) {
    return ReduceOp::create(b, loc, ReduceKind::sum, v,
                            ArrayRef<int64_t>{classAxis}, true);
  };

  Value perItem;
  if (logProbs) {
    perItem = NegOp::create(
        b, loc, sumClasses(SelectOp::create(b, loc, isTarget, logits, zero)));
  } else {
    // log(sum exp(x - m)) - (x_target - m); m only stabilises, so it carries
    // no gradient.
    auto max = ReduceOp::create(b, loc, ReduceKind::max, logits,
                                ArrayRef<int64_t>{classAxis}, true);
    max->setAttr(kNoGradAttr, b.getUnitAttr());
    Value shifted = SubOp::create(b, loc, logits, max);
    Value sumExp = sumClasses(ExpOp::create(b, loc, shifted));
    Value target =
        sumClasses(SelectOp::create(b, loc, isTarget, shifted, zero));
    perItem = SubOp::create(b, loc, LogOp::create(b, loc, sumExp), target);
  }

  // Each item's weight: its class weight (0 for a label outside the
  // classes), times 0 where the label is ignore_index.
  Value coef;
  if (weights) {
    Value w = ReshapeOp::create(b, loc, RankedTensorType::get(classShape, f),
                                weights);
    coef = sumClasses(SelectOp::create(b, loc, isTarget, w, zero));
  }
  if (ignoreIndex) {
    Value ignored = splat(b, loc, idx, SmallVector<int64_t>(rank, 1),
                          static_cast<double>(*ignoreIndex));
    Value valid = CastOp::create(
        b, loc, keptType,
        CmpOp::create(b, loc, CmpPredicate::ne, labelsK, ignored));
    coef = coef ? MulOp::create(b, loc, coef, valid).getResult() : valid;
  }
  if (coef)
    perItem = MulOp::create(b, loc, perItem, coef);

  switch (reduction) {
  case LossReduction::None:
    return ReshapeOp::create(b, loc, RankedTensorType::get(expected, f),
                             perItem);
  case LossReduction::Sum:
    return reduceAll(b, loc, ReduceKind::sum, perItem);
  case LossReduction::Mean:
    if (!coef)
      return reduceAll(b, loc, ReduceKind::mean, perItem);
    return DivOp::create(b, loc, reduceAll(b, loc, ReduceKind::sum, perItem),
                         reduceAll(b, loc, ReduceKind::sum, coef));
  }
  llvm_unreachable("unknown reduction");
}

Value mlir::cleave::buildMeanSquaredError(OpBuilder &b, Location loc,
                                          Value prediction, Value target) {
  if (prediction.getType() != target.getType() ||
      !isa<FloatType>(typeOf(prediction).getElementType()))
    return emitError(loc) << "mean squared error needs a float target of the "
                             "prediction's type "
                          << prediction.getType() << ", got "
                          << target.getType(),
           Value();
  Value diff = SubOp::create(b, loc, prediction, target);
  return reduceAll(b, loc, ReduceKind::mean, MulOp::create(b, loc, diff, diff));
}

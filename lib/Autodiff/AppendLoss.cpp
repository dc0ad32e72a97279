//===- AppendLoss.cpp - The training loss of a forward model ----*- C++ -*-===//

#include "Cleave/CleaveAttrNames.h"
#include "Cleave/CleaveLosses.h"
#include "Cleave/CleaveOps.h"
#include "cleave/Autodiff/Passes.h"

namespace mlir::cleave {
#define GEN_PASS_DEF_APPENDLOSSPASS
#include "cleave/Autodiff/Passes.h.inc"
} // namespace mlir::cleave

using namespace mlir;
using namespace mlir::cleave;

namespace {

struct AppendLossPass
    : public mlir::cleave::impl::AppendLossPassBase<AppendLossPass> {
  using AppendLossPassBase::AppendLossPassBase;
  void runOnOperation() override;
};

std::string outputName(func::FuncOp func, unsigned i) {
  if (auto name = func.getResultAttrOfType<StringAttr>(i, kOutputAttr))
    return name.str();
  return "result " + std::to_string(i);
}

void AppendLossPass::runOnOperation() {
  func::FuncOp func = getOperation();
  if (func.isExternal())
    return;
  if (loss != "auto" && loss != "cross_entropy" && loss != "mse") {
    func.emitError("unknown loss '")
        << loss << "'; expected auto, cross_entropy or mse";
    return signalPassFailure();
  }
  for (unsigned i = 0; i < func.getNumResults(); ++i)
    if (func.getResultAttr(i, kLossAttr))
      return; // Already a training function.
  if (func.getNumResults() == 0 || func.getResultAttr(0, kBufferAttr)) {
    func.emitError("the model has no output to train on");
    return signalPassFailure();
  }
  auto out = cast<RankedTensorType>(func.getResultTypes()[0]);
  std::string name = outputName(func, 0);
  if (loss == "auto") {
    if (!isa<FloatType>(out.getElementType()) || out.getNumElements() != 1) {
      func.emitError("the model's first output '")
          << name << "' is " << out
          << ", not a scalar loss; choose a loss for it with --loss "
             "cross_entropy or --loss mse";
      return signalPassFailure();
    }
    func.setResultAttr(0, kLossAttr, UnitAttr::get(&getContext()));
    return;
  }

  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (auto n = func.getArgAttrOfType<StringAttr>(i, kInputAttr))
      if (n.getValue() == "labels") {
        func.emitError("the model already has an input named 'labels'; "
                       "--loss ")
            << loss << " adds one";
        return signalPassFailure();
      }
  Builder builder(&getContext());
  RankedTensorType labelsType;
  if (loss == "cross_entropy") {
    if (out.getRank() < 1) {
      func.emitError("--loss cross_entropy needs the first output '")
          << name << "' to have a class dimension, got " << out;
      return signalPassFailure();
    }
    labelsType =
        RankedTensorType::get(out.getShape().drop_back(), builder.getI64Type());
  } else {
    labelsType = out;
  }
  Block &body = func.getBody().front();
  unsigned index = func.getNumArguments();
  if (failed(
          func.insertArgument(index, labelsType,
                              builder.getDictionaryAttr(builder.getNamedAttr(
                                  kInputAttr, builder.getStringAttr("labels"))),
                              func.getLoc())))
    return signalPassFailure();
  Value labels = body.getArgument(index);

  auto ret = cast<func::ReturnOp>(body.getTerminator());
  OpBuilder b(ret);
  Value prediction = ret.getOperand(0);
  Value value =
      loss == "mse"
          ? buildMeanSquaredError(b, ret.getLoc(), prediction, labels)
          : buildCrossEntropy(b, ret.getLoc(), prediction, labels,
                              out.getRank() - 1, -100, Value(),
                              LossReduction::Mean, /*logProbs=*/false);
  if (!value)
    return signalPassFailure();
  SmallVector<Value> results{value};
  llvm::append_range(results, ret.getOperands());
  SmallVector<DictionaryAttr> attrs{builder.getDictionaryAttr(
      builder.getNamedAttr(kLossAttr, builder.getUnitAttr()))};
  for (unsigned i = 0; i < func.getNumResults(); ++i)
    attrs.push_back(func.getResultAttrDict(i) ? func.getResultAttrDict(i)
                                              : builder.getDictionaryAttr({}));
  ret->setOperands(results);
  func.setType(FunctionType::get(&getContext(), func.getArgumentTypes(),
                                 ValueRange(results).getTypes()));
  func.setAllResultAttrs(attrs);
}

} // namespace

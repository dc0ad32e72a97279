//===- MixedPrecision.cpp - bf16 / fp16 matmuls and convolutions -*- C++
//-*-===//
//
// Rewrites the finished train step rather than the forward before
// differentiation: the backward's products (the input and weight gradients)
// are then rounded like the forward's, every use of a weight shares one
// rounded copy, and autodiff, the optimizer and the sharding passes need
// no notion of precision. What the ops compute in each dtype is the
// dialect's (cleave.matmul accumulates bf16 products in f32 and rounds its
// result once); the layout search then prices the bf16 values at their own
// size.
//
//===----------------------------------------------------------------------===//

#include "Cleave/CleaveAttrNames.h"
#include "Cleave/CleaveOps.h"
#include "cleave/Autodiff/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlir::cleave {
#define GEN_PASS_DEF_MIXEDPRECISIONPASS
#include "cleave/Autodiff/Passes.h.inc"
} // namespace mlir::cleave

using namespace mlir;
using namespace mlir::cleave;

namespace {

RankedTensorType withElement(Type type, Type element) {
  auto tensor = cast<RankedTensorType>(type);
  return RankedTensorType::get(tensor.getShape(), element);
}

bool isF32Tensor(Value v) {
  auto tensor = dyn_cast<RankedTensorType>(v.getType());
  return tensor && tensor.getElementType().isF32();
}

struct MixedPrecisionPass
    : public mlir::cleave::impl::MixedPrecisionPassBase<MixedPrecisionPass> {
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    MLIRContext *ctx = &getContext();
    Type low;
    if (precision == "bf16")
      low = BFloat16Type::get(ctx);
    else if (precision == "fp16")
      low = Float16Type::get(ctx);
    else {
      func.emitError() << "precision must be bf16 or fp16, not '" << precision
                       << "'";
      return signalPassFailure();
    }
    SmallVector<Operation *> products;
    func.walk([&](Operation *op) {
      if (isa<MatmulOp, Conv2DOp, Conv2DBackwardInputOp,
              Conv2DBackwardFilterOp>(op) &&
          isF32Tensor(op->getResult(0)))
        products.push_back(op);
    });
    // One rounded copy per value, shared by all its products.
    DenseMap<Value, Value> copies;
    auto rounded = [&](Value v) -> Value {
      if (auto it = copies.find(v); it != copies.end())
        return it->second;
      // A product's widened result: its own low-precision value.
      if (auto widen = v.getDefiningOp<CastOp>();
          widen && getElementTypeOrSelf(widen.getInput().getType()) == low)
        return widen.getInput();
      OpBuilder b(ctx);
      b.setInsertionPointAfterValue(v);
      Value copy =
          CastOp::create(b, v.getLoc(), withElement(v.getType(), low), v);
      copies[v] = copy;
      return copy;
    };
    for (Operation *op : products) {
      for (OpOperand &use : op->getOpOperands())
        if (isF32Tensor(use.get()))
          use.set(rounded(use.get()));
      Value result = op->getResult(0);
      Type wide = result.getType();
      result.setType(withElement(wide, low));
      OpBuilder b(op->getContext());
      b.setInsertionPointAfter(op);
      auto widened = CastOp::create(b, op->getLoc(), wide, result);
      result.replaceAllUsesExcept(widened, widened);
    }
    func->setAttr(kPrecisionAttr, StringAttr::get(ctx, precision));
  }
};

} // namespace

//===- SumProductCopies.cpp - Backward sums of the bf16 copies ------------===//
//
// Runs on a rank's finished program (local values only) under mixed
// precision, after --cleave-narrow-saved.
//
//===----------------------------------------------------------------------===//

#include "Cleave/CleaveAttrNames.h"
#include "Cleave/CleaveOps.h"
#include "ForwardOps.h"
#include "cleave/Lowering/Passes.h"

#include "mlir/IR/Builders.h"

namespace mlir::cleave {
#define GEN_PASS_DEF_SUMPRODUCTCOPIESPASS
#include "cleave/Lowering/Passes.h.inc"
} // namespace mlir::cleave

using namespace mlir;
using namespace mlir::cleave;

namespace {

struct SumProductCopiesPass
    : public mlir::cleave::impl::SumProductCopiesPassBase<
          SumProductCopiesPass> {
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (!isBf16Step(func))
      return;
    llvm::DenseSet<Operation *> forward = forwardOps(func);
    Type bf16 = BFloat16Type::get(func.getContext());
    SmallVector<std::pair<ReduceOp, CastOp>> sums;
    func.walk([&](ReduceOp sum) {
      if (forward.count(sum) || sum.getKind() != ReduceKind::sum)
        return;
      Value v = sum.getInput();
      auto type = cast<RankedTensorType>(v.getType());
      if (!type.getElementType().isF32())
        return;
      // The copy a product reads, made before the sum.
      for (Operation *user : v.getUsers())
        if (auto c = dyn_cast<CastOp>(user);
            c && c.getType().getElementType() == bf16 &&
            c->isBeforeInBlock(sum)) {
          sums.push_back({sum, c});
          return;
        }
    });
    for (auto [sum, copy] : sums) {
      OpBuilder b(sum);
      Value wide = CastOp::create(b, sum.getLoc(), sum.getInput().getType(),
                                  copy.getResult());
      sum.getInputMutable().assign(wide);
    }
  }
};

} // namespace

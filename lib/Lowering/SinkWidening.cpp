//===- SinkWidening.cpp - A widening near its readers ---------*- C++ -*-===//
//
// Runs after CSE on a rank's finished program: the copies it makes are
// what CSE merges, and the layout search has already priced every value at
// its stored width.
//
//===----------------------------------------------------------------------===//

#include "Cleave/CleaveOps.h"
#include "cleave/Lowering/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace mlir::cleave {
#define GEN_PASS_DEF_SINKWIDENINGPASS
#include "cleave/Lowering/Passes.h.inc"
} // namespace mlir::cleave

using namespace mlir;
using namespace mlir::cleave;

namespace {

Type elementOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getElementType();
}

/// bf16 or f16 to f32: exact, so each reader may widen on its own.
bool isExactWidening(CastOp c) {
  Type from = elementOf(c.getInput());
  return (from.isBF16() || from.isF16()) && elementOf(c.getResult()).isF32();
}

/// A reader whose kernel widens this operand itself as it reads it
/// (layer_norm_backward's input and incoming gradient): it takes the
/// narrow value, and no f32 copy is made for it.
bool readsNarrow(OpOperand &use, CastOp c) {
  return isa<LayerNormBackwardOp>(use.getOwner()) &&
         elementOf(c.getInput()).isBF16() &&
         (use.getOperandNumber() == 0 || use.getOperandNumber() == 3);
}

struct SinkWideningPass
    : public mlir::cleave::impl::SinkWideningPassBase<SinkWideningPass> {
  using Base::Base;

  void runOnOperation() override {
    DenseMap<Operation *, int64_t> position;
    SmallVector<CastOp> widenings;
    getOperation().walk([&](Operation *op) {
      position[op] = static_cast<int64_t>(position.size());
      if (auto c = dyn_cast<CastOp>(op); c && isExactWidening(c))
        widenings.push_back(c);
    });
    for (CastOp c : widenings) {
      SmallVector<OpOperand *> uses, narrow;
      for (OpOperand &use : c->getUses())
        (readsNarrow(use, c) ? narrow : uses).push_back(&use);
      for (OpOperand *use : narrow)
        use->set(c.getInput());
      if (uses.empty()) {
        c->erase();
        continue;
      }
      llvm::sort(uses, [&](OpOperand *a, OpOperand *b) {
        return position[a->getOwner()] < position[b->getOwner()];
      });
      // Readers in runs of nearby ops, each run with one copy made before
      // its first reader (the first run keeps the original).
      Value copy = c.getResult();
      int64_t runStart = position[c];
      for (OpOperand *use : uses) {
        int64_t at = position[use->getOwner()];
        if (at - runStart > near) {
          OpBuilder b(use->getOwner());
          copy = b.clone(*c)->getResult(0);
          runStart = at;
        }
        use->set(copy);
      }
      // The first run's widening is made right before its first reader:
      // next to an elementwise reader, the runtime fuses it into that
      // reader's kernel (a product's result widened where the product is
      // made, with the weight gradient's product between, was a kernel of
      // its own), and the f32 copy lives no longer than it must.
      for (OpOperand *use : uses)
        if (use->get() == c.getResult()) {
          c->moveBefore(use->getOwner());
          break;
        }
    }
  }
};

} // namespace

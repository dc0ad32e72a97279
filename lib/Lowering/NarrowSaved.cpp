//===- NarrowSaved.cpp - Saved activations held in bf16 ---------*- C++ -*-===//
//
// Runs on a rank's finished program before --cleave-sink-widening, which
// gives the backward's readers far from this pass's widening copies of
// their own.
//
//===----------------------------------------------------------------------===//

#include "Cleave/CleaveAttrNames.h"
#include "Cleave/CleaveOps.h"
#include "ForwardOps.h"
#include "cleave/Lowering/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"

namespace mlir::cleave {
#define GEN_PASS_DEF_NARROWSAVEDPASS
#include "cleave/Lowering/Passes.h.inc"
} // namespace mlir::cleave

using namespace mlir;
using namespace mlir::cleave;

namespace {

/// Values the backward may read rounded: not statistics (a reduction's
/// result, a norm's mean and inverse deviation, attention's log-sum-exp)
/// nor log-domain values, whose rounding error is an exponent's (exp of it
/// is off by |v| 2^-9), nor views (no bytes of their own), nor data that is
/// not an activation.
bool mayRound(Value v) {
  Operation *def = v.getDefiningOp();
  if (!def || !isF32Tensor(v))
    return false;
  if (isa<ReduceOp, LogOp, LogSoftmaxOp, CrossEntropyOp, ConstantOp, IotaOp,
          RandomUniformOp, AllReduceOp, ReduceScatterOp, ReshapeOp>(def))
    return false;
  // Saturating outputs: the backward forms their derivative from them by a
  // difference (1 - y^2, y (1 - y)) that cancels as they saturate, where a
  // rounded y would keep none of the derivative's digits.
  if (isa<TanhOp, SigmoidOp>(def))
    return false;
  if (isa<LayerNormOp, BatchNormOp, AttentionOp>(def))
    return cast<OpResult>(v).getResultNumber() == 0;
  return true;
}

/// Readers whose result moves smoothly with the value (a relative error of
/// the operand is one of the result's): arithmetic, powers of it, products
/// and data movement. A comparison, a select, a maximum or a pooling backward
/// may turn a rounding into another branch or another position, and exp turns
/// it into an exponent's error, so a value they read stays f32.
bool readsSmoothly(OpOperand &use) {
  Operation *reader = use.getOwner();
  // x^n's relative error is n times x's; an exponent's would be log(x)'s.
  if (isa<PowOp>(reader))
    return use.getOperandNumber() == 0;
  // Attention recomputes exp(q k^T + bias - lse) against the forward's
  // f32 lse: only the value, the output and the gradient are products.
  if (isa<AttentionBackwardOp>(reader))
    return llvm::is_contained({2u, 3u, 5u}, use.getOperandNumber());
  if (isa<AttentionOp>(reader))
    return use.getOperandNumber() == 2;
  // (x - mean) * inv_std_dev, and linear in the incoming gradient.
  if (isa<LayerNormBackwardOp>(reader))
    return use.getOperandNumber() == 0 || use.getOperandNumber() == 3;
  if (auto c = dyn_cast<CastOp>(reader))
    return isa<FloatType>(cast<RankedTensorType>(c.getType()).getElementType());
  if (auto reduce = dyn_cast<ReduceOp>(reader))
    return reduce.getKind() == ReduceKind::sum ||
           reduce.getKind() == ReduceKind::mean;
  return isa<AddOp, SubOp, MulOp, DivOp, NegOp, TanhOp, SigmoidOp, ErfOp,
             GeluOp, SqrtOp, RsqrtOp, ReciprocalOp, MatmulOp, TransposeOp,
             BroadcastOp, ConcatOp, SliceOp>(reader);
}

struct NarrowSavedPass
    : public mlir::cleave::impl::NarrowSavedPassBase<NarrowSavedPass> {
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (!isBf16Step(func))
      return;
    DenseSet<Operation *> forward = forwardOps(func);
    auto isLater = [&](Operation *reader) {
      return !forward.count(reader) && !isa<func::ReturnOp>(reader);
    };
    SmallVector<Value> saved;
    for (Operation &op : func.getBody().front())
      if (forward.count(&op))
        for (Value v : op.getResults())
          if (mayRound(v) && isSavedAndReadSmoothly(v, forward))
            saved.push_back(v);

    Type bf16 = BFloat16Type::get(func.getContext());
    for (Value v : saved) {
      auto type = cast<RankedTensorType>(v.getType());
      // The bf16 copy a product of the forward reads is the rounding to
      // keep; else one is made where the value is.
      Value narrow;
      for (Operation *user : v.getUsers())
        if (auto c = dyn_cast<CastOp>(user);
            c && forward.count(c) &&
            cast<RankedTensorType>(c.getType()).getElementType() == bf16 &&
            (!narrow || c->isBeforeInBlock(narrow.getDefiningOp())))
          narrow = c.getResult();
      // One widening before the first later reader; --cleave-sink-widening
      // gives readers far from it copies of their own.
      Operation *first = nullptr;
      for (Operation *user : v.getUsers())
        if (isLater(user) && (!first || user->isBeforeInBlock(first)))
          first = user;
      if (narrow && !narrow.getDefiningOp()->isBeforeInBlock(first))
        narrow = nullptr;
      OpBuilder b(func.getContext());
      if (!narrow) {
        b.setInsertionPointAfterValue(v);
        narrow = CastOp::create(b, v.getLoc(), type.clone(bf16), v);
        forward.insert(narrow.getDefiningOp());
      }
      b.setInsertionPoint(first);
      Value wide = CastOp::create(b, v.getLoc(), type, narrow);
      v.replaceUsesWithIf(
          wide, [&](OpOperand &use) { return isLater(use.getOwner()); });
    }
  }

  /// Read outside the forward, only by readers that move smoothly with it
  /// (not by a recomputed forward op), and not returned.
  static bool isSavedAndReadSmoothly(Value v,
                                     const DenseSet<Operation *> &forward) {
    bool later = false;
    for (OpOperand &use : v.getUses()) {
      Operation *reader = use.getOwner();
      if (forward.count(reader))
        continue;
      // A forward op --cleave-recompute copied must read what the forward
      // read, or the copy would not make the forward's values again.
      if (isa<func::ReturnOp>(reader) || !readsSmoothly(use) ||
          reader->hasAttr(kRecomputedAttr))
        return false;
      later = true;
    }
    return later;
  }
};

} // namespace

//===- MixedPrecision.cpp - bf16 / fp16 products --------------*- C++ -*-===//
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

#include <functional>

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

Type elementTypeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getElementType();
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
      if (isProductOp(op) && isF32Tensor(op->getResult(0)))
        products.push_back(op);
    });
    // One rounded copy per value, shared by all its products.
    DenseMap<Value, Value> copies;
    std::function<Value(Value)> rounded = [&](Value v) -> Value {
      if (auto it = copies.find(v); it != copies.end())
        return it->second;
      // A product's widened result: its own low-precision value.
      if (auto widen = v.getDefiningOp<CastOp>();
          widen && getElementTypeOrSelf(widen.getInput().getType()) == low)
        return widen.getInput();
      OpBuilder b(ctx);
      Operation *def = v.getDefiningOp();
      Value copy;
      // A slice of a value whose rounding is already there (a product's
      // own bf16 result: attention's q, k, v cut from one projection) is
      // cut from that; one of a wider f32 value is rounded alone.
      std::function<bool(Value)> roundsFree = [&](Value x) -> bool {
        if (copies.count(x))
          return true;
        Operation *d = x.getDefiningOp();
        if (auto widen = dyn_cast_or_null<CastOp>(d))
          return getElementTypeOrSelf(widen.getInput().getType()) == low;
        return isa_and_present<TransposeOp, ReshapeOp, SliceOp>(d) &&
               roundsFree(d->getOperand(0));
      };
      if (isa_and_present<TransposeOp, ReshapeOp>(def) ||
          (isa_and_present<SliceOp>(def) && roundsFree(def->getOperand(0)))) {
        // Rounding commutes with moving elements: round the source (a
        // weight read as x W^T: its one copy, and a frozen weight's own
        // bf16 value) and move half the bytes.
        Value source = rounded(def->getOperand(0));
        b.setInsertionPointAfter(def);
        Operation *moved = b.clone(*def);
        moved->setOperand(0, source);
        moved->getResult(0).setType(withElement(v.getType(), low));
        copy = moved->getResult(0);
      } else {
        b.setInsertionPointAfterValue(v);
        copy = CastOp::create(b, v.getLoc(), withElement(v.getType(), low), v);
      }
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
    // Attention's two products (q k^T, p v) and their adjoints read bf16
    // q, k, v and output gradient, as autocast's bmm; its results stay f32
    // (cleave.attention's description). fp16 keeps attention in f32: the
    // CPU backend's tiles multiply bf16 only.
    if (low.isBF16())
      func.walk([&](Operation *op) {
        unsigned rounds = isa<AttentionOp>(op)           ? 3
                          : isa<AttentionBackwardOp>(op) ? 6
                                                         : 0;
        for (unsigned i = 0; i < rounds; ++i)
          if ((i < 3 || i == 5) && isF32Tensor(op->getOperand(i)))
            op->setOperand(i, rounded(op->getOperand(i)));
      });
    holdFrozenInLowPrecision(func, low);
    returnLowPrecisionGradients(func, low);
    func->setAttr(kPrecisionAttr, StringAttr::get(ctx, precision));
  }

  /// A weight's gradient made by one bf16 product (its widening, perhaps
  /// reshaped or transposed) is returned as that bf16 value: it holds
  /// nothing more in f32, so the step's gradients take half the bytes. The
  /// widening moves after the reshapes and transposes, where the update
  /// reads it (and the elementwise fusion folds it into the update's
  /// loads). A gradient that sums several uses stays f32.
  void returnLowPrecisionGradients(func::FuncOp func, Type low) {
    Operation *ret = func.getBody().front().getTerminator();
    SmallVector<Type> results(func.getResultTypes());
    bool changed = false;
    for (unsigned i = 0; i < func.getNumResults(); ++i) {
      Value grad = ret->getOperand(i);
      if (!func.getResultAttr(i, kGradientAttr) || !isF32Tensor(grad))
        continue;
      SmallVector<Operation *> moves;
      Value v = grad;
      while (isa_and_present<TransposeOp, ReshapeOp>(v.getDefiningOp())) {
        moves.push_back(v.getDefiningOp());
        v = v.getDefiningOp()->getOperand(0);
      }
      auto widen = v.getDefiningOp<CastOp>();
      if (!widen || elementTypeOf(widen.getInput()) != low)
        continue;
      Value narrow = widen.getInput();
      OpBuilder b(&getContext());
      b.setInsertionPointAfterValue(grad);
      for (Operation *move : llvm::reverse(moves)) {
        Operation *moved = b.clone(*move);
        moved->setOperand(0, narrow);
        moved->getResult(0).setType(
            withElement(move->getResult(0).getType(), low));
        narrow = moved->getResult(0);
      }
      Operation *widened = widen;
      if (!moves.empty()) {
        widened = CastOp::create(b, grad.getLoc(), grad.getType(), narrow);
        grad.replaceAllUsesWith(widened->getResult(0));
        for (Operation *move : moves) // the f32 moves, now unread
          if (move->use_empty())
            move->erase();
      }
      ret->setOperand(i, narrow);
      sinkToFirstReader(widened);
      results[i] = narrow.getType();
      changed = true;
    }
    if (changed)
      func.setType(FunctionType::get(
          &getContext(), func.getBody().front().getArgumentTypes(), results));
  }

  /// The gradient is widened where the update first reads it, after the
  /// backward: until then it is the bf16 value alone, so a data-parallel
  /// step sums the gradients in the backward's buckets rather than one by
  /// one where each was widened.
  static void sinkToFirstReader(Operation *widened) {
    Operation *first = nullptr;
    for (Operation *user : widened->getUsers())
      if (!user->hasTrait<OpTrait::IsTerminator>() &&
          (!first || user->isBeforeInBlock(first)))
        first = user;
    if (first)
      widened->moveBefore(first);
  }

  /// A frozen weight has no master to keep: the step holds it in bf16, and
  /// its products read it as it is (a LoRA base at half the bytes, rounded
  /// once when the bundle is written). One that only other ops read (a
  /// norm's scale, a rotary table) stays f32.
  void holdFrozenInLowPrecision(func::FuncOp func, Type low) {
    Block &body = func.getBody().front();
    bool changed = false;
    for (BlockArgument arg : body.getArguments()) {
      unsigned i = arg.getArgNumber();
      if (!func.getArgAttr(i, kFrozenAttr) || !isF32Tensor(arg))
        continue;
      SmallVector<CastOp> copies;
      for (Operation *user : arg.getUsers())
        if (auto c = dyn_cast<CastOp>(user);
            c && elementTypeOf(c.getResult()) == low)
          copies.push_back(c);
      if (copies.empty())
        continue;
      Type wide = arg.getType();
      arg.setType(withElement(wide, low));
      changed = true;
      OpBuilder b(&getContext());
      b.setInsertionPointToStart(&body);
      auto widened = CastOp::create(b, arg.getLoc(), wide, arg);
      arg.replaceAllUsesExcept(widened, widened);
      for (CastOp c : copies) {
        c.getResult().replaceAllUsesWith(arg);
        c.erase();
      }
      if (widened.use_empty())
        widened.erase();
    }
    if (changed)
      func.setType(FunctionType::get(&getContext(), body.getArgumentTypes(),
                                     func.getResultTypes()));
  }
};

} // namespace

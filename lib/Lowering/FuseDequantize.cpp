//===- FuseDequantize.cpp - Weight-only int8 products ---------*- C++ -*-===//
//
// Runs on a rank's finished program rather than before the layout search:
// the sharding rules, autodiff and the partitioner see only the plain
// cast / mul / matmul they already know, and the fused op is a matter of
// how a rank computes its share, not of how the model is split.
//
//===----------------------------------------------------------------------===//

#include "Cleave/CleaveOps.h"
#include "cleave/Lowering/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir::cleave {
#define GEN_PASS_DEF_FUSEDEQUANTIZEPASS
#include "cleave/Lowering/Passes.h.inc"
} // namespace mlir::cleave

using namespace mlir;
using namespace mlir::cleave;

namespace {

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

/// Every dim but the last two is 1.
bool unitBatch(ArrayRef<int64_t> shape) {
  return llvm::all_of(shape.drop_back(2), [](int64_t d) { return d == 1; });
}

/// \p v seen through views that only add or drop unit batch dims and
/// through a swap of its last two dims (which flips \p transposed).
Value peelViews(Value v, bool &transposed) {
  while (true) {
    Operation *def = v.getDefiningOp();
    ArrayRef<int64_t> out = shapeOf(v);
    if (auto r = dyn_cast_or_null<ReshapeOp>(def)) {
      ArrayRef<int64_t> in = shapeOf(r.getInput());
      if (in.size() < 2 || out.size() < 2 || !unitBatch(in) ||
          !unitBatch(out) || in.take_back(2) != out.take_back(2))
        return v;
      v = r.getInput();
    } else if (auto t = dyn_cast_or_null<TransposeOp>(def)) {
      if (!unitBatch(out) || !swapsLastTwo(t.getPermutation()))
        return v;
      v = t.getInput();
      transposed = !transposed;
    } else {
      return v;
    }
  }
}

/// The low-precision 2-D weight \p v widens to f32 (int8, bf16, f16).
Value widenedWeight(Value v) {
  auto c = v.getDefiningOp<CastOp>();
  if (!c || !cast<RankedTensorType>(v.getType()).getElementType().isF32())
    return {};
  Value w = c.getInput();
  Type e = cast<RankedTensorType>(w.getType()).getElementType();
  if (shapeOf(w).size() != 2 ||
      !(e.isSignlessInteger(8) || e.isBF16() || e.isF16()))
    return {};
  return w;
}

/// \p s broadcast as one value per row of a [rows, cols] matrix, as a 1-D
/// [rows] value (a view of it, made before \p user).
Value rowScale(Value s, int64_t rows, int64_t cols, Operation *user) {
  auto type = cast<RankedTensorType>(s.getType());
  ArrayRef<int64_t> shape = type.getShape();
  if (!type.getElementType().isF32() || shape.size() != 2 || shape[0] != rows ||
      shape[1] != 1 || cols == 1)
    return {};
  if (auto r = s.getDefiningOp<ReshapeOp>())
    if (shapeOf(r.getInput()) == ArrayRef<int64_t>{rows})
      return r.getInput();
  OpBuilder b(user);
  return ReshapeOp::create(
      b, s.getLoc(), RankedTensorType::get({rows}, type.getElementType()), s);
}

/// The int8 [rows, cols] weight \p v is, widened and perhaps regrouped to
/// [rows, groups, cols / groups] (before or after the widening).
Value groupedInt8(Value v, int64_t rows, int64_t cols) {
  auto isInt8Matrix = [&](Value q) {
    auto t = cast<RankedTensorType>(q.getType());
    return t.getElementType().isSignlessInteger(8) &&
           t.getShape() == ArrayRef<int64_t>{rows, cols};
  };
  if (auto r = v.getDefiningOp<ReshapeOp>()) // regrouped after widening
    if (Value w = widenedWeight(r.getInput()); w && isInt8Matrix(w))
      return w;
  auto c = v.getDefiningOp<CastOp>();
  if (!c || !cast<RankedTensorType>(v.getType()).getElementType().isF32())
    return {};
  Value q = c.getInput();
  if (auto r = q.getDefiningOp<ReshapeOp>()) // regrouped before
    q = r.getInput();
  return isInt8Matrix(q) ? q : Value();
}

/// \p rhs, [rows, cols], as an int8 weight times per-group scales: the
/// exporter's `(w.reshape(rows, G, g) * scale[:, :, None]).reshape(rows,
/// cols)` (GPTQ's groups). Returns the weight and sets \p scale ([rows,
/// G], a view made before \p user).
Value perGroup(Value rhs, Value &scale, Operation *user) {
  ArrayRef<int64_t> shape = shapeOf(rhs);
  auto regroup = rhs.getDefiningOp<ReshapeOp>();
  if (!regroup)
    return {};
  ArrayRef<int64_t> grouped = shapeOf(regroup.getInput());
  auto mul = regroup.getInput().getDefiningOp<MulOp>();
  if (!mul || grouped.size() != 3 || grouped[0] != shape[0] ||
      grouped[1] * grouped[2] != shape[1])
    return {};
  SmallVector<int64_t> perGroupShape{grouped[0], grouped[1], 1};
  for (int i = 0; i < 2; ++i) {
    Value w = groupedInt8(mul->getOperand(i), shape[0], shape[1]);
    Value s = mul->getOperand(1 - i);
    auto type = cast<RankedTensorType>(s.getType());
    if (!w || type.getShape() != ArrayRef<int64_t>(perGroupShape) ||
        !type.getElementType().isF32())
      continue;
    SmallVector<int64_t> flat{grouped[0], grouped[1]};
    if (auto r = s.getDefiningOp<ReshapeOp>();
        r && shapeOf(r.getInput()) == ArrayRef<int64_t>(flat)) {
      scale = r.getInput();
    } else {
      OpBuilder b(user);
      scale = ReshapeOp::create(
          b, s.getLoc(), RankedTensorType::get(flat, type.getElementType()), s);
    }
    return w;
  }
  return {};
}

struct FuseDequantizePass
    : public mlir::cleave::impl::FuseDequantizePassBase<FuseDequantizePass> {
  void runOnOperation() override {
    SmallVector<MatmulOp> products;
    getOperation().walk([&](MatmulOp m) {
      if (!m.getTransposeLhs() &&
          cast<RankedTensorType>(m.getType()).getElementType().isF32())
        products.push_back(m);
    });
    SmallVector<Operation *> replaced;
    for (MatmulOp m : products)
      if (fuse(m))
        replaced.push_back(m);
    // The chains the products read: erased once nothing reads them.
    for (Operation *op : replaced) {
      SmallVector<Value> operands(op->getOperands());
      op->erase();
      eraseUnused(operands);
    }
  }

  static void eraseUnused(SmallVector<Value> worklist) {
    while (!worklist.empty()) {
      Value v = worklist.pop_back_val();
      Operation *def = v.getDefiningOp();
      if (!def || !isOpTriviallyDead(def))
        continue;
      worklist.append(def->operand_begin(), def->operand_end());
      def->erase();
    }
  }

  bool fuse(MatmulOp m) {
    bool transposed = m.getTransposeRhs();
    Value rhs = peelViews(m.getRhs(), transposed);
    ArrayRef<int64_t> shape = shapeOf(rhs);
    if (shape.size() != 2 || !unitBatch(shapeOf(m.getRhs())))
      return false;
    Value scale;
    Value weight = widenedWeight(rhs);
    if (!weight)
      weight = perGroup(rhs, scale, m);
    if (!weight) {
      auto mul = rhs.getDefiningOp<MulOp>();
      if (!mul)
        return false;
      for (int i = 0; i < 2 && !weight; ++i) {
        Value w = widenedWeight(mul->getOperand(i));
        Value s = mul->getOperand(1 - i);
        if (w && !cast<RankedTensorType>(w.getType())
                      .getElementType()
                      .isSignlessInteger(8))
          continue; // a scaled bf16 weight: not the int8 form
        if (w && (scale = rowScale(s, shape[0], shape[1], m)))
          weight = w;
      }
      if (!weight)
        return false;
    }
    OpBuilder b(m);
    auto fused = MatmulDequantOp::create(b, m.getLoc(), m.getLhs(), weight,
                                         scale, transposed);
    fused->setDiscardableAttrs(m->getDiscardableAttrDictionary());
    m.getResult().replaceAllUsesWith(fused.getResult());
    return true;
  }
};

} // namespace

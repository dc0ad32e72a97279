//===- JoinScatteredSlices.cpp - Placed slices as concat ---*- C++ -*-===//
//
// On a rank's finished program: the layout search prices slice_scatter and
// add by their own rules. The values are the sum's (a -0 piece stays -0
// where adding the zeros made it +0).
//
//===----------------------------------------------------------------------===//

#include "Cleave/CleaveOps.h"
#include "cleave/Lowering/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::cleave {
#define GEN_PASS_DEF_JOINSCATTEREDSLICESPASS
#include "cleave/Lowering/Passes.h.inc"
} // namespace mlir::cleave

using namespace mlir;
using namespace mlir::cleave;

namespace {

/// The slice_scatters an add tree sums: \p v itself, or the leaves of adds
/// of the tree's shape that only the tree reads.
bool collectLeaves(Value v, Type type, bool root,
                   SmallVectorImpl<SliceScatterOp> &leaves) {
  if (auto placed = v.getDefiningOp<SliceScatterOp>()) {
    leaves.push_back(placed);
    return true;
  }
  auto add = v.getDefiningOp<AddOp>();
  if (!add || add.getType() != type || (!root && !v.hasOneUse()))
    return false;
  return collectLeaves(add.getLhs(), type, false, leaves) &&
         collectLeaves(add.getRhs(), type, false, leaves);
}

/// A sum of slice_scatters whose unit-step windows along one dim tile the
/// result (a fused qkv or gate/up projection's split, differentiated) is
/// their operands concatenated: one write of the result where the sum
/// wrote it once per piece and added the zeros.
struct JoinScatteredSlices : OpRewritePattern<AddOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AddOp op,
                                PatternRewriter &rewriter) const override {
    SmallVector<SliceScatterOp> leaves;
    if (!collectLeaves(op.getResult(), op.getType(), true, leaves) ||
        leaves.size() < 2)
      return failure();
    ArrayRef<int64_t> shape = cast<RankedTensorType>(op.getType()).getShape();
    std::optional<int64_t> axis;
    for (SliceScatterOp leaf : leaves) {
      if (leaf.getType() != op.getType() ||
          llvm::any_of(leaf.getSteps(), [](int64_t s) { return s != 1; }))
        return failure();
      ArrayRef<int64_t> piece =
          cast<RankedTensorType>(leaf.getInput().getType()).getShape();
      for (size_t d = 0; d < shape.size(); ++d) {
        if (piece[d] == shape[d])
          continue;
        if (axis && *axis != static_cast<int64_t>(d))
          return failure();
        axis = d;
      }
    }
    if (!axis)
      return failure();
    llvm::sort(leaves, [&](SliceScatterOp a, SliceScatterOp b) {
      return a.getStarts()[*axis] < b.getStarts()[*axis];
    });
    // Contiguous from 0 to the end: no element is two pieces' or none's.
    int64_t at = 0;
    SmallVector<Value> pieces;
    for (SliceScatterOp leaf : leaves) {
      if (leaf.getStarts()[*axis] != at)
        return failure();
      at += cast<RankedTensorType>(leaf.getInput().getType()).getShape()[*axis];
      pieces.push_back(leaf.getInput());
    }
    if (at != shape[*axis])
      return failure();
    rewriter.replaceOpWithNewOp<ConcatOp>(op, op.getType(), pieces, *axis);
    return success();
  }
};

struct JoinScatteredSlicesPass
    : public mlir::cleave::impl::JoinScatteredSlicesPassBase<
          JoinScatteredSlicesPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<JoinScatteredSlices>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace

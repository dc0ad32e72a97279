//===- FoldTransposes.cpp - Products read operands transposed -*- C++ -*-===//
//
// On a rank's finished program, after the layouts were chosen and the step
// partitioned: the layout search groups parameters by the ops of their
// forward chains, and folding the transposes before it changed its groups
// (a LoRA base's q_proj and o_proj stayed whole).
//
//===----------------------------------------------------------------------===//

#include "Cleave/CleaveOps.h"
#include "cleave/Lowering/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::cleave {
#define GEN_PASS_DEF_FOLDTRANSPOSESPASS
#include "cleave/Lowering/Passes.h.inc"
} // namespace mlir::cleave

using namespace mlir;
using namespace mlir::cleave;

namespace {

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

/// Whether \p to is \p from with unit dimensions in front.
bool prependsUnitDims(ArrayRef<int64_t> from, ArrayRef<int64_t> to) {
  if (to.size() < from.size())
    return false;
  size_t added = to.size() - from.size();
  return to.drop_front(added) == from &&
         llvm::all_of(to.take_front(added), [](int64_t d) { return d == 1; });
}

/// matmul(transpose(x)), through a reshape adding unit dims, reads x with
/// transpose_lhs / transpose_rhs flipped instead.
struct FoldTransposeIntoMatmul : OpRewritePattern<MatmulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(MatmulOp op,
                                PatternRewriter &rewriter) const override {
    for (unsigned i = 0; i < 2; ++i) {
      Value operand = op->getOperand(i);
      auto reshape = operand.getDefiningOp<ReshapeOp>();
      Value inner = reshape ? reshape.getInput() : operand;
      auto transpose = inner.getDefiningOp<TransposeOp>();
      if (!transpose || !swapsLastTwo(transpose.getPermutation()) ||
          (reshape && !prependsUnitDims(shapeOf(inner), shapeOf(operand))))
        continue;
      Value source = transpose.getInput();
      if (reshape) {
        SmallVector<int64_t> shape(
            shapeOf(operand).size() - shapeOf(source).size(), 1);
        llvm::append_range(shape, shapeOf(source));
        auto type = RankedTensorType::get(
            shape, cast<RankedTensorType>(source.getType()).getElementType());
        source = ReshapeOp::create(rewriter, reshape.getLoc(), type, source);
      }
      rewriter.modifyOpInPlace(op, [&] {
        op->setOperand(i, source);
        if (i == 0)
          op.setTransposeLhs(!op.getTransposeLhs());
        else
          op.setTransposeRhs(!op.getTransposeRhs());
      });
      return success();
    }
    return failure();
  }
};

/// transpose(matmul(a, b)) of the last two dims, through a reshape that
/// only drops unit dims in front, is matmul(b, a) with each operand's
/// transposition flipped ((AB)^T = B^T A^T, batch dims included): a weight's
/// gradient, made as W^T's by the backward of x W^T, is written as W's.
struct FoldTransposeOfMatmul : OpRewritePattern<TransposeOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(TransposeOp op,
                                PatternRewriter &rewriter) const override {
    if (!swapsLastTwo(op.getPermutation()))
      return failure();
    Value input = op.getInput();
    auto reshape = input.getDefiningOp<ReshapeOp>();
    Value product = reshape ? reshape.getInput() : input;
    auto matmul = product.getDefiningOp<MatmulOp>();
    if (!matmul || !product.hasOneUse() || (reshape && !input.hasOneUse()) ||
        (reshape && !prependsUnitDims(shapeOf(input), shapeOf(product))))
      return failure();
    Value result = MatmulOp::create(rewriter, matmul.getLoc(), matmul.getRhs(),
                                    matmul.getLhs(), !matmul.getTransposeRhs(),
                                    !matmul.getTransposeLhs());
    if (reshape)
      result =
          ReshapeOp::create(rewriter, reshape.getLoc(), op.getType(), result);
    rewriter.replaceOp(op, result);
    return success();
  }
};

struct FoldTransposesPass
    : public mlir::cleave::impl::FoldTransposesPassBase<FoldTransposesPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<FoldTransposeIntoMatmul, FoldTransposeOfMatmul>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace

//===- BucketGradients.cpp - The cleave-bucket-gradients pass ---*- C++ -*-===//
//
// Gradient buckets as the partition passes priced them: the walk keeps the
// pricing (a bucket's one latency is what makes a partial gradient worth
// keeping until the backward pass finishes it) and marks each gradient's
// all-reduce with its bucket; the merge into one flat collective is this
// pass, so that it is seen, and tested, on its own.
//
//===----------------------------------------------------------------------===//

#include "Cleave/CleaveAttrNames.h"
#include "Cleave/CleaveOps.h"
#include "cleave/Sharding/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "llvm/ADT/MapVector.h"

#include <numeric>

namespace mlir::cleave {
#define GEN_PASS_DEF_BUCKETGRADIENTSPASS
#include "cleave/Sharding/Passes.h.inc"
} // namespace mlir::cleave

using namespace mlir;
using namespace mlir::cleave;

namespace {

struct BucketGradientsPass
    : public mlir::cleave::impl::BucketGradientsPassBase<BucketGradientsPass> {
  using BucketGradientsPassBase::BucketGradientsPassBase;
  void runOnOperation() override;
};

/// The last of \p members in their block.
AllReduceOp lastOf(SmallVectorImpl<AllReduceOp> &members) {
  AllReduceOp last = members.front();
  for (AllReduceOp op : members)
    if (last->isBeforeInBlock(op))
      last = op;
  return last;
}

/// Checks that \p members can be summed as one after the last of them:
/// sums over the same axes, of one element type, in one block, none of
/// them read before that point (by another member or any other op).
LogicalResult checkBucket(SmallVectorImpl<AllReduceOp> &members) {
  AllReduceOp first = members.front();
  int64_t number = first->getAttrOfType<IntegerAttr>(kBucketAttr).getInt();
  Type elem = first.getType().getElementType();
  for (AllReduceOp op : members) {
    if (op.getKind() != ReduceKind::sum || op.getAxes() != first.getAxes() ||
        op.getType().getElementType() != elem ||
        op->getBlock() != first->getBlock())
      return op.emitError("gradient bucket ")
             << number
             << " mixes all-reduces: its members must be sums over the same "
                "mesh axes, of one element type, in one block";
  }
  AllReduceOp last = lastOf(members);
  Block *block = last->getBlock();
  for (AllReduceOp op : members)
    for (Operation *user : op->getUsers()) {
      Operation *at = block->findAncestorOpInBlock(*user);
      if (!at || !last->isBeforeInBlock(at))
        return user->emitError("reads a member of gradient bucket ")
               << number << " before the bucket's last member: the bucket "
               << "cannot be summed as one there";
    }
  return success();
}

/// Replaces \p members by one all-reduce of their flattened concatenation,
/// after the last of them (where every member's operand is defined).
void mergeBucket(SmallVectorImpl<AllReduceOp> &members) {
  AllReduceOp last = lastOf(members);
  OpBuilder builder(last->getContext());
  builder.setInsertionPointAfter(last);
  Location loc = members.front().getLoc();
  Type elem = members.front().getType().getElementType();
  SmallVector<Value> flat;
  SmallVector<int64_t> sizes;
  for (AllReduceOp op : members) {
    sizes.push_back(op.getType().getNumElements());
    flat.push_back(ReshapeOp::create(
        builder, loc, RankedTensorType::get({sizes.back()}, elem),
        op.getInput()));
  }
  int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t(0));
  Value all = ConcatOp::create(
      builder, loc, RankedTensorType::get({total}, elem), flat, uint64_t(0));
  auto sum = AllReduceOp::create(builder, loc, ReduceKind::sum, all,
                                 members.front().getAxes());
  // The bucket's phase and reason (the same on every member).
  for (NamedAttribute attr : members.front()->getDiscardableAttrs())
    if (attr.getName() != kBucketAttr)
      sum->setAttr(attr.getName(), attr.getValue());
  int64_t at = 0;
  for (auto [op, n] : llvm::zip(members, sizes)) {
    Value piece =
        SliceOp::create(builder, loc, RankedTensorType::get({n}, elem), sum,
                        SmallVector<int64_t>{at}, SmallVector<int64_t>{1});
    op.getResult().replaceAllUsesWith(
        ReshapeOp::create(builder, loc, op.getType(), piece).getResult());
    at += n;
  }
  for (AllReduceOp op : members)
    op.erase();
}

} // namespace

void BucketGradientsPass::runOnOperation() {
  // Members by bucket, each in program order.
  llvm::MapVector<int64_t, SmallVector<AllReduceOp>> buckets;
  WalkResult walk = getOperation().walk([&](Operation *op) {
    auto number = op->getAttrOfType<IntegerAttr>(kBucketAttr);
    if (!number)
      return WalkResult::advance();
    auto sum = dyn_cast<AllReduceOp>(op);
    if (!sum) {
      op->emitError("cleave.bucket marks a gradient's all-reduce, not ")
          << op->getName();
      return WalkResult::interrupt();
    }
    buckets[number.getInt()].push_back(sum);
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return signalPassFailure();
  for (auto &[number, members] : buckets) {
    if (members.size() == 1) {
      members.front()->removeAttr(kBucketAttr);
      continue;
    }
    if (failed(checkBucket(members)))
      return signalPassFailure();
    mergeBucket(members);
  }
}

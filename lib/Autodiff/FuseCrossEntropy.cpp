//===- FuseCrossEntropy.cpp - Recognise the cross-entropy loss --*- C++ -*-===//
//
// The losses' builder (dialects/Cleave/CleaveLosses.cpp) writes
// cross-entropy as reductions so that a split class axis needs only
// all-reduces; this pass folds the elementwise work between them into one
// op, so that neither the step nor its backward keeps the shifted logits,
// their exponentials or the one-hot selection. It matches that builder's
// spelling, whichever stage built it, and leaves anything else alone.
//
//===----------------------------------------------------------------------===//

#include "Cleave/CleaveOps.h"
#include "cleave/Autodiff/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Matchers.h"

namespace mlir::cleave {
#define GEN_PASS_DEF_FUSECROSSENTROPYPASS
#include "cleave/Autodiff/Passes.h.inc"
} // namespace mlir::cleave

using namespace mlir;
using namespace mlir::cleave;

namespace {

/// A keep-dims reduction of \p kind over the one dim \p axis, if \p op is.
bool isRowReduce(Operation *op, ReduceKind kind, int64_t *axis) {
  auto r = dyn_cast_if_present<ReduceOp>(op);
  if (!r || r.getKind() != kind || !r.getKeepDims() || r.getDims().size() != 1)
    return false;
  *axis = r.getDims()[0];
  return true;
}

bool isZeroSplat(Value v) {
  DenseElementsAttr dense;
  return matchPattern(v, m_Constant(&dense)) && dense.isSplat() &&
         isa<FloatType>(dense.getElementType()) &&
         dense.getSplatValue<APFloat>().isZero();
}

struct Match {
  ReduceOp sumExp, target;
  SubOp shifted;
  ExpOp exp;
  SelectOp pick;
  Value logits, labels, classIds, shift;
  int64_t axis = 0;
};

/// Starting from the sum of exponentials \p sumExp.
bool match(ReduceOp sumExp, Match &m) {
  if (!isRowReduce(sumExp, ReduceKind::sum, &m.axis))
    return false;
  m.sumExp = sumExp;
  m.exp = sumExp.getInput().getDefiningOp<ExpOp>();
  if (!m.exp || !m.exp->hasOneUse())
    return false;
  m.shifted = m.exp.getInput().getDefiningOp<SubOp>();
  if (!m.shifted)
    return false;
  m.logits = m.shifted.getLhs();
  m.shift = m.shifted.getRhs();
  int64_t maxAxis;
  auto max = m.shift.getDefiningOp<ReduceOp>();
  if (!isRowReduce(max, ReduceKind::max, &maxAxis) || maxAxis != m.axis ||
      max.getInput() != m.logits)
    return false;
  auto xType = cast<RankedTensorType>(m.logits.getType());
  if (!xType.getElementType().isF32() ||
      m.shifted.getType() != m.logits.getType())
    return false;
  // The shifted logits feed the exponential and the label's pick only.
  for (Operation *user : m.shifted->getUsers()) {
    if (user == m.exp)
      continue;
    auto pick = dyn_cast<SelectOp>(user);
    if (m.pick || !pick || pick->getOperand(1) != m.shifted.getResult() ||
        !isZeroSplat(pick->getOperand(2)) || !pick->hasOneUse())
      return false;
    m.pick = pick;
  }
  if (!m.pick)
    return false;
  int64_t targetAxis;
  m.target = dyn_cast<ReduceOp>(*m.pick->getUsers().begin());
  if (!isRowReduce(m.target, ReduceKind::sum, &targetAxis) ||
      targetAxis != m.axis)
    return false;
  auto cmp = m.pick->getOperand(0).getDefiningOp<CmpOp>();
  if (!cmp || cmp.getPredicate() != CmpPredicate::eq)
    return false;
  // Labels have the kept shape, the class ids are 1 but along the axis.
  SmallVector<int64_t> ids(xType.getRank(), 1);
  ids[m.axis] = xType.getDimSize(m.axis);
  auto keptType = cast<RankedTensorType>(m.shift.getType());
  for (auto [labels, classIds] : {std::pair{cmp.getLhs(), cmp.getRhs()},
                                  std::pair{cmp.getRhs(), cmp.getLhs()}}) {
    auto l = cast<RankedTensorType>(labels.getType());
    auto c = cast<RankedTensorType>(classIds.getType());
    if (l.getShape() == keptType.getShape() &&
        c.getShape() == ArrayRef<int64_t>(ids) &&
        l.getElementType() == c.getElementType() &&
        isa<IntegerType>(l.getElementType())) {
      m.labels = labels;
      m.classIds = classIds;
      return true;
    }
  }
  return false;
}

/// Replaces the matched ops with cross_entropy, placed after the later
/// reduction when every use of both comes after it.
bool fuse(Match &m) {
  Operation *at = m.sumExp->isBeforeInBlock(m.target) ? m.target.getOperation()
                                                      : m.sumExp.getOperation();
  if (at->getBlock() != m.sumExp->getBlock() ||
      at->getBlock() != m.target->getBlock())
    return false;
  for (ReduceOp r : {m.sumExp, m.target})
    for (Operation *user : r->getUsers())
      if (user->getBlock() != at->getBlock() || user->isBeforeInBlock(at))
        return false;
  OpBuilder b(at->getContext());
  b.setInsertionPointAfter(at);
  auto fused = CrossEntropyOp::create(b, m.sumExp.getLoc(), m.logits, m.labels,
                                      m.classIds, m.shift, m.axis);
  m.sumExp.getResult().replaceAllUsesWith(fused.getSumExp());
  m.target.getResult().replaceAllUsesWith(fused.getTarget());
  for (Operation *op :
       {m.sumExp.getOperation(), m.exp.getOperation(), m.target.getOperation(),
        m.pick.getOperation(), m.shifted.getOperation()})
    op->erase();
  return true;
}

struct FuseCrossEntropyPass
    : public mlir::cleave::impl::FuseCrossEntropyPassBase<
          FuseCrossEntropyPass> {
  void runOnOperation() override {
    SmallVector<ReduceOp> sums;
    getOperation().walk([&](ReduceOp r) {
      if (r.getKind() == ReduceKind::sum)
        sums.push_back(r);
    });
    llvm::DenseSet<Operation *> erased;
    for (ReduceOp r : sums) {
      if (erased.contains(r))
        continue;
      Match m;
      if (!match(r, m))
        continue;
      // The target reduction is a sum too: never visit it after erasing.
      erased.insert(m.target);
      if (fuse(m))
        ++numFused;
    }
  }
};

} // namespace

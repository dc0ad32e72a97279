//===- RecomputeElementwise.cpp - Cheap saved values recomputed ----------===//
//
// Runs on a rank's finished program before --cleave-narrow-saved. A saved
// value is one the forward makes and a later op reads; one that an
// elementwise chain makes from other saved values, parameters and
// constants is recomputed next to its first later reader instead, so that
// the chain's inputs are all the step keeps of it.
//
//===----------------------------------------------------------------------===//

#include "Cleave/CleaveAttrNames.h"
#include "Cleave/CleaveOps.h"
#include "ForwardOps.h"
#include "cleave/Lowering/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/TypeUtilities.h"

namespace mlir::cleave {
#define GEN_PASS_DEF_RECOMPUTEELEMENTWISEPASS
#include "cleave/Lowering/Passes.h.inc"
} // namespace mlir::cleave

using namespace mlir;
using namespace mlir::cleave;

namespace {

struct RecomputeElementwisePass
    : public mlir::cleave::impl::RecomputeElementwisePassBase<
          RecomputeElementwisePass> {
  using Base::Base;

  static constexpr int kMaxDepth = 4;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (!func->getAttr(kPrecisionAttr) || !func.getBody().hasOneBlock())
      return;
    forward = forwardOps(func);
    SmallVector<Value> saved;
    for (Operation &op : func.getBody().front())
      if (forward.count(&op) && op.getNumResults() == 1 &&
          readLater(op.getResult(0)) && onlyInChains(op.getResult(0)) &&
          recomputable(op.getResult(0), 0))
        saved.push_back(op.getResult(0));
    for (Value v : saved) {
      Operation *first = nullptr;
      for (Operation *user : v.getUsers())
        if (isLater(user) && (!first || user->isBeforeInBlock(first)))
          first = user;
      OpBuilder b(first);
      IRMapping clones;
      Value again = cloneAt(v, b, clones);
      v.replaceUsesWithIf(
          again, [&](OpOperand &use) { return isLater(use.getOwner()); });
    }
  }

private:
  llvm::DenseSet<Operation *> forward;
  llvm::DenseMap<Value, bool> known;

  bool isLater(Operation *user) const {
    return !forward.count(user) && !isa<func::ReturnOp>(user);
  }
  bool readLater(Value v) const {
    return llvm::any_of(v.getUsers(), [&](Operation *u) { return isLater(u); });
  }
  /// The forward reads \p v only inside elementwise chains, which need not
  /// write it: saving it is what writes it. A value a product, a norm or a
  /// softmax reads is written anyway, and recomputing it would add work
  /// and save no bytes (its lifetime only, which is the memory budget's
  /// trade, not this pass's).
  bool onlyInChains(Value v) const {
    return llvm::all_of(v.getUsers(), [&](Operation *u) {
      return !forward.count(u) || isCheapElementwise(u);
    });
  }
  /// Available to the backward at no cost: a parameter or input, a
  /// constant.
  static bool free(Value v) {
    return isa<BlockArgument>(v) || v.getDefiningOp<ConstantOp>();
  }
  /// \p v is a cheap elementwise function, within kMaxDepth - depth ops, of
  /// free values and of values the backward keeps anyway (read later and
  /// not recomputable themselves).
  bool recomputable(Value v, int depth) {
    if (depth > 0 && !forward.count(v.getDefiningOp()))
      return false;
    if (auto it = known.find(v); it != known.end() && depth == 0)
      return it->second;
    Operation *def = v.getDefiningOp();
    bool ok =
        def && depth < kMaxDepth && isCheapElementwise(def) &&
        llvm::all_of(
            def->getOperands(),
            [&](Value o) {
              return free(o) || recomputable(o, depth + 1) || readLater(o);
            });
    if (depth == 0)
      known[v] = ok;
    return ok;
  }
  /// \p v made again at \p b's point: its chain down to the values kept.
  Value cloneAt(Value v, OpBuilder &b, IRMapping &clones) {
    if (Value done = clones.lookupOrNull(v))
      return done;
    Operation *def = v.getDefiningOp();
    if (free(v) || !def || !forward.count(def) || !isCheapElementwise(def) ||
        (readLater(v) && !known.lookup(v)))
      return v;
    for (Value o : def->getOperands())
      clones.map(o, cloneAt(o, b, clones));
    Operation *again = b.clone(*def, clones);
    clones.map(v, again->getResult(0));
    return again->getResult(0);
  }
};

} // namespace

//===- SaveDerivatives.cpp - An elementwise chain's derivative saved ------===//
//
// Runs on a rank's finished program before --cleave-recompute-elementwise.
// The backward of an elementwise chain is linear in the gradient it
// receives: dx = f(dy, F) with F forward values, so dx = dy * f(1, F). The
// factor f(1, F) is computed in the forward, where F are made, and saved
// in their place; the backward multiplies once.
//
//===----------------------------------------------------------------------===//

#include "Cleave/CleaveAttrNames.h"
#include "Cleave/CleaveOps.h"
#include "Cleave/TensorSize.h"
#include "ForwardOps.h"
#include "cleave/Lowering/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"

namespace mlir::cleave {
#define GEN_PASS_DEF_SAVEDERIVATIVESPASS
#include "cleave/Lowering/Passes.h.inc"
} // namespace mlir::cleave

using namespace mlir;
using namespace mlir::cleave;

namespace {

struct SaveDerivativesPass
    : public mlir::cleave::impl::SaveDerivativesPassBase<SaveDerivativesPass> {
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (!isBf16Step(func))
      return;
    forward = forwardOps(func);
    Block &body = func.getBody().front();
    for (Operation &op : body)
      if (!forward.count(&op))
        classify(&op);
    SmallVector<Value> outputs;
    for (auto [v, source] : linear)
      if (llvm::any_of(v.getUsers(), [&](Operation *u) {
            return !linear.count(u->getNumResults() ? u->getResult(0)
                                                    : Value());
          }))
        outputs.push_back(v);
    // In program order, so that rewriting one output first never leaves a
    // later one reading a value already replaced.
    llvm::sort(outputs, [](Value a, Value b) {
      return a.getDefiningOp()->isBeforeInBlock(b.getDefiningOp());
    });
    for (Value v : outputs)
      rewrite(v);
  }

private:
  llvm::DenseSet<Operation *> forward;
  /// Backward values linear in a gradient, by that gradient (the source).
  llvm::MapVector<Value, Value> linear;
  /// Backward values computed from forward values and constants alone.
  llvm::DenseSet<Value> gradientFree;

  bool isForwardValue(Value v) const {
    Operation *def = v.getDefiningOp();
    return !def || forward.count(def) || isa<ConstantOp>(def);
  }
  bool free(Value v) const {
    return isForwardValue(v) || gradientFree.count(v);
  }
  static bool isF32(Value v) {
    auto t = dyn_cast<RankedTensorType>(v.getType());
    return t && t.getElementType().isF32();
  }
  /// The source \p v is linear in: its own if it is a gradient entering
  /// elementwise ops, else the one its linear op carries.
  Value sourceOf(Value v) const {
    if (auto it = linear.find(v); it != linear.end())
      return it->second;
    return v;
  }
  void classify(Operation *op) {
    if (op->getNumResults() != 1 || !isF32(op->getResult(0)) ||
        !isCheapElementwise(op))
      return;
    Value r = op->getResult(0);
    if (llvm::all_of(op->getOperands(), [&](Value o) { return free(o); })) {
      gradientFree.insert(r);
      return;
    }
    // dy * a, a * dy, dy / a, -dy, dy1 +- dy2 (one source): linear.
    Value source;
    if (isa<MulOp>(op) && free(op->getOperand(0)) != free(op->getOperand(1)))
      source = sourceOf(op->getOperand(free(op->getOperand(0)) ? 1 : 0));
    else if (isa<DivOp>(op) && free(op->getOperand(1)))
      source = sourceOf(op->getOperand(0));
    else if (isa<NegOp>(op))
      source = sourceOf(op->getOperand(0));
    else if (isa<AddOp, SubOp>(op) &&
             sourceOf(op->getOperand(0)) == sourceOf(op->getOperand(1)) &&
             !free(op->getOperand(0)) && !free(op->getOperand(1)))
      source = sourceOf(op->getOperand(0));
    if (source && isF32(source))
      linear.insert({r, source});
  }

  /// \p v's ops, down to its source and forward values, cloned at \p b with
  /// the source a 1 that broadcasts: the factor f(1, F).
  Value factorAt(Value v, Value one, OpBuilder &b, IRMapping &clones) {
    if (Value done = clones.lookupOrNull(v))
      return done;
    // A constant the backward defines (not hoisted) is made again here.
    if (auto c = v.getDefiningOp<ConstantOp>();
        c && !c->isBeforeInBlock(&*b.getInsertionPoint())) {
      Operation *again = b.clone(*c);
      made.push_back(again);
      clones.map(v, again->getResult(0));
      return again->getResult(0);
    }
    if (isForwardValue(v))
      return v;
    if (!linear.count(v) && !gradientFree.count(v))
      return one; // the source
    Operation *def = v.getDefiningOp();
    // The larger operand first (Sethi and Ullman's order): the other's
    // short chain is made last, so fewer of the factor's values are live
    // at once in the arena the buffer planner lays out.
    SmallVector<Value, 2> operands(def->getOperands());
    llvm::stable_sort(operands,
                      [&](Value x, Value y) { return opsIn(x) > opsIn(y); });
    for (Value o : operands)
      if (Value c = factorAt(o, one, b, clones))
        clones.map(o, c);
    for (Value o : def->getOperands())
      if (!clones.lookupOrNull(o))
        return Value();
    // dy * a at dy = 1 is a: the factor's ops keep the chain's shape, so
    // the forward's elementwise kernel computes them with its own.
    if (isa<MulOp>(def))
      for (unsigned i = 0; i < 2; ++i)
        if (clones.lookup(def->getOperand(i)) == one) {
          Value other = clones.lookup(def->getOperand(1 - i));
          clones.map(v, other);
          return other;
        }
    Operation *again = b.clone(*def, clones);
    again->setAttr(kForwardAttr, UnitAttr::get(again->getContext()));
    made.push_back(again);
    forward.insert(again);
    // Shapes follow the 1's broadcast: inferred again where an operand's
    // type changed (a gradient-free op's never do: a cast keeps its own).
    bool same = llvm::all_of(
        llvm::zip(def->getOperands(), again->getOperands()), [](auto pair) {
          return std::get<0>(pair).getType() == std::get<1>(pair).getType();
        });
    if (!same) {
      SmallVector<Type, 1> types;
      auto infer = dyn_cast<InferTypeOpInterface>(again);
      if (!infer ||
          failed(infer.inferReturnTypes(
              again->getContext(), again->getLoc(), again->getOperands(),
              again->getRawDictionaryAttrs(), again->getPropertiesStorage(),
              again->getRegions(), types)))
        return Value();
      again->getResult(0).setType(types[0]);
    }
    clones.map(v, again->getResult(0));
    return again->getResult(0);
  }

  /// How many ops factorAt clones for \p v (shared ones counted once per
  /// use: an estimate for ordering).
  int64_t opsIn(Value v) {
    if (isForwardValue(v) || (!linear.count(v) && !gradientFree.count(v)))
      return 0;
    if (auto it = sizes.find(v); it != sizes.end())
      return it->second;
    int64_t n = 1;
    for (Value o : v.getDefiningOp()->getOperands())
      n += opsIn(o);
    return sizes[v] = n;
  }
  llvm::DenseMap<Value, int64_t> sizes;

  /// Forward values \p v's ops read, found through its gradient-free ops.
  void forwardLeaves(Value v, llvm::SetVector<Value> &leaves,
                     llvm::DenseSet<Value> &seen) {
    if (!seen.insert(v).second)
      return;
    if (isForwardValue(v)) {
      if (v.getDefiningOp() && !isa<ConstantOp>(v.getDefiningOp()))
        leaves.insert(v);
      return;
    }
    if (!linear.count(v) && !gradientFree.count(v))
      return;
    for (Value o : v.getDefiningOp()->getOperands())
      forwardLeaves(o, leaves, seen);
  }

  void rewrite(Value v) {
    Value source = linear.lookup(v);
    llvm::SetVector<Value> leaves;
    llvm::DenseSet<Value> cone;
    forwardLeaves(v, leaves, cone);
    if (leaves.empty())
      return;
    // The chain's ops that die with it: read only by others that do (a
    // value another chain reads too stays, and so do its forward values).
    SmallVector<Value> inner;
    for (Value c : cone)
      if (!isForwardValue(c) && c != source)
        inner.push_back(c);
    llvm::sort(inner, [](Value a, Value b) {
      return b.getDefiningOp()->isBeforeInBlock(a.getDefiningOp());
    });
    llvm::DenseSet<Operation *> dying;
    auto dies = [&](Operation *u) { return dying.count(u) > 0; };
    for (Value c : inner)
      if (c == v || llvm::all_of(c.getUsers(), dies))
        dying.insert(c.getDefiningOp());
    // Worth it when the forward values only this chain reads after the
    // loss take at least the factor's bytes: the step keeps the factor in
    // their place.
    int64_t freed = 0;
    for (Value leaf : leaves)
      if (llvm::all_of(leaf.getUsers(), [&](Operation *u) {
            return forward.count(u) || dies(u);
          }))
        freed += storageBytes(leaf.getType());
    if (freed < storageBytes(v.getType()))
      return;
    Operation *last = nullptr;
    for (Value leaf : leaves)
      if (!last || last->isBeforeInBlock(leaf.getDefiningOp()))
        last = leaf.getDefiningOp();
    OpBuilder b(last->getContext());
    b.setInsertionPointAfter(last);
    auto type = cast<RankedTensorType>(v.getType());
    auto oneType = RankedTensorType::get(
        SmallVector<int64_t>(type.getRank(), 1), type.getElementType());
    Value one = ConstantOp::create(
        b, v.getLoc(), DenseElementsAttr::get(oneType, b.getF32FloatAttr(1)));
    IRMapping clones;
    made.assign({one.getDefiningOp()});
    Value factor = factorAt(v, one, b, clones);
    // A factor that broadcasts (no forward value of the full shape), or
    // that is a forward value itself (dy * e), saves nothing.
    if (!factor || factor.getType() != v.getType() || !factor.getDefiningOp() ||
        !factor.getDefiningOp()->hasAttr(kForwardAttr))
      return eraseUnused(made);
    b.setInsertionPointAfterValue(v);
    Value product = MulOp::create(b, v.getLoc(), source, factor);
    if (product.getType() != v.getType()) {
      product.getDefiningOp()->erase();
      return eraseUnused(made);
    }
    v.replaceAllUsesWith(product);
    linear.insert({product, source});
    if (one.use_empty())
      one.getDefiningOp()->erase();
    SmallVector<Operation *> old;
    for (Value c : cone)
      if (Operation *def = c.getDefiningOp(); def && !forward.count(def))
        old.push_back(def);
    eraseUnused(old);
  }

  /// Erases the ops of \p ops left unread, readers first.
  void eraseUnused(SmallVector<Operation *> ops) {
    llvm::sort(
        ops, [](Operation *a, Operation *b) { return b->isBeforeInBlock(a); });
    for (Operation *op : ops)
      if (op->use_empty()) {
        forward.erase(op);
        for (Value r : op->getResults()) {
          gradientFree.erase(r);
          linear.erase(r);
          sizes.erase(r);
        }
        op->erase();
      }
  }

  /// The ops the rewrite being made has cloned.
  SmallVector<Operation *> made;
};

} // namespace

//===- Recompute.cpp - Activations made again in the backward -------------===//
//
// Runs on a rank's finished program (collectives in place), before the
// passes that narrow or recompute single saved values. What the forward
// keeps for the backward is the train step's activation memory; this pass
// keeps less and copies into the backward the forward ops that make the
// rest again, from the values it keeps.
//
// selective: values made from kept values without a product with a weight
// (norms, softmax, elementwise chains, scores of two activations).
// full: the forward cut into segments at points where few bytes are live;
// only what is live across a cut is kept, and each segment but the last is
// run again right before its backward. The cuts minimise the kept bytes
// plus the largest segment's saved bytes, by dynamic programming over the
// forward's order.
//
//===----------------------------------------------------------------------===//

#include "Cleave/CleaveAttrNames.h"
#include "Cleave/CleaveOps.h"
#include "Cleave/TensorSize.h"
#include "ForwardOps.h"
#include "cleave/Lowering/Passes.h"
#include "cleave/Lowering/PlanBuffers.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

#include <algorithm>
#include <limits>

namespace mlir::cleave {
#define GEN_PASS_DEF_RECOMPUTEPASS
#include "cleave/Lowering/Passes.h.inc"
} // namespace mlir::cleave

using namespace mlir;
using namespace mlir::cleave;

namespace {

/// The forward in order, what the backward reads of it, and where.
struct StepForward {
  llvm::DenseSet<Operation *> forward;
  SmallVector<Operation *> order;
  llvm::DenseMap<Operation *, int64_t> position;

  explicit StepForward(func::FuncOp func) {
    forward = forwardOps(func);
    for (Operation &op : func.getBody().front())
      if (forward.count(&op)) {
        position[&op] = static_cast<int64_t>(order.size());
        order.push_back(&op);
      }
  }
  bool isLater(Operation *user) const {
    return !forward.count(user) && !isa<func::ReturnOp>(user);
  }
  /// Read by the backward (or the update).
  bool saved(Value v) const {
    return llvm::any_of(v.getUsers(),
                        [&](Operation *user) { return isLater(user); });
  }
  /// The last forward op that reads \p v, or -1.
  int64_t lastForwardUse(Value v) const {
    int64_t last = -1;
    for (Operation *user : v.getUsers())
      if (auto it = position.find(user); it != position.end())
        last = std::max(last, it->second);
    return last;
  }
};

/// The first op after the forward that reads one of \p values.
Operation *firstLaterReader(const StepForward &f, ArrayRef<Value> values) {
  Operation *first = nullptr;
  for (Value v : values)
    for (Operation *user : v.getUsers())
      if (f.isLater(user) && (!first || user->isBeforeInBlock(first)))
        first = user;
  return first;
}

/// Clones, at \p b's point, the ops that make \p v, down to the values
/// \p again says are not made again.
Value cloneAt(Value v, OpBuilder &b, IRMapping &clones,
              llvm::function_ref<bool(Value)> again) {
  if (Value done = clones.lookupOrNull(v))
    return done;
  Operation *def = v.getDefiningOp();
  if (!def || !again(v))
    return v;
  for (Value o : def->getOperands())
    clones.map(o, cloneAt(o, b, clones, again));
  Operation *copy = b.clone(*def, clones);
  copy->setAttr(kRecomputedAttr, b.getUnitAttr());
  // A collective copied is traffic of its own, in the backward.
  if (copy->hasAttr(kPhaseAttr))
    copy->setAttr(kPhaseAttr, b.getStringAttr("recompute"));
  for (auto [from, to] : llvm::zip(def->getResults(), copy->getResults()))
    clones.map(from, to);
  return clones.lookup(v);
}

/// Whether the ops that make \p values again (down to the values \p again
/// says are kept) read only values made before \p point: a reader of the
/// backward placed amid the forward (the loss's all-reduce is at the
/// step's end, so order alone does not tell the forward's end) would need
/// a copy before the values it is made from.
bool placeable(ArrayRef<Value> values, Operation *point,
               llvm::function_ref<bool(Value)> again) {
  SmallVector<Value> work(values.begin(), values.end());
  llvm::DenseSet<Value> seen;
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (!seen.insert(v).second)
      continue;
    Operation *def = v.getDefiningOp();
    if (!def)
      continue;
    if (!again(v)) {
      if (!def->isBeforeInBlock(point))
        return false;
      continue;
    }
    work.append(def->operand_begin(), def->operand_end());
  }
  return true;
}

/// Whether \p point comes after every forward reader of \p values: a copy
/// placed before one would leave the value live anyway.
bool afterForwardReaders(const StepForward &f, ArrayRef<Value> values,
                         Operation *point) {
  return llvm::all_of(values, [&](Value v) {
    return llvm::all_of(v.getUsers(), [&](Operation *u) {
      return !f.forward.count(u) || u->isBeforeInBlock(point);
    });
  });
}

/// Points the backward's reads of \p values at their copies in \p clones.
void readCopies(const StepForward &f, ArrayRef<Value> values,
                const IRMapping &clones) {
  for (Value v : values)
    if (Value copy = clones.lookupOrNull(v))
      v.replaceUsesWithIf(copy, [&](OpOperand &use) {
        return f.isLater(use.getOwner()) &&
               !use.getOwner()->hasAttr(kRecomputedAttr);
      });
}

int64_t bytesOf(Value v) {
  auto type = dyn_cast<RankedTensorType>(v.getType());
  return type && type.hasStaticShape() ? storageBytes(type) : 0;
}

/// Whether \p v depends on none of the step's data inputs (a weight, a
/// constant, a table made from them).
class DataFree {
public:
  explicit DataFree(func::FuncOp func) : func(func) {}
  bool operator()(Value v) {
    if (auto arg = dyn_cast<BlockArgument>(v))
      return !func.getArgAttr(arg.getArgNumber(), kInputAttr);
    if (auto it = known.find(v); it != known.end())
      return it->second;
    Operation *def = v.getDefiningOp();
    bool free =
        llvm::all_of(def->getOperands(), [&](Value o) { return (*this)(o); });
    known[v] = free;
    return free;
  }

private:
  func::FuncOp func;
  llvm::DenseMap<Value, bool> known;
};

/// Selective recomputation: what makes a value again at a few operations
/// per element of it. A product with a weight (d multiply-adds per
/// element), attention (a row of keys per element), the loss, convolutions
/// and pools, reductions across ranks (traffic) and checks are kept; a
/// product of two activations (attention's scores, unfused) is made again,
/// as in Megatron's selective recomputation. So is an all-gather of a kept
/// split value: under sequence parallelism the norm's output a column-
/// parallel product reads whole is gathered again for its weight's
/// gradient, as Megatron does, rather than kept whole from the forward.
bool cheapToMakeAgain(Operation *op, DataFree &dataFree) {
  if (auto mm = dyn_cast<MatmulOp>(op))
    return !dataFree(mm->getOperand(0)) && !dataFree(mm->getOperand(1));
  return !isa<MatmulDequantOp, AttentionOp, AttentionBackwardOp, CrossEntropyOp,
              CrossEntropyBackwardOp, Conv2DOp, MaxPool2DOp, AvgPool2DOp,
              BatchNormOp, ScatterAddOp, SliceScatterOp, AllReduceOp,
              ReduceScatterOp, AllToAllOp, CheckIndexOp>(op) &&
         op->getNumRegions() == 0;
}

struct RecomputePass
    : public mlir::cleave::impl::RecomputePassBase<RecomputePass> {
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (policy == "none")
      return;
    if (policy != "selective" && policy != "full") {
      func.emitError() << "recompute policy '" << policy
                       << "' is not none, selective or full";
      return signalPassFailure();
    }
    if (!func.getBody().hasOneBlock())
      return;
    // Tried on a copy and kept where the values live at once take fewer
    // bytes: where the activations are not the step's peak (a small batch
    // beside its weights' gradients), copies would only add work, or
    // extend what is live at the peak.
    int64_t before = peakLiveBytes(func);
    func::FuncOp trial = func.clone();
    StepForward f(trial);
    if (!f.order.empty()) {
      if (policy == "selective")
        selective(trial, f);
      else
        full(f);
    }
    if (peakLiveBytes(trial) < before)
      func.getBody().takeBody(trial.getBody());
    trial.erase();
  }

private:
  void selective(func::FuncOp func, const StepForward &f);
  void full(const StepForward &f);
};

void RecomputePass::selective(func::FuncOp func, const StepForward &f) {
  DataFree dataFree(func);
  // Made again: a forward value the backward reads, or one that feeds such
  // a value, made cheaply from values made again or kept. Decided in the
  // forward's order, so every operand is decided first.
  // depth: the ops a copy runs from kept values (0: not made again), so a
  // chain of cheap ops is not followed back through the whole forward.
  constexpr int64_t kMaxDepth = 8;
  llvm::DenseMap<Value, int64_t> depth;
  auto made = [&](Value v) -> bool { return depth.lookup(v) > 0; };
  SmallVector<Operation *> remade;
  for (Operation *op : f.order) {
    int64_t d = 1;
    bool cheap = !isa<ConstantOp>(op) && cheapToMakeAgain(op, dataFree) &&
                 llvm::all_of(op->getOperands(), [&](Value o) {
                   Operation *def = o.getDefiningOp();
                   d = std::max(d, depth.lookup(o) + 1);
                   return !def || !f.forward.count(def) || made(o) ||
                          f.saved(o) || isa<ConstantOp>(def);
                 });
    cheap = cheap && d <= kMaxDepth;
    for (Value r : op->getResults())
      depth[r] = cheap ? d : 0;
    if (cheap &&
        llvm::any_of(op->getResults(), [&](Value r) { return f.saved(r); }))
      remade.push_back(op);
  }
  // One copy per op that makes saved values, before the first reader of
  // any of them; its chain down to the kept values comes with it.
  for (Operation *op : remade) {
    SmallVector<Value> values(op->getResults());
    Operation *first = firstLaterReader(f, values);
    if (!first || !afterForwardReaders(f, values, first) ||
        !placeable(values, first, made))
      continue;
    OpBuilder b(first);
    IRMapping clones;
    for (Value v : values)
      cloneAt(v, b, clones, made);
    readCopies(f, values, clones);
  }
}

void RecomputePass::full(const StepForward &f) {
  int64_t n = static_cast<int64_t>(f.order.size());
  // live[i]: the values live across the cut after op i (made at or before
  // it, read by the forward after it), as (made at, bytes) by position.
  std::vector<SmallVector<std::pair<int64_t, int64_t>>> live(n);
  // savedBytes prefix: bytes the backward reads of ops [0, i).
  std::vector<int64_t> savedPrefix(n + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t saved = 0;
    for (Value r : f.order[i]->getResults()) {
      if (f.saved(r))
        saved += bytesOf(r);
      int64_t last = f.lastForwardUse(r);
      for (int64_t k = i; k < last; ++k)
        live[k].push_back({i, bytesOf(r)});
    }
    savedPrefix[i + 1] = savedPrefix[i] + saved;
  }
  // keep(i, j): bytes a cut after op i keeps beyond the previous cut after
  // op j (j = -1: none), the values made after j and live across i.
  // live[i] is in order of making: suffix sums answer it in a search.
  std::vector<SmallVector<int64_t>> after(n);
  for (int64_t i = 0; i < n; ++i) {
    after[i].assign(live[i].size() + 1, 0);
    for (int64_t k = static_cast<int64_t>(live[i].size()) - 1; k >= 0; --k)
      after[i][k] = after[i][k + 1] + live[i][k].second;
  }
  auto keep = [&](int64_t i, int64_t j) {
    auto it =
        std::upper_bound(live[i].begin(), live[i].end(), j,
                         [](int64_t v, const std::pair<int64_t, int64_t> &e) {
                           return v < e.first;
                         });
    return after[i][it - live[i].begin()];
  };
  auto segment = [&](int64_t j, int64_t i) {
    return savedPrefix[i + 1] - savedPrefix[j + 1];
  };
  // For each bound T on a segment's saved bytes, the cheapest cuts
  // (f[i]: kept bytes with a cut after op i); the best T minimises kept
  // bytes plus T, the backward's peak of what this pass moves.
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  int64_t total = segment(-1, n - 1), bestCost = total;
  std::vector<int64_t> bestCuts;
  int64_t largest = 0;
  for (int64_t i = 0; i < n; ++i)
    largest = std::max(largest, segment(i - 1, i));
  for (int64_t bound = total; bound >= std::max<int64_t>(largest, 1);
       bound = bound * 2 / 3) {
    std::vector<int64_t> cost(n, kNone), from(n, -2);
    auto reach = [&](int64_t j) { return j < 0 ? 0 : cost[j]; };
    for (int64_t i = 0; i < n - 1; ++i)
      for (int64_t j = i - 1; j >= -1 && segment(j, i) <= bound; --j)
        if (reach(j) != kNone && reach(j) + keep(i, j) < cost[i]) {
          cost[i] = reach(j) + keep(i, j);
          from[i] = j;
        }
    int64_t end = -2, kept = kNone;
    for (int64_t j = n - 2; j >= -1 && segment(j, n - 1) <= bound; --j)
      if (reach(j) != kNone && reach(j) < kept) {
        kept = reach(j);
        end = j;
      }
    if (end == -2)
      break;
    if (kept + bound < bestCost) {
      bestCost = kept + bound;
      bestCuts.clear();
      for (int64_t c = end; c >= 0; c = from[c])
        bestCuts.push_back(c);
      std::reverse(bestCuts.begin(), bestCuts.end());
    }
  }
  if (bestCuts.empty())
    return;
  // What a cut keeps is read by its segment's copy; every other value a
  // segment before the last saves is made again before its backward.
  llvm::DenseSet<Value> kept;
  for (int64_t i = 0; i < n; ++i) {
    auto cut = std::lower_bound(bestCuts.begin(), bestCuts.end(), i);
    if (cut == bestCuts.end())
      break;
    for (Value r : f.order[i]->getResults())
      if (f.lastForwardUse(r) > *cut)
        kept.insert(r);
  }
  int64_t start = 0;
  for (int64_t c : bestCuts) {
    SmallVector<Value> values;
    for (int64_t i = start; i <= c; ++i)
      for (Value r : f.order[i]->getResults())
        if (f.saved(r) && !kept.count(r))
          values.push_back(r);
    auto again = [&](Value o) {
      auto it = f.position.find(o.getDefiningOp());
      return it != f.position.end() && it->second >= start && it->second <= c &&
             !kept.count(o) && !isa<ConstantOp>(o.getDefiningOp());
    };
    Operation *first = firstLaterReader(f, values);
    if (first && afterForwardReaders(f, values, first) &&
        placeable(values, first, again)) {
      OpBuilder b(first);
      IRMapping clones;
      for (Value v : values)
        cloneAt(v, b, clones, again);
      readCopies(f, values, clones);
    }
    start = c + 1;
  }
}

} // namespace

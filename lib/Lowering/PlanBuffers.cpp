//===- PlanBuffers.cpp - Static arena planning ------------------*- C++ -*-===//
//
// Greedy-by-size offset assignment over live intervals of a straight-line
// function. See the pass description in Passes.td for the contract.
//
//===----------------------------------------------------------------------===//

#include "cleave/Lowering/PlanBuffers.h"
#include "Cleave/CleaveOps.h"
#include "cleave/Lowering/Passes.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include <algorithm>

namespace mlir::cleave {
#define GEN_PASS_DEF_PLANBUFFERSPASS
#include "cleave/Lowering/Passes.h.inc"
} // namespace mlir::cleave

using namespace mlir;
using namespace mlir::cleave;

bool mlir::cleave::isView(Operation *op) { return isa<ReshapeOp>(op); }

bool mlir::cleave::isStoredConstant(Operation *op) {
  auto constant = dyn_cast<ConstantOp>(op);
  if (!constant)
    return op->hasTrait<OpTrait::ConstantLike>();
  auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
  return !(dense && dense.isSplat() &&
           dense.getNumElements() > kMaxStoredSplatElements);
}

llvm::DenseMap<Value, unsigned>
mlir::cleave::plannedOutputs(func::FuncOp func) {
  llvm::DenseMap<Value, unsigned> out;
  Operation *ret = func.getBody().front().getTerminator();
  for (auto [i, v] : llvm::enumerate(ret->getOperands())) {
    Operation *def = v.getDefiningOp();
    if (def && !isView(def) && !isStoredConstant(def))
      out.try_emplace(v, static_cast<unsigned>(i));
  }
  return out;
}

std::vector<BufferLifetime>
mlir::cleave::bufferLifetimes(func::FuncOp func,
                              llvm::DenseMap<Value, unsigned> *lifetimeOf) {
  Block &block = func.getBody().front();
  // Views share the storage of their root value.
  llvm::DenseMap<Value, Value> root;
  auto rootOf = [&](Value v) {
    auto it = root.find(v);
    return it == root.end() ? v : it->second;
  };
  // The step's results are written where the caller takes them; the
  // arena holds what the step computes on the way.
  llvm::DenseMap<Value, unsigned> outputs = plannedOutputs(func);
  llvm::DenseMap<Value, unsigned> local;
  llvm::DenseMap<Value, unsigned> &intervalOf =
      lifetimeOf ? *lifetimeOf : local;
  std::vector<BufferLifetime> intervals;
  int64_t index = 0;
  int64_t endIndex = std::distance(block.begin(), block.end());
  for (Operation &op : block) {
    for (Value operand : op.getOperands()) {
      auto it = intervalOf.find(rootOf(operand));
      if (it != intervalOf.end())
        intervals[it->second].end = std::max(intervals[it->second].end, index);
    }
    if (op.hasTrait<OpTrait::IsTerminator>()) {
      for (Value operand : op.getOperands()) {
        auto it = intervalOf.find(rootOf(operand));
        if (it != intervalOf.end())
          intervals[it->second].end = endIndex;
      }
    } else if (isView(&op)) {
      root[op.getResult(0)] = rootOf(op.getOperand(0));
    } else if (!isStoredConstant(&op)) {
      for (Value result : op.getResults()) {
        if (outputs.count(result))
          continue;
        intervalOf[result] = intervals.size();
        intervals.push_back(
            {result, storageBytes(result.getType()), index, index});
      }
    }
    ++index;
  }
  return intervals;
}

int64_t mlir::cleave::peakLiveBytes(func::FuncOp func) {
  std::vector<BufferLifetime> lifetimes = bufferLifetimes(func);
  // +bytes where a value is made, -bytes after its last reader.
  std::vector<std::pair<int64_t, int64_t>> events;
  for (const BufferLifetime &l : lifetimes) {
    events.push_back({2 * l.begin, l.bytes});
    events.push_back({2 * l.end + 1, -l.bytes});
  }
  llvm::sort(events);
  int64_t live = 0, peak = 0;
  for (auto [at, bytes] : events) {
    live += bytes;
    peak = std::max(peak, live);
  }
  return peak;
}

namespace {
using Interval = BufferLifetime;

struct PlanBuffersPass
    : public mlir::cleave::impl::PlanBuffersPassBase<PlanBuffersPass> {
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (!func.getBody().hasOneBlock()) {
      func.emitOpError("buffer planning needs a single-block function");
      return signalPassFailure();
    }
    if (alignment <= 0 || (alignment & (alignment - 1))) {
      func.emitOpError("alignment must be a power of two");
      return signalPassFailure();
    }
    Block &block = func.getBody().front();
    llvm::DenseMap<Value, unsigned> intervalOf;
    std::vector<Interval> intervals = bufferLifetimes(func, &intervalOf);

    // Largest first; ties in program order keep the result deterministic.
    std::vector<unsigned> order(intervals.size());
    for (unsigned i = 0; i < order.size(); ++i)
      order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](unsigned a, unsigned b) {
      return intervals[a].bytes > intervals[b].bytes;
    });
    // Placed intervals by offset, so the occupied ranges of the ones
    // overlapping in time come out sorted without sorting them per value.
    std::vector<unsigned> placed;
    int64_t arena = 0;
    auto alignUp = [&](int64_t v) {
      return (v + alignment - 1) / alignment * alignment;
    };
    for (unsigned i : order) {
      Interval &cur = intervals[i];
      // Best fit: the smallest gap between the byte ranges of placed values
      // live at the same time that holds the value, else the top.
      int64_t need = alignUp(cur.bytes), best = -1, bestGap = INT64_MAX;
      int64_t cursor = 0;
      for (unsigned j : placed) {
        const Interval &other = intervals[j];
        if (other.begin > cur.end || cur.begin > other.end)
          continue;
        int64_t lo = other.offset, hi = other.offset + alignUp(other.bytes);
        if (lo - cursor >= need && lo - cursor < bestGap) {
          best = cursor;
          bestGap = lo - cursor;
        }
        cursor = std::max(cursor, hi);
      }
      cur.offset = best >= 0 ? best : cursor;
      arena = std::max(arena, cur.offset + need);
      auto at = std::upper_bound(placed.begin(), placed.end(), cur.offset,
                                 [&](int64_t offset, unsigned j) {
                                   return offset < intervals[j].offset;
                                 });
      placed.insert(at, i);
    }

    OpBuilder builder(func.getContext());
    for (Operation &op : block) {
      if (op.getNumResults() == 0 || isStoredConstant(&op))
        continue;
      SmallVector<int64_t> offsets;
      for (Value result : op.getResults()) {
        auto it = intervalOf.find(result);
        offsets.push_back(
            it == intervalOf.end() ? -1 : intervals[it->second].offset);
      }
      op.setAttr(kOffsetsAttr, builder.getDenseI64ArrayAttr(offsets));
    }
    func->setAttr(kArenaBytesAttr, builder.getI64IntegerAttr(arena));
  }
};
} // namespace

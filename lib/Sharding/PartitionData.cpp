//===- PartitionData.cpp - The cleave-partition-data pass -------*- C++ -*-===//
//
// Data parallelism and ZeRO on the mesh's dp axis (axis 0), before the tp
// axis is partitioned (--cleave-partition, axis 1) in the per-dp-rank step.
//
//===----------------------------------------------------------------------===//

#include "Cleave/CleaveAttrNames.h"
#include "Cleave/CleaveOps.h"
#include "cleave/Sharding/Passes.h"
#include "cleave/Sharding/Sharding.h"

#include <map>

namespace mlir::cleave {
#define GEN_PASS_DEF_PARTITIONDATAPASS
#include "cleave/Sharding/Passes.h.inc"
} // namespace mlir::cleave

using namespace mlir;
using namespace mlir::cleave;

namespace {

struct PartitionDataPass
    : public mlir::cleave::impl::PartitionDataPassBase<PartitionDataPass> {
  using PartitionDataPassBase::PartitionDataPassBase;
  void runOnOperation() override;
};

/// The tp layouts ZeRO on a dp x tp mesh splits the state around: those
/// --cleave-choose-layouts recorded on \p func's parameters (left there for
/// --cleave-partition), else the search's own.
FailureOr<ParameterLayouts> tpLayouts(func::FuncOp func, int64_t tp) {
  FailureOr<RecordedLayouts> rec = readRecordedLayouts(func, tp);
  if (failed(rec))
    return failure();
  // Only a choice made for the whole step (marked cleave.layouts_for).
  if (func->hasAttr(kLayoutsForAttr))
    return std::move(rec->layouts);
  ParameterLayouts none;
  return chooseLayouts(func, tp, none, CostModel());
}

void PartitionDataPass::runOnOperation() {
  ModuleOp module = getOperation();
  if (dp < 1 || tp < 1) {
    module.emitError("tp and dp must be at least 1");
    return signalPassFailure();
  }
  if (zero < 0 || zero > 3) {
    module.emitError("ZeRO stage ") << static_cast<int64_t>(zero)
                                    << " is not supported (stages are 0 to 3)";
    return signalPassFailure();
  }
  // ZeRO over a dp axis of 1 shards nothing: the plain step.
  if (dp == 1)
    return;
  // ZeRO on a dp x tp mesh: the tp layouts are known first (chosen on the
  // whole step), so that the state is split along another dimension, which
  // the tp pass then keeps.
  std::map<std::string, ParameterLayouts> chosen;
  if (tp > 1 && zero > 0)
    for (auto func : module.getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      FailureOr<ParameterLayouts> layouts = tpLayouts(func, tp);
      if (failed(layouts))
        return signalPassFailure();
      chosen[func.getName().str()] = std::move(*layouts);
    }
  // The batch factor split, weights replicated; each weight's gradient, a
  // contraction over the batch, is summed over the ranks, and reductions
  // over the batch (the loss's mean, BatchNorm's statistics) see the
  // global batch. The tp axis (1) is then partitioned in the per-dp-rank
  // program, whose dp collectives carry tp layouts through.
  SmallVector<int64_t> shape{dp};
  if (tp > 1)
    shape.push_back(tp);
  module->setAttr(kMeshAttr, DenseI64ArrayAttr::get(&getContext(), shape));
  module->setAttr(kMeshAxesAttr,
                  StringAttr::get(&getContext(), tp > 1 ? "dp,tp" : "dp"));
  PartitionOptions options;
  options.splitInputs = true;
  // ZeRO 2 reduces each gradient on its own, where it is final: a bucket
  // would wait for the last of its gradients and hold them all.
  options.bucketGradients = tp == 1 && zero < 2;
  options.shardOptimizerState = zero >= 1;
  options.scatterGradients = zero >= 2;
  // Gradients summed where the backward pass finishes them, so the rest
  // of it can hide the sums: in buckets on dp alone (an all-reduce moves
  // twice its bytes; the bucket is the smallest whose latency is a tenth
  // of that), one by one before a tp pass (which buckets would undo).
  // ZeRO 2 and 3 reduce-scatter each gradient there instead.
  CostModel cost;
  int64_t bucket = bucketBytes >= 0
                       ? static_cast<int64_t>(bucketBytes)
                       : static_cast<int64_t>(cost.alpha / (0.2 * cost.beta));
  options.earlyBucketBytes = zero >= 2 ? -1 : tp == 1 ? bucket : 0;
  options.shardParameters = zero >= 3;
  for (auto func : module.getOps<func::FuncOp>()) {
    auto it = chosen.find(func.getName().str());
    options.tensorLayouts = it == chosen.end() ? nullptr : &it->second;
    if (!func.isExternal() &&
        failed(partition(func, dp, {}, cost, /*rewrite=*/true, nullptr, nullptr,
                         options)))
      return signalPassFailure();
  }
}

} // namespace

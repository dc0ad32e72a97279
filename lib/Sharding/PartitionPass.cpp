//===- PartitionPass.cpp - The cleave-partition pass ------------*- C++ -*-===//

#include "Cleave/CleaveAttrNames.h"
#include "Cleave/CleaveOps.h"
#include "cleave/Sharding/Passes.h"
#include "cleave/Sharding/Sharding.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Regex.h"

#include <map>

namespace mlir::cleave {
#define GEN_PASS_DEF_PARTITIONPASS
#include "cleave/Sharding/Passes.h.inc"
} // namespace mlir::cleave

using namespace mlir;
using namespace mlir::cleave;

namespace {

struct PartitionPass
    : public mlir::cleave::impl::PartitionPassBase<PartitionPass> {
  using PartitionPassBase::PartitionPassBase;
  void runOnOperation() override;

  /// Chooses the parameters' layouts on the tp axis (mesh axis
  /// \p meshAxis) and rewrites every function for it.
  /// \p given: the tp layouts per function, chosen already (ZeRO on a dp x
  /// tp mesh); otherwise --plan's and the search's.
  void partitionTensorParallel(
      ModuleOp module, int64_t meshAxis,
      const std::map<std::string, ParameterLayouts> *given = nullptr);

  /// Reads `REGEX KIND` rules into layouts of \p func's parameters.
  LogicalResult readPlan(func::FuncOp func, ParameterLayouts &layouts);

  /// The layouts fixed before the search: --cleave-choose-layouts's, where
  /// it ran, else --plan's.
  LogicalResult fixedLayouts(func::FuncOp func, ParameterLayouts &layouts);

  /// Per function, the layouts --cleave-choose-layouts recorded on its
  /// parameters, and why (taken off them: the rewrite records the local
  /// ones).
  std::map<std::string, ParameterLayouts> chosenLayouts;
  std::map<std::string, LayoutAlternatives> chosenAlternatives;
};

/// --cleave-choose-layouts's choice for \p func, read off (and removed
/// from) it and its parameters: each recorded layout and why, and every
/// other parameter replicated. Empty where none was recorded; an error
/// where it was chosen for another tp.
FailureOr<ParameterLayouts> takeChosenLayouts(func::FuncOp func, int64_t tp,
                                              LayoutAlternatives &why) {
  ParameterLayouts chosen;
  bool recorded = func->hasAttr(kLayoutsForAttr);
  if (auto forTp = func->getAttrOfType<IntegerAttr>(kLayoutsForAttr)) {
    if (forTp.getInt() != tp)
      return func.emitError("the layouts were chosen for tp=")
             << forTp.getInt() << " (--cleave-choose-layouts), not tp=" << tp;
    func->removeAttr(kLayoutsForAttr);
  }
  SmallVector<StringRef> whole;
  for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i) {
    auto name = func.getArgAttrOfType<StringAttr>(i, kParameterAttr);
    if (!name)
      continue;
    if (auto text = func.getArgAttrOfType<StringAttr>(i, kLayoutWhyAttr)) {
      why[name.getValue()] = text.getValue().str();
      func.removeArgAttr(i, kLayoutWhyAttr);
    }
    auto layout = func.getArgAttrOfType<LayoutAttr>(i, kLayoutAttr);
    if (!layout) {
      whole.push_back(name.getValue());
      continue;
    }
    func.removeArgAttr(i, kLayoutAttr);
    chosen[name.getValue()] =
        Layout::split(layout.getDim(), layout.getBlocks(), layout.getGranule());
  }
  if (!chosen.empty() || recorded)
    for (StringRef name : whole)
      chosen[name] = Layout::replicated();
  return chosen;
}

LogicalResult PartitionPass::readPlan(func::FuncOp func,
                                      ParameterLayouts &layouts) {
  return readLayoutPlan(func, planFile, tp, layouts);
}

LogicalResult PartitionPass::fixedLayouts(func::FuncOp func,
                                          ParameterLayouts &layouts) {
  if (auto it = chosenLayouts.find(func.getName().str());
      it != chosenLayouts.end()) {
    layouts = it->second;
    return success();
  }
  return planFile.empty() ? success() : readPlan(func, layouts);
}

void PartitionPass::runOnOperation() {
  ModuleOp module = getOperation();
  if (tp < 1 || dp < 1) {
    module.emitError("tp and dp must be at least 1");
    return signalPassFailure();
  }
  // ZeRO over a dp axis of 1 shards nothing: the plain step.
  if (zero < 0 || zero > 3) {
    module.emitError("ZeRO stage ") << static_cast<int64_t>(zero)
                                    << " is not supported (stages are 0 to 3)";
    return signalPassFailure();
  }
  for (auto func : module.getOps<func::FuncOp>()) {
    LayoutAlternatives why;
    FailureOr<ParameterLayouts> chosen = takeChosenLayouts(func, tp, why);
    if (failed(chosen))
      return signalPassFailure();
    if (!chosen->empty())
      chosenLayouts[func.getName().str()] = std::move(*chosen);
    if (!why.empty())
      chosenAlternatives[func.getName().str()] = std::move(why);
  }
  // ZeRO on a dp x tp mesh: the tp layouts are chosen first (on the whole
  // step), so that the dp pass can split state along another dimension
  // and the tp pass then keeps them.
  std::map<std::string, ParameterLayouts> chosen;
  if (dp > 1 && tp > 1 && zero > 0)
    for (auto func : module.getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      ParameterLayouts fixed;
      if (failed(fixedLayouts(func, fixed)))
        return signalPassFailure();
      FailureOr<ParameterLayouts> layouts =
          chooseLayouts(func, tp, fixed, CostModel());
      if (failed(layouts))
        return signalPassFailure();
      chosen[func.getName().str()] = std::move(*layouts);
    }
  if (dp > 1) {
    // Data parallelism first, on mesh axis 0: the batch factor split,
    // weights replicated; each weight's gradient, a contraction over the
    // batch, is summed over the ranks, and reductions over the batch (the
    // loss's mean, BatchNorm's statistics) see the global batch. The tp
    // axis (1) is then partitioned in the per-dp-rank program, whose dp
    // collectives carry tp layouts through.
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
          failed(partition(func, dp, {}, CostModel(), /*rewrite=*/true, nullptr,
                           nullptr, options)))
        return signalPassFailure();
    }
    if (tp > 1)
      partitionTensorParallel(module, /*meshAxis=*/1,
                              chosen.empty() ? nullptr : &chosen);
    return;
  }
  module->setAttr(kMeshAttr, DenseI64ArrayAttr::get(&getContext(), {tp}));
  // At tp 1 nothing is split, but a --plan with a typo says so now rather
  // than at the first compile for more ranks.
  if (tp == 1) {
    ParameterLayouts fixed;
    for (auto func : module.getOps<func::FuncOp>())
      if (!func.isExternal() && !planFile.empty() &&
          failed(readPlan(func, fixed)))
        return signalPassFailure();
    return;
  }
  partitionTensorParallel(module, /*meshAxis=*/0);
}

void PartitionPass::partitionTensorParallel(
    ModuleOp module, int64_t meshAxis,
    const std::map<std::string, ParameterLayouts> *given) {
  CostModel cost;
  for (auto func : module.getOps<func::FuncOp>()) {
    if (func.isExternal())
      continue;
    ParameterLayouts fixed;
    if (given) {
      if (auto it = given->find(func.getName().str()); it != given->end())
        fixed = it->second;
    } else if (failed(fixedLayouts(func, fixed))) {
      return signalPassFailure();
    }
    LayoutAlternatives alternatives;
    PartitionOptions options;
    FailureOr<ParameterLayouts> layouts =
        chooseLayouts(func, tp, fixed, cost, &alternatives, &options);
    // Layouts --cleave-choose-layouts chose keep its reasons.
    if (auto it = chosenAlternatives.find(func.getName().str());
        it != chosenAlternatives.end())
      for (auto &entry : it->second)
        alternatives[entry.getKey()] = entry.getValue();
    options.meshAxis = meshAxis;
    if (failed(layouts) ||
        failed(partition(func, tp, *layouts, cost, /*rewrite=*/true, nullptr,
                         &alternatives, options)))
      return signalPassFailure();
  }
}

} // namespace

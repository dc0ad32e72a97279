//===- Partition.cpp - The cleave-partition pass ----------------*- C++ -*-===//

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
  /// \p meshAxis), or takes those recorded, and rewrites every function.
  void partitionTensorParallel(ModuleOp module, int64_t meshAxis);

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
  /// ... and how the search scored them, which the rewrite follows.
  std::map<std::string, PartitionOptions> chosenHow;
};

/// --cleave-choose-layouts's choice for \p func (readRecordedLayouts), then
/// removed from it and its parameters (the rewrite records the local
/// layouts; ZeRO's split over dp, from --cleave-partition-data, stays).
/// Empty where none was recorded.
FailureOr<ParameterLayouts>
takeChosenLayouts(func::FuncOp func, int64_t tp, LayoutAlternatives &why,
                  std::optional<PartitionOptions> &how) {
  FailureOr<RecordedLayouts> rec = readRecordedLayouts(func, tp);
  if (failed(rec))
    return failure();
  how = rec->how;
  func->removeAttr(kPartitionHowAttr);
  func->removeAttr(kLayoutsForAttr);
  for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i) {
    if (!func.getArgAttr(i, kParameterAttr))
      continue;
    func.removeArgAttr(i, kLayoutWhyAttr);
    auto layout = func.getArgAttrOfType<LayoutAttr>(i, kLayoutAttr);
    if (!layout || layout.getDim() < 0)
      continue;
    if (layout.getDpDim() >= 0)
      func.setArgAttr(
          i, kLayoutAttr,
          LayoutAttr::get(func.getContext(), -1, 1, 1, layout.getDpDim()));
    else
      func.removeArgAttr(i, kLayoutAttr);
  }
  why = std::move(rec->why);
  return std::move(rec->layouts);
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
  if (tp < 1) {
    module.emitError("tp must be at least 1");
    return signalPassFailure();
  }
  // After --cleave-partition-data the arguments' layouts are its dp
  // splits: only --cleave-choose-layouts's record is a choice to take.
  auto axes = module->getAttrOfType<StringAttr>(kMeshAxesAttr);
  bool afterData = axes && axes.getValue().starts_with("dp");
  for (auto func : module.getOps<func::FuncOp>()) {
    if (afterData && !func->hasAttr(kLayoutsForAttr))
      continue;
    LayoutAlternatives why;
    std::optional<PartitionOptions> how;
    FailureOr<ParameterLayouts> chosen = takeChosenLayouts(func, tp, why, how);
    if (failed(chosen))
      return signalPassFailure();
    if (how)
      chosenHow[func.getName().str()] = *how;
    if (!chosen->empty())
      chosenLayouts[func.getName().str()] = std::move(*chosen);
    if (!why.empty())
      chosenAlternatives[func.getName().str()] = std::move(why);
  }
  // After --cleave-partition-data: tp is axis 1 of its dp x tp mesh, split
  // in the per-dp-rank step, whose dp collectives carry tp layouts through.
  if (afterData) {
    ArrayRef<int64_t> mesh =
        module->getAttrOfType<DenseI64ArrayAttr>(kMeshAttr).asArrayRef();
    int64_t meshTp = mesh.size() > 1 ? mesh[1] : 1;
    if (meshTp != tp) {
      module.emitError("the mesh is ")
          << mesh[0] << " x " << meshTp
          << " (--cleave-partition-data), not one of tp="
          << static_cast<int64_t>(tp);
      return signalPassFailure();
    }
    if (tp > 1)
      partitionTensorParallel(module, /*meshAxis=*/1);
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

void PartitionPass::partitionTensorParallel(ModuleOp module, int64_t meshAxis) {
  CostModel cost;
  for (auto func : module.getOps<func::FuncOp>()) {
    if (func.isExternal())
      continue;
    ParameterLayouts fixed;
    if (failed(fixedLayouts(func, fixed)))
      return signalPassFailure();
    // Layouts --cleave-choose-layouts chose are applied as it scored them,
    // with its reasons; otherwise the search runs here.
    std::string name = func.getName().str();
    LayoutAlternatives alternatives;
    PartitionOptions options;
    FailureOr<ParameterLayouts> layouts = fixed;
    if (auto how = chosenHow.find(name); how != chosenHow.end()) {
      options = how->second;
      alternatives = chosenAlternatives[name];
    } else {
      layouts = chooseLayouts(func, tp, fixed, cost, &alternatives, &options);
    }
    options.meshAxis = meshAxis;
    options.sequenceParallel = sequenceParallel;
    if (failed(layouts) ||
        failed(partition(func, tp, *layouts, cost, /*rewrite=*/true, nullptr,
                         &alternatives, options)))
      return signalPassFailure();
  }
}

} // namespace

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

/// How a weight is used by its (first, i.e. forward) matmul: which of its
/// dims is contracted. Looks through reshapes that only add leading 1s and
/// through transposes (torch.onnx writes a Linear as Transpose + MatMul).
std::optional<int64_t> contractedDim(BlockArgument param) {
  auto type = cast<RankedTensorType>(param.getType());
  if (type.getRank() != 2)
    return std::nullopt;
  MatmulOp first;
  Value firstOperand;
  bool firstFlipped = false;
  SmallVector<std::pair<Value, bool>> work{
      {param, false}}; // (value, transposed)
  while (!work.empty()) {
    auto [v, flipped] = work.pop_back_val();
    for (Operation *user : v.getUsers()) {
      if (auto r = dyn_cast<ReshapeOp>(user)) {
        auto t = cast<RankedTensorType>(r.getType());
        auto shape = t.getShape().take_back(2);
        if (t.getRank() > 2 &&
            (flipped ? shape == ArrayRef<int64_t>{type.getDimSize(1),
                                                  type.getDimSize(0)}
                     : shape == type.getShape()))
          work.push_back({r.getResult(), flipped});
        continue;
      }
      if (auto t = dyn_cast<TransposeOp>(user)) {
        if (t.getPermutation().size() == 2 && t.getPermutation()[0] == 1)
          work.push_back({t.getResult(), !flipped});
        continue;
      }
      auto mm = dyn_cast<MatmulOp>(user);
      if (mm && (!first || mm->isBeforeInBlock(first))) {
        first = mm;
        firstOperand = v;
        firstFlipped = flipped;
      }
    }
  }
  if (!first)
    return std::nullopt;
  int64_t dim = first.getRhs() == firstOperand
                    ? (first.getTransposeRhs() ? 1 : 0)
                    : (first.getTransposeLhs() ? 0 : 1);
  return firstFlipped ? 1 - dim : dim;
}

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
};

LogicalResult PartitionPass::readPlan(func::FuncOp func,
                                      ParameterLayouts &layouts) {
  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> file = openInputFile(planFile, &error);
  if (!file)
    return func.emitError("cannot read --plan '") << planFile << "': " << error;
  SmallVector<StringRef> lines;
  file->getBuffer().split(lines, '\n');
  for (auto [n, raw] : llvm::enumerate(lines)) {
    StringRef line = raw.split('#').first.trim();
    if (line.empty())
      continue;
    auto [pattern, kind] = line.rsplit(' ');
    pattern = pattern.trim();
    kind = kind.trim();
    auto where = [&]() { return planFile + ":" + std::to_string(n + 1); };
    if (pattern.empty() ||
        !llvm::is_contained({"colwise", "rowwise", "replicate", "vocab"}, kind))
      return func.emitError(where())
             << ": expected 'REGEX KIND' with KIND colwise, rowwise, "
                "replicate or vocab";
    llvm::Regex regex(pattern);
    std::string why;
    if (!regex.isValid(why))
      return func.emitError(where()) << ": bad regular expression: " << why;
    bool any = false;
    for (BlockArgument arg : func.getArguments()) {
      auto name =
          func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), kParameterAttr);
      if (!name || !regex.match(name.getValue()) ||
          layouts.count(name.getValue()))
        continue;
      any = true;
      auto type = cast<RankedTensorType>(arg.getType());
      Layout l;
      if (kind == "vocab") {
        l = Layout::split(0);
      } else if (kind != "replicate") {
        std::optional<int64_t> contracted = contractedDim(arg);
        if (type.getRank() == 1)
          l = kind == "colwise" ? Layout::split(0) : Layout::replicated();
        else if (!contracted)
          return func.emitError(where())
                 << ": parameter '" << name.getValue()
                 << "' is not a matmul weight, so it has no " << kind.str()
                 << " split";
        else
          l = Layout::split(kind == "rowwise" ? *contracted : 1 - *contracted);
      }
      // A dimension tp does not divide is split in padded chunks; one
      // smaller than tp would leave ranks with nothing but padding.
      if (l.isSplit() && type.getDimSize(l.dim) < tp)
        return func.emitError(where())
               << ": parameter '" << name.getValue() << "' of shape ["
               << type.getShape() << "]: dimension " << l.dim << " of size "
               << type.getDimSize(l.dim)
               << " is smaller than tp = " << static_cast<int64_t>(tp);
      layouts[name.getValue()] = l;
    }
    if (!any)
      return func.emitError(where())
             << ": '" << pattern << "' matches no parameter";
  }
  return success();
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
  // ZeRO on a dp x tp mesh: the tp layouts are chosen first (on the whole
  // step), so that the dp pass can split state along another dimension
  // and the tp pass then keeps them.
  std::map<std::string, ParameterLayouts> chosen;
  if (dp > 1 && tp > 1 && zero > 0)
    for (auto func : module.getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      ParameterLayouts fixed;
      if (!planFile.empty() && failed(readPlan(func, fixed)))
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
    } else if (!planFile.empty() && failed(readPlan(func, fixed))) {
      return signalPassFailure();
    }
    LayoutAlternatives alternatives;
    PartitionOptions options;
    FailureOr<ParameterLayouts> layouts =
        chooseLayouts(func, tp, fixed, cost, &alternatives, &options);
    options.meshAxis = meshAxis;
    if (failed(layouts) ||
        failed(partition(func, tp, *layouts, cost, /*rewrite=*/true, nullptr,
                         &alternatives, options)))
      return signalPassFailure();
  }
}

} // namespace

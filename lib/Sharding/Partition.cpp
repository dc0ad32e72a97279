//===- Partition.cpp - The cleave-partition pass ----------------*- C++ -*-===//

#include "Cleave/CleaveAttrNames.h"
#include "Cleave/CleaveOps.h"
#include "Cleave/TensorSize.h"
#include "cleave/Sharding/Passes.h"
#include "cleave/Sharding/Sharding.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Regex.h"

#include <algorithm>
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
  /// \p meshAxis, \p ranks of them), or takes those recorded, and rewrites
  /// every function. \p bucket: whether gradients are summed as one bucket
  /// (not where another tp axis is partitioned afterwards).
  LogicalResult partitionTensorParallel(ModuleOp module, int64_t meshAxis,
                                        int64_t ranks, bool bucket = true);

  /// tp factored into tp / \p inner outer x \p inner mesh axes.
  LogicalResult partitionFactored(ModuleOp module, int64_t inner);

  /// tp-inner=0: partitions copies of \p module over one tp axis and over
  /// each factoring of tp into two, and keeps the one the cost model
  /// charges least (one axis where no factoring costs less).
  LogicalResult partitionChoosingFactors(ModuleOp module);

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
  /// With tp-inner: per function, the layouts over both tp axes recorded
  /// on its parameters (a forward pass split as its train step), which
  /// each axis's pass takes its part of.
  std::map<std::string, llvm::StringMap<LayoutAttr>> recordedOverBoth;
  /// Values carrying a parameter's split (or parameters) that the rewrites
  /// since it was last reset gather whole (PartitionResult).
  size_t gathersMade = 0;
};

/// The outer pass's #cleave.layout of each argument and result of a
/// function (null where whole), taken off so that the inner pass records
/// its own, and the function's global type before either pass.
struct OuterLayouts {
  FunctionType global;
  SmallVector<LayoutAttr> args, results;
};

OuterLayouts takeLayouts(func::FuncOp func, FunctionType global) {
  OuterLayouts out{global, {}, {}};
  for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i) {
    // A data input's layout is dp's (the batch split), which tp keeps.
    if (func.getArgAttr(i, kInputAttr)) {
      out.args.push_back(LayoutAttr());
      continue;
    }
    out.args.push_back(func.getArgAttrOfType<LayoutAttr>(i, kLayoutAttr));
    func.removeArgAttr(i, kLayoutAttr);
  }
  for (unsigned i = 0, e = func.getNumResults(); i < e; ++i) {
    out.results.push_back(func.getResultAttrOfType<LayoutAttr>(i, kLayoutAttr));
    func.removeResultAttr(i, StringAttr::get(func.getContext(), kLayoutAttr));
  }
  return out;
}

/// The layout over outer x inner tp ranks (row-major: tp rank o * inner +
/// i) of a tensor of global type \p type split \p o over the outer axis
/// and \p i over the inner (null: whole on that axis). Split over both
/// along one dimension, each rank's chunk must be the one a plain split of
/// tp ranks gives it (the inner chunks tile the outer chunk exactly), so
/// that files, checkpoints and state_dict see a plain split; failure
/// otherwise.
FailureOr<LayoutAttr> composeLayout(LayoutAttr o, LayoutAttr i, Type type,
                                    int64_t outer, int64_t inner) {
  MLIRContext *ctx = type.getContext();
  if (!o && !i)
    return LayoutAttr();
  if (o && !i)
    return LayoutAttr::get(ctx, o.getDim(), o.getBlocks(), o.getGranule(), -1,
                           outer, inner);
  if (!o)
    return LayoutAttr::get(ctx, i.getDim(), i.getBlocks(), i.getGranule(), -1,
                           inner, 1);
  if (o.getDim() != i.getDim() || o.getBlocks() != i.getBlocks())
    return failure();
  int64_t dim = o.getDim(), blocks = o.getBlocks();
  int64_t block = cast<RankedTensorType>(type).getDimSize(dim) / blocks;
  int64_t outerChunk =
      Layout::split(dim, blocks, o.getGranule()).chunk(block, outer);
  int64_t innerChunk =
      Layout::split(dim, blocks, i.getGranule()).chunk(outerChunk, inner);
  if (outerChunk != inner * innerChunk)
    return failure();
  for (int64_t g : {o.getGranule(), i.getGranule()})
    if (Layout::split(dim, blocks, g).chunk(block, outer * inner) == innerChunk)
      return LayoutAttr::get(ctx, dim, blocks, g, -1);
  return failure();
}

/// Records on \p func the layouts over both tp axes (composeLayout) of its
/// arguments and results, the inner pass's being on them now.
LogicalResult composeLayouts(func::FuncOp func, const OuterLayouts &outer,
                             int64_t outerRanks, int64_t innerRanks) {
  auto compose = [&](LayoutAttr o, LayoutAttr i, Type type, StringRef what,
                     unsigned n) -> FailureOr<LayoutAttr> {
    FailureOr<LayoutAttr> l = composeLayout(o, i, type, outerRanks, innerRanks);
    if (failed(l))
      return func.emitError("tp over ")
             << outerRanks << " x " << innerRanks << " ranks splits " << what
             << " " << n << " (" << type << ") as " << o << " then " << i
             << ", not as one split of " << outerRanks * innerRanks << " ranks";
    return l;
  };
  for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i) {
    if (func.getArgAttr(i, kInputAttr))
      continue;
    FailureOr<LayoutAttr> l = compose(
        outer.args[i], func.getArgAttrOfType<LayoutAttr>(i, kLayoutAttr),
        outer.global.getInput(i), "argument", i);
    if (failed(l))
      return failure();
    if (*l)
      func.setArgAttr(i, kLayoutAttr, *l);
  }
  for (unsigned i = 0, e = func.getNumResults(); i < e; ++i) {
    FailureOr<LayoutAttr> l = compose(
        outer.results[i], func.getResultAttrOfType<LayoutAttr>(i, kLayoutAttr),
        outer.global.getResult(i), "result", i);
    if (failed(l))
      return failure();
    if (*l)
      func.setResultAttr(i, kLayoutAttr, *l);
  }
  return success();
}

/// An all-reduce over one tp axis of a value just summed over the other
/// (or a reshape or transpose of it: a sum commutes with moving elements)
/// becomes one all-reduce over both: a ring of all the tp ranks moves
/// 2(n-1)/n of the payload, two rings of the factors more. The merged one
/// keeps the reason and phase of the outer axis's (the reduction a single
/// tp axis would make) and is one of Megatron's if either was.
void mergeReductions(func::FuncOp func) {
  auto sumOver = [](AllReduceOp op) -> AllReduceOp {
    Value v = op.getInput();
    while (v.hasOneUse()) {
      Operation *def = v.getDefiningOp();
      if (auto first = dyn_cast_or_null<AllReduceOp>(def))
        return first.getKind() == op.getKind() &&
                       llvm::none_of(op.getAxes(),
                                     [&](int64_t a) {
                                       return llvm::is_contained(
                                           first.getAxes(), a);
                                     })
                   ? first
                   : AllReduceOp();
      if (!movesOnly(def))
        return AllReduceOp();
      v = def->getOperand(0);
    }
    return AllReduceOp();
  };
  // A view the inner pass made that nothing reads (the value's reduced
  // copy serves its users) would hide a pair.
  SmallVector<Operation *> views;
  func.walk([&](Operation *op) {
    if (movesOnly(op))
      views.push_back(op);
  });
  for (Operation *op : llvm::reverse(views))
    if (isOpTriviallyDead(op))
      op->erase();
  // In program order: a merged reduction pairs again with a later one.
  SmallVector<AllReduceOp> sums;
  func.walk([&](AllReduceOp r) { sums.push_back(r); });
  for (AllReduceOp op : sums) {
    AllReduceOp first = sumOver(op);
    if (!first)
      continue;
    SmallVector<int64_t> axes(first.getAxes());
    llvm::append_range(axes, op.getAxes());
    llvm::sort(axes);
    bool megatron = first->hasAttr(kMegatronAttr) || op->hasAttr(kMegatronAttr);
    if (op.getAxes().front() < first.getAxes().front())
      first->setDiscardableAttrs(op->getDiscardableAttrDictionary());
    first.setAxes(axes);
    first->removeAttr(kBucketAttr);
    if (megatron)
      first->setAttr(kMegatronAttr, UnitAttr::get(func.getContext()));
    op.replaceAllUsesWith(op.getInput());
    op.erase();
  }
}

/// The mesh axes --cleave-partition-data made before the tp axes: [dp],
/// or none.
SmallVector<int64_t> dataAxes(ModuleOp module) {
  auto axes = module->getAttrOfType<StringAttr>(kMeshAxesAttr);
  auto mesh = module->getAttrOfType<DenseI64ArrayAttr>(kMeshAttr);
  if (!axes || !mesh || !axes.getValue().starts_with("dp"))
    return {};
  return {mesh[0]};
}

/// Whether --cleave-partition-data split some state over dp (ZeRO: a
/// dp_dim in an argument's #cleave.layout).
bool splitsOverDp(ModuleOp module) {
  for (auto func : module.getOps<func::FuncOp>())
    for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
      if (auto l = func.getArgAttrOfType<LayoutAttr>(i, kLayoutAttr))
        if (l.getDpDim() >= 0)
          return true;
  return false;
}

/// The #cleave.layout recorded on each parameter of \p func (null where
/// whole), by name.
llvm::StringMap<LayoutAttr> parameterLayoutAttrs(func::FuncOp func) {
  llvm::StringMap<LayoutAttr> out;
  for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
    if (auto name = func.getArgAttrOfType<StringAttr>(i, kParameterAttr))
      out[name.getValue()] = func.getArgAttrOfType<LayoutAttr>(i, kLayoutAttr);
  return out;
}

/// The outer and inner axes' layouts whose composition (composeLayout) is
/// \p l; failure for a layout no composition gives.
FailureOr<std::pair<Layout, Layout>>
decomposeLayout(LayoutAttr l, int64_t outer, int64_t inner) {
  if (!l || !l.isSplit())
    return std::make_pair(Layout::replicated(), Layout::replicated());
  Layout split = Layout::split(l.getDim(), l.getBlocks(), l.getGranule());
  if (l.getParts() == 0 && l.getCopies() == 1)
    return std::make_pair(split, split);
  if (l.getCopies() == inner && (l.getParts() == 0 || l.getParts() == outer))
    return std::make_pair(split, Layout::replicated());
  if (l.getCopies() == 1 && l.getParts() == inner)
    return std::make_pair(Layout::replicated(), split);
  return failure();
}

/// What the cost model charges a partitioned module's step: each
/// collective's latency and its bytes on the wire over its group (an
/// all-reduce's 2(n-1)/n of the payload, the others' (n-1)/n), and each
/// rank's parameters, their gradients and the optimizer state.
double stepCost(ModuleOp module, const CostModel &cost) {
  auto meshAttr = module->getAttrOfType<DenseI64ArrayAttr>(kMeshAttr);
  ArrayRef<int64_t> mesh =
      meshAttr ? meshAttr.asArrayRef() : ArrayRef<int64_t>();
  double seconds = 0;
  module.walk([&](Operation *op) {
    if (!isa<AllReduceOp, AllGatherOp, ReduceScatterOp, AllToAllOp>(op))
      return;
    int64_t n = 1;
    for (int64_t a : op->getAttrOfType<DenseI64ArrayAttr>("axes").asArrayRef())
      n *= a < static_cast<int64_t>(mesh.size()) ? mesh[a] : 1;
    double bytes = std::max(storageBytes(op->getOperand(0).getType()),
                            storageBytes(op->getResult(0).getType()));
    double wire = bytes * (n - 1) / n * (isa<AllReduceOp>(op) ? 2 : 1);
    seconds += cost.alpha + cost.beta * wire;
  });
  for (auto func : module.getOps<func::FuncOp>())
    for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i) {
      bool param = func.getArgAttr(i, kParameterAttr) != nullptr;
      if (!param && !func.getArgAttr(i, kOptimizerStateAttr))
        continue;
      int64_t copies = param && !func.getArgAttr(i, kFrozenAttr) ? 2 : 1;
      seconds +=
          cost.memory * copies * storageBytes(func.getArgument(i).getType());
    }
  return seconds;
}

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
    if (tpInner > 1 && tpInner < tp && func->hasAttr(kLayoutsForAttr))
      recordedOverBoth[func.getName().str()] = parameterLayoutAttrs(func);
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
  if (tpInner < 0 || (tpInner > 0 && tp % tpInner != 0)) {
    module.emitError("tp-inner=")
        << static_cast<int64_t>(tpInner)
        << " does not divide tp=" << static_cast<int64_t>(tp);
    return signalPassFailure();
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
    // ZeRO split the state over dp (a dp_dim beside tp's layout): the tp
    // ranks stay one axis.
    bool zero = splitsOverDp(module);
    if (tpInner > 1 && tpInner < tp && zero) {
      module.emitError("tp-inner is not supported with ZeRO");
      return signalPassFailure();
    }
    if (tpInner == 0 && !zero && planFile.empty() && !sequenceParallel &&
        tp > 3) {
      if (failed(partitionChoosingFactors(module)))
        signalPassFailure();
      return;
    }
    if (tpInner > 1 && tpInner < tp) {
      if (failed(partitionFactored(module, tpInner)))
        signalPassFailure();
      return;
    }
    if (tp > 1 && failed(partitionTensorParallel(module, /*meshAxis=*/1, tp)))
      return signalPassFailure();
    return;
  }
  if (tpInner == 0 && planFile.empty() && !sequenceParallel && tp > 3) {
    if (failed(partitionChoosingFactors(module)))
      return signalPassFailure();
    return;
  }
  if (tpInner == 0)
    tpInner = 1;
  if (tpInner < 1 || tp % tpInner != 0) {
    module.emitError("tp-inner=")
        << static_cast<int64_t>(tpInner)
        << " does not divide tp=" << static_cast<int64_t>(tp);
    return signalPassFailure();
  }
  if (tpInner > 1 && tpInner < tp) {
    if (failed(partitionFactored(module, tpInner)))
      return signalPassFailure();
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
  if (failed(partitionTensorParallel(module, /*meshAxis=*/0, tp)))
    signalPassFailure();
}

LogicalResult PartitionPass::partitionTensorParallel(ModuleOp module,
                                                     int64_t meshAxis,
                                                     int64_t ranks,
                                                     bool bucket) {
  CostModel cost;
  for (auto func : module.getOps<func::FuncOp>()) {
    if (func.isExternal())
      continue;
    ParameterLayouts fixed;
    if (failed(fixedLayouts(func, fixed)))
      return failure();
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
      layouts =
          chooseLayouts(func, ranks, fixed, cost, &alternatives, &options);
    }
    options.meshAxis = meshAxis;
    options.sequenceParallel = sequenceParallel;
    options.bucketGradients = options.bucketGradients && bucket;
    // The inner of two tp axes (the last): its sums join the others'.
    auto axes = module->getAttrOfType<StringAttr>(kMeshAxesAttr);
    int64_t inner = axes && axes.getValue() == "tp,tp_inner"      ? 1
                    : axes && axes.getValue() == "dp,tp,tp_inner" ? 2
                                                                  : -1;
    options.joinOtherAxisSums = meshAxis == inner;
    if (failed(layouts))
      return failure();
    FailureOr<PartitionResult> made =
        partition(func, ranks, *layouts, cost, /*rewrite=*/true, nullptr,
                  &alternatives, options);
    if (failed(made))
      return failure();
    gathersMade +=
        made->gatheredProducts.size() + made->gatheredParameters.size();
  }
  return success();
}

LogicalResult PartitionPass::partitionChoosingFactors(ModuleOp module) {
  CostModel cost;
  // What the search chose over one axis (--cleave-choose-layouts's
  // record): the one-axis candidate applies it, the factored ones search
  // per axis.
  auto chosen = chosenLayouts;
  auto how = chosenHow;
  auto alternatives = chosenAlternatives;
  auto restore = [&] {
    chosenLayouts = chosen;
    chosenHow = how;
    chosenAlternatives = alternatives;
  };
  OwningOpRef<ModuleOp> best;
  double bestCost = 0;
  size_t bestGathers = 0;
  int64_t base = dataAxes(module).size();
  for (int64_t inner = 1; inner < tp; ++inner) {
    if (tp % inner != 0)
      continue;
    OwningOpRef<ModuleOp> trial = module.clone();
    // A factoring the layouts cannot take (chunks per axis that are not
    // one split of the tp ranks) is no candidate: its error is not the
    // user's.
    ScopedDiagnosticHandler quiet(&getContext(),
                                  [](Diagnostic &) { return success(); });
    LogicalResult made = success();
    gathersMade = 0;
    if (inner == 1) {
      if (base == 0)
        (*trial)->setAttr(kMeshAttr,
                          DenseI64ArrayAttr::get(&getContext(), {tp}));
      made = partitionTensorParallel(*trial, /*meshAxis=*/base, tp);
    } else {
      made = partitionFactored(*trial, inner);
    }
    restore();
    if (failed(made))
      continue;
    double c = stepCost(*trial, cost);
    // As the layout search weighs them: a plan that gathers values
    // carrying a parameter's split whole loses to one that gathers none
    // unless that one costs kGatherTolerance more. Otherwise factoring
    // must pay: at equal cost one axis is the simpler plan.
    bool better = !best;
    if (best && (gathersMade == 0) != (bestGathers == 0))
      better = gathersMade == 0 ? c <= (1 + kGatherTolerance) * bestCost
                                : c * (1 + kGatherTolerance) < bestCost;
    else if (best)
      better = c < bestCost * (1 - 1e-3);
    if (better) {
      best = std::move(trial);
      bestCost = c;
      bestGathers = gathersMade;
    }
  }
  if (!best) {
    // Where nothing partitions, one axis says why.
    if (base == 0)
      module->setAttr(kMeshAttr, DenseI64ArrayAttr::get(&getContext(), {tp}));
    return partitionTensorParallel(module, /*meshAxis=*/base, tp);
  }
  // The winner's functions and mesh replace the module's.
  module.getBody()->clear();
  module.getBody()->getOperations().splice(module.getBody()->end(),
                                           best->getBody()->getOperations());
  for (StringRef name : {kMeshAttr.data(), kMeshAxesAttr.data()}) {
    if (Attribute a = (*best)->getAttr(name))
      module->setAttr(name, a);
    else
      module->removeAttr(name);
  }
  return success();
}

LogicalResult PartitionPass::partitionFactored(ModuleOp module, int64_t inner) {
  int64_t outer = tp / inner;
  if (!planFile.empty() || sequenceParallel)
    return module.emitError("tp-inner takes no --plan or sequence "
                            "parallelism: its layouts are chosen per axis");
  // Layouts recorded over both axes: each pass applies its axis's part.
  std::map<std::string, std::pair<ParameterLayouts, ParameterLayouts>> parts;
  chosenHow.clear();
  chosenAlternatives.clear();
  for (auto &[name, attrs] : recordedOverBoth) {
    auto &[o, i] = parts[name];
    for (auto &entry : attrs) {
      FailureOr<std::pair<Layout, Layout>> both =
          decomposeLayout(entry.second, outer, inner);
      if (failed(both))
        return module.emitError("the layout ")
               << entry.second << " of '" << entry.first()
               << "' is not one of tp over " << outer << " x " << inner
               << " ranks";
      o[entry.first()] = both->first;
      i[entry.first()] = both->second;
    }
  }
  auto useRecorded = [&](bool second) {
    chosenLayouts.clear();
    for (auto &[name, both] : parts)
      chosenLayouts[name] = second ? both.second : both.first;
  };
  useRecorded(false);
  MLIRContext *ctx = &getContext();
  // After --cleave-partition-data the dp axis stays first.
  SmallVector<int64_t> mesh = dataAxes(module);
  int64_t base = mesh.size();
  mesh.append({outer, inner});
  module->setAttr(kMeshAttr, DenseI64ArrayAttr::get(ctx, mesh));
  module->setAttr(kMeshAxesAttr, StringAttr::get(ctx, base ? "dp,tp,tp_inner"
                                                           : "tp,tp_inner"));
  std::map<std::string, FunctionType> globalTypes;
  for (auto func : module.getOps<func::FuncOp>())
    globalTypes[func.getName().str()] = func.getFunctionType();
  // The outer pass sums each gradient where it is final: a bucket's flat
  // concatenation would undo the inner pass's splits.
  if (failed(partitionTensorParallel(module, /*meshAxis=*/base, outer,
                                     /*bucket=*/false)))
    return failure();
  std::map<std::string, OuterLayouts> outerLayouts;
  for (auto func : module.getOps<func::FuncOp>())
    if (!func.isExternal())
      outerLayouts[func.getName().str()] =
          takeLayouts(func, globalTypes[func.getName().str()]);
  useRecorded(true);
  if (failed(partitionTensorParallel(module, /*meshAxis=*/base + 1, inner)))
    return failure();
  for (auto func : module.getOps<func::FuncOp>()) {
    if (func.isExternal())
      continue;
    if (failed(composeLayouts(func, outerLayouts[func.getName().str()], outer,
                              inner)))
      return failure();
    mergeReductions(func);
  }
  return success();
}

} // namespace

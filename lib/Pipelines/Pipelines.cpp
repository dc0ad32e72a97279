//===- Pipelines.cpp - Composed pass pipelines ------------------*- C++ -*-===//
//
// Composition only: no patterns or rewrites live here.
//
//===----------------------------------------------------------------------===//

#include "cleave/Pipelines/Pipelines.h"
#include "Cleave/CleaveAttrNames.h"
#include "cleave/Autodiff/Passes.h"
#include "cleave/Lowering/EmitPlan.h"
#include "cleave/Lowering/Passes.h"
#include "cleave/Sharding/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"
#include "plan/plan.pb.h"

using namespace mlir;
using namespace mlir::cleave;

void mlir::cleave::buildForwardPipeline(OpPassManager &pm,
                                        llvm::StringRef recompute) {
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  pm.addNestedPass<func::FuncOp>(createFuseDequantizePass());
  pm.addNestedPass<func::FuncOp>(createFoldTransposesPass());
  pm.addNestedPass<func::FuncOp>(createJoinScatteredSlicesPass());
  // On the finished program, so that what it copies is what runs (the
  // collectives included), and before the passes that narrow or remake
  // single saved values, which then see only what it keeps.
  if (recompute != "none")
    pm.addNestedPass<func::FuncOp>(createRecomputePass({recompute.str()}));
  pm.addNestedPass<func::FuncOp>(createSaveDerivativesPass());
  pm.addNestedPass<func::FuncOp>(createRecomputeElementwisePass());
  pm.addNestedPass<func::FuncOp>(createNarrowSavedPass());
  pm.addNestedPass<func::FuncOp>(createSumProductCopiesPass());
  pm.addNestedPass<func::FuncOp>(createSinkWideningPass());
  pm.addNestedPass<func::FuncOp>(createPlanBuffersPass());
}

void mlir::cleave::buildTrainPipeline(OpPassManager &pm,
                                      const TrainStepOptions &options) {
  // The forward canonicalized first, so the backward is derived from its
  // simplest form (torch.onnx's repeat_interleave becomes one broadcast).
  pm.addPass(createCanonicalizerPass());
  OpPassManager &fpm = pm.nest<func::FuncOp>();
  if (options.fuse) {
    fpm.addPass(createFuseAttentionPass());
    fpm.addPass(createCanonicalizerPass());
  }
  // At every tp, so that checkpoints of one model hold the same tensors
  // whatever the mesh they are resumed on.
  fpm.addPass(createSegmentParametersPass());
  fpm.addPass(createAppendLossPass({options.loss}));
  if (options.fuse)
    fpm.addPass(createFuseCrossEntropyPass());
  // fp16's narrow range needs GradScaler's dynamic loss scaling; bf16 has
  // f32's range and needs none.
  bool lossScale = options.precision == "fp16";
  fpm.addPass(createAutodiffPass({lossScale, options.accumulate}));
  OptimizerPassOptions opt;
  opt.optimizer = options.optimizer;
  opt.lr = options.lr;
  opt.momentum = options.momentum;
  opt.weightDecay = options.weightDecay;
  opt.beta1 = options.beta1;
  opt.beta2 = options.beta2;
  opt.eps = options.eps;
  opt.lossScale = lossScale;
  opt.lrInput = options.lrInput;
  opt.maxGradNorm = options.maxGradNorm;
  opt.clipGradValue = options.clipGradValue;
  opt.guardNonfinite = options.guardNonfinite && !lossScale;
  fpm.addPass(createOptimizerPass(opt));
  // On the whole step, before the layouts are chosen: the search prices
  // the bf16 values (and the collectives that move them) at their size.
  if (options.precision != "f32")
    fpm.addPass(createMixedPrecisionPass({options.precision}));
  if (options.tp > 1 || options.dp > 1) {
    pm.addPass(createCanonicalizerPass());
    pm.addPass(createCSEPass());
  }
  // The layouts are chosen on the whole step, then the step partitioned
  // by them. Plain dp x tp chooses the tp layouts on the per-dp-rank step
  // instead, inside the partitioner (after its dp rewrite), whose
  // activations are a dp-th of these.
  // tp factored into two axes chooses each axis's layouts in its own pass.
  bool factored = options.tpInner > 1 && options.tpInner < options.tp;
  if (options.tp > 1 && (options.dp == 1 || options.zero > 0) && !factored) {
    ChooseLayoutsPassOptions choose;
    choose.tp = options.tp;
    choose.planFile = options.planFile;
    pm.addPass(createChooseLayoutsPass(choose));
  }
  if (options.dp > 1 || options.zero != 0) {
    PartitionDataPassOptions data;
    data.dp = options.dp;
    data.tp = options.tp;
    data.zero = options.zero;
    pm.addPass(createPartitionDataPass(data));
  }
  // With tp 1 only to check a --plan's rules (or a ZeRO stage's mesh).
  if (options.tp > 1 || options.dp > 1 || options.zero != 0 ||
      !options.planFile.empty()) {
    PartitionPassOptions partition;
    partition.tp = options.tp;
    partition.planFile = options.planFile;
    partition.sequenceParallel = options.sequenceParallel;
    partition.tpInner = options.tpInner;
    pm.addPass(createPartitionPass(partition));
  }
  if (options.tp > 1 || options.dp > 1 || options.zero != 0 ||
      !options.planFile.empty())
    pm.addNestedPass<func::FuncOp>(createBucketGradientsPass());
  buildForwardPipeline(pm, options.recompute);
}

namespace {
struct TrainPipelineOptions : public PassPipelineOptions<TrainPipelineOptions> {
  Option<std::string> loss{*this, "loss", llvm::cl::init("auto")};
  Option<std::string> optimizer{*this, "optimizer", llvm::cl::init("sgd")};
  Option<double> lr{*this, "lr", llvm::cl::init(0.01)};
  Option<double> momentum{*this, "momentum", llvm::cl::init(0.0)};
  Option<double> weightDecay{*this, "weight-decay", llvm::cl::init(0.0)};
  Option<double> beta1{*this, "beta1", llvm::cl::init(0.9)};
  Option<double> beta2{*this, "beta2", llvm::cl::init(0.999)};
  Option<double> eps{*this, "eps", llvm::cl::init(1e-8)};
  Option<int64_t> tp{*this, "tp", llvm::cl::init(1)};
  Option<std::string> plan{*this, "plan", llvm::cl::init("")};
  Option<int64_t> dp{*this, "dp", llvm::cl::init(1)};
  Option<int64_t> zero{*this, "zero", llvm::cl::init(0)};
  Option<bool> fuse{*this, "fuse", llvm::cl::init(true)};
  Option<std::string> precision{*this, "precision", llvm::cl::init("f32")};
  Option<std::string> recompute{*this, "recompute", llvm::cl::init("none")};
  Option<bool> sequenceParallel{*this, "sequence-parallel",
                                llvm::cl::init(false)};
  Option<int64_t> tpInner{*this, "tp-inner", llvm::cl::init(1)};
  Option<bool> lrInput{*this, "lr-input", llvm::cl::init(false)};
  Option<double> maxGradNorm{*this, "max-grad-norm", llvm::cl::init(0.0)};
  Option<double> clipGradValue{*this, "clip-grad-value", llvm::cl::init(0.0)};
  Option<bool> guardNonfinite{*this, "guard-nonfinite", llvm::cl::init(false)};
  Option<int64_t> accumulate{*this, "accumulate", llvm::cl::init(1)};
};
} // namespace

void mlir::cleave::registerPipelines() {
  PassPipelineRegistration<TrainPipelineOptions>(
      "cleave-train-pipeline",
      "Builds and lowers the train step (loss, gradients, optimizer update)",
      [](OpPassManager &pm, const TrainPipelineOptions &o) {
        TrainStepOptions t{o.loss,        o.optimizer, o.lr,    o.momentum,
                           o.weightDecay, o.beta1,     o.beta2, o.eps,
                           o.tp,          o.plan};
        t.dp = o.dp;
        t.zero = o.zero;
        t.fuse = o.fuse;
        t.precision = o.precision;
        t.recompute = o.recompute;
        t.sequenceParallel = o.sequenceParallel;
        t.tpInner = o.tpInner;
        t.lrInput = o.lrInput;
        t.maxGradNorm = o.maxGradNorm;
        t.clipGradValue = o.clipGradValue;
        t.guardNonfinite = o.guardNonfinite;
        t.accumulate = o.accumulate;
        buildTrainPipeline(pm, t);
      });
  PassPipelineRegistration<>(
      "cleave-forward-pipeline",
      "Lowers imported cleave IR to planned straight-line functions",
      [](OpPassManager &pm) { buildForwardPipeline(pm); });
}

/// Runs \p pm on \p module and emits the plan of its @main.
static LogicalResult runAndEmit(ModuleOp module, PassManager &pm,
                                ::cleave::plan::Program &program) {
  if (failed(pm.run(module)))
    return failure();
  auto main = module.lookupSymbol<func::FuncOp>("main");
  if (!main)
    return module.emitError("the module has no @main function");
  return emitPlan(main, program);
}

LogicalResult mlir::cleave::compileTrainStep(ModuleOp module,
                                             const TrainStepOptions &options,
                                             ::cleave::plan::Program &program) {
  PassManager pm(module.getContext());
  buildTrainPipeline(pm, options);
  return runAndEmit(module, pm, program);
}

LogicalResult mlir::cleave::compileForward(ModuleOp module,
                                           ::cleave::plan::Program &program) {
  PassManager pm(module.getContext());
  buildForwardPipeline(pm);
  return runAndEmit(module, pm, program);
}

LogicalResult mlir::cleave::compileShardedForward(
    ModuleOp module, int64_t tp, int64_t dp, int64_t zero, bool fuse,
    const llvm::StringMap<Attribute> &layouts, ::cleave::plan::Program &program,
    int64_t tpInner) {
  // What the train pipeline does ahead of the loss, so that the parameters
  // are the step's (segments included) and the layouts apply by name.
  PassManager prepare(module.getContext());
  prepare.addPass(createCanonicalizerPass());
  OpPassManager &fpm = prepare.nest<func::FuncOp>();
  if (fuse) {
    fpm.addPass(createFuseAttentionPass());
    fpm.addPass(createCanonicalizerPass());
  }
  fpm.addPass(createSegmentParametersPass());
  if (failed(prepare.run(module)))
    return failure();
  auto main = module.lookupSymbol<func::FuncOp>("main");
  if (!main)
    return module.emitError("the module has no @main function");
  if (tp > 1) {
    // Recorded as --cleave-choose-layouts records a choice: the
    // partitioner takes them as they are, with no search.
    main->setAttr(
        kLayoutsForAttr,
        IntegerAttr::get(IntegerType::get(module.getContext(), 64), tp));
    for (unsigned i = 0, e = main.getNumArguments(); i < e; ++i) {
      auto name = main.getArgAttrOfType<StringAttr>(i, kParameterAttr);
      if (!name)
        name = main.getArgAttrOfType<StringAttr>(i, kBufferAttr);
      if (!name)
        continue;
      if (Attribute layout = layouts.lookup(name.getValue()))
        main.setArgAttr(i, kLayoutAttr, layout);
    }
  }
  // As the train pipeline partitions: the batch over dp first (with
  // ZeRO's parameter split, on the recorded tp layouts), then tp.
  PassManager pm(module.getContext());
  if (dp > 1 || zero != 0) {
    PartitionDataPassOptions data;
    data.dp = dp;
    data.tp = tp;
    data.zero = zero;
    pm.addPass(createPartitionDataPass(data));
  }
  if (tp > 1 || dp > 1 || zero != 0) {
    PartitionPassOptions partition;
    partition.tp = tp;
    partition.tpInner = tpInner;
    pm.addPass(createPartitionPass(partition));
  }
  buildForwardPipeline(pm);
  if (failed(runAndEmit(module, pm, program)))
    return failure();
  program.set_name("forward");
  return success();
}

//===- Pipelines.h - Composed pass pipelines --------------------*- C++ -*-===//

#ifndef CLEAVE_PIPELINES_PIPELINES_H
#define CLEAVE_PIPELINES_PIPELINES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringMap.h"

namespace cleave::plan {
class Program;
} // namespace cleave::plan

namespace mlir::cleave {

/// Forward lowering: canonicalize (folds the shape arithmetic), CSE, then
/// static buffer planning of every function.
void buildForwardPipeline(OpPassManager &pm,
                          llvm::StringRef recompute = "none");

/// What the training pipeline needs to know: the loss and the optimizer.
struct TrainStepOptions {
  std::string loss = "auto";
  std::string optimizer = "sgd";
  double lr = 0.01, momentum = 0, weightDecay = 0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  /// Tensor-parallel ranks, and an optional file of layout rules.
  int64_t tp = 1;
  std::string planFile;
  /// Data-parallel ranks (the batch split, weights replicated); with tp 1.
  int64_t dp = 1;
  /// ZeRO stage over dp (0: none; 1: optimizer state split).
  int64_t zero = 0;
  /// Form cleave.attention from the exporter's attention ops
  /// (--cleave-fuse-attention); off to compare with the unfused form.
  bool fuse = true;
  /// "f32", or the mixed precision of --cleave-mixed-precision ("bf16",
  /// "fp16").
  std::string precision = "f32";
  /// What the forward keeps for the backward (--cleave-recompute): "none",
  /// "selective" or "full".
  std::string recompute = "none";
  /// Megatron's sequence parallelism (--cleave-partition's
  /// sequence-parallel).
  bool sequenceParallel = false;
  /// tp factored into tp / tpInner x tpInner mesh axes (--cleave-partition's
  /// tp-inner); 1: one tp axis.
  int64_t tpInner = 1;
  /// The learning rate read from an input the runtime's schedule feeds
  /// (cleave-optimizer's lr-input), and gradient clipping (its
  /// max-grad-norm and clip-grad-value; 0: none).
  bool lrInput = false;
  double maxGradNorm = 0, clipGradValue = 0;
  /// cleave-optimizer's guard-nonfinite: a step with an inf or NaN loss or
  /// gradient changes nothing (the runtime stops or skips).
  bool guardNonfinite = false;
  /// Micro-batches per update (cleave-autodiff's micro-batches): gradient
  /// accumulation.
  int64_t accumulate = 1;
};

/// The forward pass as imported (\p module's @main: the model's outputs,
/// no loss or update), split as the train step of the same model was:
/// attention fused as there (\p fuse), parameters segmented as there, each
/// parameter or buffer named in \p layouts given that layout (the train
/// step's cleave.layout, by name; the others replicated), partitioned over
/// \p tp ranks (and, on a dp x tp mesh, its batch over \p dp ranks with
/// ZeRO stage \p zero's parameter split, as the step's), lowered and
/// planned into \p program. The runtime then feeds it the step's own state
/// chunks (Model.forward, evaluate).
LogicalResult compileShardedForward(ModuleOp module, int64_t tp, int64_t dp,
                                    int64_t zero, bool fuse,
                                    const llvm::StringMap<Attribute> &layouts,
                                    ::cleave::plan::Program &program,
                                    int64_t tpInner = 1);

/// Training lowering: append the loss, differentiate, apply the optimizer,
/// clean up, partition for tensor parallelism (tp > 1), then the forward
/// pipeline's clean-up and buffer planning.
void buildTrainPipeline(OpPassManager &pm, const TrainStepOptions &options);

/// Registers `cleave-forward-pipeline` and `cleave-train-pipeline` with the
/// pass registry.
void registerPipelines();

/// Runs the forward pipeline on \p module and emits the plan of its @main.
LogicalResult compileForward(ModuleOp module, ::cleave::plan::Program &program);

/// Runs the training pipeline on \p module and emits the train-step plan of
/// its @main.
LogicalResult compileTrainStep(ModuleOp module, const TrainStepOptions &options,
                               ::cleave::plan::Program &program);

} // namespace mlir::cleave

#endif // CLEAVE_PIPELINES_PIPELINES_H

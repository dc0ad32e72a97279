//===- Driver.h - cleave's commands as a library ----------------*- C++ -*-===//
//
// What `cleave compile`, `cleave inspect` and `cleave export` do, callable
// in-process: the cleave binary and the Python package (python/) both drive
// them, so the two cannot drift apart.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_DRIVER_DRIVER_H
#define CLEAVE_DRIVER_DRIVER_H

#include "cleave/Driver/MeshChoice.h"
#include "cleave/Import/OnnxImporter.h"
#include "cleave/runtime/executor.h"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mlir {
class MLIRContext;
class DialectRegistry;
} // namespace mlir

namespace cleave::driver {

/// Registers the dialects and the rules (differentiation, sharding) every
/// command needs in \p context.
void setUpContext(mlir::MLIRContext &context);

/// The flags of `cleave compile`.
struct CompileOptions {
  std::string model;  ///< MODEL.onnx or MODEL.pt
  std::string output; ///< the bundle directory to write
  /// NAME -> "8x128xi64": fixed dims (and dtypes) of graph inputs.
  std::map<std::string, std::string> inputs;
  std::string loss = "auto", optimizer = "sgd";
  /// Defaults: 0.01 (sgd) or 0.001 (adamw); 0 (sgd) or 0.01 (adamw).
  std::optional<double> lr, weightDecay;
  double momentum = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  int64_t seed = 0, tp = 1;
  /// --tp-inner N: the tp ranks factored into tp / N groups of N
  /// neighbouring ranks, two mesh axes partitioned one after the other (K/V
  /// heads held per group); 1: one tp axis; 0: the compiler prices each
  /// factoring against one axis (a tp-only mesh; one axis otherwise).
  int64_t tpInner = 0;
  /// Data-parallel ranks (--mesh dp=N): the batch split, weights replicated.
  int64_t dp = 1;
  /// ZeRO stage over dp (--zero).
  int64_t zero = 0;
  /// --devices N: the compiler chooses dp x tp (and ZeRO) for N devices
  /// (MeshChoice.h); 0: the mesh is given (tp, dp, zero).
  int64_t devices = 0;
  /// --memory-per-device: a candidate needing more per rank is refused
  /// (with --devices, or for the mesh given, which --recompute auto then
  /// fits); 0: no budget.
  int64_t memoryPerDevice = 0;
  /// --link, --node-size, --device-tflops: what --devices costs against.
  Topology topology;
  std::string planFile, weightsFile;
  /// --max-archive-bytes: a TorchScript archive's inflated-size budget (0:
  /// OnnxImportOptions' default).
  uint64_t maxArchiveBytes = 0;
  bool planOnly = false;
  /// --no-fusion: keep attention and cross-entropy as the exporter and the
  /// loss's builder wrote them.
  bool fusion = true;
  /// Regular expressions of initializers not to train (--freeze); each must
  /// match one.
  std::vector<std::string> freeze;
  /// Exact names of initializers not to train; names the model does not
  /// hold are ignored (buffers a front end folded into constants).
  std::vector<std::string> frozenNames;
  /// Where set, receives the line saying what trains: how many tensors,
  /// which are frozen, and the scalar ones that train (every float
  /// initializer trains unless frozen, a learned temperature as a weight
  /// matrix does).
  std::function<void(const std::string &)> report;
  /// --precision: "f32", or mixed precision "bf16" / "fp16" (f32 masters,
  /// the matmuls and convolutions on half-precision copies).
  std::string precision = "f32";
  /// --recompute: what the forward keeps for the backward: "none",
  /// "selective", "full", or "auto" (the least that fits memoryPerDevice;
  /// none without a budget).
  std::string recompute = "auto";
  /// --sequence-parallel: "on", "off", or "auto" (tried where the budget
  /// is not met without it).
  std::string sequenceParallel = "auto";
  /// --lr-schedule, --warmup-steps, --total-steps: the learning rate's
  /// schedule (Hugging Face's names), which the runtime feeds the step.
  std::string lrSchedule = "constant";
  int64_t warmupSteps = 0, totalSteps = 0;
  /// --clip-grad-norm, --clip-grad-value: gradient clipping (0: none).
  double clipGradNorm = 0, clipGradValue = 0;
  /// --on-nonfinite: a step with an inf or NaN loss or gradient "stop"s
  /// the run (its update withheld), is "skip"ped, or is applied ("ignore",
  /// the default until the gate's selects are planned in place).
  std::string onNonfinite = "ignore";
  /// --accumulate: micro-batches whose gradients one update sums.
  int64_t accumulate = 1;
  /// The model exported in eval mode (dropout off, BatchNorm on running
  /// statistics), where that differs from \c model: the bundle then also
  /// carries its forward pass ("forward_eval", Model.eval()).
  std::string evalModel;
  /// --no-forward-pass clears it: no forward programs in the bundle.
  bool forwardPass = true;
  /// The model exported without its labels (an HF-style forward(input_ids,
  /// labels=None) then returns its logits) and that in eval mode: forward
  /// passes only, beside those of \c model, for batches without labels.
  std::string unlabeledModel, unlabeledEvalModel;
  /// A batch shape beyond the first: the model exported for it (empty:
  /// \c model), its inputs' specs on top of \c inputs, and its exports as
  /// \c evalModel, \c unlabeledModel and \c unlabeledEvalModel are.
  struct BatchShape {
    std::string model, evalModel;
    std::map<std::string, std::string> inputs;
    std::string unlabeledModel, unlabeledEvalModel;
  };
  /// --shape, or Python's list of example batches: each shape gets a train
  /// step (and forward passes) of its own, splitting every state tensor as
  /// the first shape's step does, so one set of weights trains on all.
  std::vector<BatchShape> moreShapes;
};

/// Loads MODEL (ONNX, or TorchScript translated with the \p inputs shapes)
/// and fills \p options' input specs from \p inputs.
rt::Status loadModel(mlir::MLIRContext &context, const std::string &path,
                     const std::map<std::string, std::string> &inputs,
                     mlir::cleave::OnnxImportOptions &options,
                     std::unique_ptr<mlir::cleave::OnnxModel> *model);

/// `cleave compile`: imports, differentiates, shards and writes the bundle.
/// Errors that MLIR reports as diagnostics go to \p context's handler and
/// come back as an error with an empty message.
rt::Status compileBundle(mlir::MLIRContext &context,
                         const CompileOptions &options);

/// `cleave inspect [--json]`: the bundle's mesh, layouts, collectives and
/// memory, as the table or as one JSON document.
rt::Status inspectBundle(const std::string &bundle, bool json,
                         std::string *out);

} // namespace cleave::driver

#endif // CLEAVE_DRIVER_DRIVER_H

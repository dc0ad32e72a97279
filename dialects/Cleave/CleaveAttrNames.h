//===- CleaveAttrNames.h - The IR's cleave.* attributes ---------*- C++ -*-===//
//
// Every `cleave.*` attribute the pipeline puts on ops, functions, their
// arguments and results, declared once, with what it holds. The dialect
// verifies them (CleaveDialect.cpp: verifyOperationAttribute and the
// region argument/result hooks): a misspelt name or a value of the wrong
// kind is an error of the IR, not a silent miss in a later stage.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_DIALECT_CLEAVEATTRNAMES_H
#define CLEAVE_DIALECT_CLEAVEATTRNAMES_H

#include "llvm/ADT/StringRef.h"

namespace mlir::cleave {

//===--- Roles of a function's arguments and results ----------------------===//

/// Argument: a graph input (a string: its name).
constexpr llvm::StringLiteral kInputAttr = "cleave.input";
/// Argument: a parameter (weights: values outside the IR), by name; on a
/// result, its updated value.
constexpr llvm::StringLiteral kParameterAttr = "cleave.parameter";
/// Argument, beside cleave.parameter: a weight that does not train (a frozen
/// base under adapters, --freeze). It is split like any weight but has no
/// gradient, no optimizer state and no updated value (a unit attribute).
constexpr llvm::StringLiteral kFrozenAttr = "cleave.frozen";
/// Result: a graph output, by name.
constexpr llvm::StringLiteral kOutputAttr = "cleave.output";
/// Non-trainable float state (BatchNorm running statistics); on an argument
/// its current value, on a result its updated value. A string: the name.
constexpr llvm::StringLiteral kBufferAttr = "cleave.buffer";
/// The 1-based number of the training step being run (i64 scalar argument;
/// a unit attribute).
constexpr llvm::StringLiteral kStepAttr = "cleave.step";
/// Argument, beside cleave.input: the micro-batch of the update this copy
/// of the input feeds (cleave-autodiff's micro-batches; an i64, 1 to N-1;
/// absent: 0).
constexpr llvm::StringLiteral kMicroBatchAttr = "cleave.micro_batch";
/// Result: the scalar loss (unit attribute).
constexpr llvm::StringLiteral kLossAttr = "cleave.loss";
/// Argument: an optimizer hyperparameter the runtime feeds each step, by
/// name ("lr": the learning rate of the run's schedule; an f32 scalar).
constexpr llvm::StringLiteral kHyperparameterAttr = "cleave.hyperparameter";
/// Result: a scalar the step reports, by name ("grad_norm": the global
/// gradient norm before clipping).
constexpr llvm::StringLiteral kMetricAttr = "cleave.metric";
/// On an op the loss does not read that the step computes in its forward
/// nonetheless (--cleave-save-derivatives' factors): the passes that tell
/// saved values from backward ones count it with the forward.
constexpr llvm::StringLiteral kForwardAttr = "cleave.forward";
/// On an op --cleave-recompute copied from the forward into the backward:
/// it makes again what the step did not keep (inspect counts its FLOPs).
constexpr llvm::StringLiteral kRecomputedAttr = "cleave.recomputed";
/// Result: the gradient of the named parameter.
constexpr llvm::StringLiteral kGradientAttr = "cleave.gradient";
/// Argument or result: optimizer state, an array ["parameter", "slot"].
constexpr llvm::StringLiteral kOptimizerStateAttr = "cleave.optimizer_state";

//===--- Tensor parallelism -----------------------------------------------===//

/// Module: the device mesh shape (array<i64>); axis 0 is "tp".
constexpr llvm::StringLiteral kMeshAttr = "cleave.mesh";
/// Module: the mesh axes' names, comma-separated ("dp"), where they are not
/// the default "tp".
constexpr llvm::StringLiteral kMeshAxesAttr = "cleave.mesh_axes";
/// Argument/result of the partitioned function: how it is split over the
/// mesh (a #cleave.layout: the dimension split over the first axis, its
/// blocks and granule, and ZeRO's dimension over dp), absent when whole.
constexpr llvm::StringLiteral kLayoutAttr = "cleave.layout";
/// Function: the tp the layouts on its parameters were chosen for
/// (--cleave-choose-layouts; i64): a parameter without cleave.layout is
/// replicated. Parameter argument: what its cheapest other layout would
/// have cost, in words (a string), for the reasons of the collectives the
/// chosen one causes.
constexpr llvm::StringLiteral kLayoutsForAttr = "cleave.layouts_for";
constexpr llvm::StringLiteral kLayoutWhyAttr = "cleave.layout_why";
/// Function: how the search scored the layouts it recorded, which the
/// partitioner then applies them by: comma-separated, of
/// "embed_products" and "partial_fan_out" (PartitionOptions), or "".
constexpr llvm::StringLiteral kPartitionHowAttr = "cleave.partition_how";
/// Argument of a parameter that is one piece of a model tensor
/// (cleave-segment-parameters): the tensor's name (a string), and the piece
/// as [dim, offset, size] along that one dimension (array<i64>).
constexpr llvm::StringLiteral kSegmentOfAttr = "cleave.segment_of";
constexpr llvm::StringLiteral kSegmentAttr = "cleave.segment";
/// Collective: the phase of the train step that needs it ("forward",
/// "backward", "optimizer").
constexpr llvm::StringLiteral kPhaseAttr = "cleave.phase";
/// Collective: why the partitioner needed it (a string), and a unit
/// attribute where it is one of Megatron's own reductions.
constexpr llvm::StringLiteral kReasonAttr = "cleave.reason";
constexpr llvm::StringLiteral kMegatronAttr = "cleave.megatron";
/// On a collective: the step's value it sums or gathers, as "AXIS:ID" (the
/// partitioner's id, seen through reshapes and transposes), so a check can
/// tell that no two collectives carry one value.
constexpr llvm::StringLiteral kCarriesAttr = "cleave.carries";
/// On a collective: where the value it carries was made (the location of
/// the contraction that left it partial, or of the op that made it), which
/// `cleave inspect` groups by layer.
constexpr llvm::StringLiteral kOriginAttr = "cleave.origin";
/// all_reduce of one gradient: the bucket (i64, unique in its function) the
/// partitioner priced it in; --cleave-bucket-gradients sums each bucket's
/// members as one flat tensor and drops the attribute.
constexpr llvm::StringLiteral kBucketAttr = "cleave.bucket";
/// Partitioned gather / scatter_add: the mesh axes (array<i64>) over which
/// its table (result) is split along the gather axis, and the table's real
/// extent (i64) when the ranks' chunks are padded.
constexpr llvm::StringLiteral kShardAxesAttr = "cleave.shard_axes";
constexpr llvm::StringLiteral kShardSizeAttr = "cleave.shard_size";

//===--- Autodiff, lowering, import ---------------------------------------===//

/// Op: its results do not propagate gradients (unit attribute; the max
/// subtracted before an exponential for stability).
constexpr llvm::StringLiteral kNoGradAttr = "cleave.no_grad";
/// Op: one arena byte offset per result, -1 for a view (array<i64>).
constexpr llvm::StringLiteral kOffsetsAttr = "cleave.offsets";
/// Function: arena size in bytes (i64).
constexpr llvm::StringLiteral kArenaBytesAttr = "cleave.arena_bytes";
/// Module: the default-domain opset of the imported ONNX model (i64).
constexpr llvm::StringLiteral kOnnxOpsetAttr = "cleave.onnx_opset";
/// Op, printed by --cleave-print-sharding-rules for tests (a string).
constexpr llvm::StringLiteral kShardingRuleAttr = "cleave.sharding_rule";
/// Function: the half-precision type its matmuls and convolutions run in
/// ("bf16" or "fp16"), set by --cleave-mixed-precision; absent: f32.
constexpr llvm::StringLiteral kPrecisionAttr = "cleave.precision";

} // namespace mlir::cleave

#endif // CLEAVE_DIALECT_CLEAVEATTRNAMES_H

//===- Bundle.h - Writing bundles, exporting trained models -----*- C++ -*-===//

#ifndef CLEAVE_DRIVER_BUNDLE_H
#define CLEAVE_DRIVER_BUNDLE_H

#include "cleave/Import/OnnxImporter.h"
#include "cleave/runtime/executor.h"
#include "cleave/runtime/safetensors.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <string>

namespace cleave::plan {
class Plan;
class Program;
class TensorEntry;
} // namespace cleave::plan

namespace cleave::driver {

/// Where `cleave compile` takes the weights from: the model's initializers
/// (inline or external data), or a safetensors checkpoint with the same
/// names: one file, or Hugging Face's sharded form (an index and its shard
/// files). Tensors are read one at a time, so a compile holds at most the
/// largest.
class WeightSource {
public:
  WeightSource(mlir::MLIRContext &ctx, const mlir::cleave::OnnxModel &model)
      : ctx(ctx), model(model) {}
  /// Uses \p path (--weights) instead of the initializers: a .safetensors
  /// file, or a sharded checkpoint's index (NAME.safetensors.index.json,
  /// whose weight_map names each tensor's shard, a file beside it).
  rt::Status useSafetensors(const std::string &path);
  rt::Status read(const std::string &name, rt::HostTensor *out) const;
  /// The dtype --weights stores \p name in, if it has it.
  std::optional<rt::DType> storedDType(const std::string &name) const;
  /// \p entry's initial value: its initializer, or its piece of one.
  rt::Status read(const plan::TensorEntry &entry, rt::HostTensor *out) const;
  /// Initializer \p name from the model itself (not --weights).
  rt::Status readFromModel(const std::string &name, rt::HostTensor *out) const;

private:
  mlir::MLIRContext &ctx;
  const mlir::cleave::OnnxModel &model;
  rt::Status useIndex(const std::string &path);
  /// --weights as given (for messages), its files, and the file holding
  /// each tensor (an index into files).
  std::string weightsPath;
  std::vector<std::unique_ptr<rt::SafetensorsFile>> files;
  llvm::StringMap<size_t> fileOf;
};

/// Writes \p bundle atomically (a temporary directory swapped in): \p plan
/// with the tensor table of \p main's parameters and buffers (global shapes,
/// layouts, each rank's slice), weights/rank-K.safetensors read one tensor
/// at a time from \p weights, and model.onnx (the source graph without the
/// trained tensors' data). \p planOnly: the plan alone, nothing read.
/// Whether -o \p target may be replaced by a bundle: absent, an empty
/// folder, or a bundle.
rt::Status checkReplaceable(const std::string &target);

rt::Status writeBundle(const mlir::cleave::OnnxModel &model,
                       const WeightSource &weights, mlir::func::FuncOp main,
                       plan::Plan &plan, const std::string &bundle,
                       bool planOnly);

/// `cleave export SOURCE -o OUTPUT`: the trained (or initial) parameters and
/// buffers of a checkpoint or bundle, whole, as the original ONNX model
/// (OUTPUT.onnx) or a safetensors file of them under their names;
/// \p trainableOnly: only the tensors that train (PEFT's adapter-only
/// save), as safetensors.
/// "input_ids int64[4, 32], labels int64[4, 32]": the global batch a train
/// step \p program on \p dp data-parallel ranks takes (its first
/// micro-batch's inputs).
std::string batchShapeText(const ::cleave::plan::Program &program, int64_t dp);

rt::Status exportModel(const std::string &source, const std::string &output,
                       bool trainableOnly = false);

} // namespace cleave::driver

#endif // CLEAVE_DRIVER_BUNDLE_H

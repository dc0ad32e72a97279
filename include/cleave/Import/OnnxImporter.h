//===- OnnxImporter.h - ONNX model to cleave IR -----------------*- C++ -*-===//

#ifndef CLEAVE_IMPORT_ONNXIMPORTER_H
#define CLEAVE_IMPORT_ONNXIMPORTER_H

#include "mlir/IR/Block.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/DenseMap.h"
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace onnx {
class ModelProto;
} // namespace onnx

namespace mlir::cleave {

/// The ONNX domain of Cleave's own ops: what its TorchScript translator
/// writes where ONNX has no op (PaddedGather: a lookup whose padding row
/// takes no gradient).
inline constexpr const char *kCleaveDomain = "ai.cleave";

/// A user's fixing of a graph input: its dims and, optionally, its element
/// type (`--input NAME=8x128xi64`).
struct InputSpec {
  std::vector<int64_t> shape;
  Type elementType; // null: keep the model's
};

/// Parses "8x128" or "8x128xi64" (also f32, i32, bool) into \p spec. Returns
/// an error message, empty on success.
std::string parseInputSpec(MLIRContext *context, const std::string &text,
                           InputSpec &spec);

/// Replaces the ops in [begin, end) whose operands are all constants, and
/// whose results hold at most maxElements elements, with constants, mapping
/// each folded result to its constant. lib/Evaluate's foldConstantOps is
/// one: it runs the runtime's kernels, so folding and execution cannot
/// disagree. That stage comes after import in the pipeline, so the importer
/// is handed it rather than linking it.
using ConstantFolder = void (*)(Block::iterator begin, Block::iterator end,
                                DenseMap<Value, Value> &replaced,
                                int64_t maxElements);

/// Results above this many elements stay computed at run time.
inline constexpr int64_t kMaxFoldedElements = 1 << 16;

struct OnnxImportOptions {
  /// Folds what each node computes from constants, so that later nodes
  /// needing compile-time values (a Reshape's shape, a Range's bounds) find
  /// them. Null: nothing folds, and such models are refused.
  ConstantFolder foldConstants = nullptr;
  /// Fixed dims (and dtypes) of graph inputs, by name.
  std::map<std::string, InputSpec> inputs;
  /// Values of graph inputs, used only where the model needs a compile-time
  /// constant (a Reshape's shape, a Range's bounds): the program is
  /// specialised to them. The inputs stay function arguments.
  std::map<std::string, DenseElementsAttr> knownInputs;
  /// Seed of the random streams (training-mode Dropout).
  int64_t seed = 0;
  /// Regular expressions (llvm::Regex, matched anywhere in the name) of
  /// float initializers that are state rather than trainable weights
  /// (registered buffers that ONNX cannot tell from parameters).
  std::vector<std::string> frozen;
  /// Frozen float weights a checkpoint holds in bf16 or f16 (name -> that
  /// type): nothing trains them, so they keep its bytes and are widened
  /// where they are read (a weight-only matmul reads them as they are).
  llvm::StringMap<Type> heldTypes;
  /// A TorchScript archive's records may inflate to at most this many bytes
  /// in all (--max-archive-bytes); 0: 64 times the archive's size, at least
  /// 1 GiB. Checked on the zip directory before libtorch inflates anything.
  uint64_t maxArchiveBytes = 0;
  /// Out: the float initializers frozen because they hold a value that is
  /// not finite (a causal mask's -inf), for the compile summary to name.
  std::vector<std::string> *notFinite = nullptr;
};

/// Raw element data of one tensor of the model (an initializer).
struct TensorData {
  Type elementType;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes; // little-endian, row-major
};

/// \p data as a constant attribute.
DenseElementsAttr tensorDataToAttr(const TensorData &data);

/// A parsed ONNX model and the directory its external data is relative to.
class OnnxModel {
public:
  /// Loads \p path. On failure returns null and sets \p error to a message
  /// naming the file and the cause.
  static std::unique_ptr<OnnxModel> load(const std::string &path,
                                         std::string &error);
  /// Wraps a model built in memory (the TorchScript front end's); external
  /// data would be relative to \p path's directory.
  static std::unique_ptr<OnnxModel>
  fromProto(std::unique_ptr<onnx::ModelProto> proto, const std::string &path);
  ~OnnxModel();
  const onnx::ModelProto &proto() const { return *proto_; }
  const std::string &path() const { return path_; }
  /// Names of the graph inputs that are not initializers, in order.
  std::vector<std::string> graphInputNames() const;
  /// The dims of initializer \p name, without reading its data.
  FailureOr<std::vector<int64_t>> initializerShape(const std::string &name,
                                                   std::string &error) const;
  /// The ONNX data type of initializer \p name (TensorProto::DataType), 0
  /// if there is none.
  int32_t initializerDataType(const std::string &name) const;
  /// Reads initializer \p name (inline or external data).
  FailureOr<TensorData> readInitializer(MLIRContext *context,
                                        const std::string &name,
                                        std::string &error) const;

private:
  OnnxModel();
  std::unique_ptr<onnx::ModelProto> proto_;
  std::string path_;
};

/// Reads a serialized ONNX TensorProto file (the test suite's .pb files);
/// \p name receives the tensor's name.
FailureOr<TensorData> readOnnxTensorFile(MLIRContext *context,
                                         const std::string &path,
                                         std::string &name, std::string &error);

/// Whether the importer has a handler for default-domain \p op at \p opset.
bool isOnnxOpSupported(const std::string &op, int64_t opset);

/// Imports \p model into a module holding `func.func @main`. Graph inputs
/// become arguments tagged `cleave.input`, float initializers arguments
/// tagged `cleave.parameter` (after the inputs), integer initializers
/// constants; graph outputs are results tagged `cleave.output`. Errors are
/// emitted as diagnostics naming the node, its op and the opset.
OwningOpRef<ModuleOp> importOnnx(MLIRContext *context, const OnnxModel &model,
                                 const OnnxImportOptions &options);

} // namespace mlir::cleave

#endif // CLEAVE_IMPORT_ONNXIMPORTER_H

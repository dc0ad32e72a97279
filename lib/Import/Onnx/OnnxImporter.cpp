//===- OnnxImporter.cpp - ONNX model to cleave IR ---------------*- C++ -*-===//
//
// Loads the protobuf, walks the graph in its (topological) order and hands
// every node to the handler its (op, since-version) selects. Tensors are
// decoded in Tensors.cpp; handlers live in Elementwise.cpp, Shape.cpp,
// Neural.cpp and their neighbours.
//
//===----------------------------------------------------------------------===//

#include "cleave/Import/OnnxImporter.h"
#include "Cleave/CleaveAttrNames.h"
#include "Cleave/TensorSize.h"
#include "NodeContext.h"
#include "Tensors.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Regex.h"
#include <climits>
#include <cmath>
#include <cstring>

using namespace mlir;
using namespace mlir::cleave;
using namespace mlir::cleave::onnx_import;

/// The newest default-domain opset whose operators Cleave was written
/// against (ONNX 1.16).
static constexpr int64_t kNewestOpset = 21;
/// The IR version of ONNX 1.16, the release that brought opset 21.
static constexpr int64_t kNewestIrVersion = 10;

//===----------------------------------------------------------------------===//
// OnnxModel
//===----------------------------------------------------------------------===//

OnnxModel::OnnxModel() : proto_(std::make_unique<onnx::ModelProto>()) {}
OnnxModel::~OnnxModel() = default;

std::unique_ptr<OnnxModel>
OnnxModel::fromProto(std::unique_ptr<onnx::ModelProto> proto,
                     const std::string &path) {
  std::unique_ptr<OnnxModel> model(new OnnxModel());
  model->proto_ = std::move(proto);
  model->path_ = path;
  return model;
}

std::unique_ptr<OnnxModel> OnnxModel::load(const std::string &path,
                                           std::string &error) {
  // A FIFO would block the read forever; a directory reads as an error
  // message no user would understand.
  llvm::sys::fs::file_status status;
  if (!llvm::sys::fs::status(path, status) &&
      status.type() != llvm::sys::fs::file_type::regular_file) {
    error = "cannot read model '" + path + "': it is not a regular file";
    return nullptr;
  }
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer) {
    error = "cannot read '" + path + "': " + buffer.getError().message();
    return nullptr;
  }
  std::unique_ptr<OnnxModel> model(new OnnxModel());
  model->path_ = path;
  const llvm::MemoryBuffer &buf = **buffer;
  if (buf.getBufferSize() > static_cast<size_t>(INT_MAX)) {
    error = "'" + path +
            "' is larger than 2 GiB, the most a protobuf holds: "
            "keep the weights as ONNX external data";
    return nullptr;
  }
  if (buf.getBufferSize() == 0 ||
      !model->proto_->ParseFromArray(buf.getBufferStart(),
                                     static_cast<int>(buf.getBufferSize()))) {
    error = "'" + path +
            "' is not a valid ONNX model (malformed or truncated "
            "protobuf)";
    return nullptr;
  }
  const onnx::GraphProto &graph = model->proto_->graph();
  if (!model->proto_->has_graph() ||
      (graph.node_size() == 0 && graph.output_size() == 0)) {
    error = "'" + path + "' is not a valid ONNX model (no graph)";
    return nullptr;
  }
  return model;
}

std::vector<std::string> OnnxModel::graphInputNames() const {
  llvm::StringSet<> initializers;
  for (const auto &t : proto_->graph().initializer())
    initializers.insert(t.name());
  std::vector<std::string> names;
  for (const auto &in : proto_->graph().input())
    if (!initializers.contains(in.name()))
      names.push_back(in.name());
  return names;
}

FailureOr<std::vector<int64_t>>
OnnxModel::initializerShape(const std::string &name, std::string &error) const {
  for (const onnx::TensorProto &t : proto_->graph().initializer())
    if (t.name() == name)
      return std::vector<int64_t>(t.dims().begin(), t.dims().end());
  error = "no initializer named '" + name + "'";
  return failure();
}

int32_t OnnxModel::initializerDataType(const std::string &name) const {
  for (const onnx::TensorProto &t : proto_->graph().initializer())
    if (t.name() == name)
      return t.data_type();
  return 0;
}

FailureOr<TensorData> OnnxModel::readInitializer(MLIRContext *context,
                                                 const std::string &name,
                                                 std::string &error) const {
  for (const onnx::TensorProto &t : proto_->graph().initializer()) {
    if (t.name() != name)
      continue;
    std::string why;
    FailureOr<TensorData> data =
        decodeTensor(context, t, modelFolder(path_), why);
    if (failed(data))
      error = "initializer '" + name + "' " + why;
    return data;
  }
  error = "no initializer named '" + name + "'";
  return failure();
}

std::string mlir::cleave::parseInputSpec(MLIRContext *context,
                                         const std::string &text,
                                         InputSpec &spec) {
  SmallVector<StringRef> parts;
  StringRef(text).split(parts, 'x');
  spec = InputSpec();
  Builder b(context);
  for (auto [i, part] : llvm::enumerate(parts)) {
    int64_t dim;
    if (!part.getAsInteger(10, dim) && dim >= 0) {
      spec.shape.push_back(dim);
      continue;
    }
    if (i + 1 == parts.size() && i > 0) {
      // "8x128xi64": the last part may be the element type.
      Type t = llvm::StringSwitch<Type>(part)
                   .Case("f32", b.getF32Type())
                   .Case("i64", b.getI64Type())
                   .Case("i32", b.getI32Type())
                   .Case("bool", b.getI1Type())
                   .Case("i1", b.getI1Type())
                   .Case("f64", b.getF64Type())
                   .Case("f16", b.getF16Type())
                   .Case("bf16", b.getBF16Type())
                   .Case("i8", b.getI8Type())
                   .Case("i16", b.getI16Type())
                   .Case("u8", b.getIntegerType(8, false))
                   .Case("u16", b.getIntegerType(16, false))
                   .Case("u32", b.getIntegerType(32, false))
                   .Default(Type());
      if (t) {
        spec.elementType = t;
        continue;
      }
    }
    return "bad dimension or type '" + part.str() + "' in '" + text +
           "' (expected e.g. 8x128 or 8x128xi64)";
  }
  return "";
}

//===----------------------------------------------------------------------===//
// HandlerTable
//===----------------------------------------------------------------------===//

std::pair<Handler, int64_t> HandlerTable::lookup(StringRef op,
                                                 int64_t opset) const {
  auto it = table.find(op);
  if (it == table.end())
    return {nullptr, 0};
  Handler best = nullptr;
  int64_t bestVersion = 0;
  for (auto [version, handler] : it->second)
    if (version <= opset && version > bestVersion) {
      best = handler;
      bestVersion = version;
    }
  return {best, bestVersion};
}

static const HandlerTable &handlers() {
  static const HandlerTable table = [] {
    HandlerTable t;
    registerElementwiseHandlers(t);
    registerActivationHandlers(t);
    registerShapeHandlers(t);
    registerNeuralHandlers(t);
    registerIndexingHandlers(t);
    registerResizeHandlers(t);
    registerControlFlowHandlers(t);
    registerRecurrentHandlers(t);
    registerSequenceHandlers(t);
    return t;
  }();
  return table;
}

bool mlir::cleave::isOnnxOpSupported(const std::string &op, int64_t opset) {
  return handlers().lookup(op, opset).first != nullptr;
}

FailureOr<TensorData> mlir::cleave::readOnnxTensorFile(MLIRContext *context,
                                                       const std::string &path,
                                                       std::string &name,
                                                       std::string &error) {
  // A FIFO would block the read forever; a directory reads as an error
  // message no user would understand.
  llvm::sys::fs::file_status status;
  if (!llvm::sys::fs::status(path, status) &&
      status.type() != llvm::sys::fs::file_type::regular_file) {
    error = "cannot read tensor file '" + path + "': it is not a regular file";
    return failure();
  }
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer) {
    error = "cannot read '" + path + "': " + buffer.getError().message();
    return failure();
  }
  onnx::TensorProto tensor;
  if (!tensor.ParseFromArray((*buffer)->getBufferStart(),
                             static_cast<int>((*buffer)->getBufferSize()))) {
    error = "'" + path + "' is not a valid TensorProto";
    return failure();
  }
  name = tensor.name();
  std::string why;
  FailureOr<TensorData> data =
      decodeTensor(context, tensor, modelFolder(path), why);
  if (failed(data))
    error = "'" + path + "' " + why;
  return data;
}

//===----------------------------------------------------------------------===//
// GraphImporter
//===----------------------------------------------------------------------===//

namespace mlir::cleave::onnx_import {
class GraphImporter {
public:
  GraphImporter(MLIRContext *context, const OnnxModel &model,
                const OnnxImportOptions &options)
      : context(context), model(model), options(options) {}

  OwningOpRef<ModuleOp> run();
  /// \p v's value when it is computed, through at most a few dozen ops,
  /// from constants and inputs whose values --forward gives (float inputs
  /// are specialised only here, where a compile-time value is required: a
  /// Loop's trip count computed from a Range's float bounds).
  std::optional<DenseElementsAttr> evaluate(Value v);
  /// Imports one node at \p builder's insertion point (also a subgraph's,
  /// through NodeContext::importSubgraph).
  LogicalResult importNode(const onnx::NodeProto &node, int64_t opset,
                           OpBuilder &builder);
  /// Rounds (or wraps) a node's results that hold a storage dtype
  /// (float16, int8...) to it, and records which they are.
  void narrowOutputs(const onnx::NodeProto &node, OpBuilder &builder,
                     Location loc);
  /// The storage element type of values that have one (computeTypeOf).
  llvm::StringMap<Type> storageTypes;
  /// Nodes imported from subgraphs so far (If branches, each unrolled
  /// iteration of each Loop, nested ones included): bounded, so the IR
  /// stays within a multiple of the file however loops nest.
  int64_t subgraphNodes = 0;

  MLIRContext *context;
  const OnnxModel &model;
  const OnnxImportOptions &options;
  llvm::StringMap<Value> values;
  /// ONNX sequences (SplitToSequence, SequenceConstruct...): their elements,
  /// each a tensor value; every op on them is resolved at import.
  llvm::StringMap<SmallVector<Value>> sequences;
  llvm::StringMap<DenseElementsAttr> known;
  /// Arguments whose values --forward gives (for evaluate).
  DenseMap<BlockArgument, DenseElementsAttr> knownArguments;
  /// The node that wrote each value, for errors.
  llvm::StringMap<std::string> producers;
  /// Initializers that are non-trainable state (BatchNorm statistics).
  llvm::StringSet<> buffers;
  /// Weights --freeze matches: parameters that do not train, split like any
  /// other weight (BatchNorm statistics it matches stay buffers).
  llvm::StringSet<> frozen;
  /// int8 matrices read only through a Cast to a float: weight-only
  /// quantized weights (LLM.int8, GPTQ int8), frozen and split like any
  /// weight at one byte an element rather than constants of the plan.
  llvm::StringSet<> quantized;
  /// New values of buffers computed by the graph, in order of computation.
  llvm::MapVector<StringRef, Value> bufferUpdates;
  /// The float initializers that are arguments (weights), by name.
  llvm::StringMap<const onnx::TensorProto *> weights;
  /// Weights a node read where it needs a compile-time value (a Dropout's
  /// ratio, Range's bounds, a Pow's exponent): that value is the graph's,
  /// so they do not train (freezeBaked).
  llvm::StringSet<> baked;
  /// The value weight \p name holds (in its compute type), if it decodes.
  std::optional<DenseElementsAttr> weightValue(StringRef name);
  /// Whether float initializer \p t holds a value that is not finite.
  bool holdsNonFinite(const onnx::TensorProto &t, const std::string &baseDir);
  /// The value of weight \p name, for a node that needs it at compile time
  /// (NodeContext::constantInput); the weight is then baked.
  std::optional<DenseElementsAttr> bakeWeight(StringRef name) {
    std::optional<DenseElementsAttr> v = weightValue(name);
    if (v)
      baked.insert(name);
    return v;
  }
  func::FuncOp func;
  /// The step-number argument, added when a node first needs it.
  Value step;
  int64_t nextStream = 0;

private:
  /// The model's default-domain opset, checked against what Cleave knows.
  FailureOr<int64_t> readOpset(Location loc);
  /// Checks --input names and marks the buffers (BatchNorm statistics) and
  /// the frozen weights (what --freeze matches).
  LogicalResult markBuffers(const llvm::StringSet<> &initializerNames,
                            Location loc);
  /// Fills `quantized`: int8 initializers of rank >= 2 whose every reader
  /// is a Cast to a float type.
  void markQuantized(const llvm::StringSet<> &initializerNames);
  /// Freezes each quantized weight's scales: the float initializers the
  /// widened weight is multiplied by (through reshapes and unsqueezes),
  /// part of the same checkpoint tensor; ONNX cannot say they are buffers.
  void freezeScales(const llvm::StringSet<> &initializerNames);
  /// Baked weights no op reads any more are removed (the literals of an
  /// exporter that stores them as initializers); the others are frozen.
  void freezeBaked();
  /// The arguments of @main: graph inputs, then float initializers;
  /// other initializers become known constants.
  LogicalResult
  declareArguments(const llvm::StringSet<> &initializerNames, Location loc,
                   SmallVector<Type> &argTypes,
                   SmallVector<std::pair<StringRef, std::string>> &argNames);
  /// Graph output \p out, checked against its declared type.
  FailureOr<Value> graphOutput(const onnx::ValueInfoProto &out,
                               OpBuilder &builder, Location loc);
  Location fileLoc() {
    return FileLineColLoc::get(context, model.path(), 0, 0);
  }
};
} // namespace mlir::cleave::onnx_import

/// The declared type of a graph input/output, with the user's overrides.
static FailureOr<RankedTensorType>
valueInfoType(MLIRContext *context, const onnx::ValueInfoProto &info,
              const InputSpec *spec, Location loc, StringRef role) {
  if (!info.type().has_tensor_type())
    return emitError(loc) << role << " '" << info.name()
                          << "' is not a tensor (sequences, maps and "
                             "optionals are not supported)";
  const auto &tt = info.type().tensor_type();
  Type element = spec && spec->elementType
                     ? spec->elementType
                     : elementTypeFromOnnx(context, tt.elem_type());
  if (!element)
    return emitError(loc) << role << " '" << info.name()
                          << "' has unsupported element type "
                          << onnxTypeName(tt.elem_type());
  // Every later size computation multiplies these dims: their byte count
  // must fit in 63 bits.
  auto sized = [&](ArrayRef<int64_t> shape) -> FailureOr<RankedTensorType> {
    if (!checkedByteCount(shape, elementByteSize(element)))
      return emitError(loc) << role << " '" << info.name() << "' of shape ["
                            << shape << "] holds more bytes than fit in memory";
    return RankedTensorType::get(shape, element);
  };
  if (spec && !spec->shape.empty()) {
    if (tt.has_shape() &&
        tt.shape().dim_size() != static_cast<int>(spec->shape.size()))
      return emitError(loc)
             << "--input " << info.name() << " gives " << spec->shape.size()
             << " dims, the model has " << tt.shape().dim_size();
    return sized(spec->shape);
  }
  if (!tt.has_shape())
    return emitError(loc) << role << " '" << info.name()
                          << "' has no shape; give --input " << info.name()
                          << "=DIMS";
  SmallVector<int64_t> shape;
  for (const auto &dim : tt.shape().dim()) {
    if (dim.has_dim_value() && dim.dim_value() >= 0) {
      shape.push_back(dim.dim_value());
      continue;
    }
    return emitError(loc) << role << " '" << info.name()
                          << "' has an undetermined dimension"
                          << (dim.has_dim_param() ? " '" + dim.dim_param() + "'"
                                                  : std::string())
                          << "; fix it with --input " << info.name() << "=DIMS";
  }
  return sized(shape);
}

LogicalResult GraphImporter::importNode(const onnx::NodeProto &node,
                                        int64_t opset, OpBuilder &builder) {
  std::string label =
      node.name().empty()
          ? (node.output_size() ? node.output(0) : node.op_type())
          : node.name();
  Location loc = NameLoc::get(StringAttr::get(context, label), fileLoc());
  // Cleave's own domain: ops its TorchScript translator writes that ONNX
  // cannot express (PaddedGather).
  if (!node.domain().empty() && node.domain() != "ai.onnx" &&
      !(node.domain() == kCleaveDomain && node.op_type() == "PaddedGather"))
    return emitError(loc) << "node '" << label << "': unsupported op '"
                          << node.domain() << "." << node.op_type()
                          << "' (domain '" << node.domain()
                          << "' is not supported)";
  // Every value has one producer (ONNX's single static assignment): a
  // second node writing a name would silently replace the first's.
  for (const std::string &out : node.output())
    if (!out.empty() &&
        (values.count(out) || known.count(out) || sequences.count(out)))
      return emitError(loc)
             << "node '" << label << "' writes '" << out << "', which "
             << (producers.count(out) ? "node '" + producers[out] + "'"
                                      : std::string("a graph input or "
                                                    "initializer"))
             << " already defines";
  for (const std::string &out : node.output())
    if (!out.empty())
      producers[out] = label;
  auto [handler, since] = handlers().lookup(node.op_type(), opset);
  if (!handler) {
    if (handlers().knows(node.op_type()))
      return emitError(loc) << "node '" << label << "': op '" << node.op_type()
                            << "' at opset " << opset
                            << " is not supported (this version of the op "
                               "predates the ones Cleave implements)";
    return emitError(loc) << "node '" << label << "': unsupported op '"
                          << node.op_type() << "' (opset " << opset << ")";
  }
  for (const std::string &in : node.input())
    if (!in.empty() && !values.count(in) && !known.count(in) &&
        !sequences.count(in))
      return emitError(loc) << "node '" << label << "' (" << node.op_type()
                            << ", opset " << opset << "): input '" << in
                            << "' is not defined before its use";
  ImplicitLocOpBuilder b(loc, builder);
  NodeContext ctx(*this, node, opset, b);
  Block *block = builder.getInsertionBlock();
  Operation *before = block->empty() ? nullptr : &block->back();
  // Errors raised inside the handler (op verifiers, shape inference) are
  // re-issued with the node, op and opset, so every message names them.
  std::string prefix = "node '" + label + "' (" + node.op_type() + ", opset " +
                       std::to_string(opset) + "): ";
  SmallVector<std::string> captured;
  LogicalResult result = success();
  {
    ScopedDiagnosticHandler capture(context, [&](Diagnostic &diag) {
      if (diag.getSeverity() != DiagnosticSeverity::Error)
        return failure();
      std::string text = diag.str();
      captured.push_back(StringRef(text).starts_with("node '") ? text
                                                               : prefix + text);
      return success();
    });
    result = handler(ctx);
  }
  for (const std::string &text : captured)
    emitError(loc) << text;
  if (failed(result) || !captured.empty())
    return failure();
  // A shape computed from the model's constants (Reshape, Expand, Tile,
  // ConstantOfShape, broadcasting) may be too large to exist: stop at the
  // node that makes it, before anything folds or sizes it.
  for (Operation &op : llvm::make_range(
           before ? std::next(before->getIterator()) : block->begin(),
           block->end()))
    for (Type t : op.getResultTypes())
      if (!hasCheckedSize(t))
        return emitError(loc) << prefix << "it makes a tensor of type " << t
                              << ", which holds more bytes than fit in memory";
  // Fold what the node computed from constants, so later nodes that need
  // compile-time values (shapes, bounds) find them.
  DenseMap<Value, Value> replaced;
  if (options.foldConstants)
    options.foldConstants(before ? std::next(before->getIterator())
                                 : block->begin(),
                          block->end(), replaced, kMaxFoldedElements);
  for (const std::string &out : node.output()) {
    auto it = values.find(out);
    if (it != values.end())
      if (Value v = replaced.lookup(it->second))
        it->second = v;
    auto seq = sequences.find(out);
    if (seq != sequences.end())
      for (Value &element : seq->second)
        if (Value v = replaced.lookup(element))
          element = v;
  }
  for (const std::string &out : node.output())
    if (!out.empty() && !values.count(out) && !sequences.count(out))
      return emitError(loc)
             << "node '" << label << "' (" << node.op_type() << ", opset "
             << opset << "): output '" << out << "' was not produced";
  narrowOutputs(node, builder, loc);
  return success();
}

void GraphImporter::narrowOutputs(const onnx::NodeProto &node,
                                  OpBuilder &builder, Location loc) {
  // The storage type of the node's results: Cast's and Constant's own;
  // otherwise that of its first storage-typed operand (Add of float16s is
  // float16).
  Type storage;
  bool rounded = false; // the handler already rounds (Cast)
  if (node.op_type() == "Cast" || node.op_type() == "CastLike") {
    for (const auto &a : node.attribute())
      if (a.name() == "to")
        storage = elementTypeFromOnnx(context, a.i());
    if (node.op_type() == "CastLike" && node.input_size() > 1)
      storage = storageTypes.lookup(node.input(1));
    rounded = true;
  } else if (node.op_type() == "Constant") {
    for (const auto &a : node.attribute())
      if (a.name() == "value" && a.has_t())
        storage = elementTypeFromOnnx(context, a.t().data_type());
    rounded = true;
  } else {
    for (const std::string &in : node.input())
      if (Type t = storageTypes.lookup(in)) {
        storage = t;
        break;
      }
  }
  if (!storage)
    return;
  Type compute = computeTypeOf(storage);
  if (compute == storage)
    return;
  for (const std::string &out : node.output()) {
    auto it = values.find(out);
    if (out.empty() || it == values.end())
      continue;
    auto type = cast<RankedTensorType>(it->second.getType());
    if (type.getElementType() != compute)
      continue; // a shape, an index, a comparison: not of that type
    storageTypes[out] = storage;
    // Each op on float16 (or int8...) values rounds (or wraps) its result
    // to that type, as the model's arithmetic does; float64 is computed in
    // f32 without a per-op rounding to do.
    if (rounded || storage.isF64())
      continue;
    Value narrow =
        builder.createOrFold<CastOp>(loc, type.clone(storage), it->second);
    it->second = builder.createOrFold<CastOp>(loc, type, narrow);
  }
}

std::optional<DenseElementsAttr> GraphImporter::evaluate(Value v) {
  constexpr size_t kMaxOps = 64;
  if (!options.foldConstants || knownArguments.empty() || !v.getDefiningOp())
    return std::nullopt;
  // The ops v depends on, operands first; every leaf must be a constant
  // or a known argument.
  SetVector<Operation *> slice;
  SmallVector<Value> work = {v};
  while (!work.empty()) {
    Value w = work.pop_back_val();
    if (auto arg = dyn_cast<BlockArgument>(w)) {
      if (!knownArguments.count(arg))
        return std::nullopt;
      continue;
    }
    Operation *op = w.getDefiningOp();
    if (!op || op->getNumRegions() || slice.contains(op))
      continue;
    if (slice.size() == kMaxOps)
      return std::nullopt;
    slice.insert(op);
    llvm::append_range(work, op->getOperands());
  }
  SmallVector<Operation *> ordered(slice.begin(), slice.end());
  llvm::sort(ordered,
             [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  // Cloned into a scratch block with the arguments' values, folded there,
  // and dropped: the program itself stays general in its float inputs.
  OwningOpRef<ModuleOp> holder = ModuleOp::create(v.getLoc());
  Block &scratch = *holder->getBody();
  OpBuilder b = OpBuilder::atBlockEnd(&scratch);
  IRMapping map;
  for (auto [arg, value] : knownArguments)
    map.map(arg, ConstantOp::create(b, arg.getLoc(), value));
  for (Operation *op : ordered)
    b.clone(*op, map);
  DenseMap<Value, Value> replaced;
  options.foldConstants(scratch.begin(), scratch.end(), replaced,
                        kMaxFoldedElements);
  Value folded = map.lookup(v);
  if (Value r = replaced.lookup(folded))
    folded = r;
  DenseElementsAttr attr;
  std::optional<DenseElementsAttr> result;
  if (matchPattern(folded, m_Constant(&attr)))
    result = attr;
  return result;
}

/// Model-level facts no node check would catch: an IR version newer than
/// any Cleave knows (onnxruntime refuses those too), and a graph input that
/// names an initializer (its default value, before IR version 4) with
/// another type or shape: which of the two is meant cannot be told.
static LogicalResult checkModelHeader(const onnx::ModelProto &proto,
                                      Location loc) {
  if (proto.ir_version() > kNewestIrVersion)
    return emitError(loc) << "the model has ONNX IR version "
                          << proto.ir_version() << "; Cleave reads versions up "
                          << "to " << kNewestIrVersion
                          << " (export it with an older exporter)";
  const onnx::GraphProto &graph = proto.graph();
  llvm::StringMap<const onnx::TensorProto *> initializers;
  for (const auto &t : graph.initializer())
    initializers[t.name()] = &t;
  for (const onnx::ValueInfoProto &in : graph.input()) {
    auto it = initializers.find(in.name());
    if (it == initializers.end() || !in.type().has_tensor_type())
      continue;
    const onnx::TypeProto::Tensor &type = in.type().tensor_type();
    const onnx::TensorProto &init = *it->second;
    bool differs = type.elem_type() && type.elem_type() != init.data_type();
    if (type.has_shape()) {
      differs |= type.shape().dim_size() != init.dims_size();
      for (int i = 0; !differs && i < type.shape().dim_size(); ++i)
        differs |= type.shape().dim(i).has_dim_value() &&
                   type.shape().dim(i).dim_value() != init.dims(i);
    }
    if (differs)
      return emitError(loc)
             << "graph input '" << in.name()
             << "' has the name of an initializer but another type or shape";
  }
  return success();
}

FailureOr<int64_t> GraphImporter::readOpset(Location loc) {
  const onnx::ModelProto &proto = model.proto();
  if (failed(checkModelHeader(proto, loc)))
    return failure();
  int64_t opset = -1;
  for (const auto &imp : proto.opset_import())
    if (imp.domain().empty() || imp.domain() == "ai.onnx")
      opset = imp.version();
  if (opset < 0) {
    emitError(loc) << "the model imports no default-domain opset";
    return failure();
  }
  // An op's meaning may change in a newer opset: such a model is refused,
  // not read with the newest semantics Cleave knows.
  if (opset > kNewestOpset) {
    emitError(loc) << "the model declares opset " << opset
                   << " of the default domain; Cleave knows opsets up to "
                   << kNewestOpset << ": export it at opset " << kNewestOpset
                   << " or lower";
    return failure();
  }
  return opset;
}

LogicalResult
GraphImporter::markBuffers(const llvm::StringSet<> &initializerNames,
                           Location loc) {
  const onnx::GraphProto &graph = model.proto().graph();
  for (const auto &[name, spec] : options.inputs) {
    bool found = false;
    for (const auto &in : graph.input())
      found |= in.name() == name && !initializerNames.contains(name);
    if (!found) {
      emitError(loc) << "--input names '" << name
                     << "', which is not a graph input of the model";
      return failure();
    }
  }

  // BatchNorm statistics are state, never trained: the running statistics
  // of training mode and the fixed ones of inference mode alike.
  for (const onnx::NodeProto &node : graph.node())
    if (node.op_type() == "BatchNormalization" &&
        (node.domain().empty() || node.domain() == "ai.onnx"))
      for (int i = 3; i < std::min(node.input_size(), 5); ++i)
        if (initializerNames.contains(node.input(i)))
          buffers.insert(node.input(i));

  markQuantized(initializerNames);
  for (StringRef name : quantized.keys())
    frozen.insert(name);

  for (const std::string &pattern : options.frozen) {
    llvm::Regex regex(pattern);
    std::string why;
    if (!regex.isValid(why)) {
      emitError(loc) << "--freeze '" << pattern << "' is not a valid regular "
                     << "expression: " << why;
      return failure();
    }
    bool any = false;
    for (const auto &t : graph.initializer())
      if (regex.match(t.name())) {
        if (!buffers.contains(t.name()))
          frozen.insert(t.name());
        any = true;
      }
    if (!any) {
      emitError(loc) << "--freeze '" << pattern
                     << "' matches no initializer of the model";
      return failure();
    }
  }
  return success();
}

void GraphImporter::markQuantized(const llvm::StringSet<> &initializerNames) {
  const onnx::GraphProto &graph = model.proto().graph();
  llvm::StringMap<bool> onlyWidened;
  for (const auto &t : graph.initializer())
    if (t.data_type() == ::onnx::TensorProto::INT8 && t.dims_size() >= 2)
      onlyWidened[t.name()] = false;
  if (onlyWidened.empty())
    return;
  llvm::StringSet<> otherUse;
  for (const onnx::NodeProto &node : graph.node())
    for (const std::string &in : node.input()) {
      auto it = onlyWidened.find(in);
      if (it == onlyWidened.end())
        continue;
      bool widens = false;
      if (node.op_type() == "Cast" &&
          (node.domain().empty() || node.domain() == "ai.onnx"))
        for (const auto &a : node.attribute())
          if (a.name() == "to") {
            Type to = elementTypeFromOnnx(context, a.i());
            widens = to && isa<FloatType>(to);
          }
      if (widens)
        it->second = true;
      else
        otherUse.insert(in);
    }
  for (const auto &entry : onlyWidened)
    if (entry.getValue() && !otherUse.contains(entry.getKey()))
      quantized.insert(entry.getKey());
  freezeScales(initializerNames);
}

void GraphImporter::freezeScales(const llvm::StringSet<> &initializerNames) {
  const onnx::GraphProto &graph = model.proto().graph();
  llvm::StringMap<const onnx::NodeProto *> producer;
  llvm::StringMap<SmallVector<const onnx::NodeProto *>> readers;
  for (const onnx::NodeProto &node : graph.node()) {
    for (const std::string &out : node.output())
      producer[out] = &node;
    for (const std::string &in : node.input())
      readers[in].push_back(&node);
  }
  auto isView = [](const onnx::NodeProto &n) {
    return n.op_type() == "Reshape" || n.op_type() == "Unsqueeze" ||
           n.op_type() == "Expand" || n.op_type() == "Cast";
  };
  // The widened weight, through regroupings, to the Mul that scales it; the
  // other factor, through views, to its initializer.
  SmallVector<std::string> work;
  for (const auto &entry : quantized)
    for (const onnx::NodeProto *cast : readers.lookup(entry.getKey()))
      work.push_back(cast->output(0));
  while (!work.empty()) {
    std::string value = work.pop_back_val();
    for (const onnx::NodeProto *user : readers.lookup(value)) {
      if (user->op_type() == "Reshape" && user->input(0) == value) {
        work.push_back(user->output(0));
        continue;
      }
      if (user->op_type() != "Mul" || user->input_size() != 2)
        continue;
      std::string scale = user->input(user->input(0) == value ? 1 : 0);
      while (const onnx::NodeProto *p = producer.lookup(scale)) {
        if (!isView(*p))
          break;
        scale = p->input(0);
      }
      if (initializerNames.contains(scale) && !buffers.contains(scale))
        frozen.insert(scale);
    }
  }
}

LogicalResult GraphImporter::declareArguments(
    const llvm::StringSet<> &initializerNames, Location loc,
    SmallVector<Type> &argTypes,
    SmallVector<std::pair<StringRef, std::string>> &argNames) {
  const onnx::GraphProto &graph = model.proto().graph();
  for (const auto &in : graph.input()) {
    if (initializerNames.contains(in.name()))
      continue;
    auto it = options.inputs.find(in.name());
    FailureOr<RankedTensorType> type = valueInfoType(
        context, in, it == options.inputs.end() ? nullptr : &it->second, loc,
        "graph input");
    if (failed(type))
      return failure();
    argTypes.push_back(*type);
    argNames.push_back({kInputAttr, in.name()});
  }
  std::string baseDir = modelFolder(model.path());
  for (const auto &t : graph.initializer()) {
    Type element = elementTypeFromOnnx(context, t.data_type());
    SmallVector<int64_t> shape(t.dims().begin(), t.dims().end());
    // Every float initializer is a weight, whatever its rank: a learned
    // temperature or gate is a 0-d one (`cleave compile`'s summary names
    // them, so an exporter's literal stored as one is seen and frozen).
    bool weight = element && element.isF32();
    if (weight || quantized.contains(t.name())) {
      // Weights are read when the bundle is written, but a model whose
      // data is missing, cut or of the wrong size is refused here.
      TensorSource src;
      std::string error;
      if (failed(locateTensor(context, t, baseDir, src, error))) {
        emitError(loc) << "initializer '" << t.name() << "' " << error;
        return failure();
      }
      if (Type held = options.heldTypes.lookup(t.name());
          held && frozen.contains(t.name()))
        element = held;
      if (weight) {
        weights[t.name()] = &t;
        // A weight holding a value that is not finite (a mask's -inf, a
        // literal's inf) trains into NaN (SGD's weight decay adds lr * wd
        // * -inf to -inf): it is frozen, and the summary says so. Weights
        // up to kMaxScannedElements are read here (a 2048-token mask);
        // every one is read again when the bundle is written, where a
        // larger one that is not finite is an error, so the bound keeps
        // that second read of a model's weights small (LLaMA-3-8B: only
        // its K/V projections and norms).
        constexpr int64_t kMaxScannedElements = int64_t(1) << 22;
        if (!buffers.contains(t.name()) && !frozen.contains(t.name()) &&
            ShapedType::getNumElements(shape) <= kMaxScannedElements &&
            holdsNonFinite(t, baseDir)) {
          frozen.insert(t.name());
          if (options.notFinite)
            options.notFinite->push_back(t.name());
        }
      }
      argTypes.push_back(RankedTensorType::get(shape, element));
      argNames.push_back(
          {buffers.contains(t.name()) ? kBufferAttr : kParameterAttr,
           t.name()});
      continue;
    }
    // Integer, boolean and scalar initializers are constants of the model
    // (shapes, indices, literals), not trainable weights.
    std::string error;
    FailureOr<TensorData> data = decodeTensor(context, t, baseDir, error);
    if (failed(data)) {
      emitError(loc) << "initializer '" << t.name() << "' " << error;
      return failure();
    }
    // Storage dtypes (float16 weights, uint8 tables) compute widened.
    if (data->elementType != computeTypeOf(data->elementType))
      storageTypes[t.name()] = data->elementType;
    bool overflow;
    known[t.name()] = toComputeType(tensorDataToAttr(*data), &overflow);
    if (overflow) {
      emitError(loc) << "initializer '" << t.name() << "' " << kBeyondF32;
      return failure();
    }
  }
  return success();
}

FailureOr<Value> GraphImporter::graphOutput(const onnx::ValueInfoProto &out,
                                            OpBuilder &builder, Location loc) {
  Value v = values.lookup(out.name());
  if (!v) {
    auto k = known.find(out.name());
    if (k == known.end()) {
      emitError(loc) << "graph output '" << out.name()
                     << "' is not produced by any node";
      return failure();
    }
    v = ConstantOp::create(builder, loc, k->second);
  }
  auto type = cast<RankedTensorType>(v.getType());
  const auto &tt = out.type().tensor_type();
  if (out.type().has_tensor_type() && tt.elem_type() != 0) {
    Type declared = elementTypeFromOnnx(context, tt.elem_type());
    // A storage dtype computed widened goes back to it here.
    if (declared && declared != type.getElementType() &&
        computeTypeOf(declared) == type.getElementType()) {
      type = type.clone(declared);
      v = builder.createOrFold<CastOp>(loc, type, v);
    }
    if (declared != type.getElementType()) {
      emitError(loc) << "graph output '" << out.name() << "' is declared "
                     << onnxTypeName(tt.elem_type()) << " but computes "
                     << type.getElementType();
      return failure();
    }
    if (tt.has_shape() && tt.shape().dim_size() != type.getRank()) {
      emitError(loc) << "graph output '" << out.name() << "' is declared "
                     << "with rank " << tt.shape().dim_size()
                     << " but computes " << type;
      return failure();
    }
    for (auto [i, dim] : llvm::enumerate(tt.shape().dim()))
      if (tt.has_shape() && dim.has_dim_value() &&
          dim.dim_value() != type.getDimSize(i)) {
        emitError(loc) << "graph output '" << out.name()
                       << "' is declared with dimension " << i << " = "
                       << dim.dim_value() << " but computes " << type;
        return failure();
      }
  }
  return v;
}

OwningOpRef<ModuleOp> GraphImporter::run() {
  const onnx::ModelProto &proto = model.proto();
  const onnx::GraphProto &graph = proto.graph();
  Location loc = fileLoc();
  FailureOr<int64_t> opsetOr = readOpset(loc);
  if (failed(opsetOr))
    return nullptr;
  int64_t opset = *opsetOr;

  OpBuilder builder(context);
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  module->getOperation()->setAttr(kOnnxOpsetAttr,
                                  builder.getI64IntegerAttr(opset));

  llvm::StringSet<> initializerNames;
  for (const auto &t : graph.initializer())
    initializerNames.insert(t.name());
  if (failed(markBuffers(initializerNames, loc)))
    return nullptr;

  // Arguments: graph inputs, then float initializers (parameters and
  // buffers).
  SmallVector<Type> argTypes;
  SmallVector<std::pair<StringRef, std::string>> argNames; // (attr, name)
  if (failed(declareArguments(initializerNames, loc, argTypes, argNames)))
    return nullptr;

  func =
      func::FuncOp::create(loc, "main", builder.getFunctionType(argTypes, {}));
  module->push_back(func);
  Block *entry = func.addEntryBlock();
  // All at once: setArgAttr makes a new array of every argument's
  // dictionary each call, so a model of N initializers took N^2 memory.
  SmallVector<DictionaryAttr> argAttrs;
  for (auto &arg : argNames) {
    SmallVector<NamedAttribute, 2> attrs{
        builder.getNamedAttr(arg.first, builder.getStringAttr(arg.second))};
    if (arg.first == kParameterAttr && frozen.contains(arg.second))
      attrs.push_back(builder.getNamedAttr(kFrozenAttr, builder.getUnitAttr()));
    argAttrs.push_back(builder.getDictionaryAttr(attrs));
  }
  func.setAllArgAttrs(argAttrs);
  for (auto [i, arg] : llvm::enumerate(argNames)) {
    values[arg.second] = entry->getArgument(i);
    auto k = options.knownInputs.find(arg.second);
    if (k != options.knownInputs.end()) {
      if (k->second.getType() != argTypes[i]) {
        emitError(loc) << "input '" << arg.second << "': the value given "
                       << "holds " << k->second.getType()
                       << ", the model needs " << argTypes[i];
        return nullptr;
      }
      known[arg.second] = k->second;
      knownArguments[entry->getArgument(i)] = k->second;
    }
  }

  builder.setInsertionPointToEnd(entry);
  // Inputs of storage dtypes (float64, float16, uint8...) are read once
  // and computed widened (NodeContext.h's computeTypeOf).
  for (auto [i, arg] : llvm::enumerate(argNames)) {
    auto type = cast<RankedTensorType>(argTypes[i]);
    Type compute = computeTypeOf(type.getElementType());
    if (compute == type.getElementType())
      continue;
    // A frozen weight held in bf16 is a float32 weight of the model: the
    // ops that read it compute in f32 (no storage type to round to).
    if (!options.heldTypes.count(arg.second))
      storageTypes[arg.second] = type.getElementType();
    auto cast = CastOp::create(builder, loc, type.clone(compute),
                               entry->getArgument(i));
    if (type.getElementType().isF64())
      cast.setRangeChecked(true);
    values[arg.second] = cast;
    if (auto k = known.find(arg.second); k != known.end()) {
      bool overflow;
      k->second = toComputeType(k->second, &overflow);
      if (overflow) {
        emitError(loc) << "input '" << arg.second << "' " << kBeyondF32;
        return nullptr;
      }
    }
  }
  for (const onnx::NodeProto &node : graph.node())
    if (failed(importNode(node, opset, builder)))
      return nullptr;

  SmallVector<Value> results;
  SmallVector<Type> resultTypes;
  for (const auto &out : graph.output()) {
    FailureOr<Value> v = graphOutput(out, builder, loc);
    if (failed(v))
      return nullptr;
    results.push_back(*v);
    resultTypes.push_back(v->getType());
  }
  // Updated buffers follow the model's outputs.
  for (auto &[name, v] : bufferUpdates) {
    results.push_back(v);
    resultTypes.push_back(v.getType());
  }
  func::ReturnOp::create(builder, loc, results);
  func.setType(builder.getFunctionType(entry->getArgumentTypes(), resultTypes));
  SmallVector<DictionaryAttr> resultAttrs;
  for (const auto &out : graph.output())
    resultAttrs.push_back(builder.getDictionaryAttr(
        builder.getNamedAttr(kOutputAttr, builder.getStringAttr(out.name()))));
  for (const auto &update : bufferUpdates)
    resultAttrs.push_back(builder.getDictionaryAttr(builder.getNamedAttr(
        kBufferAttr, builder.getStringAttr(update.first))));
  func.setAllResultAttrs(resultAttrs);
  freezeBaked();
  if (failed(verify(*module)))
    return nullptr;
  return module;
}

bool GraphImporter::holdsNonFinite(const onnx::TensorProto &t,
                                   const std::string &baseDir) {
  std::string error;
  FailureOr<TensorData> data = decodeTensor(context, t, baseDir, error);
  if (failed(data) || !data->elementType.isF32())
    return false;
  size_t n = data->bytes.size() / sizeof(float);
  for (size_t i = 0; i < n; ++i) {
    float f;
    std::memcpy(&f, data->bytes.data() + i * sizeof(float), sizeof(float));
    if (!std::isfinite(f))
      return true;
  }
  return false;
}

std::optional<DenseElementsAttr> GraphImporter::weightValue(StringRef name) {
  const onnx::TensorProto *t = weights.lookup(name);
  if (!t)
    return std::nullopt;
  std::string error;
  FailureOr<TensorData> data =
      decodeTensor(context, *t, modelFolder(model.path()), error);
  if (failed(data))
    return std::nullopt;
  bool overflow;
  DenseElementsAttr attr = toComputeType(tensorDataToAttr(*data), &overflow);
  if (overflow)
    return std::nullopt;
  return attr;
}

void GraphImporter::freezeBaked() {
  llvm::BitVector unused(func.getNumArguments());
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto name = func.getArgAttrOfType<StringAttr>(i, kParameterAttr);
    if (!name || !baked.contains(name.getValue()))
      continue;
    if (func.getArgument(i).use_empty())
      unused.set(i);
    else
      func.setArgAttr(i, kFrozenAttr, UnitAttr::get(context));
  }
  (void)func.eraseArguments(unused);
}

OwningOpRef<ModuleOp>
mlir::cleave::importOnnx(MLIRContext *context, const OnnxModel &model,
                         const OnnxImportOptions &options) {
  context->loadDialect<CleaveDialect, func::FuncDialect>();
  GraphImporter importer(context, model, options);
  return importer.run();
}

//===----------------------------------------------------------------------===//
// NodeContext
//===----------------------------------------------------------------------===//

InFlightDiagnostic NodeContext::error() {
  std::string label = node.name().empty()
                          ? (node.output_size() ? node.output(0) : "")
                          : node.name();
  InFlightDiagnostic diag = emitError(b.getLoc())
                            << "node '" << label << "' (" << node.op_type()
                            << ", opset " << opset << "): ";
  // A node is refused with its first error: handlers that read several
  // inputs before checking any would otherwise print one line for each.
  if (reported)
    diag.abandon();
  reported = true;
  return diag;
}

FailureOr<Value> NodeContext::input(unsigned i) {
  if (!hasInput(i))
    return error() << "input " << i << " is required";
  const std::string &name = node.input(i);
  auto k = graph.known.find(name);
  Value v = graph.values.lookup(name);
  // Integer inputs with known values (shape and index operands) are
  // specialised everywhere, so arithmetic on them folds; float inputs only
  // where a compile-time constant is required (constantInput).
  if (v && isa<BlockArgument>(v) && k != graph.known.end() &&
      k->second.getElementType().isInteger()) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(v.getParentBlock());
    Value c = ConstantOp::create(b, k->second);
    graph.values[name] = c;
    return c;
  }
  if (v)
    return v;
  if (graph.sequences.count(name))
    return error() << "input '" << name << "' is a sequence, not a tensor";
  if (k == graph.known.end())
    return error() << "input '" << name << "' is undefined";
  Value c = ConstantOp::create(b, k->second);
  graph.values[name] = c;
  return c;
}

std::optional<DenseElementsAttr> NodeContext::constantInput(unsigned i) {
  if (!hasInput(i))
    return std::nullopt;
  const std::string &name = node.input(i);
  auto k = graph.known.find(name);
  if (k != graph.known.end())
    return k->second;
  if (Value v = graph.values.lookup(name); v && isa<BlockArgument>(v) &&
                                           graph.weights.count(name) &&
                                           !graph.buffers.contains(name))
    return graph.bakeWeight(name);
  if (Value v = graph.values.lookup(name)) {
    DenseElementsAttr attr;
    if (matchPattern(v, m_Constant(&attr)))
      return attr;
    return graph.evaluate(v);
  }
  return std::nullopt;
}

FailureOr<SmallVector<int64_t>> NodeContext::constantInts(unsigned i,
                                                          StringRef what) {
  std::optional<DenseElementsAttr> attr = constantInput(i);
  if (!attr)
    return error() << "input '" << what
                   << "' must be a compile-time constant (specialise the "
                      "model's inputs or fix its shapes with --input)";
  if (!attr->getElementType().isInteger())
    return error() << "input '" << what << "' must hold integers";
  SmallVector<int64_t> out;
  for (const APInt &v : attr->getValues<APInt>())
    out.push_back(attr->getElementType().isInteger(1) ? v.getZExtValue()
                                                      : v.getSExtValue());
  return out;
}

FailureOr<SmallVector<double>> NodeContext::constantDoubles(unsigned i,
                                                            StringRef what) {
  std::optional<DenseElementsAttr> attr = constantInput(i);
  if (!attr)
    return error() << "input '" << what << "' must be a compile-time constant";
  SmallVector<double> out;
  if (isa<FloatType>(attr->getElementType())) {
    for (const APFloat &v : attr->getValues<APFloat>())
      out.push_back(v.convertToDouble());
  } else {
    for (const APInt &v : attr->getValues<APInt>())
      out.push_back(static_cast<double>(v.getSExtValue()));
  }
  return out;
}

const onnx::AttributeProto *NodeContext::attr(StringRef name) const {
  for (const auto &a : node.attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}

int64_t NodeContext::attrInt(StringRef name, int64_t dflt) const {
  const onnx::AttributeProto *a = attr(name);
  return a ? a->i() : dflt;
}

float NodeContext::attrFloat(StringRef name, float dflt) const {
  const onnx::AttributeProto *a = attr(name);
  return a ? a->f() : dflt;
}

std::string NodeContext::attrString(StringRef name, StringRef dflt) const {
  const onnx::AttributeProto *a = attr(name);
  return a ? a->s() : dflt.str();
}

std::optional<SmallVector<int64_t>>
NodeContext::attrInts(StringRef name) const {
  const onnx::AttributeProto *a = attr(name);
  if (!a)
    return std::nullopt;
  return SmallVector<int64_t>(a->ints().begin(), a->ints().end());
}

void NodeContext::updateBuffer(unsigned i, Value v) {
  if (hasInput(i) && graph.buffers.contains(node.input(i)))
    graph.bufferUpdates[graph.buffers.find(node.input(i))->getKey()] = v;
}

bool NodeContext::isBuffer(unsigned i) const {
  return hasInput(i) && graph.buffers.contains(node.input(i));
}

Value NodeContext::step() {
  if (graph.step)
    return graph.step;
  Block &entry = graph.func.getBody().front();
  auto type = RankedTensorType::get({}, b.getI64Type());
  unsigned index = entry.getNumArguments();
  (void)graph.func.insertArgument(
      index, type,
      b.getDictionaryAttr(b.getNamedAttr(kStepAttr, b.getUnitAttr())),
      graph.func.getLoc());
  graph.step = entry.getArgument(index);
  return graph.step;
}

int64_t NodeContext::seed() const { return graph.options.seed; }

int64_t NodeContext::nextRandomStream() { return graph.nextStream++; }

StringRef NodeContext::producer() const {
  return graph.model.proto().producer_name();
}

void NodeContext::setOutput(unsigned i, Value v) {
  if (hasOutput(i))
    graph.values[node.output(i)] = v;
}

FailureOr<SmallVector<Value>> NodeContext::sequenceInput(unsigned i) {
  if (!hasInput(i))
    return error() << "input " << i << " is required";
  auto it = graph.sequences.find(node.input(i));
  if (it == graph.sequences.end())
    return error() << "input '" << node.input(i) << "' is not a sequence";
  return it->second;
}

void NodeContext::setSequenceOutput(unsigned i, SmallVector<Value> elements) {
  if (hasOutput(i))
    graph.sequences[node.output(i)] = std::move(elements);
}

FailureOr<OnnxValue> NodeContext::anyInput(unsigned i) {
  if (hasInput(i) && graph.sequences.count(node.input(i)))
    return OnnxValue(graph.sequences[node.input(i)]);
  FailureOr<Value> v = input(i);
  if (failed(v))
    return failure();
  return OnnxValue(*v);
}

void NodeContext::setAnyOutput(unsigned i, const OnnxValue &v) {
  if (v.sequence)
    setSequenceOutput(i, *v.sequence);
  else
    setOutput(i, v.tensor);
}

int32_t NodeContext::declaredOnnxType(unsigned i) const {
  if (!hasInput(i))
    return 0;
  const std::string &name = node.input(i);
  const onnx::GraphProto &g = graph.model.proto().graph();
  for (const onnx::TensorProto &t : g.initializer())
    if (t.name() == name)
      return t.data_type();
  for (const auto *list : {&g.input(), &g.value_info(), &g.output()})
    for (const onnx::ValueInfoProto &v : *list)
      if (v.name() == name && v.type().has_tensor_type())
        return v.type().tensor_type().elem_type();
  return 0;
}

const onnx::GraphProto *NodeContext::graphAttr(StringRef name) const {
  const onnx::AttributeProto *a = attr(name);
  return a && a->has_g() ? &a->g() : nullptr;
}

FailureOr<SmallVector<OnnxValue>>
NodeContext::importSubgraph(const onnx::GraphProto &body,
                            ArrayRef<OnnxValue> inputs) {
  // Three nested Loops of 1,000 iterations each stay under the per-Loop
  // cap and would import 10^9 nodes.
  constexpr int64_t kMaxSubgraphNodes = int64_t(1) << 19;
  graph.subgraphNodes += body.node_size();
  if (graph.subgraphNodes > kMaxSubgraphNodes)
    return error() << "unrolls its subgraphs past " << kMaxSubgraphNodes
                   << " nodes in all (nested Loops multiply their "
                      "iterations), which are not unrolled";
  if (static_cast<size_t>(body.input_size()) != inputs.size())
    return error() << "its subgraph '" << body.name() << "' takes "
                   << body.input_size() << " inputs, " << inputs.size()
                   << " are given";
  // Everything the body names, taken out of scope again at the end (also
  // on failure, which the caller reports).
  SmallVector<std::string> scoped;
  auto define = [&](const std::string &name) -> LogicalResult {
    if (graph.values.count(name) || graph.known.count(name) ||
        graph.sequences.count(name))
      return error() << "its subgraph '" << body.name() << "' redefines '"
                     << name << "', which is already in scope";
    scoped.push_back(name);
    return success();
  };
  auto leave = llvm::make_scope_exit([&] {
    for (const std::string &name : scoped) {
      graph.values.erase(name);
      graph.known.erase(name);
      graph.sequences.erase(name);
      graph.producers.erase(name);
    }
  });
  for (auto [info, v] : llvm::zip(body.input(), inputs)) {
    if (failed(define(info.name())))
      return failure();
    if (v.sequence)
      graph.sequences[info.name()] = *v.sequence;
    else
      graph.values[info.name()] = v.tensor;
  }
  for (const onnx::TensorProto &t : body.initializer()) {
    if (failed(define(t.name())))
      return failure();
    std::string why;
    FailureOr<DenseElementsAttr> attr = tensorToAttr(b.getContext(), t, why);
    if (failed(attr))
      return error() << "subgraph initializer '" << t.name() << "': " << why;
    graph.known[t.name()] = *attr;
  }
  for (const onnx::NodeProto &n : body.node()) {
    for (const std::string &out : n.output())
      if (!out.empty())
        scoped.push_back(out);
    OpBuilder builder = b;
    if (failed(graph.importNode(n, opset, builder)))
      return failure();
  }
  SmallVector<OnnxValue> outs;
  for (const onnx::ValueInfoProto &out : body.output()) {
    auto seq = graph.sequences.find(out.name());
    if (seq != graph.sequences.end()) {
      outs.push_back(OnnxValue(seq->second));
      continue;
    }
    Value v = graph.values.lookup(out.name());
    if (!v) {
      auto k = graph.known.find(out.name());
      if (k == graph.known.end())
        return error() << "its subgraph's output '" << out.name()
                       << "' is not defined";
      v = ConstantOp::create(b, k->second);
    }
    outs.push_back(v);
  }
  return outs;
}

//===- NodeContext.h - What an ONNX op handler sees -------------*- C++ -*-===//
//
// Handlers translate one ONNX node into cleave ops through this interface:
// inputs as values (or compile-time constants), attributes with defaults,
// outputs, and errors that always name the node, its op and the opset.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_LIB_IMPORT_ONNX_NODECONTEXT_H
#define CLEAVE_LIB_IMPORT_ONNX_NODECONTEXT_H

#include "Cleave/CleaveOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "onnx/onnx_pb.h"
#include "llvm/ADT/StringMap.h"

namespace mlir::cleave::onnx_import {

class GraphImporter;

/// What an ONNX name holds: a tensor, or a sequence of tensors (its
/// elements, all known at import).
struct OnnxValue {
  OnnxValue(Value v) : tensor(v) {}
  OnnxValue(SmallVector<Value> elements) : sequence(std::move(elements)) {}
  Value tensor;
  std::optional<SmallVector<Value>> sequence;
};

class NodeContext {
public:
  NodeContext(GraphImporter &graph, const onnx::NodeProto &node, int64_t opset,
              ImplicitLocOpBuilder &builder)
      : graph(graph), node(node), opset(opset), b(builder) {}

  GraphImporter &graph;
  const onnx::NodeProto &node;
  /// The model's default-domain opset.
  const int64_t opset;
  ImplicitLocOpBuilder &b;
  /// Whether error() has reported this node already.
  bool reported = false;

  // --- Inputs --------------------------------------------------------------
  unsigned numInputs() const { return node.input_size(); }
  /// Whether optional input \p i is given (present with a non-empty name).
  bool hasInput(unsigned i) const {
    return static_cast<int>(i) < node.input_size() && !node.input(i).empty();
  }
  /// Input \p i; an error if it is absent.
  FailureOr<Value> input(unsigned i);
  /// Optional input \p i: a null value when absent.
  FailureOr<Value> optionalInput(unsigned i) {
    return hasInput(i) ? input(i) : FailureOr<Value>(Value());
  }
  /// The compile-time value of input \p i, if it has one.
  std::optional<DenseElementsAttr> constantInput(unsigned i);
  /// Input \p i as integers; an error naming \p what if it is not a
  /// compile-time constant.
  FailureOr<SmallVector<int64_t>> constantInts(unsigned i, StringRef what);
  /// Input \p i as doubles (any numeric type); an error if not constant.
  FailureOr<SmallVector<double>> constantDoubles(unsigned i, StringRef what);

  // --- Attributes ----------------------------------------------------------
  const onnx::AttributeProto *attr(StringRef name) const;
  int64_t attrInt(StringRef name, int64_t dflt) const;
  float attrFloat(StringRef name, float dflt) const;
  std::string attrString(StringRef name, StringRef dflt) const;
  std::optional<SmallVector<int64_t>> attrInts(StringRef name) const;

  // --- Outputs -------------------------------------------------------------
  unsigned numOutputs() const { return node.output_size(); }
  bool hasOutput(unsigned i) const {
    return static_cast<int>(i) < node.output_size() && !node.output(i).empty();
  }
  void setOutput(unsigned i, Value v);

  // --- Sequences -----------------------------------------------------------
  /// The elements of sequence input \p i; an error if it is not one.
  FailureOr<SmallVector<Value>> sequenceInput(unsigned i);
  void setSequenceOutput(unsigned i, SmallVector<Value> elements);
  /// Input \p i, a tensor or a sequence (If and Loop pass either through).
  FailureOr<OnnxValue> anyInput(unsigned i);
  void setAnyOutput(unsigned i, const OnnxValue &v);

  // --- Subgraphs (If, Loop) ------------------------------------------------
  /// The ONNX element type the model declares for input \p i (a graph
  /// input, initializer, value_info or output of that name), or 0.
  int32_t declaredOnnxType(unsigned i) const;
  /// Graph attribute \p name, or null.
  const onnx::GraphProto *graphAttr(StringRef name) const;
  /// Imports \p body's nodes here, its inputs bound to \p inputs (one per
  /// graph input; it may also read every value in scope), and returns its
  /// outputs. The names it defines go out of scope afterwards, so a loop
  /// body can be imported once per iteration.
  FailureOr<SmallVector<OnnxValue>> importSubgraph(const onnx::GraphProto &body,
                                                   ArrayRef<OnnxValue> inputs);

  // --- Training state ------------------------------------------------------
  /// Whether input \p i is a buffer (non-trainable state initializer).
  bool isBuffer(unsigned i) const;
  /// Records \p v as the new value of the buffer at input \p i (no-op when
  /// that input is not a buffer).
  void updateBuffer(unsigned i, Value v);
  /// The training step number (i64 scalar argument, added on first use).
  Value step();
  /// The user's random seed and a fresh stream id per random site.
  int64_t seed() const;
  int64_t nextRandomStream();
  /// The model's producer_name ("pytorch", ...).
  StringRef producer() const;

  // --- Errors --------------------------------------------------------------
  /// An error diagnostic prefixed with the node's name, op and opset.
  /// An error about this node (the first one only is reported).
  InFlightDiagnostic error();

  // --- Building helpers ----------------------------------------------------
  static RankedTensorType typeOf(Value v) {
    return cast<RankedTensorType>(v.getType());
  }
  static int64_t rankOf(Value v) { return typeOf(v).getRank(); }
  Value reshape(Value v, ArrayRef<int64_t> shape);
  /// Prepends size-1 dims up to \p rank (numpy's rank alignment).
  Value alignRank(Value v, int64_t rank);
  /// Aligns the ranks of all \p values to the largest.
  SmallVector<Value> alignRanks(ArrayRef<Value> values);
  /// A splat constant of \p element type and the given shape.
  Value splat(Type element, ArrayRef<int64_t> shape, double value);
  /// [start, start + size) of \p v along \p axis.
  Value sliceAxis(Value v, int64_t axis, int64_t start, int64_t size);
  /// \p parts joined along \p axis; empty parts are left out (the kernels
  /// take no zero-size operand).
  Value concat(ArrayRef<Value> parts, int64_t axis);
  /// \p v permuted by \p perm; null (the diagnostic emitted) if it does not
  /// fit.
  Value transpose(Value v, ArrayRef<int64_t> perm);
  /// Normalises a possibly negative axis for \p rank; error if out of range.
  FailureOr<int64_t> normaliseAxis(int64_t axis, int64_t rank);

  /// Creates an op whose result types are inferred, reporting operands that
  /// do not fit as a diagnostic. (The generated inferring builders abort the
  /// process instead, which a bad model must never cause.)
  template <typename OpTy>
  FailureOr<OpTy> create(ValueRange operands,
                         typename OpTy::Properties props = {}) {
    SmallVector<Type> types;
    if (failed(OpTy::inferReturnTypes(
            b.getContext(), b.getLoc(),
            typename OpTy::Adaptor(operands, b.getDictionaryAttr({}), props),
            types)))
      return failure();
    OperationState state(b.getLoc(), OpTy::getOperationName());
    state.addOperands(operands);
    state.addTypes(types);
    state.getOrAddProperties<typename OpTy::Properties>() = props;
    return cast<OpTy>(b.create(state));
  }

  /// cleave.cmp \p predicate of \p lhs and \p rhs, broadcasting.
  FailureOr<Value> compare(CmpPredicate predicate, Value lhs, Value rhs) {
    CmpOp::Properties props;
    props.predicate = CmpPredicateAttr::get(b.getContext(), predicate);
    return createBroadcasting<CmpOp>({lhs, rhs}, props);
  }

  /// Aligns the ranks of \p operands (numpy broadcasting) and creates the
  /// broadcasting op \p OpTy on them.
  template <typename OpTy>
  FailureOr<Value> createBroadcasting(ArrayRef<Value> operands,
                                      typename OpTy::Properties props = {}) {
    FailureOr<OpTy> op = create<OpTy>(alignRanks(operands), props);
    if (failed(op))
      return failure();
    return op->getResult();
  }
};

using Handler = LogicalResult (*)(NodeContext &);

/// (op type) -> handlers by since-version. A model at opset v uses the
/// newest handler whose since-version is <= v.
class HandlerTable {
public:
  void on(StringRef op, int64_t sinceVersion, Handler handler) {
    table[op].push_back({sinceVersion, handler});
  }
  /// The handler for \p op at \p opset and its since-version, or null.
  std::pair<Handler, int64_t> lookup(StringRef op, int64_t opset) const;
  bool knows(StringRef op) const { return table.count(op); }

private:
  llvm::StringMap<SmallVector<std::pair<int64_t, Handler>>> table;
};

void registerElementwiseHandlers(HandlerTable &table);
void registerActivationHandlers(HandlerTable &table);
void registerShapeHandlers(HandlerTable &table);
void registerNeuralHandlers(HandlerTable &table);
void registerIndexingHandlers(HandlerTable &table);
void registerResizeHandlers(HandlerTable &table);
void registerRecurrentHandlers(HandlerTable &table);
void registerControlFlowHandlers(HandlerTable &table);
void registerSequenceHandlers(HandlerTable &table);

/// MLIR element type of an ONNX TensorProto data type, or null: the
/// storage type, which graph inputs and outputs keep.
Type elementTypeFromOnnx(MLIRContext *context, int32_t dataType);
/// The type a storage element type computes in: float64, float16 and
/// bfloat16 in f32; int8, int16, uint8 and uint16 in i32; uint32 in i64
/// (the runtime's compute dtypes); the others are their own. Values enter
/// the program widened (inputs cast, constants converted) and leave it
/// narrowed (outputs cast back), and Cast rounds through the storage type,
/// so an op on float16 values rounds once, as float16 arithmetic does.
Type computeTypeOf(Type storage);
/// elementTypeFromOnnx's compute type, or null.
Type computeTypeFromOnnx(MLIRContext *context, int32_t dataType);
/// Why a float64 tensor is refused (float64 computes in f32).
inline constexpr const char *kBeyondF32 =
    "holds float64 values beyond float32's range (above 3.4e38, or not 0 "
    "and below 1.2e-38 in magnitude), in which Cleave computes float64 "
    "models: this form is not supported";
/// \p attr in its compute type (exact, but float64 rounds to f32;
/// \p overflow says whether a finite value became infinite, or a
/// float64 one other than 0 fell below float32's normal range).
DenseElementsAttr toComputeType(DenseElementsAttr attr,
                                bool *overflow = nullptr);
/// Decodes an ONNX tensor (inline data only) into an attribute of its
/// compute type.
FailureOr<DenseElementsAttr> tensorToAttr(MLIRContext *context,
                                          const onnx::TensorProto &tensor,
                                          std::string &error);

} // namespace mlir::cleave::onnx_import

#endif // CLEAVE_LIB_IMPORT_ONNX_NODECONTEXT_H

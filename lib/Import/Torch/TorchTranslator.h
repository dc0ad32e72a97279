//===- TorchTranslator.h - TorchScript graph to ONNX nodes ------*- C++ -*-===//
//
// Internal to libcleave_torchscript.so (TorchImporter.cpp: values, folding,
// control flow, the entry point; TorchOps.cpp: the aten ops).
//
// Values of the TorchScript graph become Items: tensors (an ONNX value
// name), compile-time scalars, lists and strings (folded here: sizes, dims,
// list indexing, the conditions of prim::If, which is inlined), modules (a
// prim::GetAttr path) or None. Tensor ranks and dtypes are tracked here;
// sizes the graph does not record become Shape/Gather nodes that the ONNX
// importer folds.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_LIB_IMPORT_TORCH_TORCHTRANSLATOR_H
#define CLEAVE_LIB_IMPORT_TORCH_TORCHTRANSLATOR_H

#include "onnx/onnx_pb.h"
#include <torch/script.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace cleave_torch {
using torch::jit::Node;
using TValue = torch::jit::Value;

/// A --input: dims and, optionally, the element type (i64, i32, bool, f32).
struct TorchInputSpec {
  std::vector<int64_t> shape;
  std::string type;
};

struct Item {
  enum Kind { Tensor, Scalar, Dyn, List, String, Module, None } kind = None;
  std::string name;  // Tensor, Dyn (a 0-d int64): the ONNX value
  int64_t rank = -1; // Tensor: -1 unknown
  std::optional<at::ScalarType> dtype; // Tensor
  c10::IValue scalar;                  // Scalar: int, double or bool
  std::vector<Item> elems;             // List
  std::string text; // String; Module: attribute path ("" = root)
  torch::jit::Module module;

  bool isInt() const { return kind == Scalar && scalar.isInt(); }
  bool isNumber() const {
    return kind == Scalar &&
           (scalar.isInt() || scalar.isDouble() || scalar.isBool());
  }
  double number() const {
    return scalar.isInt()    ? static_cast<double>(scalar.toInt())
           : scalar.isBool() ? (scalar.toBool() ? 1.0 : 0.0)
                             : scalar.toDouble();
  }
  static Item of(c10::IValue v) {
    Item i;
    i.kind = Scalar;
    i.scalar = std::move(v);
    return i;
  }
};

/// Appends \p x as one little-endian element of \p dtype to \p raw.
inline void appendElement(std::string &raw, at::ScalarType dtype, double x) {
  auto put = [&](auto v) {
    raw.append(reinterpret_cast<const char *>(&v), sizeof v);
  };
  switch (dtype) {
  case at::kLong:
    put(static_cast<int64_t>(x));
    break;
  case at::kInt:
    put(static_cast<int32_t>(x));
    break;
  case at::kBool:
    put(static_cast<uint8_t>(x != 0));
    break;
  case at::kDouble:
    put(x);
    break;
  default:
    put(static_cast<float>(x));
  }
}

/// A translation failure: the message is complete (op, schema, source).
struct Failure {
  std::string message;
};

inline int onnxType(at::ScalarType t) {
  switch (t) {
  case at::kFloat:
    return onnx::TensorProto::FLOAT;
  case at::kDouble:
    return onnx::TensorProto::DOUBLE;
  case at::kLong:
    return onnx::TensorProto::INT64;
  case at::kInt:
    return onnx::TensorProto::INT32;
  case at::kBool:
    return onnx::TensorProto::BOOL;
  default:
    return onnx::TensorProto::UNDEFINED;
  }
}

class Translator {
public:
  Translator(torch::jit::Module root, onnx::GraphProto *graph)
      : root(std::move(root)), g(graph) {}

  void run(torch::jit::Graph &graph, const std::vector<std::string> &names);

private:
  torch::jit::Module root;
  onnx::GraphProto *g;
  std::unordered_map<const TValue *, Item> items;
  /// Parameters by TensorImpl (tied weights share one), and buffers.
  std::unordered_map<const void *, std::string> parameterNames, bufferNames;
  std::unordered_map<std::string, bool> emittedInitializers;
  /// Buffers that aten::batch_norm updates: state, not constants.
  std::unordered_map<const TValue *, bool> runningStats;
  const Node *current = nullptr;
  int counter = 0;
  /// Computed sizes by (tensor, dim): one per dimension, so that two
  /// queries of the same size compare equal (key.shape == value.shape).
  std::map<std::pair<std::string, int64_t>, std::string> sizeOf;
  /// Aliasing (swin's shifted-window mask is written by slice assignment):
  /// a value that a view op made from a tensor, or that an in-place op
  /// returned, shares its root's storage. A write through it scatters into
  /// the root through the view's own index map (the view ops replayed on
  /// the root's flat indices), and a view read after its root changed is
  /// made again from the root, so every reader sees PyTorch's values.
  struct View {
    const TValue *root = nullptr;
    std::vector<Node *> chain; // the view ops from the root, in order
    int64_t version = 0;       // the root's writes when this was made
  };
  std::unordered_map<const TValue *, View> views;
  std::unordered_map<const TValue *, int64_t> writes; // by root
  bool replaying = false;

  // --- Errors ---------------------------------------------------------------
  /// "model.py:42": the user's source line (kept in a saved module's debug
  /// information), else the line of the serialized code.
  static std::string sourceLine(const Node *n) {
    torch::jit::SourceRange range = n->sourceRange();
    if (auto original = range.findSourceRangeThatGenerated())
      range = *original;
    auto where = range.file_line_col();
    if (!where)
      return "";
    return std::get<0>(*where) + ":" + std::to_string(std::get<1>(*where));
  }
  [[noreturn]] void fail(const std::string &why) {
    std::ostringstream os;
    os << why;
    if (current) {
      if (const c10::FunctionSchema *schema = current->maybeSchema())
        os << " (schema: " << *schema << ")";
      if (std::string where = sourceLine(current); !where.empty())
        os << " at " << where;
    }
    throw Failure{os.str()};
  }
  /// The archive's tensor made dense. A saved view may repeat a tiny storage
  /// (stride 0) into gigabytes: a 2 KB file would ask for any memory it
  /// names, so a tensor larger than its storage by more than
  /// kMaxExpandedBytes is refused.
  at::Tensor dense(const at::Tensor &t, const std::string &name) {
    constexpr int64_t kMaxExpandedBytes = int64_t(64) << 20;
    int64_t bytes = static_cast<int64_t>(t.numel()) * t.element_size();
    int64_t stored = t.has_storage()
                         ? static_cast<int64_t>(t.storage().nbytes())
                         : int64_t(0);
    if (bytes > stored + kMaxExpandedBytes)
      fail("tensor '" + name + "' is a view of " + std::to_string(bytes) +
           " bytes over a storage of " + std::to_string(stored) +
           " (a stride-0 expansion): Cleave does not import a saved tensor "
           "more than 64 MiB larger than its storage");
    return t.detach().contiguous();
  }
  std::string opName() const {
    return current ? current->kind().toQualString() : "graph";
  }

  // --- Types ----------------------------------------------------------------
  c10::TensorTypePtr tensorType(const TValue *v) {
    auto t = v->type()->cast<c10::TensorType>();
    if (!t)
      fail("'" + v->debugName() + "' is not a tensor");
    return t;
  }
  std::vector<int64_t> shapeOf(const TValue *v) {
    auto sizes = tensorType(v)->sizes().concrete_sizes();
    if (!sizes)
      fail("the shape of '" + v->debugName() + "' (an input of " + opName() +
           ") is not known; give the module's input shapes with --input");
    return *sizes;
  }
  at::ScalarType dtypeOf(const TValue *v) {
    if (auto it = items.find(v); it != items.end() &&
                                 it->second.kind == Item::Tensor &&
                                 it->second.dtype)
      return *it->second.dtype;
    auto t = tensorType(v)->scalarType();
    if (!t)
      fail("the dtype of '" + v->debugName() + "' is not known");
    return *t;
  }
  int64_t rankOf(const TValue *v) {
    if (auto it = items.find(v); it != items.end() &&
                                 it->second.kind == Item::Tensor &&
                                 it->second.rank >= 0)
      return it->second.rank;
    auto r = tensorType(v)->dim();
    if (!r)
      fail("the rank of '" + v->debugName() + "' (an input of " + opName() +
           ") is not known");
    return *r;
  }
  std::optional<std::vector<int64_t>> knownShape(const TValue *v) {
    auto t = v->type()->cast<c10::TensorType>();
    if (!t)
      return std::nullopt;
    auto sizes = t->sizes().concrete_sizes();
    if (sizes)
      return *sizes;
    // A module's tensor (a parameter or a buffer, as a constant) has the
    // shape it was written with, where a scripted graph's types say none.
    if (auto it = items.find(v);
        it != items.end() && it->second.kind == Item::Tensor)
      if (auto s = staticShapes.find(it->second.name); s != staticShapes.end())
        return s->second;
    return std::nullopt;
  }
  /// The shapes of the constants and initializers written, by ONNX name.
  std::unordered_map<std::string, std::vector<int64_t>> staticShapes;
  /// A dtype for \p v's scalar operands: its own if known, else float.
  at::ScalarType dtypeOr(const TValue *v, at::ScalarType dflt) {
    if (auto it = items.find(v); it != items.end() &&
                                 it->second.kind == Item::Tensor &&
                                 it->second.dtype)
      return *it->second.dtype;
    auto t = v->type()->cast<c10::TensorType>();
    return t && t->scalarType() ? *t->scalarType() : dflt;
  }
  /// The value of \p node's argument named \p name, if it has one.
  const TValue *argument(Node *node, const std::string &name) {
    if (const c10::FunctionSchema *schema = node->maybeSchema())
      for (size_t i = 0; i < schema->arguments().size(); ++i)
        if (schema->arguments()[i].name() == name && i < node->inputs().size())
          return node->inputs()[i];
    return nullptr;
  }
  int64_t axis(int64_t a, int64_t rank) {
    if (a < -rank || a >= std::max<int64_t>(rank, 1))
      fail("dimension " + std::to_string(a) + " is out of range for rank " +
           std::to_string(rank));
    return a < 0 ? a + rank : a;
  }

  // --- Items ----------------------------------------------------------------
  Item &item(const TValue *v) {
    auto it = items.find(v);
    if (it == items.end())
      fail("'" + v->debugName() + "' has no value here");
    if (!replaying && !views.empty())
      refreshView(v);
    return it->second;
  }
  std::string tensor(const TValue *v, at::ScalarType like = at::kFloat) {
    Item &i = item(v);
    if (i.kind == Item::Tensor)
      return i.name;
    if (i.isNumber())
      return constant(like, {}, {i.number()});
    fail("'" + v->debugName() + "' is not a tensor");
  }
  /// An int64 1-D tensor of a list of (compile-time or computed) integers.
  std::string intList(const Item &list) {
    std::vector<int64_t> known;
    bool allKnown = true;
    for (const Item &e : list.elems) {
      allKnown &= e.isInt();
      if (e.isInt())
        known.push_back(e.scalar.toInt());
    }
    if (allKnown)
      return ints(known);
    std::vector<std::string> parts;
    for (const Item &e : list.elems) {
      if (e.isInt())
        parts.push_back(ints({e.scalar.toInt()}));
      else if (e.kind == Item::Tensor)
        parts.push_back(
            emit("Unsqueeze",
                 {e.dtype == at::kLong ? e.name : cast(e.name, at::kLong),
                  ints({0})}));
      else
        fail("a list element that is not an integer");
    }
    onnx::NodeProto *c = node("Concat", parts);
    attr(c, "axis", int64_t(0));
    return c->output(0);
  }
  std::string intList(const TValue *v) {
    Item &i = item(v);
    if (i.kind == Item::List)
      return intList(i);
    if (i.isInt())
      return ints({i.scalar.toInt()});
    fail("'" + v->debugName() + "' (an argument of " + opName() +
         ") must be a list of integers");
  }
  /// A 1-element int64 tensor of an integer argument.
  std::string int1(const TValue *v) {
    Item &i = item(v);
    if (i.isInt())
      return ints({i.scalar.toInt()});
    if (i.kind == Item::Scalar && i.scalar.isBool())
      return ints({i.scalar.toBool() ? 1 : 0});
    if (i.kind == Item::Tensor)
      return emit(
          "Unsqueeze",
          {i.dtype == at::kLong ? i.name : cast(i.name, at::kLong), ints({0})});
    fail("'" + v->debugName() + "' (an argument of " + opName() +
         ") must be an integer");
  }
  /// A computed integer (a size the ONNX importer will fold): a 0-d int64
  /// tensor.
  void setDyn(const TValue *v, std::string name) {
    setTensor(v, std::move(name), 0, at::kLong);
  }
  /// \p v as a tensor of \p other's dtype (a Python scalar operand).
  std::string operandLike(const TValue *v, const TValue *other) {
    Item &i = item(v);
    if (i.kind == Item::Tensor)
      return i.name;
    return tensor(v, dtypeOr(other, at::kFloat));
  }
  bool isTensor(const TValue *v) { return item(v).kind == Item::Tensor; }
  bool isNone(const TValue *v) { return item(v).kind == Item::None; }
  int64_t constInt(const TValue *v) {
    Item &i = item(v);
    if (i.kind == Item::Scalar && i.scalar.isInt())
      return i.scalar.toInt();
    if (i.kind == Item::Scalar && i.scalar.isBool())
      return i.scalar.toBool() ? 1 : 0;
    fail("'" + v->debugName() + "' (an argument of " + opName() +
         ") must be a compile-time integer");
  }
  double constDouble(const TValue *v) {
    Item &i = item(v);
    if (i.isNumber())
      return i.number();
    fail("'" + v->debugName() + "' (an argument of " + opName() +
         ") must be a compile-time number");
  }
  bool constBool(const TValue *v) { return constInt(v) != 0; }
  std::vector<int64_t> constInts(const TValue *v) {
    Item &i = item(v);
    if (i.kind == Item::Scalar && i.scalar.isInt())
      return {i.scalar.toInt()};
    if (i.kind != Item::List)
      fail("'" + v->debugName() + "' (an argument of " + opName() +
           ") must be a compile-time list of integers");
    std::vector<int64_t> out;
    for (const Item &e : i.elems) {
      if (!e.isInt())
        fail("'" + v->debugName() + "' (an argument of " + opName() +
             ") must be a compile-time list of integers");
      out.push_back(e.scalar.toInt());
    }
    return out;
  }
  /// \p v is the ONNX value \p name, of \p rank and \p dtype where known.
  void setTensor(const TValue *v, std::string name, int64_t rank = -1,
                 std::optional<at::ScalarType> dtype = std::nullopt) {
    Item i;
    i.kind = Item::Tensor;
    i.name = std::move(name);
    i.rank = rank;
    i.dtype = dtype;
    items[v] = std::move(i);
  }

  // --- ONNX emission --------------------------------------------------------
  std::string fresh(const std::string &hint) {
    return hint + "_" + std::to_string(counter++);
  }
  onnx::NodeProto *node(const std::string &op,
                        const std::vector<std::string> &inputs,
                        int outputs = 1) {
    onnx::NodeProto *n = g->add_node();
    n->set_op_type(op);
    // Named after the TorchScript op and its source line, so the ONNX
    // importer's diagnostics point at the model's code.
    std::string name = opName();
    if (current)
      if (std::string where = sourceLine(current); !where.empty())
        name += " at " + where;
    n->set_name(name);
    for (const std::string &in : inputs)
      n->add_input(in);
    for (int i = 0; i < outputs; ++i)
      n->add_output(fresh(op));
    return n;
  }
  std::string emit(const std::string &op,
                   const std::vector<std::string> &inputs) {
    return node(op, inputs)->output(0);
  }
  static void attr(onnx::NodeProto *n, const std::string &name, int64_t v) {
    auto *a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void attr(onnx::NodeProto *n, const std::string &name, float v) {
    auto *a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
  }
  static void attr(onnx::NodeProto *n, const std::string &name,
                   const std::vector<int64_t> &v) {
    auto *a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v)
      a->add_ints(x);
  }
  static void attr(onnx::NodeProto *n, const std::string &name,
                   const std::string &v) {
    auto *a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(v);
  }
  /// A Constant node of \p dtype and \p shape; \p values has one value
  /// (splat) or one per element.
  std::string constant(at::ScalarType dtype, const std::vector<int64_t> &shape,
                       const std::vector<double> &values) {
    int64_t count = 1;
    for (int64_t d : shape)
      count *= d;
    onnx::TensorProto t;
    t.set_data_type(onnxType(dtype));
    for (int64_t d : shape)
      t.add_dims(d);
    std::string raw;
    for (int64_t k = 0; k < count; ++k)
      appendElement(raw, dtype, values.size() == 1 ? values[0] : values[k]);
    t.set_raw_data(raw);
    onnx::NodeProto *n = node("Constant", {});
    auto *a = n->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    *a->mutable_t() = t;
    staticShapes[n->output(0)] = shape;
    return n->output(0);
  }
  /// An int64 1-D constant, exactly (no trip through double: INT64_MAX is
  /// a slice's open end).
  std::string ints(const std::vector<int64_t> &v) {
    onnx::NodeProto *n = node("Constant", {});
    auto *a = n->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    onnx::TensorProto *t = a->mutable_t();
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(v.size());
    t->set_raw_data(v.data(), v.size() * sizeof(int64_t));
    return n->output(0);
  }
  std::string reshapeTo(const std::string &x,
                        const std::vector<int64_t> &shape) {
    return emit("Reshape", {x, ints(shape)});
  }
  std::string cast(const std::string &x, at::ScalarType to) {
    onnx::NodeProto *n = node("Cast", {x});
    attr(n, "to", static_cast<int64_t>(onnxType(to)));
    return n->output(0);
  }
  /// Python's floor division from ONNX's truncating \p q = a / b: one less
  /// where the division was inexact and the signs differ.
  std::string floorInt(const std::string &q, const std::string &a,
                       const std::string &b, at::ScalarType t) {
    std::string zero = constant(t, {}, {0.0}), one = constant(t, {}, {1.0});
    std::string inexact =
        emit("Not", {emit("Equal", {emit("Mul", {q, b}), a})});
    std::string signs =
        emit("Xor", {emit("Less", {a, zero}), emit("Less", {b, zero})});
    return emit("Where",
                {emit("And", {inexact, signs}), emit("Sub", {q, one}), q});
  }

  // --- Translation ----------------------------------------------------------
  void translateBlock(torch::jit::Block *block);
  void translate(Node *n);
  bool foldScalar(Node *n);
  bool foldSize(Node *n);
  bool foldNumbers(Node *n, const std::string &kind);
  void getAttr(Node *n);
  void tensorOp(Node *n);
  /// tensorOp's handlers (TorchOps.def); each sets the op's result or
  /// leaves it for the next handler of its kind.
  struct AtenCall;
  void dispatch(AtenCall &c);
  void refreshView(const TValue *v);
  /// A value being translated again (replayView): not yet produced.
  static constexpr const char *kPending = "\x01pending";
  Item replayView(const View &view, const Item &rootValue);
  void writeThrough(const TValue *target, const TValue *result);
  void atenUnary(AtenCall &c);
  /// The result of an embedding lookup, its shape recorded where known.
  void embedded(AtenCall &c, const std::string &rows);
  /// aten::index with tensor indices in several dimensions (\p dims).
  void indexTogether(AtenCall &c, const std::vector<int64_t> &dims);
#define ATEN_HANDLER(HANDLER, ...) void HANDLER(AtenCall &c);
#include "TorchOps.def"
#undef ATEN_HANDLER
  using AtenHandler = void (Translator::*)(AtenCall &);
  /// Every aten kind's handlers, in TorchOps.def's order.
  static const std::multimap<std::string, AtenHandler> &atenHandlers();
  std::string initializer(const std::string &name, const at::Tensor &t);
};

} // namespace cleave_torch

#endif // CLEAVE_LIB_IMPORT_TORCH_TORCHTRANSLATOR_H

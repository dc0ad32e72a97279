//===- TorchImporter.cpp - TorchScript modules through libtorch -----------===//
//
// The plugin libcleave_torchscript.so: TorchScript module in, ONNX ModelProto
// bytes out, through one C function. It links libtorch and no MLIR, and
// `cleave` loads it only for a .pt model: loading libtorch costs most of a
// second, which no other command (and no MPI rank) should pay.
//
// Compiled with C++ exceptions (libtorch reports through c10::Error); none
// leaves this file.
//
// Values of the TorchScript graph become Items: tensors (an ONNX value
// name), compile-time scalars, lists and strings (folded here: sizes, dims,
// list indexing, the conditions of prim::If, which is inlined), modules (a
// prim::GetAttr path) or None. Tensor shapes and dtypes come from the graph's
// types: recorded by tracing, or propagated from the --input shapes for
// scripted modules.
//
//===----------------------------------------------------------------------===//

#include "onnx/onnx_pb.h"
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/passes/shape_analysis.h>
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

using torch::jit::Node;
using TValue = torch::jit::Value;

namespace {

/// A --input: dims and, optionally, the element type (i64, i32, bool, f32).
struct InputSpec {
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
void appendElement(std::string &raw, at::ScalarType dtype, double x) {
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

int onnxType(at::ScalarType t) {
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
    if (!sizes)
      return std::nullopt;
    return *sizes;
  }
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
  void getAttr(Node *n);
  void tensorOp(Node *n);
  std::string initializer(const std::string &name, const at::Tensor &t);
};

std::string Translator::initializer(const std::string &name,
                                    const at::Tensor &value) {
  if (!emittedInitializers.count(name)) {
    at::Tensor t = value.detach().contiguous();
    if (onnxType(t.scalar_type()) == onnx::TensorProto::UNDEFINED)
      fail("tensor '" + name + "' has a dtype Cleave does not import");
    onnx::TensorProto *p = g->add_initializer();
    p->set_name(name);
    p->set_data_type(onnxType(t.scalar_type()));
    for (int64_t d : t.sizes())
      p->add_dims(d);
    p->set_raw_data(t.data_ptr(), t.numel() * t.element_size());
    emittedInitializers[name] = true;
  }
  return name;
}

void Translator::getAttr(Node *n) {
  const Item &owner = item(n->input(0));
  if (owner.kind != Item::Module)
    fail("prim::GetAttr on something that is not a module");
  std::string field = n->s(c10::attr::name);
  std::string path = owner.text.empty() ? field : owner.text + "." + field;
  c10::IValue v = owner.module.attr(field);
  const TValue *out = n->output();
  if (v.isModule()) {
    Item i;
    i.kind = Item::Module;
    i.text = path;
    i.module = v.toModule();
    items[out] = i;
    return;
  }
  if (v.isTensor()) {
    at::Tensor t = v.toTensor();
    const void *impl = t.unsafeGetTensorImpl();
    if (auto it = parameterNames.find(impl); it != parameterNames.end()) {
      setTensor(out, initializer(it->second, t), t.dim(), t.scalar_type());
      return;
    }
    // Buffers: BatchNorm's running statistics are training state, every
    // other buffer (a cached table) a constant of the graph.
    auto it = bufferNames.find(impl);
    std::string name = it != bufferNames.end() ? it->second : path;
    if (runningStats.count(out) && t.is_floating_point()) {
      setTensor(out, initializer(name, t), t.dim(), t.scalar_type());
      return;
    }
    at::Tensor c = t.detach().contiguous().to(at::kDouble);
    std::vector<double> values(c.data_ptr<double>(),
                               c.data_ptr<double>() + c.numel());
    setTensor(out, constant(t.scalar_type(), t.sizes().vec(), values), t.dim(),
              t.scalar_type());
    return;
  }
  if (v.isInt() || v.isDouble() || v.isBool()) {
    items[out] = Item::of(v);
    return;
  }
  if (v.isNone()) {
    items[out] = Item();
    return;
  }
  fail("attribute '" + path + "' of kind " + v.tagKind() + " is not supported");
}

/// Scalar and list arithmetic that only needs compile-time values.
bool Translator::foldScalar(Node *n) {
  std::string kind = n->kind().toQualString();
  auto in = [&](size_t i) -> Item & { return item(n->input(i)); };
  auto allNumbers = [&] {
    for (const TValue *v : n->inputs())
      if (!item(v).isNumber())
        return false;
    return true;
  };
  const TValue *out = n->outputs().size() == 1 ? n->output() : nullptr;
  auto setNumber = [&](double x, bool integer) {
    items[out] = integer ? Item::of(static_cast<int64_t>(x)) : Item::of(x);
  };
  if (kind == "aten::size" && isTensor(n->input(0))) {
    // Known sizes fold here; others become Shape/Gather, which the ONNX
    // importer folds (every shape is static once the inputs are fixed).
    auto known = knownShape(n->input(0));
    int64_t rank = rankOf(n->input(0));
    auto dimItem = [&](int64_t d) {
      if (known)
        return Item::of((*known)[d]);
      std::string &cached = sizeOf[{tensor(n->input(0)), d}];
      if (cached.empty()) {
        onnx::NodeProto *gather =
            node("Gather", {emit("Shape", {tensor(n->input(0))}),
                            constant(at::kLong, {}, {double(d)})});
        attr(gather, "axis", int64_t(0));
        cached = gather->output(0);
      }
      Item i;
      i.kind = Item::Tensor;
      i.name = cached;
      i.rank = 0;
      i.dtype = at::kLong;
      return i;
    };
    if (n->inputs().size() == 1) {
      Item list;
      list.kind = Item::List;
      for (int64_t d = 0; d < rank; ++d)
        list.elems.push_back(dimItem(d));
      items[out] = list;
    } else {
      items[out] = dimItem(axis(constInt(n->input(1)), rank));
    }
    return true;
  }
  if (kind == "aten::dim" && isTensor(n->input(0))) {
    items[out] = Item::of(static_cast<int64_t>(rankOf(n->input(0))));
    return true;
  }
  if (kind == "aten::len" &&
      (in(0).kind == Item::List || in(0).kind == Item::String)) {
    items[out] = Item::of(static_cast<int64_t>(
        in(0).kind == Item::List ? in(0).elems.size() : in(0).text.size()));
    return true;
  }
  if ((kind == "aten::eq" || kind == "aten::ne") && n->inputs().size() == 2 &&
      in(0).kind == Item::List && in(1).kind == Item::List) {
    // Lists of sizes: equal when every element is the same constant or the
    // same computed size.
    const auto &a = in(0).elems, &b = in(1).elems;
    bool equal = a.size() == b.size(), decided = true;
    for (size_t k = 0; equal && k < a.size(); ++k) {
      if (a[k].isNumber() && b[k].isNumber())
        equal = a[k].number() == b[k].number();
      else if (a[k].kind == Item::Tensor && b[k].kind == Item::Tensor &&
               a[k].name == b[k].name)
        continue;
      else
        decided = false;
    }
    if (!decided && equal)
      fail("cannot compare these sizes at compile time");
    items[out] = Item::of(kind == "aten::eq" ? equal : !equal);
    return true;
  }
  if (kind == "aten::__getitem__" && in(0).kind == Item::List) {
    int64_t i = constInt(n->input(1));
    int64_t size = in(0).elems.size();
    if (i < -size || i >= size)
      fail("list index out of range");
    items[out] = in(0).elems[i < 0 ? i + size : i];
    return true;
  }
  if ((kind == "aten::__is__" || kind == "aten::__isnot__")) {
    // None against anything, or the identity of two tensors (query is key).
    bool same;
    if (in(0).kind == Item::None || in(1).kind == Item::None)
      same = in(0).kind == in(1).kind;
    else if (in(0).kind == Item::Tensor && in(1).kind == Item::Tensor)
      same = in(0).name == in(1).name;
    else
      return false;
    items[out] = Item::of(kind == "aten::__is__" ? same : !same);
    return true;
  }
  if ((kind == "prim::NumToTensor" || kind == "aten::Float" ||
       kind == "aten::ScalarImplicit") &&
      in(0).kind == Item::Tensor) {
    items[out] = in(0);
    return true;
  }
  if (kind == "aten::Int" && in(0).kind == Item::Tensor) {
    setDyn(out,
           in(0).dtype == at::kLong ? in(0).name : cast(in(0).name, at::kLong));
    return true;
  }
  if ((kind == "prim::NumToTensor" || kind == "aten::Int" ||
       kind == "aten::Float" || kind == "aten::ScalarImplicit" ||
       kind == "aten::Bool") &&
      in(0).isNumber()) {
    Item i = in(0);
    if (kind == "aten::Int")
      i = Item::of(static_cast<int64_t>(i.number()));
    else if (kind == "aten::Float")
      i = Item::of(i.number());
    items[out] = i;
    return true;
  }
  if (!out || n->inputs().empty() || !allNumbers())
    return false;
  bool integer = true;
  for (const TValue *v : n->inputs())
    integer &= !item(v).scalar.isDouble();
  double a = in(0).number(), b = n->inputs().size() > 1 ? in(1).number() : 0;
  if (kind == "aten::add")
    setNumber(a + b, integer);
  else if (kind == "aten::sub")
    setNumber(a - b, integer);
  else if (kind == "aten::mul")
    setNumber(a * b, integer);
  else if (kind == "aten::div" || kind == "aten::true_divide")
    setNumber(a / b, false);
  else if (kind == "aten::floordiv" || kind == "aten::floor_divide")
    setNumber(std::floor(a / b), integer);
  else if (kind == "aten::neg")
    setNumber(-a, integer);
  else if (kind == "aten::sqrt")
    setNumber(std::sqrt(a), false);
  else if (kind == "aten::pow")
    setNumber(std::pow(a, b), integer && b >= 0);
  else if (kind == "aten::eq")
    items[out] = Item::of(a == b);
  else if (kind == "aten::ne")
    items[out] = Item::of(a != b);
  else if (kind == "aten::gt")
    items[out] = Item::of(a > b);
  else if (kind == "aten::lt")
    items[out] = Item::of(a < b);
  else if (kind == "aten::ge")
    items[out] = Item::of(a >= b);
  else if (kind == "aten::le")
    items[out] = Item::of(a <= b);
  else if (kind == "aten::__not__")
    items[out] = Item::of(a == 0);
  else
    return false;
  return true;
}

void Translator::translateBlock(torch::jit::Block *block) {
  for (Node *n : block->nodes())
    translate(n);
}

void Translator::translate(Node *n) {
  current = n;
  std::string kind = n->kind().toQualString();
  if (kind == "prim::Constant") {
    auto v = torch::jit::toIValue(n->output());
    Item i;
    if (!v || v->isNone()) {
      items[n->output()] = i;
    } else if (v->isInt() || v->isDouble() || v->isBool()) {
      items[n->output()] = Item::of(*v);
    } else if (v->isString()) {
      i.kind = Item::String;
      i.text = v->toStringRef();
      items[n->output()] = i;
    } else if (v->isIntList()) {
      i.kind = Item::List;
      for (int64_t x : v->toIntVector())
        i.elems.push_back(Item::of(x));
      items[n->output()] = i;
    } else if (v->isDevice()) {
      items[n->output()] = i; // devices do not matter here
    } else if (v->isTensor() && v->toTensor().dim() == 0) {
      // A 0-d constant acts as a Python number in type promotion (x / 4.0
      // stays float32).
      at::Tensor t = v->toTensor();
      items[n->output()] =
          t.is_floating_point() ? Item::of(t.item<double>())
          : t.scalar_type() == at::kBool
              ? Item::of(t.item<bool>())
              : Item::of(static_cast<int64_t>(t.item<int64_t>()));
    } else if (v->isTensor()) {
      at::Tensor t = v->toTensor().detach().contiguous();
      at::Tensor d = t.to(at::kDouble);
      std::vector<double> values(d.data_ptr<double>(),
                                 d.data_ptr<double>() + d.numel());
      setTensor(n->output(), constant(t.scalar_type(), t.sizes().vec(), values),
                t.dim(), t.scalar_type());
    } else {
      fail("a constant of kind " + v->tagKind() + " is not supported");
    }
    return;
  }
  if (kind == "prim::GetAttr")
    return getAttr(n);
  if (kind == "prim::ListConstruct" || kind == "prim::TupleConstruct") {
    Item list;
    list.kind = Item::List;
    for (const TValue *v : n->inputs())
      list.elems.push_back(item(v));
    items[n->output()] = list;
    return;
  }
  if (kind == "prim::ListUnpack" || kind == "prim::TupleUnpack") {
    Item &list = item(n->input());
    if (list.kind != Item::List || list.elems.size() != n->outputs().size())
      fail("cannot unpack '" + n->input()->debugName() + "'");
    for (size_t i = 0; i < n->outputs().size(); ++i)
      items[n->outputs()[i]] = list.elems[i];
    return;
  }
  if (kind == "prim::Uninitialized") {
    items[n->output()] = Item();
    return;
  }
  if (kind == "prim::If") {
    auto raises = [](torch::jit::Block *b) {
      for (Node *inner : b->nodes())
        if (inner->kind() ==
            c10::Symbol::fromQualString("prim::RaiseException"))
          return true;
      return false;
    };
    torch::jit::Block *taken;
    if (item(n->input()).isNumber())
      taken = n->blocks()[constBool(n->input()) ? 0 : 1];
    else if (raises(n->blocks()[0]) != raises(n->blocks()[1]))
      // A check on sizes that are only computed later (the ONNX importer
      // folds them): the model's own validation, taken to pass.
      taken = n->blocks()[raises(n->blocks()[0]) ? 1 : 0];
    else
      fail("prim::If on a condition that is not known at compile time");
    translateBlock(taken);
    current = n;
    for (size_t i = 0; i < n->outputs().size(); ++i)
      items[n->outputs()[i]] = item(taken->outputs()[i]);
    return;
  }
  if (kind == "prim::Loop") {
    // Unrolled: the trip count and the condition are known at compile time
    // (loops over the dims of a shape).
    int64_t trips = constInt(n->input(0));
    bool cond = constBool(n->input(1));
    std::vector<Item> carried;
    for (size_t i = 2; i < n->inputs().size(); ++i)
      carried.push_back(item(n->input(i)));
    torch::jit::Block *body = n->blocks()[0];
    for (int64_t i = 0; i < trips && cond; ++i) {
      if (i > 4096)
        fail("a loop of more than 4096 iterations is not unrolled");
      items[body->inputs()[0]] = Item::of(i);
      for (size_t k = 0; k < carried.size(); ++k)
        items[body->inputs()[k + 1]] = carried[k];
      translateBlock(body);
      current = n;
      cond = constBool(body->outputs()[0]);
      for (size_t k = 0; k < carried.size(); ++k)
        carried[k] = item(body->outputs()[k + 1]);
    }
    for (size_t k = 0; k < carried.size(); ++k)
      items[n->outputs()[k]] = carried[k];
    return;
  }
  // Questions about the execution context, answered for a training step
  // on the CPU (the paths they guard are inference or device fast paths).
  static const std::unordered_map<std::string, bool> context = {
      {"aten::is_grad_enabled", true}, {"aten::is_autocast_enabled", false},
      {"prim::is_cuda", false},        {"prim::is_nested", false},
      {"prim::requires_grad", true},   {"prim::is_sparse", false},
      {"prim::is_quantized", false},   {"prim::is_mkldnn", false}};
  if (auto it = context.find(kind); it != context.end()) {
    items[n->output()] = Item::of(it->second);
    return;
  }
  if (kind == "prim::unchecked_cast") {
    items[n->output()] = item(n->input());
    return;
  }
  if (kind == "prim::RaiseException")
    fail("the module raises an exception for these inputs");
  if (kind == "aten::format" || kind == "aten::warn" || kind == "prim::dtype" ||
      kind == "prim::device") {
    if (kind == "prim::dtype")
      items[n->output()] = Item::of(static_cast<int64_t>(dtypeOf(n->input())));
    else if (!n->outputs().empty())
      items[n->output()] = Item();
    return;
  }
  if (foldScalar(n))
    return;
  tensorOp(n);
}

void Translator::tensorOp(Node *n) {
  std::string kind = n->kind().toQualString();
  const auto &ins = n->inputs();
  auto T = [&](size_t i) { return tensor(ins[i]); };
  // Results: by default as wide as the widest tensor operand and of the
  // first tensor operand's dtype (elementwise ops); others say theirs.
  int64_t widest = -1;
  std::optional<at::ScalarType> firstType;
  for (const TValue *v : ins) {
    auto it = items.find(v);
    if (it == items.end() || it->second.kind != Item::Tensor)
      continue;
    widest = std::max(widest, rankOf(v));
    if (!firstType)
      firstType = dtypeOr(v, at::kFloat);
  }
  auto outRD = [&](std::string name, int64_t rank,
                   std::optional<at::ScalarType> dtype, size_t i = 0) {
    setTensor(n->outputs()[i], std::move(name), rank, dtype);
  };
  auto out = [&](std::string name, size_t i = 0) {
    outRD(std::move(name), widest, firstType, i);
  };
  auto unary = [&](const char *op) { out(emit(op, {T(0)})); };
  // Elementwise binary ops on tensors and Python scalars.
  // PyTorch's promotion: numbers and 0-d tensors take the dtype of a
  // dimensioned operand; otherwise integers meet floats as floats.
  auto promoted = [&](const TValue *a, const TValue *b) {
    auto kindOf = [&](const TValue *v) {
      return !isTensor(v) ? 0 : rankOf(v) == 0 ? 1 : 2;
    };
    const TValue *lead = kindOf(a) >= kindOf(b) ? a : b;
    const TValue *other = lead == a ? b : a;
    at::ScalarType t = dtypeOr(lead, at::kFloat);
    bool leadFloat = t == at::kFloat || t == at::kDouble;
    bool otherFloat =
        isTensor(other)
            ? (dtypeOr(other, at::kFloat) == at::kFloat ||
               dtypeOr(other, at::kFloat) == at::kDouble)
            : item(other).kind == Item::Scalar && item(other).scalar.isDouble();
    if (!leadFloat && otherFloat)
      t = at::kFloat;
    return t;
  };
  auto as = [&](const TValue *v, at::ScalarType t) {
    if (!isTensor(v))
      return tensor(v, t);
    return dtypeOr(v, at::kFloat) == t
               ? T(std::find(ins.begin(), ins.end(), v) - ins.begin())
               : cast(item(v).name, t);
  };
  auto binary = [&](const char *op, const TValue *a, const TValue *b) {
    at::ScalarType t = promoted(a, b);
    return emit(op, {as(a, t), as(b, t)});
  };
  static const std::unordered_map<std::string, const char *> unaryOps = {
      {"aten::relu", "Relu"},       {"aten::tanh", "Tanh"},
      {"aten::sigmoid", "Sigmoid"}, {"aten::exp", "Exp"},
      {"aten::log", "Log"},         {"aten::sqrt", "Sqrt"},
      {"aten::neg", "Neg"},         {"aten::abs", "Abs"},
      {"aten::sin", "Sin"},         {"aten::cos", "Cos"},
      {"aten::erf", "Erf"},         {"aten::bitwise_not", "Not"},
      {"aten::logical_not", "Not"}, {"aten::reciprocal", "Reciprocal"}};
  // An in-place op on a view would have to write through to the viewed
  // tensor, which this translation (values, not storage) cannot do.
  if (kind.size() > 1 && kind.back() == '_' && !ins.empty()) {
    static const char *views[] = {
        "aten::slice",   "aten::select",    "aten::view",   "aten::transpose",
        "aten::permute", "aten::expand",    "aten::narrow", "aten::unsqueeze",
        "aten::squeeze", "aten::as_strided"};
    std::string producer = ins[0]->node()->kind().toQualString();
    for (const char *v : views)
      if (producer == v)
        fail(kind + " on a view (" + producer + ") is not supported");
  }
  // In-place unary ops (relu_, tanh_, ...): the functional op, and later
  // reads of the operand see the result.
  if (kind.size() > 1 && kind.back() == '_' &&
      unaryOps.count(kind.substr(0, kind.size() - 1))) {
    std::string r = emit(unaryOps.at(kind.substr(0, kind.size() - 1)), {T(0)});
    out(r);
    setTensor(ins[0], r, widest, firstType);
    return;
  }
  if (auto it = unaryOps.find(kind); it != unaryOps.end()) {
    bool floatOp = kind != "aten::relu" && kind != "aten::neg" &&
                   kind != "aten::abs" && kind != "aten::bitwise_not" &&
                   kind != "aten::logical_not";
    at::ScalarType dt = dtypeOr(ins[0], at::kFloat);
    if (floatOp && dt != at::kFloat && dt != at::kDouble)
      return outRD(emit(it->second, {cast(T(0), at::kFloat)}), widest,
                   at::kFloat);
    return unary(it->second);
  }
  if (kind == "aten::rsqrt")
    return out(emit("Reciprocal", {emit("Sqrt", {T(0)})}));
  if (kind == "aten::silu")
    return out(emit("Mul", {T(0), emit("Sigmoid", {T(0)})}));
  if (kind == "aten::gelu") {
    std::string approx = ins.size() > 1 && item(ins[1]).kind == Item::String
                             ? item(ins[1]).text
                             : "none";
    std::string x = T(0);
    at::ScalarType dt = dtypeOr(ins[0], at::kFloat);
    std::string half = constant(dt, {}, {0.5}), one = constant(dt, {}, {1.0});
    std::string inner;
    if (approx == "tanh") {
      std::string cube = emit("Mul", {x, emit("Mul", {x, x})});
      std::string z =
          emit("Mul",
               {constant(dt, {}, {std::sqrt(2.0 / M_PI)}),
                emit("Add",
                     {x, emit("Mul", {constant(dt, {}, {0.044715}), cube})})});
      inner = emit("Tanh", {z});
    } else {
      inner = emit("Erf", {emit("Div", {x, constant(dt, {}, {M_SQRT2})})});
    }
    return out(
        emit("Mul", {emit("Mul", {x, half}), emit("Add", {inner, one})}));
  }
  if (kind == "aten::add" || kind == "aten::sub" || kind == "aten::add_" ||
      kind == "aten::sub_" || kind == "aten::rsub") {
    // rsub(a, b, alpha) = b - alpha * a; add/sub(a, b, alpha) = a +- alpha*b.
    const TValue *a = ins[0], *b = ins[1];
    if (kind == "aten::rsub")
      std::swap(a, b);
    at::ScalarType t = promoted(a, b);
    if (ins.size() > 2 && item(ins[2]).kind == Item::Scalar &&
        item(ins[2]).scalar.isDouble() && t != at::kFloat && t != at::kDouble)
      t = at::kFloat;
    std::string rhs = as(b, t);
    if (ins.size() > 2 && item(ins[2]).isNumber() &&
        item(ins[2]).number() != 1.0)
      rhs = emit("Mul", {rhs, constant(t, {}, {item(ins[2]).number()})});
    bool add = kind == "aten::add" || kind == "aten::add_";
    std::string r = emit(add ? "Add" : "Sub", {as(a, t), rhs});
    outRD(r, widest, t);
    if (kind.back() == '_')
      setTensor(ins[0], r, widest, t); // in place: later reads see it
    return;
  }
  auto binaryOut = [&](const char *op) {
    at::ScalarType t = promoted(ins[0], ins[1]);
    outRD(emit(op, {as(ins[0], t), as(ins[1], t)}), widest, t);
  };
  if (kind == "aten::mul" || kind == "aten::mul_") {
    binaryOut("Mul");
    if (kind == "aten::mul_")
      items[ins[0]] = items[n->output()]; // in place
    return;
  }
  if (kind == "aten::div" || kind == "aten::true_divide") {
    at::ScalarType t = promoted(ins[0], ins[1]);
    if (ins.size() > 2 && item(ins[2]).kind == Item::String) {
      const std::string &mode = item(ins[2]).text;
      bool integer = t != at::kFloat && t != at::kDouble;
      std::string q = emit("Div", {as(ins[0], t), as(ins[1], t)});
      // Integer division truncates (ONNX's Div); floats round after.
      if (mode == "floor" && !integer)
        q = emit("Floor", {q});
      else if (mode == "floor")
        q = floorInt(q, as(ins[0], t), as(ins[1], t), t);
      else if (mode == "trunc" && !integer)
        q = cast(cast(q, at::kLong), t);
      else if (mode != "floor" && mode != "trunc")
        fail("aten::div with rounding_mode '" + mode + "' is not supported");
      return outRD(q, widest, t);
    }
    if (t != at::kFloat && t != at::kDouble)
      t = at::kFloat; // true division
    return outRD(emit("Div", {as(ins[0], t), as(ins[1], t)}), widest, t);
  }
  if (kind == "aten::floor_divide" || kind == "aten::floordiv") {
    at::ScalarType dt = promoted(ins[0], ins[1]);
    std::string q = emit("Div", {as(ins[0], dt), as(ins[1], dt)});
    return outRD(dt == at::kFloat || dt == at::kDouble
                     ? emit("Floor", {q})
                     : floorInt(q, as(ins[0], dt), as(ins[1], dt), dt),
                 widest, dt);
  }
  if (kind == "aten::pow")
    return binaryOut("Pow");
  if (kind == "aten::maximum" || kind == "aten::minimum")
    return binaryOut(kind == "aten::maximum" ? "Max" : "Min");
  if (kind == "aten::eq" || kind == "aten::gt" || kind == "aten::lt" ||
      kind == "aten::ge" || kind == "aten::le") {
    static const std::unordered_map<std::string, const char *> cmp = {
        {"aten::eq", "Equal"},
        {"aten::gt", "Greater"},
        {"aten::lt", "Less"},
        {"aten::ge", "GreaterOrEqual"},
        {"aten::le", "LessOrEqual"}};
    return outRD(binary(cmp.at(kind), ins[0], ins[1]), widest, at::kBool);
  }
  if (kind == "aten::linear") {
    std::string y =
        emit("MatMul", {T(0), node("Transpose", {T(1)})->output(0)});
    if (ins.size() > 2 && !isNone(ins[2]))
      y = emit("Add", {y, T(2)});
    return outRD(y, rankOf(ins[0]), firstType);
  }
  if (kind == "aten::einsum") {
    Item &list = item(ins[1]);
    if (item(ins[0]).kind != Item::String || list.kind != Item::List)
      fail("aten::einsum needs an equation and a list of tensors");
    std::vector<std::string> operands;
    for (const Item &e : list.elems) {
      if (e.kind != Item::Tensor)
        fail("aten::einsum needs an equation and a list of tensors");
      operands.push_back(e.name);
    }
    std::string equation = item(ins[0]).text;
    onnx::NodeProto *e = node("Einsum", operands);
    attr(e, "equation", equation);
    // The result's rank: the subscripts after "->" (or the implicit form's
    // letters that appear once; not needed for the common explicit form).
    size_t arrow = equation.find("->");
    int64_t rank = -1;
    if (arrow != std::string::npos) {
      rank = 0;
      for (char c : equation.substr(arrow + 2))
        rank += std::isalpha(static_cast<unsigned char>(c)) ? 1 : 0;
    }
    return outRD(e->output(0), rank, list.elems[0].dtype);
  }
  if (kind == "aten::matmul" || kind == "aten::bmm" || kind == "aten::mm") {
    int64_t ra = rankOf(ins[0]), rb = rankOf(ins[1]);
    int64_t r = rb == 1 ? ra - 1 : ra == 1 ? rb - 1 : std::max(ra, rb);
    return outRD(emit("MatMul", {T(0), T(1)}), r, firstType);
  }
  if (kind == "aten::t") {
    onnx::NodeProto *t = node("Transpose", {T(0)});
    attr(t, "perm", std::vector<int64_t>{1, 0});
    return out(t->output(0));
  }
  if (kind == "aten::embedding") {
    if (ins.size() > 2 && item(ins[2]).isInt() && constInt(ins[2]) >= 0)
      fail("aten::embedding with padding_idx (no gradient for that row) is "
           "not supported");
    onnx::NodeProto *gather = node("Gather", {T(0), T(1)});
    attr(gather, "axis", int64_t(0));
    return outRD(gather->output(0), rankOf(ins[1]) + 1, dtypeOf(ins[0]));
  }
  if (kind == "aten::layer_norm") {
    std::vector<int64_t> normalized = constInts(ins[1]);
    at::ScalarType dt = dtypeOr(ins[0], at::kFloat);
    std::string scale = isNone(ins[2]) ? constant(dt, normalized, {1.0}) : T(2);
    std::string bias = isNone(ins[3]) ? constant(dt, normalized, {0.0}) : T(3);
    onnx::NodeProto *ln = node("LayerNormalization", {T(0), scale, bias});
    attr(ln, "axis", -static_cast<int64_t>(normalized.size()));
    attr(ln, "epsilon", static_cast<float>(constDouble(ins[4])));
    return out(ln->output(0));
  }
  if (kind == "aten::softmax" || kind == "aten::log_softmax") {
    onnx::NodeProto *s =
        node(kind == "aten::softmax" ? "Softmax" : "LogSoftmax", {T(0)});
    attr(s, "axis", constInt(ins[1]));
    std::string y = s->output(0);
    if (ins.size() > 2 && item(ins[2]).isInt())
      y = cast(y, static_cast<at::ScalarType>(constInt(ins[2])));
    return out(y);
  }
  if (kind == "aten::view" || kind == "aten::reshape") {
    int64_t r = item(ins[1]).kind == Item::List
                    ? static_cast<int64_t>(item(ins[1]).elems.size())
                    : 1;
    return outRD(emit("Reshape", {T(0), intList(ins[1])}), r, firstType);
  }
  if (kind == "aten::view_as" || kind == "aten::reshape_as")
    return outRD(emit("Reshape", {T(0), emit("Shape", {T(1)})}), rankOf(ins[1]),
                 dtypeOf(ins[0]));
  if (kind == "aten::expand_as")
    return outRD(emit("Expand", {T(0), emit("Shape", {T(1)})}), rankOf(ins[1]),
                 dtypeOf(ins[0]));
  if (kind == "aten::unsqueeze")
    return outRD(emit("Unsqueeze", {T(0), int1(ins[1])}), rankOf(ins[0]) + 1,
                 firstType);
  if (kind == "aten::squeeze")
    return ins.size() > 1 ? outRD(emit("Squeeze", {T(0), int1(ins[1])}),
                                  rankOf(ins[0]) - 1, firstType)
                          : outRD(emit("Squeeze", {T(0)}), -1, firstType);
  if (kind == "aten::flatten") {
    int64_t r = rankOf(ins[0]);
    int64_t start = axis(constInt(ins[1]), r), end = axis(constInt(ins[2]), r);
    if (r == 0 || start == end)
      return out(r == 0 ? emit("Reshape", {T(0), ints({1})}) : T(0));
    if (end != r - 1)
      fail("aten::flatten of inner dimensions is not supported");
    // Dims before start copied (0), the rest merged (-1).
    std::vector<int64_t> shape(start, 0);
    shape.push_back(-1);
    return outRD(emit("Reshape", {T(0), ints(shape)}), start + 1, firstType);
  }
  if (kind == "aten::expand") {
    // -1 keeps a dimension: in ONNX's broadcasting, 1 does.
    Item sizes = item(ins[1]);
    for (Item &e : sizes.elems)
      if (e.isInt() && e.scalar.toInt() == -1)
        e = Item::of(int64_t(1));
    return outRD(emit("Expand", {T(0), intList(sizes)}),
                 static_cast<int64_t>(sizes.elems.size()), firstType);
  }
  if (kind == "aten::contiguous" || kind == "aten::clone" ||
      kind == "aten::alias")
    return out(T(0));
  if (kind == "aten::detach")
    fail("aten::detach (a stop-gradient) is not supported yet: its gradient "
         "would flow");
  if (kind == "aten::to" || kind == "aten::type_as") {
    at::ScalarType to = dtypeOr(n->output(), dtypeOr(ins[0], at::kFloat));
    if (const TValue *d = argument(n, "dtype"); d && !isNone(d))
      to = static_cast<at::ScalarType>(constInt(d));
    else if (const TValue *other = argument(n, "other"))
      to = dtypeOf(other);
    return outRD(dtypeOr(ins[0], at::kFloat) == to && !item(ins[0]).isNumber()
                     ? T(0)
                     : cast(T(0), to),
                 std::max<int64_t>(widest, 0), to);
  }
  if (kind == "aten::transpose") {
    int64_t r = rankOf(ins[0]);
    std::vector<int64_t> perm(r);
    for (int64_t i = 0; i < r; ++i)
      perm[i] = i;
    std::swap(perm[axis(constInt(ins[1]), r)], perm[axis(constInt(ins[2]), r)]);
    onnx::NodeProto *t = node("Transpose", {T(0)});
    attr(t, "perm", perm);
    return out(t->output(0));
  }
  if (kind == "aten::permute") {
    int64_t r = rankOf(ins[0]);
    std::vector<int64_t> perm;
    for (int64_t d : constInts(ins[1]))
      perm.push_back(axis(d, r));
    onnx::NodeProto *t = node("Transpose", {T(0)});
    attr(t, "perm", perm);
    return out(t->output(0));
  }
  if (kind == "aten::split" || kind == "aten::split_with_sizes" ||
      kind == "aten::chunk" || kind == "aten::unbind") {
    int64_t r = rankOf(ins[0]);
    int64_t dim =
        axis(kind == "aten::unbind" ? constInt(ins[1]) : constInt(ins[2]), r);
    // How many pieces: from the dimension's size when known, else from the
    // prim::ListUnpack that takes the list apart.
    int64_t pieces = -1;
    for (const torch::jit::Use &use : n->output()->uses())
      if (use.user->kind() == c10::Symbol::fromQualString("prim::ListUnpack"))
        pieces = use.user->outputs().size();
    auto known = knownShape(ins[0]);
    std::vector<int64_t> sizes;
    if (kind == "aten::split_with_sizes") {
      sizes = constInts(ins[1]);
    } else if (known) {
      int64_t size = (*known)[dim];
      if (kind != "aten::unbind" && constInt(ins[1]) <= 0)
        fail(kind + " into pieces of " + std::to_string(constInt(ins[1])));
      int64_t piece = kind == "aten::unbind" ? 1
                      : kind == "aten::chunk"
                          ? (size + constInt(ins[1]) - 1) / constInt(ins[1])
                          : constInt(ins[1]);
      for (int64_t at = 0; at < size; at += piece)
        sizes.push_back(std::min(piece, size - at));
    } else if (pieces > 0 && kind == "aten::split" && item(ins[1]).isInt()) {
      sizes.assign(pieces, constInt(ins[1]));
    } else if (kind == "aten::chunk") {
      pieces = constInt(ins[1]); // equal pieces when the size divides
    } else if (pieces <= 0) {
      fail("cannot tell into how many pieces " + kind + " cuts '" +
           ins[0]->debugName() + "'");
    }
    int count = sizes.empty() ? pieces : static_cast<int>(sizes.size());
    // Without sizes ONNX's Split cuts equal pieces (chunk, unbind).
    onnx::NodeProto *s =
        node("Split",
             sizes.empty() ? std::vector<std::string>{T(0)}
                           : std::vector<std::string>{T(0), ints(sizes)},
             count);
    attr(s, "axis", dim);
    Item list;
    list.kind = Item::List;
    for (int i = 0; i < s->output_size(); ++i) {
      Item e;
      e.kind = Item::Tensor;
      e.name = s->output(i);
      e.rank = r;
      e.dtype = firstType;
      if (kind == "aten::unbind") {
        e.name = emit("Squeeze", {e.name, ints({dim})});
        e.rank = r - 1;
      }
      list.elems.push_back(e);
    }
    items[n->output()] = list;
    return;
  }
  if (kind == "aten::select") {
    int64_t r = rankOf(ins[0]);
    int64_t dim = axis(constInt(ins[1]), r);
    // ONNX's Gather counts negative indices from the end, as PyTorch does.
    onnx::NodeProto *gather = node(
        "Gather", {T(0), constant(at::kLong, {}, {double(constInt(ins[2]))})});
    attr(gather, "axis", dim);
    return outRD(gather->output(0), r - 1, firstType);
  }
  if (kind == "aten::slice") {
    int64_t dim = axis(constInt(ins[1]), rankOf(ins[0]));
    // ONNX's Slice clamps and counts negative bounds from the end.
    std::string start = isNone(ins[2]) ? ints({0}) : int1(ins[2]);
    std::string end = isNone(ins[3])
                          ? ints({std::numeric_limits<int64_t>::max()})
                          : int1(ins[3]);
    std::string step = ins.size() > 4 ? int1(ins[4]) : ints({1});
    return out(emit("Slice", {T(0), start, end, ints({dim}), step}));
  }
  if (kind == "aten::cat") {
    Item &list = item(ins[0]);
    if (list.kind != Item::List)
      fail("aten::cat of something that is not a list of tensors");
    std::vector<std::string> parts;
    for (const Item &e : list.elems) {
      if (e.kind != Item::Tensor)
        fail("aten::cat of something that is not a list of tensors");
      parts.push_back(e.name);
    }
    onnx::NodeProto *c = node("Concat", parts);
    attr(c, "axis", constInt(ins[1]));
    return outRD(c->output(0), list.elems[0].rank, list.elems[0].dtype);
  }
  if (kind == "aten::masked_fill") {
    std::string value = operandLike(ins[2], ins[0]);
    return out(emit("Where", {T(1), value, T(0)}));
  }
  if (kind == "aten::where") {
    const TValue *like = isTensor(ins[1]) ? ins[1] : ins[2];
    return outRD(emit("Where", {T(0), operandLike(ins[1], like),
                                operandLike(ins[2], like)}),
                 widest, dtypeOf(like));
  }
  if (kind == "aten::tril" || kind == "aten::triu") {
    onnx::NodeProto *t = node(
        "Trilu", {T(0), constant(at::kLong, {}, {double(constInt(ins[1]))})});
    attr(t, "upper", int64_t(kind == "aten::triu"));
    return out(t->output(0));
  }
  if (kind == "aten::ones" || kind == "aten::zeros" || kind == "aten::full" ||
      kind == "aten::ones_like" || kind == "aten::zeros_like" ||
      kind == "aten::full_like") {
    double value = kind == "aten::full" || kind == "aten::full_like"
                       ? constDouble(ins[1])
                   : kind == "aten::ones" || kind == "aten::ones_like" ? 1.0
                                                                       : 0.0;
    bool like = kind.size() > 5 && kind.substr(kind.size() - 5) == "_like";
    at::ScalarType dtype = like ? dtypeOr(ins[0], at::kFloat) : at::kFloat;
    if (const TValue *d = argument(n, "dtype"); d && !isNone(d))
      dtype = static_cast<at::ScalarType>(constInt(d));
    else if (!like)
      dtype = dtypeOr(n->output(), at::kFloat);
    onnx::NodeProto *c = node("ConstantOfShape",
                              {like ? emit("Shape", {T(0)}) : intList(ins[0])});
    onnx::TensorProto *t = c->add_attribute()->mutable_t();
    c->mutable_attribute(0)->set_name("value");
    c->mutable_attribute(0)->set_type(onnx::AttributeProto::TENSOR);
    t->set_data_type(onnxType(dtype));
    t->add_dims(1);
    std::string raw;
    appendElement(raw, dtype, value);
    t->set_raw_data(raw);
    int64_t r = like ? rankOf(ins[0])
                     : static_cast<int64_t>(item(ins[0]).kind == Item::List
                                                ? item(ins[0]).elems.size()
                                                : 1);
    return outRD(c->output(0), r, dtype);
  }
  if (kind == "aten::arange") {
    // arange(end, ...), arange(start, end, ...), arange(start, end, step,
    // ...): the schema's argument names tell them apart.
    const TValue *start = argument(n, "start"), *end = argument(n, "end"),
                 *step = argument(n, "step");
    at::ScalarType dtype = at::kLong;
    for (const TValue *v : {start, end, step})
      if (v && item(v).kind == Item::Scalar && item(v).scalar.isDouble())
        dtype = at::kFloat;
    if (const TValue *d = argument(n, "dtype"); d && !isNone(d))
      dtype = static_cast<at::ScalarType>(constInt(d));
    auto bound = [&](const TValue *v, double dflt) {
      return v ? tensor(v, dtype) : constant(dtype, {}, {dflt});
    };
    return outRD(
        emit("Range", {bound(start, 0), bound(end, 0), bound(step, 1)}), 1,
        dtype);
  }
  if (kind == "aten::mean" || kind == "aten::sum") {
    std::vector<int64_t> dims;
    bool keep = false;
    int64_t r = rankOf(ins[0]);
    if (ins.size() >= 3 && item(ins[1]).kind == Item::List) {
      for (int64_t d : constInts(ins[1]))
        dims.push_back(axis(d, r));
      keep = constBool(ins[2]);
    } else {
      for (int64_t d = 0; d < r; ++d)
        dims.push_back(d);
    }
    int64_t rank = keep ? r : r - static_cast<int64_t>(dims.size());
    if (kind == "aten::mean") {
      onnx::NodeProto *m = node("ReduceMean", {T(0)});
      attr(m, "axes", dims);
      attr(m, "keepdims", int64_t(keep));
      return outRD(m->output(0), rank, firstType);
    }
    onnx::NodeProto *s = node("ReduceSum", {T(0), ints(dims)});
    attr(s, "keepdims", int64_t(keep));
    return outRD(s->output(0), rank, firstType);
  }
  if (kind == "aten::dropout" || kind == "aten::feature_dropout") {
    double p = constDouble(ins[1]);
    bool train = constBool(ins[2]);
    if (p == 0.0 || !train)
      return out(T(0));
    if (kind == "aten::feature_dropout")
      fail("channel dropout (aten::feature_dropout) is not supported");
    onnx::NodeProto *d = node("Dropout", {T(0), constant(at::kFloat, {}, {p}),
                                          constant(at::kBool, {}, {1.0})});
    return out(d->output(0));
  }
  if (kind == "aten::cross_entropy_loss") {
    if (!isNone(ins[2]))
      fail("aten::cross_entropy_loss with class weights is not supported");
    if (ins.size() > 5 && constDouble(ins[5]) != 0.0)
      fail("aten::cross_entropy_loss with label smoothing is not supported");
    static const char *reductions[] = {"none", "mean", "sum"};
    int64_t reduction = constInt(ins[3]);
    onnx::NodeProto *l = node("SoftmaxCrossEntropyLoss", {T(0), T(1)});
    attr(l, "reduction", std::string(reductions[reduction]));
    attr(l, "ignore_index", constInt(ins[4]));
    return outRD(l->output(0), reduction == 0 ? rankOf(ins[1]) : 0, firstType);
  }
  if (kind == "aten::batch_norm") {
    bool training = constBool(ins[5]);
    std::string x = T(0);
    at::ScalarType dt = dtypeOr(ins[0], at::kFloat);
    if (isNone(ins[1]) || isNone(ins[2]))
      fail("aten::batch_norm without an affine weight and bias is not "
           "supported");
    std::string scale = T(1), bias = T(2);
    (void)dt;
    if (isNone(ins[3]) || isNone(ins[4]))
      fail("aten::batch_norm without running statistics is not supported");
    onnx::NodeProto *bn = node("BatchNormalization",
                               {x, scale, bias, T(3), T(4)}, training ? 3 : 1);
    // ONNX's momentum weighs the old statistics, PyTorch's the new.
    attr(bn, "momentum", static_cast<float>(1.0 - constDouble(ins[6])));
    attr(bn, "epsilon", static_cast<float>(constDouble(ins[7])));
    attr(bn, "training_mode", int64_t(training));
    out(bn->output(0));
    if (training) {
      // In place: the statistics' later readers see the update.
      setTensor(ins[3], bn->output(1), 1, firstType);
      setTensor(ins[4], bn->output(2), 1, firstType);
    }
    return;
  }
  if (kind == "aten::_convolution" || kind == "aten::conv2d") {
    if (rankOf(ins[0]) != 4)
      fail("only 2-D convolutions are supported");
    bool full = kind == "aten::_convolution";
    if (full && constBool(ins[6]))
      fail("transposed convolutions are not supported");
    std::vector<int64_t> stride = constInts(ins[3]), pad = constInts(ins[4]),
                         dilation = constInts(ins[5]);
    int64_t groups = constInt(ins[full ? 8 : 6]);
    auto pair = [](std::vector<int64_t> v) {
      return v.size() == 1 ? std::vector<int64_t>{v[0], v[0]} : v;
    };
    stride = pair(stride);
    pad = pair(pad);
    dilation = pair(dilation);
    std::vector<std::string> operands = {T(0), T(1)};
    if (!isNone(ins[2]))
      operands.push_back(T(2));
    onnx::NodeProto *c = node("Conv", operands);
    attr(c, "strides", stride);
    attr(c, "pads", std::vector<int64_t>{pad[0], pad[1], pad[0], pad[1]});
    attr(c, "dilations", dilation);
    attr(c, "group", groups);
    return out(c->output(0));
  }
  if (kind == "aten::max_pool2d" || kind == "aten::avg_pool2d") {
    auto pair = [](std::vector<int64_t> v) {
      return v.size() == 1 ? std::vector<int64_t>{v[0], v[0]} : v;
    };
    std::vector<int64_t> kernel = pair(constInts(ins[1]));
    std::vector<int64_t> stride = constInts(ins[2]);
    stride = stride.empty() ? kernel : pair(stride);
    std::vector<int64_t> pad = pair(constInts(ins[3]));
    bool max = kind == "aten::max_pool2d";
    if (constBool(ins[max ? 5 : 4]))
      fail("ceil_mode pooling is not supported");
    onnx::NodeProto *p = node(max ? "MaxPool" : "AveragePool", {T(0)});
    attr(p, "kernel_shape", kernel);
    attr(p, "strides", stride);
    attr(p, "pads", std::vector<int64_t>{pad[0], pad[1], pad[0], pad[1]});
    if (max) {
      std::vector<int64_t> dilation = pair(constInts(ins[4]));
      if (dilation != std::vector<int64_t>{1, 1})
        fail("dilated max pooling is not supported");
    } else {
      attr(p, "count_include_pad", int64_t(constBool(ins[5])));
      if (ins.size() > 6 && !isNone(ins[6]))
        fail("avg_pool2d with divisor_override is not supported");
    }
    return out(p->output(0));
  }
  if (kind == "aten::adaptive_avg_pool2d") {
    std::vector<int64_t> size = constInts(ins[1]);
    if (size != std::vector<int64_t>{1, 1} && size != std::vector<int64_t>{1})
      fail("adaptive average pooling to anything but 1x1 is not supported");
    return out(emit("GlobalAveragePool", {T(0)}));
  }
  if (kind == "aten::repeat_interleave") {
    // repeat_interleave(x, repeats: int, dim): each index along dim repeated.
    auto known = knownShape(ins[0]);
    if (!known)
      fail("aten::repeat_interleave needs its input's shape");
    std::vector<int64_t> shape = *known;
    int64_t dim = axis(constInt(ins[2]), shape.size());
    int64_t repeats = constInt(ins[1]);
    std::vector<double> index;
    for (int64_t i = 0; i < shape[dim]; ++i)
      for (int64_t k = 0; k < repeats; ++k)
        index.push_back(i);
    onnx::NodeProto *gather =
        node("Gather",
             {T(0), constant(at::kLong, {static_cast<int64_t>(index.size())},
                             index)});
    attr(gather, "axis", dim);
    return out(gather->output(0));
  }
  fail("unsupported TorchScript op '" + kind + "'");
}

void Translator::run(torch::jit::Graph &graph,
                     const std::vector<std::string> &names) {
  for (const auto &p : root.named_parameters(/*recurse=*/true))
    parameterNames.emplace(p.value.unsafeGetTensorImpl(), p.name);
  for (const auto &b : root.named_buffers(/*recurse=*/true))
    bufferNames.emplace(b.value.unsafeGetTensorImpl(), b.name);
  // BatchNorm's statistics, read through prim::GetAttr.
  std::function<void(torch::jit::Block *)> scan = [&](torch::jit::Block *b) {
    for (Node *n : b->nodes()) {
      if (n->kind() == c10::Symbol::fromQualString("aten::batch_norm"))
        for (int i : {3, 4})
          runningStats[n->inputs()[i]] = true;
      for (torch::jit::Block *inner : n->blocks())
        scan(inner);
    }
  };
  scan(graph.block());

  Item self;
  self.kind = Item::Module;
  self.module = root;
  items[graph.inputs()[0]] = self;
  for (size_t i = 1; i < graph.inputs().size(); ++i) {
    const TValue *in = graph.inputs()[i];
    current = nullptr;
    setTensor(in, names[i - 1], rankOf(in), dtypeOf(in));
    onnx::ValueInfoProto *info = g->add_input();
    info->set_name(names[i - 1]);
    auto *tt = info->mutable_type()->mutable_tensor_type();
    current = nullptr;
    tt->set_elem_type(onnxType(dtypeOf(in)));
    for (int64_t d : shapeOf(in))
      tt->mutable_shape()->add_dim()->set_dim_value(d);
  }
  translateBlock(graph.block());
  current = nullptr;
  // Outputs: a tensor, or a tuple of them.
  std::vector<Item> outs;
  const Item &result = item(graph.outputs()[0]);
  if (result.kind == Item::List)
    outs = result.elems;
  else
    outs = {result};
  for (size_t i = 0; i < outs.size(); ++i) {
    if (outs[i].kind != Item::Tensor)
      fail("output " + std::to_string(i) + " of forward is not a tensor");
    std::string name = i == 0 ? "output" : "output" + std::to_string(i);
    onnx::NodeProto *n = node("Identity", {outs[i].name});
    n->set_output(0, name);
    g->add_output()->set_name(name);
  }
}

} // namespace

/// Translates the module at \p path; false with \p error on failure.
static bool translateModule(const std::string &path,
                            const std::map<std::string, InputSpec> &inputs,
                            std::string &bytes, std::string &error) {
  try {
    torch::jit::Module module = torch::jit::load(path);
    module.train();
    std::shared_ptr<torch::jit::Graph> graph =
        module.get_method("forward").graph()->copy();
    torch::jit::Inline(*graph);
    const c10::FunctionSchema &schema =
        module.get_method("forward").function().getSchema();
    std::vector<std::string> names;
    for (size_t i = 1; i < schema.arguments().size(); ++i)
      names.push_back(schema.arguments()[i].name());
    // Input types: --input fixes them; otherwise the graph's own (a traced
    // module records them).
    bool changed = false;
    for (size_t i = 1; i < graph->inputs().size(); ++i) {
      auto it = inputs.find(names[i - 1]);
      if (it == inputs.end())
        continue;
      const InputSpec &spec = it->second;
      at::ScalarType dtype = at::kFloat;
      auto recorded = graph->inputs()[i]->type()->cast<c10::TensorType>();
      if (recorded && recorded->scalarType())
        dtype = *recorded->scalarType();
      if (!spec.type.empty())
        dtype = spec.type == "i64"    ? at::kLong
                : spec.type == "i32"  ? at::kInt
                : spec.type == "bool" ? at::kBool
                                      : at::kFloat;
      graph->inputs()[i]->setType(
          c10::TensorType::createContiguous(dtype, at::kCPU, spec.shape));
      changed = true;
    }
    for (const auto &[name, spec] : inputs)
      if (std::find(names.begin(), names.end(), name) == names.end()) {
        error = "--input " + name + ": the module's forward has no input '" +
                name + "'";
        return false;
      }
    // A saved module records no input shapes, traced or scripted.
    for (size_t i = 1; i < graph->inputs().size(); ++i) {
      auto t = graph->inputs()[i]->type()->cast<c10::TensorType>();
      if (!t || !t->sizes().concrete_sizes() || !t->scalarType()) {
        error = "'" + path + "': give the shape of the module's input '" +
                names[i - 1] + "' with --input " + names[i - 1] +
                "=DIMS[xTYPE] (e.g. 8x128xi64)";
        return false;
      }
    }
    if (changed) {
      torch::jit::ConstantPropagation(graph);
      torch::jit::PropagateInputShapes(graph);
    }
    auto proto = std::make_unique<onnx::ModelProto>();
    proto->set_ir_version(8);
    proto->set_producer_name("pytorch"); // PyTorch's BatchNorm conventions
    proto->set_producer_version("cleave-torchscript");
    auto *opset = proto->add_opset_import();
    opset->set_domain("");
    opset->set_version(17);
    proto->mutable_graph()->set_name("torchscript");
    Translator translator(module, proto->mutable_graph());
    translator.run(*graph, names);
    // Parameters PyTorch does not train stay as they are here too.
    std::string frozen;
    for (const auto &p : module.named_parameters(/*recurse=*/true))
      if (!p.value.requires_grad())
        frozen += (frozen.empty() ? "" : ",") + p.name;
    if (!frozen.empty()) {
      auto *entry = proto->add_metadata_props();
      entry->set_key("cleave.frozen");
      entry->set_value(frozen);
    }
    if (!proto->SerializeToString(&bytes)) {
      error =
          "cannot encode the translated model (TorchScript models over 2 GB "
          "are not supported yet: their weights are carried in one protobuf)";
      return false;
    }
    return true;
  } catch (const Failure &f) {
    error = "'" + path + "': " + f.message;
  } catch (const c10::Error &e) {
    std::string what = e.what_without_backtrace();
    error = "cannot load TorchScript module '" + path +
            "': " + what.substr(0, what.find('\n'));
  } catch (const std::exception &e) {
    error = "cannot load TorchScript module '" + path + "': " + e.what();
  }
  return false;
}

/// The plugin's entry point. \p specs holds "NAME=DIMS[xTYPE]" entries
/// separated by ';'. On success *model (malloc'd, *size bytes) is a
/// serialized onnx::ModelProto; on failure *error (malloc'd) the message.
/// Returns 0 on success.
extern "C" __attribute__((visibility("default"))) int
cleave_torchscript_to_onnx(const char *path, const char *specs, char **model,
                           size_t *size, char **error) {
  std::map<std::string, InputSpec> inputs;
  std::string list = specs ? specs : "";
  for (size_t at = 0; at < list.size();) {
    size_t end = list.find(';', at);
    if (end == std::string::npos)
      end = list.size();
    std::string entry = list.substr(at, end - at);
    at = end + 1;
    size_t eq = entry.find('=');
    if (eq == std::string::npos)
      continue;
    InputSpec spec;
    std::string dims = entry.substr(eq + 1);
    for (size_t p = 0; p <= dims.size();) {
      size_t x = dims.find('x', p);
      if (x == std::string::npos)
        x = dims.size();
      std::string part = dims.substr(p, x - p);
      if (!part.empty() && std::isdigit(static_cast<unsigned char>(part[0])))
        spec.shape.push_back(std::stoll(part));
      else if (!part.empty())
        spec.type = part;
      p = x + 1;
    }
    inputs[entry.substr(0, eq)] = spec;
  }
  std::string bytes, message;
  if (!translateModule(path, inputs, bytes, message)) {
    *error = strdup(message.c_str());
    return 1;
  }
  *model = static_cast<char *>(std::malloc(bytes.size()));
  std::memcpy(*model, bytes.data(), bytes.size());
  *size = bytes.size();
  return 0;
}

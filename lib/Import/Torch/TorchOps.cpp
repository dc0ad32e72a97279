//===- TorchOps.cpp - aten ops onto ONNX's operator set -------------------===//
//
// Part of libcleave_torchscript.so (see TorchTranslator.h): one handler per
// aten op (or family of overloads), listed with its kinds in TorchOps.def as
// the ONNX importer lists its handlers; each emits the ONNX nodes torch.onnx
// would and records the result's rank and dtype.
//
//===----------------------------------------------------------------------===//

#include "TorchAtenCall.h"

#include <limits>

namespace cleave_torch {

namespace {

/// aten's unary ops that are one ONNX op.
const std::unordered_map<std::string, const char *> &unaryOps() {
  static const std::unordered_map<std::string, const char *> ops = {
      {"aten::relu", "Relu"},       {"aten::tanh", "Tanh"},
      {"aten::sigmoid", "Sigmoid"}, {"aten::exp", "Exp"},
      {"aten::log", "Log"},         {"aten::sqrt", "Sqrt"},
      {"aten::neg", "Neg"},         {"aten::abs", "Abs"},
      {"aten::sin", "Sin"},         {"aten::cos", "Cos"},
      {"aten::erf", "Erf"},         {"aten::bitwise_not", "Not"},
      {"aten::logical_not", "Not"}, {"aten::reciprocal", "Reciprocal"}};
  return ops;
}

} // namespace

const std::multimap<std::string, Translator::AtenHandler> &
Translator::atenHandlers() {
  static const std::multimap<std::string, AtenHandler> table = [] {
    std::multimap<std::string, AtenHandler> t;
    for (const auto &entry : unaryOps()) {
      t.emplace(entry.first, &Translator::atenUnary);
    }
#define ATEN_HANDLER(HANDLER, ...)                                             \
  for (const char *kind : {__VA_ARGS__})                                       \
    t.emplace(kind, &Translator::HANDLER);
#include "TorchOps.def"
#undef ATEN_HANDLER
    return t;
  }();
  return table;
}

namespace {
/// The ops whose result is a view of their first operand (reshape and
/// flatten copy when they cannot view, so a write through them would be
/// ambiguous: they are not here).
bool isViewOp(const std::string &kind) {
  static const std::unordered_set<std::string> ops = {
      "aten::slice",     "aten::select",    "aten::narrow", "aten::view",
      "aten::view_as",   "aten::transpose", "aten::t",      "aten::permute",
      "aten::unsqueeze", "aten::squeeze",   "aten::expand", "aten::expand_as",
      "aten::detach",    "aten::alias"};
  return ops.count(kind) != 0;
}

/// Whether \p n writes its first operand (relu_, add_, fill_, copy_...).
bool writesSelf(const Node *n, const std::string &kind) {
  if (kind.size() < 2 || kind.back() != '_' || kind[kind.size() - 2] == '_' ||
      n->inputs().empty())
    return false;
  if (const c10::FunctionSchema *schema = n->maybeSchema())
    return !schema->arguments().empty() &&
           schema->arguments()[0].alias_info() &&
           schema->arguments()[0].alias_info()->isWrite();
  return true;
}
} // namespace

void Translator::tensorOp(Node *node) {
  AtenCall c(*this, node);
  ATEN_LOCALS(c);
  if (node->outputs().empty())
    fail("unsupported TorchScript op '" + c.kind + "' (it has no result)");
  bool inPlace = writesSelf(node, kind) && isTensor(ins[0]);
  // An in-place op without a handler of its own (silu_, hardswish_,
  // relu6_...) is its functional op followed by the write.
  if (inPlace && !atenHandlers().count(kind))
    c.kind.pop_back();
  dispatch(c);
  if (inPlace)
    return writeThrough(ins[0], node->outputs()[0]);
  if (isViewOp(kind) && isTensor(ins[0]) && isTensor(node->outputs()[0])) {
    View view;
    if (auto it = views.find(ins[0]); it != views.end())
      view = it->second;
    else
      view.root = ins[0];
    view.version = writes[view.root];
    view.chain.push_back(node);
    views[node->outputs()[0]] = std::move(view);
  }
}

void Translator::dispatch(AtenCall &c) {
  // The handlers of the op's kind, in TorchOps.def's order: each sets the
  // result or leaves it for the next.
  auto [begin, end] = atenHandlers().equal_range(c.kind);
  const TValue *out = c.n->outputs()[0];
  for (auto it = begin; it != end; ++it) {
    (this->*(it->second))(c);
    if (auto set = items.find(out);
        set != items.end() && set->second.name != kPending)
      return;
  }
  fail("unsupported TorchScript op '" + c.kind + "'");
}

Item Translator::replayView(const View &view, const Item &rootValue) {
  if (view.chain.empty())
    return rootValue;
  // The chain's values are translated again from rootValue, then put back.
  std::vector<std::pair<const TValue *, std::optional<Item>>> saved;
  auto save = [&](const TValue *v) {
    auto it = items.find(v);
    saved.emplace_back(v, it == items.end() ? std::nullopt
                                            : std::optional<Item>(it->second));
  };
  // The chain starts at the root or at an alias of it (an in-place op's
  // result): both read rootValue.
  const TValue *base = view.chain.front()->inputs()[0];
  save(view.root);
  if (base != view.root)
    save(base);
  for (Node *n : view.chain)
    save(n->outputs()[0]);
  bool wasReplaying = replaying;
  const Node *was = current;
  replaying = true;
  items[view.root] = rootValue;
  items[base] = rootValue;
  for (Node *n : view.chain) {
    current = n;
    // Marked rather than erased: a caller may hold a reference to it.
    items[n->outputs()[0]].name = kPending;
    AtenCall c(*this, n);
    dispatch(c);
  }
  Item result = items.at(view.chain.back()->outputs()[0]);
  for (auto &[v, old] : saved)
    if (old)
      items[v] = *old;
    else
      items.erase(v);
  replaying = wasReplaying;
  current = was;
  return result;
}

void Translator::refreshView(const TValue *v) {
  auto it = views.find(v);
  if (it == views.end() || it->second.version == writes[it->second.root])
    return;
  View &view = it->second;
  Item fresh = replayView(view, items.at(view.root));
  items.at(v).name = fresh.name;
  view.version = writes[view.root];
}

void Translator::writeThrough(const TValue *target, const TValue *result) {
  Item value = items.at(result);
  View view;
  if (auto it = views.find(target); it != views.end())
    view = it->second;
  else
    view = View{target, {}, 0};
  Item root = items.at(view.root);
  if (value.dtype && root.dtype && *value.dtype != *root.dtype) {
    value.name = cast(value.name, *root.dtype);
    value.dtype = root.dtype;
  }
  if (view.chain.empty()) {
    root.name = value.name;
  } else {
    // The root's flat indices, viewed as the target was, say where the
    // values go. (They are constants once shapes are fixed; the ONNX
    // importer turns a write whose indices form a strided box, as a chain
    // of slices and selects gives, into slice_scatter.)
    std::string shape = emit("Shape", {root.name});
    Item index = root;
    index.dtype = at::kLong;
    index.name = emit("Reshape", {emit("Range", {constant(at::kLong, {}, {0}),
                                                 emit("Size", {root.name}),
                                                 constant(at::kLong, {}, {1})}),
                                  shape});
    std::string viewIndex = replayView(view, index).name;
    std::string flat = ints({-1});
    onnx::NodeProto *scatter = node(
        "ScatterElements",
        {emit("Reshape", {root.name, flat}), emit("Reshape", {viewIndex, flat}),
         emit("Reshape",
              {emit("Expand", {value.name, emit("Shape", {viewIndex})}),
               flat})});
    attr(scatter, "axis", int64_t(0));
    root.name = emit("Reshape", {scatter->output(0), shape});
  }
  items[view.root] = root;
  view.version = ++writes[view.root];
  // The operand and the op's result now read the written values.
  if (target != view.root) {
    items[target] = value;
    views[target] = view;
  }
  items[result] = value;
  views[result] = view;
}

//===----------------------------------------------------------------------===//
// Elementwise and comparison ops
//===----------------------------------------------------------------------===//

void Translator::atenUnary(AtenCall &call) {
  ATEN_LOCALS(call);
  auto it = unaryOps().find(kind);
  bool floatOp = kind != "aten::relu" && kind != "aten::neg" &&
                 kind != "aten::abs" && kind != "aten::bitwise_not" &&
                 kind != "aten::logical_not";
  at::ScalarType dt = dtypeOr(ins[0], at::kFloat);
  if (floatOp && dt != at::kFloat && dt != at::kDouble)
    return outRD(emit(it->second, {cast(T(0), at::kFloat)}), widest,
                 at::kFloat);
  return unary(it->second);
}

void Translator::atenRsqrt(AtenCall &call) {
  ATEN_LOCALS(call);
  return out(emit("Reciprocal", {emit("Sqrt", {T(0)})}));
}

void Translator::atenSilu(AtenCall &call) {
  ATEN_LOCALS(call);
  return out(emit("Mul", {T(0), emit("Sigmoid", {T(0)})}));
}

void Translator::atenHardswish(AtenCall &call) {
  ATEN_LOCALS(call);
  // x * relu6(x + 3) / 6 and relu6(x + 3) / 6, as PyTorch defines them.
  at::ScalarType dt = dtypeOr(ins[0], at::kFloat);
  std::string relu6 =
      emit("Clip", {emit("Add", {T(0), constant(dt, {}, {3.0})}),
                    constant(dt, {}, {0.0}), constant(dt, {}, {6.0})});
  std::string y = emit("Div", {relu6, constant(dt, {}, {6.0})});
  return out(kind == "aten::hardsigmoid" ? y : emit("Mul", {T(0), y}));
}

void Translator::atenLeakyRelu(AtenCall &call) {
  ATEN_LOCALS(call);
  onnx::NodeProto *r = node("LeakyRelu", {T(0)});
  attr(r, "alpha",
       static_cast<float>(ins.size() > 1 ? constDouble(ins[1]) : 0.01));
  return out(r->output(0));
}

void Translator::atenGelu(AtenCall &call) {
  ATEN_LOCALS(call);
  std::string approx = ins.size() > 1 && item(ins[1]).kind == Item::String
                           ? item(ins[1]).text
                           : "none";
  std::string x = T(0);
  at::ScalarType dt = dtypeOr(ins[0], at::kFloat);
  std::string half = constant(dt, {}, {0.5}), one = constant(dt, {}, {1.0});
  std::string inner;
  if (approx == "tanh") {
    std::string cube = emit("Mul", {x, emit("Mul", {x, x})});
    std::string z = emit(
        "Mul",
        {constant(dt, {}, {std::sqrt(2.0 / M_PI)}),
         emit("Add", {x, emit("Mul", {constant(dt, {}, {0.044715}), cube})})});
    inner = emit("Tanh", {z});
  } else {
    inner = emit("Erf", {emit("Div", {x, constant(dt, {}, {M_SQRT2})})});
  }
  return out(emit("Mul", {emit("Mul", {x, half}), emit("Add", {inner, one})}));
}

void Translator::atenAddSub(AtenCall &call) {
  ATEN_LOCALS(call);
  // rsub(a, b, alpha) = b - alpha * a; add/sub(a, b, alpha) = a +- alpha*b.
  const TValue *a = ins[0], *b = ins[1];
  if (kind == "aten::rsub")
    std::swap(a, b);
  at::ScalarType t = promoted(a, b);
  if (ins.size() > 2 && item(ins[2]).kind == Item::Scalar &&
      item(ins[2]).scalar.isDouble() && t != at::kFloat && t != at::kDouble)
    t = at::kFloat;
  std::string rhs = as(b, t);
  if (ins.size() > 2 && item(ins[2]).isNumber() && item(ins[2]).number() != 1.0)
    rhs = emit("Mul", {rhs, constant(t, {}, {item(ins[2]).number()})});
  bool add = kind == "aten::add" || kind == "aten::add_";
  std::string r = emit(add ? "Add" : "Sub", {as(a, t), rhs});
  return outRD(r, widest, t);
}

void Translator::atenMul(AtenCall &call) {
  ATEN_LOCALS(call);
  return binaryOut("Mul");
}

void Translator::atenDiv(AtenCall &call) {
  ATEN_LOCALS(call);
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

void Translator::atenFloorDivide(AtenCall &call) {
  ATEN_LOCALS(call);
  at::ScalarType dt = promoted(ins[0], ins[1]);
  std::string q = emit("Div", {as(ins[0], dt), as(ins[1], dt)});
  return outRD(dt == at::kFloat || dt == at::kDouble
                   ? emit("Floor", {q})
                   : floorInt(q, as(ins[0], dt), as(ins[1], dt), dt),
               widest, dt);
}

void Translator::atenPow(AtenCall &call) {
  ATEN_LOCALS(call);
  return binaryOut("Pow");
}

void Translator::atenMaximum(AtenCall &call) {
  ATEN_LOCALS(call);
  return binaryOut(kind == "aten::maximum" ? "Max" : "Min");
}

// max(a, b) / min(a, b) of two tensors (max.other); max(x), the whole
// reduction; max(x, dim, keepdim) -> (values, indices), Switch's top-1
// routing, as TopK with k = 1: the gradient reaches the index returned, as
// in PyTorch.
void Translator::atenMaxMinOfTwo(AtenCall &call) {
  ATEN_LOCALS(call);
  bool max = kind == "aten::max";
  if (ins.size() == 2 && isTensor(ins[1]))
    return binaryOut(max ? "Max" : "Min");
  int64_t rank = rankOf(ins[0]);
  if (rank < 0)
    fail(kind + " needs its input's rank");
  if (ins.size() == 1) {
    onnx::NodeProto *m = node(max ? "ReduceMax" : "ReduceMin", {T(0)});
    attr(m, "keepdims", int64_t(0));
    return outRD(m->output(0), 0, firstType);
  }
  if (ins.size() < 2 || !item(ins[1]).isInt())
    fail(kind + " with this overload is not supported");
  int64_t dim = axis(constInt(ins[1]), rank);
  bool keep = ins.size() > 2 && constBool(ins[2]);
  onnx::NodeProto *t = node("TopK", {T(0), constant(at::kLong, {1}, {1.0})}, 2);
  attr(t, "axis", dim);
  attr(t, "largest", int64_t(max));
  std::string values = t->output(0), indices = t->output(1);
  if (!keep) {
    values = emit("Squeeze", {values, ints({dim})});
    indices = emit("Squeeze", {indices, ints({dim})});
  }
  int64_t r = keep ? rank : rank - 1;
  outRD(values, r, dtypeOr(ins[0], at::kFloat), 0);
  return outRD(indices, r, at::kLong, 1);
}

void Translator::atenCompare(AtenCall &call) {
  ATEN_LOCALS(call);
  static const std::unordered_map<std::string, const char *> cmp = {
      {"aten::eq", "Equal"},
      {"aten::gt", "Greater"},
      {"aten::lt", "Less"},
      {"aten::ge", "GreaterOrEqual"},
      {"aten::le", "LessOrEqual"}};
  if (kind == "aten::ne")
    return outRD(emit("Not", {binary("Equal", ins[0], ins[1])}), widest,
                 at::kBool);
  return outRD(binary(cmp.at(kind), ins[0], ins[1]), widest, at::kBool);
}

//===----------------------------------------------------------------------===//
// Matrix products, embedding, normalisation, softmax
//===----------------------------------------------------------------------===//

void Translator::atenLinear(AtenCall &call) {
  ATEN_LOCALS(call);
  std::string y = emit("MatMul", {T(0), node("Transpose", {T(1)})->output(0)});
  if (ins.size() > 2 && !isNone(ins[2]))
    y = emit("Add", {y, T(2)});
  return outRD(y, rankOf(ins[0]), firstType);
}

void Translator::atenEinsum(AtenCall &call) {
  ATEN_LOCALS(call);
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

void Translator::atenMatmul(AtenCall &call) {
  ATEN_LOCALS(call);
  int64_t ra = rankOf(ins[0]), rb = rankOf(ins[1]);
  int64_t r = rb == 1 ? ra - 1 : ra == 1 ? rb - 1 : std::max(ra, rb);
  return outRD(emit("MatMul", {T(0), T(1)}), r, firstType);
}

void Translator::atenAddmm(AtenCall &call) {
  ATEN_LOCALS(call);
  // addmm / baddbmm (self, a, b, beta, alpha) = beta self + alpha (a @ b):
  // nn.Linear's scripted form and nn.MultiheadAttention's masked scores;
  // addbmm sums the batch's products first.
  at::ScalarType t = dtypeOr(ins[0], at::kFloat);
  auto factor = [&](size_t i) {
    if (ins.size() <= i || isNone(ins[i]))
      return 1.0;
    if (!item(ins[i]).isNumber())
      fail(kind + " with a beta or alpha computed at run time is not "
                  "supported");
    return item(ins[i]).number();
  };
  double beta = factor(3), alpha = factor(4);
  std::string product = emit("MatMul", {T(1), T(2)});
  int64_t rank = rankOf(ins[1]);
  if (kind == "aten::addbmm") {
    onnx::NodeProto *sum =
        node("ReduceSum", {product, constant(at::kLong, {1}, {0.0})});
    attr(sum, "keepdims", int64_t(0));
    product = sum->output(0);
    rank -= 1;
  }
  if (alpha != 1.0)
    product = emit("Mul", {product, constant(t, {}, {alpha})});
  // beta = 0 ignores self (NaN and inf in it included), as PyTorch does.
  if (beta == 0.0)
    return outRD(product, rank, t);
  std::string self = T(0);
  if (beta != 1.0)
    self = emit("Mul", {self, constant(t, {}, {beta})});
  return outRD(emit("Add", {self, product}), std::max(rank, rankOf(ins[0])), t);
}

void Translator::atenT(AtenCall &call) {
  ATEN_LOCALS(call);
  onnx::NodeProto *t = node("Transpose", {T(0)});
  attr(t, "perm", std::vector<int64_t>{1, 0});
  return out(t->output(0));
}

void Translator::atenEmbedding(AtenCall &call) {
  ATEN_LOCALS(call);
  // padding_idx (>= 0 here: nn.Embedding normalises it) gives that row no
  // gradient: Cleave's own PaddedGather (domain "ai.cleave", the ONNX
  // importer's kCleaveDomain), as ONNX cannot say it.
  if (ins.size() > 2 && item(ins[2]).isInt() && constInt(ins[2]) >= 0) {
    std::string ids = as(ins[1], at::kLong);
    onnx::NodeProto *lookup = node("PaddedGather", {T(0), ids});
    lookup->set_domain("ai.cleave");
    attr(lookup, "padding_idx", constInt(ins[2]));
    return embedded(call, lookup->output(0));
  }
  onnx::NodeProto *gather = node("Gather", {T(0), T(1)});
  attr(gather, "axis", int64_t(0));
  return embedded(call, gather->output(0));
}

void Translator::embedded(AtenCall &call, const std::string &rows) {
  ATEN_LOCALS(call);
  // The ids' shape and the row's width, where both are known: a scripted
  // forward reads sizes of what it looked up (nn.MultiheadAttention's
  // checks), which its types no longer say past a branch.
  auto ids = knownShape(ins[1]), table = knownShape(ins[0]);
  if (ids && table && table->size() == 2) {
    std::vector<int64_t> shape = *ids;
    shape.push_back((*table)[1]);
    staticShapes[rows] = shape;
  }
  return outRD(rows, rankOf(ins[1]) + 1, dtypeOf(ins[0]));
}

void Translator::atenLayerNorm(AtenCall &call) {
  ATEN_LOCALS(call);
  std::vector<int64_t> normalized = constInts(ins[1]);
  at::ScalarType dt = dtypeOr(ins[0], at::kFloat);
  std::string scale = isNone(ins[2]) ? constant(dt, normalized, {1.0}) : T(2);
  std::string bias = isNone(ins[3]) ? constant(dt, normalized, {0.0}) : T(3);
  onnx::NodeProto *ln = node("LayerNormalization", {T(0), scale, bias});
  attr(ln, "axis", -static_cast<int64_t>(normalized.size()));
  attr(ln, "epsilon", static_cast<float>(constDouble(ins[4])));
  return out(ln->output(0));
}

// group_norm(x, groups, w, b, eps) and instance_norm(x, w, b, mean, var,
// use_input_stats, momentum, eps): statistics over each group's (each
// channel's) elements, as formulas, then the per-channel affine.
void Translator::atenGroupNorm(AtenCall &call) {
  ATEN_LOCALS(call);
  bool instance = kind == "aten::instance_norm";
  if (instance && !constBool(ins[5]))
    fail("aten::instance_norm with running statistics (track_running_stats "
         "in eval mode) is not supported");
  int64_t rank = rankOf(ins[0]);
  if (rank < 2)
    fail(kind + " needs a batch and a channel dim");
  std::string x = T(0);
  std::string grouped =
      emit("Reshape",
           {x, instance ? ints({0, 0, -1}) : ints({0, constInt(ins[1]), -1})});
  onnx::NodeProto *mu = node("ReduceMean", {grouped});
  attr(mu, "axes", std::vector<int64_t>{2});
  std::string d = emit("Sub", {grouped, mu->output(0)});
  onnx::NodeProto *var = node("ReduceMean", {emit("Mul", {d, d})});
  attr(var, "axes", std::vector<int64_t>{2});
  at::ScalarType dt = dtypeOr(ins[0], at::kFloat);
  double eps = constDouble(ins[instance ? 7 : 4]);
  std::string y =
      emit("Div",
           {d, emit("Sqrt",
                    {emit("Add", {var->output(0), constant(dt, {}, {eps})})})});
  y = emit("Reshape", {y, emit("Shape", {x})});
  std::vector<int64_t> channel(rank - 1, 1);
  channel[0] = -1;
  const TValue *w = ins[instance ? 1 : 2], *b = ins[instance ? 2 : 3];
  if (!isNone(w))
    y = emit("Mul", {y, emit("Reshape", {tensor(w), ints(channel)})});
  if (!isNone(b))
    y = emit("Add", {y, emit("Reshape", {tensor(b), ints(channel)})});
  return outRD(y, rank, dt);
}

void Translator::atenSoftmax(AtenCall &call) {
  ATEN_LOCALS(call);
  onnx::NodeProto *s =
      node(kind == "aten::softmax" ? "Softmax" : "LogSoftmax", {T(0)});
  attr(s, "axis", constInt(ins[1]));
  std::string y = s->output(0);
  if (ins.size() > 2 && item(ins[2]).isInt())
    y = cast(y, static_cast<at::ScalarType>(constInt(ins[2])));
  return out(y);
}

//===----------------------------------------------------------------------===//
// Views, reshapes, casts and permutations
//===----------------------------------------------------------------------===//

void Translator::atenView(AtenCall &call) {
  ATEN_LOCALS(call);
  int64_t r = item(ins[1]).kind == Item::List
                  ? static_cast<int64_t>(item(ins[1]).elems.size())
                  : 1;
  return outRD(emit("Reshape", {T(0), intList(ins[1])}), r, firstType);
}

void Translator::atenViewAs(AtenCall &call) {
  ATEN_LOCALS(call);
  return outRD(emit("Reshape", {T(0), emit("Shape", {T(1)})}), rankOf(ins[1]),
               dtypeOf(ins[0]));
}

void Translator::atenExpandAs(AtenCall &call) {
  ATEN_LOCALS(call);
  return outRD(emit("Expand", {T(0), emit("Shape", {T(1)})}), rankOf(ins[1]),
               dtypeOf(ins[0]));
}

void Translator::atenUnsqueeze(AtenCall &call) {
  ATEN_LOCALS(call);
  return outRD(emit("Unsqueeze", {T(0), int1(ins[1])}), rankOf(ins[0]) + 1,
               firstType);
}

void Translator::atenSqueeze(AtenCall &call) {
  ATEN_LOCALS(call);
  return ins.size() > 1 ? outRD(emit("Squeeze", {T(0), int1(ins[1])}),
                                rankOf(ins[0]) - 1, firstType)
                        : outRD(emit("Squeeze", {T(0)}), -1, firstType);
}

void Translator::atenFlatten(AtenCall &call) {
  ATEN_LOCALS(call);
  int64_t r = rankOf(ins[0]);
  if (r == 0)
    return outRD(emit("Reshape", {T(0), ints({1})}), 1, firstType);
  int64_t start = axis(constInt(ins[1]), r), end = axis(constInt(ins[2]), r);
  if (start == end)
    return out(T(0));
  if (start > end)
    fail("aten::flatten with start_dim after end_dim");
  if (end == r - 1) {
    // Dims before start copied (0), the rest merged (-1).
    std::vector<int64_t> shape(start, 0);
    shape.push_back(-1);
    return outRD(emit("Reshape", {T(0), ints(shape)}), start + 1, firstType);
  }
  // Inner dims merged: the dims around them read off the shape.
  std::string shape = emit("Shape", {T(0)});
  onnx::NodeProto *before =
      node("Slice", {shape, ints({0}), ints({start}), ints({0})});
  onnx::NodeProto *after =
      node("Slice", {shape, ints({end + 1}), ints({r}), ints({0})});
  onnx::NodeProto *dims =
      node("Concat", {before->output(0), ints({-1}), after->output(0)});
  attr(dims, "axis", int64_t(0));
  return outRD(emit("Reshape", {T(0), dims->output(0)}), r - (end - start),
               firstType);
}

void Translator::atenExpand(AtenCall &call) {
  ATEN_LOCALS(call);
  // -1 keeps a dimension: in ONNX's broadcasting, 1 does.
  Item sizes = item(ins[1]);
  for (Item &e : sizes.elems)
    if (e.isInt() && e.scalar.toInt() == -1)
      e = Item::of(int64_t(1));
  return outRD(emit("Expand", {T(0), intList(sizes)}),
               static_cast<int64_t>(sizes.elems.size()), firstType);
}

void Translator::atenIdentity(AtenCall &call) {
  ATEN_LOCALS(call);
  return out(T(0));
}

void Translator::atenDetach(AtenCall &call) {
  ATEN_LOCALS(call);
  fail("aten::detach (a stop-gradient) is not supported yet: its gradient "
       "would flow");
}

void Translator::atenTo(AtenCall &call) {
  ATEN_LOCALS(call);
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

void Translator::atenTranspose(AtenCall &call) {
  ATEN_LOCALS(call);
  int64_t r = rankOf(ins[0]);
  std::vector<int64_t> perm(r);
  for (int64_t i = 0; i < r; ++i)
    perm[i] = i;
  std::swap(perm[axis(constInt(ins[1]), r)], perm[axis(constInt(ins[2]), r)]);
  onnx::NodeProto *t = node("Transpose", {T(0)});
  attr(t, "perm", perm);
  return out(t->output(0));
}

void Translator::atenPermute(AtenCall &call) {
  ATEN_LOCALS(call);
  int64_t r = rankOf(ins[0]);
  std::vector<int64_t> perm;
  for (int64_t d : constInts(ins[1]))
    perm.push_back(axis(d, r));
  onnx::NodeProto *t = node("Transpose", {T(0)});
  attr(t, "perm", perm);
  return out(t->output(0));
}

//===----------------------------------------------------------------------===//
// Pieces: slicing, concatenation, splitting
//===----------------------------------------------------------------------===//

void Translator::atenSplit(AtenCall &call) {
  ATEN_LOCALS(call);
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
  // Sizes computed from shapes (q|k|v of a fused projection split by
  // [d, head_dim, head_dim] read off x.shape) go to Split as a tensor the
  // ONNX importer folds once the shapes are fixed.
  std::string computedSizes;
  // x.split([a, b, c]) in a scripted module is aten::split with a list.
  if (kind == "aten::split_with_sizes" ||
      (kind == "aten::split" && item(ins[1]).kind == Item::List)) {
    const Item &list = item(ins[1]);
    bool allKnown = list.kind == Item::List;
    for (const Item &e : list.elems)
      allKnown &= e.isInt();
    if (allKnown) {
      sizes = constInts(ins[1]);
    } else {
      computedSizes = intList(ins[1]);
      pieces = static_cast<int64_t>(list.elems.size());
    }
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
  std::vector<std::string> splitInputs{T(0)};
  if (!sizes.empty())
    splitInputs.push_back(ints(sizes));
  else if (!computedSizes.empty())
    splitInputs.push_back(computedSizes);
  onnx::NodeProto *s = node("Split", splitInputs, count);
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

void Translator::atenSelect(AtenCall &call) {
  ATEN_LOCALS(call);
  int64_t r = rankOf(ins[0]);
  int64_t dim = axis(constInt(ins[1]), r);
  // ONNX's Gather counts negative indices from the end, as PyTorch does.
  onnx::NodeProto *gather = node(
      "Gather", {T(0), constant(at::kLong, {}, {double(constInt(ins[2]))})});
  attr(gather, "axis", dim);
  return outRD(gather->output(0), r - 1, firstType);
}

void Translator::atenSlice(AtenCall &call) {
  ATEN_LOCALS(call);
  int64_t dim = axis(constInt(ins[1]), rankOf(ins[0]));
  // ONNX's Slice clamps and counts negative bounds from the end.
  std::string start = isNone(ins[2]) ? ints({0}) : int1(ins[2]);
  std::string end = isNone(ins[3]) ? ints({std::numeric_limits<int64_t>::max()})
                                   : int1(ins[3]);
  std::string step = ins.size() > 4 ? int1(ins[4]) : ints({1});
  return out(emit("Slice", {T(0), start, end, ints({dim}), step}));
}

void Translator::atenStack(AtenCall &call) {
  ATEN_LOCALS(call);
  // Each tensor unsqueezed at dim, then concatenated there.
  Item &list = item(ins[0]);
  if (list.kind != Item::List || list.elems.empty())
    fail("aten::stack of something that is not a list of tensors");
  int64_t r = list.elems[0].rank;
  if (r < 0)
    fail("aten::stack needs its tensors' rank");
  int64_t dim = axis(constInt(ins[1]), r + 1);
  std::vector<std::string> parts;
  for (const Item &e : list.elems) {
    if (e.kind != Item::Tensor || e.rank != r)
      fail("aten::stack of tensors of different ranks");
    parts.push_back(emit("Unsqueeze", {e.name, ints({dim})}));
  }
  onnx::NodeProto *c = node("Concat", parts);
  attr(c, "axis", dim);
  return outRD(c->output(0), r + 1, list.elems[0].dtype);
}

void Translator::atenCat(AtenCall &call) {
  ATEN_LOCALS(call);
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

//===----------------------------------------------------------------------===//
// Masks, creation and reductions
//===----------------------------------------------------------------------===//

void Translator::atenMaskedFill(AtenCall &call) {
  ATEN_LOCALS(call);
  std::string value = operandLike(ins[2], ins[0]);
  return out(emit("Where", {T(1), value, T(0)}));
}

void Translator::atenWhere(AtenCall &call) {
  ATEN_LOCALS(call);
  const TValue *like = isTensor(ins[1]) ? ins[1] : ins[2];
  return outRD(emit("Where", {T(0), operandLike(ins[1], like),
                              operandLike(ins[2], like)}),
               widest, dtypeOf(like));
}

void Translator::atenTril(AtenCall &call) {
  ATEN_LOCALS(call);
  onnx::NodeProto *t = node(
      "Trilu", {T(0), constant(at::kLong, {}, {double(constInt(ins[1]))})});
  attr(t, "upper", int64_t(kind == "aten::triu"));
  return out(t->output(0));
}

void Translator::atenFill(AtenCall &call) {
  ATEN_LOCALS(call);
  // ones/zeros/full(size), *_like(t), t.new_*(size): the size comes from
  // the list operand or from t, the dtype from the argument, t, or the
  // traced result.
  bool like = kind.size() > 5 && kind.substr(kind.size() - 5) == "_like";
  bool fromSelf = kind.rfind("aten::new_", 0) == 0;
  const TValue *sizes = fromSelf ? ins[1] : ins[0];
  double value = kind == "aten::full" || kind == "aten::full_like"
                     ? constDouble(ins[1])
                 : kind == "aten::new_full" ? constDouble(ins[2])
                 : kind == "aten::ones" || kind == "aten::ones_like" ||
                         kind == "aten::new_ones"
                     ? 1.0
                     : 0.0;
  at::ScalarType dtype =
      like || fromSelf ? dtypeOr(ins[0], at::kFloat) : at::kFloat;
  if (const TValue *d = argument(n, "dtype"); d && !isNone(d))
    dtype = static_cast<at::ScalarType>(constInt(d));
  else if (!like && !fromSelf)
    dtype = dtypeOr(n->output(), at::kFloat);
  onnx::NodeProto *c =
      node("ConstantOfShape", {like ? emit("Shape", {T(0)}) : intList(sizes)});
  onnx::TensorProto *t = c->add_attribute()->mutable_t();
  c->mutable_attribute(0)->set_name("value");
  c->mutable_attribute(0)->set_type(onnx::AttributeProto::TENSOR);
  t->set_data_type(onnxType(dtype));
  t->add_dims(1);
  std::string raw;
  appendElement(raw, dtype, value);
  t->set_raw_data(raw);
  int64_t r = like ? rankOf(ins[0])
                   : static_cast<int64_t>(item(sizes).kind == Item::List
                                              ? item(sizes).elems.size()
                                              : 1);
  return outRD(c->output(0), r, dtype);
}

// fill_, zero_ and copy_: the value broadcast to the operand's shape and
// dtype; tensorOp writes it through.
void Translator::atenFillInPlace(AtenCall &call) {
  ATEN_LOCALS(call);
  at::ScalarType dt = dtypeOr(ins[0], at::kFloat);
  std::string v =
      kind == "aten::zero_" ? constant(dt, {}, {0.0}) : tensor(ins[1], dt);
  if (kind != "aten::zero_" && isTensor(ins[1]) &&
      dtypeOr(ins[1], at::kFloat) != dt)
    v = cast(v, dt);
  return outRD(emit("Expand", {v, emit("Shape", {T(0)})}), rankOf(ins[0]), dt);
}

void Translator::atenArange(AtenCall &call) {
  ATEN_LOCALS(call);
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
  return outRD(emit("Range", {bound(start, 0), bound(end, 0), bound(step, 1)}),
               1, dtype);
}

void Translator::atenMeanSum(AtenCall &call) {
  ATEN_LOCALS(call);
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

// logsumexp(x, dim, keepdim) (the router z-loss of Switch and ST-MoE):
// ReduceLogSumExp, which subtracts the maximum as PyTorch does.
void Translator::atenLogSumExp(AtenCall &call) {
  ATEN_LOCALS(call);
  int64_t r = rankOf(ins[0]);
  if (r < 0)
    fail("aten::logsumexp needs its input's rank");
  std::vector<int64_t> dims;
  for (int64_t d : constInts(ins[1]))
    dims.push_back(axis(d, r));
  if (dims.empty())
    for (int64_t d = 0; d < r; ++d)
      dims.push_back(d);
  bool keep = ins.size() > 2 && constBool(ins[2]);
  onnx::NodeProto *m = node("ReduceLogSumExp", {T(0)});
  attr(m, "axes", dims);
  attr(m, "keepdims", int64_t(keep));
  return outRD(m->output(0), keep ? r : r - static_cast<int64_t>(dims.size()),
               firstType);
}

// norm(x, p, dim, keepdim) (CLIP's features / features.norm(dim=-1,
// keepdim=True)), frobenius_norm and linalg_vector_norm: ReduceL2 for p = 2
// (the default), ReduceL1 for p = 1, over dim or every dimension.
void Translator::atenNorm(AtenCall &call) {
  ATEN_LOCALS(call);
  int64_t r = rankOf(ins[0]);
  if (r < 0)
    fail(kind + " needs its input's rank");
  const TValue *p =
      argument(n, kind == "aten::linalg_vector_norm" ? "ord" : "p");
  double order = p && !isNone(p) ? constDouble(p) : 2.0;
  if (order != 1.0 && order != 2.0)
    fail(kind + " with p = " + std::to_string(order) +
         " is not supported (p = 1 and p = 2 are)");
  if (const TValue *d = argument(n, "dtype"); d && !isNone(d))
    fail(kind + " with a dtype is not supported");
  std::vector<int64_t> dims;
  const TValue *dim = argument(n, "dim");
  if (dim && !isNone(dim) && !constInts(dim).empty()) {
    for (int64_t d : constInts(dim))
      dims.push_back(axis(d, r));
  } else {
    for (int64_t d = 0; d < r; ++d)
      dims.push_back(d);
  }
  const TValue *keepdim = argument(n, "keepdim");
  bool keep = keepdim && constBool(keepdim);
  onnx::NodeProto *m = node(order == 2.0 ? "ReduceL2" : "ReduceL1", {T(0)});
  attr(m, "axes", dims);
  attr(m, "keepdims", int64_t(keep));
  int64_t rank = keep ? r : r - static_cast<int64_t>(dims.size());
  return outRD(m->output(0), rank, firstType);
}

//===----------------------------------------------------------------------===//
// Layers: dropout, losses, batch norm, convolution, pooling
//===----------------------------------------------------------------------===//

void Translator::atenDropout(AtenCall &call) {
  ATEN_LOCALS(call);
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

void Translator::atenCrossEntropyLoss(AtenCall &call) {
  ATEN_LOCALS(call);
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

void Translator::atenBatchNorm(AtenCall &call) {
  ATEN_LOCALS(call);
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
  onnx::NodeProto *bn = node("BatchNormalization", {x, scale, bias, T(3), T(4)},
                             training ? 3 : 1);
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

void Translator::atenConvolution(AtenCall &call) {
  ATEN_LOCALS(call);
  // _convolution(x, w, b, stride, padding, dilation, transposed,
  // output_padding, groups, ...), conv{1,2,3}d(x, w, b, stride, padding,
  // dilation, groups), conv_transpose{1,2,3}d(x, w, b, stride, padding,
  // output_padding, groups, dilation).
  int64_t spatial = rankOf(ins[0]) - 2;
  if (spatial < 1 || spatial > 3)
    fail("convolutions have 1 to 3 spatial dims, got an input of rank " +
         std::to_string(spatial + 2));
  bool full = kind == "aten::_convolution";
  bool transposed =
      kind.rfind("aten::conv_transpose", 0) == 0 || (full && constBool(ins[6]));
  const TValue *dilationArg = transposed && !full ? ins[7] : ins[5];
  const TValue *groupsArg = full ? ins[8] : ins[6];
  auto expand = [&](std::vector<int64_t> v) {
    return v.size() == 1 ? std::vector<int64_t>(spatial, v[0]) : v;
  };
  std::vector<int64_t> stride = expand(constInts(ins[3])),
                       pad = expand(constInts(ins[4])),
                       dilation = expand(constInts(dilationArg));
  if (int64_t(stride.size()) != spatial || int64_t(pad.size()) != spatial ||
      int64_t(dilation.size()) != spatial)
    fail("stride, padding and dilation need one entry per spatial dim");
  std::vector<std::string> operands = {T(0), T(1)};
  if (!isNone(ins[2]))
    operands.push_back(T(2));
  onnx::NodeProto *c = node(transposed ? "ConvTranspose" : "Conv", operands);
  attr(c, "strides", stride);
  std::vector<int64_t> pads = pad;
  pads.insert(pads.end(), pad.begin(), pad.end());
  attr(c, "pads", pads);
  attr(c, "dilations", dilation);
  attr(c, "group", constInt(groupsArg));
  if (transposed) {
    std::vector<int64_t> extra = expand(constInts(full ? ins[7] : ins[5]));
    if (int64_t(extra.size()) != spatial)
      fail("output_padding needs one entry per spatial dim");
    attr(c, "output_padding", extra);
  }
  return out(c->output(0));
}

void Translator::atenPool2d(AtenCall &call) {
  ATEN_LOCALS(call);
  auto pair = [](std::vector<int64_t> v) {
    return v.size() == 1 ? std::vector<int64_t>{v[0], v[0]} : v;
  };
  std::vector<int64_t> kernel = pair(constInts(ins[1]));
  std::vector<int64_t> stride = constInts(ins[2]);
  stride = stride.empty() ? kernel : pair(stride);
  std::vector<int64_t> pad = pair(constInts(ins[3]));
  bool max = kind == "aten::max_pool2d";
  bool ceil = constBool(ins[max ? 5 : 4]);
  // PyTorch's average pool divides a ceil-mode window that runs past the
  // padding by a count ONNX's AveragePool does not define the same way.
  if (ceil && !max)
    fail("ceil_mode average pooling is not supported");
  onnx::NodeProto *p = node(max ? "MaxPool" : "AveragePool", {T(0)});
  if (ceil)
    attr(p, "ceil_mode", int64_t(1));
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

void Translator::atenAdaptiveAvgPool2d(AtenCall &call) {
  ATEN_LOCALS(call);
  std::vector<int64_t> size = constInts(ins[1]);
  if (size == std::vector<int64_t>{1, 1} || size == std::vector<int64_t>{1})
    return out(emit("GlobalAveragePool", {T(0)}));
  if (size.size() == 1)
    size.push_back(size[0]);
  int64_t r = rankOf(ins[0]);
  if (size.size() != 2 || (r != 3 && r != 4))
    fail("aten::adaptive_avg_pool2d needs a rank 3 or 4 input and two sizes");
  // Output cell i of an axis of n averages [floor(i n / m), ceil((i + 1) n /
  // m)), PyTorch's windows (they overlap where m does not divide n). Per
  // axis that is an [m, n] averaging matrix, built here from the input's
  // shape (the importer folds it to a constant) and applied as a MatMul.
  std::string x = T(0), shape = emit("Shape", {x});
  auto averaging = [&](int64_t axis, int64_t m) {
    std::string n = emit("Slice", {shape, ints({axis}), ints({axis + 1})});
    std::string zero = constant(at::kLong, {}, {0.0}),
                one = constant(at::kLong, {}, {1.0});
    std::string i =
        emit("Unsqueeze",
             {emit("Range", {zero, constant(at::kLong, {}, {double(m)}), one}),
              ints({1})});
    std::string j =
        emit("Unsqueeze",
             {emit("Range", {zero, emit("Squeeze", {n, ints({0})}), one}),
              ints({0})});
    std::string mm = ints({m});
    std::string start = emit("Div", {emit("Mul", {i, n}), mm});
    std::string end =
        emit("Div", {emit("Add", {emit("Mul", {emit("Add", {i, ints({1})}), n}),
                                  ints({m - 1})}),
                     mm});
    std::string inside = emit(
        "And", {emit("GreaterOrEqual", {j, start}), emit("Less", {j, end})});
    auto toFloat = [&](const std::string &v) {
      onnx::NodeProto *c = node("Cast", {v});
      attr(c, "to", int64_t(onnx::TensorProto::FLOAT));
      return c->output(0);
    };
    return emit("Div", {toFloat(inside), toFloat(emit("Sub", {end, start}))});
  };
  std::string rows = emit("MatMul", {averaging(r - 2, size[0]), x});
  onnx::NodeProto *cols = node("Transpose", {averaging(r - 1, size[1])});
  attr(cols, "perm", std::vector<int64_t>{1, 0});
  return out(emit("MatMul", {rows, cols->output(0)}));
}

} // namespace cleave_torch

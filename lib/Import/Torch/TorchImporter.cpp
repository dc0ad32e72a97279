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
//===----------------------------------------------------------------------===//

#include "TorchTranslator.h"

#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/passes/shape_analysis.h>

namespace cleave_torch {

std::string Translator::initializer(const std::string &name,
                                    const at::Tensor &value) {
  if (!emittedInitializers.count(name)) {
    at::Tensor t = dense(value, name);
    if (onnxType(t.scalar_type()) == onnx::TensorProto::UNDEFINED)
      fail("tensor '" + name + "' has a dtype Cleave does not import");
    onnx::TensorProto *p = g->add_initializer();
    p->set_name(name);
    p->set_data_type(onnxType(t.scalar_type()));
    for (int64_t d : t.sizes())
      p->add_dims(d);
    p->set_raw_data(t.data_ptr(), t.numel() * t.element_size());
    emittedInitializers[name] = true;
    staticShapes[name] = t.sizes().vec();
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
    at::Tensor c = dense(t, name).to(at::kDouble);
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
  // A configuration string (an activation's or a rotary style's name),
  // which the scripted forward compares.
  if (v.isString()) {
    Item i;
    i.kind = Item::String;
    i.text = v.toStringRef();
    items[out] = i;
    return;
  }
  fail("attribute '" + path + "' of kind " + v.tagKind() + " is not supported");
}

/// Scalar and list arithmetic that only needs compile-time values.
/// aten::size: known sizes fold here; others become Shape/Gather, which the
/// ONNX importer folds (every shape is static once the inputs are fixed).
bool Translator::foldSize(Node *n) {
  const TValue *out = n->output();
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

/// Arithmetic and comparisons of compile-time numbers.
bool Translator::foldNumbers(Node *n, const std::string &kind) {
  auto in = [&](size_t i) -> Item & { return item(n->input(i)); };
  const TValue *out = n->outputs().size() == 1 ? n->output() : nullptr;
  auto setNumber = [&](double x, bool integer) {
    items[out] = integer ? Item::of(static_cast<int64_t>(x)) : Item::of(x);
  };
  auto allNumbers = [&] {
    for (const TValue *v : n->inputs())
      if (!item(v).isNumber())
        return false;
    return true;
  };
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

bool Translator::foldScalar(Node *n) {
  std::string kind = n->kind().toQualString();
  auto in = [&](size_t i) -> Item & { return item(n->input(i)); };
  const TValue *out = n->outputs().size() == 1 ? n->output() : nullptr;
  if (kind == "aten::size" && isTensor(n->input(0)))
    return foldSize(n);
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
      in(0).kind == Item::String && in(1).kind == Item::String) {
    bool equal = in(0).text == in(1).text;
    items[out] = Item::of(kind == "aten::eq" ? equal : !equal);
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
  if (kind == "aten::is_floating_point" && isTensor(n->input(0))) {
    std::optional<at::ScalarType> t = in(0).dtype;
    if (!t)
      return false;
    items[out] = Item::of(at::isFloatingType(*t));
    return true;
  }
  // `x.dim() in (2, 3)` (nn.MultiheadAttention's checks): a constant list
  // and a constant number.
  if (kind == "aten::__contains__" && in(0).kind == Item::List &&
      in(1).isNumber()) {
    bool found = false, decided = true;
    for (const Item &e : in(0).elems) {
      if (!e.isNumber())
        decided = false;
      else
        found |= e.number() == in(1).number();
    }
    if (!found && !decided)
      fail("cannot tell at compile time whether a computed size is in a "
           "list");
    items[out] = Item::of(found);
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
  return foldNumbers(n, kind);
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
      at::Tensor t = dense(v->toTensor(), "a constant");
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
    // Fixed by --input: a size read from it anywhere (through a scripted
    // branch's result, whose type says none) is that number.
    staticShapes[names[i - 1]] = shapeOf(in);
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

} // namespace cleave_torch

using namespace cleave_torch;

/// The first non-blank line of a libtorch message (TorchScript's compiler
/// starts its reports with a newline and ends the line with ':', before the
/// source excerpt).
static std::string firstLine(const std::string &what) {
  size_t begin = what.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos)
    return "libtorch gave no reason";
  std::string line = what.substr(begin, what.find('\n', begin) - begin);
  while (!line.empty() &&
         (line.back() == ':' ||
          std::isspace(static_cast<unsigned char>(line.back()))))
    line.pop_back();
  return line;
}

/// Gives the forward's inputs their types: --input fixes them; otherwise
/// the graph's own (a traced module records them). False with \p error when
/// an input has none or --input names no input.
static bool typeInputs(std::shared_ptr<torch::jit::Graph> &graph,
                       const std::vector<std::string> &names,
                       const std::map<std::string, TorchInputSpec> &inputs,
                       const std::string &path, std::string &error) {
  bool changed = false;
  for (size_t i = 1; i < graph->inputs().size(); ++i) {
    auto it = inputs.find(names[i - 1]);
    if (it == inputs.end())
      continue;
    const TorchInputSpec &spec = it->second;
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
    // Scalars, lists and branches only: libtorch's full pass runs tensor ops
    // (torch.zeros(30000, 30000).sum() took 3.6 GB to fold), with no bound
    // on what a hostile archive asks for; tensors are the importer's to fold,
    // within its limits.
    torch::jit::ConstantPropagationImmutableTypes(graph);
    torch::jit::PropagateInputShapes(graph);
  }
  return true;
}

/// Translates the module at \p path; false with \p error on failure.
static bool translateModule(const std::string &path,
                            const std::map<std::string, TorchInputSpec> &inputs,
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
    if (!typeInputs(graph, names, inputs, path, error))
      return false;
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
    error = "cannot load TorchScript module '" + path +
            "': " + firstLine(e.what_without_backtrace());
  } catch (const std::bad_alloc &) {
    error = "cannot load TorchScript module '" + path +
            "': it asks for more memory than this machine has (a corrupt "
            "size in the archive?)";
  } catch (const std::exception &e) {
    error =
        "cannot load TorchScript module '" + path + "': " + firstLine(e.what());
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
  std::map<std::string, TorchInputSpec> inputs;
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
    TorchInputSpec spec;
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

/// torch::jit::load alone, for libtorchSurvivesLoading: returns 0 whether
/// libtorch accepts the archive or throws; a crash is the caller's answer.
extern "C" __attribute__((visibility("default"))) int
cleave_torchscript_probe(const char *path) {
  try {
    torch::jit::load(path);
  } catch (...) {
  }
  return 0;
}

//===- TorchIndexing.cpp - aten indexing ops onto ONNX
//---------------------===//
//
// Part of libcleave_torchscript.so (see TorchOps.cpp): indexing (one tensor
// index, or several broadcast together), repetition and clamping.
//
//===----------------------------------------------------------------------===//

#include "TorchAtenCall.h"

namespace cleave_torch {

//===----------------------------------------------------------------------===//
// Indexing, repetition, clamping
//===----------------------------------------------------------------------===//

void Translator::atenIndex(AtenCall &call) {
  ATEN_LOCALS(call);
  // x[idx], x[:, idx]: one tensor index (None elsewhere) gathers along its
  // dimension, PyTorch's and ONNX's result shape alike (cos[position_ids]).
  const Item &list = item(ins[1]);
  if (list.kind != Item::List)
    fail("aten::index without a list of indices");
  int64_t dim = -1;
  const Item *index = nullptr;
  std::vector<int64_t> dims;
  for (size_t i = 0; i < list.elems.size(); ++i) {
    const Item &e = list.elems[i];
    if (e.kind == Item::None)
      continue;
    if (e.kind != Item::Tensor)
      fail("aten::index with an index that is not a tensor");
    if (e.dtype == at::kBool)
      fail("aten::index with a boolean mask (a result whose shape depends "
           "on the data) is not supported");
    dim = static_cast<int64_t>(i);
    index = &e;
    dims.push_back(dim);
  }
  if (!index)
    fail("aten::index with no tensor index");
  if (dims.size() > 1)
    return indexTogether(call, dims);
  onnx::NodeProto *gather = node("Gather", {T(0), index->name});
  attr(gather, "axis", dim);
  int64_t r = rankOf(ins[0]) < 0 || index->rank < 0
                  ? -1
                  : rankOf(ins[0]) - 1 + index->rank;
  return outRD(gather->output(0), r, firstType);
}

// x[i, j] (CLIP's features[arange(b), ids.argmax(-1)]): tensor indices of
// several dimensions, broadcast together, pick elements as GatherND does
// from the indexed dimensions moved to the front. PyTorch puts the
// broadcast dimensions where adjacent indices stood, else first.
void Translator::indexTogether(AtenCall &call,
                               const std::vector<int64_t> &dims) {
  ATEN_LOCALS(call);
  const Item &list = item(ins[1]);
  int64_t rank = rankOf(ins[0]), k = static_cast<int64_t>(dims.size());
  if (rank < 0)
    fail("aten::index with several tensor indices needs its input's rank");
  int64_t brank = 0;
  for (int64_t d : dims) {
    if (list.elems[d].rank < 0)
      fail("aten::index with several tensor indices needs their ranks");
    brank = std::max(brank, list.elems[d].rank);
  }
  // Broadcast by adding every index times zero; each as int64, then one
  // more dimension to stack them in.
  std::vector<std::string> idx;
  for (int64_t d : dims)
    idx.push_back(list.elems[d].dtype == at::kLong
                      ? list.elems[d].name
                      : cast(list.elems[d].name, at::kLong));
  std::string zero = constant(at::kLong, {}, {0.0});
  std::string spread = emit("Mul", {idx[0], zero});
  for (size_t i = 1; i < idx.size(); ++i)
    spread = emit("Add", {spread, emit("Mul", {idx[i], zero})});
  std::vector<std::string> parts;
  for (const std::string &i : idx)
    parts.push_back(
        emit("Unsqueeze", {emit("Add", {i, spread}), ints({brank})}));
  onnx::NodeProto *stacked = node("Concat", parts);
  attr(stacked, "axis", brank);
  std::vector<int64_t> front(dims), rest;
  for (int64_t d = 0; d < rank; ++d)
    if (std::find(dims.begin(), dims.end(), d) == dims.end())
      rest.push_back(d);
  front.insert(front.end(), rest.begin(), rest.end());
  onnx::NodeProto *moved = node("Transpose", {T(0)});
  attr(moved, "perm", front);
  std::string y = emit("GatherND", {moved->output(0), stacked->output(0)});
  int64_t outRank = brank + rank - k;
  bool adjacent = dims.back() - dims.front() + 1 == k;
  if (adjacent && dims.front() > 0) {
    // [B..., rest...] -> [rest before, B..., rest after].
    std::vector<int64_t> perm;
    for (int64_t i = 0; i < dims.front(); ++i)
      perm.push_back(brank + i);
    for (int64_t i = 0; i < brank; ++i)
      perm.push_back(i);
    for (int64_t i = brank + dims.front(); i < outRank; ++i)
      perm.push_back(i);
    onnx::NodeProto *back = node("Transpose", {y});
    attr(back, "perm", perm);
    y = back->output(0);
  }
  return outRD(y, outRank, firstType);
}

void Translator::atenRepeatInterleave(AtenCall &call) {
  ATEN_LOCALS(call);
  // repeat_interleave(x, repeats: int, dim): x unsqueezed after dim,
  // broadcast to `repeats` there and the two dimensions merged, which is
  // how transformers' repeat_kv writes it (and what the partitioner keeps
  // split by head). The merged shape is read off x's at run time, so
  // shapes fixed only later (--input) work too.
  int64_t r = rankOf(ins[0]);
  if (r < 0 || isNone(ins[2]))
    fail("aten::repeat_interleave needs its input's rank and a dim "
         "(a flattening repeat_interleave is not supported)");
  if (!item(ins[1]).isInt())
    fail("aten::repeat_interleave with a tensor of repeats (a data-"
         "dependent shape) is not supported");
  int64_t dim = axis(constInt(ins[2]), r);
  std::vector<int64_t> ones(r + 1, 1);
  ones[dim + 1] = constInt(ins[1]);
  std::string wide =
      emit("Expand", {emit("Unsqueeze", {T(0), ints({dim + 1})}), ints(ones)});
  std::string shape = emit("Shape", {T(0)});
  auto part = [&](int64_t from, int64_t to) {
    return emit("Slice", {shape, ints({from}), ints({to})});
  };
  onnx::NodeProto *target =
      node("Concat", {part(0, dim), ints({-1}), part(dim + 1, r)});
  attr(target, "axis", int64_t(0));
  return out(emit("Reshape", {wide, target->output(0)}));
}

void Translator::atenClamp(AtenCall &call) {
  ATEN_LOCALS(call);
  // PyTorch's clamp: max(x, min) then min(., max), either bound optional.
  at::ScalarType dt = dtypeOr(ins[0], at::kFloat);
  std::string y = T(0);
  if (ins.size() > 1 && !isNone(ins[1]))
    y = emit("Max", {y, operandLike(ins[1], ins[0])});
  if (ins.size() > 2 && !isNone(ins[2]))
    y = emit("Min", {y, operandLike(ins[2], ins[0])});
  return outRD(y, widest, dt);
}

void Translator::atenHardtanh(AtenCall &call) {
  ATEN_LOCALS(call);
  // hardtanh(x, min, max) and relu6(x) = hardtanh(x, 0, 6).
  at::ScalarType dt = dtypeOr(ins[0], at::kFloat);
  bool relu6 = kind == "aten::relu6";
  double lo = relu6 ? 0.0 : ins.size() > 1 ? constDouble(ins[1]) : -1.0;
  double hi = relu6 ? 6.0 : ins.size() > 2 ? constDouble(ins[2]) : 1.0;
  return out(
      emit("Clip", {T(0), constant(dt, {}, {lo}), constant(dt, {}, {hi})}));
}

void Translator::atenRemainder(AtenCall &call) {
  ATEN_LOCALS(call);
  // Python's remainder takes the divisor's sign: ONNX Mod with fmod = 0.
  onnx::NodeProto *m = node("Mod", {T(0), operandLike(ins[1], ins[0])});
  attr(m, "fmod", int64_t(0));
  return out(m->output(0));
}

void Translator::atenPad(AtenCall &call) {
  ATEN_LOCALS(call);
  // F.pad's list runs from the last dim backwards, (begin, end) per dim;
  // ONNX's Pad takes every dim's begins, then every dim's ends.
  // The sizes may be computed from the input's shape (Swin pads to whole
  // windows); the importer folds them.
  int64_t r = rankOf(ins[0]);
  const Item &list = item(ins[1]);
  int64_t count = list.kind == Item::List ? int64_t(list.elems.size()) : -1;
  if (r < 0 || count < 0 || count % 2 || count > 2 * r)
    fail("aten::pad needs its input's rank and one (begin, end) pair per "
         "padded dim");
  std::string given = intList(list);
  std::vector<std::string> parts;
  for (int64_t side = 0; side < 2; ++side)
    for (int64_t d = 0; d < r; ++d) {
      int64_t k = r - 1 - d; // the pair's place in PyTorch's list
      parts.push_back(k < count / 2
                          ? emit("Slice", {given, ints({2 * k + side}),
                                           ints({2 * k + side + 1})})
                          : ints({0}));
    }
  onnx::NodeProto *pads = node("Concat", parts);
  attr(pads, "axis", int64_t(0));
  std::string mode = "constant";
  double value = 0;
  if (kind == "aten::pad") {
    if (ins.size() > 2 && item(ins[2]).kind == Item::String)
      mode = item(ins[2]).text;
    if (ins.size() > 3 && !isNone(ins[3]))
      value = constDouble(ins[3]);
  } else if (ins.size() > 2) {
    value = constDouble(ins[2]);
  }
  static const std::map<std::string, std::string> modes = {
      {"constant", "constant"}, {"reflect", "reflect"}, {"replicate", "edge"}};
  auto it = modes.find(mode);
  if (it == modes.end())
    fail("aten::pad mode '" + mode + "' is not supported");
  at::ScalarType dt = dtypeOr(ins[0], at::kFloat);
  onnx::NodeProto *p =
      node("Pad", {T(0), pads->output(0), constant(dt, {}, {value})});
  attr(p, "mode", it->second);
  return out(p->output(0));
}

// cumsum(x, dim, dtype): integers and booleans add up as int64.
void Translator::atenCumsum(AtenCall &call) {
  ATEN_LOCALS(call);
  int64_t rank = rankOf(ins[0]);
  at::ScalarType dt = dtypeOr(ins[0], at::kFloat);
  if (ins.size() > 2 && !isNone(ins[2]))
    dt = static_cast<at::ScalarType>(constInt(ins[2]));
  else if (dt != at::kFloat && dt != at::kDouble)
    dt = at::kLong;
  std::string x = dtypeOr(ins[0], at::kFloat) == dt ? T(0) : cast(T(0), dt);
  int64_t dim = axis(constInt(ins[1]), std::max<int64_t>(rank, 1));
  return outRD(emit("CumSum", {x, constant(at::kLong, {}, {double(dim)})}),
               rank, dt);
}

// argmax / argmin(x, dim=None, keepdim=False): over the flat tensor when
// dim is None.
void Translator::atenArgMax(AtenCall &call) {
  ATEN_LOCALS(call);
  int64_t rank = rankOf(ins[0]);
  bool flat = ins.size() < 2 || isNone(ins[1]);
  bool keep = ins.size() > 2 && constBool(ins[2]);
  std::string x = flat ? reshapeTo(T(0), {-1}) : T(0);
  onnx::NodeProto *a = node(kind == "aten::argmax" ? "ArgMax" : "ArgMin", {x});
  attr(a, "axis", flat ? int64_t(0) : axis(constInt(ins[1]), rank));
  attr(a, "keepdims", int64_t(flat ? 0 : keep));
  std::string r = a->output(0);
  if (flat && keep)
    r = reshapeTo(r, std::vector<int64_t>(rank, 1));
  return outRD(r, flat ? (keep ? rank : 0) : (keep ? rank : rank - 1),
               at::kLong);
}

// topk(x, k, dim=-1, largest=True, sorted=True) -> (values, indices).
void Translator::atenTopk(AtenCall &call) {
  ATEN_LOCALS(call);
  int64_t rank = rankOf(ins[0]);
  onnx::NodeProto *t = node("TopK", {T(0), int1(ins[1])}, 2);
  attr(t, "axis", axis(ins.size() > 2 ? constInt(ins[2]) : -1, rank));
  attr(t, "largest", int64_t(ins.size() > 3 ? constBool(ins[3]) : true));
  attr(t, "sorted", int64_t(ins.size() > 4 ? constBool(ins[4]) : true));
  outRD(t->output(0), rank, dtypeOr(ins[0], at::kFloat), 0);
  return outRD(t->output(1), rank, at::kLong, 1);
}

// one_hot(indices, num_classes): int64 0/1 along a new last dim.
void Translator::atenOneHot(AtenCall &call) {
  ATEN_LOCALS(call);
  int64_t classes = ins.size() > 1 ? constInt(ins[1]) : -1;
  if (classes < 0)
    fail("aten::one_hot without num_classes (a size read from the data) is "
         "not supported: pass num_classes");
  onnx::NodeProto *h = node(
      "OneHot", {T(0), ints({classes}), constant(at::kLong, {2}, {0.0, 1.0})});
  attr(h, "axis", int64_t(-1));
  return outRD(h->output(0), rankOf(ins[0]) + 1, at::kLong);
}

// index_put(x, indices, values, accumulate): x[mask] = v (a boolean mask
// of x's shape) is a select; x[i, j] = v (integer tensors on the leading
// dims) a ScatterND.
void Translator::atenIndexPut(AtenCall &call) {
  ATEN_LOCALS(call);
  const Item &list = item(ins[1]);
  at::ScalarType dt = dtypeOr(ins[0], at::kFloat);
  int64_t rank = rankOf(ins[0]);
  bool accumulate = ins.size() > 3 && constBool(ins[3]);
  std::string v = tensor(ins[2], dt);
  if (isTensor(ins[2]) && dtypeOr(ins[2], at::kFloat) != dt)
    v = cast(v, dt);
  if (list.kind != Item::List || list.elems.empty())
    fail("aten::index_put needs a list of index tensors");
  for (const Item &e : list.elems)
    if (e.kind != Item::Tensor)
      fail("aten::index_put with a slice before a tensor index (x[:, i] = "
           "v) is not supported");
  const Item &first = list.elems[0];
  if (list.elems.size() == 1 && first.dtype == at::kBool) {
    if (first.rank != rank)
      fail("aten::index_put with a boolean mask of another rank than the "
           "tensor is not supported");
    if (isTensor(ins[2]) && rankOf(ins[2]) > 0)
      fail("aten::index_put of a tensor at a boolean mask (a size read from "
           "the data) is not supported; a number is");
    std::string zero = constant(dt, {}, {0.0});
    if (accumulate)
      return outRD(emit("Add", {T(0), emit("Where", {first.name, v, zero})}),
                   rank, dt);
    return outRD(emit("Where", {first.name, v, T(0)}), rank, dt);
  }
  std::vector<std::string> columns;
  for (const Item &e : list.elems) {
    if (e.dtype == at::kBool)
      fail("aten::index_put mixing boolean and integer indices is not "
           "supported");
    std::string idx = e.dtype == at::kLong ? e.name : cast(e.name, at::kLong);
    columns.push_back(emit("Unsqueeze", {idx, ints({-1})}));
  }
  onnx::NodeProto *cat = node("Concat", columns);
  attr(cat, "axis", int64_t(-1));
  int64_t k = list.elems.size();
  if (k > rank)
    fail("aten::index_put with more indices than the tensor has dims");
  onnx::NodeProto *rest = node(
      "Slice", {emit("Shape", {T(0)}), ints({k}), ints({rank}), ints({0})});
  onnx::NodeProto *shape =
      node("Concat", {emit("Shape", {first.name}), rest->output(0)});
  attr(shape, "axis", int64_t(0));
  onnx::NodeProto *scatter =
      node("ScatterND",
           {T(0), cat->output(0), emit("Expand", {v, shape->output(0)})});
  if (accumulate)
    attr(scatter, "reduction", std::string("add"));
  return outRD(scatter->output(0), rank, dt);
}

void Translator::atenRoll(AtenCall &call) {
  ATEN_LOCALS(call);
  // Per dim, the last `shift` elements then the rest, as torch.onnx writes
  // it: Slice [-shift:] and [:-shift], joined (a negative shift mirrors).
  std::vector<int64_t> shifts = constInts(ins[1]), dims = constInts(ins[2]);
  int64_t r = rankOf(ins[0]);
  if (dims.empty() || dims.size() != shifts.size() || r < 0)
    fail("aten::roll without one dim per shift (a flattening roll) is not "
         "supported");
  std::string y = T(0);
  for (size_t k = 0; k < dims.size(); ++k) {
    if (shifts[k] == 0)
      continue;
    std::string axes = ints({axis(dims[k], r)});
    std::string tail =
        emit("Slice", {y, ints({-shifts[k]}),
                       ints({std::numeric_limits<int64_t>::max()}), axes});
    std::string head = emit("Slice", {y, ints({0}), ints({-shifts[k]}), axes});
    onnx::NodeProto *c = node("Concat", {tail, head});
    attr(c, "axis", axis(dims[k], r));
    y = c->output(0);
  }
  return out(y);
}

} // namespace cleave_torch

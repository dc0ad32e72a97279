//===- Indexing.cpp - ONNX gathers, scatters, pads and scans ----*- C++ -*-===//
//
// GatherElements, GatherND, ScatterElements (and the older Scatter),
// ScatterND, OneHot, Compress, Pad, CumSum and TopK, each written in the
// dialect's existing ops. An element-wise gather or scatter is one
// cleave.gather / cleave.scatter_add over the data seen flat, at indices
// computed from cleave.iota: so they have kernels on both backends, a
// gradient (gather's is scatter_add and back) and sharding rules without
// new code, and the IR's size does not depend on the tensors'. Indices
// read from data are normalised (negative counts from the end) and checked
// per dimension with cleave.check_index, so an index out of range stops the
// step with its position instead of reading another row of the flat data.
//
//===----------------------------------------------------------------------===//

#include "Cleave/TensorSize.h"
#include "Expr.h"

using namespace mlir;
using namespace mlir::cleave;
using namespace mlir::cleave::onnx_import;

namespace {

Type elementOf(Value v) { return NodeContext::typeOf(v).getElementType(); }

/// i64 indices along \p dim of a tensor shaped \p shape.
Value iota(NodeContext &ctx, ArrayRef<int64_t> shape, int64_t dim) {
  return IotaOp::create(ctx.b, RankedTensorType::get(shape, ctx.b.getI64Type()),
                        ctx.b.getI64IntegerAttr(dim));
}

/// \p v as i64 (indices may come as i32, or as floats for OneHot).
Value toI64(NodeContext &ctx, Value v) {
  if (elementOf(v).isInteger(64))
    return v;
  return ctx.b.createOrFold<CastOp>(
      NodeContext::typeOf(v).clone(ctx.b.getI64Type()), v);
}

/// Indices into a dimension of \p size: negative ones count from the end;
/// the step stops at one outside [-size, size).
Value checkedIndex(NodeContext &ctx, Value idx, int64_t size) {
  Expr e(ctx, ctx.b.getI64Type());
  idx = toI64(ctx, idx);
  Value wrapped = e.select(e.cmp(CmpPredicate::lt, idx, e.k(0)),
                           e.add(idx, e.k(size)), idx);
  if (!wrapped)
    return {};
  return CheckIndexOp::create(ctx.b, wrapped, ctx.b.getI64IntegerAttr(size),
                              IntegerAttr());
}

/// Row-major strides of \p shape.
SmallVector<int64_t> stridesOf(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> strides(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

/// The positions in \p data (seen flat) of an element-wise gather or
/// scatter along \p axis with \p indices: the indices' own coordinates,
/// the index itself along the axis.
Value flatPositions(NodeContext &ctx, Value data, Value indices, int64_t axis) {
  auto ds = NodeContext::typeOf(data).getShape();
  auto is = NodeContext::typeOf(indices).getShape();
  SmallVector<int64_t> strides = stridesOf(ds);
  Expr e(ctx, ctx.b.getI64Type());
  Value flat;
  for (int64_t d = 0; d < static_cast<int64_t>(ds.size()); ++d) {
    Value coord =
        d == axis ? checkedIndex(ctx, indices, ds[axis]) : iota(ctx, is, d);
    Value term = strides[d] == 1 ? coord : e.mul(coord, e.k(strides[d]));
    flat = flat ? e.add(flat, term) : term;
  }
  return flat;
}

/// The shared checks of GatherElements and ScatterElements; returns the
/// normalised axis.
FailureOr<int64_t> elementwiseAxis(NodeContext &ctx, Value data,
                                   Value indices) {
  auto ds = NodeContext::typeOf(data).getShape();
  auto is = NodeContext::typeOf(indices).getShape();
  Type it = elementOf(indices);
  if (!it.isInteger(32) && !it.isInteger(64))
    return ctx.error() << "indices must be int32 or int64, got " << it;
  if (ds.size() != is.size() || ds.empty())
    return ctx.error() << "data and indices must have one rank >= 1";
  FailureOr<int64_t> axis = ctx.normaliseAxis(ctx.attrInt("axis", 0),
                                              static_cast<int64_t>(ds.size()));
  if (failed(axis))
    return failure();
  for (size_t d = 0; d < ds.size(); ++d)
    if (static_cast<int64_t>(d) != *axis && is[d] > ds[d])
      return ctx.error() << "indices dim " << d << " (" << is[d]
                         << ") exceeds the data's (" << ds[d] << ")";
  return *axis;
}

LogicalResult gatherElements(NodeContext &ctx) {
  FailureOr<Value> data = ctx.input(0), indices = ctx.input(1);
  if (failed(data) || failed(indices))
    return failure();
  FailureOr<int64_t> axis = elementwiseAxis(ctx, *data, *indices);
  if (failed(axis))
    return failure();
  Value flat = flatPositions(ctx, *data, *indices, *axis);
  if (!flat)
    return failure();
  Value table =
      ctx.reshape(*data, {NodeContext::typeOf(*data).getNumElements()});
  ctx.setOutput(0, ctx.b.createOrFold<GatherOp>(table, flat, 0));
  return success();
}

/// Scatters \p updates into zeros of \p resultShape (f32) at the rows
/// \p positions name along dim 0; repeated rows add up.
Value scatterRows(NodeContext &ctx, Value updates, Value positions,
                  ArrayRef<int64_t> resultShape) {
  auto type = RankedTensorType::get(resultShape, elementOf(updates));
  return ScatterAddOp::create(ctx.b, type, updates, positions,
                              ctx.b.getI64IntegerAttr(0));
}

/// data with the rows \p positions name (along dim 0 of \p flatShape)
/// replaced by, or combined with, \p updates under \p reduction.
FailureOr<Value> scatterInto(NodeContext &ctx, Value data, Value updates,
                             Value positions, ArrayRef<int64_t> flatShape) {
  std::string reduction = ctx.attrString("reduction", "none");
  if (!isa<Float32Type>(elementOf(data)) ||
      elementOf(updates) != elementOf(data))
    return ctx.error() << "needs float32 data and updates, got "
                       << elementOf(data) << " and " << elementOf(updates);
  if (reduction != "none" && reduction != "add")
    return ctx.error() << "reduction '" << reduction
                       << "' is not supported (none and add are)";
  auto dataType = NodeContext::typeOf(data);
  Value table = ctx.reshape(data, flatShape);
  Value scattered = scatterRows(ctx, updates, positions, flatShape);
  Expr e(ctx, elementOf(data));
  Value out;
  if (reduction == "add") {
    out = e.add(table, scattered);
  } else {
    // Where any update lands, the update; elsewhere the data. Repeated
    // indices without a reduction are undefined in ONNX and pick one
    // write in PyTorch (x[ids] = v): their mean, exact where the writes
    // agree (x[ids] = 0), never their sum.
    auto posShape = NodeContext::typeOf(positions).getShape();
    Value ones = ctx.splat(elementOf(data), posShape, 1.0);
    Value hits = scatterRows(ctx, ones, positions, {flatShape[0]});
    SmallVector<int64_t> column(flatShape.size(), 1);
    column[0] = flatShape[0];
    hits = ctx.reshape(hits, column);
    Value hit = e.cmp(CmpPredicate::gt, hits, e.k(0.0));
    out = e.select(hit, e.div(scattered, e.max(hits, e.k(1.0))), table);
  }
  if (!out)
    return failure();
  return ctx.reshape(out, dataType.getShape());
}

/// A strided box of data's leading dims: per dim, a start, a positive step
/// and a count.
struct Box {
  SmallVector<int64_t> starts, steps, counts;
};

/// The box that \p rows coordinates (\p v, k per row, into dims \p ds)
/// enumerate in row-major order, if they do: what a slice assignment
/// writes (x[:, 1:3] = v, out[..., ::2] = v). Rewrites \p v normalised.
std::optional<Box> boxOf(SmallVector<int64_t> &v, int64_t rows, int64_t k,
                         ArrayRef<int64_t> ds) {
  if (rows == 0 || k == 0)
    return std::nullopt;
  Box box;
  for (int64_t j = 0; j < k; ++j) {
    SmallVector<int64_t> seen;
    for (int64_t r = 0; r < rows; ++r) {
      int64_t &x = v[r * k + j];
      if (x < -ds[j] || x >= ds[j])
        return std::nullopt; // the general path reports it
      x = x < 0 ? x + ds[j] : x;
      seen.push_back(x);
    }
    llvm::sort(seen);
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    int64_t step = seen.size() > 1 ? seen[1] - seen[0] : 1;
    for (size_t i = 1; i < seen.size(); ++i)
      if (seen[i] - seen[i - 1] != step)
        return std::nullopt;
    box.starts.push_back(seen[0]);
    box.steps.push_back(step);
    box.counts.push_back(seen.size());
  }
  SmallVector<int64_t> strides = stridesOf(box.counts);
  if (strides[0] * box.counts[0] != rows)
    return std::nullopt;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < k; ++j)
      if (v[r * k + j] !=
          box.starts[j] + box.steps[j] * (r / strides[j] % box.counts[j]))
        return std::nullopt;
  return box;
}

/// ScatterND into a box: the updates placed by slice_scatter (the adjoint
/// of slice), chosen over data by a constant mask, so that the write has
/// slice's gradient and sharding (the dims outside the box keep theirs)
/// instead of a flat scatter's.
FailureOr<Value> scatterBox(NodeContext &ctx, Value data, Value updates,
                            const Box &box) {
  auto dataType = NodeContext::typeOf(data);
  auto ds = dataType.getShape();
  int64_t k = box.counts.size(), rank = ds.size();
  SmallVector<int64_t> boxShape(box.counts);
  llvm::append_range(boxShape, ds.drop_front(k));
  SmallVector<int64_t> starts(box.starts), steps(box.steps);
  starts.resize(rank, 0);
  steps.resize(rank, 1);
  Value placed = SliceScatterOp::create(
      ctx.b, dataType, ctx.reshape(updates, boxShape),
      ctx.b.getDenseI64ArrayAttr(starts), ctx.b.getDenseI64ArrayAttr(steps));
  Expr e(ctx, elementOf(data));
  if (ctx.attrString("reduction", "none") == "add")
    return e.add(data, placed);
  // The mask spans only the dims the box does not cover whole.
  SmallVector<int64_t> maskShape(rank, 1);
  for (int64_t d = 0; d < k; ++d)
    if (box.starts[d] != 0 || box.steps[d] != 1 || box.counts[d] != ds[d])
      maskShape[d] = ds[d];
  if (llvm::all_of(maskShape, [](int64_t n) { return n == 1; }))
    return placed;
  SmallVector<int64_t> maskStrides = stridesOf(maskShape);
  int64_t count = maskStrides[0] * maskShape[0];
  SmallVector<bool> mask(count, false);
  for (int64_t flat = 0; flat < count; ++flat) {
    bool in = true;
    for (int64_t d = 0; d < k && in; ++d) {
      if (maskShape[d] == 1)
        continue;
      int64_t x = flat / maskStrides[d] % maskShape[d] - box.starts[d];
      in = x >= 0 && x % box.steps[d] == 0 && x / box.steps[d] < box.counts[d];
    }
    mask[flat] = in;
  }
  auto maskType = RankedTensorType::get(maskShape, ctx.b.getI1Type());
  Value cond =
      ConstantOp::create(ctx.b, DenseElementsAttr::get(maskType, mask));
  return e.select(cond, placed, data);
}

LogicalResult scatterElements(NodeContext &ctx) {
  FailureOr<Value> data = ctx.input(0), indices = ctx.input(1),
                   updates = ctx.input(2);
  if (failed(data) || failed(indices) || failed(updates))
    return failure();
  FailureOr<int64_t> axis = elementwiseAxis(ctx, *data, *indices);
  if (failed(axis))
    return failure();
  if (NodeContext::typeOf(*updates).getShape() !=
      NodeContext::typeOf(*indices).getShape())
    return ctx.error() << "updates must have the indices' shape";
  // A write through a view, as the TorchScript translator gives it: data
  // is a tensor seen flat, the indices constant flat positions in it that
  // form a strided box of the tensor.
  auto reshaped = data->getDefiningOp<ReshapeOp>();
  std::optional<DenseElementsAttr> constant = ctx.constantInput(1);
  if (reshaped && constant && NodeContext::rankOf(*data) == 1 &&
      isa<Float32Type>(elementOf(*data)) &&
      elementOf(*updates) == elementOf(*data) &&
      (ctx.attrString("reduction", "none") == "none" ||
       ctx.attrString("reduction", "none") == "add") &&
      constant->getNumElements() <= (int64_t(1) << 22)) {
    Value tensor = reshaped.getInput();
    auto ts = NodeContext::typeOf(tensor).getShape();
    SmallVector<int64_t> strides = stridesOf(ts), coords;
    int64_t rows = constant->getNumElements(), k = ts.size(), n = 1;
    for (int64_t d : ts)
      n *= d;
    for (const APInt &x : constant->getValues<APInt>()) {
      int64_t p = x.getSExtValue();
      p = p < 0 ? p + n : p;
      if (p < 0 || p >= n)
        break;
      for (int64_t d = 0; d < k; ++d)
        coords.push_back(p / strides[d] % ts[d]);
    }
    std::optional<Box> box;
    if (k > 0 && static_cast<int64_t>(coords.size()) == rows * k)
      box = boxOf(coords, rows, k, ts);
    if (box) {
      FailureOr<Value> out = scatterBox(ctx, tensor, *updates, *box);
      if (failed(out) || !*out)
        return failure();
      ctx.setOutput(0,
                    ctx.reshape(*out, NodeContext::typeOf(*data).getShape()));
      return success();
    }
  }
  Value flat = flatPositions(ctx, *data, *indices, *axis);
  if (!flat)
    return failure();
  FailureOr<Value> out =
      scatterInto(ctx, *data, *updates, flat,
                  {NodeContext::typeOf(*data).getNumElements()});
  if (failed(out))
    return failure();
  ctx.setOutput(0, *out);
  return success();
}

/// The rows of \p data seen as [prod(dims[b, b + k)), dims[b + k:]...] per
/// batch that the last dim of \p indices (k coordinates) names, as flat
/// positions shaped like the indices without their last dim; batches
/// (the first \p batchDims dims) come one after another.
Value ndPositions(NodeContext &ctx, ArrayRef<int64_t> ds, Value indices,
                  int64_t batchDims) {
  auto is = NodeContext::typeOf(indices).getShape();
  int64_t k = is.back();
  SmallVector<int64_t> lead(is.drop_back());
  SmallVector<int64_t> component(is.size(), 0), sizes(is.size(), 1);
  SmallVector<int64_t> coordDims(ds.begin() + batchDims,
                                 ds.begin() + batchDims + k);
  SmallVector<int64_t> strides = stridesOf(coordDims);
  int64_t rows = 1;
  for (int64_t d : coordDims)
    rows *= d;
  Expr e(ctx, ctx.b.getI64Type());
  Value flat;
  auto sliceType = NodeContext::typeOf(indices).clone([&] {
    SmallVector<int64_t> s(lead);
    s.push_back(1);
    return s;
  }());
  for (int64_t j = 0; j < k; ++j) {
    SmallVector<int64_t> starts(is.size(), 0), steps(is.size(), 1);
    starts.back() = j;
    Value c = ctx.b.createOrFold<SliceOp>(sliceType, indices,
                                          ctx.b.getDenseI64ArrayAttr(starts),
                                          ctx.b.getDenseI64ArrayAttr(steps));
    c = checkedIndex(ctx, ctx.reshape(c, lead), coordDims[j]);
    Value term = strides[j] == 1 ? c : e.mul(c, e.k(strides[j]));
    flat = flat ? e.add(flat, term) : term;
  }
  SmallVector<int64_t> batchStrides =
      stridesOf(ArrayRef<int64_t>(ds).take_front(batchDims));
  for (int64_t d = 0; d < batchDims; ++d)
    flat = e.add(flat, e.mul(iota(ctx, lead, d), e.k(batchStrides[d] * rows)));
  return flat;
}

LogicalResult gatherND(NodeContext &ctx) {
  FailureOr<Value> data = ctx.input(0), indices = ctx.input(1);
  if (failed(data) || failed(indices))
    return failure();
  auto ds = NodeContext::typeOf(*data).getShape();
  auto is = NodeContext::typeOf(*indices).getShape();
  int64_t b = ctx.attrInt("batch_dims", 0);
  int64_t r = ds.size(), q = is.size();
  if (!elementOf(*indices).isInteger(64))
    return ctx.error() << "indices must be int64";
  if (q < 1 || b < 0 || b >= std::min(q, r) || is.back() < 1 ||
      is.back() > r - b || ds.take_front(b) != is.take_front(b))
    return ctx.error() << "indices of type " << indices->getType()
                       << " and batch_dims " << b
                       << " do not index data of type " << data->getType();
  Value flat = ndPositions(ctx, ds, *indices, b);
  if (!flat)
    return failure();
  SmallVector<int64_t> tableShape = {1};
  for (int64_t d = 0; d < b + is.back(); ++d)
    tableShape[0] *= ds[d];
  llvm::append_range(tableShape, ds.drop_front(b + is.back()));
  Value table = ctx.reshape(*data, tableShape);
  ctx.setOutput(0, ctx.b.createOrFold<GatherOp>(table, flat, 0));
  return success();
}

LogicalResult scatterND(NodeContext &ctx) {
  FailureOr<Value> data = ctx.input(0), indices = ctx.input(1),
                   updates = ctx.input(2);
  if (failed(data) || failed(indices) || failed(updates))
    return failure();
  auto ds = NodeContext::typeOf(*data).getShape();
  auto is = NodeContext::typeOf(*indices).getShape();
  if (!elementOf(*indices).isInteger(64))
    return ctx.error() << "indices must be int64";
  if (is.empty() || is.back() < 1 ||
      is.back() > static_cast<int64_t>(ds.size()))
    return ctx.error() << "indices of type " << indices->getType()
                       << " do not index data of type " << data->getType();
  int64_t k = is.back();
  SmallVector<int64_t> want(is.drop_back());
  llvm::append_range(want, ds.drop_front(k));
  if (NodeContext::typeOf(*updates).getShape() != ArrayRef(want))
    return ctx.error() << "updates must have shape indices.shape[:-1] + "
                          "data.shape[k:]";
  std::string reduction = ctx.attrString("reduction", "none");
  if (std::optional<DenseElementsAttr> constant = ctx.constantInput(1);
      constant && (reduction == "none" || reduction == "add") &&
      isa<Float32Type>(elementOf(*data)) &&
      elementOf(*updates) == elementOf(*data)) {
    SmallVector<int64_t> coords;
    int64_t rows = 1;
    for (int64_t d : is.drop_back())
      rows *= d;
    // Large index tensors are left to the general scatter rather than
    // read element by element here.
    if (rows * k <= (int64_t(1) << 24))
      for (const APInt &x : constant->getValues<APInt>())
        coords.push_back(x.getSExtValue());
    if (std::optional<Box> box =
            coords.empty() ? std::nullopt : boxOf(coords, rows, k, ds)) {
      FailureOr<Value> out = scatterBox(ctx, *data, *updates, *box);
      if (failed(out) || !*out)
        return failure();
      ctx.setOutput(0, *out);
      return success();
    }
  }
  Value flat = ndPositions(ctx, ds, *indices, 0);
  if (!flat)
    return failure();
  SmallVector<int64_t> flatShape = {1};
  for (int64_t d = 0; d < k; ++d)
    flatShape[0] *= ds[d];
  llvm::append_range(flatShape, ds.drop_front(k));
  FailureOr<Value> out = scatterInto(ctx, *data, *updates, flat, flatShape);
  if (failed(out))
    return failure();
  ctx.setOutput(0, *out);
  return success();
}

/// on where the class (an iota along the new axis) equals the index, off
/// elsewhere; an index outside [-depth, depth) matches no class.
LogicalResult oneHot(NodeContext &ctx) {
  FailureOr<Value> indices = ctx.input(0), values = ctx.input(2);
  FailureOr<SmallVector<double>> depthValue = ctx.constantDoubles(1, "depth");
  if (failed(indices) || failed(values) || failed(depthValue))
    return failure();
  if (depthValue->size() != 1)
    return ctx.error() << "depth must be one positive number";
  double d = (*depthValue)[0];
  if (std::isnan(d))
    return ctx.error() << "depth is NaN";
  // Converting past int64 is undefined: such a depth is no class count.
  if (!(d >= 1) || !(d < 9223372036854775808.0))
    return ctx.error() << "depth must be one positive number that fits in "
                          "int64, not "
                       << d;
  int64_t depth = static_cast<int64_t>(d);
  auto vs = NodeContext::typeOf(*values);
  if (vs.getNumElements() != 2)
    return ctx.error() << "values must hold [off, on]";
  auto is = NodeContext::typeOf(*indices).getShape();
  int64_t rank = is.size() + 1;
  FailureOr<int64_t> axis = ctx.normaliseAxis(ctx.attrInt("axis", -1), rank);
  if (failed(axis))
    return failure();
  Expr e(ctx, ctx.b.getI64Type());
  Value idx = toI64(ctx, *indices);
  idx = e.select(e.cmp(CmpPredicate::lt, idx, e.k(0)), e.add(idx, e.k(depth)),
                 idx);
  SmallVector<int64_t> spread(is);
  spread.insert(spread.begin() + *axis, 1);
  SmallVector<int64_t> classShape(rank, 1);
  classShape[*axis] = depth;
  Value hit = e.cmp(CmpPredicate::eq, ctx.reshape(idx, spread),
                    iota(ctx, classShape, *axis));
  Value flatValues = ctx.reshape(*values, {2});
  SmallVector<int64_t> one(rank, 1);
  auto pick = [&](int64_t i) {
    auto t = RankedTensorType::get({1}, vs.getElementType());
    Value s = ctx.b.createOrFold<SliceOp>(t, flatValues,
                                          ctx.b.getDenseI64ArrayAttr({i}),
                                          ctx.b.getDenseI64ArrayAttr({1}));
    return ctx.reshape(s, one);
  };
  Expr v(ctx, vs.getElementType());
  return v.result(v.select(hit, pick(1), pick(0)));
}

/// The slices a constant condition keeps, as one gather.
LogicalResult compress(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  std::optional<DenseElementsAttr> cond = ctx.constantInput(1);
  if (failed(x))
    return failure();
  if (!cond)
    return ctx.error() << "the condition must be known when compiling: the "
                          "result's shape depends on it";
  Value in = *x;
  int64_t axis = 0;
  if (ctx.attr("axis")) {
    FailureOr<int64_t> a =
        ctx.normaliseAxis(ctx.attrInt("axis", 0), NodeContext::rankOf(in));
    if (failed(a))
      return failure();
    axis = *a;
  } else {
    in = ctx.reshape(in, {NodeContext::typeOf(in).getNumElements()});
  }
  int64_t size = NodeContext::typeOf(in).getDimSize(axis);
  SmallVector<int64_t> kept;
  int64_t i = 0;
  for (const APInt &c : cond->getValues<APInt>()) {
    if (i >= size)
      return ctx.error() << "the condition is longer than the axis (" << size
                         << ")";
    if (!c.isZero())
      kept.push_back(i);
    ++i;
  }
  auto type = RankedTensorType::get({static_cast<int64_t>(kept.size())},
                                    ctx.b.getI64Type());
  Value positions =
      ConstantOp::create(ctx.b, DenseElementsAttr::get(type, ArrayRef(kept)));
  ctx.setOutput(0, ctx.b.createOrFold<GatherOp>(in, positions, axis));
  return success();
}

enum class PadMode { Constant, Reflect, Edge, Wrap };

/// The source index of each of \p out padded positions along an axis of
/// \p n elements, \p before of them in front.
Value padSource(NodeContext &ctx, PadMode mode, int64_t n, int64_t before,
                int64_t out) {
  Expr e(ctx, ctx.b.getI64Type());
  Value i = e.sub(iota(ctx, {out}, 0), e.k(before));
  // i mod m in [0, m): shifted to non-negative first, as div truncates.
  auto mod = [&](Value v, int64_t m) {
    Value shifted = e.add(v, e.k(m * ((before + m - 1) / m)));
    return e.sub(shifted, e.mul(e.div(shifted, e.k(m)), e.k(m)));
  };
  if (mode == PadMode::Edge || (mode == PadMode::Reflect && n == 1))
    return e.min(e.max(i, e.k(0)), e.k(n - 1));
  if (mode == PadMode::Wrap)
    return mod(i, n);
  // numpy's reflect is periodic with period 2 (n - 1), mirrored at n - 1.
  Value j = mod(i, 2 * (n - 1));
  return e.sub(e.k(n - 1), e.unary<AbsOp>(e.sub(e.k(n - 1), j)));
}

/// Pads (or crops, where negative) \p x by \p pads ([begins..., ends...]).
LogicalResult padWith(NodeContext &ctx, Value x, ArrayRef<int64_t> pads,
                      PadMode mode, double value) {
  auto shape = NodeContext::typeOf(x).getShape();
  int64_t rank = shape.size();
  if (static_cast<int64_t>(pads.size()) != 2 * rank)
    return ctx.error() << "pads has " << pads.size() << " entries for rank "
                       << rank;
  Type element = elementOf(x);
  for (int64_t d = 0; d < rank; ++d) {
    int64_t before = pads[d], after = pads[rank + d];
    int64_t n = NodeContext::typeOf(x).getDimSize(d);
    int64_t cropB = std::max<int64_t>(-before, 0);
    int64_t cropE = std::max<int64_t>(-after, 0);
    if (cropB + cropE > n)
      return ctx.error() << "pads crop more than dim " << d << " holds";
    if (cropB || cropE) {
      x = ctx.sliceAxis(x, d, cropB, n - cropB - cropE);
      n -= cropB + cropE;
    }
    before = std::max<int64_t>(before, 0);
    after = std::max<int64_t>(after, 0);
    if (!before && !after)
      continue;
    int64_t out = 0;
    if (__builtin_add_overflow(n, before, &out) ||
        __builtin_add_overflow(out, after, &out))
      return ctx.error() << "the padded shape overflows";
    SmallVector<int64_t> wide(NodeContext::typeOf(x).getShape());
    wide[d] = out;
    if (!hasCheckedSize(RankedTensorType::get(wide, element)))
      return ctx.error() << "the padded tensor holds more bytes than fit in "
                            "memory";
    if (mode == PadMode::Constant) {
      SmallVector<int64_t> bs(NodeContext::typeOf(x).getShape()), as(bs);
      bs[d] = before;
      as[d] = after;
      x = ctx.concat(
          {ctx.splat(element, bs, value), x, ctx.splat(element, as, value)}, d);
      continue;
    }
    if (n == 0)
      return ctx.error() << "cannot pad an empty dim " << d << " in mode "
                         << ctx.attrString("mode", "constant");
    Value source = padSource(ctx, mode, n, before, out);
    if (!source)
      return failure();
    x = ctx.b.createOrFold<GatherOp>(x, source, d);
  }
  ctx.setOutput(0, x);
  return success();
}

FailureOr<PadMode> padMode(NodeContext &ctx) {
  std::string mode = ctx.attrString("mode", "constant");
  if (mode == "constant")
    return PadMode::Constant;
  if (mode == "reflect")
    return PadMode::Reflect;
  if (mode == "edge")
    return PadMode::Edge;
  if (mode == "wrap" && ctx.opset >= 19)
    return PadMode::Wrap;
  return ctx.error() << "unknown mode '" << mode << "'";
}

/// Pad-2: pads and value are attributes.
LogicalResult pad2(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  FailureOr<PadMode> mode = padMode(ctx);
  if (failed(x) || failed(mode))
    return failure();
  std::optional<SmallVector<int64_t>> pads = ctx.attrInts("pads");
  if (!pads)
    return ctx.error() << "pads is required";
  return padWith(ctx, *x, *pads, *mode, ctx.attrFloat("value", 0.0f));
}

/// Pad-11 on: pads, constant_value and (18) axes are inputs.
LogicalResult pad11(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  FailureOr<PadMode> mode = padMode(ctx);
  FailureOr<SmallVector<int64_t>> given = ctx.constantInts(1, "pads");
  if (failed(x) || failed(mode) || failed(given))
    return failure();
  double value = 0;
  if (ctx.hasInput(2)) {
    FailureOr<SmallVector<double>> v = ctx.constantDoubles(2, "constant_value");
    if (failed(v))
      return failure();
    if (v->size() != 1)
      return ctx.error() << "constant_value must be one value";
    value = (*v)[0];
  }
  int64_t rank = NodeContext::rankOf(*x);
  SmallVector<int64_t> pads = *given;
  if (ctx.hasInput(3)) {
    FailureOr<SmallVector<int64_t>> axes = ctx.constantInts(3, "axes");
    if (failed(axes))
      return failure();
    if (given->size() != 2 * axes->size())
      return ctx.error() << "pads must hold two entries per axis";
    pads.assign(2 * rank, 0);
    for (auto [i, a] : llvm::enumerate(*axes)) {
      FailureOr<int64_t> axis = ctx.normaliseAxis(a, rank);
      if (failed(axis))
        return failure();
      pads[*axis] = (*given)[i];
      pads[rank + *axis] = (*given)[axes->size() + i];
    }
  }
  return padWith(ctx, *x, pads, *mode, value);
}

/// Running sums along an axis in log2(n) shifted additions (Hillis and
/// Steele): exact for integers, linear in its gradient, any dtype.
LogicalResult cumSum(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  FailureOr<SmallVector<int64_t>> axisValue = ctx.constantInts(1, "axis");
  if (failed(x) || failed(axisValue))
    return failure();
  if (elementOf(*x).isInteger(1))
    return ctx.error() << "needs a numeric input, got bool";
  if (axisValue->size() != 1)
    return ctx.error() << "axis must be one value";
  FailureOr<int64_t> axis =
      ctx.normaliseAxis((*axisValue)[0], NodeContext::rankOf(*x));
  if (failed(axis))
    return failure();
  bool reverse = ctx.attrInt("reverse", 0) != 0;
  auto shape = NodeContext::typeOf(*x).getShape();
  int64_t n = shape[*axis];
  Type element = elementOf(*x);
  // v moved s places along the scan's direction, zeros coming in.
  auto shift = [&](Value v, int64_t s) {
    SmallVector<int64_t> zs(shape);
    zs[*axis] = s;
    Value zeros = ctx.splat(element, zs, 0);
    return reverse
               ? ctx.concat({ctx.sliceAxis(v, *axis, s, n - s), zeros}, *axis)
               : ctx.concat({zeros, ctx.sliceAxis(v, *axis, 0, n - s)}, *axis);
  };
  Value y = *x;
  if (ctx.attrInt("exclusive", 0) && n > 0)
    y = shift(y, 1);
  Expr e(ctx, element);
  for (int64_t s = 1; s < n; s *= 2)
    y = e.add(y, shift(y, s));
  return e.result(y);
}

/// The most elements along TopK's axis: the formula compares every pair.
constexpr int64_t kMaxTopKAxis = 4096;

/// TopK by ranks: an element's rank is the number of elements that come
/// before it (larger, or equal at a lower index: ONNX's tie rule), and
/// output position p takes the element of rank p. Pairwise compares along
/// the axis (so the axis is bounded), then sums of one-hot selections: the
/// values' gradient reaches exactly the chosen elements. Indices are i64.
LogicalResult topK(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  int64_t k = ctx.attrInt("k", -1);
  if (ctx.opset >= 10) {
    FailureOr<SmallVector<int64_t>> kv = ctx.constantInts(1, "K");
    if (failed(kv))
      return failure();
    if (kv->size() != 1)
      return ctx.error() << "K must be one value";
    k = (*kv)[0];
  }
  auto type = NodeContext::typeOf(*x);
  int64_t rank = type.getRank();
  FailureOr<int64_t> axis = ctx.normaliseAxis(ctx.attrInt("axis", -1), rank);
  if (failed(axis))
    return failure();
  int64_t n = type.getDimSize(*axis);
  if (k < 1 || k > n)
    return ctx.error() << "K = " << k << " is not supported: 1 to " << n;
  if (n > kMaxTopKAxis)
    return ctx.error() << "TopK over " << n << " elements is not supported "
                       << "(at most " << kMaxTopKAxis << ")";
  if (elementOf(*x).isInteger(1))
    return ctx.error() << "needs a numeric input, got bool";
  bool largest = ctx.attrInt("largest", 1) != 0;
  // The axis moves last: [..., n].
  SmallVector<int64_t> perm;
  for (int64_t d = 0; d < rank; ++d)
    if (d != *axis)
      perm.push_back(d);
  perm.push_back(*axis);
  Value xt = *axis == rank - 1 ? *x : ctx.transpose(*x, perm);
  if (!xt)
    return failure();
  SmallVector<int64_t> lead(NodeContext::typeOf(xt).getShape().drop_back());
  auto with = [&](std::initializer_list<int64_t> tail) {
    SmallVector<int64_t> s(lead);
    s.append(tail.begin(), tail.end());
    return s;
  };
  auto ones = [&](std::initializer_list<int64_t> tail) {
    SmallVector<int64_t> s(lead.size(), 1);
    s.append(tail.begin(), tail.end());
    return s;
  };
  Value xi = ctx.reshape(xt, with({n, 1})), xj = ctx.reshape(xt, with({1, n}));
  Value ii = iota(ctx, ones({n, 1}), lead.size());
  Value jj = iota(ctx, ones({1, n}), lead.size() + 1);
  Expr b(ctx, ctx.b.getI1Type()), i64(ctx, ctx.b.getI64Type());
  Value before = b.cmp(largest ? CmpPredicate::gt : CmpPredicate::lt, xj, xi);
  Value tie = b.op<AndOp>(
      {b.cmp(CmpPredicate::eq, xj, xi), b.cmp(CmpPredicate::lt, jj, ii)});
  Value beats = b.op<OrOp>({before, tie});
  if (!beats)
    return failure();
  auto sumLast = [&](Value v) -> Value {
    if (!v)
      return {};
    int64_t r = NodeContext::rankOf(v);
    return ReduceOp::create(ctx.b, ReduceKind::sum, v,
                            ctx.b.getDenseI64ArrayAttr({r - 1}), false);
  };
  Value ranks = sumLast(i64.cast(beats, ctx.b.getI64Type())); // [..., n]
  Value chosen = i64.cmp(CmpPredicate::eq, ctx.reshape(ranks, with({1, n})),
                         iota(ctx, ones({k, 1}), lead.size())); // [..., k, n]
  Expr v(ctx, elementOf(*x));
  Value values = sumLast(v.select(chosen, xj, v.k(0)));
  Value indices = sumLast(i64.select(chosen, jj, i64.k(0)));
  if (!values || !indices)
    return failure();
  if (*axis != rank - 1) {
    SmallVector<int64_t> back(rank);
    for (int64_t d = 0; d < rank; ++d)
      back[perm[d]] = d;
    values = ctx.transpose(values, back);
    indices = ctx.transpose(indices, back);
  }
  ctx.setOutput(0, values);
  if (ctx.hasOutput(1))
    ctx.setOutput(1, indices);
  return success();
}

} // namespace

void onnx_import::registerIndexingHandlers(HandlerTable &t) {
  t.on("GatherElements", 11, gatherElements);
  t.on("Scatter", 9, scatterElements);
  t.on("ScatterElements", 11, scatterElements);
  t.on("GatherND", 11, gatherND);
  t.on("ScatterND", 11, scatterND);
  t.on("OneHot", 9, oneHot);
  t.on("Compress", 9, compress);
  t.on("Pad", 2, pad2);
  t.on("Pad", 11, pad11);
  t.on("CumSum", 11, cumSum);
  t.on("TopK", 1, topK);
}

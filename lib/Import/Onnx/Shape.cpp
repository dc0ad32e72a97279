//===- Shape.cpp - ONNX shape and data-movement ops -------------*- C++ -*-===//
//
// Reshape-like ops, slicing, gathering, and the shape arithmetic that is
// folded away once shapes are static (Shape, ConstantOfShape, Range,
// Constant). Every shape operand must be a compile-time constant.
//
//===----------------------------------------------------------------------===//

#include "Cleave/CleaveAttrNames.h"
#include "Cleave/TensorSize.h"
#include "NodeContext.h"
#include "cleave/Import/OnnxImporter.h"
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>

using namespace mlir;
using namespace mlir::cleave;
using namespace mlir::cleave::onnx_import;

namespace {

LogicalResult reshapeTo(NodeContext &ctx, Value x, ArrayRef<int64_t> shape) {
  int64_t count = NodeContext::typeOf(x).getNumElements();
  std::optional<int64_t> known = checkedElementCount(shape);
  if (known != count)
    return ctx.error() << "cannot reshape " << x.getType() << " to ["
                       << llvm::make_range(shape.begin(), shape.end())
                       << "]: element counts differ";
  ctx.setOutput(0, ctx.reshape(x, shape));
  return success();
}

LogicalResult reshape(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  FailureOr<SmallVector<int64_t>> shape = ctx.constantInts(1, "shape");
  if (failed(x) || failed(shape))
    return failure();
  ArrayRef<int64_t> in = NodeContext::typeOf(*x).getShape();
  bool allowZero = ctx.attrInt("allowzero", 0);
  SmallVector<int64_t> out(*shape);
  int64_t inferred = -1, product = 1;
  for (auto [i, d] : llvm::enumerate(out)) {
    if (d == 0 && !allowZero) {
      if (i >= in.size())
        return ctx.error() << "shape entry " << i << " is 0 but the input "
                           << "has no dimension " << i;
      d = in[i];
    }
    if (d == -1) {
      if (inferred >= 0)
        return ctx.error() << "shape has more than one -1";
      inferred = i;
      continue;
    }
    if (d < 0)
      return ctx.error() << "shape entry " << d << " is invalid";
    if (__builtin_mul_overflow(product, d, &product))
      return ctx.error() << "shape ["
                         << llvm::make_range(out.begin(), out.end())
                         << "] has more elements than fit in memory";
  }
  int64_t count = NodeContext::typeOf(*x).getNumElements();
  if (inferred >= 0) {
    if (product == 0 || count % product)
      return ctx.error() << "cannot infer the -1 of shape for " << x->getType();
    out[inferred] = count / product;
  }
  return reshapeTo(ctx, *x, out);
}

LogicalResult flatten(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  ArrayRef<int64_t> in = NodeContext::typeOf(*x).getShape();
  int64_t rank = in.size();
  int64_t axis = ctx.attrInt("axis", 1);
  if (axis < 0)
    axis += rank;
  if (axis < 0 || axis > rank)
    return ctx.error() << "axis " << ctx.attrInt("axis", 1)
                       << " is out of range for rank " << rank;
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < rank; ++i)
    (i < axis ? outer : inner) *= in[i];
  return reshapeTo(ctx, *x, {outer, inner});
}

/// Axes from input 1 (opset >= 13) or the `axes` attribute.
FailureOr<std::optional<SmallVector<int64_t>>> axesOf(NodeContext &ctx,
                                                      bool fromInput) {
  if (fromInput) {
    if (!ctx.hasInput(1))
      return std::optional<SmallVector<int64_t>>();
    FailureOr<SmallVector<int64_t>> axes = ctx.constantInts(1, "axes");
    if (failed(axes))
      return failure();
    return std::optional<SmallVector<int64_t>>(*axes);
  }
  return ctx.attrInts("axes");
}

LogicalResult squeezeImpl(NodeContext &ctx, bool fromInput) {
  FailureOr<Value> x = ctx.input(0);
  auto axes = axesOf(ctx, fromInput);
  if (failed(x) || failed(axes))
    return failure();
  ArrayRef<int64_t> in = NodeContext::typeOf(*x).getShape();
  SmallVector<bool> drop(in.size(), false);
  if (*axes) {
    for (int64_t a : **axes) {
      FailureOr<int64_t> axis = ctx.normaliseAxis(a, in.size());
      if (failed(axis))
        return failure();
      if (in[*axis] != 1)
        return ctx.error() << "cannot squeeze dimension " << *axis
                           << " of size " << in[*axis];
      drop[*axis] = true;
    }
  } else {
    for (size_t i = 0; i < in.size(); ++i)
      drop[i] = in[i] == 1;
  }
  SmallVector<int64_t> out;
  for (size_t i = 0; i < in.size(); ++i)
    if (!drop[i])
      out.push_back(in[i]);
  return reshapeTo(ctx, *x, out);
}
LogicalResult squeeze13(NodeContext &ctx) { return squeezeImpl(ctx, true); }
LogicalResult squeeze1(NodeContext &ctx) { return squeezeImpl(ctx, false); }

LogicalResult unsqueezeImpl(NodeContext &ctx, bool fromInput) {
  FailureOr<Value> x = ctx.input(0);
  auto axes = axesOf(ctx, fromInput);
  if (failed(x) || failed(axes))
    return failure();
  if (!*axes)
    return ctx.error() << "axes are required";
  ArrayRef<int64_t> in = NodeContext::typeOf(*x).getShape();
  int64_t rank = in.size() + (*axes)->size();
  SmallVector<bool> inserted(rank, false);
  for (int64_t a : **axes) {
    FailureOr<int64_t> axis = ctx.normaliseAxis(a, rank);
    if (failed(axis))
      return failure();
    if (inserted[*axis])
      return ctx.error() << "axis " << a << " appears twice";
    inserted[*axis] = true;
  }
  SmallVector<int64_t> out;
  size_t next = 0;
  for (int64_t i = 0; i < rank; ++i)
    out.push_back(inserted[i] ? 1 : in[next++]);
  return reshapeTo(ctx, *x, out);
}
LogicalResult unsqueeze13(NodeContext &ctx) { return unsqueezeImpl(ctx, true); }
LogicalResult unsqueeze1(NodeContext &ctx) { return unsqueezeImpl(ctx, false); }

LogicalResult transpose(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  int64_t rank = NodeContext::rankOf(*x);
  SmallVector<int64_t> perm;
  if (auto p = ctx.attrInts("perm"))
    perm = *p;
  else
    for (int64_t i = rank - 1; i >= 0; --i)
      perm.push_back(i);
  TransposeOp::Properties props;
  props.permutation = ctx.b.getDenseI64ArrayAttr(perm);
  FailureOr<TransposeOp> op = ctx.create<TransposeOp>({*x}, props);
  if (failed(op))
    return failure();
  ctx.setOutput(0, *op);
  return success();
}

LogicalResult concat(NodeContext &ctx) {
  SmallVector<Value> inputs;
  for (unsigned i = 0; i < ctx.numInputs(); ++i) {
    FailureOr<Value> v = ctx.input(i);
    if (failed(v))
      return failure();
    inputs.push_back(*v);
  }
  if (inputs.empty())
    return ctx.error() << "needs at least one input";
  FailureOr<int64_t> axis =
      ctx.normaliseAxis(ctx.attrInt("axis", 0), NodeContext::rankOf(inputs[0]));
  if (failed(axis))
    return failure();
  ConcatOp::Properties props;
  props.axis = ctx.b.getI64IntegerAttr(*axis);
  FailureOr<ConcatOp> op = ctx.create<ConcatOp>(inputs, props);
  if (failed(op))
    return failure();
  ctx.setOutput(0, *op);
  return success();
}

LogicalResult splitInto(NodeContext &ctx, Value x, int64_t axis,
                        ArrayRef<int64_t> sizes) {
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0)
      return ctx.error() << "split sizes must be >= 0";
    total += s;
  }
  if (total != NodeContext::typeOf(x).getDimSize(axis))
    return ctx.error() << "split sizes sum to " << total << ", dimension "
                       << axis << " has size "
                       << NodeContext::typeOf(x).getDimSize(axis);
  int64_t start = 0;
  for (auto [i, s] : llvm::enumerate(sizes)) {
    ctx.setOutput(i, ctx.sliceAxis(x, axis, start, s));
    start += s;
  }
  return success();
}

/// Even split into the node's output count, the last chunk smaller when the
/// size does not divide (opset 18's num_outputs rule).
SmallVector<int64_t> evenSplit(int64_t size, int64_t parts) {
  int64_t chunk = (size + parts - 1) / parts;
  SmallVector<int64_t> sizes;
  for (int64_t i = 0; i < parts; ++i) {
    int64_t s = std::min(chunk, size - i * chunk);
    sizes.push_back(std::max<int64_t>(s, 0));
  }
  return sizes;
}

LogicalResult splitImpl(NodeContext &ctx, bool fromInput) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  FailureOr<int64_t> axis =
      ctx.normaliseAxis(ctx.attrInt("axis", 0), NodeContext::rankOf(*x));
  if (failed(axis))
    return failure();
  int64_t size = NodeContext::typeOf(*x).getDimSize(*axis);
  if (fromInput && ctx.hasInput(1)) {
    FailureOr<SmallVector<int64_t>> sizes = ctx.constantInts(1, "split");
    if (failed(sizes))
      return failure();
    return splitInto(ctx, *x, *axis, *sizes);
  }
  if (!fromInput)
    if (auto sizes = ctx.attrInts("split"))
      return splitInto(ctx, *x, *axis, *sizes);
  int64_t parts = ctx.attrInt("num_outputs", ctx.numOutputs());
  if (parts != ctx.numOutputs())
    return ctx.error() << "num_outputs " << parts << " differs from the "
                       << ctx.numOutputs() << " outputs";
  if (ctx.opset < 18 && size % parts)
    return ctx.error() << "dimension of size " << size
                       << " does not split evenly into " << parts;
  return splitInto(ctx, *x, *axis, evenSplit(size, parts));
}
LogicalResult split13(NodeContext &ctx) { return splitImpl(ctx, true); }
LogicalResult split2(NodeContext &ctx) { return splitImpl(ctx, false); }

LogicalResult sliceFrom(NodeContext &ctx, Value x, ArrayRef<int64_t> starts,
                        ArrayRef<int64_t> ends,
                        std::optional<SmallVector<int64_t>> axes,
                        std::optional<SmallVector<int64_t>> steps) {
  auto type = NodeContext::typeOf(x);
  int64_t rank = type.getRank();
  if (starts.size() != ends.size() || (axes && axes->size() != starts.size()) ||
      (steps && steps->size() != starts.size()))
    return ctx.error() << "starts, ends, axes and steps differ in length";
  SmallVector<int64_t> outStarts(rank, 0), outSteps(rank, 1);
  SmallVector<int64_t> shape(type.getShape());
  SmallVector<bool> seen(rank, false);
  for (size_t i = 0; i < starts.size(); ++i) {
    FailureOr<int64_t> axis =
        ctx.normaliseAxis(axes ? (*axes)[i] : static_cast<int64_t>(i), rank);
    if (failed(axis))
      return failure();
    if (seen[*axis])
      return ctx.error() << "axis " << *axis << " is sliced twice";
    seen[*axis] = true;
    int64_t dim = shape[*axis];
    int64_t step = steps ? (*steps)[i] : 1;
    if (step == 0)
      return ctx.error() << "step is 0";
    int64_t start = starts[i], end = ends[i];
    // ONNX clamping: starts/ends are clamped to [0, dim] for positive steps
    // and [-1, dim - 1] for negative ones, after adding dim to negatives.
    if (start < 0)
      start += dim;
    if (end < 0)
      end += dim;
    if (step > 0) {
      start = std::clamp<int64_t>(start, 0, dim);
      end = std::clamp<int64_t>(end, 0, dim);
    } else {
      start = std::clamp<int64_t>(start, -1, dim - 1);
      end = std::clamp<int64_t>(end, -1, dim - 1);
    }
    int64_t count = step > 0 ? (end - start + step - 1) / step
                             : (start - end - step - 1) / -step;
    count = std::max<int64_t>(count, 0);
    outStarts[*axis] = count ? start : 0;
    outSteps[*axis] = step;
    shape[*axis] = count;
  }
  ctx.setOutput(
      0, ctx.b.createOrFold<SliceOp>(type.clone(shape), x,
                                     ctx.b.getDenseI64ArrayAttr(outStarts),
                                     ctx.b.getDenseI64ArrayAttr(outSteps)));
  return success();
}

LogicalResult slice10(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  FailureOr<SmallVector<int64_t>> starts = ctx.constantInts(1, "starts");
  FailureOr<SmallVector<int64_t>> ends = ctx.constantInts(2, "ends");
  if (failed(x) || failed(starts) || failed(ends))
    return failure();
  std::optional<SmallVector<int64_t>> axes, steps;
  if (ctx.hasInput(3)) {
    FailureOr<SmallVector<int64_t>> v = ctx.constantInts(3, "axes");
    if (failed(v))
      return failure();
    axes = *v;
  }
  if (ctx.hasInput(4)) {
    FailureOr<SmallVector<int64_t>> v = ctx.constantInts(4, "steps");
    if (failed(v))
      return failure();
    steps = *v;
  }
  return sliceFrom(ctx, *x, *starts, *ends, axes, steps);
}

LogicalResult slice1(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  auto starts = ctx.attrInts("starts"), ends = ctx.attrInts("ends");
  if (failed(x))
    return failure();
  if (!starts || !ends)
    return ctx.error() << "starts and ends are required";
  return sliceFrom(ctx, *x, *starts, *ends, ctx.attrInts("axes"), std::nullopt);
}

LogicalResult gather(NodeContext &ctx) {
  FailureOr<Value> data = ctx.input(0), indices = ctx.input(1);
  if (failed(data) || failed(indices))
    return failure();
  FailureOr<int64_t> axis =
      ctx.normaliseAxis(ctx.attrInt("axis", 0), NodeContext::rankOf(*data));
  if (failed(axis))
    return failure();
  Type indexType = NodeContext::typeOf(*indices).getElementType();
  if (!indexType.isInteger(32) && !indexType.isInteger(64))
    return ctx.error() << "indices must be int32 or int64, got " << indexType;
  // Constant indices are checked here, so the error names the node.
  if (auto idx = ctx.constantInput(1)) {
    int64_t size = NodeContext::typeOf(*data).getDimSize(*axis);
    for (const APInt &v : idx->getValues<APInt>()) {
      int64_t i = v.getSExtValue();
      if (i < -size || i >= size)
        return ctx.error() << "index " << i << " is out of range for a "
                           << "dimension of size " << size;
    }
  }
  ctx.setOutput(0, ctx.b.createOrFold<GatherOp>(*data, *indices, *axis));
  return success();
}

/// ai.cleave.PaddedGather(table, ids; padding_idx): a row lookup whose row
/// padding_idx takes no gradient, as nn.Embedding(padding_idx=...) trains
/// (TorchScript's aten::embedding carries it; ONNX has no way to say it).
/// Wherever an id names that row, the result is read from a lookup marked
/// no_grad, so the row keeps its value and the others train as usual.
LogicalResult paddedGather(NodeContext &ctx) {
  if (ctx.node.domain() != kCleaveDomain)
    return ctx.error() << "is Cleave's own op (domain '" << kCleaveDomain
                       << "')";
  FailureOr<Value> data = ctx.input(0), indices = ctx.input(1);
  if (failed(data) || failed(indices))
    return failure();
  auto idsType = NodeContext::typeOf(*indices);
  if (!idsType.getElementType().isInteger(64) ||
      NodeContext::rankOf(*data) != 2)
    return ctx.error() << "needs a 2-D table and int64 ids";
  int64_t rows = NodeContext::typeOf(*data).getDimSize(0);
  if (!ctx.attr("padding_idx"))
    return ctx.error() << "needs its padding_idx";
  int64_t pad = ctx.attrInt("padding_idx", 0);
  if (pad < -rows || pad >= rows)
    return ctx.error() << "padding_idx " << pad << " is out of range for "
                       << rows << " rows";
  if (pad < 0)
    pad += rows;
  Value looked = GatherOp::create(ctx.b, *data, *indices, 0);
  auto held = GatherOp::create(ctx.b, *data, *indices, 0);
  held->setAttr(kNoGradAttr, ctx.b.getUnitAttr());
  SmallVector<int64_t> ones(idsType.getRank(), 1);
  Value isPad = CmpOp::create(
      ctx.b, CmpPredicate::eq, *indices,
      ctx.splat(idsType.getElementType(), ones, static_cast<double>(pad)));
  SmallVector<int64_t> column(idsType.getShape());
  column.push_back(1);
  Value mask = ctx.b.createOrFold<ReshapeOp>(
      RankedTensorType::get(column, ctx.b.getI1Type()), isPad);
  ctx.setOutput(0, SelectOp::create(ctx.b, mask, held, looked));
  return success();
}

LogicalResult expand(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  FailureOr<SmallVector<int64_t>> shape = ctx.constantInts(1, "shape");
  if (failed(x) || failed(shape))
    return failure();
  // Bidirectional: the result is the broadcast of both shapes.
  int64_t rank = std::max<int64_t>(shape->size(), NodeContext::rankOf(*x));
  Value aligned = ctx.alignRank(*x, rank);
  SmallVector<int64_t> target(rank - shape->size(), 1);
  llvm::append_range(target, *shape);
  FailureOr<SmallVector<int64_t>> out = broadcastShapes(
      ctx.b.getLoc(), {NodeContext::typeOf(aligned).getShape(), target});
  if (failed(out))
    return failure();
  ctx.setOutput(0, ctx.b.createOrFold<BroadcastOp>(
                       NodeContext::typeOf(aligned).clone(*out), aligned));
  return success();
}

LogicalResult shape(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  ArrayRef<int64_t> dims = NodeContext::typeOf(*x).getShape();
  int64_t rank = dims.size();
  auto clampAxis = [&](int64_t a) {
    if (a < 0)
      a += rank;
    return std::clamp<int64_t>(a, 0, rank);
  };
  int64_t start = clampAxis(ctx.attrInt("start", 0));
  int64_t end = clampAxis(ctx.attrInt("end", rank));
  SmallVector<int64_t> out;
  for (int64_t i = start; i < end; ++i)
    out.push_back(dims[i]);
  auto type = RankedTensorType::get({static_cast<int64_t>(out.size())},
                                    ctx.b.getI64Type());
  ctx.setOutput(0, ConstantOp::create(
                       ctx.b, DenseElementsAttr::get(type, ArrayRef(out))));
  return success();
}

/// The element count, a static i64 scalar.
LogicalResult size(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  auto type = RankedTensorType::get({}, ctx.b.getI64Type());
  int64_t count = NodeContext::typeOf(*x).getNumElements();
  ctx.setOutput(0, ConstantOp::create(
                       ctx.b, DenseElementsAttr::get(type, ArrayRef(count))));
  return success();
}

/// Tile as a broadcast: x [d0, d1, ...] seen as [1, d0, 1, d1, ...],
/// broadcast to [r0, d0, r1, d1, ...] and merged to [r0 d0, r1 d1, ...], so
/// the gradient (a sum over the copies) and the sharding come with it.
LogicalResult tile(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  FailureOr<SmallVector<int64_t>> repeats = ctx.constantInts(1, "repeats");
  if (failed(x) || failed(repeats))
    return failure();
  auto type = NodeContext::typeOf(*x);
  if (static_cast<int64_t>(repeats->size()) != type.getRank())
    return ctx.error() << "repeats has " << repeats->size()
                       << " entries for an input of rank " << type.getRank();
  SmallVector<int64_t> split, spread, merged;
  for (auto [d, r] : llvm::zip(type.getShape(), *repeats)) {
    if (r < 0)
      return ctx.error() << "repeats must not be negative, got " << r;
    int64_t n = 0;
    if (__builtin_mul_overflow(d, r, &n))
      return ctx.error() << "the tiled shape overflows";
    split.append({1, d});
    spread.append({r, d});
    merged.push_back(n);
  }
  if (!hasCheckedSize(RankedTensorType::get(spread, type.getElementType())))
    return ctx.error() << "the tiled tensor holds more bytes than fit in "
                          "memory";
  Value wide = ctx.b.createOrFold<BroadcastOp>(type.clone(spread),
                                               ctx.reshape(*x, split));
  ctx.setOutput(0, ctx.reshape(wide, merged));
  return success();
}

/// reshape, transpose \p perm, reshape: the block rearrangements.
LogicalResult rearrange(NodeContext &ctx, Value x, ArrayRef<int64_t> split,
                        ArrayRef<int64_t> perm, ArrayRef<int64_t> merged) {
  TransposeOp::Properties props;
  props.permutation = ctx.b.getDenseI64ArrayAttr(perm);
  FailureOr<TransposeOp> t =
      ctx.create<TransposeOp>({ctx.reshape(x, split)}, props);
  if (failed(t))
    return failure();
  ctx.setOutput(0, ctx.reshape(*t, merged));
  return success();
}

/// N, C, H, W and the block size of DepthToSpace / SpaceToDepth, checked.
struct BlockDims {
  int64_t n, c, h, w, b;
};
FailureOr<BlockDims> blockDims(NodeContext &ctx, Value x) {
  auto type = NodeContext::typeOf(x);
  if (type.getRank() != 4)
    return ctx.error() << "needs a 4-D input (N, C, H, W), got " << type;
  int64_t b = ctx.attrInt("blocksize", 0);
  if (b <= 0)
    return ctx.error() << "blocksize must be positive, got " << b;
  return BlockDims{type.getDimSize(0), type.getDimSize(1), type.getDimSize(2),
                   type.getDimSize(3), b};
}

LogicalResult depthToSpace(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  FailureOr<BlockDims> d = blockDims(ctx, *x);
  if (failed(d))
    return failure();
  auto [n, c, h, w, b] = *d;
  if (c % (b * b) != 0)
    return ctx.error() << "C = " << c
                       << " is not a multiple of blocksize^2 = " << b * b;
  SmallVector<int64_t> merged = {n, c / (b * b), h * b, w * b};
  if (ctx.attrString("mode", "DCR") == "CRD")
    return rearrange(ctx, *x, {n, c / (b * b), b, b, h, w}, {0, 1, 4, 2, 5, 3},
                     merged);
  if (ctx.attrString("mode", "DCR") != "DCR")
    return ctx.error() << "mode must be DCR or CRD";
  return rearrange(ctx, *x, {n, b, b, c / (b * b), h, w}, {0, 3, 4, 1, 5, 2},
                   merged);
}

LogicalResult spaceToDepth(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  FailureOr<BlockDims> d = blockDims(ctx, *x);
  if (failed(d))
    return failure();
  auto [n, c, h, w, b] = *d;
  if (h % b != 0 || w % b != 0)
    return ctx.error() << "H = " << h << " and W = " << w
                       << " must be multiples of blocksize " << b;
  return rearrange(ctx, *x, {n, c, h / b, b, w / b, b}, {0, 3, 5, 1, 2, 4},
                   {n, c * b * b, h / b, w / b});
}

/// Ones on the k-th diagonal of the input's 2-D shape: column == row + k
/// over two iotas (folded to a constant where it is small, so a huge shape
/// costs no compile-time memory).
LogicalResult eyeLike(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  auto type = NodeContext::typeOf(*x);
  if (type.getRank() != 2)
    return ctx.error() << "needs a 2-D input, got " << type;
  Type element = type.getElementType();
  if (int64_t dtype = ctx.attrInt("dtype", 0)) {
    element = computeTypeFromOnnx(ctx.b.getContext(), dtype);
    if (!element)
      return ctx.error() << "dtype " << dtype << " is not supported";
  }
  auto indexType = type.clone(ctx.b.getI64Type());
  Value rows = IotaOp::create(ctx.b, indexType, ctx.b.getI64IntegerAttr(0));
  Value cols = IotaOp::create(ctx.b, indexType, ctx.b.getI64IntegerAttr(1));
  FailureOr<Value> shifted = ctx.createBroadcasting<AddOp>(
      {rows, ctx.splat(ctx.b.getI64Type(), {},
                       static_cast<double>(ctx.attrInt("k", 0)))});
  if (failed(shifted))
    return failure();
  FailureOr<Value> hot = ctx.compare(CmpPredicate::eq, *shifted, cols);
  if (failed(hot))
    return failure();
  ctx.setOutput(0, ctx.b.createOrFold<CastOp>(type.clone(element), *hot));
  return success();
}

LogicalResult constantOfShape(NodeContext &ctx) {
  FailureOr<SmallVector<int64_t>> shape = ctx.constantInts(0, "input");
  if (failed(shape))
    return failure();
  for (int64_t d : *shape)
    if (d < 0)
      return ctx.error() << "shape has a negative dimension " << d;
  DenseElementsAttr fill;
  if (const onnx::AttributeProto *a = ctx.attr("value")) {
    std::string error;
    FailureOr<DenseElementsAttr> v =
        tensorToAttr(ctx.b.getContext(), a->t(), error);
    if (failed(v))
      return ctx.error() << "value " << error;
    if (v->getNumElements() != 1)
      return ctx.error() << "value must hold one element";
    fill = *v;
  } else {
    fill = DenseElementsAttr::get(
        RankedTensorType::get({1}, ctx.b.getF32Type()), 0.0f);
  }
  auto type = RankedTensorType::get(*shape, fill.getElementType());
  ctx.setOutput(
      0, ConstantOp::create(ctx.b, DenseElementsAttr::get(
                                       type, fill.getValues<Attribute>()[0])));
  return success();
}

/// Ranges up to this many elements are written as constants (exactly the
/// values ONNX's reference computes); longer ones are computed from an iota,
/// so the IR does not grow with the range.
constexpr int64_t kRangeConstantLimit = 1 << 16;

/// max(ceil((limit - start) / delta), 0) for integer ranges, exact (128-bit:
/// INT64_MIN..INT64_MAX does not fit in int64); nullopt past int64.
static std::optional<int64_t> integerRangeCount(int64_t start, int64_t limit,
                                                int64_t delta) {
  __int128 span = static_cast<__int128>(limit) - start, d = delta;
  if ((span > 0) != (d > 0) || span == 0)
    return 0;
  __int128 count = span / d + (span % d != 0 ? 1 : 0);
  if (count > std::numeric_limits<int64_t>::max())
    return std::nullopt;
  return static_cast<int64_t>(count);
}

/// Range's start, limit and delta: one compile-time value each.
template <typename T>
static FailureOr<std::array<T, 3>> rangeBounds(NodeContext &ctx) {
  std::array<T, 3> out;
  const char *names[] = {"start", "limit", "delta"};
  for (unsigned i = 0; i < 3; ++i) {
    FailureOr<SmallVector<T>> v;
    if constexpr (std::is_same_v<T, double>)
      v = ctx.constantDoubles(i, names[i]);
    else
      v = ctx.constantInts(i, names[i]);
    if (failed(v))
      return failure();
    if (v->size() != 1)
      return ctx.error() << "start, limit and delta must be scalars";
    out[i] = (*v)[0];
  }
  if (out[2] == 0)
    return ctx.error() << "delta is 0";
  return out;
}

LogicalResult range(NodeContext &ctx) {
  std::optional<DenseElementsAttr> first = ctx.constantInput(0);
  if (!first)
    return ctx.error() << "input 'start' must be a compile-time constant";
  Type element = first->getElementType();
  bool isFloat = isa<FloatType>(element);
  std::optional<int64_t> count;
  double s = 0, d = 0;
  int64_t si = 0, di = 0;
  if (isFloat) {
    FailureOr<std::array<double, 3>> b = rangeBounds<double>(ctx);
    if (failed(b))
      return failure();
    auto [start, limit, delta] = *b;
    s = start, d = delta;
    if (!std::isfinite(start) || !std::isfinite(limit) || !std::isfinite(delta))
      return ctx.error() << "start, limit and delta must be finite (" << start
                         << ", " << limit << ", " << delta << ")";
    double n = std::ceil((limit - start) / delta);
    // 2^63 is the first double past int64.
    if (!(n < 9223372036854775808.0))
      return ctx.error() << "has " << n << " elements (start " << start
                         << ", limit " << limit << ", delta " << delta
                         << "), more than fit in memory";
    // An empty range may be far below int64 too: compare before converting.
    count = n <= 0 ? 0 : static_cast<int64_t>(n);
  } else {
    FailureOr<std::array<int64_t, 3>> b = rangeBounds<int64_t>(ctx);
    if (failed(b))
      return failure();
    auto [start, limit, delta] = *b;
    si = start, di = delta;
    count = integerRangeCount(start, limit, delta);
    if (!count)
      return ctx.error() << "has more elements than fit in memory (start "
                         << start << ", limit " << limit << ", delta " << delta
                         << ")";
  }
  if (!checkedByteCount({*count}, elementByteSize(element)))
    return ctx.error() << "has " << *count
                       << " elements, more than fit in memory";
  auto type = RankedTensorType::get({*count}, element);
  if (*count > kRangeConstantLimit) {
    // start + i * delta, in the element type (i in int64 first: exact).
    Type i64 = ctx.b.getI64Type();
    Value i = IotaOp::create(ctx.b, RankedTensorType::get({*count}, i64),
                             ctx.b.getI64IntegerAttr(0));
    Value iv = element == i64 ? i : CastOp::create(ctx.b, type, i).getResult();
    auto scalar = [&](double f, int64_t n) -> Value {
      if (isFloat)
        return ctx.splat(element, {1}, f);
      auto one = RankedTensorType::get({1}, element);
      return ConstantOp::create(
          ctx.b, DenseElementsAttr::get(
                     one, ctx.b.getIntegerAttr(
                              element, APInt(element.getIntOrFloatBitWidth(),
                                             static_cast<uint64_t>(n),
                                             /*isSigned=*/true,
                                             /*implicitTrunc=*/true))));
    };
    Value y = AddOp::create(ctx.b, MulOp::create(ctx.b, iv, scalar(d, di)),
                            scalar(s, si));
    ctx.setOutput(0, y);
    return success();
  }
  DenseElementsAttr attr;
  if (element.isF32()) {
    SmallVector<float> v;
    for (int64_t i = 0; i < *count; ++i)
      v.push_back(static_cast<float>(s + i * d));
    attr = DenseElementsAttr::get(type, ArrayRef(v));
  } else if (element.isF64()) {
    SmallVector<double> v;
    for (int64_t i = 0; i < *count; ++i)
      v.push_back(s + i * d);
    attr = DenseElementsAttr::get(type, ArrayRef(v));
  } else if (isFloat) {
    return ctx.error() << "a Range of " << element << " is not supported";
  } else {
    SmallVector<APInt> v;
    unsigned width = element.getIntOrFloatBitWidth();
    // Two's complement wraps as ONNX's reference does in its type.
    for (int64_t i = 0; i < *count; ++i)
      v.push_back(
          APInt(width,
                static_cast<uint64_t>(si) +
                    static_cast<uint64_t>(i) * static_cast<uint64_t>(di),
                /*isSigned=*/true, /*implicitTrunc=*/true));
    attr = DenseElementsAttr::get(type, v);
  }
  ctx.setOutput(0, ConstantOp::create(ctx.b, attr));
  return success();
}

enum class Window { Hann, Hamming, Blackman };

/// a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N) over n = 0..size-1, with
/// N = size (periodic) or size - 1 (symmetric); n from an iota, so the IR
/// does not grow with the size.
template <Window W> LogicalResult window(NodeContext &ctx) {
  FailureOr<SmallVector<int64_t>> sizeValue = ctx.constantInts(0, "size");
  if (failed(sizeValue))
    return failure();
  if (sizeValue->size() != 1 || (*sizeValue)[0] < 0)
    return ctx.error() << "size must be one non-negative number";
  int64_t size = (*sizeValue)[0];
  Type out = computeTypeFromOnnx(ctx.b.getContext(),
                                 ctx.attrInt("output_datatype", 1));
  if (!out)
    return ctx.error() << "output_datatype "
                       << ctx.attrInt("output_datatype", 1)
                       << " is not supported";
  double span = ctx.attrInt("periodic", 1) ? size : size - 1;
  double a0 = 0.5, a1 = 0.5, a2 = 0;
  if (W == Window::Hamming)
    a0 = 25.0 / 46, a1 = 21.0 / 46;
  if (W == Window::Blackman)
    a0 = 0.42, a1 = 0.5, a2 = 0.08;
  Type f32 = ctx.b.getF32Type();
  Value n = CastOp::create(
      ctx.b, RankedTensorType::get({size}, f32),
      IotaOp::create(ctx.b, RankedTensorType::get({size}, ctx.b.getI64Type()),
                     ctx.b.getI64IntegerAttr(0)));
  // One element's window (span 0) is 1, as numpy's.
  Value angle = MulOp::create(
      ctx.b, n, ctx.splat(f32, {1}, span > 0 ? 2 * M_PI / span : 0.0));
  Value y = SubOp::create(ctx.b, ctx.splat(f32, {1}, a0),
                          MulOp::create(ctx.b, ctx.splat(f32, {1}, a1),
                                        CosOp::create(ctx.b, angle)));
  if (a2 != 0) {
    Value twice = MulOp::create(ctx.b, angle, ctx.splat(f32, {1}, 2.0));
    y = AddOp::create(ctx.b, y,
                      MulOp::create(ctx.b, ctx.splat(f32, {1}, a2),
                                    CosOp::create(ctx.b, twice)));
  }
  if (span <= 0)
    y = ctx.splat(f32, {size}, 1.0);
  if (out != f32)
    y = CastOp::create(ctx.b, RankedTensorType::get({size}, out), y);
  ctx.setOutput(0, y);
  return success();
}

LogicalResult constant(NodeContext &ctx) {
  MLIRContext *mctx = ctx.b.getContext();
  DenseElementsAttr attr;
  if (const onnx::AttributeProto *a = ctx.attr("value")) {
    std::string error;
    FailureOr<DenseElementsAttr> v = tensorToAttr(mctx, a->t(), error);
    if (failed(v))
      return ctx.error() << "value " << error;
    attr = *v;
  } else if (const onnx::AttributeProto *a = ctx.attr("value_float")) {
    attr = DenseElementsAttr::get(RankedTensorType::get({}, ctx.b.getF32Type()),
                                  a->f());
  } else if (const onnx::AttributeProto *a = ctx.attr("value_floats")) {
    SmallVector<float> v(a->floats().begin(), a->floats().end());
    attr = DenseElementsAttr::get(
        RankedTensorType::get({static_cast<int64_t>(v.size())},
                              ctx.b.getF32Type()),
        ArrayRef(v));
  } else if (const onnx::AttributeProto *a = ctx.attr("value_int")) {
    attr = DenseElementsAttr::get(RankedTensorType::get({}, ctx.b.getI64Type()),
                                  static_cast<int64_t>(a->i()));
  } else if (const onnx::AttributeProto *a = ctx.attr("value_ints")) {
    SmallVector<int64_t> v(a->ints().begin(), a->ints().end());
    attr = DenseElementsAttr::get(
        RankedTensorType::get({static_cast<int64_t>(v.size())},
                              ctx.b.getI64Type()),
        ArrayRef(v));
  } else {
    return ctx.error() << "has no supported value attribute (sparse and "
                          "string constants are not supported)";
  }
  ctx.setOutput(0, ConstantOp::create(ctx.b, attr));
  return success();
}

LogicalResult dropout(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  bool training = false;
  if (ctx.hasInput(2)) {
    FailureOr<SmallVector<int64_t>> mode = ctx.constantInts(2, "training_mode");
    if (failed(mode))
      return failure();
    training = !mode->empty() && (*mode)[0];
  }
  double ratio = ctx.attrFloat("ratio", 0.5f);
  if (ctx.hasInput(1)) {
    FailureOr<SmallVector<double>> r = ctx.constantDoubles(1, "ratio");
    if (failed(r))
      return failure();
    ratio = r->empty() ? 0.5 : (*r)[0];
  }
  auto type = NodeContext::typeOf(*x);
  if (ratio < 0 || ratio >= 1)
    return ctx.error() << "ratio " << ratio << " is outside [0, 1)";
  if (!training || ratio == 0) {
    ctx.setOutput(0, *x);
    if (ctx.hasOutput(1))
      ctx.setOutput(1, ctx.splat(ctx.b.getI1Type(), type.getShape(), 1));
    return success();
  }
  if (!type.getElementType().isF32())
    return ctx.error() << "training-mode dropout needs f32 data";
  // Inverted dropout with a counter-based mask: reproducible from the seed
  // and the step, and a shard of the tensor can draw exactly its part.
  Value u = RandomUniformOp::create(ctx.b, type, ctx.step(), ctx.seed(),
                                    ctx.nextRandomStream());
  SmallVector<int64_t> ones(type.getRank(), 1);
  Value keep = CmpOp::create(ctx.b, CmpPredicate::ge, u,
                             ctx.splat(type.getElementType(), ones, ratio));
  Value scaled = MulOp::create(
      ctx.b, *x, ctx.splat(type.getElementType(), ones, 1.0 / (1.0 - ratio)));
  ctx.setOutput(0, SelectOp::create(ctx.b, keep, scaled,
                                    ctx.splat(type.getElementType(), ones, 0)));
  ctx.setOutput(1, keep);
  return success();
}

LogicalResult trilu(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  int64_t k = 0;
  if (ctx.hasInput(1)) {
    FailureOr<SmallVector<int64_t>> v = ctx.constantInts(1, "k");
    if (failed(v))
      return failure();
    if (v->size() != 1)
      return ctx.error() << "k must be a scalar";
    k = (*v)[0];
  }
  auto type = NodeContext::typeOf(*x);
  if (type.getRank() < 2)
    return ctx.error() << "input must have rank >= 2";
  bool upper = ctx.attrInt("upper", 1);
  int64_t rank = type.getRank();
  int64_t rows = type.getDimSize(rank - 2);
  int64_t cols = type.getDimSize(rank - 1);
  // (column - row) compared with k: a causal mask over a long sequence
  // would otherwise be a rows x cols constant in the IR.
  Type i64 = ctx.b.getI64Type();
  SmallVector<int64_t> rowShape(rank, 1), colShape(rank, 1);
  rowShape[rank - 2] = rows;
  colShape[rank - 1] = cols;
  Value row = IotaOp::create(ctx.b, RankedTensorType::get(rowShape, i64),
                             ctx.b.getI64IntegerAttr(rank - 2));
  Value col = IotaOp::create(ctx.b, RankedTensorType::get(colShape, i64),
                             ctx.b.getI64IntegerAttr(rank - 1));
  Value diagonal = SubOp::create(ctx.b, col, row);
  Value kValue = ConstantOp::create(
      ctx.b, DenseElementsAttr::get(
                 RankedTensorType::get(SmallVector<int64_t>(rank, 1), i64),
                 ctx.b.getI64IntegerAttr(k)));
  Value maskValue = ctx.b.createOrFold<CmpOp>(
      upper ? CmpPredicate::ge : CmpPredicate::le, diagonal, kValue);
  Value zero = ctx.splat(type.getElementType(),
                         SmallVector<int64_t>(type.getRank(), 1), 0);
  ctx.setOutput(0, ctx.b.createOrFold<SelectOp>(maskValue, *x, zero));
  return success();
}

} // namespace

void onnx_import::registerShapeHandlers(HandlerTable &t) {
  t.on("Reshape", 5, reshape);
  t.on("Flatten", 1, flatten);
  t.on("Squeeze", 1, squeeze1);
  t.on("Squeeze", 13, squeeze13);
  t.on("Unsqueeze", 1, unsqueeze1);
  t.on("Unsqueeze", 13, unsqueeze13);
  t.on("Transpose", 1, transpose);
  t.on("Concat", 4, concat);
  t.on("Split", 2, split2);
  t.on("Split", 13, split13);
  t.on("Slice", 1, slice1);
  t.on("Slice", 10, slice10);
  t.on("Gather", 1, gather);
  t.on("PaddedGather", 1, paddedGather);
  t.on("Expand", 8, expand);
  t.on("Shape", 1, shape);
  t.on("Size", 1, size);
  t.on("Tile", 6, tile);
  t.on("DepthToSpace", 1, depthToSpace);
  t.on("SpaceToDepth", 1, spaceToDepth);
  t.on("EyeLike", 9, eyeLike);
  t.on("ConstantOfShape", 9, constantOfShape);
  t.on("Range", 11, range);
  t.on("HannWindow", 17, window<Window::Hann>);
  t.on("HammingWindow", 17, window<Window::Hamming>);
  t.on("BlackmanWindow", 17, window<Window::Blackman>);
  t.on("Constant", 1, constant);
  t.on("Dropout", 7, dropout);
  t.on("Trilu", 14, trilu);
}

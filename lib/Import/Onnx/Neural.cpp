//===- Neural.cpp - ONNX contractions, reductions, norms, conv --*- C++ -*-===//

#include "Cleave/CleaveAttrNames.h"
#include "Cleave/CleaveLosses.h"
#include "NodeContext.h"
#include "llvm/ADT/StringExtras.h"

using namespace mlir;
using namespace mlir::cleave;
using namespace mlir::cleave::onnx_import;

namespace {

LogicalResult requireFloat(NodeContext &ctx, Value v) {
  Type t = NodeContext::typeOf(v).getElementType();
  if (!isa<FloatType>(t))
    return ctx.error() << "needs float operands, got " << t;
  return success();
}

/// numpy.matmul: 1-D operands gain and then lose a dimension, batch dims
/// broadcast after rank alignment.
FailureOr<Value> numpyMatmul(NodeContext &ctx, Value a, Value b) {
  if (failed(requireFloat(ctx, a)) || failed(requireFloat(ctx, b)))
    return failure();
  bool vecA = NodeContext::rankOf(a) == 1, vecB = NodeContext::rankOf(b) == 1;
  if (NodeContext::rankOf(a) == 0 || NodeContext::rankOf(b) == 0)
    return ctx.error() << "operands must have rank >= 1";
  if (vecA)
    a = ctx.reshape(a, {1, NodeContext::typeOf(a).getDimSize(0)});
  if (vecB)
    b = ctx.reshape(b, {NodeContext::typeOf(b).getDimSize(0), 1});
  FailureOr<Value> result = ctx.createBroadcasting<MatmulOp>({a, b});
  if (failed(result))
    return failure();
  SmallVector<int64_t> shape(NodeContext::typeOf(*result).getShape());
  if (vecB)
    shape.pop_back();
  if (vecA)
    shape.erase(shape.end() - (vecB ? 1 : 2));
  return ctx.reshape(*result, shape);
}

LogicalResult matmul(NodeContext &ctx) {
  FailureOr<Value> a = ctx.input(0), b = ctx.input(1);
  if (failed(a) || failed(b))
    return failure();
  FailureOr<Value> r = numpyMatmul(ctx, *a, *b);
  if (failed(r))
    return failure();
  ctx.setOutput(0, *r);
  return success();
}

LogicalResult gemm(NodeContext &ctx) {
  FailureOr<Value> a = ctx.input(0), b = ctx.input(1);
  if (failed(a) || failed(b) || failed(requireFloat(ctx, *a)) ||
      failed(requireFloat(ctx, *b)))
    return failure();
  if (NodeContext::rankOf(*a) != 2 || NodeContext::rankOf(*b) != 2)
    return ctx.error() << "A and B must be matrices";
  MatmulOp::Properties props;
  if (ctx.attrInt("transA", 0))
    props.transpose_lhs = ctx.b.getUnitAttr();
  if (ctx.attrInt("transB", 0))
    props.transpose_rhs = ctx.b.getUnitAttr();
  FailureOr<Value> y = ctx.createBroadcasting<MatmulOp>({*a, *b}, props);
  if (failed(y))
    return failure();
  Type f32 = NodeContext::typeOf(*y).getElementType();
  float alpha = ctx.attrFloat("alpha", 1.0f),
        beta = ctx.attrFloat("beta", 1.0f);
  if (alpha != 1.0f)
    y = MulOp::create(ctx.b, *y, ctx.splat(f32, {1, 1}, alpha)).getResult();
  if (ctx.hasInput(2) && beta != 0.0f) {
    FailureOr<Value> c = ctx.input(2);
    if (failed(c) || failed(requireFloat(ctx, *c)))
      return failure();
    Value cv = *c;
    if (beta != 1.0f) {
      FailureOr<Value> scaled =
          ctx.createBroadcasting<MulOp>({cv, ctx.splat(f32, {}, beta)});
      if (failed(scaled))
        return failure();
      cv = *scaled;
    }
    y = ctx.createBroadcasting<AddOp>({*y, cv});
    if (failed(y))
      return failure();
  }
  ctx.setOutput(0, *y);
  return success();
}

/// Einsum without repeated indices within an operand: one operand reduces
/// and permutes; two contract through one batched matmul.
LogicalResult einsum(NodeContext &ctx) {
  std::string eq = ctx.attrString("equation", "");
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  if (eq.find("...") != std::string::npos)
    return ctx.error() << "equation '" << eq
                       << "' uses an ellipsis, which is not supported";
  SmallVector<StringRef> lhsRhs;
  StringRef(eq).split(lhsRhs, "->");
  SmallVector<StringRef> terms;
  lhsRhs[0].split(terms, ',');
  if (terms.size() != ctx.numInputs() || terms.size() > 2)
    return ctx.error() << "equation '" << eq << "' needs 1 or 2 operands "
                       << "matching the inputs";
  std::string out;
  if (lhsRhs.size() == 2) {
    out = lhsRhs[1].str();
  } else {
    // Implicit output: indices that appear once, in alphabetical order.
    std::string all = lhsRhs[0].str();
    for (char c = 'A'; c <= 'z'; ++c)
      if (std::count(all.begin(), all.end(), c) == 1)
        out.push_back(c);
  }
  SmallVector<Value> ops;
  llvm::StringMap<int64_t> sizes;
  for (auto [i, term] : llvm::enumerate(terms)) {
    FailureOr<Value> v = ctx.input(i);
    if (failed(v) || failed(requireFloat(ctx, *v)))
      return failure();
    if (static_cast<int64_t>(term.size()) != NodeContext::rankOf(*v))
      return ctx.error() << "term '" << term << "' does not match rank "
                         << NodeContext::rankOf(*v);
    for (auto [d, c] : llvm::enumerate(term)) {
      if (term.count(c) > 1)
        return ctx.error() << "repeated index '" << c << "' in term '" << term
                           << "' (diagonals) is not supported";
      int64_t size = NodeContext::typeOf(*v).getDimSize(d);
      auto [it, inserted] = sizes.insert({StringRef(&c, 1), size});
      if (!inserted && it->second != size)
        return ctx.error() << "index '" << c << "' has sizes " << it->second
                           << " and " << size;
    }
    ops.push_back(*v);
  }
  auto sizeOf = [&](char c) { return sizes.lookup(StringRef(&c, 1)); };
  auto permuteTo = [&](Value v, StringRef from, StringRef to) -> Value {
    SmallVector<int64_t> perm;
    for (char c : to)
      perm.push_back(from.find(c));
    return ctx.b.createOrFold<TransposeOp>(v, ctx.b.getDenseI64ArrayAttr(perm));
  };
  // Sums an operand over indices that no other term or the output has.
  auto reduceLocal = [&](Value v, std::string &term, StringRef other) -> Value {
    SmallVector<int64_t> dims;
    std::string kept;
    for (auto [d, c] : llvm::enumerate(term)) {
      if (out.find(c) == std::string::npos && other.find(c) == StringRef::npos)
        dims.push_back(d);
      else
        kept.push_back(c);
    }
    if (dims.empty())
      return v;
    term = kept;
    return ReduceOp::create(ctx.b, ReduceKind::sum, v,
                            ctx.b.getDenseI64ArrayAttr(dims), false)
        .getResult();
  };
  for (char c : out)
    if (!sizes.count(StringRef(&c, 1)))
      return ctx.error() << "output index '" << c << "' is not an input index";

  std::string t0 = terms[0].str();
  Value a = reduceLocal(ops[0], t0, terms.size() > 1 ? terms[1] : "");
  if (terms.size() == 1) {
    ctx.setOutput(0, permuteTo(a, t0, out));
    return success();
  }
  std::string t1 = terms[1].str();
  Value b = reduceLocal(ops[1], t1, t0);
  std::string batch, contracted, keptA, keptB;
  for (char c : t0) {
    bool inB = t1.find(c) != std::string::npos;
    bool inOut = out.find(c) != std::string::npos;
    (inB ? (inOut ? batch : contracted) : keptA).push_back(c);
  }
  for (char c : t1)
    if (t0.find(c) == std::string::npos)
      keptB.push_back(c);
  auto product = [&](StringRef idx) {
    int64_t p = 1;
    for (char c : idx)
      p *= sizeOf(c);
    return p;
  };
  int64_t nb = product(batch), m = product(keptA), k = product(contracted),
          n = product(keptB);
  a = ctx.reshape(permuteTo(a, t0, batch + keptA + contracted), {nb, m, k});
  b = ctx.reshape(permuteTo(b, t1, batch + contracted + keptB), {nb, k, n});
  Value r = MatmulOp::create(ctx.b, a, b);
  std::string rTerm = batch + keptA + keptB;
  SmallVector<int64_t> rShape;
  for (char c : rTerm)
    rShape.push_back(sizeOf(c));
  r = ctx.reshape(r, rShape);
  ctx.setOutput(0, permuteTo(r, rTerm, out));
  return success();
}

template <typename OpTy> LogicalResult softmax13(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x) || failed(requireFloat(ctx, *x)))
    return failure();
  FailureOr<int64_t> axis =
      ctx.normaliseAxis(ctx.attrInt("axis", -1), NodeContext::rankOf(*x));
  if (failed(axis))
    return failure();
  ctx.setOutput(0, OpTy::create(ctx.b, *x, *axis));
  return success();
}

/// Opsets < 13 coerce the input to 2-D at `axis` (default 1).
template <typename OpTy> LogicalResult softmax1(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x) || failed(requireFloat(ctx, *x)))
    return failure();
  auto type = NodeContext::typeOf(*x);
  int64_t rank = type.getRank();
  int64_t axis = ctx.attrInt("axis", 1);
  if (axis < 0)
    axis += rank;
  if (axis < 0 || axis > rank)
    return ctx.error() << "axis is out of range";
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < rank; ++i)
    (i < axis ? outer : inner) *= type.getDimSize(i);
  Value flat = ctx.reshape(*x, {outer, inner});
  ctx.setOutput(0, ctx.reshape(OpTy::create(ctx.b, flat, 1), type.getShape()));
  return success();
}

/// ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSum and ReduceLogSumExp
/// are a plain reduction between an elementwise step before it and one
/// after.
enum class ReduceForm { Plain, SumSquare, L1, L2, LogSum, LogSumExp };

/// \p x reduced over \p dims in \p form (a plain reduction keeps them
/// as the node says; the other forms compute with them kept and drop them
/// last).
FailureOr<Value> reduceInForm(NodeContext &ctx, ReduceForm form,
                              ReduceKind kind, Value x, ArrayRef<int64_t> dims,
                              bool keep) {
  auto reduce = [&](ReduceKind k, Value v, bool keepDims = true) -> Value {
    return ReduceOp::create(ctx.b, k, v, ctx.b.getDenseI64ArrayAttr(dims),
                            keepDims);
  };
  Value y;
  switch (form) {
  case ReduceForm::Plain:
    return reduce(kind, x, keep);
  case ReduceForm::SumSquare:
    y = reduce(ReduceKind::sum, MulOp::create(ctx.b, x, x));
    break;
  case ReduceForm::L1:
    y = reduce(ReduceKind::sum, AbsOp::create(ctx.b, x));
    break;
  case ReduceForm::L2:
    y = SqrtOp::create(ctx.b,
                       reduce(ReduceKind::sum, MulOp::create(ctx.b, x, x)));
    break;
  case ReduceForm::LogSum:
    y = LogOp::create(ctx.b, reduce(ReduceKind::sum, x));
    break;
  case ReduceForm::LogSumExp: {
    // log(sum(exp(x - m))) + m with m the max where it is finite (0 where
    // it is not: all -inf, or inf or NaN), so exp never overflows.
    Value m = reduce(ReduceKind::max, x);
    Value zero = ctx.splat(NodeContext::typeOf(x).getElementType(), {}, 0.0);
    FailureOr<Value> finite =
        ctx.compare(CmpPredicate::eq, SubOp::create(ctx.b, m, m), zero);
    if (failed(finite))
      return failure();
    FailureOr<Value> shift =
        ctx.createBroadcasting<SelectOp>({*finite, m, zero});
    if (failed(shift))
      return failure();
    FailureOr<Value> shifted = ctx.createBroadcasting<SubOp>({x, *shift});
    if (failed(shifted))
      return failure();
    Value sum = reduce(ReduceKind::sum, ExpOp::create(ctx.b, *shifted));
    y = AddOp::create(ctx.b, LogOp::create(ctx.b, sum), *shift);
    break;
  }
  }
  if (keep)
    return y;
  SmallVector<int64_t> shape;
  auto type = NodeContext::typeOf(x);
  for (int64_t i = 0; i < type.getRank(); ++i)
    if (!llvm::is_contained(dims, i))
      shape.push_back(type.getDimSize(i));
  return ctx.reshape(y, shape);
}

LogicalResult reduceWith(NodeContext &ctx, ReduceKind kind,
                         std::optional<SmallVector<int64_t>> axes,
                         bool noopWithEmpty,
                         ReduceForm form = ReduceForm::Plain) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  int64_t rank = NodeContext::rankOf(*x);
  bool keep = ctx.attrInt("keepdims", 1) != 0;
  bool floatOnly = kind == ReduceKind::mean || form == ReduceForm::L2 ||
                   form == ReduceForm::LogSum || form == ReduceForm::LogSumExp;
  SmallVector<int64_t> dims;
  if (!axes || axes->empty()) {
    if (noopWithEmpty) {
      // ONNX's reference: the input as it is, squared for SumSquare.
      ctx.setOutput(0, form == ReduceForm::SumSquare
                           ? Value(MulOp::create(ctx.b, *x, *x))
                           : *x);
      return success();
    }
    for (int64_t i = 0; i < rank; ++i)
      dims.push_back(i);
  } else {
    for (int64_t a : *axes) {
      FailureOr<int64_t> d = ctx.normaliseAxis(a, rank);
      if (failed(d))
        return failure();
      dims.push_back(*d);
    }
    llvm::sort(dims);
    dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  }
  if (floatOnly && failed(requireFloat(ctx, *x)))
    return failure();
  FailureOr<Value> y = reduceInForm(ctx, form, kind, *x, dims, keep);
  if (failed(y))
    return failure();
  ctx.setOutput(0, *y);
  return success();
}

template <ReduceKind K, ReduceForm F = ReduceForm::Plain>
LogicalResult reduceAttr(NodeContext &ctx) {
  return reduceWith(ctx, K, ctx.attrInts("axes"), false, F);
}

template <ReduceKind K, ReduceForm F = ReduceForm::Plain>
LogicalResult reduceInput(NodeContext &ctx) {
  std::optional<SmallVector<int64_t>> axes;
  if (ctx.hasInput(1)) {
    FailureOr<SmallVector<int64_t>> v = ctx.constantInts(1, "axes");
    if (failed(v))
      return failure();
    axes = *v;
  }
  return reduceWith(ctx, K, axes, ctx.attrInt("noop_with_empty_axes", 0), F);
}

/// The first (\p last: the last) position along \p axis of \p x holding
/// its extreme, as reductions over an iota where the value equals its
/// extreme; a NaN counts as the extreme, as in numpy.
FailureOr<Value> extremeIndex(NodeContext &ctx, Value x, int64_t axis,
                              bool isMax, bool last, bool keep) {
  auto type = NodeContext::typeOf(x);
  auto dims = ctx.b.getDenseI64ArrayAttr({axis});
  Value extreme = ReduceOp::create(
      ctx.b, isMax ? ReduceKind::max : ReduceKind::min, x, dims, true);
  FailureOr<Value> hit = ctx.compare(CmpPredicate::eq, x, extreme);
  if (failed(hit))
    return failure();
  if (isa<FloatType>(type.getElementType())) {
    FailureOr<Value> nan = ctx.compare(CmpPredicate::ne, x, x);
    if (failed(nan))
      return failure();
    hit = ctx.createBroadcasting<OrOp>({*hit, *nan});
    if (failed(hit))
      return failure();
  }
  Value index = IotaOp::create(ctx.b, type.clone(ctx.b.getI64Type()),
                               ctx.b.getI64IntegerAttr(axis));
  Value none =
      ctx.splat(ctx.b.getI64Type(), {},
                last ? -1.0 : static_cast<double>(type.getDimSize(axis)));
  FailureOr<Value> candidates =
      ctx.createBroadcasting<SelectOp>({*hit, index, none});
  if (failed(candidates))
    return failure();
  return Value(ReduceOp::create(ctx.b, last ? ReduceKind::max : ReduceKind::min,
                                *candidates, dims, keep));
}

template <bool IsMax> LogicalResult argExtreme(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  auto type = NodeContext::typeOf(*x);
  if (type.getElementType().isInteger(1))
    return ctx.error() << "needs a numeric input, got bool";
  FailureOr<int64_t> axis =
      ctx.normaliseAxis(ctx.attrInt("axis", 0), type.getRank());
  if (failed(axis))
    return failure();
  FailureOr<Value> y =
      extremeIndex(ctx, *x, *axis, IsMax, ctx.attrInt("select_last_index", 0),
                   ctx.attrInt("keepdims", 1) != 0);
  if (failed(y))
    return failure();
  ctx.setOutput(0, *y);
  return success();
}

/// 1 at the first maximum along the axis, 0 elsewhere. Before opset 13 the
/// input is seen as 2-D [outer, inner] split at axis (default 1), as
/// Softmax-1 sees it.
template <bool Coerced> LogicalResult hardmax(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x) || failed(requireFloat(ctx, *x)))
    return failure();
  auto type = NodeContext::typeOf(*x);
  int64_t rank = type.getRank();
  int64_t axis = ctx.attrInt("axis", Coerced ? 1 : -1);
  if (axis < 0)
    axis += rank;
  if (axis < 0 || axis > rank || (!Coerced && axis == rank))
    return ctx.error() << "axis is out of range";
  Value in = *x;
  if (Coerced) {
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < rank; ++i)
      (i < axis ? outer : inner) *= type.getDimSize(i);
    in = ctx.reshape(in, {outer, inner});
    axis = 1;
  }
  FailureOr<Value> at = extremeIndex(ctx, in, axis, true, false, true);
  if (failed(at))
    return failure();
  auto inType = NodeContext::typeOf(in);
  Value index = IotaOp::create(ctx.b, inType.clone(ctx.b.getI64Type()),
                               ctx.b.getI64IntegerAttr(axis));
  FailureOr<Value> hot = ctx.compare(CmpPredicate::eq, index, *at);
  if (failed(hot))
    return failure();
  Value y = ctx.b.createOrFold<CastOp>(inType, *hot);
  ctx.setOutput(0, Coerced ? ctx.reshape(y, type.getShape()) : y);
  return success();
}

LogicalResult layerNorm(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0), scale = ctx.input(1);
  if (failed(x) || failed(scale) || failed(requireFloat(ctx, *x)))
    return failure();
  auto type = NodeContext::typeOf(*x);
  FailureOr<int64_t> axis =
      ctx.normaliseAxis(ctx.attrInt("axis", -1), type.getRank());
  if (failed(axis))
    return failure();
  auto normType = RankedTensorType::get(type.getShape().drop_front(*axis),
                                        type.getElementType());
  // Scale and bias broadcast to the normalised shape.
  auto fit = [&](Value v) -> FailureOr<Value> {
    if (v.getType() == normType)
      return v;
    Value aligned = ctx.alignRank(v, normType.getRank());
    if (NodeContext::rankOf(aligned) != normType.getRank() ||
        failed(broadcastShapes(
            ctx.b.getLoc(),
            {NodeContext::typeOf(aligned).getShape(), normType.getShape()})))
      return ctx.error() << "scale/bias of type " << v.getType()
                         << " do not broadcast to " << normType;
    return ctx.b.createOrFold<BroadcastOp>(normType, aligned);
  };
  FailureOr<Value> s = fit(*scale);
  if (failed(s))
    return failure();
  Value bias;
  if (ctx.hasInput(2)) {
    FailureOr<Value> bv = ctx.input(2);
    if (failed(bv))
      return failure();
    FailureOr<Value> fitted = fit(*bv);
    if (failed(fitted))
      return failure();
    bias = *fitted;
  }
  auto op = LayerNormOp::create(
      ctx.b, *x, *s, bias, ctx.b.getI64IntegerAttr(*axis),
      ctx.b.getF32FloatAttr(ctx.attrFloat("epsilon", 1e-5f)));
  ctx.setOutput(0, op.getResult());
  ctx.setOutput(1, op.getMean());
  ctx.setOutput(2, op.getInvStdDev());
  return success();
}

/// Per-sample, per-channel normalisation over the spatial dims: a
/// layer_norm from dim 2 on, then the per-channel affine map.
LogicalResult instanceNorm(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0), scale = ctx.input(1), bias = ctx.input(2);
  if (failed(x) || failed(scale) || failed(bias) ||
      failed(requireFloat(ctx, *x)))
    return failure();
  auto type = NodeContext::typeOf(*x);
  if (type.getRank() < 3)
    return ctx.error() << "input must have rank >= 3 [N, C, D...]";
  int64_t channels = type.getDimSize(1);
  auto channelType = RankedTensorType::get({channels}, type.getElementType());
  if (scale->getType() != channelType || bias->getType() != channelType)
    return ctx.error() << "scale and B must have type " << channelType;
  auto op = LayerNormOp::create(
      ctx.b, *x, Value(), Value(), ctx.b.getI64IntegerAttr(2),
      ctx.b.getF32FloatAttr(ctx.attrFloat("epsilon", 1e-5f)));
  SmallVector<int64_t> perChannel(type.getRank() - 1, 1);
  perChannel[0] = channels;
  FailureOr<Value> y = ctx.createBroadcasting<MulOp>(
      {op.getResult(), ctx.reshape(*scale, perChannel)});
  if (succeeded(y))
    y = ctx.createBroadcasting<AddOp>({*y, ctx.reshape(*bias, perChannel)});
  if (failed(y))
    return failure();
  ctx.setOutput(0, *y);
  return success();
}

/// (x - mean) / sqrt(var + 1e-9) over `axes`, as ONNX's function body.
LogicalResult meanVarianceNorm(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x) || failed(requireFloat(ctx, *x)))
    return failure();
  int64_t rank = NodeContext::rankOf(*x);
  SmallVector<int64_t> axes;
  for (int64_t a :
       ctx.attrInts("axes").value_or(SmallVector<int64_t>{0, 2, 3})) {
    FailureOr<int64_t> axis = ctx.normaliseAxis(a, rank);
    if (failed(axis))
      return failure();
    axes.push_back(*axis);
  }
  llvm::sort(axes);
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  auto dims = ctx.b.getDenseI64ArrayAttr(axes);
  Value mean = ReduceOp::create(ctx.b, ReduceKind::mean, *x, dims, true);
  FailureOr<Value> centered = ctx.createBroadcasting<SubOp>({*x, mean});
  if (failed(centered))
    return failure();
  Value var = ReduceOp::create(
      ctx.b, ReduceKind::mean,
      MulOp::create(ctx.b, *centered, *centered).getResult(), dims, true);
  Type f = NodeContext::typeOf(*x).getElementType();
  Value eps = ctx.splat(f, SmallVector<int64_t>(rank, 1), 1e-9);
  Value inv = RsqrtOp::create(ctx.b, AddOp::create(ctx.b, var, eps));
  FailureOr<Value> y = ctx.createBroadcasting<MulOp>({*centered, inv});
  if (failed(y))
    return failure();
  ctx.setOutput(0, *y);
  return success();
}

/// Local response normalisation across channels: x / (bias + alpha / size
/// * sum of squares over the size channels around each) ^ beta, the window
/// summed as shifted slices of the zero-padded squares.
LogicalResult lrn(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x) || failed(requireFloat(ctx, *x)))
    return failure();
  auto type = NodeContext::typeOf(*x);
  int64_t size = ctx.attrInt("size", 0);
  if (type.getRank() < 3 || size < 1)
    return ctx.error() << "needs an [N, C, ...] input and a positive size";
  int64_t channels = type.getDimSize(1);
  int64_t before = (size - 1) / 2, after = size - 1 - before;
  Type f = type.getElementType();
  Value sq = MulOp::create(ctx.b, *x, *x);
  SmallVector<int64_t> padShape(type.getShape());
  SmallVector<Value> parts;
  for (int64_t n : {before, int64_t(-1), after}) {
    if (n < 0) {
      parts.push_back(sq);
      continue;
    }
    if (n == 0)
      continue;
    padShape[1] = n;
    parts.push_back(ctx.splat(f, padShape, 0.0));
  }
  padShape[1] = channels + before + after;
  Value padded = parts.size() == 1
                     ? parts[0]
                     : ConcatOp::create(ctx.b, type.clone(padShape), parts,
                                        ctx.b.getI64IntegerAttr(1))
                           .getResult();
  Value sum;
  for (int64_t k = 0; k < size; ++k) {
    SmallVector<int64_t> starts(type.getRank(), 0), steps(type.getRank(), 1);
    starts[1] = k;
    Value win = ctx.b.createOrFold<SliceOp>(type, padded,
                                            ctx.b.getDenseI64ArrayAttr(starts),
                                            ctx.b.getDenseI64ArrayAttr(steps));
    sum = sum ? AddOp::create(ctx.b, sum, win).getResult() : win;
  }
  SmallVector<int64_t> one(type.getRank(), 1);
  double alpha = ctx.attrFloat("alpha", 1e-4f),
         beta = ctx.attrFloat("beta", 0.75f),
         bias = ctx.attrFloat("bias", 1.0f);
  Value scaled =
      AddOp::create(ctx.b, ctx.splat(f, one, bias),
                    MulOp::create(ctx.b, ctx.splat(f, one, alpha / size), sum));
  Value denom = PowOp::create(ctx.b, scaled, ctx.splat(f, one, beta));
  FailureOr<Value> y = ctx.createBroadcasting<DivOp>({*x, denom});
  if (failed(y))
    return failure();
  ctx.setOutput(0, *y);
  return success();
}

LogicalResult batchNorm(NodeContext &ctx) {
  SmallVector<Value> in;
  for (unsigned i = 0; i < 5; ++i) {
    FailureOr<Value> v = ctx.input(i);
    if (failed(v) || failed(requireFloat(ctx, *v)))
      return failure();
    in.push_back(*v);
  }
  auto type = NodeContext::typeOf(in[0]);
  if (type.getRank() < 2)
    return ctx.error() << "input must have rank >= 2 [N, C, ...]";
  int64_t channels = type.getDimSize(1);
  auto channelType = RankedTensorType::get({channels}, type.getElementType());
  for (unsigned i = 1; i < 5; ++i)
    if (in[i].getType() != channelType)
      return ctx.error() << "input " << i << " must have type " << channelType
                         << ", got " << in[i].getType();
  float eps = ctx.attrFloat("epsilon", 1e-5f);
  if (ctx.attrInt("spatial", 1) != 1)
    return ctx.error() << "spatial=0 (statistics per element, not per "
                          "channel) is not supported";
  // Training mode is an attribute from opset 14; before, the extra outputs
  // (running statistics) ask for it, and before 7 also is_test = 0.
  bool training = ctx.opset >= 14
                      ? ctx.attrInt("training_mode", 0) != 0
                      : ctx.hasOutput(1) && !ctx.attrInt("is_test", 0);
  if (!training) {
    ctx.setOutput(0, BatchNormOp::create(ctx.b, in[0], in[1], in[2], in[3],
                                         in[4], ctx.b.getF32FloatAttr(eps)));
    return success();
  }
  // Training mode: batch statistics (biased variance, as ONNX's reference),
  // then the running statistics blended with `momentum`.
  SmallVector<int64_t> dims;
  for (int64_t i = 0; i < type.getRank(); ++i)
    if (i != 1)
      dims.push_back(i);
  Type f32 = type.getElementType();
  auto dimsAttr = ctx.b.getDenseI64ArrayAttr(dims);
  Value mean = ReduceOp::create(ctx.b, ReduceKind::mean, in[0], dimsAttr, true);
  Value centered = SubOp::create(ctx.b, in[0], mean);
  Value var = ReduceOp::create(ctx.b, ReduceKind::mean,
                               MulOp::create(ctx.b, centered, centered),
                               dimsAttr, true);
  Value flatMean = ctx.reshape(mean, {channels});
  Value flatVar = ctx.reshape(var, {channels});
  ctx.setOutput(0, BatchNormOp::create(ctx.b, in[0], in[1], in[2], flatMean,
                                       flatVar, ctx.b.getF32FloatAttr(eps)));
  float momentum = ctx.attrFloat("momentum", 0.9f);
  auto blend = [&](Value running, Value current) -> Value {
    Value m = ctx.splat(f32, {1}, momentum);
    Value rest = ctx.splat(f32, {1}, 1.0 - momentum);
    return AddOp::create(ctx.b, MulOp::create(ctx.b, running, m),
                         MulOp::create(ctx.b, current, rest));
  };
  Value runningMean = blend(in[3], flatMean);
  // ONNX blends the biased batch variance; PyTorch, which exports most
  // training graphs, blends the unbiased one. Models it produced train as
  // they would have in PyTorch.
  Value blendVar = flatVar;
  int64_t count = type.getNumElements() / channels;
  if (ctx.producer() == "pytorch" && count > 1)
    blendVar = MulOp::create(
        ctx.b, flatVar,
        ctx.splat(f32, {1}, static_cast<double>(count) / (count - 1)));
  Value runningVar = blend(in[4], blendVar);
  // Statistics are state: they take no part in the gradient.
  for (Value v : {runningMean, runningVar})
    v.getDefiningOp()->setAttr(kNoGradAttr, ctx.b.getUnitAttr());
  ctx.setOutput(1, runningMean);
  ctx.setOutput(2, runningVar);
  ctx.updateBuffer(3, runningMean);
  ctx.updateBuffer(4, runningVar);
  return success();
}

/// SoftmaxCrossEntropyLoss (scores) and NegativeLogLikelihoodLoss (log
/// probabilities): class dimension 1, optional class weights, ignore_index.
template <bool LogProbs> LogicalResult crossEntropyLoss(NodeContext &ctx) {
  FailureOr<Value> scores = ctx.input(0);
  FailureOr<Value> labels = ctx.input(1);
  if (failed(scores) || failed(labels) || failed(requireFloat(ctx, *scores)))
    return failure();
  FailureOr<Value> weightsIn = ctx.optionalInput(2);
  if (failed(weightsIn))
    return failure();
  Value weights = *weightsIn;
  if (NodeContext::rankOf(*scores) < 2)
    return ctx.error() << "scores must have rank >= 2 [N, C, ...]";
  std::string reduction = ctx.attrString("reduction", "mean");
  LossReduction kind;
  if (reduction == "mean")
    kind = LossReduction::Mean;
  else if (reduction == "sum")
    kind = LossReduction::Sum;
  else if (reduction == "none")
    kind = LossReduction::None;
  else
    return ctx.error() << "unknown reduction '" << reduction << "'";
  std::optional<int64_t> ignore;
  if (ctx.attr("ignore_index"))
    ignore = ctx.attrInt("ignore_index", -100);
  // Diagnostics from the builder carry the node prefix (captured by the
  // importer around each handler).
  Value loss = buildCrossEntropy(ctx.b, ctx.b.getLoc(), *scores, *labels, 1,
                                 ignore, weights, kind, LogProbs);
  if (!loss)
    return failure();
  ctx.setOutput(0, loss);
  if (!LogProbs && ctx.hasOutput(1))
    ctx.setOutput(1, LogSoftmaxOp::create(ctx.b, *scores, 1));
  return success();
}

/// Window attributes of Conv and the pools, normalised to 2-D (a 1-D op
/// gets a leading spatial dim of 1) with auto_pad resolved.
struct Window {
  SmallVector<int64_t> kernel, strides, pads, dilations; // pads: t, l, b, r
  bool ceil = false;
};

/// Window attributes a sweep can run with: kernel, strides and dilations
/// positive, pads not negative (a stride of 0 divided by zero).
LogicalResult checkWindow(NodeContext &ctx, ArrayRef<int64_t> kernel,
                          ArrayRef<int64_t> strides,
                          ArrayRef<int64_t> dilations, ArrayRef<int64_t> pads) {
  auto positive = [](ArrayRef<int64_t> v) {
    return llvm::all_of(v, [](int64_t x) { return x >= 1; });
  };
  if (!positive(kernel) || !positive(strides) || !positive(dilations) ||
      !llvm::all_of(pads, [](int64_t x) { return x >= 0; }))
    return ctx.error() << "kernel sizes, strides and dilations must be "
                          "positive and pads not negative";
  return success();
}

/// The window attributes over all of \p spatial's dims, auto_pad resolved.
FailureOr<Window> windowNd(NodeContext &ctx, ArrayRef<int64_t> spatial,
                           ArrayRef<int64_t> kernel) {
  size_t n = spatial.size();
  Window w;
  auto get = [&](StringRef name, int64_t dflt, size_t count) {
    SmallVector<int64_t> v =
        ctx.attrInts(name).value_or(SmallVector<int64_t>(count, dflt));
    return v;
  };
  SmallVector<int64_t> strides = get("strides", 1, n);
  SmallVector<int64_t> dilations = get("dilations", 1, n);
  SmallVector<int64_t> pads = get("pads", 0, 2 * n);
  if (strides.size() != n || dilations.size() != n || pads.size() != 2 * n)
    return ctx.error() << "strides, dilations or pads do not match " << n
                       << " spatial dimensions";
  if (failed(checkWindow(ctx, kernel, strides, dilations, pads)))
    return failure();
  // Attribute products checked against int64 and the input, before any
  // size is computed from them (a dilation of 2^62 wrapped to a 0-wide
  // output).
  SmallVector<int64_t> extent(n);
  for (size_t i = 0; i < n; ++i)
    if (__builtin_mul_overflow(dilations[i], kernel[i] - 1, &extent[i]) ||
        __builtin_add_overflow(extent[i], 1, &extent[i]) ||
        extent[i] > int64_t(1) << 40)
      return ctx.error() << "the window of spatial dimension " << i
                         << " (kernel " << kernel[i] << ", dilation "
                         << dilations[i]
                         << ") spans more than any input can hold";
  std::string autoPad = ctx.attrString("auto_pad", "NOTSET");
  w.ceil = ctx.attrInt("ceil_mode", 0) != 0;
  if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
    for (size_t i = 0; i < n; ++i) {
      int64_t out = (spatial[i] + strides[i] - 1) / strides[i];
      int64_t total =
          std::max<int64_t>((out - 1) * strides[i] +
                                dilations[i] * (kernel[i] - 1) + 1 - spatial[i],
                            0);
      int64_t small = total / 2, big = total - small;
      pads[i] = autoPad == "SAME_UPPER" ? small : big;
      pads[n + i] = autoPad == "SAME_UPPER" ? big : small;
    }
  } else if (autoPad == "VALID") {
    std::fill(pads.begin(), pads.end(), 0);
  } else if (autoPad != "NOTSET") {
    return ctx.error() << "unknown auto_pad '" << autoPad << "'";
  }
  for (size_t i = 0; i < n; ++i) {
    int64_t padded;
    if (__builtin_add_overflow(spatial[i], pads[i], &padded) ||
        __builtin_add_overflow(padded, pads[n + i], &padded))
      return ctx.error() << "pads " << pads[i] << " and " << pads[n + i]
                         << " of spatial dimension " << i
                         << " do not fit in int64";
    // No output at all (ceil_mode's last window may start in the input and
    // overhang it).
    if (spatial[i] >= 0 && extent[i] - (w.ceil ? strides[i] - 1 : 0) > padded)
      return ctx.error() << "the window of spatial dimension " << i << " spans "
                         << extent[i] << " (kernel " << kernel[i]
                         << ", dilation " << dilations[i]
                         << "), more than the padded input's " << padded;
  }
  w.kernel.assign(kernel.begin(), kernel.end());
  w.strides = strides;
  w.dilations = dilations;
  w.pads = pads;
  return w;
}

FailureOr<Window> windowOf(NodeContext &ctx, ArrayRef<int64_t> spatial,
                           ArrayRef<int64_t> kernel) {
  FailureOr<Window> nd = windowNd(ctx, spatial, kernel);
  if (failed(nd))
    return failure();
  size_t n = spatial.size();
  Window w = *nd;
  SmallVector<int64_t> strides = nd->strides, dilations = nd->dilations,
                       pads = nd->pads;
  if (n == 1) {
    w.kernel = {1, kernel[0]};
    w.strides = {1, strides[0]};
    w.dilations = {1, dilations[0]};
    w.pads = {0, pads[0], 0, pads[1]};
  } else if (n != 2) {
    return ctx.error() << n << "-D windows are not supported (1-D and 2-D "
                       << "are)";
  }
  return w;
}

/// Views a rank-3 [N, C, W] value as [N, C, 1, W].
Value to4D(NodeContext &ctx, Value v) {
  auto s = NodeContext::typeOf(v).getShape();
  if (s.size() == 4)
    return v;
  return ctx.reshape(v, {s[0], s[1], 1, s[2]});
}

/// A 3-D convolution as kD 2-D ones: depth tap t reads, for each output
/// depth, input depth od * stride + t * dilation of the depth-padded input;
/// output depths join the batch for the 2-D convolution over (H, W), and
/// the taps' results add up. Exact, with gradients and sharding rules of
/// the ops it is made of.
LogicalResult conv3d(NodeContext &ctx, Value x, Value w, Value bias,
                     const Window &win) {
  auto xs = NodeContext::typeOf(x).getShape();
  auto ws = NodeContext::typeOf(w).getShape();
  Type f = NodeContext::typeOf(x).getElementType();
  int64_t padded = xs[2] + win.pads[0] + win.pads[3];
  int64_t span = padded - win.dilations[0] * (ws[2] - 1) - 1;
  if (span < 0)
    return ctx.error() << "the kernel is deeper than the padded input";
  int64_t depth = span / win.strides[0] + 1;
  // [N, C, D, H, W] -> [N, D + pads, C, H, W].
  TransposeOp::Properties perm;
  perm.permutation = ctx.b.getDenseI64ArrayAttr({0, 2, 1, 3, 4});
  FailureOr<TransposeOp> moved = ctx.create<TransposeOp>({x}, perm);
  if (failed(moved))
    return failure();
  Value xt = *moved;
  SmallVector<Value> parts;
  for (int64_t p : {win.pads[0], int64_t(-1), win.pads[3]}) {
    if (p < 0)
      parts.push_back(xt);
    else if (p > 0)
      parts.push_back(ctx.splat(f, {xs[0], p, xs[1], xs[3], xs[4]}, 0.0));
  }
  if (parts.size() > 1)
    xt = ConcatOp::create(
        ctx.b,
        NodeContext::typeOf(xt).clone({xs[0], padded, xs[1], xs[3], xs[4]}),
        parts, ctx.b.getI64IntegerAttr(1));
  Conv2DOp::Properties props;
  props.strides = ctx.b.getDenseI64ArrayAttr({win.strides[1], win.strides[2]});
  props.pads = ctx.b.getDenseI64ArrayAttr(
      {win.pads[1], win.pads[2], win.pads[4], win.pads[5]});
  props.dilations =
      ctx.b.getDenseI64ArrayAttr({win.dilations[1], win.dilations[2]});
  props.groups = ctx.b.getI64IntegerAttr(ctx.attrInt("group", 1));
  Value sum;
  for (int64_t t = 0; t < ws[2]; ++t) {
    auto sliceType =
        NodeContext::typeOf(xt).clone({xs[0], depth, xs[1], xs[3], xs[4]});
    Value taps = ctx.b.createOrFold<SliceOp>(
        sliceType, xt,
        ctx.b.getDenseI64ArrayAttr({0, t * win.dilations[0], 0, 0, 0}),
        ctx.b.getDenseI64ArrayAttr({1, win.strides[0], 1, 1, 1}));
    taps = ctx.reshape(taps, {xs[0] * depth, xs[1], xs[3], xs[4]});
    auto filterType =
        NodeContext::typeOf(w).clone({ws[0], ws[1], 1, ws[3], ws[4]});
    Value filter = ctx.b.createOrFold<SliceOp>(
        filterType, w, ctx.b.getDenseI64ArrayAttr({0, 0, t, 0, 0}),
        ctx.b.getDenseI64ArrayAttr({1, 1, 1, 1, 1}));
    filter = ctx.reshape(filter, {ws[0], ws[1], ws[3], ws[4]});
    FailureOr<Conv2DOp> conv = ctx.create<Conv2DOp>({taps, filter}, props);
    if (failed(conv))
      return failure();
    sum =
        sum ? AddOp::create(ctx.b, sum, *conv).getResult() : conv->getResult();
  }
  auto ys = NodeContext::typeOf(sum).getShape();
  Value y = ctx.reshape(sum, {xs[0], depth, ws[0], ys[2], ys[3]});
  FailureOr<TransposeOp> back = ctx.create<TransposeOp>({y}, perm);
  if (failed(back))
    return failure();
  y = *back;
  if (bias)
    y = AddOp::create(ctx.b, y, ctx.reshape(bias, {1, ws[0], 1, 1, 1}));
  ctx.setOutput(0, y);
  return success();
}

LogicalResult conv(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0), w = ctx.input(1);
  if (failed(x) || failed(w) || failed(requireFloat(ctx, *x)))
    return failure();
  auto xs = NodeContext::typeOf(*x).getShape();
  auto ws = NodeContext::typeOf(*w).getShape();
  if (xs.size() < 3 || ws.size() != xs.size())
    return ctx.error() << "input and weight must have one rank >= 3";
  SmallVector<int64_t> kernel(ws.drop_front(2));
  if (auto k = ctx.attrInts("kernel_shape"); k && *k != kernel)
    return ctx.error() << "kernel_shape does not match the weight";
  if (xs.size() == 5) {
    FailureOr<Window> nd = windowNd(ctx, xs.drop_front(2), kernel);
    FailureOr<Value> bias = ctx.optionalInput(2);
    if (failed(nd) || failed(bias))
      return failure();
    return conv3d(ctx, *x, *w, *bias, *nd);
  }
  FailureOr<Window> win = windowOf(ctx, xs.drop_front(2), kernel);
  if (failed(win))
    return failure();
  FailureOr<Value> biasIn = ctx.optionalInput(2);
  if (failed(biasIn))
    return failure();
  Value bias = *biasIn;
  SmallVector<Value> operands = {to4D(ctx, *x), to4D(ctx, *w)};
  if (bias)
    operands.push_back(bias);
  int64_t groups = ctx.attrInt("group", 1);
  Conv2DOp::Properties props;
  props.strides = ctx.b.getDenseI64ArrayAttr(win->strides);
  props.pads = ctx.b.getDenseI64ArrayAttr(win->pads);
  props.dilations = ctx.b.getDenseI64ArrayAttr(win->dilations);
  props.groups = ctx.b.getI64IntegerAttr(groups);
  FailureOr<Conv2DOp> conv = ctx.create<Conv2DOp>(operands, props);
  if (failed(conv))
    return failure();
  Value y = *conv;
  if (xs.size() == 3) {
    auto s = NodeContext::typeOf(y).getShape();
    y = ctx.reshape(y, {s[0], s[1], s[3]});
  }
  ctx.setOutput(0, y);
  return success();
}

/// ConvTranspose is the adjoint of a convolution in its input: the
/// dialect's conv2d_backward_input with X as the gradient and W as the
/// filter ([C, M / group, kH, kW] is conv2d's [F, C / groups, ...]), its
/// result sized by output_padding, output_shape or auto_pad.
LogicalResult convTranspose(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0), w = ctx.input(1);
  if (failed(x) || failed(w) || failed(requireFloat(ctx, *x)) ||
      failed(requireFloat(ctx, *w)))
    return failure();
  auto xs = NodeContext::typeOf(*x).getShape();
  auto ws = NodeContext::typeOf(*w).getShape();
  size_t n = xs.size() - 2;
  if (xs.size() < 3 || ws.size() != xs.size())
    return ctx.error() << "input and weight must have one rank >= 3";
  if (n > 2)
    return ctx.error() << n << "-D windows are not supported (1-D and 2-D "
                       << "are)";
  int64_t groups = ctx.attrInt("group", 1);
  if (groups < 1 || ws[0] != xs[1] || xs[1] % groups)
    return ctx.error() << "weight of type " << w->getType()
                       << " does not fit input of type " << x->getType()
                       << " in " << groups << " groups";
  auto get = [&](StringRef name, int64_t dflt, size_t count) {
    return ctx.attrInts(name).value_or(SmallVector<int64_t>(count, dflt));
  };
  SmallVector<int64_t> strides = get("strides", 1, n);
  SmallVector<int64_t> dilations = get("dilations", 1, n);
  SmallVector<int64_t> pads = get("pads", 0, 2 * n);
  SmallVector<int64_t> extra = get("output_padding", 0, n);
  std::optional<SmallVector<int64_t>> outShape = ctx.attrInts("output_shape");
  if (strides.size() != n || dilations.size() != n || pads.size() != 2 * n ||
      extra.size() != n || (outShape && outShape->size() != n))
    return ctx.error() << "strides, dilations, pads, output_padding or "
                          "output_shape do not match "
                       << n << " spatial dimensions";
  if (failed(checkWindow(ctx, ws.drop_front(2), strides, dilations, pads)))
    return failure();
  std::string autoPad = ctx.attrString("auto_pad", "NOTSET");
  if (autoPad != "NOTSET" && autoPad != "VALID" && autoPad != "SAME_UPPER" &&
      autoPad != "SAME_LOWER")
    return ctx.error() << "unknown auto_pad '" << autoPad << "'";
  SmallVector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t kernel = (ws[2 + i] - 1) * dilations[i] + 1;
    int64_t full = strides[i] * (xs[2 + i] - 1) + extra[i] + kernel;
    if (outShape || autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
      // The pads that give the asked size (the input's times the stride
      // under auto_pad); SAME_UPPER puts the odd one at the end.
      // A size beyond the full one adds rows at the end, as output_padding.
      out[i] = outShape ? (*outShape)[i] : xs[2 + i] * strides[i];
      int64_t total = std::max<int64_t>(full - out[i], 0);
      bool upper = autoPad != "SAME_LOWER";
      pads[i] = upper ? total / 2 : total - total / 2;
      pads[n + i] = total - pads[i];
    } else {
      if (autoPad == "VALID")
        pads[i] = pads[n + i] = 0;
      out[i] = full - pads[i] - pads[n + i];
    }
    // Every output row must map back into X: the convolution this is the
    // adjoint of takes the result to X's size.
    int64_t span = out[i] + pads[i] + pads[n + i] - kernel;
    if (out[i] < 1 || extra[i] < 0 || span < 0 ||
        span / strides[i] + 1 != xs[2 + i])
      return ctx.error() << "spatial dim " << i << " gets size " << out[i]
                         << ", which does not map back onto the input's "
                         << xs[2 + i] << " (output_padding must be below "
                         << "the stride)";
  }
  SmallVector<int64_t> k2 = {1, ws[2]}, s2 = {1, strides[0]},
                       d2 = {1, dilations[0]}, p2 = {0, pads[0], 0, pads[1]},
                       o2 = {1, out[0]};
  if (n == 2) {
    k2 = {ws[2], ws[3]};
    s2 = strides;
    d2 = dilations;
    p2 = pads;
    o2 = out;
  }
  int64_t channels = ws[1] * groups;
  auto type = NodeContext::typeOf(*x).clone({xs[0], channels, o2[0], o2[1]});
  Value y = Conv2DBackwardInputOp::create(
      ctx.b, type, to4D(ctx, *x), to4D(ctx, *w), ctx.b.getDenseI64ArrayAttr(s2),
      ctx.b.getDenseI64ArrayAttr(p2), ctx.b.getDenseI64ArrayAttr(d2),
      ctx.b.getI64IntegerAttr(groups));
  if (ctx.hasInput(2)) {
    FailureOr<Value> bias = ctx.input(2);
    if (failed(bias))
      return failure();
    if (bias->getType() !=
        RankedTensorType::get({channels}, type.getElementType()))
      return ctx.error() << "B must hold one value per output channel";
    y = AddOp::create(ctx.b, y, ctx.reshape(*bias, {1, channels, 1, 1}));
  }
  if (n == 1)
    y = ctx.reshape(y, {xs[0], channels, out[0]});
  ctx.setOutput(0, y);
  return success();
}

/// Output extent of a pooling window sweep (see CleaveOps.cpp).
int64_t poolOutput(int64_t size, int64_t pb, int64_t pe, int64_t k, int64_t s,
                   int64_t d, bool ceil) {
  int64_t span = size + pb + pe - d * (k - 1) - 1;
  if (span < 0)
    return 0;
  int64_t out = (ceil ? (span + s - 1) / s : span / s) + 1;
  if (ceil && (out - 1) * s >= size + pb)
    --out;
  return out;
}

/// One 2-D pooling op over a rank-4 value.
template <bool IsMax>
Value pool2d(NodeContext &ctx, Value in, ArrayRef<int64_t> kernel,
             ArrayRef<int64_t> strides, ArrayRef<int64_t> pads,
             ArrayRef<int64_t> dilations, bool ceil) {
  auto s4 = NodeContext::typeOf(in).getShape();
  int64_t oh = poolOutput(s4[2], pads[0], pads[2], kernel[0], strides[0],
                          dilations[0], ceil);
  int64_t ow = poolOutput(s4[3], pads[1], pads[3], kernel[1], strides[1],
                          dilations[1], ceil);
  auto type = NodeContext::typeOf(in).clone({s4[0], s4[1], oh, ow});
  auto k = ctx.b.getDenseI64ArrayAttr(kernel);
  auto st = ctx.b.getDenseI64ArrayAttr(strides);
  auto p = ctx.b.getDenseI64ArrayAttr(pads);
  auto d = ctx.b.getDenseI64ArrayAttr(dilations);
  if constexpr (IsMax)
    return MaxPool2DOp::create(ctx.b, type, in, k, st, p, d);
  return AvgPool2DOp::create(ctx.b, type, in, k, st, p, d,
                             ctx.attrInt("count_include_pad", 0) != 0);
}

/// 3-D pooling as two 2-D pools: over (H, W) with D folded into channels,
/// then over D with H*W as the last dim. Exact for max, and for average
/// because a box window's element count is the product of its per-dimension
/// counts (padding and ceil-mode clipping included).
template <bool IsMax> LogicalResult pool3d(NodeContext &ctx, Value x) {
  auto xs = NodeContext::typeOf(x).getShape();
  auto kernel = *ctx.attrInts("kernel_shape");
  auto get = [&](StringRef name, int64_t dflt, size_t count) {
    return ctx.attrInts(name).value_or(SmallVector<int64_t>(count, dflt));
  };
  SmallVector<int64_t> strides = get("strides", 1, 3);
  SmallVector<int64_t> dilations = get("dilations", 1, 3);
  SmallVector<int64_t> pads = get("pads", 0, 6);
  std::string autoPad = ctx.attrString("auto_pad", "NOTSET");
  if (autoPad != "NOTSET" && autoPad != "VALID")
    return ctx.error() << "auto_pad '" << autoPad
                       << "' is not supported for 3-D pooling";
  if (autoPad == "VALID")
    std::fill(pads.begin(), pads.end(), 0);
  if (strides.size() != 3 || dilations.size() != 3 || pads.size() != 6)
    return ctx.error() << "strides, dilations or pads do not match 3 "
                          "spatial dimensions";
  if (failed(checkWindow(ctx, kernel, strides, dilations, pads)))
    return failure();
  bool ceil = ctx.attrInt("ceil_mode", 0) != 0;
  Value hw = ctx.reshape(x, {xs[0], xs[1] * xs[2], xs[3], xs[4]});
  hw = pool2d<IsMax>(ctx, hw, {kernel[1], kernel[2]}, {strides[1], strides[2]},
                     {pads[1], pads[2], pads[4], pads[5]},
                     {dilations[1], dilations[2]}, ceil);
  auto hs = NodeContext::typeOf(hw).getShape();
  Value d = ctx.reshape(hw, {xs[0], xs[1], xs[2], hs[2] * hs[3]});
  d = pool2d<IsMax>(ctx, d, {kernel[0], 1}, {strides[0], 1},
                    {pads[0], 0, pads[3], 0}, {dilations[0], 1}, ceil);
  auto ds = NodeContext::typeOf(d).getShape();
  ctx.setOutput(0, ctx.reshape(d, {xs[0], xs[1], ds[2], hs[2], hs[3]}));
  return success();
}

template <bool IsMax> LogicalResult pool(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  // MaxPool of int8 and uint8 (which compute in i32): the maximum in f32,
  // exact for every such value.
  Type integer = NodeContext::typeOf(*x).getElementType();
  if (IsMax && integer.isInteger(32) && NodeContext::typeOf(*x).getRank() < 5) {
    x = ctx.b.createOrFold<CastOp>(
        NodeContext::typeOf(*x).clone(ctx.b.getF32Type()), *x);
  } else {
    integer = {};
    if (failed(requireFloat(ctx, *x)))
      return failure();
  }
  if (IsMax && ctx.hasOutput(1))
    return ctx.error() << "the Indices output of MaxPool is not supported";
  auto xs = NodeContext::typeOf(*x).getShape();
  if (xs.size() < 3)
    return ctx.error() << "input must have rank >= 3";
  auto kernel = ctx.attrInts("kernel_shape");
  if (!kernel || kernel->size() != xs.size() - 2)
    return ctx.error() << "kernel_shape must give one size per spatial dim";
  if (xs.size() == 5)
    return pool3d<IsMax>(ctx, *x);
  FailureOr<Window> win = windowOf(ctx, xs.drop_front(2), *kernel);
  if (failed(win))
    return failure();
  Value in = to4D(ctx, *x);
  Value y = pool2d<IsMax>(ctx, in, win->kernel, win->strides, win->pads,
                          win->dilations, win->ceil);
  if (xs.size() == 3) {
    auto s = NodeContext::typeOf(y).getShape();
    y = ctx.reshape(y, {s[0], s[1], s[3]});
  }
  if (integer)
    y = ctx.b.createOrFold<CastOp>(NodeContext::typeOf(y).clone(integer), y);
  if (integer)
    y = ctx.b.createOrFold<CastOp>(NodeContext::typeOf(y).clone(integer), y);
  ctx.setOutput(0, y);
  return success();
}

template <ReduceKind K> LogicalResult globalPool(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x) || failed(requireFloat(ctx, *x)))
    return failure();
  int64_t rank = NodeContext::rankOf(*x);
  if (rank < 3)
    return ctx.error() << "input must have rank >= 3";
  SmallVector<int64_t> dims;
  for (int64_t i = 2; i < rank; ++i)
    dims.push_back(i);
  ctx.setOutput(0, ReduceOp::create(ctx.b, K, *x,
                                    ctx.b.getDenseI64ArrayAttr(dims), true));
  return success();
}

} // namespace

void onnx_import::registerNeuralHandlers(HandlerTable &t) {
  t.on("MatMul", 1, matmul);
  // Gemm before 7 broadcast C only with broadcast = 1; numpy's
  // unidirectional rule accepts exactly those shapes and the equal ones.
  t.on("Gemm", 1, gemm);
  t.on("Einsum", 12, einsum);
  t.on("Softmax", 1, softmax1<SoftmaxOp>);
  t.on("Softmax", 13, softmax13<SoftmaxOp>);
  t.on("LogSoftmax", 1, softmax1<LogSoftmaxOp>);
  t.on("LogSoftmax", 13, softmax13<LogSoftmaxOp>);
  t.on("ReduceMean", 1, reduceAttr<ReduceKind::mean>);
  t.on("ReduceMean", 18, reduceInput<ReduceKind::mean>);
  t.on("ReduceMax", 1, reduceAttr<ReduceKind::max>);
  t.on("ReduceMax", 18, reduceInput<ReduceKind::max>);
  t.on("ReduceMin", 1, reduceAttr<ReduceKind::min>);
  t.on("ReduceMin", 18, reduceInput<ReduceKind::min>);
  t.on("ReduceProd", 1, reduceAttr<ReduceKind::prod>);
  t.on("ReduceProd", 18, reduceInput<ReduceKind::prod>);
  t.on("ReduceSum", 1, reduceAttr<ReduceKind::sum>);
  t.on("ReduceSum", 13, reduceInput<ReduceKind::sum>);
  t.on("ArgMax", 1, argExtreme<true>);
  t.on("ArgMin", 1, argExtreme<false>);
  t.on("Hardmax", 1, hardmax<true>);
  t.on("Hardmax", 13, hardmax<false>);
  using RF = ReduceForm;
  t.on("ReduceSumSquare", 1, reduceAttr<ReduceKind::sum, RF::SumSquare>);
  t.on("ReduceSumSquare", 18, reduceInput<ReduceKind::sum, RF::SumSquare>);
  t.on("ReduceL1", 1, reduceAttr<ReduceKind::sum, RF::L1>);
  t.on("ReduceL1", 18, reduceInput<ReduceKind::sum, RF::L1>);
  t.on("ReduceL2", 1, reduceAttr<ReduceKind::sum, RF::L2>);
  t.on("ReduceL2", 18, reduceInput<ReduceKind::sum, RF::L2>);
  t.on("ReduceLogSum", 1, reduceAttr<ReduceKind::sum, RF::LogSum>);
  t.on("ReduceLogSum", 18, reduceInput<ReduceKind::sum, RF::LogSum>);
  t.on("ReduceLogSumExp", 1, reduceAttr<ReduceKind::sum, RF::LogSumExp>);
  t.on("ReduceLogSumExp", 18, reduceInput<ReduceKind::sum, RF::LogSumExp>);
  t.on("LayerNormalization", 17, layerNorm);
  t.on("SoftmaxCrossEntropyLoss", 12, crossEntropyLoss<false>);
  t.on("NegativeLogLikelihoodLoss", 12, crossEntropyLoss<true>);
  t.on("BatchNormalization", 1, batchNorm);
  t.on("InstanceNormalization", 1, instanceNorm);
  t.on("LRN", 1, lrn);
  t.on("MeanVarianceNormalization", 9, meanVarianceNorm);
  t.on("Conv", 1, conv);
  t.on("ConvTranspose", 1, convTranspose);
  t.on("MaxPool", 1, pool<true>);
  t.on("AveragePool", 1, pool<false>);
  t.on("GlobalAveragePool", 1, globalPool<ReduceKind::mean>);
  t.on("GlobalMaxPool", 1, globalPool<ReduceKind::max>);
}

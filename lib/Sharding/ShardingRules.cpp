//===- ShardingRules.cpp - Factor rules of the cleave ops -------*- C++ -*-===//
//
// ShardingRuleOpInterface models: each op as an einsum over factors, with
// the forms and roles (ShardingRule.h) an einsum cannot state. The
// partitioner, the layout search and the sharding passes never switch on
// op kinds (test/contract/sharding-op-names.test); a new op becomes
// shardable by registering its rule here.
//
//===----------------------------------------------------------------------===//

#include "Cleave/CleaveInterfaces.h"
#include "Cleave/CleaveOps.h"
#include "cleave/Sharding/Sharding.h"

using namespace mlir;
using namespace mlir::cleave;

namespace {

using Kind = ShardingFactor::Kind;

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

/// Starts a rule for \p op with no factors and no linearity.
ShardingRule emptyRule(Operation *op) {
  ShardingRule rule;
  rule.scalingOperands.assign(op->getNumOperands(), false);
  return rule;
}

/// Adds a factor; dims default to -1 (absent).
ShardingFactor &addFactor(ShardingRule &rule, Operation *op, int64_t size,
                          Kind kind = Kind::Parallel) {
  ShardingFactor f;
  f.size = size;
  f.kind = kind;
  f.operandDims.assign(op->getNumOperands(), -1);
  f.resultDims.assign(op->getNumResults(), -1);
  rule.factors.push_back(f);
  return rule.factors.back();
}

/// One factor per result dimension; an operand carries it unless it is
/// broadcast (size 1) there. Ranks are equal by the dialect's rules.
void elementwise(Operation *op, ShardingRule &rule) {
  ArrayRef<int64_t> out = shapeOf(op->getResult(0));
  for (size_t d = 0; d < out.size(); ++d) {
    ShardingFactor &f = addFactor(rule, op, out[d]);
    for (auto [i, v] : llvm::enumerate(op->getOperands())) {
      ArrayRef<int64_t> s = shapeOf(v);
      if (s.size() == out.size() && s[d] == out[d])
        f.operandDims[i] = d;
    }
    for (unsigned r = 0; r < op->getNumResults(); ++r)
      f.resultDims[r] = d;
  }
}

/// A factor per dimension of operand 0 and result 0, identity mapped.
void identity(Operation *op, ShardingRule &rule) {
  ArrayRef<int64_t> in = shapeOf(op->getOperand(0));
  for (size_t d = 0; d < in.size(); ++d) {
    ShardingFactor &f = addFactor(rule, op, in[d]);
    f.operandDims[0] = d;
    f.resultDims[0] = d;
  }
}

template <typename OpTy> LogicalResult rule(OpTy op, ShardingRule &rule);

template <typename OpTy>
struct Model
    : public ShardingRuleOpInterface::ExternalModel<Model<OpTy>, OpTy> {
  LogicalResult getShardingRule(Operation *op, ShardingRule &r) const {
    r = emptyRule(op);
    return rule(cast<OpTy>(op), r);
  }
};

// Elementwise ops, by linearity.
#define CLEAVE_ELEMENTWISE_RULE(OP, LINEARITY)                                 \
  template <> LogicalResult rule(OP op, ShardingRule &r) {                     \
    elementwise(op, r);                                                        \
    LINEARITY;                                                                 \
    return success();                                                          \
  }
CLEAVE_ELEMENTWISE_RULE(AddOp, r.additive = true; r.padFlow = PadFlow::Sums)
CLEAVE_ELEMENTWISE_RULE(SubOp, r.additive = true; r.padFlow = PadFlow::Sums)
CLEAVE_ELEMENTWISE_RULE(MulOp, r.scalingOperands.assign(2, true);
                        r.padFlow = PadFlow::Product)
CLEAVE_ELEMENTWISE_RULE(DivOp, r.scalingOperands[0] = true)
CLEAVE_ELEMENTWISE_RULE(NegOp, r.scalingOperands[0] = true;
                        r.padFlow = PadFlow::Moves)
#undef CLEAVE_ELEMENTWISE_RULE

template <typename OpTy> LogicalResult nonlinearRule(OpTy op, ShardingRule &r) {
  elementwise(op, r);
  return success();
}

} // namespace

static bool isWidenedHalfProduct(Value v) {
  auto widen = v.getDefiningOp<CastOp>();
  if (!widen || !widen.getType().getElementType().isF32())
    return false;
  Type from =
      cast<RankedTensorType>(widen.getInput().getType()).getElementType();
  return (from.isBF16() || from.isF16()) &&
         isProductOp(widen.getInput().getDefiningOp());
}

bool mlir::cleave::isSumOfHalfProducts(Value v) {
  // Iterative: a gradient may sum hundreds of contributions.
  SmallVector<Value> pending{v};
  while (!pending.empty()) {
    Value x = pending.pop_back_val();
    if (isWidenedHalfProduct(x))
      continue;
    Operation *def = x.getDefiningOp();
    if (!isa_and_present<AddOp, SubOp>(def))
      return false;
    llvm::append_range(pending, def->getOperands());
  }
  return true;
}

namespace {

template <> LogicalResult rule(CastOp op, ShardingRule &r) {
  elementwise(op, r);
  r.movesOperand = true;
  // Widening is exact, so a partial sum may pass it; it does where the
  // widened product is summed with other products (mixed precision's
  // backward: an input's gradient from q, k and v, reduced once as
  // Megatron's fused QKV does). A product read by anything else (the
  // forward's residual add) is reduced in bf16 at the product, before it
  // meets an f32 value; narrowing rounds, and stops a partial too.
  Value widened = op.getResult();
  bool summed = isWidenedHalfProduct(widened) && !widened.use_empty() &&
                llvm::all_of(widened.getUsers(), [](Operation *user) {
                  return isa<AddOp, SubOp>(user) &&
                         llvm::all_of(user->getOperands(), isSumOfHalfProducts);
                });
  if (summed) {
    r.scalingOperands[0] = true;
    r.padFlow = PadFlow::Moves;
  }
  return success();
}

template <> LogicalResult rule(MatmulOp op, ShardingRule &r) {
  ArrayRef<int64_t> a = shapeOf(op.getLhs()), b = shapeOf(op.getRhs()),
                    c = shapeOf(op.getResult());
  int64_t rank = c.size();
  bool ta = op.getTransposeLhs(), tb = op.getTransposeRhs();
  for (int64_t d = 0; d + 2 < rank; ++d) {
    ShardingFactor &f = addFactor(r, op, c[d]);
    f.operandDims = {a[d] == c[d] ? d : -1, b[d] == c[d] ? d : -1};
    f.resultDims = {d};
  }
  int64_t m = rank - 2, n = rank - 1;
  // Logical A [.., m, k] is A read transposed when ta.
  ShardingFactor &fm = addFactor(r, op, c[m]);
  fm.operandDims = {ta ? n : m, -1};
  fm.resultDims = {m};
  ShardingFactor &fn = addFactor(r, op, c[n]);
  fn.operandDims = {-1, tb ? m : n};
  fn.resultDims = {n};
  ShardingFactor &fk = addFactor(r, op, ta ? a[m] : a[n], Kind::Reduction);
  fk.operandDims = {ta ? m : n, tb ? n : m};
  r.scalingOperands = {true, true};
  r.contraction = true;
  r.padFlow = PadFlow::Product;
  return success();
}

template <> LogicalResult rule(ReduceOp op, ShardingRule &r) {
  ArrayRef<int64_t> in = shapeOf(op.getInput());
  ArrayRef<int64_t> dims = op.getDims();
  int64_t out = 0;
  for (int64_t d = 0; d < static_cast<int64_t>(in.size()); ++d) {
    bool reduced = llvm::is_contained(dims, d);
    Kind kind = Kind::Parallel;
    ReduceKind combine = ReduceKind::sum;
    if (reduced) {
      switch (op.getKind()) {
      case ReduceKind::sum:
      case ReduceKind::mean: // the partitioner scales each rank's share
        kind = Kind::Reduction;
        break;
      case ReduceKind::max:
      case ReduceKind::min:
        kind = Kind::Reduction;
        combine = op.getKind();
        break;
      default: // a product of a split dim needs more than one collective
        kind = Kind::Whole;
      }
    }
    ShardingFactor &f = addFactor(r, op, in[d], kind);
    f.combine = combine;
    f.operandDims[0] = d;
    if (!reduced)
      f.resultDims[0] = out;
    if (!reduced || op.getKeepDims())
      ++out;
  }
  r.scalingOperands[0] =
      op.getKind() == ReduceKind::sum || op.getKind() == ReduceKind::mean;
  r.mean = op.getKind() == ReduceKind::mean;
  return success();
}

template <typename OpTy> LogicalResult softmaxRule(OpTy op, ShardingRule &r) {
  identity(op, r);
  r.factors[op.getAxis()].kind = Kind::Whole;
  return success();
}
template <> LogicalResult rule(SoftmaxOp op, ShardingRule &r) {
  return softmaxRule(op, r);
}
template <> LogicalResult rule(LogSoftmaxOp op, ShardingRule &r) {
  return softmaxRule(op, r);
}

/// Attention and its backward: batch and heads split freely (every head is
/// independent); the sequence and head dims are whole, the softmax and its
/// causal mask needing every key and the query's absolute position. Query
/// heads split with their key heads when there are as many, or alone when
/// there is one key head (multi-query); other groupings stay whole. The
/// operands and results that have q's batch, heads and rows (with a last
/// dim: likeQuery, resultLikeQuery; without: the log-sum-exp, rowOperands,
/// resultRows) and those with k's (likeKey, resultLikeKey).
template <typename OpTy>
LogicalResult
attentionRule(OpTy op, ShardingRule &r, Value bias, ArrayRef<int> likeQuery,
              ArrayRef<int> rowOperands, ArrayRef<int> likeKey,
              ArrayRef<int> resultLikeQuery, ArrayRef<int> resultLikeKey,
              ArrayRef<int> resultRows) {
  ArrayRef<int64_t> q = shapeOf(op.getQuery()), k = shapeOf(op.getKey()),
                    v = shapeOf(op.getValue());
  int biasAt = -1;
  if (bias)
    biasAt = static_cast<int>(op->getNumOperands()) - 1;
  ArrayRef<int64_t> b = bias ? shapeOf(bias) : ArrayRef<int64_t>();
  bool sameHeads = q[1] == k[1];
  // One key/value head for all (multi-query): the query heads split and
  // every rank reads the one K/V head, as a matmul broadcasts it.
  // (The backward's gradient of that head would be a sum over the split
  // heads: its rule keeps them whole, and the differentiation rule hands
  // it the K/V head repeated instead.)
  bool oneHead = k[1] == 1 && resultLikeKey.empty();
  for (int64_t d = 0; d < 2; ++d) {
    Kind kind = d == 0 || sameHeads || oneHead ? Kind::Parallel : Kind::Whole;
    ShardingFactor &f = addFactor(r, op, q[d], kind);
    for (int i : llvm::concat<const int>(likeQuery, rowOperands))
      f.operandDims[i] = d;
    for (int i : resultLikeQuery)
      f.resultDims[i] = d;
    for (int i : resultRows)
      f.resultDims[i] = d;
    if (biasAt >= 0 && b[d] != 1)
      f.operandDims[biasAt] = d;
    if (d == 0 || sameHeads) {
      for (int i : likeKey)
        f.operandDims[i] = d;
      for (int i : resultLikeKey)
        f.resultDims[i] = d;
    } else if (oneHead) {
      // The K/V head is read whole by every rank.
    } else {
      ShardingFactor &g = addFactor(r, op, k[d], Kind::Whole);
      for (int i : likeKey)
        g.operandDims[i] = d;
      for (int i : resultLikeKey)
        g.resultDims[i] = d;
    }
  }
  // Query rows, key rows, and the head dims of q/k and of v.
  ShardingFactor &rows = addFactor(r, op, q[2], Kind::Whole);
  for (int i : llvm::concat<const int>(likeQuery, rowOperands))
    rows.operandDims[i] = 2;
  for (int i : resultLikeQuery)
    rows.resultDims[i] = 2;
  for (int i : resultRows)
    rows.resultDims[i] = 2;
  if (biasAt >= 0 && b[2] != 1)
    rows.operandDims[biasAt] = 2;
  ShardingFactor &keys = addFactor(r, op, k[2], Kind::Whole);
  for (int i : likeKey)
    keys.operandDims[i] = 2;
  for (int i : resultLikeKey)
    keys.resultDims[i] = 2;
  if (biasAt >= 0 && b[3] != 1)
    keys.operandDims[biasAt] = 3;
  return success();
}

/// cross_entropy and its backward: every dim but the class axis parallel
/// throughout; the class axis carried by the logits and class ids (and the
/// backward's result). Its split forward leaves both sums partial, to be
/// all-reduced: Megatron's vocab-parallel loss. Padding classes must add
/// nothing: -inf logits, class ids no label equals.
template <typename OpTy>
LogicalResult crossEntropyRule(OpTy op, ShardingRule &r, bool backward) {
  ArrayRef<int64_t> x = shapeOf(op.getLogits());
  int64_t axis = op.getAxis();
  for (int64_t d = 0; d < static_cast<int64_t>(x.size()); ++d) {
    if (d == axis) {
      ShardingFactor &f =
          addFactor(r, op, x[d], backward ? Kind::Parallel : Kind::Reduction);
      f.operandDims[0] = f.operandDims[2] = d;
      if (backward) {
        f.resultDims[0] = d;
      } else {
        f.operandPads.assign(op->getNumOperands(), std::nullopt);
        f.operandPads[0] = ReduceKind::max;
        f.operandPads[2] = ReduceKind::min;
      }
      continue;
    }
    ShardingFactor &f = addFactor(r, op, x[d]);
    for (unsigned i = 0; i < op->getNumOperands(); ++i)
      if (i != 2)
        f.operandDims[i] = d;
    for (unsigned i = 0; i < op->getNumResults(); ++i)
      f.resultDims[i] = d;
  }
  return success();
}

template <> LogicalResult rule(CrossEntropyOp op, ShardingRule &r) {
  return crossEntropyRule(op, r, false);
}
template <> LogicalResult rule(CrossEntropyBackwardOp op, ShardingRule &r) {
  return crossEntropyRule(op, r, true);
}

template <> LogicalResult rule(AttentionOp op, ShardingRule &r) {
  if (failed(attentionRule(op, r, op.getBias(), {0}, {}, {1, 2}, {0}, {}, {1})))
    return failure();
  // Head dims: D (q, k) and Dv (v, out).
  ShardingFactor &d = addFactor(r, op, shapeOf(op.getQuery())[3], Kind::Whole);
  d.operandDims[0] = d.operandDims[1] = 3;
  ShardingFactor &dv = addFactor(r, op, shapeOf(op.getValue())[3], Kind::Whole);
  dv.operandDims[2] = 3;
  dv.resultDims[0] = 3;
  return success();
}

template <> LogicalResult rule(AttentionBackwardOp op, ShardingRule &r) {
  // Operands q, k, v, out, lse, dout (bias); results dq, dk, dv.
  if (failed(attentionRule(op, r, op.getBias(), {0, 3, 5}, {4}, {1, 2}, {0},
                           {1, 2}, {})))
    return failure();
  ShardingFactor &d = addFactor(r, op, shapeOf(op.getQuery())[3], Kind::Whole);
  d.operandDims[0] = d.operandDims[1] = 3;
  d.resultDims[0] = d.resultDims[1] = 3;
  ShardingFactor &dv = addFactor(r, op, shapeOf(op.getValue())[3], Kind::Whole);
  dv.operandDims[2] = dv.operandDims[3] = dv.operandDims[5] = 3;
  dv.resultDims[2] = 3;
  return success();
}

template <> LogicalResult rule(LayerNormOp op, ShardingRule &r) {
  ArrayRef<int64_t> in = shapeOf(op.getInput());
  int64_t axis = op.getAxis();
  for (int64_t d = 0; d < static_cast<int64_t>(in.size()); ++d) {
    ShardingFactor &f =
        addFactor(r, op, in[d], d >= axis ? Kind::Whole : Kind::Parallel);
    f.operandDims[0] = d;
    for (unsigned i = 1; i < op->getNumOperands(); ++i)
      f.operandDims[i] = d >= axis ? d - axis : -1;
    f.resultDims = {d, d < axis ? d : -1, d < axis ? d : -1};
  }
  return success();
}

/// layer_norm_backward(input, mean, inv_std_dev, grad, scale?) ->
/// (grad_input, grad_scale, grad_bias): the rows as layer_norm's, and the
/// scale's and bias's gradients sum over them (a split of the rows, by data
/// or sequence parallelism, leaves them partial).
template <> LogicalResult rule(LayerNormBackwardOp op, ShardingRule &r) {
  ArrayRef<int64_t> in = shapeOf(op.getInput());
  int64_t axis = op.getAxis();
  for (int64_t d = 0; d < static_cast<int64_t>(in.size()); ++d) {
    bool norm = d >= axis;
    ShardingFactor &f =
        addFactor(r, op, in[d], norm ? Kind::Whole : Kind::Reduction);
    f.operandDims[0] = f.operandDims[3] = d;
    f.operandDims[1] = f.operandDims[2] = norm ? -1 : d;
    if (op.getScale())
      f.operandDims[4] = norm ? d - axis : -1;
    f.resultDims = {d, norm ? d - axis : -1, norm ? d - axis : -1};
  }
  // Linear in grad: a partial incoming gradient (a column-parallel
  // product's input gradient) gives partial gradients, reduced once later.
  r.scalingOperands[3] = true;
  return success();
}

template <> LogicalResult rule(BatchNormOp op, ShardingRule &r) {
  ArrayRef<int64_t> in = shapeOf(op.getInput());
  for (int64_t d = 0; d < static_cast<int64_t>(in.size()); ++d) {
    ShardingFactor &f = addFactor(r, op, in[d]);
    f.operandDims[0] = d;
    if (d == 1)
      for (unsigned i = 1; i < 5; ++i)
        f.operandDims[i] = 0;
    f.resultDims[0] = d;
  }
  return success();
}

template <> LogicalResult rule(TransposeOp op, ShardingRule &r) {
  ArrayRef<int64_t> in = shapeOf(op.getInput());
  ArrayRef<int64_t> perm = op.getPermutation();
  for (int64_t d = 0; d < static_cast<int64_t>(in.size()); ++d) {
    ShardingFactor &f = addFactor(r, op, in[d]);
    f.operandDims[0] = d;
    f.resultDims[0] = llvm::find(perm, d) - perm.begin();
  }
  r.scalingOperands[0] = true;
  r.movesOperand = true;
  r.padFlow = PadFlow::Moves;
  return success();
}

template <> LogicalResult rule(BroadcastOp op, ShardingRule &r) {
  elementwise(op, r);
  r.scalingOperands[0] = true;
  r.movesOperand = true;
  return success();
}

/// No factors: a reshape's index map regroups dimensions, which the
/// partitioner follows from the two shapes (ShardingForm::Regroup). A
/// partial sum passes through it.
template <> LogicalResult rule(ReshapeOp op, ShardingRule &r) {
  r.form = ShardingForm::Regroup;
  r.scalingOperands[0] = true;
  r.movesOperand = true;
  return success();
}

template <> LogicalResult rule(ConcatOp op, ShardingRule &r) {
  identity(op, r);
  for (auto [i, v] : llvm::enumerate(op.getInputs()))
    for (ShardingFactor &f : r.factors)
      f.operandDims[i] = f.operandDims[0];
  r.factors[op.getAxis()].kind = Kind::Whole;
  r.additive = true;
  r.form = ShardingForm::Join;
  r.joinDim = op.getAxis();
  r.padFlow = PadFlow::Sums;
  return success();
}

/// slice / slice_scatter: a dimension that is not taken whole must not be
/// split (each rank would need a different window), except in whole blocks
/// of a blocked split (ShardingForm::Window).
template <typename OpTy>
LogicalResult windowRule(OpTy op, ShardingRule &r, bool takes) {
  identity(op, r);
  ArrayRef<int64_t> in = shapeOf(op.getInput()), out = shapeOf(op.getResult());
  for (size_t d = 0; d < in.size(); ++d)
    if (in[d] != out[d] || op.getStarts()[d] != 0 || op.getSteps()[d] != 1)
      r.factors[d].kind = Kind::Whole;
  r.scalingOperands[0] = true;
  r.form = ShardingForm::Window;
  ShardingWindow &w = r.window.emplace();
  w.takes = takes;
  w.starts.assign(op.getStarts().begin(), op.getStarts().end());
  w.steps.assign(op.getSteps().begin(), op.getSteps().end());
  w.startsAttr = op.getStartsAttrName().getValue();
  // A slice of zeros is zeros; a slice_scatter's untouched result is too.
  r.padFlow = takes ? PadFlow::Moves : PadFlow::None;
  return success();
}
template <> LogicalResult rule(SliceOp op, ShardingRule &r) {
  return windowRule(op, r, /*takes=*/true);
}
template <> LogicalResult rule(SliceScatterOp op, ShardingRule &r) {
  return windowRule(op, r, /*takes=*/false);
}

template <> LogicalResult rule(GatherOp op, ShardingRule &r) {
  ArrayRef<int64_t> data = shapeOf(op.getData()),
                    idx = shapeOf(op.getIndices());
  int64_t axis = op.getAxis(), out = 0;
  for (int64_t d = 0; d < static_cast<int64_t>(data.size()); ++d) {
    if (d == axis) {
      // A table split along the gathered axis (vocab-parallel embedding):
      // each rank looks up the ids in its range, zeros elsewhere, and the
      // sum over ranks is the lookup.
      addFactor(r, op, data[d], Kind::Reduction).operandDims[0] = d;
      for (int64_t j = 0; j < static_cast<int64_t>(idx.size()); ++j) {
        ShardingFactor &f = addFactor(r, op, idx[j]);
        f.operandDims[1] = j;
        f.resultDims[0] = out++;
      }
      continue;
    }
    ShardingFactor &f = addFactor(r, op, data[d]);
    f.operandDims[0] = d;
    f.resultDims[0] = out++;
  }
  r.lookup = ShardingLookup{axis, /*intoResult=*/false};
  return success();
}

template <> LogicalResult rule(ScatterAddOp op, ShardingRule &r) {
  ArrayRef<int64_t> data = shapeOf(op.getResult()),
                    idx = shapeOf(op.getIndices());
  int64_t axis = op.getAxis(), upd = 0;
  for (int64_t d = 0; d < static_cast<int64_t>(data.size()); ++d) {
    if (d == axis) {
      // Each rank may keep only the rows of its range of the result.
      addFactor(r, op, data[d]).resultDims[0] = d;
      // Updates split along the index dims scatter disjoint parts: the sum
      // of the ranks' results is the result.
      for (int64_t j = 0; j < static_cast<int64_t>(idx.size()); ++j) {
        ShardingFactor &f = addFactor(r, op, idx[j], Kind::Reduction);
        f.operandDims = {upd++, j};
      }
      continue;
    }
    ShardingFactor &f = addFactor(r, op, data[d]);
    f.operandDims[0] = upd++;
    f.resultDims[0] = d;
  }
  r.scalingOperands[0] = true;
  r.lookup = ShardingLookup{axis, /*intoResult=*/true};
  r.padFlow = PadFlow::Always; // rows no index names stay zero
  return success();
}

/// NCHW window ops: batch (and, for pools, channels) parallel; spatial dims
/// whole.
template <typename OpTy> LogicalResult poolRule(OpTy op, ShardingRule &r) {
  ArrayRef<int64_t> out = shapeOf(op->getResult(0));
  for (int64_t d = 0; d < 4; ++d) {
    ShardingFactor &f =
        addFactor(r, op, out[d], d >= 2 ? Kind::Whole : Kind::Parallel);
    f.operandDims.assign(op->getNumOperands(), d);
    f.resultDims[0] = d;
  }
  return success();
}
template <> LogicalResult rule(MaxPool2DOp op, ShardingRule &r) {
  return poolRule(op, r);
}
template <> LogicalResult rule(AvgPool2DOp op, ShardingRule &r) {
  return poolRule(op, r);
}
template <> LogicalResult rule(MaxPool2DBackwardOp op, ShardingRule &r) {
  return poolRule(op, r);
}
template <> LogicalResult rule(AvgPool2DBackwardOp op, ShardingRule &r) {
  return poolRule(op, r);
}

/// conv2d(x [N,C,H,W], w [F,C/g,KH,KW], b [F]): N parallel, F parallel
/// (groups == 1), the rest (C included) whole.
template <> LogicalResult rule(Conv2DOp op, ShardingRule &r) {
  ArrayRef<int64_t> x = shapeOf(op.getInput()), w = shapeOf(op.getFilter()),
                    y = shapeOf(op.getResult());
  bool plain = op.getGroups() == 1;
  ShardingFactor &n = addFactor(r, op, x[0]);
  n.operandDims[0] = 0;
  n.resultDims[0] = 0;
  ShardingFactor &f =
      addFactor(r, op, w[0], plain ? Kind::Parallel : Kind::Whole);
  f.operandDims[1] = 0;
  if (op.getBias())
    f.operandDims[2] = 0;
  f.resultDims[0] = 1;
  // Splitting C would leave a partial sum, but the conv kernels take no
  // channel slices yet.
  ShardingFactor &c = addFactor(r, op, x[1], Kind::Whole);
  c.operandDims[0] = 1;
  c.operandDims[1] = 1;
  for (int64_t d = 2; d < 4; ++d) {
    addFactor(r, op, x[d], Kind::Whole).operandDims[0] = d;
    addFactor(r, op, w[d], Kind::Whole).operandDims[1] = d;
    addFactor(r, op, y[d], Kind::Whole).resultDims[0] = d;
  }
  return success();
}

/// Factors for dims [from, 4) of \p shape, whole, on operand \p operand
/// (or the result, -1).
void whole4(ShardingRule &r, Operation *op, ArrayRef<int64_t> shape,
            int operand, int64_t from) {
  for (int64_t d = from; d < 4; ++d) {
    ShardingFactor &f = addFactor(r, op, shape[d], Kind::Whole);
    (operand >= 0 ? f.operandDims[operand] : f.resultDims[0]) = d;
  }
}

/// conv2d_backward_input(grad [N,F,OH,OW], w [F,C/g,KH,KW]) -> [N,C,H,W]:
/// N parallel, the rest whole.
template <> LogicalResult rule(Conv2DBackwardInputOp op, ShardingRule &r) {
  ArrayRef<int64_t> g = shapeOf(op->getOperand(0));
  ShardingFactor &n = addFactor(r, op, g[0]);
  n.operandDims[0] = 0;
  n.resultDims[0] = 0;
  whole4(r, op, g, 0, 1);
  whole4(r, op, shapeOf(op->getOperand(1)), 1, 0);
  whole4(r, op, shapeOf(op.getResult()), -1, 1);
  return success();
}

/// conv2d_backward_filter(x [N,C,H,W], grad [N,F,OH,OW]) -> [F,C/g,KH,KW]:
/// the filter's gradient sums over the batch, so N is a reduction (data
/// parallelism leaves each rank a partial sum); the rest whole.
template <> LogicalResult rule(Conv2DBackwardFilterOp op, ShardingRule &r) {
  ArrayRef<int64_t> x = shapeOf(op->getOperand(0));
  ShardingFactor &n = addFactor(r, op, x[0], Kind::Reduction);
  n.operandDims[0] = 0;
  n.operandDims[1] = 0;
  whole4(r, op, x, 0, 1);
  whole4(r, op, shapeOf(op->getOperand(1)), 1, 1);
  whole4(r, op, shapeOf(op.getResult()), -1, 0);
  return success();
}

/// Collectives of another mesh axis (the dp axis's, when the tp axis is
/// partitioned second): every dimension carries over, except the one they
/// gather, scatter or slice along, which they need whole. A sum over the
/// other axis is linear: a partial sum of this axis passes through it.
/// An all_to_all needs both dimensions it moves whole (\p whole2).
template <typename OpTy>
LogicalResult collectiveRule(OpTy op, ShardingRule &r, int64_t whole,
                             int64_t whole2 = -1) {
  ArrayRef<int64_t> in = shapeOf(op->getOperand(0)),
                    out = shapeOf(op->getResult(0));
  for (int64_t d = 0; d < static_cast<int64_t>(in.size()); ++d) {
    if (d == whole || d == whole2) {
      addFactor(r, op, in[d], Kind::Whole).operandDims[0] = d;
      addFactor(r, op, out[d], Kind::Whole).resultDims[0] = d;
      continue;
    }
    ShardingFactor &f = addFactor(r, op, in[d]);
    f.operandDims[0] = d;
    f.resultDims[0] = d;
  }
  return success();
}
template <> LogicalResult rule(AllReduceOp op, ShardingRule &r) {
  collectiveRule(op, r, -1);
  r.scalingOperands[0] = op.getKind() == ReduceKind::sum;
  return success();
}
template <> LogicalResult rule(AllGatherOp op, ShardingRule &r) {
  return collectiveRule(op, r, op.getDim());
}
template <> LogicalResult rule(ReduceScatterOp op, ShardingRule &r) {
  return collectiveRule(op, r, op.getDim());
}
template <> LogicalResult rule(ShardSliceOp op, ShardingRule &r) {
  return collectiveRule(op, r, op.getDim());
}
template <> LogicalResult rule(AllToAllOp op, ShardingRule &r) {
  return collectiveRule(op, r, op.getSplitDim(), op.getConcatDim());
}

/// Random numbers are a function of the global element index: the result is
/// drawn whole, and split by its consumers.
template <> LogicalResult rule(RandomUniformOp op, ShardingRule &r) {
  ArrayRef<int64_t> s = shapeOf(op.getResult());
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d)
    addFactor(r, op, s[d], Kind::Whole).resultDims[0] = d;
  return success();
}

/// Indices are a function of the global position: drawn whole, split by
/// their consumers (a slice of a replicated value is local).
template <> LogicalResult rule(IotaOp op, ShardingRule &r) {
  ArrayRef<int64_t> s = shapeOf(op.getResult());
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d)
    addFactor(r, op, s[d], Kind::Whole).resultDims[0] = d;
  return success();
}

template <typename... Ops> void attachNonlinear(MLIRContext *ctx) {
  (Ops::template attachInterface<Model<Ops>>(*ctx), ...);
}

} // namespace

// The nonlinear elementwise ops share one rule body.
#define CLEAVE_NONLINEAR(OP)                                                   \
  template <> LogicalResult rule(OP op, ShardingRule &r) {                     \
    return nonlinearRule(op, r);                                               \
  }
namespace {
CLEAVE_NONLINEAR(PowOp)
CLEAVE_NONLINEAR(MaxOp)
CLEAVE_NONLINEAR(MinOp)
CLEAVE_NONLINEAR(AndOp)
CLEAVE_NONLINEAR(OrOp)
CLEAVE_NONLINEAR(XorOp)
CLEAVE_NONLINEAR(CmpOp)
CLEAVE_NONLINEAR(SelectOp)
CLEAVE_NONLINEAR(AbsOp)
CLEAVE_NONLINEAR(ExpOp)
CLEAVE_NONLINEAR(LogOp)
CLEAVE_NONLINEAR(SqrtOp)
CLEAVE_NONLINEAR(RsqrtOp)
CLEAVE_NONLINEAR(ReciprocalOp)
CLEAVE_NONLINEAR(TanhOp)
CLEAVE_NONLINEAR(SigmoidOp)
CLEAVE_NONLINEAR(ReluOp)
CLEAVE_NONLINEAR(ErfOp)
CLEAVE_NONLINEAR(SinOp)
CLEAVE_NONLINEAR(CosOp)
CLEAVE_NONLINEAR(NotOp)
CLEAVE_NONLINEAR(GeluOp)
CLEAVE_NONLINEAR(LeakyReluOp)
CLEAVE_NONLINEAR(CheckIndexOp)
} // namespace
#undef CLEAVE_NONLINEAR

std::optional<ShardingRule> mlir::cleave::shardingRuleOf(Operation *op) {
  auto ruled = dyn_cast_or_null<ShardingRuleOpInterface>(op);
  ShardingRule rule;
  if (!ruled || failed(ruled.getShardingRule(rule)))
    return std::nullopt;
  return rule;
}

void mlir::cleave::registerShardingRules(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *ctx, CleaveDialect *) {
    attachNonlinear<
        AddOp, SubOp, MulOp, DivOp, NegOp, PowOp, MaxOp, MinOp, AndOp, OrOp,
        XorOp, CmpOp, SelectOp, AbsOp, ExpOp, LogOp, SqrtOp, RsqrtOp,
        ReciprocalOp, TanhOp, SigmoidOp, ReluOp, ErfOp, SinOp, CosOp, NotOp,
        GeluOp, LeakyReluOp, CastOp, MatmulOp, ReduceOp, SoftmaxOp,
        LogSoftmaxOp, AttentionOp, AttentionBackwardOp, CrossEntropyOp,
        CrossEntropyBackwardOp, LayerNormOp, LayerNormBackwardOp, BatchNormOp,
        TransposeOp, BroadcastOp, ReshapeOp, ConcatOp, SliceOp, SliceScatterOp,
        GatherOp, ScatterAddOp, MaxPool2DOp, AvgPool2DOp, MaxPool2DBackwardOp,
        AvgPool2DBackwardOp, Conv2DOp, Conv2DBackwardInputOp,
        Conv2DBackwardFilterOp, RandomUniformOp, CheckIndexOp, AllReduceOp,
        AllGatherOp, ReduceScatterOp, AllToAllOp, ShardSliceOp>(ctx);
  });
}

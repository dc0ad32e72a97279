//===- FuseAttention.cpp - Recognise attention blocks -----------*- C++ -*-===//
//
// Runs on the forward before differentiation, so that the gradient is the
// fused op's (attention_backward) and the scores never become a value the
// backward pass keeps. The match walks from each softmax back to the Q K^T
// matmul through the ops exporters put between them; everything it does not
// recognise is left unfused, which is always correct.
//
//===----------------------------------------------------------------------===//

#include "CausalMask.h"

#include "Cleave/CleaveOps.h"
#include "cleave/Autodiff/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Matchers.h"

#include <cmath>

namespace mlir::cleave {
#define GEN_PASS_DEF_FUSEATTENTIONPASS
#include "cleave/Autodiff/Passes.h.inc"
} // namespace mlir::cleave

using namespace mlir;
using namespace mlir::cleave;

namespace {

/// Masked scores at or below this are excluded keys: what every family
/// fills its masks with (-inf, finfo.min, -1e9, GPT-2's -1e4).
constexpr double kMaskedAtMost = -1e4;

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

/// What the walk from the softmax back to Q K^T found.
struct Match {
  MatmulOp scores;
  double scale = 1.0;
  /// Additive biases, each with the product of the scales between it and
  /// the softmax (they scale it too).
  SmallVector<std::pair<Value, double>> biases;
  bool causal = false;
  /// The ops between the softmax and the matmul, softmax side first.
  SmallVector<Operation *> chain;
};

/// Whether a constant mask over the last two dims (the others 1) keeps
/// exactly the causal keys j <= i + sk - sq: \p masked(value) says whether
/// an element masks its key.
template <typename T>
bool isCausal(DenseElementsAttr dense, int64_t sq, int64_t sk,
              llvm::function_ref<bool(T)> masked) {
  ArrayRef<int64_t> s = cast<RankedTensorType>(dense.getType()).getShape();
  size_t r = s.size();
  if (r < 2 || s[r - 2] != sq || s[r - 1] != sk ||
      llvm::any_of(s.drop_back(2), [](int64_t d) { return d != 1; }))
    return false;
  auto values = dense.getValues<T>();
  for (int64_t i = 0; i < sq; ++i)
    for (int64_t j = 0; j < sk; ++j)
      if (masked(values[i * sk + j]) != (j > i + sk - sq))
        return false;
  return true;
}

class Matcher {
public:
  Matcher(RankedTensorType scoresType) : type(scoresType) {}

  /// Walks back from \p x (a full-shape score value with one use) with
  /// \p scaleAbove the product of the scales between it and the softmax.
  bool walk(Value x, double scaleAbove, Match &m) {
    if (x.getType() != type || !x.hasOneUse() || m.chain.size() > 16)
      return false;
    Operation *def = x.getDefiningOp();
    if (!def)
      return false;
    if (auto mm = dyn_cast<MatmulOp>(def)) {
      m.scores = mm;
      m.scale = scaleAbove;
      return true;
    }
    m.chain.push_back(def);
    if (isa<MulOp, DivOp>(def)) {
      for (int side = 0; side < 2; ++side) {
        if (isa<DivOp>(def) && side == 0)
          continue; // only x / c is a scale
        std::optional<double> c = splatFloat(def->getOperand(side));
        if (!c || !(*c > 0) || !std::isfinite(*c))
          continue;
        double factor = isa<DivOp>(def) ? 1.0 / *c : *c;
        if (walk(def->getOperand(1 - side), scaleAbove * factor, m))
          return true;
      }
    } else if (isa<AddOp>(def)) {
      for (int side = 0; side < 2; ++side) {
        Value other = def->getOperand(1 - side);
        Match trial = m;
        if (isCausalBias(other, scaleAbove))
          trial.causal = true;
        else
          trial.biases.push_back({other, scaleAbove});
        if (walk(def->getOperand(side), scaleAbove, trial)) {
          m = std::move(trial);
          return true;
        }
      }
    } else if (auto sel = dyn_cast<SelectOp>(def)) {
      // select(mask, fill, x) or select(keep, x, fill).
      for (int side = 1; side < 3; ++side) {
        std::optional<double> fill = splatFloat(def->getOperand(side));
        if (!fill || *fill * scaleAbove > kMaskedAtMost)
          continue;
        bool fillWhenTrue = side == 1;
        DenseElementsAttr dense;
        auto masked = [&](bool c) { return c == fillWhenTrue; };
        if (matchPattern(sel->getOperand(0), m_Constant(&dense))
                ? !isCausal<bool>(dense, rows(), cols(), masked)
                : !isCausalMask(sel->getOperand(0), rows(), cols(),
                                fillWhenTrue))
          continue;
        Match trial = m;
        trial.causal = true;
        if (walk(def->getOperand(3 - side), scaleAbove, trial)) {
          m = std::move(trial);
          return true;
        }
      }
    }
    m.chain.pop_back();
    return false;
  }

private:
  /// An additive mask, constant or built at run time: 0 on causal keys, at most
  /// -1e4 (after the scales above it) on the others.
  bool isCausalBias(Value v, double scaleAbove) {
    DenseElementsAttr dense;
    if (!matchPattern(v, m_Constant(&dense)))
      return cleave::isCausalBias(v, rows(), cols(), scaleAbove, kMaskedAtMost);
    if (!isa<FloatType>(dense.getElementType()))
      return false;
    std::function<bool(APFloat)> masked = [&](APFloat f) {
      double d = f.convertToDouble() * scaleAbove;
      return d <= kMaskedAtMost;
    };
    // Kept keys must add exactly 0.
    for (APFloat f : dense.getValues<APFloat>())
      if (!f.isZero() && f.convertToDouble() * scaleAbove > kMaskedAtMost)
        return false;
    return isCausal<APFloat>(dense, rows(), cols(), masked);
  }

  int64_t rows() const { return type.getDimSize(type.getRank() - 2); }
  int64_t cols() const { return type.getDimSize(type.getRank() - 1); }

  RankedTensorType type;
};

/// \p x with its last two dims swapped, composed into the transpose that
/// made it if there is one.
Value swapLast(OpBuilder &b, Location loc, Value x) {
  int64_t rank = cast<RankedTensorType>(x.getType()).getRank();
  auto perm = llvm::to_vector(llvm::seq<int64_t>(0, rank));
  std::swap(perm[rank - 2], perm[rank - 1]);
  if (auto t = x.getDefiningOp<TransposeOp>()) {
    ArrayRef<int64_t> inner = t.getPermutation();
    for (int64_t &p : perm)
      p = inner[p];
    x = t.getInput();
  }
  if (llvm::equal(perm, llvm::seq<int64_t>(0, rank)))
    return x;
  return TransposeOp::create(b, loc, x, perm);
}

/// Replaces softmax \p sm and the matmuls around it with cleave.attention
/// when the block matches; returns whether it did.
bool fuse(SoftmaxOp sm) {
  auto type = cast<RankedTensorType>(sm.getType());
  int64_t rank = type.getRank();
  if ((rank != 3 && rank != 4) || sm.getAxis() != rank - 1 ||
      !type.getElementType().isF32() || !sm->hasOneUse())
    return false;
  auto pv = dyn_cast<MatmulOp>(*sm->getUsers().begin());
  if (!pv || pv.getLhs() != sm.getResult() || pv.getTransposeLhs())
    return false;
  Match m;
  if (!Matcher(type).walk(sm.getInput(), 1.0, m) || m.scores.getTransposeLhs())
    return false;
  // Batch dims: B equal, heads equal or one key/value head for all. Rank
  // 3 ([B * H, S, D], from bmm) is attention of one head per batch.
  ArrayRef<int64_t> q = shapeOf(m.scores.getLhs()),
                    k = shapeOf(m.scores.getRhs()), v = shapeOf(pv.getRhs());
  auto headsFit = [&](ArrayRef<int64_t> s) {
    return s[0] == q[0] &&
           (rank == 3 || s[1] == q[1] || (s[1] == 1 && k[1] == v[1]));
  };
  if (q[0] != type.getDimSize(0) || !headsFit(k) || !headsFit(v) ||
      (rank == 4 && q[1] != type.getDimSize(1)))
    return false;

  OpBuilder b(pv);
  Location loc = sm.getLoc();
  Value query = m.scores.getLhs();
  Value key = m.scores.getTransposeRhs() ? m.scores.getRhs()
                                         : swapLast(b, loc, m.scores.getRhs());
  Value value =
      pv.getTransposeRhs() ? swapLast(b, loc, pv.getRhs()) : pv.getRhs();
  Value bias;
  for (auto [term, scale] : m.biases) {
    Value t = term;
    if (scale != 1.0) {
      auto one = RankedTensorType::get(SmallVector<int64_t>(rank, 1),
                                       type.getElementType());
      Value c = ConstantOp::create(
          b, loc,
          DenseElementsAttr::get(one,
                                 b.getFloatAttr(type.getElementType(), scale)));
      t = MulOp::create(b, loc, t, c);
    }
    bias = bias ? AddOp::create(b, loc, bias, t).getResult() : t;
  }
  // Rank 3 as rank 4 with one head.
  auto four = [&](Value x) -> Value {
    if (!x || rank == 4)
      return x;
    auto t = cast<RankedTensorType>(x.getType());
    SmallVector<int64_t> shape(t.getShape());
    shape.insert(shape.begin() + 1, 1);
    return ReshapeOp::create(
        b, loc, RankedTensorType::get(shape, t.getElementType()), x);
  };
  auto attention = AttentionOp::create(
      b, loc, four(query), four(key), four(value), four(bias),
      APFloat(static_cast<float>(m.scale)), m.causal);
  Value result = attention.getResult();
  if (rank == 3)
    result = ReshapeOp::create(b, loc, pv.getType(), result);
  pv.getResult().replaceAllUsesWith(result);
  pv.erase();
  sm.erase();
  for (Operation *op : m.chain)
    op->erase();
  if (m.scores->use_empty())
    m.scores.erase();
  return true;
}

struct FuseAttentionPass
    : public mlir::cleave::impl::FuseAttentionPassBase<FuseAttentionPass> {
  void runOnOperation() override {
    SmallVector<SoftmaxOp> softmaxes;
    getOperation().walk([&](SoftmaxOp sm) { softmaxes.push_back(sm); });
    for (SoftmaxOp sm : softmaxes)
      if (fuse(sm))
        ++numFused;
  }
};

} // namespace

//===- CausalMask.cpp - Masks as functions of a score's position ----------===//
//
// A value is described by a Form over the row i and column j of its last two
// dims (numpy broadcasting aligns trailing dims, so those are the scores'):
// an integer a*i + b*j + c, a comparison of one with 0, or a boolean table
// read at base + i * rowStride + j * colStride. The ops exporters build masks
// with (iota, aranges, add, sub, neg, mul by a constant, cmp, not, select,
// casts, reshapes, broadcasts, transposes, slices of a large constant) map
// forms to forms; anything else is not described, and the attention stays
// unfused, which is always correct.
//
//===----------------------------------------------------------------------===//

#include "CausalMask.h"

#include "Cleave/CleaveOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/TypeUtilities.h"

#include <optional>

using namespace mlir;
using namespace mlir::cleave;

namespace {

/// Table forms are checked element by element; past this many (2^28, a
/// 16k x 16k mask) the check would cost more than the fusion is worth.
constexpr int64_t kMaxTableChecks = int64_t(1) << 28;
/// How deep the description follows operands.
constexpr int kMaxDepth = 32;

struct Form {
  enum class Kind : uint8_t { Int, Cmp, Table };
  Kind kind = Kind::Int;
  /// Int and Cmp: a * i + b * j + c. Table: base + i * a + j * b indexes
  /// the constant (a and b are its row and column strides, 0 where the
  /// value does not vary).
  int64_t a = 0, b = 0, c = 0;
  CmpPredicate pred = CmpPredicate::eq;
  bool negate = false;
  DenseElementsAttr table;

  static Form constant(int64_t v) { return Form{Kind::Int, 0, 0, v}; }
  static Form truth(bool v) {
    Form f{Kind::Cmp};
    f.negate = !v;
    return f; // 0 == 0
  }
  bool isBool() const { return kind != Kind::Int; }
  /// Whether the value is the same at every position.
  bool isUniform() const { return a == 0 && b == 0; }

  int64_t intAt(int64_t i, int64_t j) const { return a * i + b * j + c; }
  bool at(int64_t i, int64_t j) const {
    if (kind == Kind::Table)
      return table.getValues<bool>()[c + i * a + j * b] != negate;
    int64_t e = intAt(i, j);
    bool v = false;
    switch (pred) {
    case CmpPredicate::eq:
      v = e == 0;
      break;
    case CmpPredicate::ne:
      v = e != 0;
      break;
    case CmpPredicate::lt:
      v = e < 0;
      break;
    case CmpPredicate::le:
      v = e <= 0;
      break;
    case CmpPredicate::gt:
      v = e > 0;
      break;
    case CmpPredicate::ge:
      v = e >= 0;
      break;
    }
    return v != negate;
  }
  /// Whether, in each row, the positions where it holds are a prefix or a
  /// suffix of the columns (an inequality in j, or no j at all).
  bool monotoneInColumns() const {
    return kind == Kind::Cmp &&
           (b == 0 || (pred != CmpPredicate::eq && pred != CmpPredicate::ne));
  }
};

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

/// Which coefficient dim \p d of a rank-\p rank value carries: 0 (a, rows),
/// 1 (b, columns) or -1 (neither).
int roleOf(int64_t d, int64_t rank) {
  return d == rank - 1 ? 1 : d == rank - 2 ? 0 : -1;
}

/// \p f with the coefficients of the dims \p shape holds once set to 0 (a
/// dim of extent 1 reads index 0 wherever it is broadcast).
Form fit(Form f, ArrayRef<int64_t> shape) {
  int64_t rank = shape.size();
  if (rank < 2 || shape[rank - 2] == 1)
    f.a = 0;
  if (rank < 1 || shape[rank - 1] == 1)
    f.b = 0;
  return f;
}

/// \p f moved to a value whose dim k is the operand's dim \p from[k] (-1: a
/// new dim of extent 1); fails where a dim the form varies along would not
/// be the result's rows or columns.
std::optional<Form> moveDims(Form f, int64_t inRank, ArrayRef<int64_t> from) {
  int64_t outRank = from.size();
  int64_t coef[2] = {f.a, f.b};
  int64_t out[2] = {0, 0};
  for (int role = 0; role < 2; ++role) {
    if (coef[role] == 0)
      continue;
    int64_t inDim = role == 0 ? inRank - 2 : inRank - 1;
    auto it = llvm::find(from, inDim);
    if (it == from.end())
      return std::nullopt;
    int outRole = roleOf(it - from.begin(), outRank);
    if (outRole < 0)
      return std::nullopt;
    out[outRole] = coef[role];
  }
  f.a = out[0];
  f.b = out[1];
  return f;
}

/// \p f (of the view's operand) as the view \p op moves it: a broadcast,
/// a transpose, a reshape that adds or drops dims of extent 1, a slice.
std::optional<Form> throughView(Operation *op, Form f) {
  ArrayRef<int64_t> in = shapeOf(op->getOperand(0)),
                    out = shapeOf(op->getResult(0));
  int64_t inRank = in.size();
  if (isa<BroadcastOp>(op))
    return f;
  if (auto t = dyn_cast<TransposeOp>(op))
    return moveDims(f, inRank, t.getPermutation());
  if (isa<ReshapeOp>(op)) {
    SmallVector<int64_t> inDims, from(out.size(), -1);
    for (auto [d, n] : llvm::enumerate(in))
      if (n != 1)
        inDims.push_back(d);
    size_t next = 0;
    for (auto [d, n] : llvm::enumerate(out)) {
      if (n == 1)
        continue;
      if (next == inDims.size() || in[inDims[next]] != n)
        return std::nullopt;
      from[d] = inDims[next++];
    }
    if (next != inDims.size())
      return std::nullopt;
    return moveDims(f, inRank, from);
  }
  if (auto slice = dyn_cast<SliceOp>(op)) {
    // Rows and columns start later and step further; the value does not
    // vary along the other dims.
    ArrayRef<int64_t> starts = slice.getStarts(), steps = slice.getSteps();
    int64_t rowStart = inRank >= 2 ? starts[inRank - 2] : 0;
    int64_t colStart = inRank >= 1 ? starts[inRank - 1] : 0;
    f.c += f.a * rowStart + f.b * colStart;
    if (inRank >= 2)
      f.a *= steps[inRank - 2];
    if (inRank >= 1)
      f.b *= steps[inRank - 1];
    return f;
  }
  return std::nullopt;
}

/// A float value that is one of two constants by a boolean form: what a
/// select of two splats, a cast of a boolean, and their affine maps are.
struct TwoValued {
  Form cond;
  double ifTrue, ifFalse;
};

std::optional<TwoValued> describeBias(Value v, int depth);

class Describer {
public:
  std::optional<Form> describe(Value v, int depth = 0);

private:
  std::optional<Form> fromConstant(DenseElementsAttr dense);
  std::optional<Form> fromOp(Operation *op, int depth);
  /// A float of two values compared with a constant (tril(ones) == 0).
  std::optional<Form> compareTwoValued(CmpOp cmp, int depth);
  llvm::DenseMap<Value, std::optional<Form>> memo;
  std::optional<Form> operand(Operation *op, unsigned i, int depth) {
    std::optional<Form> f = describe(op->getOperand(i), depth + 1);
    if (!f)
      return std::nullopt;
    return fit(*f, shapeOf(op->getOperand(i)));
  }
};

/// Whether integer form \p f holds the values of \p v exactly: its extremes
/// (at the corners of the rows and columns, as it is linear) fit \p v's
/// element type, so no op on the way wrapped around (an i8 cast of a
/// 300-wide iota), and the int64 arithmetic did not overflow.
bool fitsElementType(const Form &f, Value v) {
  auto type = cast<RankedTensorType>(v.getType());
  Type element = type.getElementType();
  if (f.isBool() != element.isInteger(1) || !element.isSignlessInteger())
    return false;
  // A comparison's difference is not a value of the IR: only int64 bounds
  // its evaluation here.
  unsigned width = f.isBool() ? 64 : element.getIntOrFloatBitWidth();
  ArrayRef<int64_t> shape = type.getShape();
  int64_t rank = shape.size();
  int64_t rows = rank >= 2 ? shape[rank - 2] : 1;
  int64_t cols = rank >= 1 ? shape[rank - 1] : 1;
  for (int64_t i : {int64_t(0), rows - 1})
    for (int64_t j : {int64_t(0), cols - 1}) {
      int64_t ai, bj, sum, value;
      if (__builtin_mul_overflow(f.a, i, &ai) ||
          __builtin_mul_overflow(f.b, j, &bj) ||
          __builtin_add_overflow(ai, bj, &sum) ||
          __builtin_add_overflow(sum, f.c, &value))
        return false;
      if (width < 64 && (value < -(int64_t(1) << (width - 1)) ||
                         value >= (int64_t(1) << (width - 1))))
        return false;
    }
  return true;
}

std::optional<Form> Describer::describe(Value v, int depth) {
  if (depth > kMaxDepth || !isa<RankedTensorType>(v.getType()))
    return std::nullopt;
  // Each value once: a mask built as a DAG of shared values (x + x, nested
  // compares) would otherwise be walked once per path.
  if (auto it = memo.find(v); it != memo.end())
    return it->second;
  std::optional<Form> f;
  DenseElementsAttr dense;
  if (matchPattern(v, m_Constant(&dense))) {
    f = fromConstant(dense);
  } else if (Operation *op = v.getDefiningOp();
             op && op->getNumResults() == 1) {
    f = fromOp(op, depth);
    if (f)
      f = fit(*f, shapeOf(v));
  }
  if (f && f->kind != Form::Kind::Table && !fitsElementType(*f, v))
    f = std::nullopt;
  memo[v] = f;
  return f;
}

std::optional<Form> Describer::fromConstant(DenseElementsAttr dense) {
  auto type = cast<RankedTensorType>(dense.getType());
  ArrayRef<int64_t> shape = type.getShape();
  int64_t rank = shape.size();
  for (int64_t d = 0; d + 2 < rank; ++d)
    if (shape[d] != 1)
      return std::nullopt;
  int64_t rows = rank >= 2 ? shape[rank - 2] : 1;
  int64_t cols = rank >= 1 ? shape[rank - 1] : 1;
  Type element = type.getElementType();
  if (element.isInteger(1)) {
    if (dense.isSplat())
      return Form::truth(dense.getSplatValue<bool>());
    Form f{Form::Kind::Table};
    f.table = dense;
    f.a = rows > 1 ? cols : 0;
    f.b = cols > 1 ? 1 : 0;
    return f;
  }
  if (!element.isSignlessInteger() || element.getIntOrFloatBitWidth() < 8)
    return std::nullopt;
  auto values = dense.getValues<APInt>();
  auto at = [&](int64_t r, int64_t c) {
    return values[r * cols + c].getSExtValue();
  };
  // An arange along rows, columns or both (j - i folded): verify it.
  Form f = Form::constant(at(0, 0));
  f.a = rows > 1 ? at(1, 0) - f.c : 0;
  f.b = cols > 1 ? at(0, 1) - f.c : 0;
  if (!dense.isSplat())
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        if (at(r, c) != f.intAt(r, c))
          return std::nullopt;
  return f;
}

std::optional<Form> Describer::fromOp(Operation *op, int depth) {
  Value result = op->getResult(0);
  int64_t rank = shapeOf(result).size();
  if (auto iota = dyn_cast<IotaOp>(op)) {
    int role = roleOf(iota.getDim(), rank);
    Form f = Form::constant(0);
    if (role < 0)
      return shapeOf(result)[iota.getDim()] == 1 ? std::optional<Form>(f)
                                                 : std::nullopt;
    (role == 0 ? f.a : f.b) = 1;
    return f;
  }
  if (auto cmp = dyn_cast<CmpOp>(op))
    if (std::optional<Form> f = compareTwoValued(cmp, depth))
      return f;
  if (isa<AddOp, SubOp, MulOp, CmpOp>(op)) {
    auto l = operand(op, 0, depth), r = operand(op, 1, depth);
    if (!l || !r || l->isBool() || r->isBool())
      return std::nullopt;
    int64_t sign = isa<SubOp, CmpOp>(op) ? -1 : 1;
    if (isa<MulOp>(op)) {
      if (!l->isUniform() && !r->isUniform())
        return std::nullopt;
      if (l->isUniform())
        std::swap(l, r);
      int64_t k = r->c;
      Form f{Form::Kind::Int};
      if (__builtin_mul_overflow(l->a, k, &f.a) ||
          __builtin_mul_overflow(l->b, k, &f.b) ||
          __builtin_mul_overflow(l->c, k, &f.c))
        return std::nullopt;
      return f;
    }
    // Checked: a wrapped coefficient would describe another mask.
    Form f{Form::Kind::Int};
    int64_t ra, rb, rc;
    if (__builtin_mul_overflow(sign, r->a, &ra) ||
        __builtin_mul_overflow(sign, r->b, &rb) ||
        __builtin_mul_overflow(sign, r->c, &rc) ||
        __builtin_add_overflow(l->a, ra, &f.a) ||
        __builtin_add_overflow(l->b, rb, &f.b) ||
        __builtin_add_overflow(l->c, rc, &f.c))
      return std::nullopt;
    if (auto cmp = dyn_cast<CmpOp>(op)) {
      f.kind = Form::Kind::Cmp;
      f.pred = cmp.getPredicate();
    }
    return f;
  }
  if (isa<NegOp>(op)) {
    auto f = operand(op, 0, depth);
    if (!f || f->isBool())
      return std::nullopt;
    return Form{Form::Kind::Int, -f->a, -f->b, -f->c};
  }
  if (isa<NotOp>(op)) {
    auto f = operand(op, 0, depth);
    if (!f || !f->isBool())
      return std::nullopt;
    f->negate = !f->negate;
    return f;
  }
  if (auto cast = dyn_cast<CastOp>(op)) {
    // Integers stay integers (indices are small), booleans booleans.
    Type from = getElementTypeOrSelf(cast.getInput().getType());
    Type to = getElementTypeOrSelf(result.getType());
    if (from.isInteger(1) != to.isInteger(1) || !from.isSignlessInteger() ||
        !to.isSignlessInteger())
      return std::nullopt;
    return operand(op, 0, depth);
  }
  if (auto sel = dyn_cast<SelectOp>(op)) {
    // select(c, true, false) is c; select(c, false, true) is its negation.
    auto c = operand(op, 0, depth), x = operand(op, 1, depth),
         y = operand(op, 2, depth);
    if (!c || !x || !y || !x->isBool() || !y->isBool() || !x->isUniform() ||
        !y->isUniform() || x->kind == Form::Kind::Table ||
        y->kind == Form::Kind::Table)
      return std::nullopt;
    bool tx = x->at(0, 0), ty = y->at(0, 0);
    if (tx == ty)
      return Form::truth(tx);
    c->negate = c->negate != ty;
    return c;
  }
  if (isa<BroadcastOp, TransposeOp, ReshapeOp, SliceOp>(op)) {
    auto f = operand(op, 0, depth);
    if (!f)
      return std::nullopt;
    return throughView(op, *f);
  }
  return std::nullopt;
}

std::optional<Form> Describer::compareTwoValued(CmpOp cmp, int depth) {
  for (int side = 0; side < 2; ++side) {
    std::optional<double> k = splatFloat(cmp->getOperand(1 - side));
    if (!k)
      continue;
    std::optional<TwoValued> t = describeBias(cmp->getOperand(side), depth + 1);
    if (!t)
      continue;
    auto holds = [&](double x) {
      double l = side == 0 ? x : *k, r = side == 0 ? *k : x;
      switch (cmp.getPredicate()) {
      case CmpPredicate::eq:
        return l == r;
      case CmpPredicate::ne:
        return l != r;
      case CmpPredicate::lt:
        return l < r;
      case CmpPredicate::le:
        return l <= r;
      case CmpPredicate::gt:
        return l > r;
      case CmpPredicate::ge:
        return l >= r;
      }
      return false;
    };
    bool vt = holds(t->ifTrue), vf = holds(t->ifFalse);
    if (vt == vf)
      return Form::truth(vt);
    Form f = fit(t->cond, shapeOf(cmp->getOperand(side)));
    f.negate = f.negate != vf;
    return f;
  }
  return std::nullopt;
}

/// Whether \p masked(i, j) holds exactly for j > i + cols - rows.
bool causalOver(const Form &f, bool maskedWhen, int64_t rows, int64_t cols) {
  auto masked = [&](int64_t i, int64_t j) { return f.at(i, j) == maskedWhen; };
  if (!f.monotoneInColumns()) {
    if (rows * cols > kMaxTableChecks)
      return false;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        if (masked(i, j) != (j > i + cols - rows))
          return false;
    return true;
  }
  // Masked columns are a prefix or a suffix of each row: its two ends and
  // the last kept key and the one after it decide which.
  for (int64_t i = 0; i < rows; ++i) {
    int64_t last = i + cols - rows;
    for (int64_t j : {int64_t(0), cols - 1, last, last + 1})
      if (j >= 0 && j < cols && masked(i, j) != (j > last))
        return false;
  }
  return true;
}

/// The rows and columns a mask of shape \p shape has (1 where it
/// broadcasts), or nullopt where it does not broadcast to the scores.
bool broadcastsTo(ArrayRef<int64_t> shape, int64_t rows, int64_t cols) {
  int64_t rank = shape.size();
  if (rank < 2)
    return false;
  for (int64_t d = 0; d + 2 < rank; ++d)
    if (shape[d] != 1)
      return false;
  return (shape[rank - 2] == rows || shape[rank - 2] == 1) &&
         (shape[rank - 1] == cols || shape[rank - 1] == 1);
}

/// \p x rounded to \p v's float element type, as the op computing it
/// rounds: 1e8 + 1 is 1e8 in f32, and a bias of -1e38 * 10 is -inf.
double roundTo(Value v, double x) {
  auto element = dyn_cast<FloatType>(getElementTypeOrSelf(v.getType()));
  if (!element)
    return std::nan("");
  APFloat f(x);
  bool lost = false;
  f.convert(element.getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
  return f.convertToDouble();
}

std::optional<TwoValued> describeBias(Value v, int depth) {
  Operation *op = v.getDefiningOp();
  if (!op || depth > kMaxDepth || op->getNumResults() != 1)
    return std::nullopt;
  Describer describer;
  auto cond = [&](Value c) -> std::optional<Form> {
    auto f = describer.describe(c, depth + 1);
    if (!f || !f->isBool())
      return std::nullopt;
    return fit(*f, shapeOf(c));
  };
  if (auto sel = dyn_cast<SelectOp>(op)) {
    auto c = cond(sel.getCond());
    auto x = splatFloat(sel.getOnTrue()), y = splatFloat(sel.getOnFalse());
    if (!c || !x || !y)
      return std::nullopt;
    return TwoValued{*c, *x, *y};
  }
  if (auto cast = dyn_cast<CastOp>(op)) {
    auto c = cond(cast.getInput());
    if (!c)
      return std::nullopt;
    return TwoValued{*c, 1.0, 0.0};
  }
  if (isa<AddOp, SubOp, MulOp, DivOp>(op)) {
    for (int side = 0; side < 2; ++side) {
      auto k = splatFloat(op->getOperand(1 - side));
      if (!k)
        continue;
      auto t = describeBias(op->getOperand(side), depth + 1);
      if (!t)
        continue;
      auto apply = [&](double x) {
        double l = side == 0 ? x : *k, r = side == 0 ? *k : x;
        return roundTo(v, isa<AddOp>(op)   ? l + r
                          : isa<SubOp>(op) ? l - r
                          : isa<MulOp>(op) ? l * r
                                           : l / r);
      };
      t->cond = fit(t->cond, shapeOf(op->getOperand(side)));
      return TwoValued{t->cond, apply(t->ifTrue), apply(t->ifFalse)};
    }
    return std::nullopt;
  }
  if (isa<NegOp>(op)) {
    auto t = describeBias(op->getOperand(0), depth + 1);
    if (t)
      *t = TwoValued{t->cond, -t->ifTrue, -t->ifFalse};
    return t;
  }
  if (isa<BroadcastOp, ReshapeOp, TransposeOp, SliceOp>(op)) {
    auto t = describeBias(op->getOperand(0), depth + 1);
    if (!t)
      return std::nullopt;
    auto moved = throughView(op, fit(t->cond, shapeOf(op->getOperand(0))));
    if (!moved)
      return std::nullopt;
    t->cond = fit(*moved, shapeOf(v));
    return t;
  }
  return std::nullopt;
}

} // namespace

std::optional<double> mlir::cleave::splatFloat(Value v) {
  DenseElementsAttr dense;
  if (!matchPattern(v, m_Constant(&dense)) || !dense.isSplat() ||
      !isa<FloatType>(dense.getElementType()))
    return std::nullopt;
  return dense.getSplatValue<APFloat>().convertToDouble();
}

bool mlir::cleave::isCausalMask(Value mask, int64_t rows, int64_t cols,
                                bool maskedWhen) {
  if (!broadcastsTo(shapeOf(mask), rows, cols))
    return false;
  std::optional<Form> f = Describer().describe(mask);
  return f && f->isBool() && causalOver(*f, maskedWhen, rows, cols);
}

bool mlir::cleave::isCausalBias(Value bias, int64_t rows, int64_t cols,
                                double scale, double maskedAtMost) {
  if (!broadcastsTo(shapeOf(bias), rows, cols))
    return false;
  std::optional<TwoValued> t = describeBias(bias, 0);
  if (!t)
    return false;
  auto masks = [&](double x) { return x * scale <= maskedAtMost; };
  // Kept keys add exactly 0; the others at most maskedAtMost.
  if (t->ifFalse == 0 && masks(t->ifTrue))
    return causalOver(t->cond, true, rows, cols);
  if (t->ifTrue == 0 && masks(t->ifFalse))
    return causalOver(t->cond, false, rows, cols);
  return false;
}

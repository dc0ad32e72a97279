//===- SegmentParameters.cpp - Tensors used in pieces --------*- C++ -*-===//
//
// A parameter that the model only ever uses in unequal pieces (Falcon's fused
// q|k|v with one K/V head: 64 query rows, 8 key rows, 8 value rows) is, for
// sharding, several parameters: the query rows want to be split by heads and
// the key/value rows replicated, which no single layout of the fused tensor
// says. This pass makes each piece its own parameter before the backward pass
// is derived, so each gets its own gradient, optimizer state and layout; the
// bundle, dumps and export reassemble the model's tensor from its segments.
//
//===----------------------------------------------------------------------===//

#include "Cleave/CleaveAttrNames.h"
#include "Cleave/CleaveOps.h"
#include "cleave/Sharding/Passes.h"
#include "cleave/Sharding/Sharding.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

namespace mlir::cleave {
#define GEN_PASS_DEF_SEGMENTPARAMETERSPASS
#include "cleave/Sharding/Passes.h.inc"
} // namespace mlir::cleave

using namespace mlir;
using namespace mlir::cleave;

namespace {

struct SegmentParametersPass
    : public mlir::cleave::impl::SegmentParametersPassBase<
          SegmentParametersPass> {
  void runOnOperation() override;
};

/// One op of the chain from a parameter to the value that is sliced: the op
/// and which of its operands is the chain's value.
struct Link {
  Operation *op;
  unsigned operand;
};

/// The dimension of operand \p link.operand that result dimension \p d of
/// \p link.op comes from, one to one (same extent, no mixing with other
/// dimensions); nullopt where there is none. Read off the op's sharding
/// rule: a parallel factor the operand carries (in a contraction, carries
/// alone: a batch dimension of both operands is a piece of neither), or a
/// regrouping that keeps the dimension whole.
std::optional<int64_t> operandDim(Link link, int64_t d) {
  Operation *op = link.op;
  auto in = cast<RankedTensorType>(op->getOperand(link.operand).getType());
  auto out = cast<RankedTensorType>(op->getResult(0).getType());
  std::optional<ShardingRule> rule = shardingRuleOf(op);
  if (!rule)
    return std::nullopt;
  if (rule->form == ShardingForm::Regroup) {
    // The same extent after the same number of elements: the reshape only
    // regroups the dimensions around it.
    int64_t before = 1;
    for (int64_t i = 0; i < d; ++i)
      before *= out.getDimSize(i);
    int64_t inBefore = 1;
    for (int64_t e = 0; e < in.getRank(); ++e) {
      if (inBefore == before && in.getDimSize(e) == out.getDimSize(d))
        return e;
      inBefore *= in.getDimSize(e);
    }
    return std::nullopt;
  }
  if (rule->form != ShardingForm::Einsum)
    return std::nullopt;
  for (const ShardingFactor &f : rule->factors) {
    if (f.kind != ShardingFactor::Kind::Parallel || f.resultDims[0] != d)
      continue;
    int64_t from = f.operandDims[link.operand];
    if (from < 0 || in.getDimSize(from) != out.getDimSize(d))
      return std::nullopt; // broadcast: the dimension is another operand's
    if (rule->contraction &&
        llvm::count_if(f.operandDims, [](int64_t x) { return x >= 0; }) > 1)
      return std::nullopt;
    return from;
  }
  return std::nullopt;
}

/// The piece of a value a slice takes along one dimension.
struct Piece {
  Operation *slice;
  int64_t start, size;
};

/// The pieces when every user of \p v is a unit-step slice along one common
/// dimension, the slices disjoint and together covering it, and not all of
/// one size (equal pieces are blocks of one layout); sorted by start.
std::optional<std::pair<int64_t, SmallVector<Piece>>> piecesOf(Value v) {
  auto type = cast<RankedTensorType>(v.getType());
  std::optional<int64_t> dim;
  SmallVector<Piece> pieces;
  for (Operation *user : v.getUsers()) {
    std::optional<ShardingRule> rule = shardingRuleOf(user);
    if (!rule || !rule->window || !rule->window->takes)
      return std::nullopt;
    const ShardingWindow &w = *rule->window;
    auto out = cast<RankedTensorType>(user->getResult(0).getType());
    for (int64_t d = 0; d < type.getRank(); ++d) {
      if (w.steps[d] != 1)
        return std::nullopt;
      if (out.getDimSize(d) == type.getDimSize(d))
        continue;
      if (dim && *dim != d)
        return std::nullopt;
      dim = d;
    }
    if (!dim || out.getDimSize(*dim) == 0)
      return std::nullopt; // a slice of the whole value, or of nothing
    pieces.push_back({user, w.starts[*dim], out.getDimSize(*dim)});
  }
  if (!dim || pieces.size() < 2)
    return std::nullopt;
  llvm::sort(pieces,
             [](const Piece &a, const Piece &b) { return a.start < b.start; });
  int64_t next = 0;
  bool equal = true;
  for (const Piece &p : pieces) {
    if (p.start != next)
      return std::nullopt; // overlapping, repeated or leaving a gap
    next += p.size;
    equal &= p.size == pieces.front().size;
  }
  if (next != type.getDimSize(*dim) || equal)
    return std::nullopt;
  return std::make_pair(*dim, std::move(pieces));
}

/// The chain of single-use ops from \p param to a value used only in
/// pieces, and each chain value's sliced dimension (param's first).
struct Chain {
  SmallVector<Link> links;
  SmallVector<int64_t> dims;
  SmallVector<Piece> pieces;
};

std::optional<Chain> chainOf(BlockArgument param) {
  Chain chain;
  Value v = param;
  while (true) {
    if (auto found = piecesOf(v)) {
      chain.dims.assign(chain.links.size() + 1, found->first);
      chain.pieces = std::move(found->second);
      break;
    }
    if (!v.hasOneUse())
      return std::nullopt;
    OpOperand &use = *v.getUses().begin();
    Operation *op = use.getOwner();
    if (op->getNumResults() != 1 || op->getNumRegions() != 0)
      return std::nullopt;
    chain.links.push_back({op, use.getOperandNumber()});
    v = op->getResult(0);
  }
  for (size_t k = chain.links.size(); k-- > 0;) {
    std::optional<int64_t> d = operandDim(chain.links[k], chain.dims[k + 1]);
    if (!d)
      return std::nullopt;
    chain.dims[k] = *d;
  }
  return chain;
}

RankedTensorType withDim(Type type, int64_t dim, int64_t size) {
  auto t = cast<RankedTensorType>(type);
  SmallVector<int64_t> shape(t.getShape());
  shape[dim] = size;
  return t.clone(shape);
}

/// NumPy's notation of a piece: "w[0:64]", "w[:, 8:16]".
std::string segmentName(StringRef base, int64_t dim, int64_t start,
                        int64_t size) {
  std::string name = base.str() + "[";
  for (int64_t i = 0; i < dim; ++i)
    name += ":, ";
  return name + std::to_string(start) + ":" + std::to_string(start + size) +
         "]";
}

/// Replaces parameter \p index of \p func by one parameter per piece of
/// \p chain, each computing its piece through a copy of the chain.
void segment(func::FuncOp func, unsigned index, const Chain &chain) {
  MLIRContext *ctx = func.getContext();
  BlockArgument param = func.getArgument(index);
  DictionaryAttr attrs = func.getArgAttrDict(index);
  // A segment of a segment is a segment of the model's tensor.
  StringRef base = func.getArgAttrOfType<StringAttr>(index, kParameterAttr);
  int64_t dim = chain.dims.front(), origin = 0;
  if (auto of = func.getArgAttrOfType<StringAttr>(index, kSegmentOfAttr)) {
    base = of.getValue();
    origin = func.getArgAttrOfType<DenseI64ArrayAttr>(index, kSegmentAttr)[1];
  }
  for (auto [n, piece] : llvm::enumerate(chain.pieces)) {
    NamedAttrList list(attrs);
    list.set(kParameterAttr,
             StringAttr::get(ctx, segmentName(base, dim, origin + piece.start,
                                              piece.size)));
    list.set(kSegmentOfAttr, StringAttr::get(ctx, base));
    list.set(kSegmentAttr, DenseI64ArrayAttr::get(
                               ctx, {dim, origin + piece.start, piece.size}));
    unsigned at = index + 1 + n;
    (void)func.insertArgument(at, withDim(param.getType(), dim, piece.size),
                              list.getDictionary(ctx), param.getLoc());
    Value cur = func.getArgument(at);
    for (auto [k, link] : llvm::enumerate(chain.links)) {
      OpBuilder b(link.op);
      int64_t d = chain.dims[k + 1];
      IRMapping map;
      map.map(link.op->getOperand(link.operand), cur);
      // Another operand carrying the dimension (a bias added to the
      // pieces) is cut the same way (the pass segments it next); one
      // broadcast along it is used as it is.
      std::optional<ShardingRule> rule = shardingRuleOf(link.op);
      for (auto [i, other] : llvm::enumerate(link.op->getOperands())) {
        int64_t od = -1;
        if (rule && rule->form == ShardingForm::Einsum)
          for (const ShardingFactor &f : rule->factors)
            if (f.kind == ShardingFactor::Kind::Parallel &&
                f.resultDims[0] == d)
              od = f.operandDims[i];
        auto t = cast<RankedTensorType>(other.getType());
        if (i == link.operand || od < 0 || t.getDimSize(od) == 1)
          continue;
        SmallVector<int64_t> starts(t.getRank(), 0), steps(t.getRank(), 1);
        starts[od] = piece.start;
        map.map(other, SliceOp::create(b, link.op->getLoc(),
                                       withDim(t, od, piece.size), other,
                                       starts, steps));
      }
      Operation *copy = b.clone(*link.op, map);
      copy->getResult(0).setType(
          withDim(link.op->getResult(0).getType(), d, piece.size));
      cur = copy->getResult(0);
    }
    piece.slice->getResult(0).replaceAllUsesWith(cur);
    piece.slice->erase();
  }
  for (auto it = chain.links.rbegin(); it != chain.links.rend(); ++it)
    it->op->erase();
  (void)func.eraseArgument(index);
}

void SegmentParametersPass::runOnOperation() {
  func::FuncOp func = getOperation();
  if (func.isExternal())
    return;
  // Before the backward pass only: afterwards a parameter has a gradient
  // and optimizer state of its own shape.
  for (unsigned i = 0; i < func.getNumResults(); ++i)
    if (func.getResultAttr(i, kGradientAttr))
      return;
  // Until nothing changes: segmenting a weight cuts the bias added to it.
  for (bool changed = true; changed;) {
    changed = false;
    for (unsigned i = 0; i < func.getNumArguments(); ++i) {
      if (!func.getArgAttr(i, kParameterAttr))
        continue;
      std::optional<Chain> chain = chainOf(func.getArgument(i));
      if (!chain)
        continue;
      if (func.getArgAttr(i, kSegmentOfAttr) &&
          func.getArgAttrOfType<DenseI64ArrayAttr>(i, kSegmentAttr)[0] !=
              chain->dims.front())
        continue; // pieces across pieces: not one range of the model's
      segment(func, i, *chain);
      changed = true;
      break;
    }
  }
}

} // namespace

//===- PrintShardingRules.cpp - The cleave-print-sharding-rules pass -----===//

#include "Cleave/CleaveInterfaces.h"
#include "Cleave/CleaveOps.h"
#include "cleave/Sharding/Passes.h"
#include "cleave/Sharding/Sharding.h"

namespace mlir::cleave {
#define GEN_PASS_DEF_PRINTSHARDINGRULESPASS
#include "cleave/Sharding/Passes.h.inc"
} // namespace mlir::cleave

using namespace mlir;
using namespace mlir::cleave;

namespace {

std::string factorName(size_t f) {
  std::string s(1, static_cast<char>('i' + f % 18));
  if (f >= 18)
    s += std::to_string(f / 18);
  return s;
}

/// "([i, j], [j]) -> ([i, j]) sum={k} whole={j} linear=additive".
std::string format(Operation *op, const ShardingRule &rule) {
  auto dims = [&](auto pick, unsigned count, auto rankOf) {
    std::string out = "(";
    for (unsigned v = 0; v < count; ++v) {
      out += v ? ", [" : "[";
      for (int64_t d = 0; d < rankOf(v); ++d) {
        std::string name = "_";
        for (auto [f, factor] : llvm::enumerate(rule.factors))
          if (pick(factor)[v] == d)
            name = factorName(f);
        out += (d ? ", " : "") + name;
      }
      out += "]";
    }
    return out + ")";
  };
  auto rank = [](Value v) {
    return cast<RankedTensorType>(v.getType()).getRank();
  };
  std::string s = dims([](const ShardingFactor &f) { return f.operandDims; },
                       op->getNumOperands(),
                       [&](unsigned i) { return rank(op->getOperand(i)); }) +
                  " -> " +
                  dims([](const ShardingFactor &f) { return f.resultDims; },
                       op->getNumResults(),
                       [&](unsigned i) { return rank(op->getResult(i)); });
  auto list = [&](auto keep) {
    std::string out;
    for (auto [f, factor] : llvm::enumerate(rule.factors))
      if (keep(factor))
        out += (out.empty() ? "" : ", ") + factorName(f);
    return out;
  };
  for (ReduceKind kind : {ReduceKind::sum, ReduceKind::max, ReduceKind::min}) {
    std::string r = list([&](const ShardingFactor &f) {
      return f.kind == ShardingFactor::Kind::Reduction && f.combine == kind;
    });
    if (!r.empty())
      s += " " + stringifyReduceKind(kind).str() + "={" + r + "}";
  }
  std::string whole = list([](const ShardingFactor &f) {
    return f.kind == ShardingFactor::Kind::Whole;
  });
  if (!whole.empty())
    s += " whole={" + whole + "}";
  if (rule.additive)
    s += " linear=additive";
  std::string scaling;
  for (auto [i, b] : llvm::enumerate(rule.scalingOperands))
    if (b)
      scaling += (scaling.empty() ? "" : ",") + std::to_string(i);
  if (!scaling.empty())
    s += " linear=scaling(" + scaling + ")";
  return s;
}

struct PrintShardingRulesPass
    : public mlir::cleave::impl::PrintShardingRulesPassBase<
          PrintShardingRulesPass> {
  void runOnOperation() override {
    getOperation().walk([](ShardingRuleOpInterface op) {
      ShardingRule rule;
      if (failed(op.getShardingRule(rule)))
        return;
      op->setAttr(kShardingRuleAttr,
                  StringAttr::get(op->getContext(), format(op, rule)));
    });
  }
};

} // namespace

//===- ChooseLayouts.cpp - Automatic choice of parameter layouts -*- C++
//-*-===//
//
// The decision variables are the parameters' layouts (optimizer state follows
// its parameter; activations follow by propagation). Every candidate plan is
// scored by a dry run of the partitioner over the whole train step, forward,
// backward and optimizer together, so forward and backward agree: the score
// is the step's communication time plus the cost model's charge for per-rank
// memory. The search is coordinate descent from the replicated plan, with
// moves that change one parameter, or the parameters of one producer-consumer
// pair of matmuls together (a lone column split pays an all-gather that only
// the matching row split removes).
//
//===----------------------------------------------------------------------===//

#include "Cleave/CleaveOps.h"
#include "cleave/Lowering/EmitPlan.h"
#include "cleave/Sharding/Sharding.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

using namespace mlir;
using namespace mlir::cleave;

namespace {

/// One decision: parameters in structurally identical positions (the same
/// weight of every transformer layer) share a layout, which keeps the plan
/// uniform across layers and the search independent of depth.
struct Param {
  std::vector<std::string> names;
  RankedTensorType type;
  SmallVector<Layout> candidates;
};

/// What a value is used for, to \p depth levels of users: op names, operand
/// positions and result types. Equal for the same weight of two layers.
void signature(Value v, int depth, std::string &out) {
  llvm::raw_string_ostream os(out);
  os << v.getType() << "{";
  if (depth > 0)
    for (OpOperand &use : v.getUses()) {
      Operation *user = use.getOwner();
      // Which result of the step a value is does not tell layers apart.
      if (user->hasTrait<OpTrait::IsTerminator>()) {
        os << "return";
        continue;
      }
      os << user->getName() << "#" << use.getOperandNumber() << "<";
      // What the value is combined with (q's projection reads a norm, the
      // output projection the attention's result).
      for (Value other : user->getOperands())
        if (Operation *def = other.getDefiningOp())
          os << def->getName() << ",";
      os << ">(";
      for (Value r : user->getResults())
        signature(r, depth - 1, out);
      os << ")";
    }
  os << "}";
}

/// Per group: its cheapest other layout with the rest of the plan kept, and
/// what that would add to the step's score.
template <typename Score>
void explainChoices(const std::vector<Param> &params,
                    const ParameterLayouts &plan, Score &score, double best,
                    LayoutAlternatives &out) {
  for (const Param &p : params) {
    Layout chosen = plan.lookup(p.names.front());
    double cheapest = std::numeric_limits<double>::infinity();
    Layout other;
    for (const Layout &l : p.candidates) {
      if (l == chosen)
        continue;
      ParameterLayouts trial = plan;
      for (const std::string &n : p.names)
        trial[n] = l;
      if (double s = score(trial); s < cheapest)
        cheapest = s, other = l;
    }
    std::string text;
    llvm::raw_string_ostream os(text);
    os << "the search keeps it " << chosen.str();
    if (cheapest == std::numeric_limits<double>::infinity())
      os << "; no other layout of it avoids gathering it whole";
    else
      os << "; its cheapest other layout, " << other.str() << ", would "
         << (cheapest >= best ? "add " : "save ")
         << llvm::format("%.1f", std::abs(cheapest - best) * 1e6)
         << " us per step (communication plus memory charge)";
    for (const std::string &n : p.names)
      out[n] = text;
  }
}

} // namespace

FailureOr<ParameterLayouts> mlir::cleave::chooseLayouts(
    func::FuncOp func, int64_t tp, const ParameterLayouts &fixed,
    const CostModel &cost, LayoutAlternatives *alternatives) {
  // Fused projections: a dimension of size D that the step slices into
  // B aligned pieces is a candidate for a split in B blocks.
  std::map<int64_t, std::set<int64_t>> blockCounts;
  func.walk([&](SliceOp slice) {
    ArrayRef<int64_t> a =
        cast<RankedTensorType>(slice.getInput().getType()).getShape();
    ArrayRef<int64_t> b = slice.getType().getShape();
    for (size_t d = 0; d < a.size(); ++d)
      if (a[d] != b[d] && b[d] > 0 && slice.getSteps()[d] == 1 &&
          a[d] % b[d] == 0 && slice.getStarts()[d] % b[d] == 0)
        blockCounts[a[d]].insert(a[d] / b[d]);
  });
  // ... or reshapes into [B, ...] (heads, or q/k/v stacked in front).
  func.walk([&](ReshapeOp reshape) {
    ArrayRef<int64_t> a =
        cast<RankedTensorType>(reshape.getInput().getType()).getShape();
    ArrayRef<int64_t> b = reshape.getType().getShape();
    if (b.size() <= a.size())
      return;
    // A single input dim split into several: find it by matching prefixes.
    size_t i = 0, j = 0;
    while (i < a.size() && j < b.size() && a[i] == b[j])
      ++i, ++j;
    if (i < a.size() && j < b.size() && b[j] > 1 && a[i] % b[j] == 0 &&
        a[i] != b[j])
      blockCounts[a[i]].insert(b[j]);
  });
  std::vector<Param> params;
  std::map<std::string, size_t> groupOf;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto name = func.getArgAttrOfType<StringAttr>(i, kParameterAttr);
    if (!name || fixed.count(name.getValue()))
      continue;
    std::string sig;
    signature(func.getArgument(i), 3, sig);
    auto [it, fresh] = groupOf.try_emplace(sig, params.size());
    if (!fresh) {
      params[it->second].names.push_back(name.str());
      continue;
    }
    Param p{{name.str()},
            cast<RankedTensorType>(func.getArgument(i).getType()),
            {Layout::replicated()}};
    for (int64_t d = 0; d < p.type.getRank(); ++d) {
      int64_t size = p.type.getDimSize(d);
      // A size tp does not divide is split in padded chunks.
      if (size >= tp)
        p.candidates.push_back(Layout::split(d));
      for (int64_t blocks : blockCounts[size])
        if (blocks > 1 && size % (blocks * tp) == 0)
          p.candidates.push_back(Layout::split(d, blocks));
    }
    params.push_back(std::move(p));
  }
  auto assign = [](ParameterLayouts &layouts, const Param &p, Layout l) {
    for (const std::string &n : p.names)
      layouts[n] = l;
  };
  ParameterLayouts plan = fixed;
  PartitionIndex index(func);
  // Moves revisit assignments (a neighbour's kept layout, the next sweep):
  // each distinct assignment of the groups is scored once.
  std::map<std::string, double> scored;
  auto score = [&](const ParameterLayouts &layouts) -> double {
    std::string key;
    for (const Param &p : params)
      key += layouts.lookup(p.names.front()).str() + ";";
    if (auto it = scored.find(key); it != scored.end())
      return it->second;
    FailureOr<PartitionResult> r =
        partition(func, tp, layouts, cost, /*rewrite=*/false, &index);
    // Tensor parallelism splits computation: a parameter stored split but
    // gathered whole for a use saves memory only (ZeRO's trade, which
    // belongs to a data-parallel axis) at the price of a collective on the
    // critical path every step. Plans that do so are not candidates, unless
    // the user fixed that parameter's layout.
    bool gathers =
        succeeded(r) && llvm::any_of(r->gatheredParameters, [&](unsigned arg) {
          return !fixed.count(
              func.getArgAttrOfType<StringAttr>(arg, kParameterAttr)
                  .getValue());
        });
    double s =
        failed(r) || gathers
            ? std::numeric_limits<double>::infinity()
            : r->seconds + cost.memory * static_cast<double>(r->memoryBytes);
    scored[key] = s;
    return s;
  };
  double best = score(plan);
  // A move sets one parameter's layout and then lets its neighbours in
  // argument order (a layer's weights are adjacent) adapt to it, twice over:
  // a column split alone pays for an all-gather that only the matching bias
  // and row split remove, whichever of them the sweep meets first.
  constexpr size_t kWindow = 3;
  // Moves are retried only where the plan changed within their window since
  // they were last tried ("don't look bits" of local search): elsewhere the
  // same trials would only be scored again on a plan that differs far away.
  std::vector<int64_t> changedAt(params.size(), 0), triedAt(params.size(), -1);
  int64_t clock = 0;
  for (int sweep = 0; sweep < 4; ++sweep) {
    bool improved = false;
    for (size_t i = 0; i < params.size(); ++i) {
      size_t lo = i >= kWindow ? i - kWindow : 0;
      size_t hi = std::min(params.size(), i + 1 + kWindow);
      if (*std::max_element(changedAt.begin() + lo, changedAt.begin() + hi) <
          triedAt[i])
        continue;
      triedAt[i] = ++clock;
      for (const Layout &l : params[i].candidates) {
        ParameterLayouts trial = plan;
        assign(trial, params[i], l);
        double s = score(trial);
        bool changed = true;
        for (int pass = 0; pass < 2 && changed; ++pass) {
          changed = false;
          for (size_t j = lo; j < hi; ++j) {
            if (j == i)
              continue;
            Layout keep = trial.lookup(params[j].names.front());
            for (const Layout &m : params[j].candidates) {
              if (m == keep)
                continue;
              assign(trial, params[j], m);
              double t = score(trial);
              if (t + 1e-12 < s) {
                s = t;
                keep = m;
                changed = true;
              }
            }
            assign(trial, params[j], keep);
          }
        }
        if (s + 1e-12 < best) {
          ++clock;
          for (size_t j = lo; j < hi; ++j)
            if (trial.lookup(params[j].names.front()) !=
                plan.lookup(params[j].names.front()))
              changedAt[j] = clock;
          best = s;
          plan = std::move(trial);
          improved = true;
        }
      }
    }
    if (!improved)
      break;
  }
  if (alternatives)
    explainChoices(params, plan, score, best, *alternatives);
  return plan;
}

//===- ChooseLayouts.cpp - Automatic parameter layouts ----------*- C++ -*-===//
//
// The decision variables are the parameters' layouts, one per group of
// parameters in structurally identical positions (the same role in every
// layer); optimizer state follows its parameter, activations follow by
// propagation. Each group's candidates are the replicated layout, a split
// of each dimension, and splits in the blocks and head-wide granules the
// step itself reveals (fused projections sliced or reshaped into [B, ...]).
// Every candidate plan is scored by a dry run of the partitioner over the
// whole train step, forward, backward and optimizer together: the step's
// communication time plus the cost model's charge for per-rank memory.
// The search is coordinate descent from the replicated plan, with moves
// that change one group and let its neighbours adapt (a lone column split
// pays an all-gather that only the matching row split removes). Where the
// plan found gathers values that carry a parameter's split, a second
// descent (and, if that leaves some, a restart whose moves adapt every
// layer) looks for a plan without them at a small extra cost; the last
// decision is whether gradients may stay partial across a fan-out. Every
// collective's reason gets what the cheapest other layout of its
// parameter would have cost.
//
//===----------------------------------------------------------------------===//

#include "Cleave/CleaveAttrNames.h"
#include "Cleave/CleaveOps.h"
#include "cleave/Sharding/Passes.h"
#include "cleave/Sharding/Sharding.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Regex.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/Parallel.h"
#include "llvm/Support/raw_ostream.h"
#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <set>

namespace mlir::cleave {
#define GEN_PASS_DEF_CHOOSELAYOUTSPASS
#include "cleave/Sharding/Passes.h.inc"
} // namespace mlir::cleave

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
  /// Where each of names is among the searched parameters, in argument
  /// order.
  std::vector<size_t> positions;
};

/// What a value is used for in the forward pass (the ops up to \p forwardEnd),
/// to \p depth levels of users: op names, operand positions and result
/// types. Equal for the same weight of two layers. The backward pass is left
/// out: the first layer's differs where nothing before it trains (no
/// gradient of its input), which would give it decisions of its own.
void signature(Value v, int depth, Operation *forwardEnd, std::string &out) {
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
      if (forwardEnd && forwardEnd->isBeforeInBlock(user))
        continue;
      os << user->getName() << "#" << use.getOperandNumber() << "<";
      // What the value is combined with (q's projection reads a norm, the
      // output projection the attention's result).
      for (Value other : user->getOperands())
        if (Operation *def = other.getDefiningOp())
          os << def->getName() << ",";
      os << ">(";
      for (Value r : user->getResults())
        signature(r, depth - 1, forwardEnd, out);
      os << ")";
    }
  os << "}";
}

/// \p user's result is operand \p i (\p v, a matrix) dim for dim: an
/// elementwise op that neither moves nor broadcasts it. Unless
/// \p matrixOnly, \p v may also be a regrouped matrix, and may broadcast
/// along its dims of 1 (a per-group scale, [rows, groups, 1], applied to
/// its weight's [rows, groups, cols / groups]).
bool keepsDims(const ShardingRule &rule, unsigned i, Value v, Operation *user,
               bool matrixOnly = true) {
  auto in = dyn_cast<RankedTensorType>(v.getType());
  if (user->getNumResults() != 1 || !in || in.getRank() < 2 ||
      (matrixOnly && in.getRank() != 2))
    return false;
  ArrayRef<int64_t> out =
      cast<RankedTensorType>(user->getResult(0).getType()).getShape();
  if (out.size() != in.getShape().size())
    return false;
  for (int64_t d = 0; d < in.getRank(); ++d) {
    if (in.getDimSize(d) != out[d]) {
      if (matrixOnly || in.getDimSize(d) != 1)
        return false;
      continue;
    }
    if (llvm::none_of(rule.factors, [&](const ShardingFactor &f) {
          return f.operandDims[i] == d && f.resultDims[0] == d;
        }))
      return false;
  }
  return true;
}

/// The ops the forward pass takes \p v through, \p length of them: at each
/// value its earliest user (the forward's; the backward's and the
/// optimizer's come later), and that user's first result. It tells apart
/// two weights that signature() sees alike because their differences lie
/// deeper than its few levels: a LoRA B beside the query projection (its
/// sum reshaped into heads) and one beside the output projection (its sum
/// added to the residual), which need opposite layouts.
void forwardChain(Value v, int length, std::string &out) {
  llvm::raw_string_ostream os(out);
  // Ops that keep the matrix as it is, dim for dim (an int8 weight's cast
  // and scaling), do not count, nor does anything an integer weight meets
  // before its product (its dequantization, however the exporter wrote
  // it: per-group scales regroup it twice): the chain reaches as far past
  // the product as a float weight's, so q and o projections stay apart.
  bool dequantizing =
      cast<RankedTensorType>(v.getType()).getElementType().isInteger();
  int kept = 0;
  for (int step = 0; step - kept < length && kept <= length && v; ++step) {
    Operation *first = nullptr;
    unsigned operand = 0;
    for (OpOperand &use : v.getUses()) {
      Operation *user = use.getOwner();
      if (user->hasTrait<OpTrait::IsTerminator>())
        continue;
      if (!first || user->isBeforeInBlock(first)) {
        first = user;
        operand = use.getOperandNumber();
      }
    }
    if (!first || first->getNumResults() == 0)
      return;
    os << first->getName() << "#" << operand << ";";
    std::optional<ShardingRule> rule = shardingRuleOf(first);
    dequantizing &= !(rule && rule->contraction);
    if (dequantizing ||
        (rule && !rule->contraction && keepsDims(*rule, operand, v, first)))
      ++kept;
    v = first->getResult(0);
  }
}

/// Coordinate descent of \p plan under \p score (see chooseLayouts).
template <typename Score>
void descend(const std::vector<Param> &params, ParameterLayouts &plan,
             double &best, Score score, const std::vector<bool> *focus,
             bool everyLayer, size_t window) {
  auto assign = [](ParameterLayouts &layouts, const Param &p, Layout l) {
    for (const std::string &n : p.names)
      layouts[n] = l;
  };
  // A move sets one parameter's layout and then lets its neighbours adapt
  // to it, twice over: a column split alone pays for an all-gather that
  // only the matching bias and row split remove, whichever of them the
  // sweep meets first. Neighbours are the groups within kWindow places in
  // argument order (a layer's weights are adjacent) of the group's first
  // parameter or, with \p everyLayer, of any of its parameters: then the
  // groups of every layer are neighbours, not only the first's (a layer
  // whose input or output differs, the first or the last, has groups of
  // its own), at the price of more neighbours per move. The window is
  // wider where gathers must go (see chooseLayouts).
  const size_t kWindow = window;
  std::vector<size_t> groupAt;
  for (auto [g, p] : llvm::enumerate(params))
    for (size_t pos : p.positions) {
      if (groupAt.size() <= pos)
        groupAt.resize(pos + 1, params.size());
      groupAt[pos] = g;
    }
  std::vector<std::vector<size_t>> near(params.size());
  for (auto [g, p] : llvm::enumerate(params)) {
    std::set<size_t> found;
    if (!everyLayer)
      for (size_t j = g >= kWindow ? g - kWindow : 0;
           j < std::min(params.size(), g + 1 + kWindow); ++j)
        found.insert(j);
    else
      for (size_t pos : p.positions)
        for (size_t q = pos >= kWindow ? pos - kWindow : 0;
             q < std::min(groupAt.size(), pos + 1 + kWindow); ++q)
          if (groupAt[q] < params.size())
            found.insert(groupAt[q]);
    found.erase(g);
    near[g].assign(found.begin(), found.end());
  }
  // Moves are retried only where the plan changed near them since they
  // were last tried ("don't look bits" of local search): elsewhere the
  // same trials would only be scored again on a plan that differs far away.
  // With a focus, the other groups wait for a change near them.
  std::vector<int64_t> changedAt(params.size(), 0), triedAt(params.size(), -1);
  int64_t clock = 1;
  if (focus)
    for (size_t i = 0; i < params.size(); ++i)
      if (!(*focus)[i])
        triedAt[i] = 1;
  for (int sweep = 0; sweep < 4; ++sweep) {
    bool improved = false;
    for (size_t i = 0; i < params.size(); ++i) {
      int64_t lastChange = changedAt[i];
      for (size_t j : near[i])
        lastChange = std::max(lastChange, changedAt[j]);
      if (lastChange < triedAt[i])
        continue;
      triedAt[i] = ++clock;
      // One move: group i set to l, its neighbours adapted.
      auto tryMove = [&](const Layout &l) {
        ParameterLayouts trial = plan;
        assign(trial, params[i], l);
        double s = score(trial);
        bool changed = true;
        for (int pass = 0; pass < 2 && changed; ++pass) {
          changed = false;
          for (size_t j : near[i]) {
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
        return std::make_pair(s, std::move(trial));
      };
      // The moves of one group start from the same plan until one is
      // taken: they run in parallel, speculatively, and a move after a
      // taken one runs again from the new plan (the result is that of
      // trying them in order).
      const SmallVector<Layout> &candidates = params[i].candidates;
      std::vector<std::pair<double, ParameterLayouts>> speculative(
          candidates.size());
      llvm::parallelFor(0, candidates.size(), [&](size_t c) {
        speculative[c] = tryMove(candidates[c]);
      });
      bool taken = false;
      for (size_t c = 0; c < candidates.size(); ++c) {
        auto [s, trial] =
            taken ? tryMove(candidates[c]) : std::move(speculative[c]);
        if (s + 1e-12 < best) {
          taken = true;
          ++clock;
          for (size_t j = 0; j < params.size(); ++j)
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
}

/// Score of each gather of a value that carries a parameter's split (see
/// chooseLayouts): seconds, beyond any real step.
constexpr double kGatherPenalty = 1e6;

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
    if (cheapest - best >= kGatherPenalty / 2)
      os << "; every other layout of it gathers a value it splits whole "
            "again, or fails";
    else
      os << "; its cheapest other layout, " << other.str() << ", would "
         << (cheapest >= best ? "add " : "save ")
         << llvm::format("%.1f", std::abs(cheapest - best) * 1e6)
         << " us per step (communication plus memory charge)";
    for (const std::string &n : p.names)
      out[n] = text;
  }
}

/// Extents the step cuts into blocks (fused projections, sliced or
/// reshaped into [B, ...]), and the granules of such blocks (a head's width).
struct Blockings {
  std::map<int64_t, std::set<int64_t>> blockCounts, granules;
};

Blockings findBlockings(func::FuncOp func) {
  Blockings out;
  std::map<int64_t, std::set<int64_t>> &blockCounts = out.blockCounts;
  std::map<int64_t, std::set<int64_t>> &granules = out.granules;
  // Fused projections: a dimension of size D that the step slices into
  // B aligned pieces is a candidate for a split in B blocks.
  // ... or reshapes into [B, ...] (heads, or q/k/v stacked in front). The
  // extent after B is a granule: where tp does not divide B (25 heads on 4
  // ranks), each rank takes whole heads, the last ranks' chunks padded.
  func.walk([&](Operation *op) {
    std::optional<ShardingRule> rule = shardingRuleOf(op);
    if (!rule || (rule->form != ShardingForm::Regroup &&
                  (rule->form != ShardingForm::Window || !rule->window->takes)))
      return;
    ArrayRef<int64_t> a =
        cast<RankedTensorType>(op->getOperand(0).getType()).getShape();
    ArrayRef<int64_t> b =
        cast<RankedTensorType>(op->getResult(0).getType()).getShape();
    if (rule->form == ShardingForm::Window) {
      const ShardingWindow &w = *rule->window;
      for (size_t d = 0; d < a.size(); ++d)
        if (a[d] != b[d] && b[d] > 0 && w.steps[d] == 1 && a[d] % b[d] == 0 &&
            w.starts[d] % b[d] == 0)
          blockCounts[a[d]].insert(a[d] / b[d]);
      return;
    }
    if (b.size() <= a.size())
      return;
    // A single input dim split into several: find it by matching prefixes.
    size_t i = 0, j = 0;
    while (i < a.size() && j < b.size() && a[i] == b[j])
      ++i, ++j;
    if (i < a.size() && j < b.size() && b[j] > 1 && a[i] % b[j] == 0 &&
        a[i] != b[j]) {
      blockCounts[a[i]].insert(b[j]);
      // Granules where the dim is cut in two, [B, m], even into fewer
      // units than ranks: 3 K/V groups on 4 ranks are held one per rank
      // where the 6 query heads are split 2 per rank (the last rank's
      // chunks all padding).
      if (j + 1 < b.size() && b[j] * b[j + 1] == a[i])
        granules[a[i]].insert(b[j + 1]);
    }
  });
  return out;
}

/// The parameters to search, grouped by signature (the same role in every
/// layer), each with its candidate layouts.
std::vector<Param> searchedParams(func::FuncOp func, int64_t tp,
                                  const ParameterLayouts &fixed,
                                  Blockings &found) {
  std::map<int64_t, std::set<int64_t>> &blockCounts = found.blockCounts;
  std::map<int64_t, std::set<int64_t>> &granules = found.granules;
  std::vector<Param> params;
  std::map<std::string, size_t> groupOf;
  size_t position = 0;
  // The forward pass ends where the loss is computed: autodiff writes the
  // backward after it.
  Operation *forwardEnd = nullptr;
  Operation *terminator = func.getBody().front().getTerminator();
  for (unsigned i = 0; i < func.getNumResults(); ++i)
    if (func.getResultAttr(i, kLossAttr))
      forwardEnd = terminator->getOperand(i).getDefiningOp();
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto name = func.getArgAttrOfType<StringAttr>(i, kParameterAttr);
    if (!name || fixed.count(name.getValue()))
      continue;
    std::string sig;
    signature(func.getArgument(i), 3, forwardEnd, sig);
    sig += "|";
    forwardChain(func.getArgument(i), 6, sig);
    auto [it, fresh] = groupOf.try_emplace(sig, params.size());
    if (!fresh) {
      params[it->second].names.push_back(name.str());
      params[it->second].positions.push_back(position++);
      continue;
    }
    Param p{{name.str()},
            cast<RankedTensorType>(func.getArgument(i).getType()),
            {Layout::replicated()},
            {position++}};
    for (int64_t d = 0; d < p.type.getRank(); ++d) {
      int64_t size = p.type.getDimSize(d);
      // A size tp does not divide is split in padded chunks.
      if (size >= tp)
        p.candidates.push_back(Layout::split(d));
      for (int64_t blocks : blockCounts[size])
        if (blocks > 1 && size % (blocks * tp) == 0)
          p.candidates.push_back(Layout::split(d, blocks));
      // Head-aligned splits, of the whole dimension or of each block.
      std::set<int64_t> blockings{1};
      for (int64_t blocks : blockCounts[size])
        if (size % blocks == 0)
          blockings.insert(blocks);
      for (int64_t blocks : blockings)
        for (int64_t g : granules[size / blocks]) {
          // A granule divides its block into at least tp units (see above).
          Layout l = Layout::split(d, blocks, g);
          if (l.canonical(size, tp) == l &&
              !llvm::is_contained(p.candidates, l))
            p.candidates.push_back(l);
        }
    }
    params.push_back(std::move(p));
  }
  return params;
}

/// A plan's communication plus memory charge (infinite where it gathers a
/// parameter or fails) and its gathers of products, rewritten with the
/// given options.
struct Evaluation {
  double base;
  std::vector<unsigned> gathered; // the parameters whose products they are
  size_t gathers() const { return gathered.size(); }
};

} // namespace

FailureOr<ParameterLayouts> mlir::cleave::chooseLayouts(
    func::FuncOp func, int64_t tp, const ParameterLayouts &fixed,
    const CostModel &cost, LayoutAlternatives *alternatives,
    PartitionOptions *options) {
  Blockings found = findBlockings(func);
  std::vector<Param> params = searchedParams(func, tp, fixed, found);
  ParameterLayouts plan = fixed;
  PartitionIndex index(func);
  // Moves revisit assignments (a neighbour's kept layout, the next sweep):
  // each distinct assignment of the groups is scored once per phase.
  auto notFixed = [&](unsigned arg) {
    return !fixed.count(
        func.getArgAttrOfType<StringAttr>(arg, kParameterAttr).getValue());
  };
  // Tensor parallelism splits computation: a parameter stored split but
  // gathered whole for a use saves memory only (ZeRO's trade, which belongs
  // to a data-parallel axis) at the price of a collective on the critical
  // path every step. Plans that do so are not candidates, unless the user
  // fixed that parameter's layout. The same holds for a value that carries
  // a parameter's split (its column-parallel product, that product's
  // activation or gradient) gathered whole again: it rebuilds on every rank
  // what the replicated parameter computes locally (a K/V head split inside
  // and gathered for attention). Such plans are often the way to a plan
  // without (a column split gathers until the row split follows, in
  // another group), so the first phase of the search only charges their
  // collectives; the second starts from its plan and charges each such
  // gather more than any plan without one, so that the moves removing them
  // win and none is left (the replicated plan has none).
  // Moves are scored from several threads (descend): dry runs only read
  // the step and the index.
  std::map<std::string, Evaluation> evaluated;
  std::mutex evaluatedMutex;
  auto evaluate = [&](const ParameterLayouts &layouts,
                      PartitionOptions how) -> Evaluation {
    std::string key = how.embedProducts ? "e" : "g";
    key += how.partialFanOut ? "f:" : ":";
    for (const Param &p : params)
      key += layouts.lookup(p.names.front()).str() + ";";
    {
      std::lock_guard<std::mutex> lock(evaluatedMutex);
      if (auto it = evaluated.find(key); it != evaluated.end())
        return it->second;
    }
    FailureOr<PartitionResult> r =
        partition(func, tp, layouts, cost, /*rewrite=*/false, &index,
                  /*alternatives=*/nullptr, how);
    Evaluation v{std::numeric_limits<double>::infinity(), {}};
    if (succeeded(r) && llvm::none_of(r->gatheredParameters, notFixed)) {
      v.base = r->seconds + cost.memory * static_cast<double>(r->memoryBytes);
      llvm::copy_if(r->gatheredProducts, std::back_inserter(v.gathered),
                    notFixed);
    }
    std::lock_guard<std::mutex> lock(evaluatedMutex);
    evaluated[key] = v;
    return v;
  };
  PartitionOptions plain, embedding{/*embedProducts=*/true, false};
  auto score = [&](const ParameterLayouts &layouts, int phase) -> double {
    if (phase == 1)
      return evaluate(layouts, plain).base;
    Evaluation v = evaluate(layouts, embedding);
    return v.base + kGatherPenalty * static_cast<double>(v.gathers());
  };
  double best = 0;
  auto search = [&](int phase, const std::vector<bool> *focus,
                    bool everyLayer) {
    best = score(plan, phase);
    // The second phase's moves reach five places: from latent attention's
    // query projection to its output projection, past the latent's two
    // pieces, its norm and its up-projection (with three, the attention
    // was left whole: no single move splits it by heads). The first
    // phase's three keep a plain model's search short (LLaMA-3-8B's
    // compile took 3x as long with five).
    descend(
        params, plan, best,
        [&](const ParameterLayouts &l) { return score(l, phase); }, focus,
        everyLayer, phase == 1 ? 3 : 5);
  };
  search(1, nullptr, false);
  PartitionOptions how = plain;
  if (evaluate(plan, plain).gathers() > 0) {
    // Removing the gathers may cost memory (the replicated K/V projection
    // of multi-query attention: a few percent) or much more (attention
    // left whole where heads do not divide tp, which a head-aligned split
    // would avoid): the second phase's plan is taken when it costs at most
    // kGatherTolerance more by the first phase's own measure.
    // Its moves start at the groups whose products are gathered; the
    // others are tried once a move changes the plan near them.
    ParameterLayouts first = plan;
    double firstBase = evaluate(first, plain).base;
    std::set<std::string> sources;
    for (unsigned arg : evaluate(first, plain).gathered)
      sources.insert(
          func.getArgAttrOfType<StringAttr>(arg, kParameterAttr).str());
    std::vector<bool> focus;
    for (const Param &p : params)
      focus.push_back(llvm::any_of(
          p.names, [&](const std::string &n) { return sources.count(n); }));
    search(2, &focus, false);
    // Moves adapt only the neighbours of the first layer's parameters, so
    // a plan whose gathers go away only when several groups change
    // together, in several layers or far apart (a query split inside
    // heads, its output projection and the K/V pieces, with a bias between
    // them; the last layer's output projection, a group of its own) keeps
    // some, or removes them at too high a price (attention left whole).
    // Then the search runs again from the start under the second phase's
    // measure, its moves adapting the neighbours in every layer.
    auto acceptable = [&] {
      Evaluation v = evaluate(plan, embedding);
      return v.gathers() == 0 && v.base <= (1 + kGatherTolerance) * firstBase;
    };
    if (!acceptable()) {
      ParameterLayouts focused = std::move(plan);
      double focusedBest = best;
      plan = fixed;
      search(2, nullptr, true);
      if (!(best < focusedBest)) {
        plan = std::move(focused);
        best = focusedBest;
      }
    }
    how = embedding;
    if (!(evaluate(plan, embedding).base <=
          (1 + kGatherTolerance) * firstBase)) {
      plan = std::move(first);
      how = plain;
      best = firstBase;
    }
  }
  // The plan's gradients may stay partial where they fan out into several
  // ops and meet again before anything needs them whole (the two norms of
  // a parallel block: one reduction of their sum instead of one each, and
  // the norms' own parameter gradients reduced in the step's one bucket).
  // The layouts do not change, only where the reductions go, so this is
  // the last decision, taken on the chosen plan's cost.
  PartitionOptions fanOut = how;
  fanOut.partialFanOut = true;
  Evaluation kept = evaluate(plan, how), spread = evaluate(plan, fanOut);
  if (spread.gathers() <= kept.gathers() && spread.base < kept.base) {
    how = fanOut;
    best += spread.base - kept.base;
  }
  if (options)
    *options = how;
  auto finalScore = [&](const ParameterLayouts &l) {
    Evaluation v = evaluate(l, how);
    return v.base + (how.embedProducts ? kGatherPenalty * v.gathers() : 0.0);
  };
  if (alternatives)
    explainChoices(params, plan, finalScore, best, *alternatives);
  return plan;
}

//===----------------------------------------------------------------------===//
// Layout rules (--plan)
//===----------------------------------------------------------------------===//

namespace {

/// How a weight is used by its first (the forward's) contraction: which of
/// its dims is contracted. Looks through moves that keep its two dims
/// last (reshapes that only add leading 1s, casts) and through 2-D
/// permutations (torch.onnx writes a Linear as Transpose + MatMul).
std::optional<int64_t> contractedDim(BlockArgument param) {
  auto type = cast<RankedTensorType>(param.getType());
  if (type.getRank() != 2)
    return std::nullopt;
  Operation *first = nullptr;
  int64_t firstDim = -1; // the contracted dim of the value it reads
  bool firstFlipped = false;
  SmallVector<std::pair<Value, bool>> work{
      {param, false}}; // (value, transposed)
  ArrayRef<int64_t> shape = type.getShape();
  while (!work.empty()) {
    auto [v, flipped] = work.pop_back_val();
    for (OpOperand &use : v.getUses()) {
      Operation *user = use.getOwner();
      std::optional<ShardingRule> rule = shardingRuleOf(user);
      if (!rule)
        continue;
      if (rule->movesOperand && use.getOperandNumber() == 0) {
        auto t = cast<RankedTensorType>(user->getResult(0).getType());
        ArrayRef<int64_t> last = t.getShape().take_back(2);
        // (The matrix as it is now: a per-group scale's is its weight's.)
        auto now = cast<RankedTensorType>(v.getType());
        if (rule->form == ShardingForm::Regroup && t.getRank() > 2 &&
            now.getRank() == 2 && last == now.getShape())
          work.push_back({user->getResult(0), flipped});
        // A row's columns regrouped and back (per-group scales: [rows,
        // cols] -> [rows, groups, cols / groups] -> [rows, cols]).
        if (rule->form == ShardingForm::Regroup && !flipped &&
            t.getShape()[0] == shape[0] && now.getShape()[0] == shape[0] &&
            t.getNumElements() == now.getNumElements() &&
            (t.getRank() == 2) != (now.getRank() == 2))
          work.push_back({user->getResult(0), flipped});
        // A 2-D move: the factor of dim 0 lands on dim 1 (a transpose) or
        // stays (a cast).
        if (rule->form == ShardingForm::Einsum && t.getRank() == 2 &&
            cast<RankedTensorType>(v.getType()).getRank() == 2)
          for (const ShardingFactor &f : rule->factors)
            if (f.operandDims[0] == 0 && f.resultDims[0] >= 0)
              work.push_back({user->getResult(0),
                              f.resultDims[0] == 1 ? !flipped : flipped});
        continue;
      }
      unsigned i = use.getOperandNumber();
      if (!rule->contraction) {
        // Scaled in place (an int8 weight times its per-row scales): the
        // same matrix, dim for dim.
        if (keepsDims(*rule, i, v, user, /*matrixOnly=*/false))
          work.push_back({user->getResult(0), flipped});
        continue;
      }
      if (first && !user->isBeforeInBlock(first))
        continue;
      int64_t rank = cast<RankedTensorType>(v.getType()).getRank();
      for (const ShardingFactor &f : rule->factors) {
        if (f.kind != ShardingFactor::Kind::Reduction || f.operandDims[i] < 0)
          continue;
        first = user;
        firstDim = f.operandDims[i] - (rank - 2);
        firstFlipped = flipped;
      }
    }
  }
  if (!first || firstDim < 0 || firstDim > 1)
    return std::nullopt;
  return firstFlipped ? 1 - firstDim : firstDim;
}

/// "R" or "S(DIM[,BLOCKS][;GRANULE])" (Layout::str()'s spelling); none
/// where \p kind is neither.
std::optional<Layout> parseExactLayout(StringRef kind) {
  if (kind == "R")
    return Layout::replicated();
  if (!kind.consume_front("S(") || !kind.consume_back(")"))
    return std::nullopt;
  auto [head, granuleText] = kind.split(';');
  auto [dimText, blocksText] = head.split(',');
  int64_t dim = 0, blocks = 1, granule = 1;
  if (dimText.getAsInteger(10, dim) || dim < 0 || dim > 15 ||
      (!blocksText.empty() && (blocksText.getAsInteger(10, blocks) ||
                               blocks < 1 || blocks > 1 << 20)) ||
      (kind.contains(';') && (granuleText.getAsInteger(10, granule) ||
                              granule < 1 || granule > 1 << 20)))
    return std::nullopt;
  return Layout::split(dim, blocks, granule);
}

} // namespace

LogicalResult mlir::cleave::readLayoutPlan(func::FuncOp func,
                                           StringRef planFile, int64_t tp,
                                           ParameterLayouts &layouts) {
  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> file = openInputFile(planFile, &error);
  if (!file)
    return func.emitError("cannot read --plan '") << planFile << "': " << error;
  SmallVector<StringRef> lines;
  file->getBuffer().split(lines, '\n');
  for (auto [n, raw] : llvm::enumerate(lines)) {
    StringRef line = raw.split('#').first.trim();
    if (line.empty())
      continue;
    auto [pattern, kind] = line.rsplit(' ');
    pattern = pattern.trim();
    kind = kind.trim();
    auto where = [&]() { return planFile.str() + ":" + std::to_string(n + 1); };
    std::optional<Layout> exact = parseExactLayout(kind);
    if (pattern.empty() ||
        (!exact && !llvm::is_contained(
                       {"colwise", "rowwise", "replicate", "vocab"}, kind)))
      return func.emitError(where())
             << ": expected 'REGEX KIND' with KIND colwise, rowwise, "
                "replicate, vocab, R or S(DIM[,BLOCKS][;GRANULE])";
    llvm::Regex regex(pattern);
    std::string why;
    if (!regex.isValid(why))
      return func.emitError(where()) << ": bad regular expression: " << why;
    bool any = false;
    for (BlockArgument arg : func.getArguments()) {
      auto name =
          func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), kParameterAttr);
      if (!name || !regex.match(name.getValue()) ||
          layouts.count(name.getValue()))
        continue;
      any = true;
      auto type = cast<RankedTensorType>(arg.getType());
      Layout l;
      if (exact) {
        // A layout written out (a bundle's other batch shapes take the
        // first shape's, by name): checked against the tensor, not derived.
        l = *exact;
        if (l.isSplit() && (l.dim >= type.getRank() ||
                            type.getDimSize(l.dim) % l.blocks != 0 ||
                            type.getDimSize(l.dim) / l.blocks % l.granule != 0))
          return func.emitError(where())
                 << ": parameter '" << name.getValue() << "' of shape ["
                 << type.getShape() << "] has no layout " << kind.str();
      } else if (kind == "vocab") {
        l = Layout::split(0);
      } else if (kind != "replicate") {
        std::optional<int64_t> contracted = contractedDim(arg);
        if (type.getRank() == 1)
          l = kind == "colwise" ? Layout::split(0) : Layout::replicated();
        else if (!contracted)
          return func.emitError(where())
                 << ": parameter '" << name.getValue()
                 << "' is not a matmul weight, so it has no " << kind.str()
                 << " split";
        else
          l = Layout::split(kind == "rowwise" ? *contracted : 1 - *contracted);
      }
      // A dimension tp does not divide is split in padded chunks; one
      // smaller than tp would leave ranks with nothing but padding.
      if (l.isSplit() && type.getDimSize(l.dim) < tp)
        return func.emitError(where())
               << ": parameter '" << name.getValue() << "' of shape ["
               << type.getShape() << "]: dimension " << l.dim << " of size "
               << type.getDimSize(l.dim) << " is smaller than tp = " << tp;
      layouts[name.getValue()] = l;
    }
    if (!any)
      return func.emitError(where())
             << ": '" << pattern << "' matches no parameter";
  }
  return success();
}

//===----------------------------------------------------------------------===//
// The cleave-choose-layouts pass
//===----------------------------------------------------------------------===//

namespace {

struct ChooseLayoutsPass
    : public mlir::cleave::impl::ChooseLayoutsPassBase<ChooseLayoutsPass> {
  using ChooseLayoutsPassBase::ChooseLayoutsPassBase;

  void runOnOperation() override {
    if (tp < 1) {
      getOperation().emitError("tp must be at least 1");
      return signalPassFailure();
    }
    MLIRContext *ctx = &getContext();
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      ParameterLayouts fixed;
      if (!planFile.empty() &&
          failed(readLayoutPlan(func, planFile, tp, fixed)))
        return signalPassFailure();
      LayoutAlternatives alternatives;
      PartitionOptions how;
      FailureOr<ParameterLayouts> layouts =
          chooseLayouts(func, tp, fixed, CostModel(), &alternatives, &how);
      if (failed(layouts))
        return signalPassFailure();
      Builder b(ctx);
      func->setAttr(kLayoutsForAttr, b.getI64IntegerAttr(tp));
      SmallVector<StringRef, 2> words;
      if (how.embedProducts)
        words.push_back("embed_products");
      if (how.partialFanOut)
        words.push_back("partial_fan_out");
      func->setAttr(kPartitionHowAttr, b.getStringAttr(llvm::join(words, ",")));
      for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i) {
        auto name = func.getArgAttrOfType<StringAttr>(i, kParameterAttr);
        if (!name)
          continue;
        Layout l = layouts->lookup(name.getValue());
        if (l.isSplit())
          func.setArgAttr(i, kLayoutAttr,
                          LayoutAttr::get(ctx, l.dim, l.blocks, l.granule,
                                          /*dp_dim=*/-1));
        if (auto it = alternatives.find(name.getValue());
            it != alternatives.end())
          func.setArgAttr(i, kLayoutWhyAttr, b.getStringAttr(it->second));
      }
    }
  }
};

} // namespace

FailureOr<RecordedLayouts> mlir::cleave::readRecordedLayouts(func::FuncOp func,
                                                             int64_t tp) {
  RecordedLayouts rec;
  if (auto words = func->getAttrOfType<StringAttr>(kPartitionHowAttr)) {
    SmallVector<StringRef, 2> parts;
    words.getValue().split(parts, ',', -1, /*KeepEmpty=*/false);
    rec.how.emplace();
    for (StringRef w : parts) {
      if (w == "embed_products")
        rec.how->embedProducts = true;
      else if (w == "partial_fan_out")
        rec.how->partialFanOut = true;
      else
        return func.emitError("unknown partitioning option '")
               << w << "' in " << kPartitionHowAttr;
    }
  }
  bool recorded = false;
  if (auto forTp = func->getAttrOfType<IntegerAttr>(kLayoutsForAttr)) {
    if (forTp.getInt() != tp)
      return func.emitError("the layouts were chosen for tp=")
             << forTp.getInt() << " (--cleave-choose-layouts), not tp=" << tp;
    recorded = true;
  }
  SmallVector<StringRef> whole;
  for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i) {
    auto name = func.getArgAttrOfType<StringAttr>(i, kParameterAttr);
    if (!name)
      continue;
    if (auto text = func.getArgAttrOfType<StringAttr>(i, kLayoutWhyAttr))
      rec.why[name.getValue()] = text.getValue().str();
    auto layout = func.getArgAttrOfType<LayoutAttr>(i, kLayoutAttr);
    if (!layout || layout.getDim() < 0) {
      whole.push_back(name.getValue());
      continue;
    }
    rec.layouts[name.getValue()] =
        Layout::split(layout.getDim(), layout.getBlocks(), layout.getGranule());
  }
  if (!rec.layouts.empty() || recorded)
    for (StringRef name : whole)
      rec.layouts[name] = Layout::replicated();
  return rec;
}

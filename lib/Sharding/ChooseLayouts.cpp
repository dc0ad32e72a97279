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

using namespace mlir;
using namespace mlir::cleave;

namespace {

struct Param {
  std::string name;
  RankedTensorType type;
  SmallVector<Layout> candidates;
};

} // namespace

FailureOr<ParameterLayouts>
mlir::cleave::chooseLayouts(func::FuncOp func, int64_t tp,
                            const ParameterLayouts &fixed,
                            const CostModel &cost) {
  std::vector<Param> params;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto name = func.getArgAttrOfType<StringAttr>(i, kParameterAttr);
    if (!name || fixed.count(name.getValue()))
      continue;
    Param p{name.str(),
            cast<RankedTensorType>(func.getArgument(i).getType()),
            {Layout::replicated()}};
    for (int64_t d = 0; d < p.type.getRank(); ++d)
      if (p.type.getDimSize(d) % tp == 0 && p.type.getDimSize(d) >= tp)
        p.candidates.push_back(Layout::split(d));
    params.push_back(std::move(p));
  }
  ParameterLayouts plan = fixed;
  auto score = [&](const ParameterLayouts &layouts) -> double {
    FailureOr<PartitionResult> r =
        partition(func, tp, layouts, cost, /*rewrite=*/false);
    if (failed(r))
      return std::numeric_limits<double>::infinity();
    return r->seconds + cost.memory * static_cast<double>(r->memoryBytes);
  };
  double best = score(plan);
  // Pairs: for every parameter, try it together with each other parameter's
  // candidates is quadratic; instead pair each parameter with the next one
  // in argument order (a layer's weights are adjacent), which covers the
  // column/row pairs of MLPs and attention.
  for (int sweep = 0; sweep < 4; ++sweep) {
    bool improved = false;
    for (size_t i = 0; i < params.size(); ++i) {
      const Param &p = params[i];
      for (const Layout &l : p.candidates) {
        ParameterLayouts trial = plan;
        trial[p.name] = l;
        double s = score(trial);
        if (s + 1e-12 < best) {
          best = s;
          plan = std::move(trial);
          improved = true;
        }
      }
      for (size_t j = i + 1; j < std::min(params.size(), i + 4); ++j)
        for (const Layout &l : p.candidates)
          for (const Layout &m : params[j].candidates) {
            ParameterLayouts trial = plan;
            trial[p.name] = l;
            trial[params[j].name] = m;
            double s = score(trial);
            if (s + 1e-12 < best) {
              best = s;
              plan = std::move(trial);
              improved = true;
            }
          }
    }
    if (!improved)
      break;
  }
  return plan;
}

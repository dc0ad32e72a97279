//===- reduce_plan.cpp - How a reduction is walked ------------------------===//

#include "core/reduce_plan.h"

#include "core/kernel_info.h"

namespace cleave::rt {

ReduceGeometry planReduction(const std::vector<int64_t> &shape,
                             const std::vector<bool> &reduced) {
  ReduceGeometry plan;
  int64_t kept = 1;
  for (size_t d = 0; d < shape.size(); ++d)
    if (reduced[d])
      plan.reduceCount *= shape[d];
    else
      kept *= shape[d];
  plan.numOutputs = kept;
  // Merge adjacent dims of the same status; unit dims are dropped.
  struct Group {
    bool reduced;
    int64_t size, stride;
  };
  std::vector<Group> groups;
  std::vector<int64_t> strides = contiguousStrides(shape);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1)
      continue;
    if (!groups.empty() && groups.back().reduced == reduced[d]) {
      groups.back().size *= shape[d];
      groups.back().stride = strides[d];
    } else {
      groups.push_back({reduced[d], shape[d], strides[d]});
    }
  }
  if (!groups.empty() && !groups.back().reduced) {
    plan.lanes = groups.back().size;
    groups.pop_back();
  } else if (!groups.empty()) {
    plan.innerRun = groups.back().size;
    groups.pop_back();
  }
  for (const Group &g : groups) {
    (g.reduced ? plan.redDims : plan.keptDims).push_back(g.size);
    (g.reduced ? plan.redStrides : plan.keptStrides).push_back(g.stride);
  }
  return plan;
}

} // namespace cleave::rt

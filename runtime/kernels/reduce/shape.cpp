//===- shape.cpp - The reductions' shape rules ----------------------------===//

#include "core/shape_rules.h"

namespace cleave::rt {

namespace {
/// 'axes' are sorted, unique dims of the operand, and the result holds the
/// elements the others leave.
Status checkReduce(const KernelInfo &info, const std::vector<int64_t> &axes) {
  const TensorType &a = info.operand(0), &r = info.result(0);
  std::vector<bool> reduced(a.shape.size(), false);
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] < 0 || axes[i] >= a.rank() || (i && axes[i] <= axes[i - 1]))
      return Status::error("attribute 'axes' must be sorted, unique dims of " +
                           a.str());
    reduced[axes[i]] = true;
  }
  int64_t kept = 1;
  for (size_t d = 0; d < a.shape.size(); ++d)
    if (!reduced[d])
      kept *= a.shape[d];
  if (r.numElements() != kept)
    return Status::error("result " + r.str() + " does not have the " +
                         std::to_string(kept) + " elements of " + a.str() +
                         " reduced over 'axes'");
  return Status::ok();
}
} // namespace

#define CLEAVE_REDUCE_RULE(NAME)                                               \
  Status check_##NAME(const KernelInfo &info) {                                \
    return checkReduce(info, info.params<schema::Kernel::k_##NAME>().axes);    \
  }
CLEAVE_REDUCE_RULE(reduce_sum)
CLEAVE_REDUCE_RULE(reduce_mean)
CLEAVE_REDUCE_RULE(reduce_max)
CLEAVE_REDUCE_RULE(reduce_min)
CLEAVE_REDUCE_RULE(reduce_prod)
#undef CLEAVE_REDUCE_RULE

} // namespace cleave::rt

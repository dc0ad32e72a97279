//===- shape.cpp - Data movement's shape rules ----------------------------===//
//
// transpose, broadcast, concat, slice and slice_scatter, gather and
// scatter_add, check_index. The index values themselves are data, checked
// by the kernels as they run.
//
//===----------------------------------------------------------------------===//

#include "core/shape_rules.h"

namespace cleave::rt {

namespace {

/// A strided window (element i of `window` along dim d is element
/// starts[d] + i * steps[d] of `whole`) stays inside `whole`. Shared by slice
/// and its adjoint, whose Params (\p P) share the fields.
template <typename P>
Status checkStridedWindow(const P &attrs, const TensorType &whole,
                          const TensorType &window, const char *kernel,
                          const char *wholeRole) {
  if (window.rank() != whole.rank())
    return Status::error(window.str() + " does not have the rank of " +
                         whole.str());
  size_t rank = whole.shape.size();
  const std::vector<int64_t> &starts = attrs.starts;
  std::vector<int64_t> steps =
      attrs.steps.value_or(std::vector<int64_t>(rank, 1));
  if (starts.size() != rank || steps.size() != rank)
    return Status::error("attributes 'starts' and 'steps' need " +
                         std::to_string(rank) + " ints, one per dim of " +
                         whole.str());
  for (size_t d = 0; d < rank; ++d) {
    int64_t step = steps[d], first = starts[d], last = 0;
    if (step == 0)
      return Status::error("attribute 'steps' has a zero step in dim " +
                           std::to_string(d));
    if (window.shape[d] == 0)
      continue;
    // Both ends of the walk along d must land inside `whole`.
    bool overflow = __builtin_mul_overflow(window.shape[d] - 1, step, &last) ||
                    __builtin_add_overflow(last, first, &last);
    if (overflow || first < 0 || first >= whole.shape[d] || last < 0 ||
        last >= whole.shape[d])
      return Status::error(
          std::string(kernel) + " of dim " + std::to_string(d) + " (start " +
          std::to_string(first) + ", step " + std::to_string(step) + ", " +
          std::to_string(window.shape[d]) + " elements) leaves " + wholeRole +
          " " + whole.str());
  }
  return Status::ok();
}

/// \p table gathered along \p axis by \p indices: table.shape[:axis] +
/// indices.shape + table.shape[axis + 1:].
std::vector<int64_t> gatheredShape(const TensorType &table, int64_t axis,
                                   const TensorType &indices) {
  std::vector<int64_t> shape(table.shape.begin(), table.shape.begin() + axis);
  shape.insert(shape.end(), indices.shape.begin(), indices.shape.end());
  shape.insert(shape.end(), table.shape.begin() + axis + 1, table.shape.end());
  return shape;
}

} // namespace

Status check_transpose(const KernelInfo &info) {
  const TensorType &a = info.operand(0), &r = info.result(0);
  const std::vector<int64_t> &perm =
      info.params<schema::Kernel::k_transpose>().perm;
  if (perm.size() != a.shape.size())
    return Status::error("attribute 'perm' needs " +
                         std::to_string(a.shape.size()) + " ints, got " +
                         std::to_string(perm.size()));
  std::vector<bool> seen(perm.size(), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= a.rank() || seen[p])
      return Status::error("attribute 'perm' is not a permutation of " +
                           std::to_string(a.rank()) + " dims");
    seen[p] = true;
  }
  if (r.rank() != a.rank())
    return Status::error("result " + r.str() + " does not have the rank of " +
                         a.str());
  for (size_t i = 0; i < perm.size(); ++i)
    if (r.shape[i] != a.shape[perm[i]])
      return Status::error("result " + r.str() + " is not operand " + a.str() +
                           " permuted by 'perm'");
  return Status::ok();
}

Status check_broadcast(const KernelInfo &info) {
  return checkOperandsBroadcast(info, {"operand"});
}

Status check_concat(const KernelInfo &info) {
  const TensorType &r = info.result(0);
  int64_t axis = info.params<schema::Kernel::k_concat>().axis;
  if (Status s = checkAxis(axis, r, "result "); !s)
    return s;
  int64_t axisTotal = 0;
  for (size_t k = 0; k < info.operands.size(); ++k) {
    const TensorType &a = info.operand(k);
    bool ok = a.rank() == r.rank();
    for (int64_t d = 0; ok && d < r.rank(); ++d)
      ok = d == axis || a.shape[d] == r.shape[d];
    if (!ok)
      return Status::error("operand " + std::to_string(k) + " " + a.str() +
                           " does not match result " + r.str() +
                           " outside axis " + std::to_string(axis));
    axisTotal += a.shape[axis];
  }
  if (axisTotal != r.shape[axis])
    return Status::error("operands' sizes along axis " + std::to_string(axis) +
                         " sum to " + std::to_string(axisTotal) + ", result " +
                         r.str() + " has " + std::to_string(r.shape[axis]));
  return Status::ok();
}

Status check_slice(const KernelInfo &info) {
  return checkStridedWindow(info.params<schema::Kernel::k_slice>(),
                            info.operand(0), info.result(0), "slice",
                            "the operand");
}

Status check_slice_scatter(const KernelInfo &info) {
  return checkStridedWindow(info.params<schema::Kernel::k_slice_scatter>(),
                            info.result(0), info.operand(0), "slice_scatter",
                            "the result");
}

Status check_check_index(const KernelInfo &info) {
  return checkSameShape(info.operand(0), info.result(0));
}

Status check_gather(const KernelInfo &info) {
  const TensorType &data = info.operand(0), &idx = info.operand(1),
                   &r = info.result(0);
  const auto &attrs = info.params<schema::Kernel::k_gather>();
  if (Status s = checkAxis(attrs.axis, data, "data "); !s)
    return s;
  if (r.shape != gatheredShape(data, attrs.axis, idx))
    return Status::error("result " + r.str() + " does not have the shape of " +
                         "data " + data.str() + " gathered along axis " +
                         std::to_string(attrs.axis) + " by " + idx.str());
  ShardRows unused;
  return readShardRows(info, attrs, data.shape[attrs.axis], &unused);
}

Status check_scatter_add(const KernelInfo &info) {
  const TensorType &upd = info.operand(0), &idx = info.operand(1),
                   &r = info.result(0);
  const auto &attrs = info.params<schema::Kernel::k_scatter_add>();
  if (Status s = checkAxis(attrs.axis, r, "result "); !s)
    return s;
  if (upd.shape != gatheredShape(r, attrs.axis, idx))
    return Status::error("updates " + upd.str() + " do not have the shape of " +
                         "result " + r.str() + " gathered along axis " +
                         std::to_string(attrs.axis) + " by indices " +
                         idx.str());
  ShardRows unused;
  return readShardRows(info, attrs, r.shape[attrs.axis], &unused);
}

} // namespace cleave::rt

//===- shape_rules.cpp - Dispatch to the kernels' shape rules -------------===//
//
// The rules themselves live with their kernel families
// (runtime/kernels/<family>/shape.cpp); a kernel of kernels.def without one
// fails to link.
//
//===----------------------------------------------------------------------===//

#include "core/shape_rules.h"

namespace cleave::rt {

namespace {
using RuleFn = Status (*)(const KernelInfo &);
constexpr RuleFn kRules[] = {
#define CLEAVE_KERNEL(NAME) &check_##NAME,
#include "plan/kernels.def"
};
static_assert(sizeof(kRules) / sizeof(kRules[0]) == schema::kNumKernels);
} // namespace

Status checkShapeRule(const KernelInfo &info) {
  if (!info.kernelId)
    return Status::error("internal: a shape rule for an instruction the "
                         "schema did not accept");
  return kRules[static_cast<size_t>(*info.kernelId)](info);
}

Status checkSameShape(const TensorType &operand, const TensorType &result) {
  if (operand.shape != result.shape)
    return Status::error("operand " + operand.str() + " and result " +
                         result.str() + " must have the same shape");
  return Status::ok();
}

Status checkOperandsBroadcast(const KernelInfo &info,
                              std::initializer_list<const char *> names) {
  size_t k = 0;
  for (const char *name : names) {
    if (Status s = checkBroadcastable(info.operand(k++), info.result(0), name);
        !s)
      return s;
  }
  return Status::ok();
}

Status checkAxis(int64_t axis, const TensorType &t, const char *role) {
  if (axis < 0 || axis >= t.rank())
    return Status::error("attribute 'axis' " + std::to_string(axis) +
                         " out of range for " + role + t.str());
  return Status::ok();
}

} // namespace cleave::rt

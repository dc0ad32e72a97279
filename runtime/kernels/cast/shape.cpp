//===- shape.cpp - cast's and copy's shape rules --------------------------===//

#include "core/shape_rules.h"

namespace cleave::rt {

Status check_cast(const KernelInfo &info) {
  const TensorType &a = info.operand(0), &r = info.result(0);
  if (Status s = checkSameShape(a, r); !s)
    return s;
  if (info.params<schema::Kernel::k_cast>().range_checked &&
      (a.dtype != DType::F64 || r.dtype != DType::F32))
    return Status::error("cast: range_checked is for f64 -> f32, not " +
                         a.str() + " -> " + r.str());
  return Status::ok();
}

Status check_copy(const KernelInfo &info) {
  const TensorType &a = info.operand(0), &r = info.result(0);
  // Element count rather than shape: copying out of a reshaped alias is the
  // point of this kernel.
  if (a.numElements() != r.numElements())
    return Status::error("operand " + a.str() + " and result " + r.str() +
                         " must have the same dtype and element count");
  return Status::ok();
}

} // namespace cleave::rt

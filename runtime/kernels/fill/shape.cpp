//===- shape.cpp - fill's, iota's and random_uniform's shape rules --------===//
//
// The generators read no tensor: their rules are their attributes against
// the result. iota and random_uniform's readers (core/kernel_info.h) are the
// geometry both backends run.
//
//===----------------------------------------------------------------------===//

#include "core/shape_rules.h"

namespace cleave::rt {

Status check_fill(const KernelInfo &info) {
  const TensorType &r = info.result(0);
  if (info.params<schema::Kernel::k_fill>().value.isFloat !=
      (r.dtype == DType::F32))
    return Status::error(std::string("attribute 'value' must be ") +
                         (r.dtype == DType::F32 ? "a float" : "an integer") +
                         " for result " + r.str());
  return Status::ok();
}

Status check_iota(const KernelInfo &info) {
  IotaGeometry unused;
  return readIotaGeometry(info, &unused);
}

Status check_random_uniform(const KernelInfo &info) {
  RandomGeometry unused;
  return readRandomGeometry(info, &unused);
}

} // namespace cleave::rt

//===- shape.cpp - softmax's and cross-entropy's shape rules --------------===//
//
// Cross-entropy's rule is its geometry reader (core/nn_geometry.h), which
// both backends run to view the logits.
//
//===----------------------------------------------------------------------===//

#include "core/nn_geometry.h"
#include "core/shape_rules.h"

namespace cleave::rt {

Status check_softmax(const KernelInfo &info) {
  if (Status s = checkSameShape(info.operand(0), info.result(0)); !s)
    return s;
  return checkAxis(info.params<schema::Kernel::k_softmax>().axis,
                   info.operand(0), "");
}

Status check_log_softmax(const KernelInfo &info) {
  if (Status s = checkSameShape(info.operand(0), info.result(0)); !s)
    return s;
  return checkAxis(info.params<schema::Kernel::k_log_softmax>().axis,
                   info.operand(0), "");
}

Status check_cross_entropy(const KernelInfo &info) {
  nn::CrossEntropyGeometry unused;
  return nn::readCrossEntropyGeometry(info, /*backward=*/false, &unused);
}

Status check_cross_entropy_backward(const KernelInfo &info) {
  nn::CrossEntropyGeometry unused;
  return nn::readCrossEntropyGeometry(info, /*backward=*/true, &unused);
}

} // namespace cleave::rt

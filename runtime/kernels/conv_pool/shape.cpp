//===- shape.cpp - Convolutions' and pools' shape rules -------------------===//
//
// The rules are the geometry readers (core/nn_geometry.h) both backends run,
// each told which of its tensors plays input, weight and output.
//
//===----------------------------------------------------------------------===//

#include "core/nn_geometry.h"
#include "core/shape_rules.h"

namespace cleave::rt {

Status check_conv2d(const KernelInfo &info) {
  nn::ConvGeometry p;
  if (Status s = nn::readConvGeometry(info, info.operand(0), info.operand(1),
                                      info.result(0),
                                      {"input", "weight", "result"}, &p);
      !s)
    return s;
  if (info.hasOperand(2) && info.operand(2).shape != std::vector<int64_t>{p.f})
    return Status::error("bias " + info.operand(2).str() + " must be f32[" +
                         std::to_string(p.f) + "]");
  return Status::ok();
}

Status check_conv2d_backward_input(const KernelInfo &info) {
  nn::ConvGeometry unused;
  return nn::readConvGeometry(
      info, info.result(0), info.operand(1), info.operand(0),
      {"grad_in (result)", "weight", "grad_out"}, &unused);
}

Status check_conv2d_backward_filter(const KernelInfo &info) {
  nn::ConvGeometry unused;
  return nn::readConvGeometry(
      info, info.operand(0), info.result(0), info.operand(1),
      {"input", "grad_w (result)", "grad_out"}, &unused);
}

Status check_max_pool2d(const KernelInfo &info) {
  nn::PoolGeometry unused;
  return nn::readPoolGeometry(info, info.operand(0), info.result(0), "operand",
                              "result", /*isMax=*/true, &unused);
}

Status check_avg_pool2d(const KernelInfo &info) {
  nn::PoolGeometry unused;
  return nn::readPoolGeometry(info, info.operand(0), info.result(0), "operand",
                              "result", /*isMax=*/false, &unused);
}

Status check_max_pool2d_backward(const KernelInfo &info) {
  const TensorType &x = info.operand(0), &r = info.result(0);
  nn::PoolGeometry unused;
  if (Status s = nn::readPoolGeometry(info, x, info.operand(1), "input",
                                      "grad_out", /*isMax=*/true, &unused);
      !s)
    return s;
  if (r.shape != x.shape)
    return Status::error("grad_in (result) " + r.str() +
                         " must have the type of the input " + x.str());
  return Status::ok();
}

Status check_avg_pool2d_backward(const KernelInfo &info) {
  nn::PoolGeometry unused;
  return nn::readPoolGeometry(info, info.result(0), info.operand(0),
                              "grad_in (result)", "grad_out",
                              /*isMax=*/false, &unused);
}

} // namespace cleave::rt

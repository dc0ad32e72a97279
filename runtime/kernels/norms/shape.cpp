//===- shape.cpp - layer_norm's and batch_norm's shape rules --------------===//

#include "core/shape_rules.h"

namespace cleave::rt {

Status check_layer_norm(const KernelInfo &info) {
  const TensorType &x = info.operand(0), &y = info.result(0);
  if (y.shape != x.shape)
    return Status::error("result " + y.str() + " must have the type of " +
                         x.str());
  int64_t axis = info.params<schema::Kernel::k_layer_norm>().axis;
  if (axis < 0 || axis >= x.rank())
    return Status::error("attribute 'axis' " + std::to_string(axis) +
                         " out of range for " + x.str());
  std::vector<int64_t> normShape(x.shape.begin() + axis, x.shape.end());
  for (size_t k = 1; k < 3; ++k)
    if (info.hasOperand(k) && info.operand(k).shape != normShape)
      return Status::error(std::string(k == 1 ? "scale " : "bias ") +
                           info.operand(k).str() +
                           " must be f32 of x.shape[axis:]");
  int64_t outer = product(x.shape, 0, axis);
  for (size_t k = 1; k < 3; ++k)
    if (info.hasResult(k) && info.result(k).numElements() != outer)
      return Status::error(std::string(k == 1 ? "mean " : "inv_std_dev ") +
                           info.result(k).str() + " must be f32 with " +
                           std::to_string(outer) + " elements");
  return Status::ok();
}

Status check_layer_norm_backward(const KernelInfo &info) {
  const TensorType &x = info.operand(0);
  int64_t axis = info.params<schema::Kernel::k_layer_norm_backward>().axis;
  if (axis < 0 || axis >= x.rank())
    return Status::error("attribute 'axis' " + std::to_string(axis) +
                         " out of range for " + x.str());
  if (info.operand(3).shape != x.shape || info.result(0).shape != x.shape)
    return Status::error("grad " + info.operand(3).str() + " and grad_x " +
                         info.result(0).str() + " must have the shape of " +
                         x.str());
  int64_t outer = product(x.shape, 0, axis);
  for (size_t k = 1; k < 3; ++k)
    if (info.operand(k).numElements() != outer)
      return Status::error(std::string(k == 1 ? "mean " : "inv_std_dev ") +
                           info.operand(k).str() + " must have " +
                           std::to_string(outer) + " elements");
  std::vector<int64_t> normShape(x.shape.begin() + axis, x.shape.end());
  if (info.hasOperand(4) && info.operand(4).shape != normShape)
    return Status::error("scale " + info.operand(4).str() +
                         " must be f32 of x.shape[axis:]");
  for (size_t k = 1; k < 3; ++k)
    if (info.result(k).shape != normShape)
      return Status::error(std::string(k == 1 ? "grad_scale " : "grad_bias ") +
                           info.result(k).str() +
                           " must be f32 of x.shape[axis:]");
  return Status::ok();
}

Status check_batch_norm(const KernelInfo &info) {
  const TensorType &x = info.operand(0), &y = info.result(0);
  if (x.rank() < 2)
    return Status::error("operand " + x.str() + " must be [N, C, ...]");
  if (y.shape != x.shape)
    return Status::error("result " + y.str() + " must have the type of " +
                         x.str());
  // Operand names (not written as the attention attribute scale is).
  static const char *const names[] = {"", "scale operand", "bias", "mean",
                                      "var"};
  std::vector<int64_t> channels{x.shape[1]};
  for (size_t k = 1; k < 5; ++k)
    if (info.operand(k).shape != channels)
      return Status::error(std::string(names[k]) + " " + info.operand(k).str() +
                           " must be f32[" + std::to_string(channels[0]) + "]");
  return Status::ok();
}

} // namespace cleave::rt

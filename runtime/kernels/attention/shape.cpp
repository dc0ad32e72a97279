//===- shape.cpp - attention's shape rules --------------------------------===//
//
// The rule is the geometry reader (core/nn_geometry.h) both backends run.
//
//===----------------------------------------------------------------------===//

#include "core/nn_geometry.h"
#include "core/shape_rules.h"

namespace cleave::rt {

Status check_attention(const KernelInfo &info) {
  nn::AttentionGeometry unused;
  return nn::readAttentionGeometry(info, /*backward=*/false, &unused);
}

Status check_attention_backward(const KernelInfo &info) {
  nn::AttentionGeometry unused;
  return nn::readAttentionGeometry(info, /*backward=*/true, &unused);
}

} // namespace cleave::rt

//===- types.cpp - Tensor types and descriptions --------------------------===//
//
// Shared by the CPU runtime and the CUDA backend plugin, which compiles this
// file too (it needs no protobuf).
//
//===----------------------------------------------------------------------===//

#include "core/program.h"

namespace cleave::rt {

size_t dtypeSize(DType dtype) {
  switch (dtype) {
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::I64:
    return 8;
  case DType::Bool:
    return 1;
  }
  return 1;
}

const char *dtypeName(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return "f32";
  case DType::I64:
    return "i64";
  case DType::I32:
    return "i32";
  case DType::Bool:
    return "bool";
  }
  return "?";
}

int64_t HostTensor::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

HostTensor HostTensor::zeros(DType dtype, std::vector<int64_t> shape) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.assign(static_cast<size_t>(t.numElements()) * dtypeSize(dtype), 0);
  return t;
}

std::string describeInstruction(size_t index, const std::string &kernel,
                                const std::string &location) {
  std::string s = "instruction " + std::to_string(index) + " ('" + kernel + "'";
  if (!location.empty())
    s += " at " + location;
  return s + ")";
}

std::string describeTensor(DType dtype, const std::vector<int64_t> &shape) {
  std::string s = std::string(dtypeName(dtype)) + " [";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

} // namespace cleave::rt

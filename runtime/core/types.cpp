//===- types.cpp - Tensor types and descriptions --------------------------===//
//
// Shared by the CPU runtime and the CUDA backend plugin, which compiles this
// file too (it needs no protobuf).
//
//===----------------------------------------------------------------------===//

#include "core/convert.h"
#include "core/program.h"

#include <cmath>

namespace cleave::rt {

size_t dtypeSize(DType dtype) {
  switch (dtype) {
  case DType::F32:
  case DType::I32:
  case DType::U32:
    return 4;
  case DType::I64:
  case DType::F64:
    return 8;
  case DType::F16:
  case DType::BF16:
  case DType::I16:
  case DType::U16:
    return 2;
  case DType::Bool:
  case DType::I8:
  case DType::U8:
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
  case DType::F64:
    return "f64";
  case DType::F16:
    return "f16";
  case DType::BF16:
    return "bf16";
  case DType::I8:
    return "i8";
  case DType::I16:
    return "i16";
  case DType::U8:
    return "u8";
  case DType::U16:
    return "u16";
  case DType::U32:
    return "u32";
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

bool widenToF32(HostTensor *t) {
  if (t->dtype == DType::F32)
    return true;
  int64_t n = t->numElements();
  std::vector<uint8_t> out(static_cast<size_t>(n) * sizeof(float));
  float *dst = reinterpret_cast<float *>(out.data());
  switch (t->dtype) {
  case DType::F16:
  case DType::BF16: {
    const uint16_t *src = t->data<uint16_t>();
    for (int64_t i = 0; i < n; ++i)
      dst[i] =
          t->dtype == DType::F16 ? halfToFloat(src[i]) : bf16ToFloat(src[i]);
    break;
  }
  case DType::F64: {
    const double *src = t->data<double>();
    for (int64_t i = 0; i < n; ++i) {
      if (std::isfinite(src[i]) &&
          std::fabs(src[i]) > double(std::numeric_limits<float>::max()))
        return false;
      dst[i] = static_cast<float>(src[i]);
    }
    break;
  }
  default:
    return false;
  }
  t->dtype = DType::F32;
  t->bytes = std::move(out);
  return true;
}

bool narrowFromF32(HostTensor *t, DType to) {
  if (t->dtype != DType::F32 || (to != DType::BF16 && to != DType::F16))
    return false;
  int64_t n = t->numElements();
  std::vector<uint8_t> out(static_cast<size_t>(n) * sizeof(uint16_t));
  auto *dst = reinterpret_cast<uint16_t *>(out.data());
  const float *src = t->data<float>();
  for (int64_t i = 0; i < n; ++i)
    dst[i] = to == DType::BF16 ? floatToBf16(src[i]) : floatToHalf(src[i]);
  t->dtype = to;
  t->bytes = std::move(out);
  return true;
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

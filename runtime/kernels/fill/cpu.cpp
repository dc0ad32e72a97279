//===- cpu.cpp - The fill kernel ------------------------------------------===//

#include "cpu/cpu_kernel.h"

#include <algorithm>

namespace cleave::rt {

namespace {
template <typename T> KernelFn filler(int64_t count, T value) {
  return [count, value](const KernelArgs &args) {
    T *out = static_cast<T *>(args.results[0]);
#pragma omp parallel for if (count > kParallelThreshold)
    for (int64_t i = 0; i < count; ++i)
      out[i] = value;
    return Status::ok();
  };
}
} // namespace

Status prepare_fill(const KernelInfo &info, KernelFn *fn) {
  const TensorType &r = info.result(0);
  int64_t count = r.numElements();
  const schema::ScalarValue &value =
      info.params<schema::Kernel::k_fill>().value;
  if (r.dtype == DType::F32) {
    *fn = filler<float>(count, static_cast<float>(value.f));
    return Status::ok();
  }
  int64_t v = value.i;
  switch (r.dtype) {
  case DType::I64:
    *fn = filler<int64_t>(count, v);
    break;
  case DType::I32:
    *fn = filler<int32_t>(count, static_cast<int32_t>(v));
    break;
  case DType::Bool:
    *fn = filler<uint8_t>(count, v != 0);
    break;
  default:
    return Status::error("fill: unsupported dtype");
  }
  return Status::ok();
}

Status prepare_iota(const KernelInfo &info, KernelFn *fn) {
  IotaGeometry g;
  if (Status s = readIotaGeometry(info, &g); !s)
    return s;
  int64_t inner = g.inner, extent = g.extent, count = g.count;
  bool wide = g.wide;
  *fn = [=](const KernelArgs &args) {
#pragma omp parallel for if (count > kParallelThreshold)
    for (int64_t i = 0; i < count; ++i) {
      int64_t v = i / inner % extent;
      if (wide)
        static_cast<int64_t *>(args.results[0])[i] = v;
      else
        static_cast<int32_t *>(args.results[0])[i] = static_cast<int32_t>(v);
    }
    return Status::ok();
  };
  return Status::ok();
}

} // namespace cleave::rt

//===- cuda.cu - fill and iota on the GPU ---------------------------------===//
//
// The CUDA counterparts of cpu.cpp beside it; iota's layout is
// readIotaGeometry's (core/kernel_info.h), which both backends read.
//
//===----------------------------------------------------------------------===//

#include "cuda/cuda_common.cuh"

namespace cleave::rt::cuda {

namespace {

template <typename T> __global__ void fillKernel(int64_t n, T value, T *out) {
  CLEAVE_GRID_LOOP(i, n) { out[i] = value; }
}

template <typename T> DeviceFn fillFn(int64_t n, T value) {
  return [n, value](const KernelArgs &args, Context &ctx) -> Status {
    if (n == 0)
      return Status::ok();
    fillKernel<<<gridFor(n), kBlock, 0, ctx.stream>>>(
        n, value, static_cast<T *>(args.results[0]));
    return launchStatus("fill");
  };
}

} // namespace

Status prepare_fill(const KernelInfo &info, DeviceFn *fn) {
  const TensorType &r = info.result(0);
  int64_t count = r.numElements();
  const schema::ScalarValue &value =
      info.params<schema::Kernel::k_fill>().value;
  if (r.dtype == DType::F32) {
    *fn = fillFn<float>(count, static_cast<float>(value.f));
    return Status::ok();
  }
  int64_t v = value.i;
  switch (r.dtype) {
  case DType::I64:
    *fn = fillFn<int64_t>(count, v);
    break;
  case DType::I32:
    *fn = fillFn<int32_t>(count, static_cast<int32_t>(v));
    break;
  case DType::Bool:
    *fn = fillFn<uint8_t>(count, v != 0);
    break;
  default:
    return Status::error("fill: unsupported dtype");
  }
  return Status::ok();
}

template <typename T>
__global__ void iotaKernel(T *out, int64_t count, int64_t inner,
                           int64_t extent) {
  CLEAVE_GRID_LOOP(i, count) { out[i] = static_cast<T>(i / inner % extent); }
}

Status prepare_iota(const KernelInfo &info, DeviceFn *fn) {
  IotaGeometry g;
  if (Status s = readIotaGeometry(info, &g); !s)
    return s;
  int64_t inner = g.inner, extent = g.extent, count = g.count;
  bool wide = g.wide;
  *fn = [=](const KernelArgs &args, Context &ctx) {
    if (count == 0)
      return Status::ok();
    if (wide)
      iotaKernel<<<gridFor(count), kBlock, 0, ctx.stream>>>(
          static_cast<int64_t *>(args.results[0]), count, inner, extent);
    else
      iotaKernel<<<gridFor(count), kBlock, 0, ctx.stream>>>(
          static_cast<int32_t *>(args.results[0]), count, inner, extent);
    return launchStatus("iota");
  };
  return Status::ok();
}

} // namespace cleave::rt::cuda

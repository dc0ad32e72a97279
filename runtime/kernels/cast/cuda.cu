//===- cuda.cu - cast and copy on the GPU ---------------------------------===//
//
// The CUDA counterparts of cpu.cpp beside it: one kernel per (from, to)
// dtype pair, the conversions core/convert.h's, which the CPU shares.
//
//===----------------------------------------------------------------------===//

#include "core/convert.h"
#include "cuda/cuda_common.cuh"

namespace cleave::rt::cuda {

namespace {

template <typename From, typename To>
__global__ void castKernel(const typename StorageOf<From>::type *in,
                           typename StorageOf<To>::type *out, int64_t n) {
  CLEAVE_GRID_LOOP(i, n) { out[i] = convertValue<From, To>(in[i]); }
}

using CastLaunch = void (*)(const void *, void *, int64_t, cudaStream_t);

template <typename From, typename To>
void launchCast(const void *in, void *out, int64_t n, cudaStream_t s) {
  castKernel<From, To><<<gridFor(n), kBlock, 0, s>>>(
      static_cast<const typename StorageOf<From>::type *>(in),
      static_cast<typename StorageOf<To>::type *>(out), n);
}

template <typename From> CastLaunch castTo(DType to) {
  switch (to) {
#define CLEAVE_CAST_TO(D, T)                                                   \
  case D:                                                                      \
    return &launchCast<From, T>;
    CLEAVE_FOR_EACH_DTYPE(CLEAVE_CAST_TO)
#undef CLEAVE_CAST_TO
  }
  return nullptr;
}

CastLaunch castFrom(DType from, DType to) {
  switch (from) {
#define CLEAVE_CAST_FROM(D, T)                                                 \
  case D:                                                                      \
    return castTo<T>(to);
    CLEAVE_FOR_EACH_DTYPE(CLEAVE_CAST_FROM)
#undef CLEAVE_CAST_FROM
  }
  return nullptr;
}

} // namespace

Status prepare_cast(const KernelInfo &info, DeviceFn *fn) {
  const TensorType &a = info.operand(0), &r = info.result(0);
  int64_t n = safeNumElements(r);
  if (n == 0) {
    *fn = [](const KernelArgs &, Context &) { return Status::ok(); };
    return Status::ok();
  }
  if (a.dtype == r.dtype && r.dtype != DType::Bool) {
    // The identity on every value; bool -> bool still canonicalises bytes.
    size_t bytes = static_cast<size_t>(n) * dtypeSize(r.dtype);
    *fn = [bytes](const KernelArgs &args, Context &ctx) {
      if (args.operands[0] == args.results[0])
        return Status::ok();
      return cudaStatus(cudaMemcpyAsync(args.results[0], args.operands[0],
                                        bytes, cudaMemcpyDeviceToDevice,
                                        ctx.stream),
                        "cast");
    };
    return Status::ok();
  }
  if (info.params<schema::Kernel::k_cast>().range_checked)
    return Status::error("cast: range-checked casts (float64 inputs) run on "
                         "the CPU backend");
  CastLaunch launch = castFrom(a.dtype, r.dtype);
  if (!launch)
    return Status::error("cast: unsupported dtypes " + a.str() + " -> " +
                         r.str());
  *fn = [launch, n](const KernelArgs &args, Context &ctx) {
    launch(args.operands[0], args.results[0], n, ctx.stream);
    return launchStatus("cast");
  };
  return Status::ok();
}

Status prepare_copy(const KernelInfo &info, DeviceFn *fn) {
  const TensorType &r = info.result(0);
  size_t bytes = static_cast<size_t>(safeNumElements(r)) * dtypeSize(r.dtype);
  *fn = [bytes](const KernelArgs &args, Context &ctx) {
    if (!bytes || args.operands[0] == args.results[0])
      return Status::ok();
    return cudaStatus(cudaMemcpyAsync(args.results[0], args.operands[0], bytes,
                                      cudaMemcpyDeviceToDevice, ctx.stream),
                      "copy");
  };
  return Status::ok();
}

} // namespace cleave::rt::cuda

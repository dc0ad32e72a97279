//===- cpu.cpp - cast and copy on the CPU ---------------------------------===//
//
// One loop per (from, to) dtype pair; the conversions are core/convert.h's,
// which the CUDA kernels share.
//
//===----------------------------------------------------------------------===//

#include "core/convert.h"
#include "core/vector_math.h"
#include "cpu/cpu_kernel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

namespace cleave::rt {

namespace {

// Mixed precision's casts (a product's operands rounded, its result
// widened) are most of the standalone casts' time: those two take the
// loops compiled per instruction set (core/vector_math.h), which the
// outlined OpenMP body of a template would not be.
template <typename From, typename To>
void castRange(const typename StorageOf<From>::type *src,
               typename StorageOf<To>::type *dst, int64_t n) {
  if constexpr (std::is_same_v<From, BFloat16> && std::is_same_v<To, float>)
    widenBf16Array(src, dst, n);
  else if constexpr (std::is_same_v<From, float> &&
                     std::is_same_v<To, BFloat16>)
    narrowBf16Array(src, dst, n);
  else
    for (int64_t i = 0; i < n; ++i)
      dst[i] = convertValue<From, To>(src[i]);
}

/// Each thread converts one contiguous block, in pieces of kPiece.
template <typename From, typename To>
void castLoop(int64_t n, const void *in, void *out) {
  const auto *src = static_cast<const typename StorageOf<From>::type *>(in);
  auto *dst = static_cast<typename StorageOf<To>::type *>(out);
  constexpr int64_t kPiece = 4096;
  int64_t pieces = (n + kPiece - 1) / kPiece;
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
  for (int64_t p = 0; p < pieces; ++p) {
    int64_t begin = p * kPiece;
    castRange<From, To>(src + begin, dst + begin, std::min(kPiece, n - begin));
  }
}

template <typename From> KernelFn makeCast(DType to, int64_t n) {
  void (*loop)(int64_t, const void *, void *) = nullptr;
  switch (to) {
#define CLEAVE_CAST_TO(D, T)                                                   \
  case D:                                                                      \
    loop = &castLoop<From, T>;                                                 \
    break;
    CLEAVE_FOR_EACH_DTYPE(CLEAVE_CAST_TO)
#undef CLEAVE_CAST_TO
  }
  return [loop, n](const KernelArgs &args) {
    loop(n, args.operands[0], args.results[0]);
    return Status::ok();
  };
}

} // namespace

Status prepare_cast(const KernelInfo &info, KernelFn *fn) {
  const TensorType &a = info.operand(0), &r = info.result(0);
  int64_t n = r.numElements();
  switch (a.dtype) {
#define CLEAVE_CAST_FROM(D, T)                                                 \
  case D:                                                                      \
    *fn = makeCast<T>(r.dtype, n);                                             \
    break;
    CLEAVE_FOR_EACH_DTYPE(CLEAVE_CAST_FROM)
#undef CLEAVE_CAST_FROM
  }
  if (info.params<schema::Kernel::k_cast>().range_checked) {
    // A float64 input of a program that computes in f32: a finite value
    // beyond f32's range stops the step rather than becoming infinity.
    *fn = [cast = std::move(*fn), n](const KernelArgs &args) {
      const auto *x = static_cast<const double *>(args.operands[0]);
      for (int64_t i = 0; i < n; ++i)
        if (std::isfinite(x[i]) && std::isinf(static_cast<float>(x[i])))
          return Status::error(
              "float64 element " + std::to_string(i) + " (" +
              std::to_string(x[i]) +
              ") is beyond float32's range, in which the model computes");
      return cast(args);
    };
  }
  return Status::ok();
}

Status prepare_copy(const KernelInfo &info, KernelFn *fn) {
  const TensorType &r = info.result(0);
  size_t bytes = static_cast<size_t>(r.numElements()) * dtypeSize(r.dtype);
  *fn = [bytes](const KernelArgs &args) {
    if (bytes && args.operands[0] != args.results[0])
      std::memmove(args.results[0], args.operands[0], bytes);
    return Status::ok();
  };
  return Status::ok();
}

} // namespace cleave::rt

//===- widen.cpp - f32 kernels run on bf16 and f16 values -----------------===//
//
// Mixed precision stores some values in bf16 or f16; the kernels that have
// no half-precision loop of their own (convolutions and their adjoints, and
// matmul where oneDNN has no implementation) run their f32 loop on widened
// copies. Widening is exact and the result is rounded once, so the value is
// what a native half-precision kernel accumulating in f32 computes, up to
// the order of its sums; the cost is the conversions and the scratch.
//
//===----------------------------------------------------------------------===//

#include "core/convert.h"
#include "cpu/cpu_kernel.h"

#include <algorithm>

namespace cleave::rt {

namespace {

bool isHalf(DType d) { return d == DType::F16 || d == DType::BF16; }

void widen(DType d, const void *in, float *out, int64_t n) {
  const auto *src = static_cast<const uint16_t *>(in);
  bool bf16 = d == DType::BF16;
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i)
    out[i] = bf16 ? bf16ToFloat(src[i]) : halfToFloat(src[i]);
}

void narrow(DType d, const float *in, void *out, int64_t n) {
  auto *dst = static_cast<uint16_t *>(out);
  bool bf16 = d == DType::BF16;
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i)
    dst[i] = bf16 ? floatToBf16(in[i]) : floatToHalf(in[i]);
}

/// Which values of one side (operands or results) are half precision, and
/// their element counts.
struct HalfSlots {
  std::vector<DType> dtype; ///< F32 where the value is passed through
  std::vector<int64_t> count;
};

HalfSlots markHalf(std::vector<std::optional<TensorType>> &values) {
  HalfSlots slots;
  for (std::optional<TensorType> &v : values) {
    bool half = v && isHalf(v->dtype);
    slots.dtype.push_back(half ? v->dtype : DType::F32);
    slots.count.push_back(half ? v->numElements() : 0);
    if (half)
      v->dtype = DType::F32;
  }
  return slots;
}

} // namespace

Status prepareWidened(const KernelInfo &info, PrepareFn prepareF32,
                      KernelFn *fn) {
  KernelInfo wide = info;
  HalfSlots ops = markHalf(wide.operands), res = markHalf(wide.results);
  KernelFn inner;
  if (Status s = prepareF32(wide, &inner); !s)
    return s;
  *fn = [inner = std::move(inner), ops, res](const KernelArgs &args) {
    size_t nOps = std::max(ops.dtype.size(), kMinArgSlots);
    size_t nRes = std::max(res.dtype.size(), kMinArgSlots);
    std::vector<std::vector<float>> opCopies(ops.dtype.size()),
        resCopies(res.dtype.size());
    std::vector<const void *> opPtrs(nOps, nullptr);
    std::vector<void *> resPtrs(nRes, nullptr);
    for (size_t i = 0; i < ops.dtype.size(); ++i) {
      opPtrs[i] = args.operands[i];
      if (ops.dtype[i] == DType::F32 || !args.operands[i])
        continue;
      opCopies[i].resize(static_cast<size_t>(ops.count[i]));
      widen(ops.dtype[i], args.operands[i], opCopies[i].data(), ops.count[i]);
      opPtrs[i] = opCopies[i].data();
    }
    for (size_t i = 0; i < res.dtype.size(); ++i) {
      resPtrs[i] = args.results[i];
      if (res.dtype[i] == DType::F32 || !args.results[i])
        continue;
      resCopies[i].resize(static_cast<size_t>(res.count[i]));
      resPtrs[i] = resCopies[i].data();
    }
    if (Status s = inner(KernelArgs{opPtrs.data(), resPtrs.data()}); !s)
      return s;
    for (size_t i = 0; i < res.dtype.size(); ++i)
      if (!resCopies[i].empty())
        narrow(res.dtype[i], resCopies[i].data(), args.results[i],
               res.count[i]);
    return Status::ok();
  };
  return Status::ok();
}

} // namespace cleave::rt

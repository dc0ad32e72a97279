//===- cuda.cu - Fused cross-entropy statistics on the GPU ----------------===//
//
// cpu.cpp's kernels (beside this file): one block per row of logits,
// its threads striding over the classes, the two sums reduced in double in
// shared memory; the backward one thread per element.
//
//===----------------------------------------------------------------------===//

#include "core/nn_geometry.h"
#include "cuda/cuda_common.cuh"

#include <limits>

namespace cleave::rt::cuda {
namespace {

using nn::CrossEntropyGeometry;

constexpr int kThreads = 256;

struct Rows {
  int64_t classes, inner;
  bool wide;
};

__device__ int64_t labelAt(const void *labels, bool wide, int64_t i) {
  return wide ? static_cast<const int64_t *>(labels)[i]
              : static_cast<const int32_t *>(labels)[i];
}

__global__ void crossEntropyForward(Rows g, const float *x, const void *labels,
                                    const void *ids, const float *shift,
                                    float *sumExp, float *target) {
  __shared__ double sums[kThreads], picks[kThreads];
  int64_t r = blockIdx.x;
  int64_t o = r / g.inner, i = r % g.inner;
  const float *row = x + o * g.classes * g.inner + i;
  float m = shift[r];
  int64_t label = labelAt(labels, g.wide, r);
  double sum = 0, picked = 0;
  for (int64_t c = threadIdx.x; c < g.classes; c += blockDim.x) {
    float v = row[c * g.inner] - m;
    sum += expf(v);
    if (labelAt(ids, g.wide, c) == label)
      picked += v;
  }
  sums[threadIdx.x] = sum;
  picks[threadIdx.x] = picked;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      sums[threadIdx.x] += sums[threadIdx.x + s];
      picks[threadIdx.x] += picks[threadIdx.x + s];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    sumExp[r] = static_cast<float>(sums[0]);
    target[r] = static_cast<float>(picks[0]);
  }
}

__global__ void crossEntropyBackward(Rows g, int64_t n, const float *x,
                                     const void *labels, const void *ids,
                                     const float *shift, const float *gSum,
                                     const float *gTarget, float *dx) {
  for (int64_t at = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; at < n;
       at += int64_t(gridDim.x) * blockDim.x) {
    int64_t i = at % g.inner, c = at / g.inner % g.classes,
            o = at / (g.inner * g.classes);
    int64_t r = o * g.inner + i;
    float d = gSum[r] * expf(x[at] - shift[r]);
    if (labelAt(ids, g.wide, c) == labelAt(labels, g.wide, r))
      d += gTarget[r];
    dx[at] = d;
  }
}

} // namespace

Status prepare_cross_entropy(const KernelInfo &info, DeviceFn *fn) {
  CrossEntropyGeometry geo;
  if (Status s = nn::readCrossEntropyGeometry(info, false, &geo); !s)
    return s;
  int64_t rows = geo.outer * geo.inner;
  if (rows > std::numeric_limits<int32_t>::max())
    return Status::error("cross_entropy: " + std::to_string(rows) +
                         " rows exceed the CUDA grid limit");
  Rows g{geo.classes, geo.inner, geo.wide};
  *fn = [g, rows](const KernelArgs &args, Context &ctx) {
    if (rows == 0)
      return Status::ok();
    crossEntropyForward<<<static_cast<unsigned>(rows), kThreads, 0,
                          ctx.stream>>>(
        g, static_cast<const float *>(args.operands[0]), args.operands[1],
        args.operands[2], static_cast<const float *>(args.operands[3]),
        static_cast<float *>(args.results[0]),
        static_cast<float *>(args.results[1]));
    return launchStatus("cross_entropy");
  };
  return Status::ok();
}

Status prepare_cross_entropy_backward(const KernelInfo &info, DeviceFn *fn) {
  CrossEntropyGeometry geo;
  if (Status s = nn::readCrossEntropyGeometry(info, true, &geo); !s)
    return s;
  int64_t n = geo.outer * geo.classes * geo.inner;
  Rows g{geo.classes, geo.inner, geo.wide};
  *fn = [g, n](const KernelArgs &args, Context &ctx) {
    if (n == 0)
      return Status::ok();
    int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 65535);
    crossEntropyBackward<<<static_cast<unsigned>(blocks), kThreads, 0,
                           ctx.stream>>>(
        g, n, static_cast<const float *>(args.operands[0]), args.operands[1],
        args.operands[2], static_cast<const float *>(args.operands[3]),
        static_cast<const float *>(args.operands[4]),
        static_cast<const float *>(args.operands[5]),
        static_cast<float *>(args.results[0]));
    return launchStatus("cross_entropy_backward");
  };
  return Status::ok();
}

} // namespace cleave::rt::cuda

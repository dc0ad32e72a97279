//===- cuda.cu - Fused attention and its backward on the GPU --------------===//
//
// The correct fallback of the fused attention (cpu.cpp beside this file
// documents the algorithm): one block per query row (forward, dq) or key row
// (dk, dv), keys or queries taken 128 at a time with their probabilities in
// shared memory, never a score matrix in global memory. Every output element
// has one writer, so no atomics and results independent of scheduling.
// cuDNN's fused attention is not wired in yet: these kernels are what the
// plan runs on every GPU.
//
//===----------------------------------------------------------------------===//

#include "core/nn_geometry.h"
#include "cuda/cuda_common.cuh"

#include <cmath>
#include <limits>

namespace cleave::rt::cuda {
namespace {

using nn::AttentionGeometry;

constexpr int kThreads = 128;
/// Head dims a thread's accumulators cover (kThreads * kPerThread).
constexpr int kPerThread = 4;
constexpr int64_t kMaxHeadDim = kThreads * kPerThread;

struct Dims {
  int b, h, hk, sq, sk, d, dv;
  float scale;
  bool causal;
  const float *bias;
  int64_t bs0, bs1, bs2, bs3;

  __device__ int keyEnd(int i) const {
    if (!causal)
      return sk;
    int end = i + sk - sq + 1;
    return end < 0 ? 0 : (end > sk ? sk : end);
  }
  __device__ float biasAt(int bi, int hi, int i, int j) const {
    return bias ? bias[bi * bs0 + hi * bs1 + i * bs2 + j * bs3] : 0.0f;
  }
};

Dims dimsOf(const AttentionGeometry &g) {
  return Dims{static_cast<int>(g.b),
              static_cast<int>(g.h),
              static_cast<int>(g.hk),
              static_cast<int>(g.sq),
              static_cast<int>(g.sk),
              static_cast<int>(g.d),
              static_cast<int>(g.dv),
              g.scale,
              g.causal,
              nullptr,
              g.biasStride[0],
              g.biasStride[1],
              g.biasStride[2],
              g.biasStride[3]};
}

__device__ float blockMax(float v, float *shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s)
      shared[threadIdx.x] = fmaxf(shared[threadIdx.x], shared[threadIdx.x + s]);
    __syncthreads();
  }
  float r = shared[0];
  __syncthreads();
  return r;
}

__device__ float blockSum(float v, float *shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s)
      shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  float r = shared[0];
  __syncthreads();
  return r;
}

__device__ float dot(const float *a, const float *b, int n) {
  float s = 0.0f;
  for (int c = 0; c < n; ++c)
    s += a[c] * b[c];
  return s;
}

/// One query row per block: online softmax over chunks of keys.
__global__ void attentionForward(Dims g, const float *q, const float *k,
                                 const float *v, float *out, float *lse) {
  __shared__ float p[kThreads];
  __shared__ float red[kThreads];
  int row = blockIdx.x;
  int i = row % g.sq, pair = row / g.sq;
  int bi = pair / g.h, hi = pair % g.h, kh = hi / (g.h / g.hk);
  const float *qi = q + static_cast<int64_t>(row) * g.d;
  const float *kb = k + static_cast<int64_t>(bi * g.hk + kh) * g.sk * g.d;
  const float *vb = v + static_cast<int64_t>(bi * g.hk + kh) * g.sk * g.dv;
  float acc[kPerThread] = {0.0f, 0.0f, 0.0f, 0.0f};
  float m = -INFINITY, l = 0.0f;
  int end = g.keyEnd(i);
  for (int j0 = 0; j0 < end; j0 += kThreads) {
    int j = j0 + threadIdx.x;
    float s = -INFINITY;
    if (j < end)
      s = g.scale * dot(qi, kb + static_cast<int64_t>(j) * g.d, g.d) +
          g.biasAt(bi, hi, i, j);
    float mNew = fmaxf(m, blockMax(s, red));
    if (mNew == -INFINITY)
      continue; // every key so far masked
    float e = s == -INFINITY ? 0.0f : expf(s - mNew);
    p[threadIdx.x] = e;
    float rescale = expf(m - mNew);
    l = l * rescale + blockSum(e, red);
    m = mNew;
    int count = min(kThreads, end - j0);
    for (int t = 0; t < kPerThread; ++t) {
      int c = threadIdx.x + t * kThreads;
      if (c >= g.dv)
        break;
      float a = acc[t] * rescale;
      for (int jj = 0; jj < count; ++jj)
        a += p[jj] * vb[static_cast<int64_t>(j0 + jj) * g.dv + c];
      acc[t] = a;
    }
    __syncthreads();
  }
  for (int t = 0; t < kPerThread; ++t) {
    int c = threadIdx.x + t * kThreads;
    if (c < g.dv)
      out[static_cast<int64_t>(row) * g.dv + c] = acc[t] / l;
  }
  if (threadIdx.x == 0)
    lse[row] = m + logf(l);
}

/// delta_i = dout_i . out_i, by the whole block.
__device__ float rowDelta(const float *dout, const float *out, int n,
                          float *red) {
  float s = 0.0f;
  for (int c = threadIdx.x; c < n; c += blockDim.x)
    s += dout[c] * out[c];
  return blockSum(s, red);
}

/// dq for one query row per block.
__global__ void attentionBackwardQuery(Dims g, const float *q, const float *k,
                                       const float *v, const float *out,
                                       const float *lse, const float *dout,
                                       float *dq) {
  __shared__ float ds[kThreads];
  __shared__ float red[kThreads];
  int row = blockIdx.x;
  int i = row % g.sq, pair = row / g.sq;
  int bi = pair / g.h, hi = pair % g.h, kh = hi / (g.h / g.hk);
  const float *qi = q + static_cast<int64_t>(row) * g.d;
  const float *doi = dout + static_cast<int64_t>(row) * g.dv;
  const float *kb = k + static_cast<int64_t>(bi * g.hk + kh) * g.sk * g.d;
  const float *vb = v + static_cast<int64_t>(bi * g.hk + kh) * g.sk * g.dv;
  float delta =
      rowDelta(doi, out + static_cast<int64_t>(row) * g.dv, g.dv, red);
  float acc[kPerThread] = {0.0f, 0.0f, 0.0f, 0.0f};
  int end = g.keyEnd(i);
  for (int j0 = 0; j0 < end; j0 += kThreads) {
    int j = j0 + threadIdx.x;
    float d = 0.0f;
    if (j < end) {
      float s = g.scale * dot(qi, kb + static_cast<int64_t>(j) * g.d, g.d) +
                g.biasAt(bi, hi, i, j);
      float p = expf(s - lse[row]);
      float dp = dot(doi, vb + static_cast<int64_t>(j) * g.dv, g.dv);
      d = p * (dp - delta);
    }
    ds[threadIdx.x] = d;
    __syncthreads();
    int count = min(kThreads, end - j0);
    for (int t = 0; t < kPerThread; ++t) {
      int c = threadIdx.x + t * kThreads;
      if (c >= g.d)
        break;
      for (int jj = 0; jj < count; ++jj)
        acc[t] += ds[jj] * kb[static_cast<int64_t>(j0 + jj) * g.d + c];
    }
    __syncthreads();
  }
  for (int t = 0; t < kPerThread; ++t) {
    int c = threadIdx.x + t * kThreads;
    if (c < g.d)
      dq[static_cast<int64_t>(row) * g.d + c] = g.scale * acc[t];
  }
}

/// dk and dv for one key row per block, over every query row of every
/// query head that reads it.
__global__ void attentionBackwardKey(Dims g, const float *q, const float *k,
                                     const float *v, const float *out,
                                     const float *lse, const float *dout,
                                     float *dk, float *dv) {
  __shared__ float ps[kThreads];
  __shared__ float ds[kThreads];
  __shared__ int rows[kThreads];
  int key = blockIdx.x;
  int j = key % g.sk, kpair = key / g.sk;
  int bi = kpair / g.hk, kh = kpair % g.hk, group = g.h / g.hk;
  const float *kj = k + static_cast<int64_t>(key) * g.d;
  const float *vj = v + static_cast<int64_t>(key) * g.dv;
  float accK[kPerThread] = {0.0f, 0.0f, 0.0f, 0.0f};
  float accV[kPerThread] = {0.0f, 0.0f, 0.0f, 0.0f};
  int total = group * g.sq;
  for (int r0 = 0; r0 < total; r0 += kThreads) {
    int r = r0 + threadIdx.x;
    float p = 0.0f, d = 0.0f;
    int row = -1;
    if (r < total) {
      int hi = kh * group + r / g.sq, i = r % g.sq;
      row = (bi * g.h + hi) * g.sq + i;
      if (j < g.keyEnd(i)) {
        const float *qi = q + static_cast<int64_t>(row) * g.d;
        const float *doi = dout + static_cast<int64_t>(row) * g.dv;
        float s = g.scale * dot(qi, kj, g.d) + g.biasAt(bi, hi, i, j);
        p = expf(s - lse[row]);
        float delta = dot(doi, out + static_cast<int64_t>(row) * g.dv, g.dv);
        d = p * (dot(doi, vj, g.dv) - delta);
      }
    }
    ps[threadIdx.x] = p;
    ds[threadIdx.x] = d;
    rows[threadIdx.x] = row;
    __syncthreads();
    int count = min(kThreads, total - r0);
    for (int t = 0; t < kPerThread; ++t) {
      int c = threadIdx.x + t * kThreads;
      for (int rr = 0; rr < count; ++rr) {
        int64_t at = rows[rr];
        if (c < g.d)
          accK[t] += ds[rr] * q[at * g.d + c];
        if (c < g.dv)
          accV[t] += ps[rr] * dout[at * g.dv + c];
      }
    }
    __syncthreads();
  }
  for (int t = 0; t < kPerThread; ++t) {
    int c = threadIdx.x + t * kThreads;
    if (c < g.d)
      dk[static_cast<int64_t>(key) * g.d + c] = g.scale * accK[t];
    if (c < g.dv)
      dv[static_cast<int64_t>(key) * g.dv + c] = accV[t];
  }
}

Status checkLaunch(const AttentionGeometry &g, const char *kernel) {
  if (g.d > kMaxHeadDim || g.dv > kMaxHeadDim)
    return Status::error(std::string(kernel) + ": head dims above " +
                         std::to_string(kMaxHeadDim) +
                         " are not supported on the GPU");
  int64_t rows = std::max(g.b * g.h * g.sq, g.b * g.hk * g.sk);
  if (rows > std::numeric_limits<int32_t>::max())
    return Status::error(std::string(kernel) + ": " + std::to_string(rows) +
                         " rows exceed the CUDA grid limit");
  return Status::ok();
}

} // namespace

Status prepare_attention(const KernelInfo &info, DeviceFn *fn) {
  AttentionGeometry g;
  if (Status s = nn::readAttentionGeometry(info, false, &g); !s)
    return s;
  if (g.bf16)
    return halfPlanRefused("attention");
  if (Status s = checkLaunch(g, "attention"); !s)
    return s;
  Dims dims = dimsOf(g);
  int64_t rows = g.b * g.h * g.sq;
  *fn = [dims, rows](const KernelArgs &args, Context &ctx) mutable {
    if (rows == 0)
      return Status::ok();
    dims.bias = static_cast<const float *>(args.operands[3]);
    attentionForward<<<static_cast<unsigned>(rows), kThreads, 0, ctx.stream>>>(
        dims, static_cast<const float *>(args.operands[0]),
        static_cast<const float *>(args.operands[1]),
        static_cast<const float *>(args.operands[2]),
        static_cast<float *>(args.results[0]),
        static_cast<float *>(args.results[1]));
    return launchStatus("attention");
  };
  return Status::ok();
}

Status prepare_attention_backward(const KernelInfo &info, DeviceFn *fn) {
  AttentionGeometry g;
  if (Status s = nn::readAttentionGeometry(info, true, &g); !s)
    return s;
  if (g.bf16)
    return halfPlanRefused("attention_backward");
  if (Status s = checkLaunch(g, "attention_backward"); !s)
    return s;
  Dims dims = dimsOf(g);
  int64_t queries = g.b * g.h * g.sq, keys = g.b * g.hk * g.sk;
  *fn = [dims, queries, keys](const KernelArgs &args, Context &ctx) mutable {
    dims.bias = static_cast<const float *>(args.operands[6]);
    const auto *q = static_cast<const float *>(args.operands[0]);
    const auto *k = static_cast<const float *>(args.operands[1]);
    const auto *v = static_cast<const float *>(args.operands[2]);
    const auto *out = static_cast<const float *>(args.operands[3]);
    const auto *lse = static_cast<const float *>(args.operands[4]);
    const auto *dout = static_cast<const float *>(args.operands[5]);
    if (queries > 0)
      attentionBackwardQuery<<<static_cast<unsigned>(queries), kThreads, 0,
                               ctx.stream>>>(
          dims, q, k, v, out, lse, dout, static_cast<float *>(args.results[0]));
    if (keys > 0)
      attentionBackwardKey<<<static_cast<unsigned>(keys), kThreads, 0,
                             ctx.stream>>>(
          dims, q, k, v, out, lse, dout, static_cast<float *>(args.results[1]),
          static_cast<float *>(args.results[2]));
    return launchStatus("attention_backward");
  };
  return Status::ok();
}

} // namespace cleave::rt::cuda

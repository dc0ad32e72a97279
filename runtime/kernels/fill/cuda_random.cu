//===- cuda_random.cu - Counter-based random number kernels ---------------===//
//
// random_uniform: element e of the (global) tensor is word e % 4 of the
// Philox-4x32-10 block of counter (e / 4, step, stream) under key seed, with
// the CPU backend's generator (philox.h), so the values are bit-identical to
// the CPU's whatever the sharding. Each thread computes one Philox block and
// writes the up to 4 result elements it covers: a run of the result need
// not start at a multiple of 4 in the global tensor.
//
//===----------------------------------------------------------------------===//

#include "core/philox.h"
#include "cuda/cuda_common.cuh"

#include <cstdint>

namespace cleave::rt::cuda {
namespace {

/// The result is `rows` runs of `run` elements; run r starts at global index
/// base + sum_d index_d(r) * rowStrides[d], index_d(r) being r's multi-index
/// over rowDims.
struct RandomLaunch {
  philox::Key key = {0, 0};
  uint32_t stream = 0;
  int64_t rows = 0, run = 0;
  /// Philox blocks a run can touch: (run + 3) / 4, plus one when it starts
  /// inside a block.
  int64_t blocksPerRun = 0;
  int rowRank = 0;
  int64_t rowDims[kMaxRank] = {};
  int64_t rowStrides[kMaxRank] = {};
  int64_t base = 0;
};

__device__ int64_t rowStart(const RandomLaunch &p, int64_t r) {
  int64_t e = p.base;
  for (int d = p.rowRank - 1; d >= 0; --d) {
    e += (r % p.rowDims[d]) * p.rowStrides[d];
    r /= p.rowDims[d];
  }
  return e;
}

__global__ void randomUniformKernel(RandomLaunch p, const int64_t *stepPtr,
                                    float *out) {
  // Read here rather than on the host: the step changes between replays of
  // the captured graph.
  uint32_t step = static_cast<uint32_t>(static_cast<uint64_t>(*stepPtr));
  CLEAVE_GRID_LOOP(t, p.rows * p.blocksPerRun) {
    int64_t r = t / p.blocksPerRun, q = t % p.blocksPerRun;
    int64_t first = rowStart(p, r);
    uint64_t block = (static_cast<uint64_t>(first) >> 2) + q;
    // Global elements [lo, hi) of this block that the run holds.
    uint64_t lo = block * 4, hi = lo + 4;
    uint64_t runBegin = static_cast<uint64_t>(first);
    uint64_t runEnd = runBegin + static_cast<uint64_t>(p.run);
    if (lo < runBegin)
      lo = runBegin;
    if (hi > runEnd)
      hi = runEnd;
    if (lo >= hi)
      continue;
    philox::Counter c = {static_cast<uint32_t>(block),
                         static_cast<uint32_t>(block >> 32), step, p.stream};
    philox::Counter words = philox::philox4x32_10(c, p.key);
    float *dst = out + r * p.run + static_cast<int64_t>(lo - runBegin);
    for (uint64_t e = lo; e < hi; ++e)
      *dst++ = philox::uniform24(words[e & 3]);
  }
}

} // namespace

Status prepare_random_uniform(const KernelInfo &info, DeviceFn *fn) {
  RandomGeometry g;
  if (Status s = readRandomGeometry(info, &g); !s)
    return s;
  if (g.rows * g.run == 0) {
    *fn = [](const KernelArgs &, Context &) { return Status::ok(); };
    return Status::ok();
  }
  RandomLaunch p;
  p.key = {g.key[0], g.key[1]};
  p.stream = g.stream;
  p.rows = g.rows;
  p.run = g.run;
  p.base = g.base;
  // Row dims of extent 1 add nothing to a row's start.
  for (size_t d = 0; d < g.rowDims.size(); ++d) {
    if (g.rowDims[d] == 1)
      continue;
    if (p.rowRank == kMaxRank)
      return Status::error("random_uniform: result " + info.result(0).str() +
                           " has more than " + std::to_string(kMaxRank) +
                           " non-contiguous dims");
    p.rowDims[p.rowRank] = g.rowDims[d];
    p.rowStrides[p.rowRank] = g.rowStrides[d];
    ++p.rowRank;
  }
  p.blocksPerRun = (p.run + 6) / 4;
  if (p.rows > INT64_MAX / p.blocksPerRun)
    return Status::error("random_uniform: result " + info.result(0).str() +
                         " is too large for the CUDA backend");
  *fn = [p](const KernelArgs &args, Context &ctx) {
    int64_t threads = p.rows * p.blocksPerRun;
    randomUniformKernel<<<gridFor(threads), kBlock, 0, ctx.stream>>>(
        p, static_cast<const int64_t *>(args.operands[0]),
        static_cast<float *>(args.results[0]));
    return launchStatus("random_uniform");
  };
  return Status::ok();
}

} // namespace cleave::rt::cuda

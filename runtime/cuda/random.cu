//===- random.cu - Counter-based random number kernels --------------------===//
//
// random_uniform: element e of the (global) tensor is word e % 4 of the
// Philox-4x32-10 block of counter (e / 4, step, stream) under key seed, with
// the CPU backend's generator (philox.h), so the values are bit-identical to
// the CPU's whatever the sharding. Each thread computes one Philox block and
// writes the up to 4 result elements it covers: a run of the result need
// not start at a multiple of 4 in the global tensor.
//
//===----------------------------------------------------------------------===//

#include "cuda_common.cuh"
#include "philox.h"

#include <cstdint>

namespace cleave::rt::cuda {
namespace {

/// The result is `rows` runs of `run` elements; run r starts at global index
/// base + sum_d index_d(r) * rowStrides[d], index_d(r) being r's multi-index
/// over rowDims.
struct RandomPlan {
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

__device__ int64_t rowStart(const RandomPlan &p, int64_t r) {
  int64_t e = p.base;
  for (int d = p.rowRank - 1; d >= 0; --d) {
    e += (r % p.rowDims[d]) * p.rowStrides[d];
    r /= p.rowDims[d];
  }
  return e;
}

__global__ void randomUniformKernel(RandomPlan p, const int64_t *stepPtr,
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
  const TensorType &r = info.result(0);
  int64_t seed = 0, stream = 0;
  if (Status s = info.intScalar("seed", &seed); !s)
    return s;
  if (Status s = info.intScalar("stream", &stream); !s)
    return s;
  RandomPlan p;
  uint64_t useed = static_cast<uint64_t>(seed);
  p.key = {static_cast<uint32_t>(useed), static_cast<uint32_t>(useed >> 32)};
  p.stream = static_cast<uint32_t>(static_cast<uint64_t>(stream));

  size_t rank = r.shape.size();
  std::vector<int64_t> offsets(rank, 0), global = r.shape;
  if (info.attrs.count("offsets")) {
    if (Status s = info.ints("offsets", rank, &offsets); !s)
      return s;
    if (Status s = info.ints("global_shape", rank, &global); !s)
      return s;
  }
  for (int64_t d : r.shape)
    if (d == 0) {
      *fn = [](const KernelArgs &, Context &) { return Status::ok(); };
      return Status::ok();
    }
  // As on the CPU: the result is runs over its trailing dims that span the
  // global tensor entirely, together with the dim just before them; the
  // global row-major index fits in int64 (checked by the CPU prepare).
  std::vector<int64_t> gStrides(rank, 1);
  int64_t count = 1;
  for (int64_t d = static_cast<int64_t>(rank) - 1; d >= 0; --d) {
    gStrides[d] = count;
    count *= global[d];
  }
  size_t k = rank;
  while (k > 0 && r.shape[k - 1] == global[k - 1])
    --k;
  size_t runFrom = k == 0 ? 0 : k - 1;
  p.run = product(r.shape, runFrom, rank);
  p.rows = product(r.shape, 0, runFrom);
  for (size_t d = 0; d < rank; ++d)
    p.base += offsets[d] * gStrides[d];
  // Row dims of extent 1 add nothing to a row's start.
  for (size_t d = 0; d < runFrom; ++d) {
    if (r.shape[d] == 1)
      continue;
    if (p.rowRank == kMaxRank)
      return Status::error("random_uniform: result " + r.str() +
                           " has more than " + std::to_string(kMaxRank) +
                           " non-contiguous dims");
    p.rowDims[p.rowRank] = r.shape[d];
    p.rowStrides[p.rowRank] = gStrides[d];
    ++p.rowRank;
  }
  p.blocksPerRun = (p.run + 6) / 4;
  if (p.rows > INT64_MAX / p.blocksPerRun)
    return Status::error("random_uniform: result " + r.str() +
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

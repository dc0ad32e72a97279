//===- random.cpp - Counter-based random number kernels -------------------===//
//
// random_uniform: element e of the (global) tensor is word e % 4 of the
// Philox-4x32-10 block of counter (e / 4, step, stream) under key seed, so
// the values do not depend on how the tensor is sharded or on the thread
// count.
//
//===----------------------------------------------------------------------===//

#include "kernel.h"
#include "philox.h"

#include <algorithm>

namespace cleave::rt {
namespace {

struct RandomPlan {
  philox::Key key = {0, 0};
  uint32_t stream = 0;
  /// The result is `rows` runs of `run` elements; run r starts at global
  /// index rowStart(r), from the row's multi-index over rowDims.
  int64_t rows = 0, run = 0;
  std::vector<int64_t> rowDims, rowStrides;
  int64_t base = 0;

  int64_t rowStart(int64_t r) const {
    int64_t e = base;
    for (int64_t d = static_cast<int64_t>(rowDims.size()) - 1; d >= 0; --d) {
      e += (r % rowDims[d]) * rowStrides[d];
      r /= rowDims[d];
    }
    return e;
  }
};

/// out[i] = uniform value of global element e0 + i, for i < n.
void fillUniform(const RandomPlan &p, uint32_t step, uint64_t e0, int64_t n,
                 float *out) {
  uint64_t e = e0;
  int64_t i = 0;
  while (i < n) {
    uint64_t block = e >> 2;
    philox::Counter c = {static_cast<uint32_t>(block),
                         static_cast<uint32_t>(block >> 32), step, p.stream};
    philox::Counter words = philox::philox4x32_10(c, p.key);
    for (unsigned w = static_cast<unsigned>(e & 3); w < 4 && i < n;
         ++w, ++i, ++e)
      out[i] = philox::uniform24(words[w]);
  }
}

void runRandomUniform(const RandomPlan &p, uint32_t step, float *out) {
  // Pieces of at most kChunk elements (a multiple of 4, so that pieces of a
  // run that starts block-aligned stay aligned).
  constexpr int64_t kChunk = 4096;
  int64_t pieces = (p.run + kChunk - 1) / kChunk;
  int64_t tasks = p.rows * pieces;
#pragma omp parallel for schedule(                                             \
    static) if (tasks > 1 && p.rows * p.run > kParallelThreshold / 4)
  for (int64_t t = 0; t < tasks; ++t) {
    int64_t r = t / pieces, piece = t % pieces;
    int64_t begin = piece * kChunk;
    int64_t n = std::min(kChunk, p.run - begin);
    fillUniform(p, step, static_cast<uint64_t>(p.rowStart(r) + begin), n,
                out + r * p.run + begin);
  }
}

} // namespace

Status prepare_random_uniform(const KernelInfo &info, KernelFn *fn) {
  if (Status s = info.checkArity(1, 1, 1); !s)
    return s;
  const TensorType &step = info.operand(0), &r = info.result(0);
  if (step.dtype != DType::I64 || step.rank() != 0)
    return Status::error("step " + step.str() +
                         " must be an i64 scalar (i64[])");
  if (r.dtype != DType::F32)
    return Status::error("result " + r.str() + " must be f32");
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
  bool hasOffsets = info.attrs.count("offsets") != 0;
  bool hasGlobal = info.attrs.count("global_shape") != 0;
  if (hasOffsets != hasGlobal)
    return Status::error("attributes 'offsets' and 'global_shape' must be "
                         "given together");
  std::vector<int64_t> offsets(rank, 0), global = r.shape;
  if (hasOffsets) {
    if (Status s = info.ints("offsets", rank, &offsets); !s)
      return s;
    if (Status s = info.ints("global_shape", rank, &global); !s)
      return s;
    for (size_t d = 0; d < rank; ++d)
      if (global[d] < 0 || offsets[d] < 0 || r.shape[d] > global[d] ||
          offsets[d] > global[d] - r.shape[d])
        return Status::error(
            "result " + r.str() + " at 'offsets' " +
            std::to_string(offsets[d]) + " of dim " + std::to_string(d) +
            " does not fit in 'global_shape' " + std::to_string(global[d]));
  }
  for (int64_t d : r.shape)
    if (d == 0) {
      // Nothing to write.
      *fn = [](const KernelArgs &) { return Status::ok(); };
      return Status::ok();
    }
  // Row-major strides of the global tensor, whose element indices must fit
  // in int64 (every global dim is at least the result's, so non-zero).
  std::vector<int64_t> gStrides(rank, 1);
  int64_t count = 1;
  for (int64_t d = static_cast<int64_t>(rank) - 1; d >= 0; --d) {
    gStrides[d] = count;
    if (__builtin_mul_overflow(count, global[d], &count))
      return Status::error("attribute 'global_shape' has more than 2^63 "
                           "elements");
  }
  // Trailing dims that the result spans entirely are contiguous in the global
  // tensor, together with the dim just before them.
  size_t k = rank;
  while (k > 0 && r.shape[k - 1] == global[k - 1])
    --k;
  size_t runFrom = k == 0 ? 0 : k - 1;
  p.run = product(r.shape, runFrom, rank);
  p.rows = product(r.shape, 0, runFrom);
  p.rowDims.assign(r.shape.begin(), r.shape.begin() + runFrom);
  p.rowStrides.assign(gStrides.begin(), gStrides.begin() + runFrom);
  for (size_t d = 0; d < rank; ++d)
    p.base += offsets[d] * gStrides[d];
  *fn = [p](const KernelArgs &args) {
    int64_t step = *static_cast<const int64_t *>(args.operands[0]);
    runRandomUniform(p, static_cast<uint32_t>(static_cast<uint64_t>(step)),
                     static_cast<float *>(args.results[0]));
    return Status::ok();
  };
  return Status::ok();
}

} // namespace cleave::rt

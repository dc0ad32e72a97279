//===- cpu_random.cpp - Counter-based random number kernels ---------------===//
//
// random_uniform: element e of the (global) tensor is word e % 4 of the
// Philox-4x32-10 block of counter (e / 4, step, stream) under key seed, so
// the values do not depend on how the tensor is sharded or on the thread
// count.
//
//===----------------------------------------------------------------------===//

#include "core/philox.h"
#include "cpu/cpu_kernel.h"

#include <algorithm>

namespace cleave::rt {
namespace {

int64_t rowStart(const RandomGeometry &p, int64_t r) {
  int64_t e = p.base;
  for (int64_t d = static_cast<int64_t>(p.rowDims.size()) - 1; d >= 0; --d) {
    e += (r % p.rowDims[d]) * p.rowStrides[d];
    r /= p.rowDims[d];
  }
  return e;
}

/// out[i] = uniform value of global element e0 + i, for i < n.
void fillUniform(const RandomGeometry &p, uint32_t step, uint64_t e0, int64_t n,
                 float *out) {
  uint64_t e = e0;
  int64_t i = 0;
  while (i < n) {
    uint64_t block = e >> 2;
    philox::Counter c = {static_cast<uint32_t>(block),
                         static_cast<uint32_t>(block >> 32), step, p.stream};
    philox::Counter words = philox::philox4x32_10(c, {p.key[0], p.key[1]});
    for (unsigned w = static_cast<unsigned>(e & 3); w < 4 && i < n;
         ++w, ++i, ++e)
      out[i] = philox::uniform24(words[w]);
  }
}

void runRandomUniform(const RandomGeometry &p, uint32_t step, float *out) {
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
    fillUniform(p, step, static_cast<uint64_t>(rowStart(p, r) + begin), n,
                out + r * p.run + begin);
  }
}

} // namespace

Status prepare_random_uniform(const KernelInfo &info, KernelFn *fn) {
  RandomGeometry p;
  if (Status s = readRandomGeometry(info, &p); !s)
    return s;
  *fn = [p](const KernelArgs &args) {
    if (p.rows * p.run == 0)
      return Status::ok();
    int64_t step = *static_cast<const int64_t *>(args.operands[0]);
    runRandomUniform(p, static_cast<uint32_t>(static_cast<uint64_t>(step)),
                     static_cast<float *>(args.results[0]));
    return Status::ok();
  };
  return Status::ok();
}

} // namespace cleave::rt

//===- reduce_plan.h - How a reduction is walked ----------------*- C++ -*-===//
//
// The loop shape of a reduction over some dims of a tensor, shared by the
// CPU's reduce kernels and fused chains that end in reductions
// (cpu/fused_kernel.cpp), so that both add the same elements in the same
// order, and by fusion, which only takes reductions with long runs.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_CORE_REDUCE_PLAN_H
#define CLEAVE_RUNTIME_CORE_REDUCE_PLAN_H

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cleave::rt {

struct ReduceGeometry {
  /// Kept dims outside the lanes (outermost first) and their input strides.
  std::vector<int64_t> keptDims, keptStrides;
  /// Reduced dims walked by the odometer and their input strides.
  std::vector<int64_t> redDims, redStrides;
  /// Innermost group: kept lanes (lanes > 0) or a contiguous reduced run.
  int64_t lanes = 0;
  int64_t innerRun = 1;
  int64_t numOutputs = 0;
  /// Number of elements reduced into each output.
  int64_t reduceCount = 1;
};

/// The loop shape of reducing a tensor of \p shape over the dims marked in
/// \p reduced: adjacent dims of the same status merged, unit dims dropped.
ReduceGeometry planReduction(const std::vector<int64_t> &shape,
                             const std::vector<bool> &reduced);

/// Visits the offsets of the reduced odometer dims in row-major order.
template <typename Fn>
void walkReduced(const ReduceGeometry &p, int64_t base, Fn fn) {
  size_t rank = p.redDims.size();
  if (rank == 0) {
    fn(base);
    return;
  }
  for (int64_t d : p.redDims)
    if (d == 0)
      return;
  int64_t idx[16] = {0};
  std::vector<int64_t> bigIdx;
  int64_t *index = idx;
  if (rank > 16) {
    bigIdx.assign(rank, 0);
    index = bigIdx.data();
  }
  int64_t offset = base;
  while (true) {
    fn(offset);
    size_t d = rank;
    while (d > 0) {
      --d;
      ++index[d];
      offset += p.redStrides[d];
      if (index[d] < p.redDims[d])
        break;
      offset -= index[d] * p.redStrides[d];
      index[d] = 0;
      if (d == 0)
        return;
    }
  }
}

inline int64_t keptBase(const ReduceGeometry &p, int64_t block) {
  int64_t base = 0;
  for (int64_t d = static_cast<int64_t>(p.keptDims.size()) - 1; d >= 0; --d) {
    base += (block % p.keptDims[d]) * p.keptStrides[d];
    block /= p.keptDims[d];
  }
  return base;
}

/// Float sums of runs at least this long keep this many partial sums
/// (element i of a run into i % kSplitSums), added pairwise at the end.
constexpr int64_t kSplitSums = 8;

/// Adds src[0, len) into \p part, element t into part[t % kSplitSums]
/// (len's elements starting a run, or at a multiple of kSplitSums in it).
template <typename T>
inline void addSplit(double *part, const T *src, int64_t len) {
  int64_t t = 0;
  for (; t + kSplitSums <= len; t += kSplitSums)
    for (int64_t j = 0; j < kSplitSums; ++j)
      part[j] += static_cast<double>(src[t + j]);
  for (int64_t j = 0; t < len; ++t, ++j)
    part[j] += static_cast<double>(src[t]);
}

/// The sum of the partial sums, added pairwise.
inline double combineSplit(double *part) {
  for (int64_t width = kSplitSums / 2; width > 0; width /= 2)
    for (int64_t j = 0; j < width; ++j)
      part[j] += part[j + width];
  return part[0];
}

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_CORE_REDUCE_PLAN_H

//===- cpu.cpp - The reductions on the CPU --------------------------------===//
//
// A reduction is described by groups of operand dims, adjacent dims with the
// same kept/reduced status merged. Two loop shapes cover every axes set with
// unit-stride inner loops:
// - innermost group kept ("lanes"): each output block accumulates a vector of
//   contiguous outputs while walking the reduced dims;
// - innermost group reduced: each output reduces contiguous runs.
//
//===----------------------------------------------------------------------===//

#include "core/kernel_math.h"
#include "core/reduce_plan.h"
#include "cpu/cpu_kernel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <omp.h>

namespace cleave::rt {
namespace {

enum class ReduceKind { Sum, Mean, Max, Min, Prod };

/// Accumulation rules per kind and element type. Floats accumulate sums and
/// products in double; integers in uint64_t so that overflow wraps.
template <typename T, ReduceKind K> struct Reducer {
  static constexpr bool kIsFloat = std::is_floating_point_v<T>;
  static constexpr bool kIsExtremum =
      K == ReduceKind::Max || K == ReduceKind::Min;
  using Acc =
      std::conditional_t<kIsExtremum, T,
                         std::conditional_t<kIsFloat, double, uint64_t>>;

  static Acc init() {
    if constexpr (K == ReduceKind::Max)
      return kIsFloat ? -std::numeric_limits<T>::infinity()
                      : std::numeric_limits<T>::lowest();
    else if constexpr (K == ReduceKind::Min)
      return kIsFloat ? std::numeric_limits<T>::infinity()
                      : std::numeric_limits<T>::max();
    else if constexpr (K == ReduceKind::Prod)
      return Acc(1);
    else
      return Acc(0);
  }
  static Acc combine(Acc acc, T x) {
    if constexpr (K == ReduceKind::Max) {
      if constexpr (kIsFloat)
        if (std::isnan(x))
          return x;
      return x > acc ? x : acc;
    } else if constexpr (K == ReduceKind::Min) {
      if constexpr (kIsFloat)
        if (std::isnan(x))
          return x;
      return x < acc ? x : acc;
    } else if constexpr (K == ReduceKind::Prod) {
      return acc * static_cast<Acc>(x);
    } else {
      return acc + static_cast<Acc>(x);
    }
  }
  static T finish(Acc acc, int64_t count) {
    if constexpr (K == ReduceKind::Mean)
      return static_cast<T>(acc / static_cast<double>(count));
    else if constexpr (!kIsFloat && !kIsExtremum)
      return static_cast<T>(static_cast<int64_t>(acc));
    else
      return static_cast<T>(acc);
  }
};

template <typename T, ReduceKind K>
void runReduce(const ReduceGeometry &p, const T *in, T *out) {
  using R = Reducer<T, K>;
  using Acc = typename R::Acc;
  bool parallel = p.numOutputs * p.reduceCount > kParallelThreshold;
  if (p.lanes > 0) {
    // Each task walks its lanes down every reduced row: as wide as the
    // threads allow (a bias gradient's 2,048 columns in two halves, each
    // row's half one contiguous read) rather than in narrow strips that
    // revisit every row. Each output adds in the same order either way.
    constexpr int64_t kMaxChunk = 2048;
    int64_t blocks = p.numOutputs / p.lanes;
    int64_t threads = parallel ? std::max(1, omp_get_max_threads()) : 1;
    int64_t perThread = (p.lanes * blocks + threads - 1) / threads;
    int64_t chunk =
        std::clamp<int64_t>((perThread + 63) / 64 * 64, 256, kMaxChunk);
    int64_t chunks = (p.lanes + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (parallel && blocks * chunks > 1)
    for (int64_t t = 0; t < blocks * chunks; ++t) {
      int64_t block = t / chunks;
      int64_t first = (t % chunks) * chunk;
      int64_t width = std::min(chunk, p.lanes - first);
      Acc acc[kMaxChunk];
      for (int64_t l = 0; l < width; ++l)
        acc[l] = R::init();
      walkReduced(p, keptBase(p, block) + first, [&](int64_t offset) {
        const T *src = in + offset;
        for (int64_t l = 0; l < width; ++l)
          acc[l] = R::combine(acc[l], src[l]);
      });
      T *dst = out + block * p.lanes + first;
      for (int64_t l = 0; l < width; ++l)
        dst[l] = R::finish(acc[l], p.reduceCount);
    }
    return;
  }
  int64_t run = p.innerRun;
  // Float sums of long runs keep kSplit partial sums (element i into
  // i % kSplit), added pairwise at the end: one accumulator would chain
  // every add on the last (an add's latency per element, unvectorised).
  constexpr bool kSplitFloat =
      R::kIsFloat && !R::kIsExtremum && K != ReduceKind::Prod;
  constexpr int64_t kSplit = kSplitSums;
#pragma omp parallel for schedule(static) if (parallel && p.numOutputs > 1)
  for (int64_t o = 0; o < p.numOutputs; ++o) {
    Acc acc = R::init();
    if constexpr (kSplitFloat) {
      if (run >= kSplit) {
        double part[kSplit] = {};
        walkReduced(p, keptBase(p, o),
                    [&](int64_t offset) { addSplit(part, in + offset, run); });
        out[o] = R::finish(combineSplit(part), p.reduceCount);
        continue;
      }
    }
    walkReduced(p, keptBase(p, o), [&](int64_t offset) {
      const T *src = in + offset;
      for (int64_t i = 0; i < run; ++i)
        acc = R::combine(acc, src[i]);
    });
    out[o] = R::finish(acc, p.reduceCount);
  }
}

template <typename T>
KernelFn makeReduce(ReduceKind kind, std::shared_ptr<ReduceGeometry> plan) {
  auto make = [plan](auto fnPtr) -> KernelFn {
    return [plan, fnPtr](const KernelArgs &args) {
      fnPtr(*plan, static_cast<const T *>(args.operands[0]),
            static_cast<T *>(args.results[0]));
      return Status::ok();
    };
  };
  switch (kind) {
  case ReduceKind::Sum:
    return make(&runReduce<T, ReduceKind::Sum>);
  case ReduceKind::Mean:
    if constexpr (std::is_floating_point_v<T>)
      return make(&runReduce<T, ReduceKind::Mean>);
    return nullptr;
  case ReduceKind::Max:
    return make(&runReduce<T, ReduceKind::Max>);
  case ReduceKind::Min:
    return make(&runReduce<T, ReduceKind::Min>);
  case ReduceKind::Prod:
    return make(&runReduce<T, ReduceKind::Prod>);
  }
  return nullptr;
}

Status prepareReduce(const KernelInfo &info, KernelFn *fn, ReduceKind kind,
                     const std::vector<int64_t> &axes) {
  const TensorType &a = info.operand(0);
  std::vector<bool> reduced(a.shape.size(), false);
  for (int64_t axis : axes)
    reduced[axis] = true;
  auto plan = std::make_shared<ReduceGeometry>(planReduction(a.shape, reduced));

  switch (a.dtype) {
  case DType::F32:
    *fn = makeReduce<float>(kind, plan);
    break;
  case DType::I32:
    *fn = makeReduce<int32_t>(kind, plan);
    break;
  default:
    *fn = makeReduce<int64_t>(kind, plan);
    break;
  }
  return Status::ok();
}

} // namespace

Status prepare_reduce_sum(const KernelInfo &info, KernelFn *fn) {
  return prepareReduce(info, fn, ReduceKind::Sum,
                       info.params<schema::Kernel::k_reduce_sum>().axes);
}
Status prepare_reduce_mean(const KernelInfo &info, KernelFn *fn) {
  return prepareReduce(info, fn, ReduceKind::Mean,
                       info.params<schema::Kernel::k_reduce_mean>().axes);
}
Status prepare_reduce_max(const KernelInfo &info, KernelFn *fn) {
  return prepareReduce(info, fn, ReduceKind::Max,
                       info.params<schema::Kernel::k_reduce_max>().axes);
}
Status prepare_reduce_min(const KernelInfo &info, KernelFn *fn) {
  return prepareReduce(info, fn, ReduceKind::Min,
                       info.params<schema::Kernel::k_reduce_min>().axes);
}
Status prepare_reduce_prod(const KernelInfo &info, KernelFn *fn) {
  return prepareReduce(info, fn, ReduceKind::Prod,
                       info.params<schema::Kernel::k_reduce_prod>().axes);
}

} // namespace cleave::rt

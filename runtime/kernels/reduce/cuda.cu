//===- cuda.cu - The reductions on the GPU --------------------------------===//
//
// The GPU counterparts of cpu.cpp beside it, with the same accumulation
// types so results match the CPU backend to within summation order: float
// sums, means and products accumulate in double, integer ones in uint64_t
// (wrapping like the CPU), max/min propagate NaN.
//
// Reductions use the CPU's grouping of operand dims (adjacent dims of the
// same kept/reduced status merged, unit dims dropped) and one of two layouts:
// - innermost group kept ("lanes"): consecutive threads own consecutive
//   outputs, so every step over the reduced dims reads contiguous memory;
// - innermost group reduced ("run"): a thread (tiny reductions), a warp
//   (short ones) or a block (long ones) reduces each output, combining by
//   warp shuffles (cuda/block_reduce.cuh).
// When there are too few outputs to fill the GPU, the reduced range is split
// across blocks that write partial accumulators to a scratch buffer owned by
// the kernel; a second launch combines them in split order, so results are
// deterministic.
//
//===----------------------------------------------------------------------===//

#include "core/kernel_math.h"
#include "cuda/block_reduce.cuh"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>

namespace cleave::rt::cuda {
namespace {

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

enum class ReduceKind { Sum, Mean, Max, Min, Prod };

/// The CPU's Reducer on the device, plus merge() for partial accumulators.
template <typename T, ReduceKind K> struct Reducer {
  static constexpr bool kIsFloat = std::is_floating_point_v<T>;
  static constexpr bool kIsExtremum =
      K == ReduceKind::Max || K == ReduceKind::Min;
  using Acc =
      std::conditional_t<kIsExtremum, T,
                         std::conditional_t<kIsFloat, double, uint64_t>>;

  __device__ static Acc identity() {
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
  __device__ static Acc combine(Acc acc, T x) {
    if constexpr (K == ReduceKind::Max) {
      if constexpr (kIsFloat)
        if (isnan(x))
          return x;
      return x > acc ? x : acc;
    } else if constexpr (K == ReduceKind::Min) {
      if constexpr (kIsFloat)
        if (isnan(x))
          return x;
      return x < acc ? x : acc;
    } else if constexpr (K == ReduceKind::Prod) {
      return acc * static_cast<Acc>(x);
    } else {
      return acc + static_cast<Acc>(x);
    }
  }
  /// Combines two partial results. Wrapping uint64_t sums and products are
  /// associative, so integer results are exact in any order.
  __device__ static Acc merge(Acc a, Acc b) {
    if constexpr (kIsExtremum)
      return combine(a, b);
    else if constexpr (K == ReduceKind::Prod)
      return a * b;
    else
      return a + b;
  }
  __device__ static T finish(Acc acc, int64_t count) {
    if constexpr (K == ReduceKind::Mean)
      return static_cast<T>(acc / static_cast<double>(count));
    else if constexpr (!kIsFloat && !kIsExtremum)
      return static_cast<T>(static_cast<int64_t>(acc));
    else
      return static_cast<T>(acc);
  }
};

/// A reduction after grouping; passed by value to the kernels.
struct ReduceGeom {
  /// Kept groups outside the lanes (outermost first) and their strides.
  int keptRank = 0;
  int64_t keptDims[kMaxRank] = {}, keptStrides[kMaxRank] = {};
  /// Reduced groups outside the innermost run and their strides.
  int redRank = 0;
  int64_t redDims[kMaxRank] = {}, redStrides[kMaxRank] = {};
  /// Innermost group kept: its size (> 0); 0 when it is reduced.
  int64_t lanes = 0;
  /// Innermost group reduced: its size (contiguous); 1 otherwise.
  int64_t run = 1;
  /// Product of redDims: positions of the reduced odometer.
  int64_t positions = 1;
  int64_t numOutputs = 0;
  /// Elements reduced into each output.
  int64_t reduceCount = 1;
};

/// Operand offset of kept block \p block.
__device__ int64_t keptBase(const ReduceGeom &g, int64_t block) {
  int64_t base = 0;
  for (int d = g.keptRank - 1; d >= 0; --d) {
    base += (block % g.keptDims[d]) * g.keptStrides[d];
    block /= g.keptDims[d];
  }
  return base;
}

/// Operand offset of reduced position \p q (row-major over redDims).
__device__ int64_t redOffset(const ReduceGeom &g, int64_t q) {
  if (g.redRank == 1)
    return q * g.redStrides[0];
  int64_t offset = 0;
  for (int d = g.redRank - 1; d >= 0; --d) {
    offset += (q % g.redDims[d]) * g.redStrides[d];
    q /= g.redDims[d];
  }
  return offset;
}

/// Lanes layout. Block (blockDim.x, blockDim.y): x walks outputs, y splits
/// the reduced positions within the block; blockIdx.y picks a split of
/// gridDim.y. Each thread reduces \p chunk positions, then y = 0 combines the
/// block's column in order.
template <typename T, ReduceKind K>
__global__ void reduceLanesKernel(ReduceGeom g, const T *in, T *out,
                                  typename Reducer<T, K>::Acc *partials,
                                  int64_t chunk) {
  using R = Reducer<T, K>;
  using Acc = typename R::Acc;
  __shared__ Acc column[kBlock];
  int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  bool active = o < g.numOutputs;
  Acc acc = R::identity();
  if (active) {
    int64_t base = keptBase(g, o / g.lanes) + o % g.lanes;
    int64_t begin = (blockIdx.y * int64_t(blockDim.y) + threadIdx.y) * chunk;
    int64_t end = min(g.positions, begin + chunk);
    if (g.redRank <= 1) {
      int64_t stride = g.redRank ? g.redStrides[0] : 0;
      const T *src = in + base;
      for (int64_t q = begin; q < end; ++q)
        acc = R::combine(acc, src[q * stride]);
    } else {
      for (int64_t q = begin; q < end; ++q)
        acc = R::combine(acc, in[base + redOffset(g, q)]);
    }
  }
  column[threadIdx.y * blockDim.x + threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || !active)
    return;
  for (unsigned y = 1; y < blockDim.y; ++y)
    acc = R::merge(acc, column[y * blockDim.x + threadIdx.x]);
  if (gridDim.y == 1)
    out[o] = R::finish(acc, g.reduceCount);
  else
    partials[blockIdx.y * g.numOutputs + o] = acc;
}

/// Run layout: G threads per output (a thread, a warp, or the whole block
/// of kBlock threads). blockIdx.y picks a split of \p unitsPerSplit units:
/// run elements when there is no reduced odometer, else positions.
template <typename T, ReduceKind K, int G>
__global__ void reduceRunKernel(ReduceGeom g, const T *in, T *out,
                                typename Reducer<T, K>::Acc *partials,
                                int64_t unitsPerSplit) {
  static_assert(G == 1 || G == kWarp || G == kBlock, "unsupported group");
  using R = Reducer<T, K>;
  using Acc = typename R::Acc;
  int64_t o;
  int lane;
  if constexpr (G < kBlock) {
    o = blockIdx.x * int64_t(blockDim.x / G) + threadIdx.x / G;
    lane = threadIdx.x % G;
    // Whole groups leave together, so warp shuffles below stay full-mask.
    if (o >= g.numOutputs)
      return;
  } else {
    o = blockIdx.x;
    lane = threadIdx.x;
  }
  const T *src = in + keptBase(g, o);
  int64_t begin = blockIdx.y * unitsPerSplit;
  Acc acc = R::identity();
  if (g.redRank == 0) {
    int64_t end = min(g.run, begin + unitsPerSplit);
    for (int64_t i = begin + lane; i < end; i += G)
      acc = R::combine(acc, src[i]);
  } else if (g.run >= G) {
    int64_t end = min(g.positions, begin + unitsPerSplit);
    for (int64_t q = begin; q < end; ++q) {
      const T *row = src + redOffset(g, q);
      for (int64_t i = lane; i < g.run; i += G)
        acc = R::combine(acc, row[i]);
    }
  } else {
    // Runs shorter than the group: spread the flattened elements over the
    // lanes instead of idling most of them.
    int64_t end = min(g.positions, begin + unitsPerSplit) * g.run;
    for (int64_t r = begin * g.run + lane; r < end; r += G) {
      int64_t q = r / g.run;
      acc = R::combine(acc, src[redOffset(g, q) + (r - q * g.run)]);
    }
  }
  if constexpr (G == kWarp)
    acc = warpAllReduce<R>(acc);
  else if constexpr (G == kBlock)
    acc = blockAllReduce<R>(acc);
  if (lane != 0)
    return;
  if (gridDim.y == 1)
    out[o] = R::finish(acc, g.reduceCount);
  else
    partials[blockIdx.y * g.numOutputs + o] = acc;
}

/// Combines \p splits partial accumulators per output, in split order.
template <typename T, ReduceKind K>
__global__ void reduceFinishKernel(const typename Reducer<T, K>::Acc *partials,
                                   int64_t splits, int64_t numOutputs,
                                   int64_t count, T *out) {
  using R = Reducer<T, K>;
  CLEAVE_GRID_LOOP(o, numOutputs) {
    typename R::Acc acc = partials[o];
    for (int64_t s = 1; s < splits; ++s)
      acc = R::merge(acc, partials[s * numOutputs + o]);
    out[o] = R::finish(acc, count);
  }
}

/// Reductions over zero elements: every output is the identity, finished
/// (a NaN mean, as on the CPU).
template <typename T, ReduceKind K>
__global__ void reduceEmptyKernel(T *out, int64_t numOutputs) {
  using R = Reducer<T, K>;
  CLEAVE_GRID_LOOP(o, numOutputs) out[o] = R::finish(R::identity(), 0);
}

/// Launch parameters chosen at prepare time.
struct ReduceLaunch {
  const char *name = "";
  ReduceGeom g;
  enum class Shape {
    Empty,
    Lanes,
    ThreadRuns,
    WarpRuns,
    BlockRuns
  } shape = Shape::Empty;
  dim3 grid, block;
  /// Lanes: positions per thread; runs: units per split.
  int64_t units = 0;
  int64_t splits = 1;
  /// splits * numOutputs accumulators of 8 bytes, when splits > 1.
  std::shared_ptr<void> partials;
};

template <typename T, ReduceKind K>
Status runReduce(const ReduceLaunch &p, const KernelArgs &args, Context &ctx) {
  using Acc = typename Reducer<T, K>::Acc;
  const auto *in = static_cast<const T *>(args.operands[0]);
  auto *out = static_cast<T *>(args.results[0]);
  const ReduceGeom &g = p.g;
  if (g.numOutputs == 0)
    return Status::ok();
  auto *partials = static_cast<Acc *>(p.partials.get());
  switch (p.shape) {
  case ReduceLaunch::Shape::Empty:
    reduceEmptyKernel<T, K>
        <<<gridFor(g.numOutputs), kBlock, 0, ctx.stream>>>(out, g.numOutputs);
    return launchStatus(p.name);
  case ReduceLaunch::Shape::Lanes:
    reduceLanesKernel<T, K>
        <<<p.grid, p.block, 0, ctx.stream>>>(g, in, out, partials, p.units);
    break;
  case ReduceLaunch::Shape::ThreadRuns:
    reduceRunKernel<T, K, 1>
        <<<p.grid, p.block, 0, ctx.stream>>>(g, in, out, partials, p.units);
    break;
  case ReduceLaunch::Shape::WarpRuns:
    reduceRunKernel<T, K, kWarp>
        <<<p.grid, p.block, 0, ctx.stream>>>(g, in, out, partials, p.units);
    break;
  case ReduceLaunch::Shape::BlockRuns:
    reduceRunKernel<T, K, kBlock>
        <<<p.grid, p.block, 0, ctx.stream>>>(g, in, out, partials, p.units);
    break;
  }
  if (Status s = launchStatus(p.name); !s || p.splits == 1)
    return s;
  reduceFinishKernel<T, K><<<gridFor(g.numOutputs), kBlock, 0, ctx.stream>>>(
      partials, p.splits, g.numOutputs, g.reduceCount, out);
  return launchStatus(p.name);
}

template <typename T>
DeviceFn makeReduce(ReduceKind kind, std::shared_ptr<ReduceLaunch> plan) {
  auto make = [plan](auto fnPtr) -> DeviceFn {
    return [plan, fnPtr](const KernelArgs &args, Context &ctx) {
      return fnPtr(*plan, args, ctx);
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

/// Groups the operand dims as the CPU backend does.
Status buildGeom(const TensorType &a, const std::vector<int64_t> &axes,
                 ReduceGeom *g) {
  std::vector<bool> reduced(a.shape.size(), false);
  for (int64_t axis : axes)
    reduced[axis] = true;
  g->numOutputs = 1;
  g->reduceCount = 1;
  for (size_t d = 0; d < a.shape.size(); ++d)
    (reduced[d] ? g->reduceCount : g->numOutputs) *= a.shape[d];
  struct Group {
    bool reduced;
    int64_t size, stride;
  };
  std::vector<Group> groups;
  std::vector<int64_t> strides = contiguousStrides(a.shape);
  for (size_t d = 0; d < a.shape.size(); ++d) {
    if (a.shape[d] == 1)
      continue;
    if (!groups.empty() && groups.back().reduced == reduced[d]) {
      groups.back().size *= a.shape[d];
      groups.back().stride = strides[d];
    } else {
      groups.push_back({reduced[d], a.shape[d], strides[d]});
    }
  }
  if (!groups.empty()) {
    (groups.back().reduced ? g->run : g->lanes) = groups.back().size;
    groups.pop_back();
  }
  for (const Group &group : groups) {
    int &rank = group.reduced ? g->redRank : g->keptRank;
    if (rank == kMaxRank)
      return Status::error("the CUDA backend reduces at most " +
                           std::to_string(kMaxRank) +
                           " alternating groups of dims of " + a.str());
    (group.reduced ? g->redDims : g->keptDims)[rank] = group.size;
    (group.reduced ? g->redStrides : g->keptStrides)[rank] = group.stride;
    ++rank;
    if (group.reduced)
      g->positions *= group.size;
  }
  return Status::ok();
}

/// Splits for \p outputBlocks blocks over \p units units of work, each split
/// keeping at least \p minUnits of them.
int64_t chooseSplits(int64_t outputBlocks, int64_t units, int64_t minUnits) {
  if (outputBlocks >= kTargetBlocks)
    return 1;
  int64_t splits = std::min(ceilDiv(kTargetBlocks, outputBlocks),
                            units / std::max<int64_t>(minUnits, 1));
  return std::clamp<int64_t>(splits, 1, kMaxGridY);
}

Status prepareReduce(const KernelInfo &info, DeviceFn *fn, ReduceKind kind,
                     const char *name, const std::vector<int64_t> &axes) {
  const TensorType &a = info.operand(0);
  auto p = std::make_shared<ReduceLaunch>();
  p->name = name;
  if (Status s = buildGeom(a, axes, &p->g); !s)
    return s;
  ReduceGeom &g = p->g;
  int64_t blocks = 0;
  if (g.numOutputs == 0 || g.reduceCount == 0) {
    p->shape = ReduceLaunch::Shape::Empty;
  } else if (g.lanes > 0) {
    p->shape = ReduceLaunch::Shape::Lanes;
    // Few positions: fewer threads along y, more along the outputs.
    int64_t rows = g.positions >= 8 ? 8 : g.positions >= 4 ? 4 : 2;
    if (g.positions == 1)
      rows = 1;
    int64_t cols = kBlock / rows;
    blocks = ceilDiv(g.numOutputs, cols);
    p->splits = chooseSplits(blocks, g.positions, rows * kMinPerThread);
    p->units = ceilDiv(g.positions, p->splits * rows);
    p->splits = ceilDiv(g.positions, p->units * rows);
    p->block = dim3(static_cast<unsigned>(cols), static_cast<unsigned>(rows));
  } else if (g.reduceCount <= kThreadRunLimit) {
    p->shape = ReduceLaunch::Shape::ThreadRuns;
    blocks = ceilDiv(g.numOutputs, kBlock);
    p->units = g.redRank ? g.positions : g.run;
    p->block = dim3(kBlock);
  } else if (g.reduceCount <= kWarpRowLimit) {
    p->shape = ReduceLaunch::Shape::WarpRuns;
    blocks = ceilDiv(g.numOutputs, kBlock / kWarp);
    p->units = g.redRank ? g.positions : g.run;
    p->block = dim3(kBlock);
  } else {
    p->shape = ReduceLaunch::Shape::BlockRuns;
    blocks = g.numOutputs;
    int64_t units = g.redRank ? g.positions : g.run;
    int64_t minUnits = g.redRank ? ceilDiv(kBlock * kMinPerThread, g.run)
                                 : kBlock * kMinPerThread;
    p->splits = chooseSplits(blocks, units, minUnits);
    p->units = ceilDiv(units, p->splits);
    p->splits = ceilDiv(units, p->units);
    p->block = dim3(kBlock);
  }
  if (blocks > kMaxGridX)
    return gridError(name, blocks);
  p->grid = dim3(static_cast<unsigned>(std::max<int64_t>(blocks, 1)),
                 static_cast<unsigned>(p->splits));
  if (p->splits > 1) {
    void *scratch = nullptr;
    size_t bytes = static_cast<size_t>(p->splits * g.numOutputs) * 8;
    if (Status s = cudaStatus(cudaMalloc(&scratch, bytes), name); !s)
      return s;
    p->partials = std::shared_ptr<void>(scratch, [](void *q) { cudaFree(q); });
  }

  DeviceFn made;
  if (a.dtype == DType::F32)
    made = makeReduce<float>(kind, p);
  else if (a.dtype == DType::I32)
    made = makeReduce<int32_t>(kind, p);
  else if (a.dtype == DType::I64)
    made = makeReduce<int64_t>(kind, p);
  if (!made)
    return Status::error(std::string(name) + ": unsupported dtype " +
                         dtypeName(a.dtype));
  *fn = std::move(made);
  return Status::ok();
}

} // namespace

Status prepare_reduce_sum(const KernelInfo &info, DeviceFn *fn) {
  return prepareReduce(info, fn, ReduceKind::Sum, "reduce_sum",
                       info.params<schema::Kernel::k_reduce_sum>().axes);
}
Status prepare_reduce_mean(const KernelInfo &info, DeviceFn *fn) {
  return prepareReduce(info, fn, ReduceKind::Mean, "reduce_mean",
                       info.params<schema::Kernel::k_reduce_mean>().axes);
}
Status prepare_reduce_max(const KernelInfo &info, DeviceFn *fn) {
  return prepareReduce(info, fn, ReduceKind::Max, "reduce_max",
                       info.params<schema::Kernel::k_reduce_max>().axes);
}
Status prepare_reduce_min(const KernelInfo &info, DeviceFn *fn) {
  return prepareReduce(info, fn, ReduceKind::Min, "reduce_min",
                       info.params<schema::Kernel::k_reduce_min>().axes);
}
Status prepare_reduce_prod(const KernelInfo &info, DeviceFn *fn) {
  return prepareReduce(info, fn, ReduceKind::Prod, "reduce_prod",
                       info.params<schema::Kernel::k_reduce_prod>().axes);
}

} // namespace cleave::rt::cuda

//===- reduce.cu - Reductions, softmax and normalisation on the GPU -------===//
//
// The GPU counterparts of runtime/cpu/reduce.cpp (reduce_*, softmax,
// log_softmax) and of layer_norm and batch_norm in runtime/cpu/nn.cpp, with
// the same accumulation types so results match the CPU backend to within
// summation order: float sums, means and products accumulate in double,
// integer ones in uint64_t (wrapping like the CPU), max/min propagate NaN.
//
// Reductions use the CPU's grouping of operand dims (adjacent dims of the
// same kept/reduced status merged, unit dims dropped) and one of two layouts:
// - innermost group kept ("lanes"): consecutive threads own consecutive
//   outputs, so every step over the reduced dims reads contiguous memory;
// - innermost group reduced ("run"): a thread (tiny reductions), a warp
//   (short ones) or a block (long ones) reduces each output, combining by
//   warp shuffles.
// When there are too few outputs to fill the GPU, the reduced range is split
// across blocks that write partial accumulators to a scratch buffer owned by
// the kernel; a second launch combines them in split order, so results are
// deterministic.
//
// Softmax, log_softmax and layer_norm over contiguous rows give each row a
// warp (rows up to kWarpRowLimit) or a block, looping over the row.
//
//===----------------------------------------------------------------------===//

#include "core/kernel_math.h"
#include "cuda/cuda_common.cuh"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>

namespace cleave::rt::cuda {
namespace {

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;
/// Rows (or reductions) up to this many elements get one warp; longer ones a
/// whole block of kBlock threads.
constexpr int64_t kWarpRowLimit = 1024;
/// Reductions of up to this many elements get one thread per output.
constexpr int64_t kThreadRunLimit = 16;
/// A few waves of blocks on an H200 (132 SMs): reductions with fewer output
/// blocks than this split their reduced range.
constexpr int64_t kTargetBlocks = 1024;
/// Fewest reduced elements a thread handles per split; below it the extra
/// launch and partial traffic cost more than the parallelism gains.
constexpr int64_t kMinPerThread = 32;
/// Largest gridDim.x a launch may use.
constexpr int64_t kMaxGridX = std::numeric_limits<int32_t>::max();
/// Largest gridDim.y.
constexpr int64_t kMaxGridY = 65535;

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

Status gridError(const char *kernel, int64_t blocks) {
  return Status::error(std::string(kernel) + ": " + std::to_string(blocks) +
                       " blocks exceed the CUDA grid limit");
}

//===----------------------------------------------------------------------===//
// Cooperative reductions
//===----------------------------------------------------------------------===//

/// Reduces \p v over the calling warp; every lane gets the result. The
/// butterfly order is fixed, so the result is deterministic.
template <typename Op, typename V> __device__ V warpAllReduce(V v) {
  for (int offset = kWarp / 2; offset > 0; offset >>= 1)
    v = Op::merge(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

/// Reduces \p v over the block (a multiple of kWarp threads, at most 1024);
/// every thread gets the result. All threads must call it.
template <typename Op, typename V> __device__ V blockAllReduce(V v) {
  __shared__ V partial[kWarp];
  v = warpAllReduce<Op>(v);
  int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  // A previous call may still be reading `partial` in slower warps.
  __syncthreads();
  if (lane == 0)
    partial[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / kWarp) ? partial[lane]
                                                  : Op::identity();
  return warpAllReduce<Op>(v);
}

/// A warp's or a block's all-reduce.
template <bool kWarpGroup, typename Op, typename V>
__device__ V groupAllReduce(V v) {
  if constexpr (kWarpGroup)
    return warpAllReduce<Op>(v);
  else
    return blockAllReduce<Op>(v);
}

/// Float max as std::max(acc, x) folds it on the CPU: NaN operands are
/// skipped (the CPU's NaN shows up later, through exp).
struct MaxOp {
  __device__ static float identity() {
    return -std::numeric_limits<float>::infinity();
  }
  __device__ static float merge(float a, float b) { return fmaxf(a, b); }
};

struct SumOp {
  __device__ static double identity() { return 0.0; }
  __device__ static double merge(double a, double b) { return a + b; }
};

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

//===----------------------------------------------------------------------===//
// Softmax and log_softmax
//===----------------------------------------------------------------------===//

/// The CPU's max shift: a row of -inf shifts by 0 (so it becomes 0/0, NaN,
/// like the reference frameworks); +inf stays.
__device__ float softmaxShift(float maxValue) {
  if (isinf(maxValue))
    return maxValue > 0 ? maxValue : 0.0f;
  return maxValue;
}

/// The row this thread works on, its lane in the row's group and the
/// group's width: a warp per row (several rows per block) or a block per
/// row. False for the surplus warps of the last block.
template <bool kWarpRow>
__device__ bool rowOfThread(int64_t outer, int64_t *row, int *lane,
                            int *width) {
  if constexpr (kWarpRow) {
    *row = blockIdx.x * int64_t(blockDim.x / kWarp) + threadIdx.x / kWarp;
    *lane = threadIdx.x % kWarp;
    *width = kWarp;
    return *row < outer;
  }
  *row = blockIdx.x;
  *lane = threadIdx.x;
  *width = blockDim.x;
  return true;
}

/// Softmax over contiguous rows of \p extent: a warp per row (several rows
/// per block) or a block per row.
template <bool kWarpRow>
__global__ void softmaxRowsKernel(const float *x, float *y, int64_t outer,
                                  int64_t extent, bool logSoftmax) {
  int64_t row;
  int lane, width;
  if (!rowOfThread<kWarpRow>(outer, &row, &lane, &width))
    return;
  const float *in = x + row * extent;
  float *out = y + row * extent;
  float maxValue = MaxOp::identity();
  for (int64_t i = lane; i < extent; i += width)
    maxValue = fmaxf(maxValue, in[i]);
  float shift = softmaxShift(groupAllReduce<kWarpRow, MaxOp>(maxValue));
  double sum = 0;
  for (int64_t i = lane; i < extent; i += width)
    sum += expf(in[i] - shift);
  sum = groupAllReduce<kWarpRow, SumOp>(sum);
  if (logSoftmax) {
    // (x - max) - log(sum), as on the CPU, to keep log(sum)'s digits.
    float logSum = static_cast<float>(log(sum));
    for (int64_t i = lane; i < extent; i += width)
      out[i] = (in[i] - shift) - logSum;
  } else {
    float scale = softmaxScale(sum);
    for (int64_t i = lane; i < extent; i += width)
      out[i] = expf(in[i] - shift) * scale;
  }
}

/// Softmax along a non-innermost axis: a thread per (outer, inner) column;
/// neighbouring threads read neighbouring inner elements.
__global__ void softmaxColumnsKernel(const float *x, float *y, int64_t outer,
                                     int64_t extent, int64_t inner,
                                     bool logSoftmax) {
  CLEAVE_GRID_LOOP(c, outer * inner) {
    int64_t o = c / inner;
    int64_t first = o * extent * inner + (c - o * inner);
    const float *in = x + first;
    float *out = y + first;
    float maxValue = MaxOp::identity();
    for (int64_t a = 0; a < extent; ++a)
      maxValue = fmaxf(maxValue, in[a * inner]);
    float shift = softmaxShift(maxValue);
    double sum = 0;
    for (int64_t a = 0; a < extent; ++a)
      sum += expf(in[a * inner] - shift);
    if (logSoftmax) {
      float logSum = static_cast<float>(log(sum));
      for (int64_t a = 0; a < extent; ++a)
        out[a * inner] = (in[a * inner] - shift) - logSum;
    } else {
      float scale = softmaxScale(sum);
      for (int64_t a = 0; a < extent; ++a)
        out[a * inner] = expf(in[a * inner] - shift) * scale;
    }
  }
}

Status prepareSoftmax(const KernelInfo &info, DeviceFn *fn, bool logSoftmax,
                      int64_t axis) {
  const char *name = logSoftmax ? "log_softmax" : "softmax";
  const TensorType &a = info.operand(0);
  int64_t outer = product(a.shape, 0, axis);
  int64_t extent = a.shape[axis];
  int64_t inner = product(a.shape, axis + 1, a.shape.size());
  bool warpRows = extent <= kWarpRowLimit;
  int64_t blocks = warpRows ? ceilDiv(outer, kBlock / kWarp) : outer;
  if (inner == 1 && blocks > kMaxGridX)
    return gridError(name, blocks);
  *fn = [=](const KernelArgs &args, Context &ctx) {
    const auto *x = static_cast<const float *>(args.operands[0]);
    auto *y = static_cast<float *>(args.results[0]);
    if (outer * extent * inner == 0)
      return Status::ok();
    auto grid = static_cast<unsigned>(blocks);
    if (inner != 1)
      softmaxColumnsKernel<<<gridFor(outer * inner), kBlock, 0, ctx.stream>>>(
          x, y, outer, extent, inner, logSoftmax);
    else if (warpRows)
      softmaxRowsKernel<true>
          <<<grid, kBlock, 0, ctx.stream>>>(x, y, outer, extent, logSoftmax);
    else
      softmaxRowsKernel<false>
          <<<grid, kBlock, 0, ctx.stream>>>(x, y, outer, extent, logSoftmax);
    return launchStatus(name);
  };
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Normalisation
//===----------------------------------------------------------------------===//

/// Layer norm over contiguous rows of \p inner. Statistics as on the CPU:
/// double sums, the mean rounded to f32 before the variance pass, and the
/// output products rounded one at a time (no FMA contraction), so y matches
/// the CPU's operation order.
template <bool kWarpRow>
__global__ void layerNormKernel(const float *x, const float *scale,
                                const float *bias, float *y, float *meanOut,
                                float *invStdOut, int64_t outer, int64_t inner,
                                float eps) {
  int64_t row;
  int lane, width;
  if (!rowOfThread<kWarpRow>(outer, &row, &lane, &width))
    return;
  const float *in = x + row * inner;
  float *out = y + row * inner;
  double sum = 0;
  for (int64_t i = lane; i < inner; i += width)
    sum += in[i];
  sum = groupAllReduce<kWarpRow, SumOp>(sum);
  float mean = rowMean(sum, inner);
  double sq = 0;
  for (int64_t i = lane; i < inner; i += width) {
    double d = static_cast<double>(in[i]) - mean;
    sq += d * d;
  }
  sq = groupAllReduce<kWarpRow, SumOp>(sq);
  float var = rowMean(sq, inner);
  float invStd = invStdOf(var, eps);
  for (int64_t i = lane; i < inner; i += width) {
    float v = __fmul_rn(in[i] - mean, invStd);
    if (scale)
      v = __fmul_rn(v, scale[i]);
    if (bias)
      v = __fadd_rn(v, bias[i]);
    out[i] = v;
  }
  if (lane != 0)
    return;
  if (meanOut)
    meanOut[row] = mean;
  if (invStdOut)
    invStdOut[row] = invStd;
}

/// ((x - mean) * invStd) * scale + bias, rounded step by step like the CPU.
__device__ float batchNormValue(float x, float mean, float invStd, float scale,
                                float bias) {
  return __fadd_rn(__fmul_rn(__fmul_rn(x - mean, invStd), scale), bias);
}

/// Batch norm with planes of at least half a block: blockIdx.y walks the
/// (n, c) planes, so the channel and its inverse std are found once per
/// plane instead of by two 64-bit divisions per element.
__global__ void batchNormPlanesKernel(const float *x, const float *scale,
                                      const float *bias, const float *mean,
                                      const float *var, float *y,
                                      int64_t planes, int64_t channels,
                                      int64_t plane, float eps) {
  for (int64_t p = blockIdx.y; p < planes; p += gridDim.y) {
    int64_t c = p % channels;
    float invStd = invStdOf(var[c], eps);
    float m = mean[c], s = scale[c], b = bias[c];
    const float *src = x + p * plane;
    float *dst = y + p * plane;
    for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < plane;
         j += int64_t(gridDim.x) * blockDim.x)
      dst[j] = batchNormValue(src[j], m, invStd, s, b);
  }
}

/// Batch norm with small planes: a thread per element.
__global__ void batchNormFlatKernel(const float *x, const float *scale,
                                    const float *bias, const float *mean,
                                    const float *var, float *y, int64_t total,
                                    int64_t channels, int64_t plane,
                                    float eps) {
  CLEAVE_GRID_LOOP(i, total) {
    int64_t c = (i / plane) % channels;
    float invStd = invStdOf(var[c], eps);
    y[i] = batchNormValue(x[i], mean[c], invStd, scale[c], bias[c]);
  }
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
Status prepare_softmax(const KernelInfo &info, DeviceFn *fn) {
  return prepareSoftmax(info, fn, /*logSoftmax=*/false,
                        info.params<schema::Kernel::k_softmax>().axis);
}
Status prepare_log_softmax(const KernelInfo &info, DeviceFn *fn) {
  return prepareSoftmax(info, fn, /*logSoftmax=*/true,
                        info.params<schema::Kernel::k_log_softmax>().axis);
}

Status prepare_layer_norm(const KernelInfo &info, DeviceFn *fn) {
  const TensorType &x = info.operand(0);
  const auto &attrs = info.params<schema::Kernel::k_layer_norm>();
  int64_t axis = attrs.axis;
  double epsilon = attrs.epsilon;
  int64_t outer = product(x.shape, 0, axis);
  int64_t inner = product(x.shape, axis, x.shape.size());
  bool warpRows = inner <= kWarpRowLimit;
  int64_t blocks = warpRows ? ceilDiv(outer, kBlock / kWarp) : outer;
  if (blocks > kMaxGridX)
    return gridError("layer_norm", blocks);
  float eps = static_cast<float>(epsilon);
  *fn = [=](const KernelArgs &args, Context &ctx) {
    if (outer == 0)
      return Status::ok();
    const auto *x = static_cast<const float *>(args.operands[0]);
    const auto *scale = static_cast<const float *>(args.operands[1]);
    const auto *bias = static_cast<const float *>(args.operands[2]);
    auto *y = static_cast<float *>(args.results[0]);
    auto *meanOut = static_cast<float *>(args.results[1]);
    auto *invStdOut = static_cast<float *>(args.results[2]);
    auto grid = static_cast<unsigned>(blocks);
    if (warpRows)
      layerNormKernel<true><<<grid, kBlock, 0, ctx.stream>>>(
          x, scale, bias, y, meanOut, invStdOut, outer, inner, eps);
    else
      layerNormKernel<false><<<grid, kBlock, 0, ctx.stream>>>(
          x, scale, bias, y, meanOut, invStdOut, outer, inner, eps);
    return launchStatus("layer_norm");
  };
  return Status::ok();
}

Status prepare_batch_norm(const KernelInfo &info, DeviceFn *fn) {
  const TensorType &x = info.operand(0);
  double epsilon = info.params<schema::Kernel::k_batch_norm>().epsilon;
  int64_t channels = x.shape[1];
  int64_t planes = x.shape[0] * channels;
  int64_t plane = product(x.shape, 2, x.shape.size());
  float eps = static_cast<float>(epsilon);
  *fn = [=](const KernelArgs &args, Context &ctx) {
    if (planes * plane == 0)
      return Status::ok();
    const auto *x = static_cast<const float *>(args.operands[0]);
    const auto *scale = static_cast<const float *>(args.operands[1]);
    const auto *bias = static_cast<const float *>(args.operands[2]);
    const auto *mean = static_cast<const float *>(args.operands[3]);
    const auto *var = static_cast<const float *>(args.operands[4]);
    auto *y = static_cast<float *>(args.results[0]);
    // Planes narrower than half a block would idle most of its threads.
    if (plane >= kBlock / 2) {
      dim3 grid(static_cast<unsigned>(
                    std::min<int64_t>(ceilDiv(plane, kBlock), kTargetBlocks)),
                static_cast<unsigned>(std::min(planes, kMaxGridY)));
      batchNormPlanesKernel<<<grid, kBlock, 0, ctx.stream>>>(
          x, scale, bias, mean, var, y, planes, channels, plane, eps);
    } else {
      batchNormFlatKernel<<<gridFor(planes * plane), kBlock, 0, ctx.stream>>>(
          x, scale, bias, mean, var, y, planes * plane, channels, plane, eps);
    }
    return launchStatus("batch_norm");
  };
  return Status::ok();
}

} // namespace cleave::rt::cuda

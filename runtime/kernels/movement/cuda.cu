//===- cuda.cu - Data movement on the GPU ---------------------------------===//
//
// transpose, broadcast, slice, slice_scatter and concat are strided walks
// (Walk) between a contiguous buffer and a strided one. They only depend on
// the element size, and when rows and pointers line up they move 4-, 8- or
// 16-byte words instead of elements. gather and scatter_add read their
// indices on the device, so a bad index is recorded in the error flag
// rather than returned. scatter_add sorts its indices stably by destination
// row, so that one thread sums each result element over its updates in
// increasing index order: bit-identical to the CPU backend, without atomics.
//
//===----------------------------------------------------------------------===//

#include "cleave/runtime/comm.h"
#include "cuda/cuda_common.cuh"

#include <cub/device/device_radix_sort.cuh>

#include <cstdint>
#include <memory>
#include <type_traits>

namespace cleave::rt::cuda {
namespace {

bool aligned(const void *p, int unit) {
  return reinterpret_cast<uintptr_t>(p) % unit == 0;
}

//===----------------------------------------------------------------------===//
// Strided walks
//===----------------------------------------------------------------------===//

/// A copy between a contiguous buffer of n elements and a strided one:
/// element i of the contiguous side is element base + ix.offsets(i) of the
/// strided side. The contiguous side is the result (a gather) unless
/// scatter.
struct Walk {
  Indexer ix;
  int64_t n = 0;
  int64_t base = 0;
  int elemSize = 1;
  bool scatter = false;
};

/// A walk over \p shape (the contiguous side) with strides \p strides into
/// the strided side; empty shapes make an empty walk.
Status makeWalk(const std::vector<int64_t> &shape,
                const std::vector<int64_t> &strides, int64_t base,
                size_t elemSize, bool scatter, Walk *out) {
  Walk w;
  w.elemSize = static_cast<int>(elemSize);
  w.scatter = scatter;
  for (int64_t d : shape)
    if (d == 0) {
      *out = w;
      return Status::ok();
    }
  w.n = product(shape, 0, shape.size());
  w.base = base;
  if (Status s = makeIndexer(shape, {strides}, &w.ix); !s)
    return s;
  *out = w;
  return Status::ok();
}

/// Rewrites \p w to move words of \p unit bytes (a multiple of its element
/// size) when its innermost dim is contiguous on both sides and every stride
/// and the base are whole words; false (and \p w unchanged) otherwise.
bool widen(Walk *w, int unit) {
  int64_t ratio = unit / w->elemSize;
  Indexer &ix = w->ix;
  int last = ix.rank - 1;
  if (ix.strides[0][last] != 1 || ix.dims[last] % ratio != 0 ||
      w->base % ratio != 0)
    return false;
  for (int d = 0; d < last; ++d)
    if (ix.strides[0][d] % ratio != 0)
      return false;
  ix.dims[last] /= ratio;
  for (int d = 0; d < last; ++d)
    ix.strides[0][d] /= ratio;
  w->base /= ratio;
  w->n /= ratio;
  w->elemSize = unit;
  return true;
}

/// Whether every linear index and offset of \p w fits in int32, whose
/// divisions are several times cheaper than int64's.
bool fits32(const Walk &w) {
  int64_t reach = w.base < 0 ? -w.base : w.base;
  for (int d = 0; d < w.ix.rank; ++d) {
    int64_t s = w.ix.strides[0][d];
    reach += (w.ix.dims[d] - 1) * (s < 0 ? -s : s);
    if (reach > INT32_MAX)
      return false;
  }
  return w.n <= INT32_MAX;
}

template <typename Idx>
__device__ Idx walkOffset(const Indexer &ix, Idx linear) {
  Idx offset = 0;
  for (int d = ix.rank - 1; d >= 0; --d) {
    Idx dim = static_cast<Idx>(ix.dims[d]);
    offset += (linear % dim) * static_cast<Idx>(ix.strides[0][d]);
    linear /= dim;
  }
  return offset;
}

template <typename T, typename Idx, bool Scatter>
__global__ void walkKernel(const T *in, T *out, Walk w) {
  CLEAVE_GRID_LOOP(i, w.n) {
    Idx j =
        static_cast<Idx>(w.base) + walkOffset<Idx>(w.ix, static_cast<Idx>(i));
    if (Scatter)
      out[j] = in[i];
    else
      out[i] = in[j];
  }
}

template <typename T>
void launchWalk(const Walk &w, const void *in, void *out, cudaStream_t s) {
  const T *src = static_cast<const T *>(in);
  T *dst = static_cast<T *>(out);
  unsigned grid = gridFor(w.n);
  bool small = fits32(w);
  if (w.scatter && small)
    walkKernel<T, int32_t, true><<<grid, kBlock, 0, s>>>(src, dst, w);
  else if (w.scatter)
    walkKernel<T, int64_t, true><<<grid, kBlock, 0, s>>>(src, dst, w);
  else if (small)
    walkKernel<T, int32_t, false><<<grid, kBlock, 0, s>>>(src, dst, w);
  else
    walkKernel<T, int64_t, false><<<grid, kBlock, 0, s>>>(src, dst, w);
}

/// Enqueues \p w from \p in to \p out; \p kernel names it in errors.
Status runWalk(Walk w, const void *in, void *out, cudaStream_t stream,
               const char *kernel) {
  if (w.n == 0)
    return Status::ok();
  // Pointers are only known now; they are fixed for the captured graph.
  for (int unit : {16, 8, 4}) {
    if (unit <= w.elemSize)
      break;
    if (aligned(in, unit) && aligned(out, unit) && widen(&w, unit))
      break;
  }
  if (w.ix.rank == 1 && w.ix.strides[0][0] == 1) {
    size_t bytes = static_cast<size_t>(w.n) * w.elemSize;
    size_t shift = static_cast<size_t>(w.base) * w.elemSize;
    const char *src = static_cast<const char *>(in) + (w.scatter ? 0 : shift);
    char *dst = static_cast<char *>(out) + (w.scatter ? shift : 0);
    return cudaStatus(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream),
        kernel);
  }
  switch (w.elemSize) {
  case 1:
    launchWalk<uint8_t>(w, in, out, stream);
    break;
  case 4:
    launchWalk<uint32_t>(w, in, out, stream);
    break;
  case 8:
    launchWalk<uint64_t>(w, in, out, stream);
    break;
  case 16:
    launchWalk<uint4>(w, in, out, stream);
    break;
  default:
    return Status::error(std::string(kernel) + ": unsupported element size " +
                         std::to_string(w.elemSize));
  }
  return launchStatus(kernel);
}

DeviceFn walkFn(Walk w, const char *kernel) {
  return [w, kernel](const KernelArgs &args, Context &ctx) {
    return runWalk(w, args.operands[0], args.results[0], ctx.stream, kernel);
  };
}

//===----------------------------------------------------------------------===//
// Indexed rows: gather and scatter_add
//===----------------------------------------------------------------------===//

/// Rows an index may name (core/kernel_info.h), read as the CPU reads them.
using Rows = ShardRows;

constexpr int64_t kOtherRank = -1;
constexpr int64_t kOutOfRange = -2;

/// This rank's row for index \p raw (negative counts from the end of the
/// global table), kOtherRank or kOutOfRange.
template <typename Index>
__device__ int64_t localRow(Index raw, const Rows &rows) {
  int64_t v = static_cast<int64_t>(raw);
  int64_t g = v < 0 ? v + rows.global : v;
  if (g < 0 || g >= rows.global)
    return kOutOfRange;
  int64_t l = g - rows.offset;
  return l >= 0 && l < rows.extent ? l : kOtherRank;
}

/// Checks every index when no element of the result reads them (the CPU
/// backend checks indices even then).
template <typename Index>
__global__ void checkIndicesKernel(const Index *indices, int64_t count,
                                   Rows rows, int *flag, int instruction) {
  CLEAVE_GRID_LOOP(j, count) {
    if (localRow(indices[j], rows) == kOutOfRange)
      reportError(flag, instruction, kErrorIndexOutOfRange);
  }
}

void launchCheckIndices(const void *indices, bool wide, int64_t count,
                        const Rows &rows, Context &ctx) {
  if (wide)
    checkIndicesKernel<<<gridFor(count), kBlock, 0, ctx.stream>>>(
        static_cast<const int64_t *>(indices), count, rows, ctx.errorFlag,
        ctx.instruction);
  else
    checkIndicesKernel<<<gridFor(count), kBlock, 0, ctx.stream>>>(
        static_cast<const int32_t *>(indices), count, rows, ctx.errorFlag,
        ctx.instruction);
}

/// out [outer, count, rowWords] from data [outer, extent, rowWords]: row j
/// of out is data row indices[j], or zeros when another rank holds it.
template <typename T, typename Index, typename Idx>
__global__ void gatherKernel(const T *data, const Index *indices, T *out,
                             int64_t total, Idx count, Idx rowWords, Rows rows,
                             int *flag, int instruction) {
  CLEAVE_GRID_LOOP(i, total) {
    Idx t = static_cast<Idx>(i) / rowWords, c = static_cast<Idx>(i) % rowWords;
    Idx o = t / count, j = t % count;
    int64_t l = localRow(indices[j], rows);
    if (l == kOutOfRange) {
      reportError(flag, instruction, kErrorIndexOutOfRange);
      continue;
    }
    out[i] =
        l == kOtherRank
            ? T{}
            : data[(o * static_cast<Idx>(rows.extent) + static_cast<Idx>(l)) *
                       rowWords +
                   c];
  }
}

/// gather's launch parameters (rowBytes > 0, outer * count > 0).
struct GatherGeometry {
  int64_t outer = 0, count = 0, rowBytes = 0;
  Rows rows;
  /// Every element index of the result and of data fits in int32.
  bool small = false;
};

template <typename T, typename Index>
void launchGather(const GatherGeometry &p, const void *data,
                  const void *indices, void *out, Context &ctx) {
  int64_t rowWords = p.rowBytes / static_cast<int64_t>(sizeof(T));
  int64_t total = p.outer * p.count * rowWords;
  auto *d = static_cast<const T *>(data);
  auto *ix = static_cast<const Index *>(indices);
  auto *o = static_cast<T *>(out);
  if (p.small)
    gatherKernel<T, Index, int32_t><<<gridFor(total), kBlock, 0, ctx.stream>>>(
        d, ix, o, total, static_cast<int32_t>(p.count),
        static_cast<int32_t>(rowWords), p.rows, ctx.errorFlag, ctx.instruction);
  else
    gatherKernel<T, Index, int64_t><<<gridFor(total), kBlock, 0, ctx.stream>>>(
        d, ix, o, total, p.count, rowWords, p.rows, ctx.errorFlag,
        ctx.instruction);
}

template <typename Index>
void runGather(const GatherGeometry &p, const KernelArgs &args, Context &ctx) {
  const void *data = args.operands[0], *indices = args.operands[1];
  void *out = args.results[0];
  // The widest word that divides a row and both buffers' alignment.
  int unit = 1;
  for (int u : {16, 8, 4})
    if (p.rowBytes % u == 0 && aligned(data, u) && aligned(out, u)) {
      unit = u;
      break;
    }
  switch (unit) {
  case 16:
    launchGather<uint4, Index>(p, data, indices, out, ctx);
    break;
  case 8:
    launchGather<uint64_t, Index>(p, data, indices, out, ctx);
    break;
  case 4:
    launchGather<uint32_t, Index>(p, data, indices, out, ctx);
    break;
  default:
    launchGather<uint8_t, Index>(p, data, indices, out, ctx);
    break;
  }
}

/// Keys for sorting scatter_add's updates by destination row: the row, or
/// rows.extent (after every row) for another rank's row or a bad index.
template <typename Index>
__global__ void scatterKeysKernel(const Index *indices, int64_t count,
                                  Rows rows, uint32_t *keys, uint32_t *order,
                                  int *flag, int instruction) {
  CLEAVE_GRID_LOOP(j, count) {
    int64_t l = localRow(indices[j], rows);
    if (l == kOutOfRange)
      reportError(flag, instruction, kErrorIndexOutOfRange);
    keys[j] = static_cast<uint32_t>(l < 0 ? rows.extent : l);
    order[j] = static_cast<uint32_t>(j);
  }
}

/// start[v] = first position of sorted \p keys holding a key >= v, for v in
/// [0, extent]: row v's updates are order[start[v], start[v + 1]).
__global__ void rowStartsKernel(const uint32_t *keys, int64_t count,
                                int64_t extent, uint32_t *start) {
  CLEAVE_GRID_LOOP(v, extent + 1) {
    int64_t lo = 0, hi = count;
    while (lo < hi) {
      int64_t mid = lo + (hi - lo) / 2;
      if (keys[mid] < v)
        lo = mid + 1;
      else
        hi = mid;
    }
    start[v] = static_cast<uint32_t>(lo);
  }
}

/// out [outer, extent, inner]: each element is 0.0f plus its updates
/// [outer, count, inner] in increasing index order, as the CPU sums them.
__global__ void scatterSumKernel(const float *updates, const uint32_t *order,
                                 const uint32_t *start, float *out,
                                 int64_t total, int64_t count, int64_t extent,
                                 int64_t inner) {
  CLEAVE_GRID_LOOP(i, total) {
    int64_t row = i / inner, c = i % inner;
    int64_t o = row / extent, v = row % extent;
    const float *src = updates + o * count * inner + c;
    float sum = 0.0f;
    for (uint32_t k = start[v], end = start[v + 1]; k < end; ++k)
      sum += src[static_cast<int64_t>(order[k]) * inner];
    out[i] = sum;
  }
}

/// scatter_add's device scratch, allocated once at prepare: sort keys and
/// update positions (in and out of the sort), row starts and the sort's
/// temporary storage.
struct ScatterScratch {
  std::shared_ptr<void> memory;
  uint32_t *keysIn = nullptr, *keysOut = nullptr;
  uint32_t *orderIn = nullptr, *orderOut = nullptr;
  uint32_t *start = nullptr;
  void *sortTemp = nullptr;
  size_t sortBytes = 0;
};

Status allocScatterScratch(int64_t count, int64_t extent, int endBit,
                           ScatterScratch *s) {
  size_t sortBytes = 0;
  if (Status st = cudaStatus(cub::DeviceRadixSort::SortPairs(
                                 nullptr, sortBytes,
                                 static_cast<const uint32_t *>(nullptr),
                                 static_cast<uint32_t *>(nullptr),
                                 static_cast<const uint32_t *>(nullptr),
                                 static_cast<uint32_t *>(nullptr),
                                 static_cast<int>(count), 0, endBit),
                             "scatter_add: sizing the index sort");
      !st)
    return st;
  // Each piece starts on a 256-byte boundary.
  auto round = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
  size_t keyBytes = round(static_cast<size_t>(count) * sizeof(uint32_t));
  size_t startBytes = round(static_cast<size_t>(extent + 1) * sizeof(uint32_t));
  size_t total = 4 * keyBytes + startBytes + round(sortBytes);
  void *raw = nullptr;
  if (Status st = cudaStatus(cudaMalloc(&raw, total),
                             "scatter_add: allocating the index sort");
      !st)
    return st;
  s->memory = std::shared_ptr<void>(raw, [](void *p) { cudaFree(p); });
  char *base = static_cast<char *>(raw);
  s->keysIn = reinterpret_cast<uint32_t *>(base);
  s->keysOut = reinterpret_cast<uint32_t *>(base + keyBytes);
  s->orderIn = reinterpret_cast<uint32_t *>(base + 2 * keyBytes);
  s->orderOut = reinterpret_cast<uint32_t *>(base + 3 * keyBytes);
  s->start = reinterpret_cast<uint32_t *>(base + 4 * keyBytes);
  s->sortTemp = base + 4 * keyBytes + startBytes;
  s->sortBytes = sortBytes;
  return Status::ok();
}

/// scatter_add's launch parameters.
struct ScatterGeometry {
  int64_t count = 0, outer = 0, extent = 0, inner = 0, total = 0;
  /// Whether there are updates to sum (else the result is zeros).
  bool scatter = false;
  int endBit = 1;
  Rows rows;
  ScatterScratch scratch;
};

template <typename Index>
Status runScatterAdd(const ScatterGeometry &p, const KernelArgs &args,
                     Context &ctx) {
  const auto *updates = static_cast<const float *>(args.operands[0]);
  const auto *indices = static_cast<const Index *>(args.operands[1]);
  auto *out = static_cast<float *>(args.results[0]);
  if (!p.scatter) {
    if (p.count > 0) {
      checkIndicesKernel<Index><<<gridFor(p.count), kBlock, 0, ctx.stream>>>(
          indices, p.count, p.rows, ctx.errorFlag, ctx.instruction);
      if (Status s = launchStatus("scatter_add"); !s)
        return s;
    }
    if (p.total == 0)
      return Status::ok();
    return cudaStatus(
        cudaMemsetAsync(out, 0, p.total * sizeof(float), ctx.stream),
        "scatter_add");
  }
  const ScatterScratch &s = p.scratch;
  scatterKeysKernel<Index><<<gridFor(p.count), kBlock, 0, ctx.stream>>>(
      indices, p.count, p.rows, s.keysIn, s.orderIn, ctx.errorFlag,
      ctx.instruction);
  if (Status st = launchStatus("scatter_add"); !st)
    return st;
  // Radix sort is stable: within a row, updates stay in index order.
  size_t sortBytes = s.sortBytes;
  if (Status st = cudaStatus(
          cub::DeviceRadixSort::SortPairs(
              s.sortTemp, sortBytes, s.keysIn, s.keysOut, s.orderIn, s.orderOut,
              static_cast<int>(p.count), 0, p.endBit, ctx.stream),
          "scatter_add: sorting indices");
      !st)
    return st;
  rowStartsKernel<<<gridFor(p.extent + 1), kBlock, 0, ctx.stream>>>(
      s.keysOut, p.count, p.extent, s.start);
  if (Status st = launchStatus("scatter_add"); !st)
    return st;
  if (p.total == 0)
    return Status::ok();
  scatterSumKernel<<<gridFor(p.total), kBlock, 0, ctx.stream>>>(
      updates, s.orderOut, s.start, out, p.total, p.count, p.extent, p.inner);
  return launchStatus("scatter_add");
}

/// Reads slice's and slice_scatter's window (element i along dim d of the
/// window is element starts[d] + i * steps[d] of the whole), checked by the
/// CPU prepare: the walk over the window into the whole.
template <typename P>
Status windowWalk(const P &attrs, const TensorType &whole,
                  const TensorType &window, bool scatter, Walk *w) {
  size_t rank = whole.shape.size();
  std::vector<int64_t> starts = attrs.starts,
                       steps =
                           attrs.steps.value_or(std::vector<int64_t>(rank, 1));
  if (safeNumElements(window) == 0)
    return makeWalk(window.shape, {}, 0, dtypeSize(whole.dtype), scatter, w);
  // The window is non-empty, so every dim of the whole is too and these
  // products are bounded by its element count.
  std::vector<int64_t> wholeStrides = contiguousStrides(whole.shape);
  std::vector<int64_t> strides(rank, 0);
  int64_t base = 0;
  for (size_t d = 0; d < rank; ++d) {
    if (window.shape[d] > 1)
      strides[d] = steps[d] * wholeStrides[d];
    base += starts[d] * wholeStrides[d];
  }
  return makeWalk(window.shape, strides, base, dtypeSize(whole.dtype), scatter,
                  w);
}

} // namespace

Status prepare_transpose(const KernelInfo &info, DeviceFn *fn) {
  const TensorType &a = info.operand(0), &r = info.result(0);
  const std::vector<int64_t> &perm =
      info.params<schema::Kernel::k_transpose>().perm;
  std::vector<int64_t> inStrides = contiguousStrides(a.shape);
  std::vector<int64_t> strides(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    strides[i] = inStrides[perm[i]];
  Walk w;
  if (Status s = makeWalk(r.shape, strides, 0, dtypeSize(r.dtype),
                          /*scatter=*/false, &w);
      !s)
    return s;
  *fn = walkFn(w, "transpose");
  return Status::ok();
}

Status prepare_broadcast(const KernelInfo &info, DeviceFn *fn) {
  const TensorType &a = info.operand(0), &r = info.result(0);
  Walk w;
  if (Status s = makeWalk(r.shape, broadcastStrides(a.shape, r.shape), 0,
                          dtypeSize(r.dtype), /*scatter=*/false, &w);
      !s)
    return s;
  *fn = walkFn(w, "broadcast");
  return Status::ok();
}

Status prepare_slice(const KernelInfo &info, DeviceFn *fn) {
  Walk w;
  if (Status s = windowWalk(info.params<schema::Kernel::k_slice>(),
                            info.operand(0), info.result(0),
                            /*scatter=*/false, &w);
      !s)
    return s;
  *fn = walkFn(w, "slice");
  return Status::ok();
}

Status prepare_slice_scatter(const KernelInfo &info, DeviceFn *fn) {
  const TensorType &a = info.operand(0), &r = info.result(0);
  Walk w;
  if (Status s =
          windowWalk(info.params<schema::Kernel::k_slice_scatter>(), r, a,
                     /*scatter=*/true, &w);
      !s)
    return s;
  int64_t outCount = safeNumElements(r);
  size_t outBytes = static_cast<size_t>(outCount) * dtypeSize(r.dtype);
  // Distinct operand elements land on distinct result elements (no step is
  // 0), so the result only needs zeroing when the operand does not cover it.
  bool covers = safeNumElements(a) == outCount;
  *fn = [w, outBytes, covers](const KernelArgs &args, Context &ctx) {
    if (!covers && outBytes)
      if (Status s = cudaStatus(
              cudaMemsetAsync(args.results[0], 0, outBytes, ctx.stream),
              "slice_scatter");
          !s)
        return s;
    return runWalk(w, args.operands[0], args.results[0], ctx.stream,
                   "slice_scatter");
  };
  return Status::ok();
}

Status prepare_concat(const KernelInfo &info, DeviceFn *fn) {
  const TensorType &r = info.result(0);
  int64_t axis = info.params<schema::Kernel::k_concat>().axis;
  // A result with a zero dim has empty operands too: nothing to copy.
  std::vector<Walk> walks;
  if (safeNumElements(r) > 0) {
    int64_t outer = product(r.shape, 0, axis);
    int64_t inner = product(r.shape, axis + 1, r.shape.size());
    int64_t outRow = r.shape[axis] * inner, offset = 0;
    // Operand k is [outer, chunk] in the result's rows [outer, outRow], at
    // column offset.
    for (size_t k = 0; k < info.operands.size(); ++k) {
      int64_t chunk = info.operand(k).shape[axis] * inner;
      Walk w;
      if (Status s = makeWalk({outer, chunk}, {outRow, 1}, offset,
                              dtypeSize(r.dtype), /*scatter=*/true, &w);
          !s)
        return s;
      walks.push_back(w);
      offset += chunk;
    }
  }
  *fn = [walks](const KernelArgs &args, Context &ctx) {
    for (size_t k = 0; k < walks.size(); ++k)
      if (Status s = runWalk(walks[k], args.operands[k], args.results[0],
                             ctx.stream, "concat");
          !s)
        return s;
    return Status::ok();
  };
  return Status::ok();
}

template <typename Index>
__global__ void checkIndexKernel(const Index *in, Index *out, int64_t count,
                                 int64_t bound, bool hasIgnore, int64_t ignore,
                                 int *flag, int instruction) {
  CLEAVE_GRID_LOOP(i, count) {
    int64_t v = in[i];
    if ((v < 0 || v >= bound) && !(hasIgnore && v == ignore))
      reportError(flag, instruction, kErrorIndexOutOfRange);
    out[i] = in[i];
  }
}

Status prepare_check_index(const KernelInfo &info, DeviceFn *fn) {
  const TensorType &x = info.operand(0);
  const auto &attrs = info.params<schema::Kernel::k_check_index>();
  int64_t bound = attrs.bound, ignore = attrs.ignore.value_or(0);
  bool hasIgnore = attrs.ignore.has_value();
  int64_t count = safeNumElements(x);
  bool wide = x.dtype == DType::I64;
  *fn = [=](const KernelArgs &args, Context &ctx) {
    if (count == 0)
      return Status::ok();
    if (wide)
      checkIndexKernel<<<gridFor(count), kBlock, 0, ctx.stream>>>(
          static_cast<const int64_t *>(args.operands[0]),
          static_cast<int64_t *>(args.results[0]), count, bound, hasIgnore,
          ignore, ctx.errorFlag, ctx.instruction);
    else
      checkIndexKernel<<<gridFor(count), kBlock, 0, ctx.stream>>>(
          static_cast<const int32_t *>(args.operands[0]),
          static_cast<int32_t *>(args.results[0]), count, bound, hasIgnore,
          ignore, ctx.errorFlag, ctx.instruction);
    return launchStatus("check_index");
  };
  return Status::ok();
}

Status prepare_gather(const KernelInfo &info, DeviceFn *fn) {
  const TensorType &data = info.operand(0), &idx = info.operand(1),
                   &r = info.result(0);
  const auto &attrs = info.params<schema::Kernel::k_gather>();
  int64_t axis = attrs.axis;
  GatherGeometry p;
  if (Status s = readShardRows(info, attrs, data.shape[axis], &p.rows); !s)
    return s;
  p.count = safeNumElements(idx);
  int64_t total = safeNumElements(r);
  if (total > 0) {
    // Non-empty result: these factors of its element count cannot overflow.
    p.outer = product(r.shape, 0, axis);
    int64_t inner = product(r.shape, axis + idx.shape.size(), r.shape.size());
    p.rowBytes = inner * static_cast<int64_t>(dtypeSize(r.dtype));
    p.small = total <= INT32_MAX && safeNumElements(data) <= INT32_MAX;
  }
  bool wide = idx.dtype == DType::I64;
  *fn = [p, wide, total](const KernelArgs &args, Context &ctx) {
    if (total == 0) {
      // No element reads an index, but every index is still checked.
      if (p.count == 0)
        return Status::ok();
      launchCheckIndices(args.operands[1], wide, p.count, p.rows, ctx);
      return launchStatus("gather");
    }
    // Every index is read by some element, which checks it.
    if (wide)
      runGather<int64_t>(p, args, ctx);
    else
      runGather<int32_t>(p, args, ctx);
    return launchStatus("gather");
  };
  return Status::ok();
}

Status prepare_scatter_add(const KernelInfo &info, DeviceFn *fn) {
  const TensorType &upd = info.operand(0), &idx = info.operand(1),
                   &r = info.result(0);
  const auto &attrs = info.params<schema::Kernel::k_scatter_add>();
  int64_t axis = attrs.axis;
  ScatterGeometry p;
  p.extent = r.shape[axis];
  if (Status s = readShardRows(info, attrs, p.extent, &p.rows); !s)
    return s;
  p.count = safeNumElements(idx);
  p.total = safeNumElements(r);
  p.scatter = safeNumElements(upd) > 0;
  if (p.scatter) {
    // The sort takes int counts and 32-bit keys (rows, and one past them).
    if (p.count > INT32_MAX || p.extent >= INT32_MAX)
      return Status::error("scatter_add: " + idx.str() + " into " + r.str() +
                           " exceeds the CUDA backend's 2^31 indices or rows");
    // Non-empty updates: every dim is non-zero and these products are
    // bounded by their element count.
    p.outer = product(r.shape, 0, axis);
    p.inner = product(r.shape, axis + 1, r.shape.size());
    while ((int64_t(1) << p.endBit) <= p.extent)
      ++p.endBit;
    if (Status s = allocScatterScratch(p.count, p.extent, p.endBit, &p.scratch);
        !s)
      return s;
  }
  bool wide = idx.dtype == DType::I64;
  *fn = [p, wide](const KernelArgs &args, Context &ctx) {
    return wide ? runScatterAdd<int64_t>(p, args, ctx)
                : runScatterAdd<int32_t>(p, args, ctx);
  };
  return Status::ok();
}

} // namespace cleave::rt::cuda

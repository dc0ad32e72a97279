//===- cpu.cpp - Data movement on the CPU ---------------------------------===//
//
// transpose, broadcast and slice are strided copies through StridedLoop, which
// only depends on element size, so one instantiation per size serves every
// dtype.
//
//===----------------------------------------------------------------------===//

#include "cleave/runtime/comm.h"
#include "core/convert.h"
#include "cpu/cpu_kernel.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <omp.h>

namespace cleave::rt {
namespace {

KernelFn makeStridedCopy(StridedLoop loop, size_t elemSize) {
  return [loop = std::move(loop), elemSize](const KernelArgs &args) {
    stridedCopy(loop, elemSize, args.operands[0], args.results[0]);
    return Status::ok();
  };
}

template <typename Index>
Status checkIndices(const Index *indices, int64_t count, int64_t extent,
                    int64_t axis) {
  for (int64_t j = 0; j < count; ++j) {
    int64_t v = static_cast<int64_t>(indices[j]);
    if (v < -extent || v >= extent)
      return Status::error("index " + std::to_string(v) + " (indices element " +
                           std::to_string(j) + ") is out of range for axis " +
                           std::to_string(axis) + " of size " +
                           std::to_string(extent));
  }
  return Status::ok();
}

template <typename Index>
void gatherCopy(const uint8_t *data, const Index *indices, uint8_t *out,
                int64_t outer, int64_t count, int64_t extent, size_t rowBytes) {
  int64_t total = outer * count;
  bool parallel = total > 1 && total * static_cast<int64_t>(rowBytes) >
                                   4 * kParallelThreshold;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t t = 0; t < total; ++t) {
    int64_t o = t / count, j = t % count;
    int64_t v = static_cast<int64_t>(indices[j]);
    if (v < 0)
      v += extent;
    std::memcpy(out + t * rowBytes, data + (o * extent + v) * rowBytes,
                rowBytes);
  }
}

/// Normalised (non-negative) index j of \p indices, already range-checked.
template <typename Index>
int64_t normalisedIndex(const Index *indices, int64_t j, int64_t extent) {
  int64_t v = static_cast<int64_t>(indices[j]);
  return v < 0 ? v + extent : v;
}

/// scatter_add's run: out [outer, extent, inner] is zeroed, then
/// updates [outer, count, inner] row j is added to out row indices[j].
///
/// Race-free and deterministic: indices are bucketed by destination row
/// (stably, so in increasing j), then each (outer, destination row, column
/// block) is summed by one thread, in increasing j, exactly as the serial
/// loop would.
template <typename Index>
void scatterAddRows(const float *updates, const Index *indices, float *out,
                    int64_t outer, int64_t count, int64_t extent,
                    int64_t inner) {
  // Counting sort of j by destination row: rows [start[v], start[v+1]) of
  // order hold the js with index v.
  std::vector<int64_t> start(extent + 1, 0), order(count);
  for (int64_t j = 0; j < count; ++j)
    ++start[normalisedIndex(indices, j, extent) + 1];
  for (int64_t v = 0; v < extent; ++v)
    start[v + 1] += start[v];
  {
    std::vector<int64_t> next(start.begin(), start.end() - 1);
    for (int64_t j = 0; j < count; ++j)
      order[next[normalisedIndex(indices, j, extent)]++] = j;
  }
  // Split the rows into column blocks when there are too few rows to keep
  // every thread busy.
  int64_t rows = outer * extent;
  int64_t work = outer * (count + extent) * inner;
  bool parallel = work > kParallelThreshold;
  int64_t blocks = 1;
  if (parallel) {
    int64_t wanted = 4 * static_cast<int64_t>(omp_get_max_threads());
    constexpr int64_t kMinBlock = 64;
    if (rows < wanted)
      blocks =
          std::max<int64_t>(1, std::min((inner + kMinBlock - 1) / kMinBlock,
                                        (wanted + rows - 1) / rows));
  }
  int64_t blockSize = (inner + blocks - 1) / blocks;
  int64_t tasks = rows * blocks;
#pragma omp parallel for schedule(dynamic, 16) if (parallel && tasks > 1)
  for (int64_t t = 0; t < tasks; ++t) {
    int64_t row = t / blocks, b = t % blocks;
    int64_t o = row / extent, v = row % extent;
    int64_t begin = b * blockSize;
    int64_t len = std::min(blockSize, inner - begin);
    if (len <= 0)
      continue;
    float *dst = out + row * inner + begin;
    std::fill(dst, dst + len, 0.0f);
    for (int64_t k = start[v]; k < start[v + 1]; ++k) {
      const float *src = updates + (o * count + order[k]) * inner + begin;
      for (int64_t i = 0; i < len; ++i)
        dst[i] += src[i];
    }
  }
}

/// Writes contiguous \p in through the strided loop's operand 0 into \p out.
template <typename T>
void stridedScatter(const StridedLoop &loop, const T *in, T *out) {
  int64_t inner = loop.innerSize();
  int64_t stride = loop.innerStride(0);
  loop.forEachRow([&](int64_t inOffset, const int64_t *offsets) {
    const T *src = in + inOffset;
    T *dst = out + offsets[0];
    if (stride == 1) {
      std::memcpy(dst, src, inner * sizeof(T));
    } else {
      for (int64_t i = 0; i < inner; ++i)
        dst[i * stride] = src[i];
    }
  });
}

} // namespace

Status prepare_transpose(const KernelInfo &info, KernelFn *fn) {
  const TensorType &a = info.operand(0), &r = info.result(0);
  const std::vector<int64_t> &perm =
      info.params<schema::Kernel::k_transpose>().perm;
  std::vector<int64_t> inStrides = contiguousStrides(a.shape);
  std::vector<int64_t> strides(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    strides[i] = inStrides[perm[i]];
  *fn = makeStridedCopy(StridedLoop::build(r.shape, {strides}),
                        dtypeSize(r.dtype));
  return Status::ok();
}

Status prepare_broadcast(const KernelInfo &info, KernelFn *fn) {
  const TensorType &a = info.operand(0), &r = info.result(0);
  *fn = makeStridedCopy(
      StridedLoop::build(r.shape, {broadcastStrides(a.shape, r.shape)}),
      dtypeSize(r.dtype));
  return Status::ok();
}

/// The starts and steps (default 1) of a strided window: element i of the
/// window along dim d is element starts[d] + i * steps[d] of the whole,
/// inside it by the kernel's shape rule. \p P: slice's or slice_scatter's
/// Params.
template <typename P>
void readStridedWindow(const P &attrs, size_t rank,
                       std::vector<int64_t> *starts,
                       std::vector<int64_t> *steps) {
  *starts = attrs.starts;
  *steps = attrs.steps.value_or(std::vector<int64_t>(rank, 1));
}

Status prepare_slice(const KernelInfo &info, KernelFn *fn) {
  const TensorType &a = info.operand(0), &r = info.result(0);
  size_t rank = a.shape.size();
  std::vector<int64_t> starts, steps;
  readStridedWindow(info.params<schema::Kernel::k_slice>(), rank, &starts,
                    &steps);
  std::vector<int64_t> inStrides = contiguousStrides(a.shape);
  std::vector<int64_t> strides(rank);
  int64_t base = 0;
  for (size_t d = 0; d < rank; ++d) {
    strides[d] = steps[d] * inStrides[d];
    base += starts[d] * inStrides[d];
  }
  StridedLoop loop = StridedLoop::build(r.shape, {strides});
  loop.baseOffset[0] = r.numElements() == 0 ? 0 : base;
  *fn = makeStridedCopy(std::move(loop), dtypeSize(r.dtype));
  return Status::ok();
}

Status prepare_concat(const KernelInfo &info, KernelFn *fn) {
  const TensorType &r = info.result(0);
  int64_t axis = info.params<schema::Kernel::k_concat>().axis;
  int64_t axisTotal = r.shape[axis];
  std::vector<int64_t> extents;
  for (size_t k = 0; k < info.operands.size(); ++k)
    extents.push_back(info.operand(k).shape[axis]);
  int64_t outer = product(r.shape, 0, axis);
  size_t innerBytes =
      static_cast<size_t>(product(r.shape, axis + 1, r.shape.size())) *
      dtypeSize(r.dtype);
  *fn = [extents, outer, innerBytes, axisTotal](const KernelArgs &args) {
    auto *out = static_cast<uint8_t *>(args.results[0]);
    size_t outRow = axisTotal * innerBytes;
    size_t offset = 0;
    for (size_t k = 0; k < extents.size(); ++k) {
      size_t chunk = extents[k] * innerBytes;
      const auto *in = static_cast<const uint8_t *>(args.operands[k]);
      if (chunk == 0)
        continue;
      bool parallel = outer > 1 && outer * static_cast<int64_t>(chunk) >
                                       4 * kParallelThreshold;
#pragma omp parallel for schedule(static) if (parallel)
      for (int64_t o = 0; o < outer; ++o)
        std::memcpy(out + o * outRow + offset, in + o * chunk, chunk);
      offset += chunk;
    }
    return Status::ok();
  };
  return Status::ok();
}

/// Maps global indices (i64 when \p wide, else i32) to this rank's rows: -1
/// for rows another rank holds.
Status localRows(const void *indices, bool wide, int64_t count, int64_t offset,
                 int64_t extent, int64_t global, int64_t axis,
                 std::vector<int64_t> *rows) {
  rows->resize(count);
  for (int64_t i = 0; i < count; ++i) {
    int64_t index = wide ? static_cast<const int64_t *>(indices)[i]
                         : static_cast<const int32_t *>(indices)[i];
    int64_t g = index < 0 ? index + global : index;
    if (g < 0 || g >= global)
      return Status::error("index " + std::to_string(index) +
                           " is out of range for axis " + std::to_string(axis) +
                           " of extent " + std::to_string(global));
    int64_t l = g - offset;
    (*rows)[i] = l >= 0 && l < extent ? l : -1;
  }
  return Status::ok();
}

Status prepare_check_index(const KernelInfo &info, KernelFn *fn) {
  const TensorType &x = info.operand(0);
  const auto &attrs = info.params<schema::Kernel::k_check_index>();
  int64_t bound = attrs.bound;
  std::optional<int64_t> ignore = attrs.ignore;
  bool wide = x.dtype == DType::I64;
  int64_t n = x.numElements();
  std::vector<int64_t> shape = x.shape;
  *fn = [=](const KernelArgs &args) {
    const void *in = args.operands[0];
    for (int64_t i = 0; i < n; ++i) {
      int64_t v = wide ? static_cast<const int64_t *>(in)[i]
                       : static_cast<const int32_t *>(in)[i];
      if ((v < 0 || v >= bound) && (!ignore || v != *ignore))
        return Status::error(indexRangeError(shape, i, v, bound, ignore));
    }
    if (args.results[0] != in)
      std::memcpy(args.results[0], in, n * (wide ? 8 : 4));
    return Status::ok();
  };
  return Status::ok();
}

Status prepare_gather(const KernelInfo &info, KernelFn *fn) {
  const TensorType &data = info.operand(0), &idx = info.operand(1);
  const auto &attrs = info.params<schema::Kernel::k_gather>();
  int64_t axis = attrs.axis;
  int64_t outer = product(data.shape, 0, axis);
  int64_t extent = data.shape[axis];
  int64_t count = idx.numElements();
  size_t rowBytes =
      static_cast<size_t>(product(data.shape, axis + 1, data.shape.size())) *
      dtypeSize(data.dtype);
  bool wide = idx.dtype == DType::I64;
  ShardRows rows;
  if (Status s = readShardRows(info, attrs, extent, &rows); !s)
    return s;
  int64_t offset = rows.offset, global = rows.global;
  if (global != extent) {
    // Vocab-parallel lookup: rows of other ranks read as zeros.
    *fn = [=](const KernelArgs &args) {
      const auto *data = static_cast<const uint8_t *>(args.operands[0]);
      auto *out = static_cast<uint8_t *>(args.results[0]);
      std::vector<int64_t> rows;
      if (Status s = localRows(args.operands[1], wide, count, offset, extent,
                               global, axis, &rows);
          !s)
        return s;
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t c = 0; c < count; ++c) {
          uint8_t *dst = out + (o * count + c) * rowBytes;
          if (rows[c] < 0)
            std::memset(dst, 0, rowBytes);
          else
            std::memcpy(dst, data + (o * extent + rows[c]) * rowBytes,
                        rowBytes);
        }
      return Status::ok();
    };
    return Status::ok();
  }
  *fn = [=](const KernelArgs &args) {
    const auto *data = static_cast<const uint8_t *>(args.operands[0]);
    auto *out = static_cast<uint8_t *>(args.results[0]);
    // Indices are checked up front, so a bad one leaves the result untouched
    // rather than half-written.
    if (wide) {
      const auto *indices = static_cast<const int64_t *>(args.operands[1]);
      if (Status s = checkIndices(indices, count, extent, axis); !s)
        return s;
      if (outer * count > 0 && rowBytes > 0)
        gatherCopy(data, indices, out, outer, count, extent, rowBytes);
    } else {
      const auto *indices = static_cast<const int32_t *>(args.operands[1]);
      if (Status s = checkIndices(indices, count, extent, axis); !s)
        return s;
      if (outer * count > 0 && rowBytes > 0)
        gatherCopy(data, indices, out, outer, count, extent, rowBytes);
    }
    return Status::ok();
  };
  return Status::ok();
}

Status prepare_slice_scatter(const KernelInfo &info, KernelFn *fn) {
  const TensorType &a = info.operand(0), &r = info.result(0);
  size_t rank = a.shape.size();
  std::vector<int64_t> starts, steps;
  readStridedWindow(info.params<schema::Kernel::k_slice_scatter>(), rank,
                    &starts, &steps);
  int64_t inCount = safeNumElements(a), outCount = safeNumElements(r);
  size_t elemSize = dtypeSize(r.dtype);
  size_t outBytes = static_cast<size_t>(outCount) * elemSize;
  // Distinct operand elements land on distinct result elements (no step is
  // 0), so the result only needs zeroing when the operand does not cover it.
  bool covers = inCount == outCount;
  StridedLoop loop;
  if (inCount > 0) {
    // Every dim of the result is then non-empty (it holds `last` above), so
    // these products are bounded by its element count.
    std::vector<int64_t> outStrides = contiguousStrides(r.shape);
    std::vector<int64_t> strides(rank, 0);
    int64_t base = 0;
    for (size_t d = 0; d < rank; ++d) {
      if (a.shape[d] > 1)
        strides[d] = steps[d] * outStrides[d];
      base += starts[d] * outStrides[d];
    }
    loop = StridedLoop::build(a.shape, {strides});
    loop.baseOffset[0] = base;
  }
  *fn = [loop = std::move(loop), elemSize, outBytes, covers,
         inCount](const KernelArgs &args) {
    if (!covers && outBytes)
      std::memset(args.results[0], 0, outBytes);
    if (inCount == 0)
      return Status::ok();
    switch (elemSize) {
    case 1:
      stridedScatter(loop, static_cast<const uint8_t *>(args.operands[0]),
                     static_cast<uint8_t *>(args.results[0]));
      break;
    case 4:
      stridedScatter(loop, static_cast<const uint32_t *>(args.operands[0]),
                     static_cast<uint32_t *>(args.results[0]));
      break;
    default:
      stridedScatter(loop, static_cast<const uint64_t *>(args.operands[0]),
                     static_cast<uint64_t *>(args.results[0]));
      break;
    }
    return Status::ok();
  };
  return Status::ok();
}

Status prepare_scatter_add(const KernelInfo &info, KernelFn *fn) {
  const TensorType &upd = info.operand(0), &idx = info.operand(1),
                   &r = info.result(0);
  const auto &attrs = info.params<schema::Kernel::k_scatter_add>();
  int64_t axis = attrs.axis;
  // As in gather, every index is checked, even when no update reads it.
  int64_t count = safeNumElements(idx);
  int64_t total = safeNumElements(r);
  int64_t extent = r.shape[axis];
  // With non-empty updates every dim below is non-zero, and the products are
  // bounded by the element count of updates.
  bool scatter = safeNumElements(upd) > 0;
  int64_t outer = scatter ? product(r.shape, 0, axis) : 0;
  int64_t inner = scatter ? product(r.shape, axis + 1, r.shape.size()) : 0;
  bool wide = idx.dtype == DType::I64;
  ShardRows rows;
  if (Status s = readShardRows(info, attrs, extent, &rows); !s)
    return s;
  int64_t offset = rows.offset, global = rows.global;
  if (global != extent) {
    // This rank keeps only its rows of the result; in index order, so the
    // sums are those of the unsplit scatter.
    *fn = [=](const KernelArgs &args) {
      const auto *updates = static_cast<const float *>(args.operands[0]);
      auto *out = static_cast<float *>(args.results[0]);
      std::vector<int64_t> rows;
      if (Status s = localRows(args.operands[1], wide, count, offset, extent,
                               global, axis, &rows);
          !s)
        return s;
      std::fill(out, out + total, 0.0f);
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t c = 0; c < count; ++c) {
          if (rows[c] < 0)
            continue;
          float *dst = out + (o * extent + rows[c]) * inner;
          const float *src = updates + (o * count + c) * inner;
          for (int64_t k = 0; k < inner; ++k)
            dst[k] += src[k];
        }
      return Status::ok();
    };
    return Status::ok();
  }
  *fn = [=](const KernelArgs &args) {
    const auto *updates = static_cast<const float *>(args.operands[0]);
    auto *out = static_cast<float *>(args.results[0]);
    // Indices are checked up front, so a bad one leaves the result untouched
    // rather than half-written.
    if (wide) {
      const auto *indices = static_cast<const int64_t *>(args.operands[1]);
      if (Status s = checkIndices(indices, count, extent, axis); !s)
        return s;
      if (scatter)
        scatterAddRows(updates, indices, out, outer, count, extent, inner);
    } else {
      const auto *indices = static_cast<const int32_t *>(args.operands[1]);
      if (Status s = checkIndices(indices, count, extent, axis); !s)
        return s;
      if (scatter)
        scatterAddRows(updates, indices, out, outer, count, extent, inner);
    }
    if (!scatter && total > 0)
      std::fill(out, out + total, 0.0f);
    return Status::ok();
  };
  return Status::ok();
}

} // namespace cleave::rt

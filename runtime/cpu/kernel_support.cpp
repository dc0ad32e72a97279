//===- kernel_support.cpp - Helpers shared by the CPU kernels -------------===//

#include "kernel.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>

namespace cleave::rt {

int64_t TensorType::numElements() const {
  return product(shape, 0, shape.size());
}

std::string TensorType::str() const {
  std::ostringstream os;
  os << dtypeName(dtype) << "[";
  for (size_t i = 0; i < shape.size(); ++i)
    os << (i ? "," : "") << shape[i];
  os << "]";
  return os.str();
}

static std::string countPhrase(size_t lo, size_t hi) {
  if (lo == hi)
    return std::to_string(lo);
  return std::to_string(lo) + " to " + std::to_string(hi);
}

Status KernelInfo::checkArity(size_t minOperands, size_t maxOperands,
                              size_t maxResults,
                              std::optional<size_t> minResults) const {
  size_t minRes = minResults.value_or(maxResults);
  if (operands.size() < minOperands || operands.size() > maxOperands)
    return Status::error("expects " + countPhrase(minOperands, maxOperands) +
                         " operands, got " + std::to_string(operands.size()));
  for (size_t i = 0; i < minOperands; ++i)
    if (!operands[i])
      return Status::error("operand " + std::to_string(i) +
                           " is required but absent (-1)");
  if (results.size() < minRes || results.size() > maxResults)
    return Status::error("expects " + countPhrase(minRes, maxResults) +
                         " results, got " + std::to_string(results.size()));
  for (size_t i = 0; i < minRes; ++i)
    if (!results[i])
      return Status::error("result " + std::to_string(i) +
                           " is required but absent (-1)");
  return Status::ok();
}

std::vector<int64_t> contiguousStrides(const std::vector<int64_t> &shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

int64_t product(const std::vector<int64_t> &shape, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end && i < shape.size(); ++i)
    p *= shape[i];
  return p;
}

Status checkBroadcastable(const TensorType &operand, const TensorType &result,
                          const std::string &what) {
  if (operand.rank() != result.rank())
    return Status::error(what + " " + operand.str() +
                         " does not have the rank of the result " +
                         result.str());
  for (size_t d = 0; d < operand.shape.size(); ++d)
    if (operand.shape[d] != result.shape[d] && operand.shape[d] != 1)
      return Status::error(what + " " + operand.str() +
                           " does not broadcast to the result " + result.str());
  return Status::ok();
}

std::vector<int64_t> broadcastStrides(const std::vector<int64_t> &operand,
                                      const std::vector<int64_t> &resultShape) {
  std::vector<int64_t> strides = contiguousStrides(operand);
  for (size_t d = 0; d < operand.size(); ++d)
    if (operand[d] != resultShape[d])
      strides[d] = 0;
  return strides;
}

int64_t StridedLoop::outerSize() const {
  int64_t p = 1;
  for (size_t d = 0; d + 1 < dims.size(); ++d)
    p *= dims[d];
  return p;
}

StridedLoop
StridedLoop::build(const std::vector<int64_t> &resultShape,
                   const std::vector<std::vector<int64_t>> &operandStrides) {
  StridedLoop loop;
  loop.numOperands = static_cast<int>(operandStrides.size());
  int n = loop.numOperands;
  for (int64_t extent : resultShape) {
    if (extent == 0) {
      // Nothing to visit; a single empty dim keeps the loops trivial.
      loop.dims = {0};
      for (int k = 0; k < n; ++k)
        loop.strides[k] = {0};
      return loop;
    }
  }
  // Walk from the innermost dim outwards, dropping unit dims and merging a dim
  // into the group inside it when every operand steps through both as one.
  std::vector<int64_t> dims;
  std::vector<int64_t> strides[kMaxOperands];
  for (int64_t d = static_cast<int64_t>(resultShape.size()) - 1; d >= 0; --d) {
    int64_t extent = resultShape[d];
    if (extent == 1)
      continue;
    bool merge = !dims.empty();
    for (int k = 0; k < n && merge; ++k)
      merge = operandStrides[k][d] == strides[k].back() * dims.back();
    if (merge) {
      dims.back() *= extent;
      continue;
    }
    dims.push_back(extent);
    for (int k = 0; k < n; ++k)
      strides[k].push_back(operandStrides[k][d]);
  }
  if (dims.empty()) {
    dims.push_back(1);
    for (int k = 0; k < n; ++k)
      strides[k].push_back(0);
  }
  loop.dims.assign(dims.rbegin(), dims.rend());
  for (int k = 0; k < n; ++k)
    loop.strides[k].assign(strides[k].rbegin(), strides[k].rend());
  return loop;
}

/// Copy whose input is contiguous along the result's second-innermost dim
/// (a transpose of the last two dims): a plain row walk would read with a
/// large stride, so the [rows, cols] matrices are copied in square tiles that
/// stay in cache.
template <typename T>
static void tiledTransposeCopy(const StridedLoop &loop, const T *in, T *out) {
  constexpr int64_t kTile = 32;
  size_t rank = loop.dims.size();
  int64_t rows = loop.dims[rank - 2], cols = loop.dims[rank - 1];
  int64_t colStride = loop.strides[0][rank - 1];
  int64_t matrices = 1;
  for (size_t d = 0; d + 2 < rank; ++d)
    matrices *= loop.dims[d];
  int64_t rowTiles = (rows + kTile - 1) / kTile;
  int64_t colTiles = (cols + kTile - 1) / kTile;
  int64_t tiles = matrices * rowTiles * colTiles;
#pragma omp parallel for schedule(                                             \
    static) if (tiles > 1 && matrices * rows * cols > kParallelThreshold)
  for (int64_t t = 0; t < tiles; ++t) {
    int64_t matrix = t / (rowTiles * colTiles);
    int64_t r0 = (t / colTiles) % rowTiles * kTile;
    int64_t c0 = t % colTiles * kTile;
    int64_t base = loop.baseOffset[0];
    int64_t rest = matrix;
    for (int64_t d = static_cast<int64_t>(rank) - 3; d >= 0; --d) {
      base += (rest % loop.dims[d]) * loop.strides[0][d];
      rest /= loop.dims[d];
    }
    int64_t r1 = std::min(rows, r0 + kTile), c1 = std::min(cols, c0 + kTile);
    T *dst = out + matrix * rows * cols;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < c1; ++c)
        dst[r * cols + c] = in[base + r + c * colStride];
  }
}

template <typename T>
static void stridedCopyTyped(const StridedLoop &loop, const T *in, T *out) {
  size_t rank = loop.dims.size();
  if (rank >= 2 && loop.strides[0][rank - 2] == 1 &&
      std::abs(loop.innerStride(0)) > 1 && loop.dims[rank - 2] >= 4 &&
      loop.dims[rank - 1] >= 4)
    return tiledTransposeCopy(loop, in, out);
  int64_t inner = loop.innerSize();
  int64_t stride = loop.innerStride(0);
  loop.forEachRow([&](int64_t outOffset, const int64_t *offsets) {
    const T *src = in + offsets[0];
    T *dst = out + outOffset;
    if (stride == 1) {
      std::memcpy(dst, src, inner * sizeof(T));
    } else {
      for (int64_t i = 0; i < inner; ++i)
        dst[i] = src[i * stride];
    }
  });
}

void stridedCopy(const StridedLoop &loop, size_t elemSize, const void *in,
                 void *out) {
  switch (elemSize) {
  case 1:
    return stridedCopyTyped(loop, static_cast<const uint8_t *>(in),
                            static_cast<uint8_t *>(out));
  case 4:
    return stridedCopyTyped(loop, static_cast<const uint32_t *>(in),
                            static_cast<uint32_t *>(out));
  default:
    return stridedCopyTyped(loop, static_cast<const uint64_t *>(in),
                            static_cast<uint64_t *>(out));
  }
}

std::vector<int64_t> batchOffsets(const std::vector<int64_t> &batch,
                                  const std::vector<int64_t> &resultBatch,
                                  int64_t matrixSize) {
  std::vector<int64_t> strides = broadcastStrides(batch, resultBatch);
  int64_t count = product(resultBatch, 0, resultBatch.size());
  std::vector<int64_t> offsets(count);
  for (int64_t i = 0; i < count; ++i) {
    int64_t rest = i, off = 0;
    for (int64_t d = static_cast<int64_t>(resultBatch.size()) - 1; d >= 0;
         --d) {
      off += (rest % resultBatch[d]) * strides[d];
      rest /= resultBatch[d];
    }
    offsets[i] = off * matrixSize;
  }
  return offsets;
}

Status readRandomGeometry(const KernelInfo &info, RandomGeometry *out) {
  if (Status s = info.checkArity(1, 1, 1); !s)
    return s;
  const TensorType &step = info.operand(0), &r = info.result(0);
  if (step.dtype != DType::I64 || step.rank() != 0)
    return Status::error("step " + step.str() +
                         " must be an i64 scalar (i64[])");
  if (r.dtype != DType::F32)
    return Status::error("result " + r.str() + " must be f32");
  const auto &attrs = info.params<schema::Kernel::k_random_uniform>();
  int64_t seed = attrs.seed, stream = attrs.stream;
  RandomGeometry &p = *out;
  p = RandomGeometry();
  uint64_t useed = static_cast<uint64_t>(seed);
  p.key[0] = static_cast<uint32_t>(useed);
  p.key[1] = static_cast<uint32_t>(useed >> 32);
  p.stream = static_cast<uint32_t>(static_cast<uint64_t>(stream));

  size_t rank = r.shape.size();
  bool hasOffsets = attrs.offsets.has_value();
  bool hasGlobal = attrs.global_shape.has_value();
  if (hasOffsets != hasGlobal)
    return Status::error("attributes 'offsets' and 'global_shape' must be "
                         "given together");
  std::vector<int64_t> offsets(rank, 0), global = r.shape;
  if (hasOffsets) {
    if (attrs.offsets->size() != rank || attrs.global_shape->size() != rank)
      return Status::error("attributes 'offsets' and 'global_shape' need " +
                           std::to_string(rank) + " ints, one per dim of " +
                           r.str());
    offsets = *attrs.offsets;
    global = *attrs.global_shape;
    for (size_t d = 0; d < rank; ++d)
      if (global[d] < 0 || offsets[d] < 0 || r.shape[d] > global[d] ||
          offsets[d] > global[d] - r.shape[d])
        return Status::error(
            "result " + r.str() + " at 'offsets' " +
            std::to_string(offsets[d]) + " of dim " + std::to_string(d) +
            " does not fit in 'global_shape' " + std::to_string(global[d]));
  }
  for (int64_t d : r.shape)
    if (d == 0)
      return Status::ok(); // nothing to write: rows = run = 0
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
  return Status::ok();
}

std::string indexRangeError(const std::vector<int64_t> &shape, int64_t flat,
                            int64_t value, int64_t bound,
                            std::optional<int64_t> ignore) {
  std::vector<int64_t> at(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    int64_t n = std::max<int64_t>(shape[d], 1);
    at[d] = flat % n;
    flat /= n;
  }
  std::string where;
  for (size_t d = 0; d < at.size(); ++d)
    where += (d ? ", " : "") + std::to_string(at[d]);
  return "value " + std::to_string(value) + " at [" + where +
         "] is out of range [0, " + std::to_string(bound) + ")" +
         (ignore ? " (and not the ignored " + std::to_string(*ignore) + ")"
                 : "");
}

std::vector<int64_t> collectiveAxes(const KernelInfo &info) {
  using K = schema::Kernel;
  if (!info.kernelId)
    return {};
  switch (*info.kernelId) {
  case K::k_all_reduce:
    return info.params<K::k_all_reduce>().axes;
  case K::k_all_gather:
    return info.params<K::k_all_gather>().axes;
  case K::k_reduce_scatter:
    return info.params<K::k_reduce_scatter>().axes;
  case K::k_shard_slice:
    return info.params<K::k_shard_slice>().axes;
  default:
    return {};
  }
}

Status readIotaGeometry(const KernelInfo &info, IotaGeometry *out) {
  if (Status s = info.checkArity(0, 0, 1); !s)
    return s;
  const TensorType &r = info.result(0);
  int64_t dim = info.params<schema::Kernel::k_iota>().dim;
  if (dim < 0 || dim >= r.rank() ||
      (r.dtype != DType::I64 && r.dtype != DType::I32))
    return Status::error("iota: result " + r.str() + " has no dim " +
                         std::to_string(dim) + " of i32 or i64 indices");
  out->inner = 1;
  for (int64_t d = dim + 1; d < r.rank(); ++d)
    out->inner *= r.shape[d];
  out->extent = r.shape[dim];
  out->count = r.numElements();
  out->wide = r.dtype == DType::I64;
  return Status::ok();
}

} // namespace cleave::rt

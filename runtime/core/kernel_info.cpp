//===- kernel_info.cpp - Instruction geometry both backends read ----------===//

#include "core/kernel_info.h"

#include "cleave/runtime/comm.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>

namespace cleave::rt {

int64_t TensorType::numElements() const {
  return product(shape, 0, shape.size());
}

int64_t safeNumElements(const TensorType &t) {
  for (int64_t d : t.shape)
    if (d == 0)
      return 0;
  return t.numElements();
}

std::string TensorType::str() const {
  std::ostringstream os;
  os << dtypeName(dtype) << "[";
  for (size_t i = 0; i < shape.size(); ++i)
    os << (i ? "," : "") << shape[i];
  os << "]";
  return os.str();
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

bool equallySpaced(const std::vector<int64_t> &offsets, int64_t *stride) {
  *stride = offsets.size() > 1 ? offsets[1] - offsets[0] : 0;
  for (size_t i = 0; i < offsets.size(); ++i)
    if (offsets[i] != static_cast<int64_t>(i) * *stride)
      return false;
  return true;
}

Status readDequantProduct(const KernelInfo &info, DequantProduct *out) {
  const TensorType &a = info.operand(0), &w = info.operand(1);
  DequantProduct p;
  p.transposeB = info.params<schema::Kernel::k_matmul_dequant>().transpose_b;
  p.scaled = info.hasOperand(2);
  p.groups =
      p.scaled && info.operand(2).rank() == 2 ? info.operand(2).shape[1] : 1;
  p.rows = w.shape[0];
  p.cols = w.shape[1];
  p.k = a.shape.back();
  p.m = a.numElements() / std::max<int64_t>(p.k, 1);
  p.n = p.transposeB ? p.rows : p.cols;
  if (p.m > INT32_MAX || p.n > INT32_MAX || p.k > INT32_MAX)
    return Status::error("matrix dims exceed the BLAS int range");
  *out = p;
  return Status::ok();
}

Status readRandomGeometry(const KernelInfo &info, RandomGeometry *out) {
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
  case K::k_all_to_all:
    return info.params<K::k_all_to_all>().axes;
  case K::k_shard_slice:
    return info.params<K::k_shard_slice>().axes;
  default:
    return {};
  }
}

Status readIotaGeometry(const KernelInfo &info, IotaGeometry *out) {
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

Status readShardRows(const KernelInfo &info,
                     const std::optional<std::vector<int64_t>> &shardAxes,
                     std::optional<int64_t> shardSize, int64_t extent,
                     ShardRows *rows) {
  rows->offset = 0;
  rows->extent = extent;
  rows->global = extent;
  if (!shardAxes)
    return Status::ok();
  if (!info.comm)
    return Status::error("shard_axes needs a communicator");
  const std::vector<int64_t> &axes = *shardAxes;
  if (Status s = info.comm->checkAxes(axes); !s)
    return s;
  rows->offset = info.comm->groupRank(axes) * extent;
  rows->global = info.comm->groupSize(axes) * extent;
  int64_t size = shardSize.value_or(rows->global);
  if (size > rows->global || size < 0)
    return Status::error("attribute 'shard_size' " + std::to_string(size) +
                         " does not fit chunks of " + std::to_string(extent) +
                         " rows on " +
                         std::to_string(info.comm->groupSize(axes)) + " ranks");
  rows->global = size;
  return Status::ok();
}

} // namespace cleave::rt

//===- collectives.cpp - all_reduce, all_gather, reduce_scatter -----------===//
//
// The kernels check axes, dims and shapes against the communicator at load
// time and pack/unpack non-leading dims around the communicator's flat
// collectives (which concatenate per-rank chunks along dim 0).
//
//===----------------------------------------------------------------------===//

#include "cpu/cpu_kernel.h"

#include "cleave/runtime/comm.h"

#include <memory>

namespace cleave::rt {

namespace {

Status readAxes(const KernelInfo &info, const std::vector<int64_t> &attr,
                std::vector<int64_t> *axes) {
  if (!info.comm)
    return Status::error("no communicator for a collective");
  *axes = attr;
  if (Status s = info.comm->checkAxes(*axes); !s)
    return Status::error("attribute 'axes': " + s.message());
  return Status::ok();
}

Status checkSameDType(const TensorType &x, const TensorType &y) {
  if (x.dtype != y.dtype)
    return Status::error("operand " + x.str() + " and result " + y.str() +
                         " must have the same dtype");
  return Status::ok();
}

Status checkNumeric(const TensorType &x) {
  if (x.dtype == DType::Bool)
    return Status::error("operand " + x.str() +
                         " must be f32, i32 or i64 (sums of bool are not "
                         "supported)");
  return Status::ok();
}

/// Checks attr dim against \p x.
Status readDim(int64_t attr, const TensorType &x, int64_t *dim) {
  *dim = attr;
  if (*dim < 0 || *dim >= x.rank())
    return Status::error("attribute 'dim' " + std::to_string(*dim) +
                         " is out of range for operand " + x.str());
  return Status::ok();
}

/// attr blocks (default 1): the split dimension is that many equal blocks,
/// each split across the group; \p local (this rank's extent) must divide.
Status readBlocks(int64_t attr, int64_t local, int64_t *blocks) {
  *blocks = attr;
  if (*blocks < 1 || local % *blocks)
    return Status::error("attribute 'blocks' " + std::to_string(*blocks) +
                         " does not divide the local extent " +
                         std::to_string(local));
  return Status::ok();
}

/// Checks that \p big is \p small with dim \p dim multiplied by \p groupSize.
Status checkScaledDim(const TensorType &small, const TensorType &big,
                      int64_t dim, int64_t groupSize, const std::string &what) {
  bool ok = small.rank() == big.rank();
  for (size_t d = 0; ok && d < small.shape.size(); ++d)
    ok = big.shape[d] == (static_cast<int64_t>(d) == dim
                              ? small.shape[d] * groupSize
                              : small.shape[d]);
  if (!ok)
    return Status::error(what + " along dim " + std::to_string(dim) +
                         " over a group of " + std::to_string(groupSize) +
                         " ranks");
  return Status::ok();
}

} // namespace

Status prepare_all_reduce(const KernelInfo &info, KernelFn *fn) {
  const TensorType &x = info.operand(0), &y = info.result(0);
  if (Status s = checkSameDType(x, y); !s)
    return s;
  if (x.shape != y.shape)
    return Status::error("operand " + x.str() + " and result " + y.str() +
                         " must have the same shape");
  const auto &p = info.params<schema::Kernel::k_all_reduce>();
  std::vector<int64_t> axes;
  if (Status s = readAxes(info, p.axes, &axes); !s)
    return s;
  int64_t code = p.reduction;
  if (code < 0 || code > 2)
    return Status::error("attribute 'reduction' " + std::to_string(code) +
                         " is not 0 (sum), 1 (max) or 2 (min)");
  auto reduction = static_cast<Reduction>(code);
  if (x.dtype == DType::Bool && reduction == Reduction::Sum)
    return Status::error("a sum of " + x.str() +
                         " is not supported (bool reduces with max or min)");
  Communicator *comm = info.comm;
  int64_t count = x.numElements();
  DType dtype = x.dtype;
  size_t bytes = static_cast<size_t>(count) * dtypeSize(dtype);
  *fn = [=](const KernelArgs &args) {
    if (bytes && args.operands[0] != args.results[0])
      std::memmove(args.results[0], args.operands[0], bytes);
    return comm->allReduce(args.results[0], count, dtype, reduction, axes);
  };
  return Status::ok();
}

/// The geometry of a collective that splits one dimension across its group:
/// attrs axes and dim, and the group size. \p whole is \p part with that
/// dimension multiplied by the group size (\p what names the mismatch).
struct Split {
  std::vector<int64_t> axes;
  int64_t dim = 0;
  int64_t group = 1;
};

/// \p P: the Params of all_gather, reduce_scatter or shard_slice.
template <typename P>
Status readSplit(const KernelInfo &info, const P &p, const TensorType &part,
                 const TensorType &whole, const std::string &what,
                 Split *split) {
  if (Status s = checkSameDType(part, whole); !s)
    return s;
  if (Status s = readAxes(info, p.axes, &split->axes); !s)
    return s;
  if (Status s = readDim(p.dim, part, &split->dim); !s)
    return s;
  split->group = info.comm->groupSize(split->axes);
  return checkScaledDim(part, whole, split->dim, split->group, what);
}

Status prepare_all_gather(const KernelInfo &info, KernelFn *fn) {
  const TensorType &x = info.operand(0), &y = info.result(0);
  const auto &p = info.params<schema::Kernel::k_all_gather>();
  Split split;
  if (Status s = readSplit(info, p, x, y,
                           "result " + y.str() + " is not operand " + x.str() +
                               " gathered",
                           &split);
      !s)
    return s;
  const std::vector<int64_t> &axes = split.axes;
  int64_t dim = split.dim, group = split.group;
  Communicator *comm = info.comm;
  // x is [outer, rows]: `outer` blocks of `rowBytes` each; member k's block
  // o goes to y block o * group + k.
  int64_t blocks = 1;
  if (Status s = readBlocks(p.blocks, x.shape[dim], &blocks); !s)
    return s;
  // With blocks, each block of every member is a row of its own.
  int64_t outer = product(x.shape, 0, dim) * blocks;
  size_t rowBytes = static_cast<size_t>(product(x.shape, dim, x.shape.size())) *
                    dtypeSize(x.dtype) / blocks;
  size_t perRank = static_cast<size_t>(outer) * rowBytes;
  if (outer == 1 || group == 1) {
    *fn = [=](const KernelArgs &args) {
      return comm->allGather(args.operands[0], args.results[0],
                             static_cast<int64_t>(perRank), axes);
    };
    return Status::ok();
  }
  auto scratch = std::make_shared<std::vector<uint8_t>>();
  *fn = [=](const KernelArgs &args) {
    if (scratch->size() < perRank * group)
      scratch->resize(perRank * group);
    if (Status s = comm->allGather(args.operands[0], scratch->data(),
                                   static_cast<int64_t>(perRank), axes);
        !s)
      return s;
    auto *out = static_cast<uint8_t *>(args.results[0]);
    const uint8_t *in = scratch->data();
#pragma omp parallel for collapse(2) if (perRank * group > (1 << 20))
    for (int64_t k = 0; k < group; ++k)
      for (int64_t o = 0; o < outer; ++o)
        std::memcpy(out + (o * group + k) * rowBytes,
                    in + (k * outer + o) * rowBytes, rowBytes);
    return Status::ok();
  };
  return Status::ok();
}

Status prepare_reduce_scatter(const KernelInfo &info, KernelFn *fn) {
  const TensorType &x = info.operand(0), &y = info.result(0);
  const auto &p = info.params<schema::Kernel::k_reduce_scatter>();
  Split split;
  if (Status s = readSplit(info, p, y, x,
                           "operand " + x.str() +
                               " does not scatter to result " + y.str(),
                           &split);
      !s)
    return s;
  if (Status s = checkNumeric(x); !s)
    return s;
  const std::vector<int64_t> &axes = split.axes;
  int64_t dim = split.dim, group = split.group;
  Communicator *comm = info.comm;
  DType dtype = x.dtype;
  int64_t count = y.numElements();
  // x is [outer, group, rows]: chunk k is every outer block's k-th row run.
  int64_t outer = product(y.shape, 0, dim);
  size_t rowBytes = static_cast<size_t>(product(y.shape, dim, y.shape.size())) *
                    dtypeSize(dtype);
  size_t perRank = static_cast<size_t>(count) * dtypeSize(dtype);
  if (outer == 1 || group == 1) {
    *fn = [=](const KernelArgs &args) {
      return comm->reduceScatter(args.operands[0], args.results[0], count,
                                 dtype, axes);
    };
    return Status::ok();
  }
  auto scratch = std::make_shared<std::vector<uint8_t>>();
  *fn = [=](const KernelArgs &args) {
    if (scratch->size() < perRank * group)
      scratch->resize(perRank * group);
    const auto *in = static_cast<const uint8_t *>(args.operands[0]);
    uint8_t *packed = scratch->data();
#pragma omp parallel for collapse(2) if (perRank * group > (1 << 20))
    for (int64_t k = 0; k < group; ++k)
      for (int64_t o = 0; o < outer; ++o)
        std::memcpy(packed + (k * outer + o) * rowBytes,
                    in + (o * group + k) * rowBytes, rowBytes);
    return comm->reduceScatter(packed, args.results[0], count, dtype, axes);
  };
  return Status::ok();
}

Status prepare_shard_slice(const KernelInfo &info, KernelFn *fn) {
  const TensorType &x = info.operand(0), &y = info.result(0);
  const auto &p = info.params<schema::Kernel::k_shard_slice>();
  Split split;
  if (Status s = readSplit(
          info, p, y, x, "result " + y.str() + " is not a chunk of " + x.str(),
          &split);
      !s)
    return s;
  const std::vector<int64_t> &axes = split.axes;
  int64_t dim = split.dim, group = split.group;
  int64_t k = info.comm->groupRank(axes);
  int64_t blocks = 1;
  if (Status s = readBlocks(p.blocks, y.shape[dim], &blocks); !s)
    return s;
  int64_t outer = product(y.shape, 0, dim) * blocks;
  size_t rowBytes = static_cast<size_t>(product(y.shape, dim, y.shape.size())) *
                    dtypeSize(y.dtype) / blocks;
  *fn = [=](const KernelArgs &args) {
    const auto *in = static_cast<const uint8_t *>(args.operands[0]);
    auto *out = static_cast<uint8_t *>(args.results[0]);
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(out + o * rowBytes, in + (o * group + k) * rowBytes,
                  rowBytes);
    return Status::ok();
  };
  return Status::ok();
}

} // namespace cleave::rt

//===- shape.cpp - The collectives' shape rules ---------------------------===//
//
// Axes, dims and shapes against the instruction's mesh: every rank of a
// group must agree on how many bytes move, so a mismatch is refused when
// the program loads, never found as a hang.
//
//===----------------------------------------------------------------------===//

#include "kernels/collectives/split.h"

#include "cleave/runtime/comm.h"
#include "core/shape_rules.h"

namespace cleave::rt {

namespace {

Status checkAxes(const KernelInfo &info, const std::vector<int64_t> &axes) {
  if (!info.comm)
    return Status::error("no communicator for a collective");
  if (Status s = info.comm->checkAxes(axes); !s)
    return Status::error("attribute 'axes': " + s.message());
  return Status::ok();
}

template <typename P> void copySplit(const P &p, CollectiveSplit *split) {
  split->axes = p.axes;
  split->dim = p.dim;
  if constexpr (!std::is_same_v<
                    P, schema::Params<schema::Kernel::k_reduce_scatter>>)
    split->blocks = p.blocks;
}

/// \p whole is \p part with the split dimension multiplied by the group
/// size, and blocks divide the part's extent; \p what names a mismatch.
Status checkSplit(const KernelInfo &info, const TensorType &part,
                  const TensorType &whole, const std::string &what) {
  CollectiveSplit split;
  if (Status s = readCollectiveSplit(info, &split); !s)
    return s;
  if (split.dim < 0 || split.dim >= part.rank())
    return Status::error("attribute 'dim' " + std::to_string(split.dim) +
                         " is out of range for operand " +
                         info.operand(0).str());
  bool ok = part.rank() == whole.rank();
  for (int64_t d = 0; ok && d < part.rank(); ++d)
    ok = whole.shape[d] ==
         (d == split.dim ? part.shape[d] * split.group : part.shape[d]);
  if (!ok)
    return Status::error(what + " along dim " + std::to_string(split.dim) +
                         " over a group of " + std::to_string(split.group) +
                         " ranks");
  int64_t local = part.shape[split.dim];
  if (split.blocks < 1 || local % split.blocks)
    return Status::error("attribute 'blocks' " + std::to_string(split.blocks) +
                         " does not divide the local extent " +
                         std::to_string(local));
  return Status::ok();
}

} // namespace

Status readCollectiveSplit(const KernelInfo &info, CollectiveSplit *split) {
  using K = schema::Kernel;
  *split = CollectiveSplit();
  if (info.kernelId == K::k_all_gather)
    copySplit(info.params<K::k_all_gather>(), split);
  else if (info.kernelId == K::k_reduce_scatter)
    copySplit(info.params<K::k_reduce_scatter>(), split);
  else if (info.kernelId == K::k_shard_slice)
    copySplit(info.params<K::k_shard_slice>(), split);
  else
    return Status::error("not a split collective");
  if (Status s = checkAxes(info, split->axes); !s)
    return s;
  split->group = info.comm->groupSize(split->axes);
  return Status::ok();
}

Status readAllToAll(const KernelInfo &info, AllToAllSplit *split) {
  using K = schema::Kernel;
  *split = AllToAllSplit();
  if (info.kernelId != K::k_all_to_all)
    return Status::error("not an all_to_all");
  const auto &p = info.params<K::k_all_to_all>();
  if (Status s = checkAxes(info, p.axes); !s)
    return s;
  const TensorType &x = info.operand(0), &y = info.result(0);
  split->axes = p.axes;
  split->splitDim = p.split_dim;
  split->concatDim = p.concat_dim;
  split->group = info.comm->groupSize(p.axes);
  if (p.split_dim < 0 || p.split_dim >= x.rank() || p.concat_dim < 0 ||
      p.concat_dim >= x.rank() || p.split_dim == p.concat_dim)
    return Status::error("the dimensions to split (" +
                         std::to_string(p.split_dim) + ") and concatenate (" +
                         std::to_string(p.concat_dim) +
                         ") are not two dimensions of operand " + x.str());
  int64_t g = split->group;
  bool ok = y.rank() == x.rank() && x.shape[p.split_dim] % g == 0;
  for (int64_t d = 0; ok && d < x.rank(); ++d)
    ok = y.shape[d] == (d == p.split_dim    ? x.shape[d] / g
                        : d == p.concat_dim ? x.shape[d] * g
                                            : x.shape[d]);
  if (!ok)
    return Status::error("result " + y.str() + " is not operand " + x.str() +
                         " split along dim " + std::to_string(p.split_dim) +
                         " and concatenated along dim " +
                         std::to_string(p.concat_dim) + " over a group of " +
                         std::to_string(g) + " ranks");
  size_t bytes = dtypeSize(x.dtype);
  split->sendOuter = product(x.shape, 0, p.split_dim);
  split->sendInner =
      static_cast<size_t>(product(x.shape, p.split_dim, x.shape.size()) / g) *
      bytes;
  // A received chunk has x's shape with split_dim divided.
  split->recvOuter = product(y.shape, 0, p.concat_dim);
  split->recvInner =
      static_cast<size_t>(product(y.shape, p.concat_dim, y.shape.size()) / g) *
      bytes;
  return Status::ok();
}

Status check_all_to_all(const KernelInfo &info) {
  AllToAllSplit split;
  return readAllToAll(info, &split);
}

Status check_all_reduce(const KernelInfo &info) {
  const TensorType &x = info.operand(0);
  if (Status s = checkSameShape(x, info.result(0)); !s)
    return s;
  const auto &p = info.params<schema::Kernel::k_all_reduce>();
  if (Status s = checkAxes(info, p.axes); !s)
    return s;
  if (p.reduction < 0 || p.reduction > 2)
    return Status::error("attribute 'reduction' " +
                         std::to_string(p.reduction) +
                         " is not 0 (sum), 1 (max) or 2 (min)");
  if (x.dtype == DType::Bool && p.reduction == 0)
    return Status::error("a sum of " + x.str() +
                         " is not supported (bool reduces with max or min)");
  return Status::ok();
}

Status check_all_gather(const KernelInfo &info) {
  const TensorType &x = info.operand(0), &y = info.result(0);
  return checkSplit(info, x, y,
                    "result " + y.str() + " is not operand " + x.str() +
                        " gathered");
}

Status check_reduce_scatter(const KernelInfo &info) {
  const TensorType &x = info.operand(0), &y = info.result(0);
  return checkSplit(info, y, x,
                    "operand " + x.str() + " does not scatter to result " +
                        y.str());
}

Status check_shard_slice(const KernelInfo &info) {
  const TensorType &x = info.operand(0), &y = info.result(0);
  return checkSplit(info, y, x,
                    "result " + y.str() + " is not a chunk of " + x.str());
}

} // namespace cleave::rt

//===- cpu.cpp - all_reduce, all_gather, reduce_scatter, all_to_all -------===//
//
// Axes, dims and shapes are checked against the communicator by the shape
// rules (runtime/kernels/collectives/shape.cpp); the kernels pack/unpack
// non-leading dims around the communicator's flat collectives (which
// concatenate per-rank chunks along dim 0).
//
//===----------------------------------------------------------------------===//

#include "cpu/cpu_kernel.h"

#include "cleave/runtime/comm.h"
#include "kernels/collectives/split.h"

#include <vector>

namespace cleave::rt {

namespace {

/// The packing buffer of the collectives that move a non-leading dim: one
/// per thread that runs a rank's program, grown to the largest collective
/// and shared by all of them (each uses it only inside its own call). A
/// buffer per instruction kept every such collective's whole tensor alive
/// for the program's life: under sequence parallelism on the sequence dim,
/// one activation per block.
std::vector<uint8_t> &collectiveScratch(size_t bytes) {
  thread_local std::vector<uint8_t> scratch;
  if (scratch.size() < bytes)
    scratch.resize(bytes);
  return scratch;
}

} // namespace

Status prepare_all_reduce(const KernelInfo &info, KernelFn *fn) {
  const TensorType &x = info.operand(0);
  const auto &p = info.params<schema::Kernel::k_all_reduce>();
  std::vector<int64_t> axes = p.axes;
  auto reduction = static_cast<Reduction>(p.reduction);
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

Status prepare_all_gather(const KernelInfo &info, KernelFn *fn) {
  const TensorType &x = info.operand(0);
  CollectiveSplit split;
  if (Status s = readCollectiveSplit(info, &split); !s)
    return s;
  const std::vector<int64_t> &axes = split.axes;
  int64_t dim = split.dim, group = split.group, blocks = split.blocks;
  Communicator *comm = info.comm;
  // x is [outer, rows]: `outer` blocks of `rowBytes` each; member k's block
  // o goes to y block o * group + k.
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
  *fn = [=](const KernelArgs &args) {
    std::vector<uint8_t> &scratch = collectiveScratch(perRank * group);
    if (Status s = comm->allGather(args.operands[0], scratch.data(),
                                   static_cast<int64_t>(perRank), axes);
        !s)
      return s;
    auto *out = static_cast<uint8_t *>(args.results[0]);
    const uint8_t *in = scratch.data();
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
  CollectiveSplit split;
  if (Status s = readCollectiveSplit(info, &split); !s)
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
  *fn = [=](const KernelArgs &args) {
    uint8_t *packed = collectiveScratch(perRank * group).data();
    const auto *in = static_cast<const uint8_t *>(args.operands[0]);
#pragma omp parallel for collapse(2) if (perRank * group > (1 << 20))
    for (int64_t k = 0; k < group; ++k)
      for (int64_t o = 0; o < outer; ++o)
        std::memcpy(packed + (k * outer + o) * rowBytes,
                    in + (o * group + k) * rowBytes, rowBytes);
    return comm->reduceScatter(packed, args.results[0], count, dtype, axes);
  };
  return Status::ok();
}

Status prepare_all_to_all(const KernelInfo &info, KernelFn *fn) {
  AllToAllSplit a;
  if (Status s = readAllToAll(info, &a); !s)
    return s;
  Communicator *comm = info.comm;
  int64_t group = a.group;
  size_t chunk = static_cast<size_t>(a.sendOuter) * a.sendInner;
  // Packs chunk j (every outer run's j-th inner run) together to send, and
  // unpacks chunk i into every outer run's i-th slot of the result.
  // Scratch only for a side that needs packing.
  size_t total = chunk * group;
  size_t packBytes = a.sendOuter > 1 ? total : 0;
  size_t scratchBytes = packBytes + (a.recvOuter > 1 ? total : 0);
  *fn = [=](const KernelArgs &args) {
    uint8_t *scratch = collectiveScratch(scratchBytes).data();
    const auto *in = static_cast<const uint8_t *>(args.operands[0]);
    auto *out = static_cast<uint8_t *>(args.results[0]);
    const uint8_t *send = in;
    if (a.sendOuter > 1) {
      uint8_t *packed = scratch;
#pragma omp parallel for collapse(2) if (total > (1 << 20))
      for (int64_t j = 0; j < group; ++j)
        for (int64_t o = 0; o < a.sendOuter; ++o)
          std::memcpy(packed + (j * a.sendOuter + o) * a.sendInner,
                      in + (o * group + j) * a.sendInner, a.sendInner);
      send = packed;
    }
    uint8_t *recv = a.recvOuter > 1 ? scratch + packBytes : out;
    if (Status s =
            comm->allToAll(send, recv, static_cast<int64_t>(chunk), a.axes);
        !s)
      return s;
    if (a.recvOuter > 1) {
#pragma omp parallel for collapse(2) if (total > (1 << 20))
      for (int64_t i = 0; i < group; ++i)
        for (int64_t o = 0; o < a.recvOuter; ++o)
          std::memcpy(out + (o * group + i) * a.recvInner,
                      recv + (i * a.recvOuter + o) * a.recvInner, a.recvInner);
    }
    return Status::ok();
  };
  return Status::ok();
}

Status prepare_shard_slice(const KernelInfo &info, KernelFn *fn) {
  const TensorType &y = info.result(0);
  CollectiveSplit split;
  if (Status s = readCollectiveSplit(info, &split); !s)
    return s;
  const std::vector<int64_t> &axes = split.axes;
  int64_t dim = split.dim, group = split.group, blocks = split.blocks;
  int64_t k = info.comm->groupRank(axes);
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

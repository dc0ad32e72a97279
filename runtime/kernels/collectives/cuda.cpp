//===- cuda.cpp - The collectives on NCCL ---------------------------------===//
//
// Same geometry as the CPU kernels (cpu.cpp beside this file): NCCL
// concatenates per-rank chunks along dim 0, so a split along an inner dim is
// packed into (or unpacked from) scratch with strided 2-D copies around it.
//
//===----------------------------------------------------------------------===//

#include "cuda/collectives.h"
#include "kernels/collectives/split.h"

#include <nccl.h>
#include <type_traits>

#include <set>

namespace cleave::rt::cuda {

namespace {

Status ncclStatus(ncclResult_t r, const char *what) {
  if (r == ncclSuccess)
    return Status::ok();
  return Status::error(std::string(what) + ": " + ncclGetErrorString(r));
}

ncclDataType_t ncclType(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return ncclFloat32;
  case DType::I32:
    return ncclInt32;
  case DType::I64:
    return ncclInt64;
  case DType::BF16:
    return ncclBfloat16;
  case DType::F16:
    return ncclFloat16;
  default: // bool
    return ncclUint8;
  }
}

ncclRedOp_t ncclOp(Reduction r) {
  switch (r) {
  case Reduction::Sum:
    return ncclSum;
  case Reduction::Max:
    return ncclMax;
  case Reduction::Min:
    return ncclMin;
  }
  return ncclSum;
}

Status copy(void *out, const void *in, size_t bytes, cudaStream_t stream) {
  if (bytes == 0 || out == in)
    return Status::ok();
  return cudaStatus(
      cudaMemcpyAsync(out, in, bytes, cudaMemcpyDeviceToDevice, stream),
      "cudaMemcpyAsync");
}

/// \p rows runs of \p width bytes, \p srcPitch apart in \p src, to
/// \p dstPitch apart in \p dst.
Status copy2D(void *dst, size_t dstPitch, const void *src, size_t srcPitch,
              size_t width, size_t rows, cudaStream_t stream) {
  if (width == 0 || rows == 0)
    return Status::ok();
  return cudaStatus(cudaMemcpy2DAsync(dst, dstPitch, src, srcPitch, width, rows,
                                      cudaMemcpyDeviceToDevice, stream),
                    "cudaMemcpy2DAsync");
}

/// The split of a collective, read (and checked) as the shape rules read it.
using Split = CollectiveSplit;
Status readSplit(const KernelInfo &info, Split *split) {
  return readCollectiveSplit(info, split);
}

} // namespace

struct Collectives::Group {
  ncclComm_t comm = nullptr;
  int size = 1;
};

Collectives::~Collectives() {
  for (auto &[axes, g] : groups_)
    if (g->comm)
      ncclCommDestroy(g->comm);
  if (scratch_)
    cudaFree(scratch_);
}

Status Collectives::create(Communicator *comm,
                           const std::vector<std::vector<int64_t>> &axesSets,
                           size_t scratchBytes,
                           std::unique_ptr<Collectives> *out) {
  std::unique_ptr<Collectives> c(new Collectives());
  // Every rank walks the same sets in the same (sorted) order, so the id
  // broadcasts of different groups never interleave differently.
  std::set<std::vector<int64_t>> sets(axesSets.begin(), axesSets.end());
  for (const std::vector<int64_t> &axes : sets) {
    auto g = std::make_unique<Group>();
    g->size = static_cast<int>(comm->groupSize(axes));
    if (g->size > 1) {
      // The group's first member makes the id; it is broadcast with a
      // success flag even when making it failed, so no member waits for an
      // id that will never come.
      struct {
        int ok;
        ncclUniqueId id;
      } shared{};
      int rank = static_cast<int>(comm->groupRank(axes));
      Status made = Status::ok();
      if (rank == 0) {
        made = ncclStatus(ncclGetUniqueId(&shared.id), "ncclGetUniqueId");
        shared.ok = made ? 1 : 0;
      }
      if (Status s = comm->broadcast(&shared, sizeof(shared), 0, axes); !s)
        return Status::error("sharing the NCCL id: " + s.message());
      if (!made)
        return made;
      if (!shared.ok)
        return Status::error("the first rank of a NCCL group could not make "
                             "its id");
      ncclUniqueId id = shared.id;
      if (Status s = ncclStatus(ncclCommInitRank(&g->comm, g->size, id, rank),
                                "ncclCommInitRank");
          !s)
        return s;
    }
    c->groups_.emplace(axes, std::move(g));
  }
  if (scratchBytes)
    if (Status s = cudaStatus(cudaMalloc(&c->scratch_, scratchBytes),
                              "cudaMalloc (collective scratch)");
        !s)
      return s;
  c->scratchBytes_ = scratchBytes;
  *out = std::move(c);
  return Status::ok();
}

Status Collectives::group(const std::vector<int64_t> &axes, Group **out) {
  auto it = groups_.find(axes);
  if (it == groups_.end())
    return Status::error("no NCCL communicator for these mesh axes");
  *out = it->second.get();
  return Status::ok();
}

Status Collectives::allReduce(const void *in, void *out, int64_t count,
                              DType dtype, Reduction reduction,
                              const std::vector<int64_t> &axes,
                              cudaStream_t stream) {
  Group *g = nullptr;
  if (Status s = group(axes, &g); !s)
    return s;
  if (g->size == 1 || count == 0)
    return copy(out, in, static_cast<size_t>(count) * dtypeSize(dtype), stream);
  return ncclStatus(ncclAllReduce(in, out, static_cast<size_t>(count),
                                  ncclType(dtype), ncclOp(reduction), g->comm,
                                  stream),
                    "ncclAllReduce");
}

Status Collectives::allGather(const void *in, void *out, int64_t bytesPerRank,
                              const std::vector<int64_t> &axes,
                              cudaStream_t stream) {
  Group *g = nullptr;
  if (Status s = group(axes, &g); !s)
    return s;
  if (g->size == 1 || bytesPerRank == 0)
    return copy(out, in, static_cast<size_t>(bytesPerRank), stream);
  return ncclStatus(ncclAllGather(in, out, static_cast<size_t>(bytesPerRank),
                                  ncclUint8, g->comm, stream),
                    "ncclAllGather");
}

Status Collectives::reduceScatter(const void *in, void *out,
                                  int64_t countPerRank, DType dtype,
                                  const std::vector<int64_t> &axes,
                                  cudaStream_t stream) {
  Group *g = nullptr;
  if (Status s = group(axes, &g); !s)
    return s;
  if (g->size == 1 || countPerRank == 0)
    return copy(out, in, static_cast<size_t>(countPerRank) * dtypeSize(dtype),
                stream);
  return ncclStatus(
      ncclReduceScatter(in, out, static_cast<size_t>(countPerRank),
                        ncclType(dtype), ncclSum, g->comm, stream),
      "ncclReduceScatter");
}

Status Collectives::allToAll(const void *in, void *out, int64_t bytesPerPeer,
                             const std::vector<int64_t> &axes,
                             cudaStream_t stream) {
  Group *g = nullptr;
  if (Status s = group(axes, &g); !s)
    return s;
  size_t chunk = static_cast<size_t>(bytesPerPeer);
  if (g->size == 1 || chunk == 0)
    return copy(out, in, chunk, stream);
  if (Status s = ncclStatus(ncclGroupStart(), "ncclGroupStart"); !s)
    return s;
  const auto *src = static_cast<const uint8_t *>(in);
  auto *dst = static_cast<uint8_t *>(out);
  Status sent = Status::ok();
  for (int peer = 0; peer < g->size && sent; ++peer) {
    sent = ncclStatus(
        ncclSend(src + peer * chunk, chunk, ncclUint8, peer, g->comm, stream),
        "ncclSend");
    if (sent)
      sent = ncclStatus(
          ncclRecv(dst + peer * chunk, chunk, ncclUint8, peer, g->comm, stream),
          "ncclRecv");
  }
  // The group is closed whatever failed, so the communicator stays usable.
  Status ended = ncclStatus(ncclGroupEnd(), "ncclGroupEnd");
  return sent ? ended : sent;
}

size_t collectiveScratchBytes(const KernelInfo &info) {
  if (info.kernelId == schema::Kernel::k_all_to_all) {
    AllToAllSplit a;
    if (!readAllToAll(info, &a) || a.group == 1)
      return 0;
    const TensorType &x = info.operand(0);
    return 2 * static_cast<size_t>(x.numElements()) * dtypeSize(x.dtype);
  }
  Split split;
  if (info.kernelId == schema::Kernel::k_all_gather) {
    if (!readSplit(info, &split))
      return 0;
    const TensorType &x = info.operand(0);
    int64_t outer = product(x.shape, 0, split.dim) * split.blocks;
    if (outer == 1 || split.group == 1)
      return 0;
    return static_cast<size_t>(x.numElements()) * dtypeSize(x.dtype) *
           split.group;
  }
  if (info.kernelId == schema::Kernel::k_reduce_scatter) {
    if (!readSplit(info, &split))
      return 0;
    const TensorType &y = info.result(0);
    if (product(y.shape, 0, split.dim) == 1 || split.group == 1)
      return 0;
    return static_cast<size_t>(y.numElements()) * dtypeSize(y.dtype) *
           split.group;
  }
  return 0;
}

Status prepare_all_reduce(const KernelInfo &info, DeviceFn *fn) {
  const auto &p = info.params<schema::Kernel::k_all_reduce>();
  std::vector<int64_t> axes = p.axes;
  int64_t code = p.reduction;
  auto reduction = static_cast<Reduction>(code);
  int64_t count = info.operand(0).numElements();
  DType dtype = info.operand(0).dtype;
  *fn = [=](const KernelArgs &args, Context &ctx) {
    return ctx.collectives->allReduce(args.operands[0], args.results[0], count,
                                      dtype, reduction, axes, ctx.stream);
  };
  return Status::ok();
}

Status prepare_all_gather(const KernelInfo &info, DeviceFn *fn) {
  Split split;
  if (Status s = readSplit(info, &split); !s)
    return s;
  const TensorType &x = info.operand(0);
  int64_t group = split.group;
  int64_t outer = product(x.shape, 0, split.dim) * split.blocks;
  size_t rowBytes =
      static_cast<size_t>(product(x.shape, split.dim, x.shape.size())) *
      dtypeSize(x.dtype) / split.blocks;
  size_t perRank = static_cast<size_t>(outer) * rowBytes;
  std::vector<int64_t> axes = split.axes;
  if (outer == 1 || group == 1) {
    *fn = [=](const KernelArgs &args, Context &ctx) {
      return ctx.collectives->allGather(args.operands[0], args.results[0],
                                        static_cast<int64_t>(perRank), axes,
                                        ctx.stream);
    };
    return Status::ok();
  }
  *fn = [=](const KernelArgs &args, Context &ctx) {
    Collectives &c = *ctx.collectives;
    if (c.scratchBytes() < perRank * group)
      return Status::error("collective scratch too small");
    auto *packed = static_cast<uint8_t *>(c.scratch());
    if (Status s = c.allGather(args.operands[0], packed,
                               static_cast<int64_t>(perRank), axes, ctx.stream);
        !s)
      return s;
    // Member k's block o goes to result block o * group + k.
    auto *out = static_cast<uint8_t *>(args.results[0]);
    for (int64_t k = 0; k < group; ++k)
      if (Status s = copy2D(out + k * rowBytes, group * rowBytes,
                            packed + k * outer * rowBytes, rowBytes, rowBytes,
                            outer, ctx.stream);
          !s)
        return s;
    return Status::ok();
  };
  return Status::ok();
}

Status prepare_reduce_scatter(const KernelInfo &info, DeviceFn *fn) {
  Split split;
  if (Status s = readSplit(info, &split); !s)
    return s;
  const TensorType &y = info.result(0);
  int64_t group = split.group;
  DType dtype = y.dtype;
  int64_t count = y.numElements();
  int64_t outer = product(y.shape, 0, split.dim);
  size_t rowBytes =
      static_cast<size_t>(product(y.shape, split.dim, y.shape.size())) *
      dtypeSize(dtype);
  size_t perRank = static_cast<size_t>(count) * dtypeSize(dtype);
  std::vector<int64_t> axes = split.axes;
  if (outer == 1 || group == 1) {
    *fn = [=](const KernelArgs &args, Context &ctx) {
      return ctx.collectives->reduceScatter(args.operands[0], args.results[0],
                                            count, dtype, axes, ctx.stream);
    };
    return Status::ok();
  }
  *fn = [=](const KernelArgs &args, Context &ctx) {
    Collectives &c = *ctx.collectives;
    if (c.scratchBytes() < perRank * group)
      return Status::error("collective scratch too small");
    auto *packed = static_cast<uint8_t *>(c.scratch());
    const auto *in = static_cast<const uint8_t *>(args.operands[0]);
    // Chunk k is every outer block's k-th row run.
    for (int64_t k = 0; k < group; ++k)
      if (Status s =
              copy2D(packed + k * outer * rowBytes, rowBytes, in + k * rowBytes,
                     group * rowBytes, rowBytes, outer, ctx.stream);
          !s)
        return s;
    return c.reduceScatter(packed, args.results[0], count, dtype, axes,
                           ctx.stream);
  };
  return Status::ok();
}

Status prepare_all_to_all(const KernelInfo &info, DeviceFn *fn) {
  AllToAllSplit a;
  if (Status s = readAllToAll(info, &a); !s)
    return s;
  size_t chunk = static_cast<size_t>(a.sendOuter) * a.sendInner;
  size_t total = chunk * a.group;
  *fn = [=](const KernelArgs &args, Context &ctx) {
    Collectives &c = *ctx.collectives;
    const auto *in = static_cast<const uint8_t *>(args.operands[0]);
    auto *out = static_cast<uint8_t *>(args.results[0]);
    if (a.group == 1)
      return copy(out, in, total, ctx.stream);
    if (c.scratchBytes() < 2 * total)
      return Status::error("collective scratch too small");
    auto *packed = static_cast<uint8_t *>(c.scratch());
    const uint8_t *send = in;
    if (a.sendOuter > 1) {
      // Chunk j is every outer run's j-th inner run.
      for (int64_t j = 0; j < a.group; ++j)
        if (Status s = copy2D(packed + j * chunk, a.sendInner,
                              in + j * a.sendInner, a.group * a.sendInner,
                              a.sendInner, a.sendOuter, ctx.stream);
            !s)
          return s;
      send = packed;
    }
    uint8_t *recv = a.recvOuter > 1 ? packed + total : out;
    if (Status s = c.allToAll(send, recv, static_cast<int64_t>(chunk), a.axes,
                              ctx.stream);
        !s)
      return s;
    if (a.recvOuter > 1)
      for (int64_t i = 0; i < a.group; ++i)
        if (Status s = copy2D(out + i * a.recvInner, a.group * a.recvInner,
                              recv + i * chunk, a.recvInner, a.recvInner,
                              a.recvOuter, ctx.stream);
            !s)
          return s;
    return Status::ok();
  };
  return Status::ok();
}

Status prepare_shard_slice(const KernelInfo &info, DeviceFn *fn) {
  Split split;
  if (Status s = readSplit(info, &split); !s)
    return s;
  const TensorType &y = info.result(0);
  int64_t group = split.group;
  int64_t k = info.comm->groupRank(split.axes);
  int64_t outer = product(y.shape, 0, split.dim) * split.blocks;
  size_t rowBytes =
      static_cast<size_t>(product(y.shape, split.dim, y.shape.size())) *
      dtypeSize(y.dtype) / split.blocks;
  *fn = [=](const KernelArgs &args, Context &ctx) {
    const auto *in = static_cast<const uint8_t *>(args.operands[0]);
    return copy2D(args.results[0], rowBytes, in + k * rowBytes,
                  group * rowBytes, rowBytes, outer, ctx.stream);
  };
  return Status::ok();
}

} // namespace cleave::rt::cuda

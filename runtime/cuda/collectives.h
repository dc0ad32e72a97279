//===- collectives.h - NCCL communicators per mesh-axis group ---*- C++ -*-===//
//
// Private to libcleave_cuda.so. One NCCL communicator per set of mesh axes
// the program's collectives use, built at load time over the existing
// (MPI) communicator: the group's first member makes the NCCL id and
// broadcasts it to its group. Groups of one member need no NCCL: their
// collectives are copies.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_CUDA_COLLECTIVES_H
#define CLEAVE_RUNTIME_CUDA_COLLECTIVES_H

#include "cuda/cuda_kernel.h"

#include "cleave/runtime/comm.h"

#include <map>
#include <memory>
#include <vector>

namespace cleave::rt::cuda {

class Collectives {
public:
  /// Builds a communicator for each of \p axesSets (every rank must pass
  /// the same sets) and \p scratchBytes of device scratch for packing.
  static Status create(Communicator *comm,
                       const std::vector<std::vector<int64_t>> &axesSets,
                       size_t scratchBytes, std::unique_ptr<Collectives> *out);
  ~Collectives();

  Status allReduce(const void *in, void *out, int64_t count, DType dtype,
                   Reduction reduction, const std::vector<int64_t> &axes,
                   cudaStream_t stream);
  /// out = concatenation over the group of every member's in.
  Status allGather(const void *in, void *out, int64_t bytesPerRank,
                   const std::vector<int64_t> &axes, cudaStream_t stream);
  /// out = sum over the group of chunk groupRank of in.
  Status reduceScatter(const void *in, void *out, int64_t countPerRank,
                       DType dtype, const std::vector<int64_t> &axes,
                       cudaStream_t stream);
  /// out chunk i = what member i sent (its in chunk groupRank): grouped
  /// point-to-point sends and receives, NCCL's all-to-all.
  Status allToAll(const void *in, void *out, int64_t bytesPerPeer,
                  const std::vector<int64_t> &axes, cudaStream_t stream);
  void *scratch() const { return scratch_; }
  size_t scratchBytes() const { return scratchBytes_; }

private:
  Collectives() = default;
  struct Group;
  Status group(const std::vector<int64_t> &axes, Group **out);
  std::map<std::vector<int64_t>, std::unique_ptr<Group>> groups_;
  void *scratch_ = nullptr;
  size_t scratchBytes_ = 0;
};

/// Device scratch a collective instruction needs for packing (0 if none).
size_t collectiveScratchBytes(const KernelInfo &info);

} // namespace cleave::rt::cuda

#endif // CLEAVE_RUNTIME_CUDA_COLLECTIVES_H

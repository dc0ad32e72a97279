//===- split.h - What a split collective splits -----------------*- C++ -*-===//
//
// all_gather, reduce_scatter and shard_slice split one dimension of their
// whole tensor across the group of ranks along 'axes'. Both backends read
// the split through this reader, which the collectives' shape rules
// (shape.cpp beside it) have checked against the instruction's types.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_KERNELS_COLLECTIVES_SPLIT_H
#define CLEAVE_RUNTIME_KERNELS_COLLECTIVES_SPLIT_H

#include "core/kernel_info.h"

namespace cleave::rt {

struct CollectiveSplit {
  std::vector<int64_t> axes;
  /// The split dimension, of the per-rank part.
  int64_t dim = 0;
  /// attr blocks (1 where the kernel has none): the split dimension is that
  /// many equal blocks, each split across the group.
  int64_t blocks = 1;
  /// Ranks in the group over axes.
  int64_t group = 1;
};

/// Reads the split of an all_gather, reduce_scatter or shard_slice
/// instruction (an error for any other kernel, or without a mesh).
Status readCollectiveSplit(const KernelInfo &info, CollectiveSplit *split);

/// An all_to_all: the operand's split_dim is cut into `group` chunks, one
/// per member, and what arrives is concatenated along concat_dim.
struct AllToAllSplit {
  std::vector<int64_t> axes;
  int64_t splitDim = 0, concatDim = 0;
  int64_t group = 1;
  /// The operand as [outer, group, inner] along split_dim (send order),
  /// and the result as [outer, group, inner] along concat_dim (receive
  /// order): outer runs and inner bytes of each.
  int64_t sendOuter = 1, recvOuter = 1;
  size_t sendInner = 0, recvInner = 0;
};

/// Reads an all_to_all instruction (checked by its shape rule).
Status readAllToAll(const KernelInfo &info, AllToAllSplit *split);

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_KERNELS_COLLECTIVES_SPLIT_H

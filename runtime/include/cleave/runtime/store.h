//===- store.h - Sharded tensor stores: bundles and checkpoints -*- C++ -*-===//
//
// A bundle's weights and a checkpoint are the same thing on disk: a table of
// state tensors (plan::TensorEntry: global type, layout on the mesh, where
// each rank's slice lives), one safetensors file per rank, and the digests of
// the files. A rank reads its own file only, unless the layouts differ
// (resuming at another tp), when each tensor is assembled from the slices it
// needs, one tensor at a time.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_STORE_H
#define CLEAVE_RUNTIME_STORE_H

#include "cleave/runtime/executor.h"
#include "cleave/runtime/safetensors.h"

#include <google/protobuf/repeated_field.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace cleave::plan {
class Binding;
class TensorEntry;
class FileDigest;
} // namespace cleave::plan

namespace cleave::rt {

/// A tensor's layout on the tp ranks: split along `dim` (-1: replicated),
/// the dimension being `blocks` equal blocks each split across the ranks,
/// every rank's chunk of a block a whole number of `granule`s (heads).
/// Where tp is factored into two mesh axes, a split over one of them cuts
/// the dimension into `parts` chunks (0: the ranks / `copies`), each held
/// by `copies` neighbouring ranks: rank r holds chunk (r / copies) % parts.
struct Split {
  int64_t dim = -1;
  int64_t blocks = 1;
  int64_t granule = 1;
  int64_t parts = 0;
  int64_t copies = 1;
  bool isSplit() const { return dim >= 0; }
  /// The chunks the dimension is cut into on \p ranks ranks.
  int64_t partsOn(int64_t ranks) const {
    return parts > 0 ? parts : ranks / copies;
  }
  /// The chunk rank \p rank holds.
  int64_t chunkIndex(int64_t rank, int64_t ranks) const {
    return rank / copies % partsOn(ranks);
  }
  /// Whether rank \p rank is the first of the ranks holding its chunk (the
  /// one that writes it).
  bool firstHolder(int64_t rank, int64_t ranks) const {
    if (!isSplit())
      return rank == 0;
    return rank % copies == 0 && rank / copies < partsOn(ranks);
  }
  /// The extent of each rank's chunk of a block of \p block indices on
  /// \p ranks ranks.
  int64_t chunk(int64_t block, int64_t ranks) const {
    int64_t n = partsOn(ranks);
    return (block + granule * n - 1) / (granule * n) * granule;
  }
  bool operator==(const Split &o) const {
    return dim == o.dim &&
           (dim < 0 || (blocks == o.blocks && granule == o.granule &&
                        parts == o.parts && copies == o.copies));
  }
};

/// Index ranges [first, second) of the split dimension that rank \p rank of
/// \p parts holds, in the order its chunk concatenates them.
std::vector<std::pair<int64_t, int64_t>>
rankRanges(int64_t size, Split split, int64_t rank, int64_t parts);

/// The part of \p global made of \p ranges along \p dim, concatenated.
HostTensor takeRanges(const HostTensor &global, int64_t dim,
                      const std::vector<std::pair<int64_t, int64_t>> &ranges);
/// The inverse: writes \p part into those ranges of \p global.
void putRanges(HostTensor *global, int64_t dim,
               const std::vector<std::pair<int64_t, int64_t>> &ranges,
               const HostTensor &part);

/// The extent along the split dimension of every rank's chunk in memory: a
/// dimension (or block) that \p parts does not divide is padded, the last
/// ranks' chunks ending in zeros (or, past the end, all padding).
int64_t localExtent(int64_t size, Split split, int64_t parts);

/// Whether chunks of a dimension of \p size split so on \p parts ranks are
/// padded in memory.
inline bool isPadded(int64_t size, Split split, int64_t parts) {
  int64_t block = size / split.blocks;
  return split.isSplit() &&
         split.chunk(block, parts) * split.partsOn(parts) != block;
}

/// Rank \p rank's \p chunk (its real ranges, as files hold them) padded to
/// the extent the program sees; \p size is the global extent.
HostTensor toLocal(const HostTensor &chunk, Split split, int64_t size,
                   int64_t rank, int64_t parts);
/// The inverse: the real ranges of the program's padded \p local.
HostTensor fromLocal(const HostTensor &local, Split split, int64_t size,
                     int64_t rank, int64_t parts);

/// Rank \p rank's chunk of \p global: its real ranges, no padding.
HostTensor chunkOf(const HostTensor &global, Split split, int64_t rank,
                   int64_t parts);

/// The runtime dtype of a plan dtype (plan::DType); F32 for others.
DType fromPlan(int planDType);

/// The layout recorded in \p entry.
Split splitOf(const plan::TensorEntry &entry);
Split splitOf(const plan::Binding &binding);
/// Records \p split in \p entry (clearing what was there).
void setSplit(plan::TensorEntry *entry, Split split);

/// One tensor of the model as a store holds it: one entry, or the segments
/// it was cut into (plan::TensorEntry::segment_of), in offset order.
struct ModelTensor {
  std::string name;
  std::vector<int64_t> shape; // the model's
  std::vector<const plan::TensorEntry *> entries;
  int64_t dim = -1; // segments: the dimension they are cut along
};
/// The model's tensors among the parameters and buffers of \p entries, in
/// the order each first appears; an error where a tensor's segments do not
/// tile it.
Status modelTensors(
    const google::protobuf::RepeatedPtrField<plan::TensorEntry> &entries,
    std::vector<ModelTensor> *out);
/// \p t's value from its entries' global values, in \p t.entries' order.
HostTensor joinSegments(const ModelTensor &t, std::vector<HostTensor> parts);

/// "weights/rank-3.safetensors" style names.
std::string rankFileName(const std::string &dir, int64_t rank);

/// Writes a store from global values, as `cleave compile` does: \p entries
/// (name, global type, role, layout, key set) get their slices; the values
/// come one at a time, in entry order, and each rank's chunk goes to that
/// rank's file. Nothing beyond the value being written is held.
class StoreWriter {
public:
  static Status
  create(const std::string &root, const std::string &subdir, int64_t parts,
         google::protobuf::RepeatedPtrField<plan::TensorEntry> *entries,
         std::unique_ptr<StoreWriter> *result);
  ~StoreWriter();
  /// The next entry's global value.
  Status add(const HostTensor &global);
  /// Completes every file and appends their digests.
  Status finish(google::protobuf::RepeatedPtrField<plan::FileDigest> *digests);

private:
  StoreWriter() = default;
  std::string root_;
  int64_t parts_ = 1;
  size_t next_ = 0;
  google::protobuf::RepeatedPtrField<plan::TensorEntry> *entries_ = nullptr;
  std::vector<std::string> files_;
  std::vector<std::unique_ptr<SafetensorsWriter>> writers_;
};

/// Reads tensors of a store in the directory \p root.
class StoreReader {
public:
  /// Checks that the files listed in \p digests exist with their recorded
  /// size and checksum as they are opened (lazily, the first time a slice
  /// in them is needed).
  StoreReader(
      std::string root, const std::string &what,
      const google::protobuf::RepeatedPtrField<plan::FileDigest> &digests);
  ~StoreReader();
  /// Rank \p rank's chunk of \p entry in layout \p want on \p parts ranks:
  /// read straight from the rank's slice when the store has that layout,
  /// else assembled from the slices that hold it.
  Status readChunk(const plan::TensorEntry &entry, Split want, int64_t rank,
                   int64_t parts, HostTensor *out);
  /// The whole of \p entry.
  Status readGlobal(const plan::TensorEntry &entry, HostTensor *out);

private:
  Status file(const std::string &path, const SafetensorsFile **out);
  Status readSlice(const plan::TensorEntry &entry, int index, HostTensor *out);
  std::string root_, what_;
  std::map<std::string, std::pair<uint64_t, uint32_t>> digests_;
  std::map<std::string, std::unique_ptr<SafetensorsFile>> open_;
};

/// Checks every file name a store's table lists (each slice's file, each
/// digest's path, the model copy \p modelFile) with checkStoredName, so a
/// plan or checkpoint index from someone else is refused as it is loaded,
/// naming \p container and the entry, before any work.
Status checkStoredNames(
    const google::protobuf::RepeatedPtrField<plan::TensorEntry> &tensors,
    const google::protobuf::RepeatedPtrField<plan::FileDigest> &files,
    const std::string &modelFile, const std::string &container);

/// Stops libprotobuf from printing its own lines (a string field of a
/// corrupt plan that is not UTF-8 logs an ERROR on stderr before the parse
/// fails): the caller words the failure as one `cleave: error:` line.
void quietProtobufLogs();

/// Writes \p bytes to \p path atomically (temporary file, fsync, rename).
Status writeFileAtomic(const std::string &path, const std::string &bytes);

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_STORE_H

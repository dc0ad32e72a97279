//===- checkpoint.h - Atomic, sharded training checkpoints ------*- C++ -*-===//
//
// A checkpoint root holds step-NNNNNNNN directories, each complete: every
// rank writes its safetensors file (parameters, buffers, optimizer state)
// into a temporary directory and fsyncs it; rank 0 then writes the index
// (checkpoint.pb: step, tensor table with layouts, file digests) and renames
// the directory into place. A kill at any moment leaves at most a temporary
// directory behind, never a half-written step, so the newest step directory
// is always loadable. The index records layouts, so a checkpoint resumes on
// any tp (each tensor is reassembled from the slices the new layout needs).
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_CHECKPOINT_H
#define CLEAVE_RUNTIME_CHECKPOINT_H

#include "cleave/runtime/executor.h"

#include <string>
#include <utility>
#include <vector>

namespace cleave::plan {
class Checkpoint;
class Plan;
class TensorEntry;
} // namespace cleave::plan

namespace cleave::rt {

class Communicator;

constexpr uint32_t kCheckpointFormatVersion = 1;
constexpr const char *kCheckpointIndexFile = "checkpoint.pb";

/// A state tensor of the run: its table entry (name, role, slot, global
/// type, layout, key) and this rank's value.
using StateTensor = std::pair<const plan::TensorEntry *, const HostTensor *>;

/// Writes the checkpoint of \p step (steps completed) under \p root
/// (collective: every rank calls it). \p plan and \p bundleDir give the
/// train config and the model graph copied for export. Sets \p written to
/// the step directory.
Status saveCheckpoint(const std::string &root, int64_t step,
                      const plan::Plan &plan, const std::string &bundleDir,
                      const std::vector<StateTensor> &state,
                      const std::string &data, Communicator &comm,
                      std::string *written);

/// Removes all but the newest \p keep step directories under \p root.
Status pruneCheckpoints(const std::string &root, int64_t keep);

/// The checkpoint at \p path: a step directory, or a root whose newest
/// complete step directory is taken. Reads and checks its index.
Status findCheckpoint(const std::string &path, std::string *dir,
                      plan::Checkpoint *checkpoint);

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_CHECKPOINT_H

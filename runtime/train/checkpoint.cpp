//===- checkpoint.cpp - Atomic, sharded training checkpoints --------------===//

#include "cleave/runtime/checkpoint.h"
#include "cleave/runtime/comm.h"
#include "cleave/runtime/files.h"
#include "cleave/runtime/safetensors.h"
#include "cleave/runtime/store.h"

#include "plan/plan.pb.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

namespace cleave::rt {

namespace fs = std::filesystem;
namespace pb = ::cleave::plan;

namespace {

std::string stepName(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return buf;
}

/// N of a "step-N" directory name; -1 for anything else.
int64_t stepOf(const std::string &name) {
  if (name.rfind("step-", 0) != 0 || name.size() == 5 ||
      name.find_first_not_of("0123456789", 5) != std::string::npos)
    return -1;
  return std::stoll(name.substr(5));
}

/// Every rank agrees on whether all of them succeeded; the first failure's
/// message is kept by the rank that had it.
Status agree(Communicator &comm, const Status &mine) {
  int32_t failed = mine ? 0 : 1;
  if (Status s = comm.allReduce(&failed, 1, DType::I32, Reduction::Max, {0});
      !s)
    return s;
  if (!mine)
    return mine;
  if (failed)
    return Status::error("another rank failed to write the checkpoint");
  return Status::ok();
}

/// Fault injection for the tests of atomicity: CLEAVE_TEST_KILL_IN_CHECKPOINT
/// set to STAGE:STEP makes the process SIGKILL itself at \p stage of the
/// checkpoint of \p step, exactly as a `kill -9` arriving then would.
void killPoint(const char *stage, int64_t step) {
  const char *want = std::getenv("CLEAVE_TEST_KILL_IN_CHECKPOINT");
  if (want &&
      std::string(want) == std::string(stage) + ":" + std::to_string(step))
    std::raise(SIGKILL);
}

/// Copies (or hard-links) \p from to \p to.
Status copyFile(const fs::path &from, const fs::path &to) {
  std::error_code ec;
  fs::create_hard_link(from, to, ec);
  if (!ec)
    return Status::ok();
  fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
  if (ec)
    return Status::error("cannot copy '" + from.string() + "' to '" +
                         to.string() + "': " + ec.message());
  return Status::ok();
}

/// The index's tensor table (each tensor's slice in each rank's file) and
/// the digests of the rank files.
void addRankFiles(const std::vector<StateTensor> &state,
                  const std::vector<uint64_t> &digests, int parts,
                  pb::Checkpoint *index) {
  for (const auto &[entry, value] : state) {
    pb::TensorEntry *e = index->add_tensors();
    *e = *entry;
    e->clear_slices();
    Split split = splitOf(*e);
    for (int r = 0; r < parts; ++r) {
      pb::RankSlice *slice = e->add_slices();
      slice->set_rank(r);
      slice->set_file(rankFileName("", r));
      if (split.isSplit())
        for (auto [lo, hi] :
             rankRanges(e->type().shape(split.dim), split, r, parts)) {
          slice->add_starts(lo);
          slice->add_ends(hi);
        }
    }
  }
  for (int r = 0; r < parts; ++r) {
    pb::FileDigest *d = index->add_files();
    d->set_path(rankFileName("", r));
    d->set_size(digests[2 * r]);
    d->set_crc32(static_cast<uint32_t>(digests[2 * r + 1]));
  }
}

} // namespace

namespace {
Status saveCheckpointImpl(const std::string &root, int64_t step,
                          const pb::Plan &plan, const std::string &bundleDir,
                          const std::vector<StateTensor> &state,
                          const std::string &data, Communicator &comm,
                          std::string *written);
} // namespace

Status saveCheckpoint(const std::string &root, int64_t step,
                      const pb::Plan &plan, const std::string &bundleDir,
                      const std::vector<StateTensor> &state,
                      const std::string &data, Communicator &comm,
                      std::string *written) {
  // Ranks wait in the checkpoint's collectives for the slowest rank's
  // writes and fsyncs, which can take longer than the step timeout on a
  // slow disk: an hour's grace, then the usual deadline again.
  double timeout = comm.timeoutSeconds();
  comm.setTimeoutSeconds(std::max(timeout, 3600.0));
  Status s = saveCheckpointImpl(root, step, plan, bundleDir, state, data, comm,
                                written);
  comm.setTimeoutSeconds(timeout);
  // A failed save (a full disk, a folder that went read-only) leaves no
  // temporary behind; every rank has agreed on the failure by now.
  if (!s && comm.rank() == 0) {
    std::error_code ec;
    fs::remove_all(fs::path(root) / (".tmp-" + stepName(step)), ec);
  }
  return s;
}

namespace {
Status saveCheckpointImpl(const std::string &root, int64_t step,
                          const pb::Plan &plan, const std::string &bundleDir,
                          const std::vector<StateTensor> &state,
                          const std::string &data, Communicator &comm,
                          std::string *written) {
  int rank = comm.rank(), parts = comm.size();
  fs::path final = fs::path(root) / stepName(step);
  fs::path tmp = fs::path(root) / (".tmp-" + stepName(step));
  std::error_code ec;
  Status prepared = Status::ok();
  if (rank == 0) {
    fs::remove_all(tmp, ec); // left by a run that was killed
    fs::create_directories(tmp, ec);
    if (ec)
      prepared = Status::error("cannot create checkpoint directory '" +
                               tmp.string() + "': " + ec.message());
  }
  if (Status s = agree(comm, prepared); !s)
    return s;

  // This rank's file: its value of every state tensor.
  std::string file = rankFileName("", rank);
  // Files hold each rank's real rows: padded chunks are trimmed.
  std::vector<HostTensor> trimmed(state.size());
  std::vector<const HostTensor *> values;
  std::vector<TensorInfo> infos;
  for (size_t i = 0; i < state.size(); ++i) {
    const auto &[entry, value] = state[i];
    Split split = splitOf(*entry);
    const HostTensor *v = value;
    if (split.isSplit() &&
        isPadded(entry->type().shape(split.dim), split, parts)) {
      trimmed[i] =
          fromLocal(*value, split, entry->type().shape(split.dim), rank, parts);
      v = &trimmed[i];
    }
    values.push_back(v);
    infos.push_back({entry->key(), v->dtype, v->shape});
  }
  uint64_t digest[2] = {0, 0};
  Status wrote = [&]() -> Status {
    std::unique_ptr<SafetensorsWriter> writer;
    if (Status s =
            SafetensorsWriter::create((tmp / file).string(), infos,
                                      {{"format", "pt"},
                                       {"cleave.rank", std::to_string(rank)},
                                       {"cleave.step", std::to_string(step)}},
                                      &writer);
        !s)
      return s;
    for (const HostTensor *value : values) {
      if (Status s = writer->write(value->bytes.data(), value->bytes.size());
          !s)
        return s;
      killPoint("data", step);
    }
    uint32_t crc;
    if (Status s = writer->finish(&digest[0], &crc); !s)
      return s;
    digest[1] = crc;
    return Status::ok();
  }();
  if (Status s = agree(comm, wrote); !s)
    return s;
  std::vector<uint64_t> digests(2 * parts);
  if (Status s = comm.allGather(digest, digests.data(), sizeof digest, {0}); !s)
    return s;

  Status committed = Status::ok();
  if (rank == 0) {
    committed = [&]() -> Status {
      pb::Checkpoint index;
      index.set_format_version(kCheckpointFormatVersion);
      index.set_step(step);
      index.add_mesh(parts);
      *index.mutable_train_config() = plan.train_config();
      index.set_data(data);
      addRankFiles(state, digests, parts, &index);
      if (!plan.model_file().empty()) {
        std::string model;
        if (Status s = resolveStoredName(bundleDir, plan.model_file(),
                                         "bundle '" + bundleDir + "'",
                                         "the model copy", &model);
            !s)
          return s;
        if (Status s = copyFile(model, tmp / plan.model_file()); !s)
          return s;
        index.set_model_file(plan.model_file());
        for (const pb::FileDigest &d : plan.files())
          if (d.path() == plan.model_file())
            *index.add_files() = d;
      }
      std::string bytes;
      if (!index.SerializeToString(&bytes))
        return Status::error("cannot encode the checkpoint index");
      if (Status s =
              writeFileAtomic((tmp / kCheckpointIndexFile).string(), bytes);
          !s)
        return s;
      if (Status s = syncDirectory(tmp.string()); !s)
        return s;
      killPoint("index", step);
      // Into place: a step directory already there (a run resumed from an
      // older checkpoint) moves aside first and goes last.
      std::error_code ec;
      fs::path old = fs::path(root) / (".old-" + stepName(step));
      bool replace = fs::exists(final, ec);
      if (replace) {
        fs::remove_all(old, ec);
        fs::rename(final, old, ec);
        if (ec)
          return Status::error("cannot replace '" + final.string() +
                               "': " + ec.message());
      }
      fs::rename(tmp, final, ec);
      if (ec)
        return Status::error("cannot move the checkpoint into '" +
                             final.string() + "': " + ec.message());
      if (Status s = syncDirectory(root); !s)
        return s;
      if (replace)
        fs::remove_all(old, ec);
      // Steps after this one belong to a run this one abandoned (it resumed
      // from an earlier checkpoint): --resume must not find them.
      for (const auto &e : fs::directory_iterator(root, ec)) {
        int64_t other = stepOf(e.path().filename().string());
        if (other > step)
          fs::remove_all(e.path(), ec);
      }
      return Status::ok();
    }();
  }
  if (Status s = agree(comm, committed); !s)
    return s;
  *written = final.string();
  return Status::ok();
}
} // namespace

Status pruneCheckpoints(const std::string &root, int64_t keep) {
  std::error_code ec;
  std::vector<std::pair<int64_t, fs::path>> steps;
  for (const auto &e : fs::directory_iterator(root, ec))
    if (int64_t step = stepOf(e.path().filename().string()); step >= 0)
      steps.push_back({step, e.path()});
  std::sort(steps.begin(), steps.end());
  for (size_t i = 0; i + keep < steps.size(); ++i) {
    fs::remove_all(steps[i].second, ec);
    if (ec)
      return Status::error("cannot remove old checkpoint '" +
                           steps[i].second.string() + "': " + ec.message());
  }
  return Status::ok();
}

Status findCheckpoint(const std::string &path, std::string *dir,
                      pb::Checkpoint *checkpoint) {
  fs::path chosen = path;
  std::error_code ec;
  if (!fs::exists(chosen / kCheckpointIndexFile, ec)) {
    if (!fs::is_directory(path, ec))
      return Status::error("no checkpoint at '" + path + "'");
    // The newest complete step; a step being replaced (moved aside to
    // .old-step-N when a kill came before its successor was renamed in)
    // counts too.
    int64_t newest = -1;
    for (const auto &e : fs::directory_iterator(path, ec)) {
      std::string name = e.path().filename().string();
      if (name.rfind(".old-", 0) == 0)
        name = name.substr(5);
      int64_t step = stepOf(name);
      std::error_code exists;
      if (step > newest &&
          fs::exists(e.path() / kCheckpointIndexFile, exists)) {
        newest = step;
        chosen = e.path();
      }
    }
    if (newest < 0)
      return Status::error("'" + path +
                           "' holds no complete checkpoint (no step-N "
                           "directory with a " +
                           kCheckpointIndexFile + ")");
  }
  quietProtobufLogs();
  fs::path indexPath = chosen / kCheckpointIndexFile;
  std::string bytes;
  if (Status s = readWholeFile(indexPath.string(), "checkpoint index", &bytes);
      !s)
    return s;
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max()) ||
      !checkpoint->ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return Status::error("checkpoint index '" + indexPath.string() +
                         "' is corrupt or truncated");
  if (checkpoint->format_version() != kCheckpointFormatVersion)
    return Status::error("checkpoint '" + chosen.string() + "' has format " +
                         "version " +
                         std::to_string(checkpoint->format_version()) +
                         "; this cleave reads version " +
                         std::to_string(kCheckpointFormatVersion));
  if (checkpoint->mesh_size() != 1 || checkpoint->mesh(0) < 1)
    return Status::error("checkpoint index '" + indexPath.string() +
                         "' has no mesh");
  if (checkpoint->step() < 0)
    return Status::error("checkpoint index '" + indexPath.string() +
                         "' has step " + std::to_string(checkpoint->step()) +
                         ", which is negative");
  if (Status s = checkStoredNames(
          checkpoint->tensors(), checkpoint->files(), checkpoint->model_file(),
          "checkpoint index '" + indexPath.string() + "'");
      !s)
    return s;
  *dir = chosen.string();
  return Status::ok();
}

} // namespace cleave::rt

//===- session_tensors.cpp - A run's model tensors, whole ----------------===//
//
// Reading, writing, gathering and dumping the model tensors a run holds in
// chunks over its ranks (Model.state_dict, load_state_dict, --dump).
//
//===----------------------------------------------------------------------===//

#include "train_session.h"

#include "cleave/runtime/npy.h"

#include <filesystem>

namespace cleave::rt {

namespace fs = std::filesystem;

/// The full tensor from every rank's chunk (collective).
Status gatherAlong(Communicator &comm, const HostTensor &local, Split split,
                   int64_t size, HostTensor *full) {
  std::vector<int64_t> axes{0};
  int64_t parts = comm.groupSize(axes);
  std::vector<uint8_t> all(local.bytes.size() * parts);
  if (Status s = comm.allGather(local.bytes.data(), all.data(),
                                local.bytes.size(), axes);
      !s)
    return s;
  std::vector<int64_t> shape = local.shape;
  shape[split.dim] = size;
  *full = HostTensor::zeros(local.dtype, shape);
  HostTensor part = HostTensor::zeros(local.dtype, local.shape);
  for (int64_t k = 0; k < parts; ++k) {
    std::copy(all.begin() + k * local.bytes.size(),
              all.begin() + (k + 1) * local.bytes.size(), part.bytes.begin());
    putRanges(full, split.dim, rankRanges(size, split, k, parts),
              fromLocal(part, split, size, k, parts));
  }
  return Status::ok();
}

/// The whole of a tensor whose per-rank value is \p t (collective).
void TrainSession::takeDpChunk(const std::string &key,
                               HostTensor *value) const {
  auto it = dpLayoutOf.find(key);
  if (it != dpLayoutOf.end())
    *value = chunkOf(*value, it->second, dpRank, mesh.dp);
}

Status TrainSession::gatherDp(const HostTensor &value, Split split,
                              HostTensor *out) {
  return gatherAlong(*dpComm, value, split, value.shape[split.dim] * mesh.dp,
                     out);
}

Status TrainSession::gatherFull(const HostTensor &t, const std::string &key,
                                HostTensor *full) {
  if (auto it = dpLayoutOf.find(key); it != dpLayoutOf.end()) {
    HostTensor tpLocal;
    if (Status s = gatherDp(t, it->second, &tpLocal); !s)
      return s;
    return gatherTp(tpLocal, key, full);
  }
  return gatherTp(t, key, full);
}

Status TrainSession::gatherTp(const HostTensor &t, const std::string &key,
                              HostTensor *full) {
  auto it = layoutOf.find(key);
  if (it == layoutOf.end()) {
    *full = t;
    return Status::ok();
  }
  int64_t dim = it->second.dim;
  auto entry = bundleEntry.find(key);
  int64_t size = entry != bundleEntry.end() ? entry->second->type().shape(dim)
                                            : t.shape[dim] * tp;
  return gatherAlong(*tpComm, t, it->second, size, full);
}

/// One of the model's own tensors (a parameter cut into segments whole), or
/// its gradient (absent when it is not trained), gathered whole on every
/// rank: every rank takes part.
Status TrainSession::gatherTensor(const ModelTensor &t, bool grads,
                                  HostTensor *full, bool *present) {
  *present = false;
  std::vector<HostTensor> parts(t.entries.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    std::string key = stateKeyOf(*t.entries[i]);
    const HostTensor *value = &state[key];
    HostTensor tpLocal; // a gradient gathered over dp
    if (grads) {
      auto it = lastGrads.find(t.entries[i]->name());
      if (it == lastGrads.end())
        return Status::ok(); // not trained
      value = &it->second;
      if (auto g = gradientDpLayout.find(t.entries[i]->name());
          g != gradientDpLayout.end()) {
        if (Status s = gatherDp(*value, g->second, &tpLocal); !s)
          return s;
        value = &tpLocal;
      }
      if (auto g = gradientLayout.find(t.entries[i]->name());
          g != gradientLayout.end()) {
        int64_t size = t.entries[i]->type().shape(g->second.dim);
        if (Status s = gatherAlong(*tpComm, *value, g->second, size, &parts[i]);
            !s)
          return s;
        continue;
      }
    }
    if (Status s = grads ? gatherTp(*value, key, &parts[i])
                         : gatherFull(*value, key, &parts[i]);
        !s)
      return s;
  }
  *full = joinSegments(t, std::move(parts));
  *present = true;
  return Status::ok();
}

/// Writes gatherTensor's tensor (rank 0).
Status TrainSession::dumpTensor(const ModelTensor &t, bool grads) {
  HostTensor full;
  bool present = false;
  if (Status s = gatherTensor(t, grads, &full, &present); !s)
    return s;
  if (!leader || !present)
    return Status::ok();
  std::string file = sanitizeFileName(t.name) + (grads ? ".grad.npy" : ".npy");
  widenToF32(&full); // a frozen weight held in bf16: numpy has no bfloat16
  return writeNpy((fs::path(options.dumpDir) / file).string(), full);
}

Status TrainSession::findTensor(const std::string &name,
                                ModelTensor *out) const {
  std::vector<ModelTensor> tensors;
  if (Status s = modelTensors(plan.tensors(), &tensors); !s)
    return s;
  for (ModelTensor &t : tensors)
    if (t.name == name) {
      *out = std::move(t);
      return Status::ok();
    }
  return Status::error(bundle() + " has no tensor '" + name + "'");
}

Status TrainSession::readTensor(const std::string &name, HostTensor *value) {
  ModelTensor t;
  if (Status s = findTensor(name, &t); !s)
    return s;
  if (Status s = fetchState(); !s)
    return s;
  bool present = false;
  return gatherTensor(t, false, value, &present);
}

/// Each entry (a segment of the tensor, or all of it) gets this rank's
/// chunk of its part of \p value, padded as the program keeps it.
Status TrainSession::checkTensorWrite(const std::string &name,
                                      const HostTensor &value,
                                      ModelTensor *t) const {
  if (Status s = findTensor(name, t); !s)
    return s;
  if (value.shape != t->shape ||
      value.dtype != fromPlan(t->entries.front()->type().dtype()))
    return Status::error(
        "'" + name + "' is " + describeTensor(value.dtype, value.shape) +
        "; the model has " +
        describeTensor(fromPlan(t->entries.front()->type().dtype()), t->shape));
  for (const pb::TensorEntry *entry : t->entries)
    if (!stateInput.count(stateKeyOf(*entry)))
      return Status::error(bundle() + ": '" + name + "' is not in the step");
  return Status::ok();
}

Status TrainSession::writeTensor(const std::string &name,
                                 const HostTensor &value) {
  ModelTensor t;
  if (Status s = checkTensorWrite(name, value, &t); !s)
    return s;
  int64_t offset = 0;
  for (const pb::TensorEntry *entry : t.entries) {
    HostTensor part = value;
    if (t.entries.size() > 1) {
      int64_t extent = entry->type().shape(t.dim);
      part = takeRanges(value, t.dim, {{offset, offset + extent}});
      offset += extent;
    }
    std::string key = stateKeyOf(*entry);
    auto input = stateInput.find(key);
    if (input == stateInput.end())
      return Status::error(bundle() + ": '" + name + "' is not in the step");
    HostTensor chunk = chunkOf(part, splitOf(*entry), rank, tp);
    padChunk(*entry, &chunk);
    takeDpChunk(key, &chunk);
    if (Status s = executor->setInput(input->second, std::move(chunk)); !s)
      return Status::error("'" + name + "': " + s.message());
  }
  return Status::ok();
}

Status TrainSession::dump() {
  if (Status s = fetchState(); !s)
    return s;
  if (options.steps > 0)
    for (int o = 0; o < program->output_bindings_size(); ++o)
      if (program->output_bindings(o).role() == pb::Binding::GRADIENT) {
        HostTensor &grad = lastGrads[program->output_bindings(o).name()];
        if (Status s = executor->getOutput(o, &grad); !s)
          return s;
        widenToF32(&grad); // mixed precision returns a product's bf16
      }
  std::error_code ec;
  if (leader)
    fs::create_directories(options.dumpDir, ec);
  if (ec)
    return Status::error("cannot create '" + options.dumpDir +
                         "': " + ec.message());
  HostTensor lossTensor =
      HostTensor::zeros(DType::F32, {static_cast<int64_t>(losses.size())});
  std::copy(losses.begin(), losses.end(), lossTensor.data<float>());
  if (leader)
    if (Status s = writeNpy((fs::path(options.dumpDir) / "loss.npy").string(),
                            lossTensor);
        !s)
      return s;
  std::vector<ModelTensor> tensors;
  if (Status s = modelTensors(plan.tensors(), &tensors); !s)
    return s;
  for (const ModelTensor &t : tensors)
    if (Status s = dumpTensor(t, false); !s)
      return s;
  if (!lastGrads.empty())
    for (const ModelTensor &t : tensors)
      if (t.entries.front()->role() == pb::Binding::PARAMETER)
        if (Status s = dumpTensor(t, true); !s)
          return s;
  return Status::ok();
}

} // namespace cleave::rt

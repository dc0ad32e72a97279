//===- store.cpp - Sharded tensor stores: bundles and checkpoints ---------===//

#include "cleave/runtime/store.h"
#include "cleave/runtime/files.h"

#include "plan/plan.pb.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <unistd.h>

namespace cleave::rt {

namespace fs = std::filesystem;
namespace pb = ::cleave::plan;

std::vector<std::pair<int64_t, int64_t>>
rankRanges(int64_t size, Split split, int64_t rank, int64_t parts) {
  if (!split.isSplit())
    return {{0, size}};
  int64_t block = size / split.blocks, chunk = split.chunk(block, parts);
  rank = split.chunkIndex(rank, parts);
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (int64_t b = 0; b < split.blocks; ++b)
    ranges.push_back({b * block + std::min(block, rank * chunk),
                      b * block + std::min(block, (rank + 1) * chunk)});
  return ranges;
}

int64_t localExtent(int64_t size, Split split, int64_t parts) {
  if (!split.isSplit())
    return size;
  return split.blocks * split.chunk(size / split.blocks, parts);
}

namespace {

/// Rows of \p shape before \p dim, and bytes per index of \p dim.
std::pair<int64_t, size_t> geometry(const std::vector<int64_t> &shape,
                                    int64_t dim, DType dtype) {
  int64_t outer = 1;
  for (int64_t d = 0; d < dim; ++d)
    outer *= shape[d];
  size_t inner = dtypeSize(dtype);
  for (size_t d = dim + 1; d < shape.size(); ++d)
    inner *= shape[d];
  return {outer, inner};
}

} // namespace

HostTensor takeRanges(const HostTensor &global, int64_t dim,
                      const std::vector<std::pair<int64_t, int64_t>> &ranges) {
  if (global.shape.empty())
    return global;
  std::vector<int64_t> shape = global.shape;
  shape[dim] = 0;
  for (auto [lo, hi] : ranges)
    shape[dim] += hi - lo;
  HostTensor part = HostTensor::zeros(global.dtype, shape);
  auto [outer, inner] = geometry(global.shape, dim, global.dtype);
  size_t srcRow = global.shape[dim] * inner, dstRow = shape[dim] * inner;
  for (int64_t o = 0; o < outer; ++o) {
    size_t at = 0;
    for (auto [lo, hi] : ranges) {
      // An empty range (a rank with only padding) of a maybe empty tensor:
      // memcpy may not be handed its null pointer, even for 0 bytes.
      if (hi > lo)
        std::memcpy(part.bytes.data() + o * dstRow + at,
                    global.bytes.data() + o * srcRow + lo * inner,
                    (hi - lo) * inner);
      at += (hi - lo) * inner;
    }
  }
  return part;
}

void putRanges(HostTensor *global, int64_t dim,
               const std::vector<std::pair<int64_t, int64_t>> &ranges,
               const HostTensor &part) {
  if (global->shape.empty()) {
    global->bytes = part.bytes;
    return;
  }
  auto [outer, inner] = geometry(global->shape, dim, global->dtype);
  size_t dstRow = global->shape[dim] * inner, srcRow = part.shape[dim] * inner;
  for (int64_t o = 0; o < outer; ++o) {
    size_t at = 0;
    for (auto [lo, hi] : ranges) {
      if (hi > lo)
        std::memcpy(global->bytes.data() + o * dstRow + lo * inner,
                    part.bytes.data() + o * srcRow + at, (hi - lo) * inner);
      at += (hi - lo) * inner;
    }
  }
}

namespace {

/// Copies index ranges of dim \p dim between tensors that agree in the other
/// dims: range b from offset fromAt(b) of \p from to offset toAt(b) of \p to.
template <typename F, typename G>
void copyBlocks(const HostTensor &from, HostTensor *to, int64_t dim,
                const std::vector<std::pair<int64_t, int64_t>> &ranges,
                F fromAt, G toAt) {
  auto [outer, inner] = geometry(from.shape, dim, from.dtype);
  size_t fromRow = from.shape[dim] * inner, toRow = to->shape[dim] * inner;
  for (int64_t o = 0; o < outer; ++o)
    for (size_t b = 0; b < ranges.size(); ++b)
      if (ranges[b].second > ranges[b].first)
        std::memcpy(to->bytes.data() + o * toRow + toAt(b) * inner,
                    from.bytes.data() + o * fromRow + fromAt(b) * inner,
                    (ranges[b].second - ranges[b].first) * inner);
}

/// Where each range starts in a file's chunk (the ranges back to back).
std::vector<int64_t>
fileOffsets(const std::vector<std::pair<int64_t, int64_t>> &ranges) {
  std::vector<int64_t> at;
  int64_t sum = 0;
  for (auto [lo, hi] : ranges)
    at.push_back(sum), sum += hi - lo;
  return at;
}

} // namespace

HostTensor toLocal(const HostTensor &chunk, Split split, int64_t size,
                   int64_t rank, int64_t parts) {
  int64_t extent = localExtent(size, split, parts);
  if (!split.isSplit() || chunk.shape.empty() ||
      chunk.shape[split.dim] == extent)
    return chunk;
  std::vector<int64_t> shape = chunk.shape;
  shape[split.dim] = extent;
  HostTensor local = HostTensor::zeros(chunk.dtype, shape);
  auto ranges = rankRanges(size, split, rank, parts);
  std::vector<int64_t> at = fileOffsets(ranges);
  int64_t per = extent / split.blocks;
  copyBlocks(
      chunk, &local, split.dim, ranges, [&](size_t b) { return at[b]; },
      [&](size_t b) { return static_cast<int64_t>(b) * per; });
  return local;
}

HostTensor fromLocal(const HostTensor &local, Split split, int64_t size,
                     int64_t rank, int64_t parts) {
  auto ranges = rankRanges(size, split, rank, parts);
  int64_t real = 0;
  for (auto [lo, hi] : ranges)
    real += hi - lo;
  if (!split.isSplit() || local.shape.empty() || local.shape[split.dim] == real)
    return local;
  std::vector<int64_t> shape = local.shape;
  shape[split.dim] = real;
  HostTensor chunk = HostTensor::zeros(local.dtype, shape);
  std::vector<int64_t> at = fileOffsets(ranges);
  int64_t per = local.shape[split.dim] / split.blocks;
  copyBlocks(
      local, &chunk, split.dim, ranges,
      [&](size_t b) { return static_cast<int64_t>(b) * per; },
      [&](size_t b) { return at[b]; });
  return chunk;
}

HostTensor chunkOf(const HostTensor &global, Split split, int64_t rank,
                   int64_t parts) {
  if (!split.isSplit())
    return global;
  return takeRanges(global, split.dim,
                    rankRanges(global.shape[split.dim], split, rank, parts));
}

namespace {

template <typename Message> Split readSplit(const Message &m) {
  Split s;
  if (m.has_split_dim()) {
    s.dim = m.split_dim();
    s.blocks = m.has_split_blocks() ? m.split_blocks() : 1;
    s.granule = m.has_split_granule() ? m.split_granule() : 1;
    s.parts = m.has_split_parts() ? m.split_parts() : 0;
    s.copies = m.has_split_copies() ? m.split_copies() : 1;
  }
  return s;
}

} // namespace

Split splitOf(const pb::TensorEntry &entry) { return readSplit(entry); }
Split splitOf(const pb::Binding &binding) { return readSplit(binding); }

void setSplit(pb::TensorEntry *entry, Split split) {
  entry->clear_split_dim();
  entry->clear_split_blocks();
  entry->clear_split_granule();
  entry->clear_split_parts();
  entry->clear_split_copies();
  if (!split.isSplit())
    return;
  entry->set_split_dim(split.dim);
  if (split.blocks > 1)
    entry->set_split_blocks(split.blocks);
  if (split.granule > 1)
    entry->set_split_granule(split.granule);
  if (split.parts > 0)
    entry->set_split_parts(split.parts);
  if (split.copies > 1)
    entry->set_split_copies(split.copies);
}

Status
modelTensors(const google::protobuf::RepeatedPtrField<pb::TensorEntry> &entries,
             std::vector<ModelTensor> *out) {
  out->clear();
  std::map<std::string, size_t> index;
  for (const pb::TensorEntry &e : entries) {
    if (e.role() == pb::Binding::OPTIMIZER_STATE)
      continue;
    const std::string &name =
        e.segment_of().empty() ? e.name() : e.segment_of();
    if (!e.segment_of().empty() &&
        (e.segment_dim() < 0 || e.segment_dim() >= e.type().shape_size()))
      return Status::error("'" + e.name() + "' is a segment of '" + name +
                           "' along a dimension it does not have");
    auto [it, fresh] = index.try_emplace(name, out->size());
    if (fresh) {
      ModelTensor t;
      t.name = name;
      t.shape.assign(e.type().shape().begin(), e.type().shape().end());
      t.dim = e.segment_of().empty() ? -1 : e.segment_dim();
      out->push_back(std::move(t));
    }
    ModelTensor &t = (*out)[it->second];
    bool segment = !e.segment_of().empty();
    if (!fresh && (t.dim < 0 || !segment || e.segment_dim() != t.dim))
      return Status::error("the store holds '" + name + "' twice");
    t.entries.push_back(&e);
  }
  for (ModelTensor &t : *out) {
    if (t.dim < 0)
      continue;
    std::sort(t.entries.begin(), t.entries.end(),
              [](const pb::TensorEntry *a, const pb::TensorEntry *b) {
                return a->segment_offset() < b->segment_offset();
              });
    int64_t next = 0;
    for (const pb::TensorEntry *e : t.entries) {
      bool fits = e->type().shape_size() == int64_t(t.shape.size());
      for (size_t d = 0; fits && d < t.shape.size(); ++d)
        fits = int64_t(d) == t.dim || e->type().shape(d) == t.shape[d];
      if (!fits || e->segment_offset() != next)
        return Status::error("the segments of '" + t.name +
                             "' do not tile it ('" + e->name() + "')");
      next += e->type().shape(t.dim);
    }
    t.shape[t.dim] = next;
  }
  return Status::ok();
}

HostTensor joinSegments(const ModelTensor &t, std::vector<HostTensor> parts) {
  if (t.dim < 0)
    return std::move(parts.front());
  HostTensor whole = HostTensor::zeros(parts.front().dtype, t.shape);
  for (size_t i = 0; i < parts.size(); ++i) {
    int64_t start = t.entries[i]->segment_offset();
    putRanges(&whole, t.dim, {{start, start + parts[i].shape[t.dim]}},
              parts[i]);
  }
  return whole;
}

std::string rankFileName(const std::string &dir, int64_t rank) {
  std::string name = "rank-" + std::to_string(rank) + ".safetensors";
  return dir.empty() ? name : dir + "/" + name;
}

DType fromPlan(int planDType) {
  switch (planDType) {
  case pb::I64:
    return DType::I64;
  case pb::I32:
    return DType::I32;
  case pb::BOOL:
    return DType::Bool;
  case pb::F64:
    return DType::F64;
  case pb::F16:
    return DType::F16;
  case pb::BF16:
    return DType::BF16;
  case pb::I8:
    return DType::I8;
  case pb::I16:
    return DType::I16;
  case pb::U8:
    return DType::U8;
  case pb::U16:
    return DType::U16;
  case pb::U32:
    return DType::U32;
  default:
    return DType::F32;
  }
}

namespace {

std::vector<int64_t> globalShape(const pb::TensorEntry &e) {
  return {e.type().shape().begin(), e.type().shape().end()};
}

} // namespace

// --- Writing -----------------------------------------------------------------

Status StoreWriter::create(
    const std::string &root, const std::string &subdir, int64_t parts,
    google::protobuf::RepeatedPtrField<pb::TensorEntry> *entries,
    std::unique_ptr<StoreWriter> *result) {
  std::unique_ptr<StoreWriter> w(new StoreWriter());
  w->root_ = root;
  w->parts_ = parts;
  w->entries_ = entries;
  std::error_code ec;
  fs::create_directories(fs::path(root) / subdir, ec);
  if (ec)
    return Status::error("cannot create '" +
                         (fs::path(root) / subdir).string() +
                         "': " + ec.message());
  for (int64_t r = 0; r < parts; ++r) {
    std::string file = rankFileName(subdir, r);
    std::vector<TensorInfo> infos;
    for (pb::TensorEntry &e : *entries) {
      Split split = splitOf(e);
      std::vector<int64_t> shape = globalShape(e);
      if (split.isSplit()) {
        if (split.dim >= static_cast<int64_t>(shape.size()) ||
            shape[split.dim] % split.blocks ||
            (shape[split.dim] / split.blocks) % split.granule)
          return Status::error(
              "tensor '" + e.name() + "' of shape " +
              describeTensor(fromPlan(e.type().dtype()), shape) +
              " cannot be split along dimension " + std::to_string(split.dim) +
              " in " + std::to_string(split.blocks) + " blocks");
        // The file holds the rank's real rows, no padding.
        shape[split.dim] = 0;
        for (auto [lo, hi] :
             rankRanges(e.type().shape(split.dim), split, r, parts))
          shape[split.dim] += hi - lo;
      }
      infos.push_back({e.key(), fromPlan(e.type().dtype()), shape});
      pb::RankSlice *slice = e.add_slices();
      slice->set_rank(static_cast<int32_t>(r));
      slice->set_file(file);
      if (split.isSplit())
        for (auto [lo, hi] :
             rankRanges(e.type().shape(split.dim), split, r, parts)) {
          slice->add_starts(lo);
          slice->add_ends(hi);
        }
    }
    std::unique_ptr<SafetensorsWriter> writer;
    if (Status s = SafetensorsWriter::create(
            (fs::path(root) / file).string(), infos,
            {{"format", "pt"}, {"cleave.rank", std::to_string(r)}}, &writer);
        !s)
      return s;
    w->files_.push_back(file);
    w->writers_.push_back(std::move(writer));
  }
  *result = std::move(w);
  return Status::ok();
}

StoreWriter::~StoreWriter() = default;

Status StoreWriter::add(const HostTensor &global) {
  if (next_ >= static_cast<size_t>(entries_->size()))
    return Status::error("more tensors than the store's table lists");
  const pb::TensorEntry &e = (*entries_)[next_++];
  if (global.dtype != fromPlan(e.type().dtype()) ||
      global.shape != globalShape(e))
    return Status::error(
        "tensor '" + e.name() + "' is " +
        describeTensor(global.dtype, global.shape) + ", not " +
        describeTensor(fromPlan(e.type().dtype()), globalShape(e)));
  Split split = splitOf(e);
  for (int64_t r = 0; r < parts_; ++r) {
    if (!split.isSplit()) {
      if (Status s =
              writers_[r]->write(global.bytes.data(), global.bytes.size());
          !s)
        return s;
      continue;
    }
    HostTensor chunk = chunkOf(global, split, r, parts_);
    if (Status s = writers_[r]->write(chunk.bytes.data(), chunk.bytes.size());
        !s)
      return s;
  }
  return Status::ok();
}

Status
StoreWriter::finish(google::protobuf::RepeatedPtrField<pb::FileDigest> *out) {
  if (next_ != static_cast<size_t>(entries_->size()))
    return Status::error("the store's table lists more tensors than were "
                         "written");
  for (size_t r = 0; r < writers_.size(); ++r) {
    uint64_t size;
    uint32_t crc;
    if (Status s = writers_[r]->finish(&size, &crc); !s)
      return s;
    pb::FileDigest *d = out->Add();
    d->set_path(files_[r]);
    d->set_size(size);
    d->set_crc32(crc);
  }
  return Status::ok();
}

// --- Reading -----------------------------------------------------------------

void quietProtobufLogs() {
  static const bool once = [] {
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)once;
}

Status checkStoredNames(
    const google::protobuf::RepeatedPtrField<pb::TensorEntry> &tensors,
    const google::protobuf::RepeatedPtrField<pb::FileDigest> &files,
    const std::string &modelFile, const std::string &container) {
  if (!modelFile.empty())
    if (Status s = checkStoredName(modelFile, container, "the model copy"); !s)
      return s;
  // The model copy's digest was checked as the model copy (its message
  // names it so); every other digest as a file.
  for (const pb::FileDigest &d : files)
    if (modelFile.empty() || d.path() != modelFile)
      if (Status s = checkStoredName(d.path(), container, "the file"); !s)
        return s;
  for (const pb::TensorEntry &e : tensors)
    for (const pb::RankSlice &slice : e.slices())
      if (Status s = checkStoredName(slice.file(), container, "the file"); !s)
        return s;
  return Status::ok();
}

StoreReader::StoreReader(
    std::string root, const std::string &what,
    const google::protobuf::RepeatedPtrField<pb::FileDigest> &digests)
    : root_(std::move(root)), what_(what) {
  for (const pb::FileDigest &d : digests)
    digests_[d.path()] = {d.size(), d.crc32()};
}

StoreReader::~StoreReader() = default;

Status StoreReader::file(const std::string &path, const SafetensorsFile **out) {
  auto it = open_.find(path);
  if (it == open_.end()) {
    auto digest = digests_.find(path);
    if (digest == digests_.end())
      return Status::error(what_ + " lists no digest for '" + path + "'");
    std::string full;
    if (Status s = resolveStoredName(root_, path, what_, "the file", &full); !s)
      return s;
    std::unique_ptr<SafetensorsFile> f;
    if (Status s = SafetensorsFile::open(full, &f, digest->second.first,
                                         digest->second.second);
        !s)
      return Status::error(what_ + ": " + s.message());
    it = open_.emplace(path, std::move(f)).first;
  }
  *out = it->second.get();
  return Status::ok();
}

Status StoreReader::readSlice(const pb::TensorEntry &entry, int index,
                              HostTensor *out) {
  const pb::RankSlice &slice = entry.slices(index);
  const SafetensorsFile *f;
  if (Status s = file(slice.file(), &f); !s)
    return s;
  const TensorInfo *info = f->find(entry.key());
  if (!info)
    return Status::error(what_ + ": '" + f->path() + "' has no tensor '" +
                         entry.key() + "'");
  // The slice's shape follows from the table; the file must agree.
  std::vector<int64_t> shape = globalShape(entry);
  Split split = splitOf(entry);
  if (split.isSplit()) {
    shape[split.dim] = 0;
    for (int i = 0; i < slice.starts_size(); ++i)
      shape[split.dim] += slice.ends(i) - slice.starts(i);
  }
  if (info->dtype != fromPlan(entry.type().dtype()) || info->shape != shape)
    return Status::error(what_ + ": tensor '" + entry.key() + "' in '" +
                         f->path() + "' is " +
                         describeTensor(info->dtype, info->shape) + ", not " +
                         describeTensor(fromPlan(entry.type().dtype()), shape));
  return f->read(*info, out);
}

Status StoreReader::readGlobal(const pb::TensorEntry &entry, HostTensor *out) {
  if (entry.slices_size() == 0)
    return Status::error(what_ + " holds no data for '" + entry.name() +
                         "' (compiled with --plan-only?)");
  Split split = splitOf(entry);
  // The table is data: its slices must tile the split dimension exactly.
  std::vector<int64_t> shape = globalShape(entry);
  if (split.isSplit()) {
    auto bad = [&] {
      return Status::error(what_ + ": the slices of '" + entry.name() +
                           "' do not tile its dimension " +
                           std::to_string(split.dim) +
                           " (the index is damaged)");
    };
    if (split.dim >= static_cast<int64_t>(shape.size()))
      return bad();
    std::vector<std::pair<int64_t, int64_t>> all;
    for (const pb::RankSlice &slice : entry.slices()) {
      if (slice.starts_size() != slice.ends_size())
        return bad();
      for (int k = 0; k < slice.starts_size(); ++k)
        all.push_back({slice.starts(k), slice.ends(k)});
    }
    std::sort(all.begin(), all.end());
    // tp factored into two axes: the ranks of a group (or each group's
    // rank at one place in it) hold the same chunk, each in its own file.
    if (split.copies > 1 || split.parts > 0)
      all.erase(std::unique(all.begin(), all.end()), all.end());
    int64_t at = 0;
    for (auto [lo, hi] : all) {
      // A rank whose chunk is all padding holds an empty range.
      if (hi == lo && lo >= 0 && lo <= shape[split.dim])
        continue;
      if (lo != at || hi < lo)
        return bad();
      at = hi;
    }
    if (at != shape[split.dim])
      return bad();
  }
  if (!split.isSplit())
    return readSlice(entry, 0, out);
  *out = HostTensor::zeros(fromPlan(entry.type().dtype()), globalShape(entry));
  for (int i = 0; i < entry.slices_size(); ++i) {
    HostTensor part;
    if (Status s = readSlice(entry, i, &part); !s)
      return s;
    const pb::RankSlice &slice = entry.slices(i);
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (int k = 0; k < slice.starts_size(); ++k)
      ranges.push_back({slice.starts(k), slice.ends(k)});
    putRanges(out, split.dim, ranges, part);
  }
  return Status::ok();
}

Status StoreReader::readChunk(const pb::TensorEntry &entry, Split want,
                              int64_t rank, int64_t parts, HostTensor *out) {
  Split have = splitOf(entry);
  bool sameLayout = entry.slices_size() == parts && have == want;
  if (sameLayout)
    // Own bytes only: a replicated tensor has a copy in every rank's file.
    return readSlice(entry, static_cast<int>(rank), out);
  HostTensor global;
  if (Status s = readGlobal(entry, &global); !s)
    return s;
  std::vector<int64_t> shape = global.shape;
  if (want.isSplit() && (want.dim >= static_cast<int64_t>(shape.size()) ||
                         shape[want.dim] % want.blocks ||
                         (shape[want.dim] / want.blocks) % want.granule))
    return Status::error("tensor '" + entry.name() + "' of shape " +
                         describeTensor(global.dtype, shape) +
                         " cannot be split along dimension " +
                         std::to_string(want.dim) + " into " +
                         std::to_string(parts));
  *out = chunkOf(global, want, rank, parts);
  return Status::ok();
}

Status writeFileAtomic(const std::string &path, const std::string &bytes) {
  std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  std::FILE *f = std::fopen(tmp.c_str(), "wb");
  if (!f)
    return Status::error("cannot write '" + tmp + "': " + std::strerror(errno));
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  ok &= std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  ok &= std::fclose(f) == 0;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    return Status::error("cannot write '" + path + "': " + why);
  }
  return Status::ok();
}

} // namespace cleave::rt

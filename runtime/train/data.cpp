//===- data.cpp - What feeds the model's inputs, step by step -------------===//

#include "cleave/runtime/data.h"
#include "cleave/runtime/files.h"
#include "cleave/runtime/npy.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

namespace cleave::rt {

namespace fs = std::filesystem;

namespace {

/// \p path made absolute, so that a run resumed from another directory
/// describes its data as the first run did.
std::string absolute(const std::string &path) {
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  return ec ? path : p.lexically_normal().string();
}

Status checkTensor(const HostTensor &t, const InputSlot &slot,
                   const std::string &file) {
  if (t.dtype != slot.dtype || t.shape != slot.shape)
    return Status::error("input '" + slot.name + "' in '" + file + "' is " +
                         describeTensor(t.dtype, t.shape) +
                         "; the train step needs " +
                         describeTensor(slot.dtype, slot.shape));
  return Status::ok();
}

uint64_t splitMix64(uint64_t &state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

Status readInput(const fs::path &dir, const InputSlot &slot, HostTensor *t) {
  std::string file = (dir / (sanitizeFileName(slot.name) + ".npy")).string();
  std::error_code ec;
  if (!fs::exists(file, ec))
    return Status::error("missing input file '" + file + "' for model input '" +
                         slot.name + "'");
  if (Status s = readNpy(file, t); !s)
    return s;
  conformInput(*t, slot.dtype);
  return Status::ok();
}

/// The rows [first, first + count) of a global batch of \p rows that this
/// rank builds of \p slot.
std::pair<int64_t, int64_t> rowsOf(const DataOptions &o, const InputSlot &slot,
                                   int64_t rows) {
  if (!slot.splitRows || o.rowCount <= 0)
    return {0, rows};
  return {o.rowFirst, o.rowCount};
}

/// Rows [first, first + count) of \p t along dimension 0.
HostTensor takeRows(const HostTensor &t, int64_t first, int64_t count) {
  if (first == 0 && (t.shape.empty() || count == t.shape[0]))
    return t;
  std::vector<int64_t> shape = t.shape;
  shape[0] = count;
  HostTensor out = HostTensor::zeros(t.dtype, shape);
  size_t rowBytes = t.bytes.size() / static_cast<size_t>(t.shape[0]);
  std::memcpy(out.bytes.data(), t.bytes.data() + first * rowBytes,
              count * rowBytes);
  return out;
}

/// Which sample each row of a step's batch is: batches of \p rows run
/// through \p samples in order, or in each epoch's permutation; the last
/// partial batch of an epoch is dropped (every step has the compiled size).
/// How a feed's description says it is shuffled ("" when it is not).
std::string shuffleNote(const DataOptions &options) {
  return options.shuffle
             ? ", shuffled with seed " + std::to_string(options.seed)
             : "";
}

class EpochOrder {
public:
  void init(int64_t samples, int64_t rows, bool shuffle, uint64_t seed) {
    this->samples = samples;
    this->rows = rows;
    this->shuffle = shuffle;
    this->seed = seed;
  }
  int64_t batchesPerEpoch() const { return samples / rows; }
  /// Sample of row \p r of global step \p step.
  int64_t sample(int64_t step, int64_t r) {
    int64_t epoch = step / batchesPerEpoch();
    int64_t first = step % batchesPerEpoch() * rows;
    if (!shuffle)
      return first + r;
    if (epoch != permEpoch) {
      perm = epochPermutation(samples, seed, epoch);
      permEpoch = epoch;
    }
    return perm[first + r];
  }

private:
  int64_t samples = 0, rows = 1, permEpoch = -1;
  bool shuffle = false;
  uint64_t seed = 0;
  std::vector<int64_t> perm;
};

/// NAME.npy per input in one folder (every step), or in step-K folders.
class FolderFeed : public DataFeed {
public:
  FolderFeed(const DataOptions &o, std::vector<InputSlot> inputs)
      : options(o), dir(o.inputsDir), inputs(std::move(inputs)) {
    std::error_code ec;
    perStep = fs::is_directory(dir / "step-0", ec);
    description_ = "inputs from '" + absolute(o.inputsDir) + "'" +
                   (perStep ? " (one folder per step)" : "");
  }

  Status init() {
    if (!inputs.empty() && !inputs[0].shape.empty())
      samples_ = inputs[0].shape[0];
    if (!perStep)
      return load(dir, &fixed);
    return Status::ok();
  }

  Status batch(int64_t step, std::map<std::string, HostTensor> *out) override {
    if (!perStep) {
      *out = fixed; // the fixed batch is reused: a copy
      return Status::ok();
    }
    fs::path d = dir / ("step-" + std::to_string(step));
    std::error_code ec;
    if (!fs::is_directory(d, ec))
      return Status::error("no data for step " + std::to_string(step) + ": '" +
                           d.string() + "' does not exist");
    return load(d, out);
  }

private:
  Status load(const fs::path &d, std::map<std::string, HostTensor> *out) {
    for (const InputSlot &slot : inputs) {
      HostTensor t;
      if (Status s = readInput(d, slot, &t); !s)
        return s;
      if (Status s = checkTensor(
              t, slot, (d / (sanitizeFileName(slot.name) + ".npy")).string());
          !s)
        return s;
      if (slot.shape.empty()) {
        (*out)[slot.name] = std::move(t);
        continue;
      }
      auto [first, count] = rowsOf(options, slot, slot.shape[0]);
      (*out)[slot.name] = takeRows(t, first, count);
    }
    return Status::ok();
  }

  DataOptions options;
  fs::path dir;
  std::vector<InputSlot> inputs;
  bool perStep;
  std::map<std::string, HostTensor> fixed;
};

/// One array per input; batches are runs of rows along dimension 0, in
/// order or shuffled per epoch. The last partial batch of an epoch is
/// dropped (every step has the compiled batch size).
class ArrayFeed : public DataFeed {
public:
  ArrayFeed(const DataOptions &o, std::vector<InputSlot> inputs)
      : options(o), inputs(std::move(inputs)) {}

  Status init() {
    int64_t rows = -1;
    for (const InputSlot &slot : inputs) {
      HostTensor t;
      if (Status s = readInput(options.inputsDir, slot, &t); !s)
        return s;
      std::string file =
          (fs::path(options.inputsDir) / (sanitizeFileName(slot.name) + ".npy"))
              .string();
      std::vector<int64_t> row(
          slot.shape.begin() + (slot.shape.empty() ? 0 : 1), slot.shape.end());
      if (slot.shape.empty() || t.dtype != slot.dtype || t.shape.empty() ||
          slot.shape[0] != inputs[0].shape[0] ||
          std::vector<int64_t>(t.shape.begin() + 1, t.shape.end()) != row)
        return Status::error(
            "--batch-from-arrays: input '" + slot.name + "' in '" + file +
            "' is " + describeTensor(t.dtype, t.shape) +
            "; the train step takes batches " +
            describeTensor(slot.dtype, slot.shape) + " of its rows");
      if (rows >= 0 && t.shape[0] != rows)
        return Status::error("--batch-from-arrays: '" + file + "' has " +
                             std::to_string(t.shape[0]) +
                             " rows, the other "
                             "inputs " +
                             std::to_string(rows));
      rows = t.shape[0];
      arrays.push_back(std::move(t));
    }
    batchRows = inputs.empty() ? 0 : inputs[0].shape[0];
    if (rows < batchRows || batchRows <= 0)
      return Status::error(
          "--batch-from-arrays: the arrays in '" + options.inputsDir +
          "' have " + std::to_string(rows) + " rows, fewer than one batch of " +
          std::to_string(batchRows));
    total = rows;
    samples_ = batchRows;
    order.init(total, batchRows, options.shuffle, options.seed);
    description_ = "arrays from '" + absolute(options.inputsDir) + "' (" +
                   std::to_string(total) + " rows, " +
                   std::to_string(order.batchesPerEpoch()) +
                   " batches an epoch)" + shuffleNote(options);
    return Status::ok();
  }

  Status batch(int64_t step, std::map<std::string, HostTensor> *out) override {
    for (size_t i = 0; i < inputs.size(); ++i) {
      const HostTensor &a = arrays[i];
      auto [first, count] = rowsOf(options, inputs[i], batchRows);
      std::vector<int64_t> shape = inputs[i].shape;
      shape[0] = count;
      HostTensor t = HostTensor::zeros(inputs[i].dtype, shape);
      size_t rowBytes = a.bytes.size() / a.shape[0];
      for (int64_t r = 0; r < count; ++r) {
        int64_t src = order.sample(step, first + r);
        std::memcpy(t.bytes.data() + r * rowBytes,
                    a.bytes.data() + src * rowBytes, rowBytes);
      }
      (*out)[inputs[i].name] = std::move(t);
    }
    return Status::ok();
  }

private:
  DataOptions options;
  std::vector<InputSlot> inputs;
  std::vector<HostTensor> arrays;
  int64_t batchRows = 0, total = 0;
  EpochOrder order;
};

/// A byte-level language model's data: windows of T+1 bytes of the text,
/// the first T as ids and the last T as labels (the next byte).
class TextFeed : public DataFeed {
public:
  TextFeed(const DataOptions &o, std::vector<InputSlot> inputs)
      : options(o), inputs(std::move(inputs)) {}

  Status init() {
    auto isIds = [](const InputSlot &s) {
      return (s.dtype == DType::I64 || s.dtype == DType::I32) &&
             s.shape.size() == 2;
    };
    if (inputs.empty() || inputs.size() > 2 || !isIds(inputs[0]) ||
        (inputs.size() == 2 &&
         (!isIds(inputs[1]) || inputs[1].shape != inputs[0].shape)))
      return Status::error(
          "--text feeds a byte-level language model: its inputs must be "
          "token ids [batch, sequence] and, optionally, labels of the same "
          "shape; this model takes " +
          describeInputs());
    if (Status s = readWholeFile(options.textFile, "--text file", &text); !s)
      return s;
    rows = inputs[0].shape[0];
    seq = inputs[0].shape[1];
    windows =
        text.size() > 0 ? (static_cast<int64_t>(text.size()) - 1) / seq : 0;
    if (windows < rows)
      return Status::error(
          "--text file '" + options.textFile + "' has " +
          std::to_string(text.size()) + " bytes; one batch of " +
          std::to_string(rows) + " sequences of " + std::to_string(seq) +
          " tokens needs at least " + std::to_string(rows * seq + 1));
    samples_ = rows;
    order.init(windows, rows, options.shuffle, options.seed);
    tokens_ = rows * seq;
    description_ = "text '" + absolute(options.textFile) + "' (" +
                   std::to_string(text.size()) + " bytes, " +
                   std::to_string(order.batchesPerEpoch()) +
                   " batches an epoch)" + shuffleNote(options);
    return Status::ok();
  }

  Status batch(int64_t step, std::map<std::string, HostTensor> *out) override {
    for (size_t i = 0; i < inputs.size(); ++i) {
      auto [first, count] = rowsOf(options, inputs[i], rows);
      std::vector<int64_t> shape = inputs[i].shape;
      shape[0] = count;
      HostTensor t = HostTensor::zeros(inputs[i].dtype, shape);
      for (int64_t r = 0; r < count; ++r) {
        int64_t w = order.sample(step, first + r);
        const auto *src =
            reinterpret_cast<const uint8_t *>(text.data()) + w * seq + i;
        for (int64_t k = 0; k < seq; ++k) {
          if (t.dtype == DType::I64)
            t.data<int64_t>()[r * seq + k] = src[k];
          else
            t.data<int32_t>()[r * seq + k] = src[k];
        }
      }
      (*out)[inputs[i].name] = std::move(t);
    }
    return Status::ok();
  }

private:
  std::string describeInputs() const {
    std::string s;
    for (const InputSlot &in : inputs)
      s += (s.empty() ? "" : ", ") + in.name + " " +
           describeTensor(in.dtype, in.shape);
    return s.empty() ? "no inputs" : s;
  }

  DataOptions options;
  std::vector<InputSlot> inputs;
  std::string text;
  int64_t rows = 0, seq = 0, windows = 0;
  EpochOrder order;
};

} // namespace

DataFeed::~DataFeed() = default;

std::vector<int64_t> epochPermutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> perm(n);
  for (int64_t i = 0; i < n; ++i)
    perm[i] = i;
  uint64_t state = seed * 0x9e3779b97f4a7c15ull ^
                   (static_cast<uint64_t>(epoch) + 0x632be59bd9b4e019ull);
  for (int64_t i = n - 1; i > 0; --i) {
    int64_t j =
        static_cast<int64_t>(splitMix64(state) % static_cast<uint64_t>(i + 1));
    std::swap(perm[i], perm[j]);
  }
  return perm;
}

/// Batches come with each step (Trainer::step's batch): nothing to read.
class CallerFeed : public DataFeed {
public:
  explicit CallerFeed(const std::vector<InputSlot> &inputs) {
    if (!inputs.empty() && !inputs[0].shape.empty())
      samples_ = inputs[0].shape[0];
    description_ = "batches from the caller";
  }
  Status batch(int64_t step, std::map<std::string, HostTensor> *) override {
    return Status::error("step " + std::to_string(step) +
                         " has no batch: this run is fed by its caller");
  }
};

Status DataFeed::checkBatch(const std::map<std::string, HostTensor> &batch,
                            const std::vector<InputSlot> &inputs) {
  std::string names;
  for (const InputSlot &slot : inputs)
    names += (names.empty() ? "'" : ", '") + slot.name + "'";
  for (const auto &[name, value] : batch) {
    auto it = std::find_if(inputs.begin(), inputs.end(),
                           [&](const InputSlot &s) { return s.name == name; });
    if (it == inputs.end())
      return Status::error("the batch has '" + name +
                           "', which is not an input of the train step (its "
                           "inputs: " +
                           (names.empty() ? "none" : names) + ")");
    if (value.dtype != it->dtype || value.shape != it->shape)
      return Status::error("batch input '" + name + "' is " +
                           describeTensor(value.dtype, value.shape) +
                           "; the train step needs " +
                           describeTensor(it->dtype, it->shape));
  }
  for (const InputSlot &slot : inputs)
    if (!batch.count(slot.name))
      return Status::error("the batch has no '" + slot.name +
                           "' (the train step's inputs: " + names + ")");
  return Status::ok();
}

Status
DataFeed::matchBatch(const std::map<std::string, HostTensor> &batch,
                     const std::vector<const std::vector<InputSlot> *> &shapes,
                     size_t *index, const char *what) {
  if (shapes.empty())
    return Status::error("the bundle has no train step");
  for (size_t k = 0; k < shapes.size(); ++k)
    if (checkBatch(batch, *shapes[k])) {
      *index = k;
      return Status::ok();
    }
  // The shapes that take the batch's inputs by name: where none does, the
  // first's error names what is missing or unknown; else the dtypes or
  // shapes are the trouble, and the error names every shape compiled.
  std::vector<const std::vector<InputSlot> *> named;
  for (const std::vector<InputSlot> *shape : shapes) {
    bool same = shape->size() == batch.size();
    for (const InputSlot &slot : *shape)
      same = same && batch.count(slot.name);
    if (same)
      named.push_back(shape);
  }
  if (named.empty())
    return checkBatch(batch, *shapes.front());
  const char *remedy = "; compile it for this shape too (example_inputs as "
                       "a list of example batches, or cleave compile "
                       "--shape), or pad or drop the batch";
  if (named.size() == 1)
    return Status::error(checkBatch(batch, *named.front()).message() + remedy);
  std::string message, compiled;
  for (const std::vector<InputSlot> *shape : named) {
    std::string one;
    for (const InputSlot &slot : *shape) {
      one += (one.empty() ? "" : ", ") + slot.name + " " +
             describeTensor(slot.dtype, slot.shape);
      const HostTensor &given = batch.at(slot.name);
      if (message.empty() &&
          (given.dtype != slot.dtype || given.shape != slot.shape))
        message = "batch input '" + slot.name + "' is " +
                  describeTensor(given.dtype, given.shape);
    }
    compiled += (compiled.empty() ? "" : "; ") + ("(" + one + ")");
  }
  return Status::error(message + "; the " + what + " is compiled for " +
                       std::to_string(named.size()) +
                       " batch shapes: " + compiled + remedy);
}

Status DataFeed::create(const DataOptions &options,
                        const std::vector<InputSlot> &inputs,
                        std::unique_ptr<DataFeed> *result) {
  if (options.fedByCaller) {
    *result = std::make_unique<CallerFeed>(inputs);
    return Status::ok();
  }
  if (!options.textFile.empty()) {
    if (!options.inputsDir.empty() || options.batchFromArrays)
      return Status::error("give either --text or --inputs, not both");
    auto feed = std::make_unique<TextFeed>(options, inputs);
    if (Status s = feed->init(); !s)
      return s;
    *result = std::move(feed);
    return Status::ok();
  }
  if (options.inputsDir.empty()) {
    if (!inputs.empty())
      return Status::error("the model has input '" + inputs[0].name +
                           "'; give --inputs DIR with " +
                           sanitizeFileName(inputs[0].name) +
                           ".npy (or --text FILE for a byte-level language "
                           "model)");
    auto feed = std::make_unique<FolderFeed>(options, inputs);
    *result = std::move(feed);
    return Status::ok();
  }
  if (options.batchFromArrays) {
    auto feed = std::make_unique<ArrayFeed>(options, inputs);
    if (Status s = feed->init(); !s)
      return s;
    *result = std::move(feed);
    return Status::ok();
  }
  if (options.shuffle)
    return Status::error("--shuffle needs --batch-from-arrays or --text "
                         "(folders of batches are fed as they are)");
  auto feed = std::make_unique<FolderFeed>(options, inputs);
  if (Status s = feed->init(); !s)
    return s;
  *result = std::move(feed);
  return Status::ok();
}

} // namespace cleave::rt

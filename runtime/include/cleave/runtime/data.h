//===- data.h - What feeds the model's inputs, step by step -----*- C++ -*-===//
//
// A feed gives the batch of global step s as a pure function of s (and the
// seed), so a resumed run continues the very sequence an uninterrupted run
// would have seen, shuffling included.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_DATA_H
#define CLEAVE_RUNTIME_DATA_H

#include "cleave/runtime/executor.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace cleave::rt {

/// A model input the feed fills.
struct InputSlot {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape; ///< the global batch's
  /// Data parallelism: split along dimension 0 over the dp ranks; a feed
  /// builds only this rank's rows (DataOptions::rowFirst, rowCount).
  bool splitRows = false;
};

struct DataOptions {
  /// NAME.npy per input (the same batch every step), or folders step-0,
  /// step-1, ... of them, or (batchFromArrays) one array per input whose
  /// dimension 0 is cut into batches.
  std::string inputsDir;
  bool batchFromArrays = false;
  /// Bytes of this file as a byte-level language model's token ids (and
  /// next-byte labels).
  std::string textFile;
  /// No feed: the caller hands every step its batch (Trainer::step with a
  /// batch; the Python package).
  bool fedByCaller = false;
  /// A new order of the samples every epoch (arrays, text).
  bool shuffle = false;
  uint64_t seed = 0;
  /// Data parallelism: the rows of every global batch this rank builds,
  /// for the inputs marked splitRows (rowCount 0: all of them).
  int64_t rowFirst = 0, rowCount = 0;
};

class DataFeed {
public:
  /// Checks the data against \p inputs (names, dtypes, shapes) up front.
  static Status create(const DataOptions &options,
                       const std::vector<InputSlot> &inputs,
                       std::unique_ptr<DataFeed> *result);
  virtual ~DataFeed();
  /// The batch of global step \p step (0-based).
  virtual Status batch(int64_t step,
                       std::map<std::string, HostTensor> *out) = 0;
  /// Checks a batch handed in by the caller against the model's inputs:
  /// every input present, none unknown, dtypes and shapes as the step takes
  /// them.
  static Status checkBatch(const std::map<std::string, HostTensor> &batch,
                           const std::vector<InputSlot> &inputs);
  /// The first of \p shapes (each one batch shape's inputs) that \p batch
  /// fits, in \p index; otherwise checkBatch's error against the first,
  /// where the batch's dtypes or shapes are the trouble naming every shape
  /// compiled and how to add one.
  static Status
  matchBatch(const std::map<std::string, HostTensor> &batch,
             const std::vector<const std::vector<InputSlot> *> &shapes,
             size_t *index, const char *what = "train step");
  /// Samples (dimension 0 of the first input) and tokens (text) per step.
  int64_t samplesPerStep() const { return samples_; }
  int64_t tokensPerStep() const { return tokens_; }
  /// One line for logs and checkpoints: "text FILE (N bytes), shuffled".
  const std::string &description() const { return description_; }

protected:
  int64_t samples_ = 0, tokens_ = 0;
  std::string description_;
};

/// A permutation of [0, n) drawn from (\p seed, \p epoch): Fisher-Yates on
/// SplitMix64, the same on every platform.
std::vector<int64_t> epochPermutation(int64_t n, uint64_t seed, int64_t epoch);

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_DATA_H

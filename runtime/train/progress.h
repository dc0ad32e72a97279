//===- progress.h - What a run shows while it trains ------------*- C++ -*-===//
//
// The progress line of `cleave run` (rank 0) and its --metrics JSON lines.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_TRAIN_PROGRESS_H
#define CLEAVE_RUNTIME_TRAIN_PROGRESS_H

#include "cleave/runtime/data.h"
#include "cleave/runtime/trainer.h"

#include <chrono>
#include <cstdint>
#include <fstream>
#include <map>
#include <string>

namespace cleave::rt {

/// Progress for the user (rank 0): one line rewritten in place on a
/// terminal, else a line every N steps; and the JSON lines of --metrics.
class Progress {
public:
  Progress(const TrainerOptions &o, int64_t first, int64_t last,
           const DataFeed &feed);
  Status openMetrics(bool append);
  /// Step \p step's line (0-based) and metrics: its loss, time, and what
  /// it reported (the rate only where \p logLr).
  void step(int64_t step, float loss, double seconds,
            const std::map<std::string, double> &reported, bool logLr);
  /// A line of its own (a checkpoint written) without breaking the live
  /// line.
  void note(const std::string &text);

private:
  std::string throughput(double seconds) const;

  const TrainerOptions &options;
  int64_t first, last, tokens, samples, logEvery;
  std::chrono::steady_clock::time_point begin, lastDraw;
  std::ofstream metrics;
};

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_TRAIN_PROGRESS_H

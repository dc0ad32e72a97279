//===- progress.cpp - What a run shows while it trains --------------------===//

#include "progress.h"

#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <sstream>

namespace cleave::rt {

namespace {

/// "1:02:03" or "2:03".
std::string clock(double seconds) {
  long s = static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60,
                  s % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

} // namespace

Progress::Progress(const TrainerOptions &o, int64_t first, int64_t last,
                   const DataFeed &feed)
    : options(o), first(first), last(last), tokens(feed.tokensPerStep()),
      samples(feed.samplesPerStep()), begin(std::chrono::steady_clock::now()) {
  logEvery = o.logEvery > 0 ? o.logEvery : (o.steps <= 20 ? 1 : o.steps / 20);
}

Status Progress::openMetrics(bool append) {
  if (options.metricsFile.empty())
    return Status::ok();
  std::error_code ec;
  if (std::filesystem::is_directory(options.metricsFile, ec))
    return Status::error("cannot write --metrics file '" + options.metricsFile +
                         "': it is a directory");
  metrics.open(options.metricsFile, append ? std::ios::app : std::ios::trunc);
  if (!metrics)
    return Status::error("cannot write --metrics file '" + options.metricsFile +
                         "'");
  return Status::ok();
}

void Progress::step(int64_t step, float loss, double seconds,
                    const std::map<std::string, double> &reported, bool logLr) {
  int64_t done = step + 1 - first, total = last - first;
  double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - begin)
          .count();
  double perStep = elapsed / done;
  std::string rate = throughput(seconds);
  if (metrics) {
    metrics << "{\"step\": " << step + 1
            << ", \"loss\": " << std::setprecision(9) << loss
            << ", \"seconds\": " << std::setprecision(6) << seconds;
    for (const auto &[name, value] : reported)
      metrics << ", \"" << name << "\": " << std::setprecision(9) << value;
    if (tokens)
      metrics << ", \"tokens_per_second\": " << std::setprecision(6)
              << tokens / seconds;
    else if (samples)
      metrics << ", \"samples_per_second\": " << std::setprecision(6)
              << samples / seconds;
    metrics << "}" << std::endl;
  }
  if (!options.log)
    return;
  std::ostringstream line;
  line << "step " << std::setw(5) << step + 1 << "/" << last << "  loss "
       << std::fixed << std::setprecision(6) << loss << "  "
       << std::setprecision(1) << seconds * 1e3 << " ms" << rate;
  // Trainer's log keys; the rate only where a schedule moves it, the
  // guard's flag only on a refused step.
  for (const auto &[name, value] : reported)
    if ((name != "lr" || logLr) && (name != "nonfinite" || value != 0))
      line << "  " << name << " " << std::setprecision(3) << std::scientific
           << value << std::fixed;
  if (options.liveProgress) {
    auto now = std::chrono::steady_clock::now();
    bool final = step + 1 == last;
    if (!final && done > 1 && now - lastDraw < std::chrono::milliseconds(100))
      return;
    lastDraw = now;
    line << "  ETA " << clock(perStep * (total - done));
    *options.log << "\r" << line.str() << "\x1b[K" << (final ? "\n" : "")
                 << std::flush;
    return;
  }
  if (done % logEvery == 0 || done == 1 || step + 1 == last)
    *options.log << line.str() << std::endl;
}

void Progress::note(const std::string &text) {
  if (!options.log)
    return;
  if (options.liveProgress)
    *options.log << "\r\x1b[K";
  *options.log << text << std::endl;
}

std::string Progress::throughput(double seconds) const {
  std::ostringstream os;
  if (tokens)
    os << "  " << std::fixed << std::setprecision(0) << tokens / seconds
       << " tok/s";
  else if (samples)
    os << "  " << std::fixed << std::setprecision(0) << samples / seconds
       << " samples/s";
  return os.str();
}

} // namespace cleave::rt

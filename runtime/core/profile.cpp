//===--- profile.cpp - Step profiles and Chrome traces --------------------===//

#include "cleave/runtime/profile.h"

#include "cleave/runtime/comm.h"
#include "core/kernel_info.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

namespace cleave::rt {

namespace {

/// Every axis of \p comm's mesh: collectives over the whole mesh.
std::vector<int64_t> everyAxis(const Communicator &comm) {
  std::vector<int64_t> axes(comm.meshShape().size());
  for (size_t i = 0; i < axes.size(); ++i)
    axes[i] = static_cast<int64_t>(i);
  return axes;
}

double bytesOf(const std::optional<TensorType> &t) {
  return t ? static_cast<double>(t->numElements()) * dtypeSize(t->dtype) : 0;
}

double elementsOf(const std::optional<TensorType> &t) {
  return t ? static_cast<double>(t->numElements()) : 0;
}

/// Multiply-adds per output element of a convolution-like kernel whose
/// filter (or filter gradient) is \p w: [out, in / groups, kh, kw].
double macsPerOutput(const TensorType &w) {
  if (w.shape.size() != 4)
    return 0;
  return static_cast<double>(w.shape[1]) * w.shape[2] * w.shape[3];
}

double matmulFlops(const KernelInfo &info) {
  const auto &p = info.params<schema::Kernel::k_matmul>();
  const TensorType &a = info.operand(0);
  if (a.shape.size() < 2)
    return 0;
  int64_t k = a.shape[a.shape.size() - (p.transpose_a ? 2 : 1)];
  return 2.0 * elementsOf(info.results[0]) * static_cast<double>(k);
}

/// Multiply-adds of attention's score and value products (forward); the
/// backward recomputes the scores and forms four more products.
double attentionFlops(const KernelInfo &info, bool backward) {
  const TensorType &q = info.operand(0), &k = info.operand(1),
                   &v = info.operand(2);
  if (q.shape.size() != 4 || k.shape.size() != 4 || v.shape.size() != 4)
    return 0;
  double rows = static_cast<double>(q.shape[0]) * q.shape[1] * q.shape[2];
  double pairs = rows * static_cast<double>(k.shape[2]);
  double forward = 2 * pairs * (q.shape[3] + v.shape[3]);
  return backward ? 2.5 * forward : forward;
}

} // namespace

KernelCost estimateKernelCost(const KernelInfo &info, int fusedOps) {
  KernelCost cost;
  double largest = 0;
  for (const auto &t : info.operands) {
    cost.bytes += bytesOf(t);
    largest = std::max(largest, elementsOf(t));
  }
  for (const auto &t : info.results) {
    cost.bytes += bytesOf(t);
    largest = std::max(largest, elementsOf(t));
  }
  if (!info.kernelId) {
    cost.flops = largest * fusedOps;
    return cost;
  }
  using schema::Kernel;
  switch (*info.kernelId) {
  case Kernel::k_matmul:
    cost.flops = matmulFlops(info);
    break;
  case Kernel::k_conv2d: // y, from w
    cost.flops =
        2 * elementsOf(info.results[0]) * macsPerOutput(info.operand(1));
    break;
  case Kernel::k_conv2d_backward_input: // from grad_out and w
    cost.flops =
        2 * elementsOf(info.operands[0]) * macsPerOutput(info.operand(1));
    break;
  case Kernel::k_conv2d_backward_filter:
    cost.flops =
        2 * elementsOf(info.operands[1]) * macsPerOutput(info.result(0));
    break;
  case Kernel::k_attention:
    cost.flops = attentionFlops(info, false);
    break;
  case Kernel::k_attention_backward:
    cost.flops = attentionFlops(info, true);
    break;
  case Kernel::k_copy:
  case Kernel::k_fill:
  case Kernel::k_transpose:
  case Kernel::k_broadcast:
  case Kernel::k_concat:
  case Kernel::k_slice:
  case Kernel::k_slice_scatter:
  case Kernel::k_gather:
  case Kernel::k_iota:
  case Kernel::k_cast:
  case Kernel::k_all_reduce:
  case Kernel::k_all_gather:
  case Kernel::k_reduce_scatter:
  case Kernel::k_all_to_all:
  case Kernel::k_shard_slice:
  case Kernel::k_check_index:
    break;
  default:
    // Elementwise kernels, reductions, norms, softmax, pooling: a handful
    // of operations per element of their largest tensor; one is the honest
    // lower bound.
    cost.flops = largest;
    break;
  }
  return cost;
}

StepProfiler::StepProfiler(int rank, bool keepTrace)
    : rank_(rank), keepTrace_(keepTrace) {}

int64_t StepProfiler::nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int32_t StepProfiler::addSite(std::string kernel, std::string location,
                              SiteKind kind, KernelCost cost) {
  Site site;
  site.kernel = std::move(kernel);
  site.location = std::move(location);
  site.kind = kind;
  site.cost = cost;
  sites_.push_back(std::move(site));
  return static_cast<int32_t>(sites_.size() - 1);
}

// A trace keeps at most this many intervals per rank (about 100 MB of
// JSON); later ones are counted but dropped, and the trace says so.
constexpr size_t kMaxIntervals = 1 << 20;

void StepProfiler::record(int32_t site, int64_t startNs, int64_t endNs) {
  if (counted_) {
    sites_[site].calls += 1;
    sites_[site].totalNs += endNs - startNs;
  }
  if (!keepTrace_)
    return;
  if (intervals_.size() >= kMaxIntervals) {
    truncated_ = true;
    return;
  }
  intervals_.push_back({site, step_, startNs, endNs});
}

void StepProfiler::beginStep(int64_t step, bool counted) {
  inStep_ = true;
  counted_ = counted;
  step_ = step;
  stepStartNs_ = nowNs();
}

void StepProfiler::endStep() {
  if (!inStep_)
    return;
  int64_t end = nowNs();
  if (counted_) {
    ++countedSteps_;
    countedStepNs_ += end - stepStartNs_;
  }
  if (keepTrace_ && intervals_.size() < kMaxIntervals)
    intervals_.push_back({-1, step_, stepStartNs_, end});
  inStep_ = counted_ = false;
}

namespace {

/// The quoted string at or after \p from ("" if none); \p end: past it.
std::string quotedAt(const std::string &s, size_t from, size_t *end) {
  size_t open = s.find('"', from);
  size_t close = open == std::string::npos ? open : s.find('"', open + 1);
  if (close == std::string::npos) {
    *end = std::string::npos;
    return "";
  }
  *end = close + 1;
  return s.substr(open + 1, close - open - 1);
}

/// The tag the compiler fuses around an op's location ("backward",
/// "optimizer": loc(fused<"backward">[...])), "" for none.
std::string tagOf(const std::string &location, size_t *rest) {
  constexpr const char *kFused = "loc(fused<\"";
  *rest = 0;
  if (location.rfind(kFused, 0) != 0)
    return "";
  size_t end = 0;
  std::string tag = quotedAt(location, 4, &end);
  *rest = end == std::string::npos ? 0 : end;
  return tag;
}

} // namespace

std::string profilePhaseOf(const std::string &location) {
  size_t rest = 0;
  std::string tag = tagOf(location, &rest);
  return tag.empty() ? "forward" : tag;
}

std::string profileOpOf(const std::string &location) {
  // MLIR prints a NameLoc as loc("name"(child)), inside a fused location's
  // brackets when the compiler tagged it; the first quoted string after the
  // tag is the op's name.
  size_t rest = 0;
  std::string tag = tagOf(location, &rest);
  size_t end = 0;
  std::string name = quotedAt(location, rest, &end);
  if (end == std::string::npos)
    return location;
  if (tag == "optimizer")
    return "optimizer: " + name;
  return tag.empty() ? name : name + " (" + tag + ")";
}

std::string profileBlockOf(const std::string &location) {
  size_t rest = 0;
  std::string tag = tagOf(location, &rest);
  if (tag == "optimizer")
    return "(optimizer)";
  size_t end = 0;
  std::string op = quotedAt(location, rest, &end);
  if (end == std::string::npos)
    return location;
  size_t slash = op.rfind('/');
  if (slash == std::string::npos || slash == 0)
    return op;
  return op.substr(0, slash);
}

namespace {

struct Row {
  std::string name;
  int64_t calls = 0, ns = 0;
  double flops = 0, bytes = 0;
};

std::string fixed(double v, int precision) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", precision, v);
  return buf;
}

std::string padRight(std::string s, size_t width) {
  if (s.size() > width)
    s = "..." + s.substr(s.size() - (width - 3));
  return s + std::string(width - s.size(), ' ');
}

std::string padLeft(const std::string &s, size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}

void printTable(std::ostream &os, const char *title, std::vector<Row> rows,
                double steps, double stepNs, const MachineRates &rates,
                size_t limit) {
  std::sort(rows.begin(), rows.end(),
            [](const Row &a, const Row &b) { return a.ns > b.ns; });
  os << title << "\n";
  os << "  " << padRight("", 40) << padLeft("calls", 7) << padLeft("ms", 9)
     << padLeft("share", 8) << padLeft("GFLOP/s", 9) << padLeft("sgemm", 7)
     << padLeft("GB/s", 8) << padLeft("copy", 7) << "\n";
  size_t shown = 0;
  double restNs = 0;
  for (const Row &r : rows) {
    if (shown == limit) {
      restNs += r.ns;
      continue;
    }
    ++shown;
    double seconds = r.ns * 1e-9;
    double flopRate = seconds > 0 ? r.flops / seconds : 0;
    double byteRate = seconds > 0 ? r.bytes / seconds : 0;
    auto pct = [](double v, double of) {
      return of > 0 ? fixed(100 * v / of, 0) + "%" : std::string("-");
    };
    os << "  " << padRight(r.name, 40)
       << padLeft(fixed(r.calls / steps, r.calls % int64_t(steps) ? 1 : 0), 7)
       << padLeft(fixed(r.ns / steps * 1e-6, 2), 9)
       << padLeft(fixed(100.0 * r.ns / stepNs, 1) + "%", 8)
       << padLeft(r.flops > 0 ? fixed(flopRate * 1e-9, 1) : "-", 9)
       << padLeft(r.flops > 0 ? pct(flopRate, rates.sgemmFlops) : "-", 7)
       << padLeft(fixed(byteRate * 1e-9, 1), 8)
       << padLeft(pct(byteRate, rates.copyBytes), 7) << "\n";
  }
  if (restNs > 0)
    os << "  "
       << padRight("(" + std::to_string(rows.size() - limit) + " more)", 40)
       << padLeft("", 7) << padLeft(fixed(restNs / steps * 1e-6, 2), 9)
       << padLeft(fixed(100.0 * restNs / stepNs, 1) + "%", 8) << "\n";
}

} // namespace

Status StepProfiler::report(Communicator &comm, const MachineRates &rates,
                            std::ostream &os) const {
  // Every rank's mean step and its time inside collectives: the spread is
  // load imbalance, the collective share what the mesh costs.
  double mine[2] = {0, 0};
  if (countedSteps_ > 0) {
    mine[0] = countedStepNs_ * 1e-6 / countedSteps_;
    for (const Site &s : sites_)
      if (s.kind == SiteKind::Collective)
        mine[1] += s.totalNs * 1e-6 / countedSteps_;
  }
  std::vector<double> all(2 * comm.size());
  if (Status s =
          comm.allGather(mine, all.data(), sizeof(mine), everyAxis(comm));
      !s)
    return s;
  if (rank_ != 0)
    return Status::ok();
  if (countedSteps_ == 0) {
    os << "profile: no step was profiled (the first step warms up: run at "
          "least 2)\n";
    return Status::ok();
  }
  double steps = static_cast<double>(countedSteps_);
  double stepNs = static_cast<double>(countedStepNs_);
  os << "profile: rank 0, " << countedSteps_ << " step"
     << (countedSteps_ == 1 ? "" : "s") << " after the first, "
     << fixed(stepNs / steps * 1e-6, 2) << " ms per step\n";
  os << "machine: sgemm " << fixed(rates.sgemmFlops * 1e-9, 1)
     << " GFLOP/s, copy " << fixed(rates.copyBytes * 1e-9, 1)
     << " GB/s (measured per rank, with its threads)\n";
  for (int r = 0; r < comm.size(); ++r)
    os << "  rank " << r << ": " << fixed(all[2 * r], 2) << " ms per step, "
       << fixed(all[2 * r + 1], 2) << " ms in collectives\n";

  std::map<std::string, Row> phases, kinds, ops, blocks;
  for (const Site &s : sites_) {
    bool host = s.kind == SiteKind::Host;
    std::string op = host ? s.kernel : profileOpOf(s.location);
    std::string block = host ? s.kernel : profileBlockOf(s.location);
    std::string phase = host ? "host" : profilePhaseOf(s.location);
    if (s.kind == SiteKind::Collective)
      phase += " collectives";
    for (auto [map, key] :
         {std::pair{&phases, phase}, std::pair{&kinds, s.kernel},
          std::pair{&ops, op}, std::pair{&blocks, block}}) {
      Row &row = (*map)[key.empty() ? "(unknown)" : key];
      row.name = key.empty() ? "(unknown)" : key;
      row.calls += s.calls;
      row.ns += s.totalNs;
      row.flops += s.cost.flops * s.calls;
      row.bytes += s.cost.bytes * s.calls;
    }
  }
  auto rowsOf = [](const std::map<std::string, Row> &m) {
    std::vector<Row> rows;
    for (const auto &[k, r] : m)
      rows.push_back(r);
    return rows;
  };
  double accounted = 0;
  for (const Site &s : sites_)
    accounted += s.totalNs;
  printTable(os, "by phase:", rowsOf(phases), steps, stepNs, rates, 10);
  printTable(os, "by kernel kind:", rowsOf(kinds), steps, stepNs, rates, 40);
  printTable(os, "by block (source op's scope):", rowsOf(blocks), steps, stepNs,
             rates, 25);
  printTable(os, "by source op:", rowsOf(ops), steps, stepNs, rates, 25);
  os << "unaccounted (between kernels): "
     << fixed((stepNs - accounted) / steps * 1e-6, 2) << " ms per step\n";
  return Status::ok();
}

namespace {

void appendJsonString(std::string &out, const std::string &s) {
  out += '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}

/// Microseconds with nanosecond resolution, as the trace format takes them.
std::string micros(int64_t ns) { return fixed(ns * 1e-3, 3); }

} // namespace

std::string StepProfiler::traceFragment(int64_t originNs) const {
  std::string out;
  std::string pid = std::to_string(rank_);
  out += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + pid +
         ",\"args\":{\"name\":\"rank " + pid + "\"}},\n";
  out += "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + pid +
         ",\"args\":{\"sort_index\":" + pid + "}},\n";
  out += "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + pid +
         ",\"tid\":0,\"args\":{\"name\":\"step\"}}";
  for (const Interval &iv : intervals_) {
    out += ",\n{\"ph\":\"X\",\"pid\":" + pid +
           ",\"tid\":0,\"ts\":" + micros(iv.startNs - originNs) +
           ",\"dur\":" + micros(iv.endNs - iv.startNs) + ",\"name\":";
    if (iv.site < 0) {
      appendJsonString(out, "step " + std::to_string(iv.step + 1));
      out += ",\"cat\":\"step\",\"args\":{\"step\":" +
             std::to_string(iv.step + 1) + "}}";
      continue;
    }
    const Site &s = sites_[iv.site];
    appendJsonString(out, s.kernel);
    out += ",\"cat\":";
    out += s.kind == SiteKind::Collective ? "\"collective\""
           : s.kind == SiteKind::Host     ? "\"host\""
                                          : "\"kernel\"";
    out += ",\"args\":{\"op\":";
    appendJsonString(out, profileOpOf(s.location));
    out += ",\"phase\":";
    appendJsonString(
        out, s.kind == SiteKind::Host ? "host" : profilePhaseOf(s.location));
    out += ",\"step\":" + std::to_string(iv.step + 1);
    if (s.cost.flops > 0)
      out += ",\"flops\":" + fixed(s.cost.flops, 0);
    out += ",\"bytes\":" + fixed(s.cost.bytes, 0) + "}}";
  }
  return out;
}

Status StepProfiler::gatherTrace(Communicator &comm, const std::string &title,
                                 std::string *json) const {
  // A common origin keeps timestamps small; every rank reads the same
  // steady clock on one machine.
  int64_t first = intervals_.empty() ? 0 : intervals_.front().startNs;
  for (const Interval &iv : intervals_)
    first = std::min(first, iv.startNs);
  std::vector<int64_t> firsts(comm.size());
  if (Status s = comm.allGather(&first, firsts.data(), sizeof(int64_t),
                                everyAxis(comm));
      !s)
    return s;
  int64_t origin = *std::min_element(firsts.begin(), firsts.end());
  std::string mine = traceFragment(origin);
  int64_t size = static_cast<int64_t>(mine.size());
  std::vector<int64_t> sizes(comm.size());
  if (Status s =
          comm.allGather(&size, sizes.data(), sizeof(int64_t), everyAxis(comm));
      !s)
    return s;
  int64_t widest = *std::max_element(sizes.begin(), sizes.end());
  mine.resize(static_cast<size_t>(widest), ' ');
  std::string all(static_cast<size_t>(widest) * comm.size(), ' ');
  if (Status s =
          comm.allGather(mine.data(), all.data(), widest, everyAxis(comm));
      !s)
    return s;
  int truncated = truncated_ ? 1 : 0;
  std::vector<int> anyTruncated(comm.size());
  if (Status s = comm.allGather(&truncated, anyTruncated.data(), sizeof(int),
                                everyAxis(comm));
      !s)
    return s;
  if (rank_ != 0)
    return Status::ok();
  std::string out = "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"title\":";
  appendJsonString(out, title);
  bool cut = std::count(anyTruncated.begin(), anyTruncated.end(), 1) > 0;
  out += ",\"ranks\":" + std::to_string(comm.size()) +
         ",\"truncated\":" + (cut ? "true" : "false") +
         "},\n\"traceEvents\":[\n";
  for (int r = 0; r < comm.size(); ++r) {
    out += r ? ",\n" : "";
    out.append(all, static_cast<size_t>(widest) * r,
               static_cast<size_t>(sizes[r]));
  }
  out += "\n]}\n";
  *json = std::move(out);
  return Status::ok();
}

} // namespace cleave::rt

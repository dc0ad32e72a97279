//===- thread_comm.cpp - Communicator between threads of one process ------===//
//
// The ranks of an in-process mesh are threads (a notebook, `cleave run
// --threads`, most tests): collectives go through shared memory, with the
// MPI communicator's contract, bounded waits included.
//
// Each group (a set of ranks) has a current round. A member copies its
// contribution into the round, and the last member to arrive computes the
// whole result in group-rank order (so every rank gets bit-identical sums,
// whatever the order of arrival) and opens the next round. Members never
// read each other's buffers: a member whose wait times out leaves its staged
// copy in the round and returns at once, its own buffers untouched, like an
// outstanding MPI collective; a late peer still completes the round, and the
// timed-out member's next collective first waits (bounded) for that.
//
// A rank whose step failed aborts the mesh: every wait, current or to come,
// ends at once with an error instead of sitting out its timeout.
//
//===----------------------------------------------------------------------===//

#include "cleave/runtime/comm.h"
#include "core/convert.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

namespace cleave::rt {

namespace {

using Clock = std::chrono::steady_clock;

enum class Kind {
  AllReduce,
  AllGather,
  ReduceScatter,
  AllToAll,
  Broadcast,
  Barrier
};

const char *kindName(Kind kind) {
  switch (kind) {
  case Kind::AllReduce:
    return "all_reduce";
  case Kind::AllGather:
    return "all_gather";
  case Kind::ReduceScatter:
    return "reduce_scatter";
  case Kind::AllToAll:
    return "all_to_all";
  case Kind::Broadcast:
    return "broadcast";
  case Kind::Barrier:
    return "barrier";
  }
  return "?";
}

/// What a member asks of a round; every member must ask the same.
struct Request {
  Kind kind = Kind::Barrier;
  int64_t count = 0; ///< elements (reductions) or bytes (gather, broadcast)
  DType dtype = DType::U8;
  Reduction reduction = Reduction::Sum;
  int root = 0;
  std::vector<int64_t> axes;
  bool operator==(const Request &o) const {
    return kind == o.kind && count == o.count && dtype == o.dtype &&
           reduction == o.reduction && root == o.root && axes == o.axes;
  }
};

/// One collective of one group.
struct Round {
  explicit Round(size_t n) : staged(n), joined(n, false) {}
  Request request;
  std::vector<std::vector<uint8_t>> staged; ///< by group rank
  std::vector<bool> joined;
  size_t arrived = 0;
  bool complete = false;
  std::string error; ///< the members disagreed
  std::vector<uint8_t> result;
};

template <typename T>
void reduceInto(T *acc, const T *x, int64_t n, Reduction reduction) {
  for (int64_t i = 0; i < n; ++i) {
    if (reduction == Reduction::Sum)
      acc[i] = static_cast<T>(acc[i] + x[i]);
    else if (reduction == Reduction::Max)
      acc[i] = std::max(acc[i], x[i]);
    else
      acc[i] = std::min(acc[i], x[i]);
  }
}

/// bf16 / f16: each pair widened, combined and rounded once.
template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void reduceHalf(uint16_t *acc, const uint16_t *x, int64_t n,
                Reduction reduction) {
  for (int64_t i = 0; i < n; ++i) {
    float a = Widen(acc[i]), b = Widen(x[i]);
    acc[i] = Narrow(reduction == Reduction::Sum   ? a + b
                    : reduction == Reduction::Max ? std::max(a, b)
                                                  : std::min(a, b));
  }
}

/// acc (count elements) op= x.
void reduceBytes(uint8_t *acc, const uint8_t *x, int64_t count, DType dtype,
                 Reduction reduction) {
  switch (dtype) {
  case DType::F32:
    return reduceInto(reinterpret_cast<float *>(acc),
                      reinterpret_cast<const float *>(x), count, reduction);
  case DType::I32:
    return reduceInto(reinterpret_cast<int32_t *>(acc),
                      reinterpret_cast<const int32_t *>(x), count, reduction);
  case DType::I64:
    return reduceInto(reinterpret_cast<int64_t *>(acc),
                      reinterpret_cast<const int64_t *>(x), count, reduction);
  case DType::F16:
    return reduceHalf<halfToFloat, floatToHalf>(
        reinterpret_cast<uint16_t *>(acc),
        reinterpret_cast<const uint16_t *>(x), count, reduction);
  case DType::BF16:
    return reduceHalf<bf16ToFloat, floatToBf16>(
        reinterpret_cast<uint16_t *>(acc),
        reinterpret_cast<const uint16_t *>(x), count, reduction);
  default: // bool: max is or, min is and (checkReduction allows no sum)
    return reduceInto(acc, x, count, reduction);
  }
}

/// The result of a round whose members all arrived: reductions in group
/// rank order, gathers in group order.
void computeResult(Round &round) {
  const Request &r = round.request;
  size_t n = round.staged.size();
  switch (r.kind) {
  case Kind::AllReduce:
  case Kind::ReduceScatter: {
    round.result = round.staged[0];
    int64_t count = static_cast<int64_t>(
        round.result.size() / std::max<size_t>(1, dtypeSize(r.dtype)));
    for (size_t k = 1; k < n; ++k)
      reduceBytes(round.result.data(), round.staged[k].data(), count, r.dtype,
                  r.reduction);
    return;
  }
  case Kind::AllGather:
    round.result.clear();
    for (const std::vector<uint8_t> &part : round.staged)
      round.result.insert(round.result.end(), part.begin(), part.end());
    return;
  case Kind::AllToAll: {
    // Receiver j's n chunks, from senders 0..n-1, lie together.
    size_t chunk = static_cast<size_t>(r.count);
    round.result.resize(chunk * n * n);
    for (size_t j = 0; j < n; ++j)
      for (size_t i = 0; i < n; ++i)
        if (chunk)
          std::memcpy(round.result.data() + (j * n + i) * chunk,
                      round.staged[i].data() + j * chunk, chunk);
    return;
  }
  case Kind::Broadcast:
    round.result = round.staged[r.root];
    return;
  case Kind::Barrier:
    return;
  }
}

std::string formatSeconds(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", seconds);
  return buf;
}

/// What the ranks of one in-process mesh share.
struct ThreadHub {
  std::mutex mutex;
  std::condition_variable changed;
  /// Current round of each group, keyed by its members (sorted).
  std::map<std::vector<int>, std::shared_ptr<Round>> rounds;
  std::string aborted; ///< why, once a rank aborted the mesh
};

class ThreadCommunicator final : public Communicator {
public:
  ThreadCommunicator(std::vector<int64_t> meshShape, int rank, int size,
                     double timeout, std::shared_ptr<ThreadHub> hub)
      : Communicator(std::move(meshShape)), rank_(rank), size_(size),
        timeout_(timeout), hub_(std::move(hub)) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  double timeoutSeconds() const override { return timeout_; }
  void setTimeoutSeconds(double seconds) override { timeout_ = seconds; }

  Status allReduce(void *buf, int64_t count, DType dtype, Reduction reduction,
                   const std::vector<int64_t> &axes) override {
    if (Status s = checkReduction("all_reduce", dtype, reduction, count); !s)
      return Status::error(prefix() + s.message());
    size_t bytes = static_cast<size_t>(count) * dtypeSize(dtype);
    Request r{Kind::AllReduce, count, dtype, reduction, 0, axes};
    return collective(r, buf, bytes, buf, 0, bytes);
  }
  Status allGather(const void *in, void *out, int64_t bytesPerRank,
                   const std::vector<int64_t> &axes) override {
    if (bytesPerRank < 0)
      return Status::error(prefix() + "all_gather: negative size");
    Request r{
        Kind::AllGather, bytesPerRank, DType::U8, Reduction::Sum, 0, axes};
    size_t bytes = static_cast<size_t>(bytesPerRank);
    return collective(r, in, bytes, out, 0, SIZE_MAX);
  }
  Status reduceScatter(const void *in, void *out, int64_t countPerRank,
                       DType dtype, const std::vector<int64_t> &axes) override {
    if (Status s = checkReduction("reduce_scatter", dtype, Reduction::Sum,
                                  countPerRank);
        !s)
      return Status::error(prefix() + s.message());
    if (Status s = checkAxes(axes); !s)
      return Status::error(prefix() + "reduce_scatter: " + s.message());
    size_t chunk = static_cast<size_t>(countPerRank) * dtypeSize(dtype);
    Request r{
        Kind::ReduceScatter, countPerRank, dtype, Reduction::Sum, 0, axes};
    return collective(r, in, chunk * groupSize(axes), out,
                      chunk * groupRank(axes), chunk);
  }
  Status allToAll(const void *in, void *out, int64_t bytesPerPeer,
                  const std::vector<int64_t> &axes) override {
    if (bytesPerPeer < 0)
      return Status::error(prefix() + "all_to_all: negative size");
    if (Status s = checkAxes(axes); !s)
      return Status::error(prefix() + "all_to_all: " + s.message());
    Request r{Kind::AllToAll, bytesPerPeer, DType::U8, Reduction::Sum, 0, axes};
    size_t chunk = static_cast<size_t>(bytesPerPeer);
    size_t n = static_cast<size_t>(groupSize(axes));
    return collective(r, in, chunk * n, out,
                      chunk * n * static_cast<size_t>(groupRank(axes)),
                      chunk * n);
  }
  Status broadcast(void *buf, int64_t bytes, int root,
                   const std::vector<int64_t> &axes) override {
    if (Status s = checkAxes(axes); !s)
      return Status::error(prefix() + "broadcast: " + s.message());
    if (root < 0 || root >= groupSize(axes))
      return Status::error(prefix() + "broadcast: root " +
                           std::to_string(root) +
                           " is out of range for a group of " +
                           std::to_string(groupSize(axes)) + " ranks");
    if (bytes < 0)
      return Status::error(prefix() + "broadcast: negative size");
    Request r{Kind::Broadcast, bytes, DType::U8, Reduction::Sum, root, axes};
    size_t n = static_cast<size_t>(bytes);
    // Only the root's bytes matter; the others stage nothing.
    return collective(r, buf, groupRank(axes) == root ? n : 0, buf, 0, n);
  }
  void abort(const std::string &why) {
    std::lock_guard<std::mutex> lock(hub_->mutex);
    if (hub_->aborted.empty())
      hub_->aborted = why.empty() ? "the mesh was aborted" : why;
    hub_->changed.notify_all();
  }

  /// Forgets the mesh's abort and its unfinished rounds, and this rank's
  /// outstanding one (every rank idle: no collective in flight).
  void reset() {
    std::lock_guard<std::mutex> lock(hub_->mutex);
    hub_->aborted.clear();
    hub_->rounds.clear();
    outstanding_.reset();
  }

  Status barrier() override {
    std::vector<int64_t> all(meshShape().size());
    for (size_t a = 0; a < all.size(); ++a)
      all[a] = static_cast<int64_t>(a);
    return collective({Kind::Barrier, 0, DType::U8, Reduction::Sum, 0, all},
                      nullptr, 0, nullptr, 0, 0);
  }

private:
  std::string prefix() const { return "rank " + std::to_string(rank_) + ": "; }
  Clock::time_point deadline() const {
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(timeout_));
  }
  Status abortedError(const char *what) const {
    return Status::error(prefix() + what + " stopped: " + hub_->aborted);
  }

  /// Stages \p inBytes of \p in, waits for the group, and copies
  /// [outOffset, outOffset + outBytes) of the round's result to \p out
  /// (SIZE_MAX: all of it).
  Status collective(const Request &request, const void *in, size_t inBytes,
                    void *out, size_t outOffset, size_t outBytes);
  /// Waits (bounded) for a round this rank timed out of to complete.
  Status settle(std::unique_lock<std::mutex> &lock, const char *what);

  int rank_, size_;
  double timeout_;
  std::shared_ptr<ThreadHub> hub_;
  /// A round this rank timed out of, and its collective's name.
  std::shared_ptr<Round> outstanding_;
  const char *outstandingWhat_ = "";
};

Status ThreadCommunicator::settle(std::unique_lock<std::mutex> &lock,
                                  const char *what) {
  if (!outstanding_)
    return Status::ok();
  ThreadHub &hub = *hub_;
  if (!hub.changed.wait_until(lock, deadline(), [&] {
        return outstanding_->complete || !hub.aborted.empty();
      }))
    return Status::error(
        prefix() + what + " timed out after " + formatSeconds(timeout_) +
        " s waiting for its peers to finish an earlier " + outstandingWhat_ +
        " that had timed out (a rank died or hangs)");
  if (!hub.aborted.empty())
    return abortedError(what);
  outstanding_.reset();
  return Status::ok();
}

Status ThreadCommunicator::collective(const Request &request, const void *in,
                                      size_t inBytes, void *out,
                                      size_t outOffset, size_t outBytes) {
  const char *what = kindName(request.kind);
  if (Status s = checkAxes(request.axes); !s)
    return Status::error(prefix() + what + ": " + s.message());
  std::vector<int> members = groupMembers(request.axes);
  size_t me = static_cast<size_t>(groupRank(request.axes));
  ThreadHub &hub = *hub_;
  std::unique_lock<std::mutex> lock(hub.mutex);
  if (!hub.aborted.empty())
    return abortedError(what);
  if (Status s = settle(lock, what); !s)
    return s;
  // Axis order only changes the group order: {0,1} and {1,0} are one group.
  std::vector<int> key = members;
  std::sort(key.begin(), key.end());
  std::shared_ptr<Round> &slot = hub.rounds[key];
  if (!slot)
    slot = std::make_shared<Round>(members.size());
  std::shared_ptr<Round> round = slot;
  if (round->arrived == 0)
    round->request = request;
  else if (!(round->request == request) && round->error.empty())
    round->error = std::string(what) + " does not match the " +
                   kindName(round->request.kind) +
                   " its peers called (count, dtype, reduction, root or "
                   "axes differ)";
  const auto *src = static_cast<const uint8_t *>(in);
  round->staged[me].assign(src, src + inBytes);
  round->joined[me] = true;
  if (++round->arrived == members.size()) {
    if (round->error.empty())
      computeResult(*round);
    round->complete = true;
    slot = std::make_shared<Round>(members.size());
    hub.changed.notify_all();
  } else if (!hub.changed.wait_until(lock, deadline(), [&] {
               return round->complete || !hub.aborted.empty();
             })) {
    outstanding_ = round;
    outstandingWhat_ = what;
    return Status::error(prefix() + what + " timed out after " +
                         formatSeconds(timeout_) +
                         " s waiting for its peers (a rank died or hangs)");
  }
  if (!round->complete)
    return abortedError(what);
  if (!round->error.empty())
    return Status::error(prefix() + round->error);
  lock.unlock();
  if (outBytes == SIZE_MAX)
    outBytes = round->result.size();
  if (outBytes)
    std::memcpy(out, round->result.data() + outOffset, outBytes);
  return Status::ok();
}

} // namespace

Status
makeThreadCommunicators(std::vector<int64_t> meshShape, double timeoutSeconds,
                        std::vector<std::unique_ptr<Communicator>> *out) {
  int64_t size = 1;
  for (int64_t d : meshShape) {
    if (d < 1)
      return Status::error("a mesh needs positive dimensions");
    size *= d;
  }
  if (meshShape.empty() || size > 4096)
    return Status::error("an in-process mesh needs 1 to 4096 ranks");
  if (!(timeoutSeconds > 0))
    return Status::error("the timeout must be a positive number of seconds");
  auto hub = std::make_shared<ThreadHub>();
  out->clear();
  for (int64_t r = 0; r < size; ++r)
    out->push_back(std::make_unique<ThreadCommunicator>(
        meshShape, static_cast<int>(r), static_cast<int>(size), timeoutSeconds,
        hub));
  return Status::ok();
}

void abortThreadMesh(Communicator &comm, const std::string &why) {
  auto *threads = dynamic_cast<ThreadCommunicator *>(&comm);
  if (!threads)
    return;
  threads->abort(why);
}

void resetThreadMesh(Communicator &comm) {
  if (auto *threads = dynamic_cast<ThreadCommunicator *>(&comm))
    threads->reset();
}

} // namespace cleave::rt

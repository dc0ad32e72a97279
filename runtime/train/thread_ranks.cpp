//===- thread_ranks.cpp - The ranks of a mesh as threads of this process --===//

#include "cleave/runtime/thread_ranks.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

namespace cleave::rt {

namespace {

/// work(rank), an exception worded as an internal error.
Status guarded(const std::function<Status(int rank)> &work, int rank) {
  try {
    return work(rank);
  } catch (const std::exception &e) {
    return Status::error(std::string("internal error: ") + e.what());
  }
}

Status brokenError() {
  return Status::error("an earlier failure left the ranks mid-step; "
                       "start again (or resume a checkpoint)");
}

/// \p failure of \p rank, prefixed "rank K: " unless it names its rank
/// already (collective errors do).
Status named(const Status &failure, int rank) {
  if (failure.message().rfind("rank ", 0) == 0)
    return failure;
  return Status::error("rank " + std::to_string(rank) + ": " +
                       failure.message());
}

} // namespace

Status ThreadRanks::create(int64_t ranks, double timeoutSeconds,
                           std::unique_ptr<ThreadRanks> *result) {
  if (ranks < 1)
    return Status::error("a mesh needs at least one rank");
  return create(std::vector<int64_t>{ranks}, timeoutSeconds, result);
}

Status ThreadRanks::create(std::vector<int64_t> meshShape,
                           double timeoutSeconds,
                           std::unique_ptr<ThreadRanks> *result) {
  std::unique_ptr<ThreadRanks> r(new ThreadRanks);
  if (Status s = makeThreadCommunicators(std::move(meshShape), timeoutSeconds,
                                         &r->comms_);
      !s)
    return s;
  *result = std::move(r);
  return Status::ok();
}

ThreadRanks::~ThreadRanks() = default;

void ThreadRanks::onEveryRank(const std::function<void(int rank)> &body) {
  std::vector<std::thread> threads;
  for (int r = 1; r < size(); ++r)
    threads.emplace_back(body, r);
  body(0);
  for (std::thread &t : threads)
    t.join();
}

Status ThreadRanks::run(const std::function<Status(int rank)> &work,
                        const std::function<bool(int rank)> &kept) {
  if (broken_)
    return brokenError();
  std::mutex mutex;
  int firstFailed = -1;
  std::vector<Status> results(comms_.size(), Status::ok());
  auto body = [&](int rank) {
    Status s = guarded(work, rank);
    if (s)
      return;
    std::lock_guard<std::mutex> lock(mutex);
    results[rank] = s;
    if (firstFailed < 0) {
      firstFailed = rank;
      abortThreadMesh(*comms_[rank],
                      "rank " + std::to_string(rank) + " failed");
    }
  };
  onEveryRank(body);
  if (firstFailed < 0)
    return Status::ok();
  // Every rank stopped before writing anything the work keeps (a bad
  // batch refused by a kernel, the others stopped waiting for it): the
  // mesh starts afresh with nothing mid-step.
  bool intact = static_cast<bool>(kept);
  for (int r = 0; r < size() && intact; ++r)
    intact = !results[r] && kept(r);
  if (intact)
    for (auto &comm : comms_)
      resetThreadMesh(*comm);
  else
    broken_ = true;
  return named(results[firstFailed], firstFailed);
}

Status ThreadRanks::runAgreed(const std::function<Status(int rank)> &work) {
  if (broken_)
    return brokenError();
  // Ranks that agree on a failure return within one all-reduce of each
  // other; ranks still busy this long after one failed may be waiting for
  // it (it failed before the agreement: an allocation, a local read), and
  // are aborted as run() aborts them.
  auto grace = std::chrono::duration<double>(agreeGraceSeconds_);
  std::vector<Status> results(comms_.size(), Status::ok());
  std::mutex mutex;
  std::condition_variable finished;
  int done = 0, failedRank = -1;
  auto body = [&](int rank) {
    Status s = guarded(work, rank);
    std::lock_guard<std::mutex> lock(mutex);
    results[rank] = s;
    ++done;
    if (!s && failedRank < 0)
      failedRank = rank;
    finished.notify_all();
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < size(); ++r)
    threads.emplace_back(body, r);
  bool aborted = false;
  {
    std::unique_lock<std::mutex> lock(mutex);
    finished.wait(lock, [&] { return done == size() || failedRank >= 0; });
    if (!finished.wait_for(lock, grace, [&] { return done == size(); })) {
      abortThreadMesh(*comms_[failedRank],
                      "rank " + std::to_string(failedRank) + " failed");
      aborted = true;
    }
  }
  for (std::thread &t : threads)
    t.join();
  // The rank with the cause: the first to fail, unless it only heard of
  // another's failure through the agreement.
  int failed = 0, first = failedRank;
  auto echo = [&](int r) {
    return results[r].message().rfind("another rank", 0) == 0;
  };
  for (int r = 0; r < size(); ++r)
    if (!results[r]) {
      ++failed;
      if (echo(first) && !echo(r))
        first = r;
    }
  if (failed == 0)
    return Status::ok();
  if (aborted || failed != size())
    broken_ = true;
  return named(results[first], first);
}

} // namespace cleave::rt

//===- thread_ranks.cpp - The ranks of a mesh as threads of this process --===//

#include "cleave/runtime/thread_ranks.h"

#include <atomic>
#include <mutex>

namespace cleave::rt {

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

Status ThreadRanks::run(const std::function<Status(int rank)> &work) {
  if (broken_)
    return Status::error("an earlier failure left the ranks mid-step; "
                         "start again (or resume a checkpoint)");
  std::mutex mutex;
  int firstFailed = -1;
  std::vector<Status> results(comms_.size(), Status::ok());
  auto body = [&](int rank) {
    Status s = Status::ok();
    try {
      s = work(rank);
    } catch (const std::exception &e) {
      s = Status::error(std::string("internal error: ") + e.what());
    }
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
  broken_ = true;
  const std::string &message = results[firstFailed].message();
  // Collective errors already name their rank.
  if (message.rfind("rank ", 0) == 0)
    return results[firstFailed];
  return Status::error("rank " + std::to_string(firstFailed) + ": " + message);
}

Status ThreadRanks::runAgreed(const std::function<Status(int rank)> &work) {
  if (broken_)
    return Status::error("an earlier failure left the ranks mid-step; "
                         "start again (or resume a checkpoint)");
  std::vector<Status> results(comms_.size(), Status::ok());
  auto body = [&](int rank) {
    try {
      results[rank] = work(rank);
    } catch (const std::exception &e) {
      results[rank] = Status::error(std::string("internal error: ") + e.what());
    }
  };
  onEveryRank(body);
  int failed = 0, first = -1;
  for (int r = 0; r < size(); ++r)
    if (!results[r]) {
      ++failed;
      // The rank with the cause, not one that heard of another's failure.
      if (first < 0 || results[first].message().rfind("another rank", 0) == 0)
        first = r;
    }
  if (failed == 0)
    return Status::ok();
  if (failed != size())
    broken_ = true;
  const std::string &message = results[first].message();
  if (message.rfind("rank ", 0) == 0)
    return results[first];
  return Status::error("rank " + std::to_string(first) + ": " + message);
}

} // namespace cleave::rt

//===- timeout_test.cpp - Collectives fail, not hang, without their peers -===//
//
// Rank 0 skips a collective on a communicator with a 1 s timeout: every
// other rank must get the timeout error after about 1 s, with its buffers
// untouched. Then rank 0 runs the collective late; the others' timed-out
// collectives complete with it, and the communicator is usable again.
//
//===----------------------------------------------------------------------===//

#include "mpi_test_util.h"

#include <chrono>
#include <cstdio>
#include <functional>

using namespace cleave::rt;
using namespace cleave::rt::mpitest;

namespace {

constexpr double kShortTimeout = 1.0;
constexpr int kSkipper = 0;

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

std::string timeoutMessage(int rank, const std::string &what) {
  return "rank " + std::to_string(rank) + ": " + what +
         " timed out after 1 s waiting for its peers (a rank died or hangs)";
}

struct Buffers {
  std::vector<float> in, out;
  explicit Buffers(int rank)
      : in(16, static_cast<float>(rank + 1)), out(16 * 4, -1.0f) {}
};

using Op = std::function<Status(Communicator &, Buffers &)>;

struct TimeoutCase {
  std::string what;
  Op op;
  /// Checks the skipper's result of its late collective.
  std::function<void(const Buffers &)> checkLate;
};

std::vector<TimeoutCase> timeoutCases() {
  const std::vector<int64_t> all = {0};
  return {
      {"all_reduce",
       [all](Communicator &c, Buffers &b) {
         return c.allReduce(b.in.data(), 16, DType::F32, Reduction::Sum, all);
       },
       [](const Buffers &b) { EXPECT_EQ(b.in[0], 1 + 2 + 3 + 4); }},
      {"all_gather",
       [all](Communicator &c, Buffers &b) {
         return c.allGather(b.in.data(), b.out.data(), 16 * 4, all);
       },
       [](const Buffers &b) {
         for (int k = 0; k < 4; ++k)
           EXPECT_EQ(b.out[16 * k], k + 1);
       }},
      {"reduce_scatter",
       [all](Communicator &c, Buffers &b) {
         // in: 4 chunks of 4 elements.
         return c.reduceScatter(b.in.data(), b.out.data(), 4, DType::F32, all);
       },
       [](const Buffers &b) { EXPECT_EQ(b.out[0], 1 + 2 + 3 + 4); }},
      {"all_to_all",
       [all](Communicator &c, Buffers &b) {
         // in: 4 chunks of 4 floats, one for each member.
         return c.allToAll(b.in.data(), b.out.data(), 4 * 4, all);
       },
       [](const Buffers &b) {
         for (int k = 0; k < 4; ++k)
           EXPECT_EQ(b.out[4 * k], k + 1);
       }},
      {"broadcast",
       [all](Communicator &c, Buffers &b) {
         // The root (group rank 0) is the skipper: nobody can finish early.
         return c.broadcast(b.in.data(), 16 * 4, 0, all);
       },
       [](const Buffers &b) { EXPECT_EQ(b.in[0], 1); }},
      {"barrier", [](Communicator &c, Buffers &) { return c.barrier(); },
       [](const Buffers &) {}},
  };
}

RANK_TEST(Timeout, SkippedCollectiveTimesOutOnThePeersAndRecovers) {
  std::unique_ptr<Communicator> comm;
  Status s = makeTestCommunicator({4}, kShortTimeout, &comm);
  ASSERT_TRUE(s) << s.message();
  Communicator &sync = mesh4();
  int rank = comm->rank();
  for (const TimeoutCase &tc : timeoutCases()) {
    comm->setTimeoutSeconds(kShortTimeout);
    Buffers b(rank);
    if (rank != kSkipper) {
      auto start = std::chrono::steady_clock::now();
      s = tc.op(*comm, b);
      double elapsed = secondsSince(start);
      EXPECT_FALSE(s) << tc.what;
      EXPECT_EQ(s.message(), timeoutMessage(rank, tc.what));
      EXPECT_GE(elapsed, 0.95 * kShortTimeout) << tc.what;
      EXPECT_LE(elapsed, kShortTimeout + 1.5) << tc.what;
      EXPECT_EQ(b.in, std::vector<float>(16, static_cast<float>(rank + 1)))
          << tc.what << ": a timed-out collective wrote the caller's buffer";
      EXPECT_EQ(b.out, std::vector<float>(16 * 4, -1.0f)) << tc.what;
      if (rank == 1)
        std::printf("[rank 1] %s: timed out after %.3f s (timeout %g s)\n",
                    tc.what.c_str(), elapsed, kShortTimeout);
      if (tc.what == "all_reduce") {
        // The next collective cannot start while the skipped one is
        // pending: it fails the same way, naming both.
        start = std::chrono::steady_clock::now();
        s = comm->barrier();
        elapsed = secondsSince(start);
        EXPECT_FALSE(s);
        EXPECT_EQ(s.message(),
                  "rank " + std::to_string(rank) +
                      ": barrier timed out after 1 s waiting for its peers to "
                      "finish an earlier all_reduce that had timed out (a "
                      "rank died or hangs)");
        EXPECT_GE(elapsed, 0.95 * kShortTimeout);
        EXPECT_LE(elapsed, kShortTimeout + 1.5);
      }
    }
    // Everybody past the timeouts; then the skipper joins late.
    ASSERT_TRUE(sync.barrier());
    comm->setTimeoutSeconds(kTimeoutSeconds);
    if (rank == kSkipper) {
      s = tc.op(*comm, b);
      ASSERT_TRUE(s) << tc.what << " (late): " << s.message();
      tc.checkLate(b);
    }
    s = comm->barrier();
    ASSERT_TRUE(s) << tc.what << ": " << s.message();
    // Usable again.
    float x = static_cast<float>(rank);
    s = comm->allReduce(&x, 1, DType::F32, Reduction::Sum, {0});
    ASSERT_TRUE(s) << tc.what << ": " << s.message();
    EXPECT_EQ(x, 0 + 1 + 2 + 3);
  }
}

RANK_TEST(Timeout, SubGroupsTimeOutIndependently) {
  // On mesh [2,2], rank 0 skips an all_reduce over axis 1: only its
  // partner (rank 1) times out; ranks 2 and 3 finish theirs.
  std::unique_ptr<Communicator> comm;
  Status s = makeTestCommunicator({2, 2}, kShortTimeout, &comm);
  ASSERT_TRUE(s) << s.message();
  int rank = comm->rank();
  float x = static_cast<float>(rank);
  if (rank != 0) {
    s = comm->allReduce(&x, 1, DType::F32, Reduction::Sum, {1});
    if (rank == 1) {
      EXPECT_EQ(s.message(), timeoutMessage(1, "all_reduce"));
    } else {
      ASSERT_TRUE(s) << s.message();
      EXPECT_EQ(x, 2 + 3);
    }
  }
  ASSERT_TRUE(mesh4().barrier());
  comm->setTimeoutSeconds(kTimeoutSeconds);
  if (rank == 0) {
    ASSERT_TRUE(comm->allReduce(&x, 1, DType::F32, Reduction::Sum, {1}));
    EXPECT_EQ(x, 0 + 1);
  }
  ASSERT_TRUE(comm->barrier());
}

} // namespace

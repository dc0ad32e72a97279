//===- threads_main.cpp - Entry point of cleave-thread-tests --------------===//
//
// The MPI suite over the in-process communicator: 4 ranks, one thread each.
// gtest's assertions are thread-safe; each test body runs on all 4 threads
// and the test waits for them.
//
//===----------------------------------------------------------------------===//

#include "mpi_test_util.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <thread>

namespace cleave::rt::mpitest {

namespace {

std::vector<std::unique_ptr<Communicator>> gMesh4, gMesh22;
thread_local int tRank = 0;
/// Communicators made by makeTestCommunicator: the k-th call of every rank
/// takes its member of the k-th set.
std::mutex gMadeMutex;
std::map<int, std::vector<std::unique_ptr<Communicator>>> gMade;
int gCalls[4] = {}; // per rank: threads are new for every test

} // namespace

Communicator &mesh4() { return *gMesh4[tRank]; }
Communicator &mesh22() { return *gMesh22[tRank]; }

Status makeTestCommunicator(std::vector<int64_t> meshShape,
                            double timeoutSeconds,
                            std::unique_ptr<Communicator> *result) {
  std::lock_guard<std::mutex> lock(gMadeMutex);
  std::vector<std::unique_ptr<Communicator>> &set = gMade[gCalls[tRank]++];
  if (set.empty())
    if (Status s = makeThreadCommunicators(meshShape, timeoutSeconds, &set); !s)
      return s;
  if (set[tRank]->meshShape() != meshShape)
    return Status::error("ranks made communicators in different orders");
  *result = std::move(set[tRank]);
  return Status::ok();
}

void runOnEveryRank(void (*body)()) {
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r)
    threads.emplace_back([r, body] {
      tRank = r;
      body();
    });
  for (std::thread &t : threads)
    t.join();
}

} // namespace cleave::rt::mpitest

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  using namespace cleave::rt;
  using namespace cleave::rt::mpitest;
  for (auto [shape, out] :
       {std::pair<std::vector<int64_t>,
                  std::vector<std::unique_ptr<Communicator>> *>{{4}, &gMesh4},
        {{2, 2}, &gMesh22}})
    if (Status s = makeThreadCommunicators(shape, kTimeoutSeconds, out); !s) {
      std::fprintf(stderr, "cleave-thread-tests: %s\n", s.message().c_str());
      return 1;
    }
  return RUN_ALL_TESTS();
}

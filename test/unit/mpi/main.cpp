//===- main.cpp - Entry point of cleave-mpi-tests (4 MPI ranks) -----------===//
//
// Run as `mpirun -np 4 cleave-mpi-tests`. Rank 0 prints gtest's usual
// report; the others print only their failures, prefixed with their rank.
// The exit status is the worst of all ranks.
//
//===----------------------------------------------------------------------===//

#include "mpi_test_util.h"

#include <gtest/gtest.h>

#include <cstdio>

namespace cleave::rt::mpitest {

static std::unique_ptr<Communicator> gMesh4, gMesh22;

Communicator &mesh4() { return *gMesh4; }
Communicator &mesh22() { return *gMesh22; }

Status makeTestCommunicator(std::vector<int64_t> meshShape,
                            double timeoutSeconds,
                            std::unique_ptr<Communicator> *result) {
  return makeMpiCommunicator(std::move(meshShape), timeoutSeconds, result);
}

} // namespace cleave::rt::mpitest

namespace {

using namespace cleave::rt;

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult &r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                   r.file_name() ? r.file_name() : "?", r.line_number(),
                   r.summary());
  }
  void OnTestEnd(const ::testing::TestInfo &info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_,
                   info.test_suite_name(), info.name());
  }

private:
  int rank_;
};

void fail(const Status &s) {
  std::fprintf(stderr, "cleave-mpi-tests: %s\n", s.message().c_str());
  abortAllRanks(1);
}

} // namespace

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  using namespace cleave::rt::mpitest;
  if (!launchedByMpi())
    std::fprintf(stderr, "cleave-mpi-tests: not started by an MPI launcher; "
                         "run it as `mpirun -np 4 cleave-mpi-tests`\n");
  if (Status s = makeMpiCommunicator({4}, kTimeoutSeconds, &gMesh4); !s)
    fail(s);
  if (Status s = makeMpiCommunicator({2, 2}, kTimeoutSeconds, &gMesh22); !s)
    fail(s);
  int rank = gMesh4->rank();
  if (rank != 0) {
    ::testing::TestEventListeners &listeners =
        ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  int32_t result = RUN_ALL_TESTS();
  // Every rank reports the worst result, so that a failure on one rank is
  // not hidden by mpirun picking another rank's status.
  if (Status s = gMesh4->allReduce(&result, 1, DType::I32, Reduction::Max, {0});
      !s)
    fail(s);
  gMesh4.reset();
  gMesh22.reset();
  finalizeMpi();
  return result;
}

//===- mpi_test_util.h - Shared state of the MPI tests ----------*- C++ -*-===//
//
// cleave-mpi-tests runs as 4 MPI ranks; every rank runs every test, in the
// same order, so collectives inside tests match up. Expected values are
// computed locally: each rank's data is a function of its rank, so every
// rank can rebuild what its peers contributed.
//
// The same sources, built with CLEAVE_COMM_THREADS, are cleave-thread-tests:
// the 4 ranks are threads of one process over the in-process communicator,
// and each RANK_TEST runs its body on all 4 at once. The two communicators
// pass one suite.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_TEST_UNIT_MPI_MPI_TEST_UTIL_H
#define CLEAVE_TEST_UNIT_MPI_MPI_TEST_UTIL_H

#include "cleave/runtime/comm.h"
#include "test_util.h"

#include <string>
#include <vector>

namespace cleave::rt::mpitest {

/// Seconds every collective of the shared communicators may wait.
constexpr double kTimeoutSeconds = 30;

/// The whole job as a mesh of shape [4].
Communicator &mesh4();
/// The whole job as a mesh of shape [2, 2].
Communicator &mesh22();

/// A communicator of its own for this rank (collective: every rank calls
/// it): MPI's, or the in-process mesh's.
Status makeTestCommunicator(std::vector<int64_t> meshShape,
                            double timeoutSeconds,
                            std::unique_ptr<Communicator> *result);

#ifdef CLEAVE_COMM_THREADS
/// Runs \p body on 4 threads, one per rank, each seeing its own mesh4() and
/// mesh22().
void runOnEveryRank(void (*body)());
#define RANK_TEST(Suite, Name)                                                 \
  void Suite##_##Name##_body();                                                \
  TEST(Threads##Suite, Name) { runOnEveryRank(&Suite##_##Name##_body); }       \
  void Suite##_##Name##_body()
#else
#define RANK_TEST(Suite, Name) TEST(Mpi##Suite, Name)
#endif

/// A communicator with the axes sets the tests run over it.
struct MeshCase {
  Communicator *comm;
  std::vector<int64_t> axes;
  std::string name() const {
    std::string s = "mesh [";
    for (size_t i = 0; i < comm->meshShape().size(); ++i)
      s += (i ? "," : "") + std::to_string(comm->meshShape()[i]);
    s += "] axes {";
    for (size_t i = 0; i < axes.size(); ++i)
      s += (i ? "," : "") + std::to_string(axes[i]);
    return s + "}";
  }
};

/// mesh [4] over {0} and {}; mesh [2,2] over {0}, {1}, {0,1}, {1,0}.
inline std::vector<MeshCase> meshCases() {
  return {{&mesh4(), {0}},  {&mesh4(), {}},      {&mesh22(), {0}},
          {&mesh22(), {1}}, {&mesh22(), {0, 1}}, {&mesh22(), {1, 0}}};
}

} // namespace cleave::rt::mpitest

#endif // CLEAVE_TEST_UNIT_MPI_MPI_TEST_UTIL_H

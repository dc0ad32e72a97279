//===- hello.cpp - A tiny MPI program for the launchRanks tests -----------===//
//
// cleave-mpi-hello [--sleep SECONDS] [--exit CODE]: every rank checks that
// it was started by an MPI launcher, all-reduces its rank and all-gathers
// the ranks; rank 0 then exits with CODE (default 0). --sleep delays every
// rank before MPI starts.
//
//===----------------------------------------------------------------------===//

#include "cleave/runtime/comm.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

using namespace cleave::rt;

int main(int argc, char **argv) {
  int exitCode = 0;
  double sleepSeconds = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--exit"))
      exitCode = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--sleep"))
      sleepSeconds = std::atof(argv[i + 1]);
  }
  if (!launchedByMpi()) {
    std::fprintf(stderr, "hello: not launched by MPI\n");
    return 2;
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(sleepSeconds));
  int size = std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE")
                           ? std::getenv("OMPI_COMM_WORLD_SIZE")
                           : "1");
  std::unique_ptr<Communicator> comm;
  if (Status s = makeMpiCommunicator({size}, 30, &comm); !s) {
    std::fprintf(stderr, "hello: %s\n", s.message().c_str());
    abortAllRanks(3);
  }
  int64_t sum = comm->rank();
  std::vector<int32_t> ranks(size, -1);
  int32_t mine = comm->rank();
  if (Status s = comm->allReduce(&sum, 1, DType::I64, Reduction::Sum, {0});
      !s) {
    std::fprintf(stderr, "hello: %s\n", s.message().c_str());
    abortAllRanks(3);
  }
  if (Status s = comm->allGather(&mine, ranks.data(), 4, {0}); !s) {
    std::fprintf(stderr, "hello: %s\n", s.message().c_str());
    abortAllRanks(3);
  }
  bool ok = sum == int64_t(size) * (size - 1) / 2;
  for (int r = 0; r < size; ++r)
    ok = ok && ranks[r] == r;
  std::printf("hello from rank %d of %d: %s\n", comm->rank(), size,
              ok ? "ok" : "WRONG");
  int rank = comm->rank();
  comm.reset();
  finalizeMpi();
  if (!ok)
    return 4;
  return rank == 0 ? exitCode : 0;
}

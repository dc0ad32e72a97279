//===- thread_ranks.h - Mesh ranks as threads of this process -*- C++ -*-===//
//
// A notebook, `python train.py` and `cleave run --threads` run every rank of
// a tensor-parallel mesh inside one process: one thread per rank, over the
// in-process communicator. The Python package keeps one trainer per rank
// and runs each call (a step, a state read) on all ranks at once.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_THREAD_RANKS_H
#define CLEAVE_RUNTIME_THREAD_RANKS_H

#include "cleave/runtime/comm.h"

#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace cleave::rt {

class ThreadRanks {
public:
  /// \p ranks ranks of a one-axis mesh whose collectives wait at most
  /// \p timeoutSeconds.
  static Status create(int64_t ranks, double timeoutSeconds,
                       std::unique_ptr<ThreadRanks> *result);
  /// The ranks of a mesh of \p meshShape (row-major, as over MPI).
  static Status create(std::vector<int64_t> meshShape, double timeoutSeconds,
                       std::unique_ptr<ThreadRanks> *result);
  ~ThreadRanks();

  int size() const { return static_cast<int>(comms_.size()); }
  Communicator &comm(int rank) { return *comms_[rank]; }

  /// Runs work(rank) for every rank at once (rank 0 on the calling thread)
  /// and waits for all. A rank that fails aborts the mesh, so that its peers
  /// stop waiting for it at once; the result is the error of the rank that
  /// failed first, prefixed "rank K: ". After a failure the mesh is
  /// unusable (its ranks may be mid-step), unless every rank failed and
  /// \p kept says of each that it kept its state (a step refused before it
  /// wrote any): then the mesh is reset and usable.
  Status run(const std::function<Status(int rank)> &work,
             const std::function<bool(int rank)> &kept = nullptr);
  /// As run, for work whose every failure the ranks agree on before they
  /// return (a checkpoint: each phase ends in an all-reduce of the ranks'
  /// outcomes). When every rank failed, the mesh is left usable (nothing is
  /// mid-step). Ranks that disagree leave it broken, and ranks still busy
  /// 10 s after one failed are aborted first (they may be waiting for it).
  Status runAgreed(const std::function<Status(int rank)> &work);
  /// runAgreed's wait for the other ranks after one failed (tests shorten it).
  void setAgreeGraceSeconds(double seconds) { agreeGraceSeconds_ = seconds; }
  /// Whether a run failed (and the mesh is unusable).
  bool broken() const { return broken_; }

private:
  ThreadRanks() = default;
  /// body(rank) on every rank's thread (rank 0 the caller's); waits for all.
  void onEveryRank(const std::function<void(int rank)> &body);
  std::vector<std::unique_ptr<Communicator>> comms_;
  bool broken_ = false;
  double agreeGraceSeconds_ = 10;
};

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_THREAD_RANKS_H

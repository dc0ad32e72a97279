//===- comm.h - Collectives between the ranks of a device mesh --*- C++ -*-===//
//
// A process of a tensor-parallel run is one rank of a device mesh: an N-D
// grid whose ranks are numbered row-major (the last axis varies fastest).
// Collectives run over the GROUP of ranks that differ from this rank only in
// a given list of mesh axes; a member's group rank is its row-major index over
// those axes, in the order the list gives them.
//
// Every wait on another rank is bounded: a collective whose peers do not join
// within the communicator's timeout returns an error naming this rank and the
// collective instead of hanging. Buffers passed to a collective that timed
// out are left untouched and may be reused or freed at once.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_COMM_H
#define CLEAVE_RUNTIME_COMM_H

#include "cleave/runtime/executor.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace cleave::rt {

enum class Reduction { Sum, Max, Min };

/// "sum", "max", "min".
const char *reductionName(Reduction reduction);

/// One rank of a device mesh, and the collectives between its ranks.
///
/// Collectives must be called by every member of the group, in the same
/// order on every rank. Element counts and byte sizes are per rank and must
/// agree across the group. Supported dtypes: f32, i32, i64 for every
/// reduction; bool for max and min (logical or / and). Not thread-safe: call
/// from one thread (the executor calls from the thread that runs the
/// program).
class Communicator {
public:
  explicit Communicator(std::vector<int64_t> meshShape);
  virtual ~Communicator();
  Communicator(const Communicator &) = delete;
  Communicator &operator=(const Communicator &) = delete;

  /// This process's rank in [0, size()).
  virtual int rank() const = 0;
  /// Number of ranks: the product of meshShape().
  virtual int size() const = 0;
  const std::vector<int64_t> &meshShape() const { return meshShape_; }
  /// This rank's coordinates in the mesh.
  std::vector<int64_t> coordinates() const;

  /// Seconds a collective waits for its peers before it fails.
  virtual double timeoutSeconds() const = 0;
  virtual void setTimeoutSeconds(double seconds) = 0;

  /// Checks that every axis is in [0, meshShape().size()) and that none
  /// repeats.
  Status checkAxes(const std::vector<int64_t> &axes) const;
  /// Size of the group over \p axes (checked by checkAxes): the product of
  /// their extents.
  int64_t groupSize(const std::vector<int64_t> &axes) const;
  /// This rank's index in its group over \p axes.
  int64_t groupRank(const std::vector<int64_t> &axes) const;
  /// The ranks of this rank's group over \p axes, in group order.
  std::vector<int> groupMembers(const std::vector<int64_t> &axes) const;

  /// In place: buf (count elements) becomes the reduction of every group
  /// member's buf.
  virtual Status allReduce(void *buf, int64_t count, DType dtype,
                           Reduction reduction,
                           const std::vector<int64_t> &axes) = 0;
  /// out (groupSize * bytesPerRank bytes) becomes the concatenation of every
  /// member's in (bytesPerRank bytes), in group order.
  virtual Status allGather(const void *in, void *out, int64_t bytesPerRank,
                           const std::vector<int64_t> &axes) = 0;
  /// in holds groupSize chunks of countPerRank elements; out (countPerRank
  /// elements) becomes the sum over the group of chunk groupRank of in.
  virtual Status reduceScatter(const void *in, void *out, int64_t countPerRank,
                               DType dtype,
                               const std::vector<int64_t> &axes) = 0;
  /// in holds groupSize chunks of bytesPerPeer bytes, chunk j for group
  /// member j; out (as large) becomes, chunk i, what member i sent this
  /// rank (expert parallelism's dispatch and combine).
  virtual Status allToAll(const void *in, void *out, int64_t bytesPerPeer,
                          const std::vector<int64_t> &axes) = 0;
  /// buf (bytes) becomes the buf of the member of group rank \p root.
  virtual Status broadcast(void *buf, int64_t bytes, int root,
                           const std::vector<int64_t> &axes) = 0;
  /// Returns once every rank of the mesh has called it.
  virtual Status barrier() = 0;

protected:
  /// Checks what every collective shares; \p what names it in errors.
  Status checkReduction(const char *what, DType dtype, Reduction reduction,
                        int64_t count) const;

private:
  std::vector<int64_t> meshShape_;
};

/// A communicator for a process that is the whole mesh: \p meshShape must
/// have positive dims whose product is 1 (nullptr otherwise). Every group has
/// one member; collectives are copies.
std::unique_ptr<Communicator>
makeSingleProcessCommunicator(std::vector<int64_t> meshShape = {1});

/// Communicators for every rank of a mesh whose ranks are threads of this
/// process (\p out[r] is rank r's; each is then used from one thread):
/// collectives through shared memory, reductions summed in group-rank order
/// (every rank gets the same bits), every wait bounded by \p timeoutSeconds
/// as over MPI, a timed-out collective completing when its late peer joins.
Status makeThreadCommunicators(std::vector<int64_t> meshShape,
                               double timeoutSeconds,
                               std::vector<std::unique_ptr<Communicator>> *out);

/// Mesh axis \p axis of \p parent as a one-axis communicator: its rank is
/// the rank's index in its group over that axis, its collectives (axes {0})
/// run over that group, and its barrier waits for the group only. Null for
/// an axis out of range. \p parent must outlive it.
std::unique_ptr<Communicator> makeAxisView(Communicator &parent, int64_t axis);
/// Mesh axes \p axes of \p parent (tp factored into two axes) as one
/// axis: its rank is the row-major index over them. Null for an axis out
/// of range, none, or one named twice.
std::unique_ptr<Communicator> makeAxisView(Communicator &parent,
                                           std::vector<int64_t> axes);

/// Ends every wait of \p comm's in-process mesh, current and to come, with
/// an error saying \p why (a rank failed: its peers need not sit out their
/// timeouts). No effect on other communicators.
void abortThreadMesh(Communicator &comm, const std::string &why);

/// Makes \p comm's in-process mesh usable again after an abort: its
/// unfinished rounds and the abort are forgotten, and \p comm's own
/// outstanding round. Only while no rank of the mesh is in a collective
/// (every rank's thread joined); call it for every rank's communicator.
void resetThreadMesh(Communicator &comm);

/// A communicator over MPI_COMM_WORLD. Calls MPI_Init_thread if MPI is not
/// initialised yet. Collective: every rank must call it with the same
/// \p meshShape, whose product must equal the number of MPI ranks. Every
/// collective (and the creation itself) fails after \p timeoutSeconds (> 0)
/// without its peers. Sub-communicators for every set of mesh axes are
/// created here, so later collectives never block on communicator creation.
/// Sets MPI_ERRORS_RETURN on MPI_COMM_WORLD, so that MPI errors come back as
/// errors of the collective rather than aborting the job.
Status makeMpiCommunicator(std::vector<int64_t> meshShape,
                           double timeoutSeconds,
                           std::unique_ptr<Communicator> *result);

/// Ends the whole MPI job with exit status \p code (MPI_Abort) when MPI is
/// initialised; otherwise exits this process with \p code. The way out after
/// a collective failed: peers still waiting on it are taken down too.
[[noreturn]] void abortAllRanks(int code);

/// MPI_Finalize, if MPI was initialised and is not finalised yet. Every rank
/// must call it, after its last collective succeeded (MPI_Finalize waits for
/// every rank; after a failed collective use abortAllRanks instead).
void finalizeMpi();

/// True when this process was started by an MPI launcher: Open MPI's mpirun
/// (OMPI_COMM_WORLD_SIZE), a PMI/PMIx launcher (PMI_SIZE, PMIX_RANK) or
/// Slurm's srun (SLURM_PROCID and SLURM_NTASKS).
bool launchedByMpi();

/// Runs `mpirun --oversubscribe --bind-to none [--allow-run-as-root when the
/// effective uid is 0] -np ranks argv...` and waits for it. Ok when mpirun
/// exits with status 0; otherwise an error with its exit status or signal.
/// When \p timeoutSeconds > 0 and mpirun has not finished by then, it is
/// terminated (SIGTERM, then SIGKILL) and an error returned; 0 waits for
/// ever. An error also when mpirun is not on PATH. argv[0] is found by
/// mpirun (PATH or a path); pass a resolved path, not /proc/self/exe, which
/// each launched process would resolve to its launcher.
Status launchRanks(const std::vector<std::string> &argv, int ranks,
                   double timeoutSeconds);

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_COMM_H

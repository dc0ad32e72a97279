//===- mpi_comm.cpp - Communicator over MPI with bounded waits ------------===//
//
// Every collective is non-blocking (MPI_I*) and polled with MPI_Test until a
// deadline, so that a rank that died or hangs turns into an error on its
// peers instead of a hang.
//
// MPI cannot cancel a collective. One that timed out stays pending on this
// rank ("outstanding"); it still owns the staging buffer MPI reads and writes,
// so every collective goes through a staging buffer owned by the
// communicator, never the caller's memory. Later collectives first wait
// (again bounded) for outstanding ones to finish, which they do when the
// late peer finally joins, and the communicator is usable again.
//
// Sub-communicators for every set of mesh axes are split once, at creation,
// right after a bounded barrier: MPI_Comm_split has no non-blocking form, and
// creating them lazily could block a rank in a split its peers never reach.
//
//===----------------------------------------------------------------------===//

#include "cleave/runtime/comm.h"
#include "core/convert.h"

#include <csignal>
#include <mpi.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

namespace cleave::rt {

namespace {

using Clock = std::chrono::steady_clock;

std::string formatSeconds(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", seconds);
  return buf;
}

std::string mpiErrorString(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    return "MPI error " + std::to_string(code);
  return std::string(text, length);
}

MPI_Datatype mpiType(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return MPI_FLOAT;
  case DType::I64:
    return MPI_INT64_T;
  case DType::I32:
    return MPI_INT32_T;
  case DType::F16:
  case DType::BF16:
    return MPI_UINT16_T;
  case DType::Bool:
    return MPI_UINT8_T;
  default:
    return MPI_BYTE;
  }
}

/// bf16 and f16 reductions (MPI has neither type): each pair widened to
/// f32, combined, and rounded once, as NCCL combines them.
template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float), int Op>
void halfReduce(void *in, void *inout, int *len, MPI_Datatype *) {
  const auto *x = static_cast<const uint16_t *>(in);
  auto *acc = static_cast<uint16_t *>(inout);
  for (int i = 0; i < *len; ++i) {
    float a = Widen(acc[i]), b = Widen(x[i]);
    acc[i] = Narrow(Op == 0   ? a + b
                    : Op == 1 ? std::max(a, b)
                              : std::min(a, b));
  }
}

MPI_Op mpiOp(Reduction reduction, DType dtype) {
  if (dtype == DType::F16 || dtype == DType::BF16) {
    // Created on first use (after MPI_Init) and kept for the process.
    static MPI_Op ops[2][3];
    static std::once_flag created;
    std::call_once(created, [] {
      MPI_User_function *fns[2][3] = {
          {&halfReduce<halfToFloat, floatToHalf, 0>,
           &halfReduce<halfToFloat, floatToHalf, 1>,
           &halfReduce<halfToFloat, floatToHalf, 2>},
          {&halfReduce<bf16ToFloat, floatToBf16, 0>,
           &halfReduce<bf16ToFloat, floatToBf16, 1>,
           &halfReduce<bf16ToFloat, floatToBf16, 2>}};
      for (int d = 0; d < 2; ++d)
        for (int r = 0; r < 3; ++r)
          MPI_Op_create(fns[d][r], /*commute=*/1, &ops[d][r]);
    });
    return ops[dtype == DType::BF16][static_cast<int>(reduction)];
  }
  switch (reduction) {
  case Reduction::Sum:
    return MPI_SUM;
  case Reduction::Max:
    return MPI_MAX;
  case Reduction::Min:
    return MPI_MIN;
  }
  return MPI_SUM;
}

/// Paces a polling loop: yields the core for the first millisecond (short
/// waits stay fast, and ranks that outnumber the cores still progress), then
/// sleeps with a backoff up to 1 ms.
class Poller {
public:
  void pause() {
    if (Clock::now() - start_ < std::chrono::milliseconds(1)) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(sleep_);
    sleep_ = std::min(sleep_ * 2, std::chrono::microseconds(1000));
  }

private:
  Clock::time_point start_ = Clock::now();
  std::chrono::microseconds sleep_{20};
};

/// Largest element count passed to one MPI call (counts are int).
constexpr int64_t kMaxChunk = int64_t(1) << 30;

/// A collective that timed out and has not finished yet.
struct Outstanding {
  MPI_Request request;
  std::unique_ptr<uint8_t[]> buffer;
  std::string what;
};

/// This rank's group over some mesh axes.
struct Group {
  MPI_Comm comm = MPI_COMM_NULL; // null when the group is this rank alone
  int size = 1;
  /// Communicator ranks are row-major over the sorted axes; the caller's
  /// group order is row-major over the axes in the order given.
  std::vector<int> commToGroup;
};

class MpiCommunicator final : public Communicator {
public:
  MpiCommunicator(std::vector<int64_t> meshShape, int rank, double timeout)
      : Communicator(std::move(meshShape)), rank_(rank), timeout_(timeout) {
    size_ = 1;
    for (int64_t d : this->meshShape())
      size_ *= static_cast<int>(d);
  }
  ~MpiCommunicator() override;

  Status create();

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  double timeoutSeconds() const override { return timeout_; }
  void setTimeoutSeconds(double seconds) override { timeout_ = seconds; }

  Status allReduce(void *buf, int64_t count, DType dtype, Reduction reduction,
                   const std::vector<int64_t> &axes) override;
  Status allGather(const void *in, void *out, int64_t bytesPerRank,
                   const std::vector<int64_t> &axes) override;
  Status reduceScatter(const void *in, void *out, int64_t countPerRank,
                       DType dtype, const std::vector<int64_t> &axes) override;
  Status allToAll(const void *in, void *out, int64_t bytesPerPeer,
                  const std::vector<int64_t> &axes) override;
  Status broadcast(void *buf, int64_t bytes, int root,
                   const std::vector<int64_t> &axes) override;
  Status barrier() override;

private:
  std::string prefix() const { return "rank " + std::to_string(rank_) + ": "; }
  Status timedOut(const std::string &what) const {
    return Status::error(prefix() + what + " timed out after " +
                         formatSeconds(timeout_) +
                         " s waiting for its peers (a rank died or hangs)");
  }
  Status mpiFailed(const std::string &what, int code) const {
    return Status::error(prefix() + what + " failed: " + mpiErrorString(code));
  }
  /// The group of \p axes, or an error naming \p what.
  Status group(const char *what, const std::vector<int64_t> &axes,
               Group *result) const;
  /// What a collective moving \p bytes per member (\p per: "rank" or
  /// "peer") does before it talks: checks the size, finds the group, and
  /// settles an earlier timed-out collective. \p done says it is finished
  /// already (a group of one copies \p in to \p out; nothing to move).
  Status openBytes(const char *what, int64_t bytes, const char *per,
                   const std::vector<int64_t> &axes, const void *in, void *out,
                   Group *g, bool *done);
  /// Staging memory for one collective: at least \p bytes.
  uint8_t *staging(size_t bytes);
  /// Polls \p request until it completes or the timeout passes. On timeout
  /// the request and the staging buffer become outstanding.
  Status wait(MPI_Request *request, const std::string &what);
  /// Waits (bounded) for outstanding collectives before \p what starts.
  Status settle(const std::string &what);

  int rank_ = 0;
  int size_ = 1;
  double timeout_;
  MPI_Comm world_ = MPI_COMM_NULL;
  /// Key: bit mask of the sorted mesh axes of extent > 1.
  std::map<uint32_t, MPI_Comm> comms_;
  std::unique_ptr<uint8_t[]> staging_;
  size_t stagingSize_ = 0;
  std::vector<Outstanding> outstanding_;
};

bool mpiIsActive() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    return false;
  MPI_Finalized(&finalized);
  return !finalized;
}

MpiCommunicator::~MpiCommunicator() {
  if (!mpiIsActive())
    return;
  if (!outstanding_.empty()) {
    // A late peer may still complete these: their buffers must stay valid
    // and their communicators alive until MPI ends.
    for (Outstanding &o : outstanding_)
      (void)o.buffer.release();
    return;
  }
  for (auto &entry : comms_)
    MPI_Comm_free(&entry.second);
  if (world_ != MPI_COMM_NULL)
    MPI_Comm_free(&world_);
}

uint8_t *MpiCommunicator::staging(size_t bytes) {
  if (bytes > stagingSize_ || !staging_) {
    staging_.reset(new uint8_t[std::max<size_t>(bytes, 64)]);
    stagingSize_ = std::max<size_t>(bytes, 64);
  }
  return staging_.get();
}

Status MpiCommunicator::wait(MPI_Request *request, const std::string &what) {
  Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(timeout_));
  Poller poller;
  for (;;) {
    int done = 0;
    int rc = MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      // The request's state is unknown: never hand its memory out again.
      (void)staging_.release();
      stagingSize_ = 0;
      return mpiFailed(what, rc);
    }
    if (done)
      return Status::ok();
    if (Clock::now() >= deadline) {
      outstanding_.push_back({*request, std::move(staging_), what});
      stagingSize_ = 0;
      return timedOut(what);
    }
    poller.pause();
  }
}

Status MpiCommunicator::settle(const std::string &what) {
  if (outstanding_.empty())
    return Status::ok();
  Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(timeout_));
  Poller poller;
  for (;;) {
    for (size_t i = 0; i < outstanding_.size();) {
      int done = 0;
      int rc = MPI_Test(&outstanding_[i].request, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) {
        (void)outstanding_[i].buffer.release();
        done = 1;
      }
      if (done)
        outstanding_.erase(outstanding_.begin() + i);
      else
        ++i;
    }
    if (outstanding_.empty())
      return Status::ok();
    if (Clock::now() >= deadline)
      return Status::error(prefix() + what + " timed out after " +
                           formatSeconds(timeout_) +
                           " s waiting for its peers to finish an earlier " +
                           outstanding_.front().what +
                           " that had timed out (a rank died or hangs)");
    poller.pause();
  }
}

Status MpiCommunicator::group(const char *what,
                              const std::vector<int64_t> &axes,
                              Group *result) const {
  if (Status s = checkAxes(axes); !s)
    return Status::error(prefix() + what + ": " + s.message());
  const std::vector<int64_t> &mesh = meshShape();
  std::vector<int64_t> sorted;
  uint32_t mask = 0;
  for (int64_t a : axes)
    if (mesh[a] > 1) {
      sorted.push_back(a);
      mask |= uint32_t(1) << a;
    }
  std::sort(sorted.begin(), sorted.end());
  result->size = static_cast<int>(groupSize(axes));
  result->comm = MPI_COMM_NULL;
  result->commToGroup.assign(1, 0);
  if (result->size == 1)
    return Status::ok();
  result->comm = comms_.at(mask);
  // Communicator rank s has coordinates (row-major over `sorted`); its group
  // rank is row-major over `axes` as given.
  std::vector<int64_t> coords(mesh.size(), 0);
  result->commToGroup.resize(result->size);
  for (int s = 0; s < result->size; ++s) {
    int64_t rest = s;
    for (int64_t i = static_cast<int64_t>(sorted.size()) - 1; i >= 0; --i) {
      coords[sorted[i]] = rest % mesh[sorted[i]];
      rest /= mesh[sorted[i]];
    }
    int64_t g = 0;
    for (int64_t a : axes)
      g = g * mesh[a] + coords[a];
    result->commToGroup[s] = static_cast<int>(g);
  }
  return Status::ok();
}

Status MpiCommunicator::create() {
  const std::string what = "communicator creation";
  // The handle MPI_Comm_idup writes lives in staging memory, so that a late
  // completion after a timeout writes into memory that stays valid.
  auto *handle = reinterpret_cast<MPI_Comm *>(staging(sizeof(MPI_Comm)));
  MPI_Request request;
  if (int rc = MPI_Comm_idup(MPI_COMM_WORLD, handle, &request);
      rc != MPI_SUCCESS)
    return mpiFailed(what, rc);
  if (Status s = wait(&request, what); !s)
    return s;
  world_ = *handle;
  MPI_Comm_set_errhandler(world_, MPI_ERRORS_RETURN);
  // Every rank is here: the blocking splits below cannot wait on a rank that
  // never comes (short of one dying in between).
  if (int rc = MPI_Ibarrier(world_, &request); rc != MPI_SUCCESS)
    return mpiFailed(what, rc);
  if (Status s = wait(&request, what); !s)
    return s;

  const std::vector<int64_t> &mesh = meshShape();
  std::vector<int64_t> nontrivial;
  for (size_t a = 0; a < mesh.size(); ++a)
    if (mesh[a] > 1)
      nontrivial.push_back(static_cast<int64_t>(a));
  std::vector<int64_t> coords = coordinates();
  uint32_t subsets = uint32_t(1) << nontrivial.size();
  for (uint32_t bits = 1; bits < subsets; ++bits) {
    uint32_t mask = 0;
    for (size_t i = 0; i < nontrivial.size(); ++i)
      if (bits & (uint32_t(1) << i))
        mask |= uint32_t(1) << nontrivial[i];
    // color: row-major index over the other axes; key: over these axes.
    int64_t color = 0, key = 0;
    for (size_t a = 0; a < mesh.size(); ++a) {
      if (mask & (uint32_t(1) << a))
        key = key * mesh[a] + coords[a];
      else
        color = color * mesh[a] + coords[a];
    }
    MPI_Comm comm;
    if (int rc = MPI_Comm_split(world_, static_cast<int>(color),
                                static_cast<int>(key), &comm);
        rc != MPI_SUCCESS)
      return mpiFailed(what, rc);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    comms_[mask] = comm;
  }
  return Status::ok();
}

Status MpiCommunicator::allReduce(void *buf, int64_t count, DType dtype,
                                  Reduction reduction,
                                  const std::vector<int64_t> &axes) {
  const char *what = "all_reduce";
  if (Status s = checkReduction(what, dtype, reduction, count); !s)
    return Status::error(prefix() + s.message());
  Group g;
  if (Status s = group(what, axes, &g); !s)
    return s;
  if (g.size == 1 || count == 0)
    return Status::ok();
  if (Status s = settle(what); !s)
    return s;
  size_t elem = dtypeSize(dtype);
  size_t bytes = static_cast<size_t>(count) * elem;
  uint8_t *stage = staging(bytes);
  std::memcpy(stage, buf, bytes);
  for (int64_t offset = 0; offset < count; offset += kMaxChunk) {
    int n = static_cast<int>(std::min(kMaxChunk, count - offset));
    MPI_Request request;
    if (int rc = MPI_Iallreduce(MPI_IN_PLACE, stage + offset * elem, n,
                                mpiType(dtype), mpiOp(reduction, dtype), g.comm,
                                &request);
        rc != MPI_SUCCESS)
      return mpiFailed(what, rc);
    if (Status s = wait(&request, what); !s)
      return s;
  }
  std::memcpy(buf, stage, bytes);
  return Status::ok();
}

Status MpiCommunicator::openBytes(const char *what, int64_t bytes,
                                  const char *per,
                                  const std::vector<int64_t> &axes,
                                  const void *in, void *out, Group *g,
                                  bool *done) {
  *done = true;
  if (bytes < 0)
    return Status::error(prefix() + what + ": negative size " +
                         std::to_string(bytes));
  if (bytes > INT_MAX)
    return Status::error(prefix() + what + ": " + std::to_string(bytes) +
                         " bytes per " + per +
                         " exceed the 2^31-1 MPI supports");
  if (Status s = group(what, axes, g); !s)
    return s;
  size_t chunk = static_cast<size_t>(bytes);
  if (g->size == 1) {
    if (chunk > 0 && in != out)
      std::memmove(out, in, chunk);
    return Status::ok();
  }
  if (chunk == 0)
    return Status::ok();
  *done = false;
  return settle(what);
}

Status MpiCommunicator::allGather(const void *in, void *out,
                                  int64_t bytesPerRank,
                                  const std::vector<int64_t> &axes) {
  const char *what = "all_gather";
  Group g;
  bool done = false;
  if (Status s =
          openBytes(what, bytesPerRank, "rank", axes, in, out, &g, &done);
      !s || done)
    return s;
  size_t chunk = static_cast<size_t>(bytesPerRank);
  int commRank = 0;
  MPI_Comm_rank(g.comm, &commRank);
  uint8_t *stage = staging(chunk * g.size);
  std::memcpy(stage + chunk * commRank, in, chunk);
  MPI_Request request;
  if (int rc =
          MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, stage,
                         static_cast<int>(chunk), MPI_BYTE, g.comm, &request);
      rc != MPI_SUCCESS)
    return mpiFailed(what, rc);
  if (Status s = wait(&request, what); !s)
    return s;
  auto *dst = static_cast<uint8_t *>(out);
  for (int s = 0; s < g.size; ++s)
    std::memcpy(dst + chunk * g.commToGroup[s], stage + chunk * s, chunk);
  return Status::ok();
}

Status MpiCommunicator::reduceScatter(const void *in, void *out,
                                      int64_t countPerRank, DType dtype,
                                      const std::vector<int64_t> &axes) {
  const char *what = "reduce_scatter";
  if (Status s = checkReduction(what, dtype, Reduction::Sum, countPerRank); !s)
    return Status::error(prefix() + s.message());
  if (countPerRank > INT_MAX)
    return Status::error(prefix() + what + ": " + std::to_string(countPerRank) +
                         " elements per rank exceed the 2^31-1 MPI supports");
  Group g;
  if (Status s = group(what, axes, &g); !s)
    return s;
  size_t chunk = static_cast<size_t>(countPerRank) * dtypeSize(dtype);
  if (g.size == 1) {
    if (chunk > 0 && in != out)
      std::memmove(out, in, chunk);
    return Status::ok();
  }
  if (chunk == 0)
    return Status::ok();
  if (Status s = settle(what); !s)
    return s;
  // Communicator rank s receives chunk s: put there the caller's chunk of
  // the member that is communicator rank s.
  uint8_t *stage = staging(chunk * (g.size + 1));
  const auto *src = static_cast<const uint8_t *>(in);
  for (int s = 0; s < g.size; ++s)
    std::memcpy(stage + chunk * s, src + chunk * g.commToGroup[s], chunk);
  uint8_t *result = stage + chunk * g.size;
  MPI_Request request;
  if (int rc = MPI_Ireduce_scatter_block(
          stage, result, static_cast<int>(countPerRank), mpiType(dtype),
          mpiOp(Reduction::Sum, dtype), g.comm, &request);
      rc != MPI_SUCCESS)
    return mpiFailed(what, rc);
  if (Status s = wait(&request, what); !s)
    return s;
  std::memcpy(out, result, chunk);
  return Status::ok();
}

Status MpiCommunicator::allToAll(const void *in, void *out,
                                 int64_t bytesPerPeer,
                                 const std::vector<int64_t> &axes) {
  const char *what = "all_to_all";
  Group g;
  bool done = false;
  if (Status s =
          openBytes(what, bytesPerPeer, "peer", axes, in, out, &g, &done);
      !s || done)
    return s;
  size_t chunk = static_cast<size_t>(bytesPerPeer);
  // Staged in communicator order both ways: send slot s holds the chunk for
  // the member that is communicator rank s, receive slot s what it sent.
  size_t n = static_cast<size_t>(g.size);
  uint8_t *stage = staging(2 * chunk * n);
  uint8_t *received = stage + chunk * n;
  const auto *src = static_cast<const uint8_t *>(in);
  for (int s = 0; s < g.size; ++s)
    std::memcpy(stage + chunk * s, src + chunk * g.commToGroup[s], chunk);
  MPI_Request request;
  if (int rc =
          MPI_Ialltoall(stage, static_cast<int>(chunk), MPI_BYTE, received,
                        static_cast<int>(chunk), MPI_BYTE, g.comm, &request);
      rc != MPI_SUCCESS)
    return mpiFailed(what, rc);
  if (Status s = wait(&request, what); !s)
    return s;
  auto *dst = static_cast<uint8_t *>(out);
  for (int s = 0; s < g.size; ++s)
    std::memcpy(dst + chunk * g.commToGroup[s], received + chunk * s, chunk);
  return Status::ok();
}

Status MpiCommunicator::broadcast(void *buf, int64_t bytes, int root,
                                  const std::vector<int64_t> &axes) {
  const char *what = "broadcast";
  if (bytes < 0)
    return Status::error(prefix() + what + ": negative size " +
                         std::to_string(bytes));
  Group g;
  if (Status s = group(what, axes, &g); !s)
    return s;
  if (root < 0 || root >= g.size)
    return Status::error(prefix() + what + ": root " + std::to_string(root) +
                         " is out of range for a group of " +
                         std::to_string(g.size) + " ranks");
  if (g.size == 1 || bytes == 0)
    return Status::ok();
  if (Status s = settle(what); !s)
    return s;
  int commRoot = static_cast<int>(
      std::find(g.commToGroup.begin(), g.commToGroup.end(), root) -
      g.commToGroup.begin());
  size_t size = static_cast<size_t>(bytes);
  uint8_t *stage = staging(size);
  std::memcpy(stage, buf, size);
  for (int64_t offset = 0; offset < bytes; offset += kMaxChunk) {
    int n = static_cast<int>(std::min(kMaxChunk, bytes - offset));
    MPI_Request request;
    if (int rc =
            MPI_Ibcast(stage + offset, n, MPI_BYTE, commRoot, g.comm, &request);
        rc != MPI_SUCCESS)
      return mpiFailed(what, rc);
    if (Status s = wait(&request, what); !s)
      return s;
  }
  std::memcpy(buf, stage, size);
  return Status::ok();
}

Status MpiCommunicator::barrier() {
  const char *what = "barrier";
  if (size_ == 1)
    return Status::ok();
  if (Status s = settle(what); !s)
    return s;
  MPI_Request request;
  if (int rc = MPI_Ibarrier(world_, &request); rc != MPI_SUCCESS)
    return mpiFailed(what, rc);
  return wait(&request, what);
}

} // namespace

Status makeMpiCommunicator(std::vector<int64_t> meshShape,
                           double timeoutSeconds,
                           std::unique_ptr<Communicator> *result) {
  if (!(timeoutSeconds > 0))
    return Status::error("the collective timeout must be positive, got " +
                         formatSeconds(timeoutSeconds) + " s");
  int64_t ranks = 1;
  for (int64_t d : meshShape) {
    if (d <= 0)
      return Status::error("mesh dims must be positive");
    if (ranks > INT_MAX / d)
      return Status::error("mesh has too many ranks");
    ranks *= d;
  }
  if (meshShape.size() > 31)
    return Status::error("mesh has more than 31 axes");
  // A rank whose launcher (mpirun, or its daemon) is killed must not run on
  // alone: it would go on computing and writing checkpoints beside the run
  // that resumes them.
  pid_t parent = ::getppid();
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent)
    std::raise(SIGKILL);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized)
    return Status::error("MPI was already finalized");
  if (!initialized) {
    int provided = 0;
    if (int rc =
            MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
        rc != MPI_SUCCESS)
      return Status::error("MPI_Init_thread failed: " + mpiErrorString(rc));
  }
  // Open MPI 4.1 raises errors of non-blocking collectives (e.g. a
  // truncated message between mismatched collectives) from MPI_Test through
  // MPI_COMM_WORLD's handler, whatever the handler of their communicator: make
  // them error codes, which the collectives return as a Status.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (ranks != size) {
    std::string shape;
    for (size_t i = 0; i < meshShape.size(); ++i)
      shape += (i ? "," : "") + std::to_string(meshShape[i]);
    return Status::error("rank " + std::to_string(rank) + ": mesh [" + shape +
                         "] has " + std::to_string(ranks) +
                         " ranks but MPI started " + std::to_string(size));
  }
  auto comm = std::make_unique<MpiCommunicator>(std::move(meshShape), rank,
                                                timeoutSeconds);
  if (Status s = comm->create(); !s)
    return s;
  *result = std::move(comm);
  return Status::ok();
}

void abortAllRanks(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (mpiIsActive()) {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }
  std::exit(code);
}

void finalizeMpi() {
  if (mpiIsActive())
    MPI_Finalize();
}

} // namespace cleave::rt

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
/// LeakSanitizer's hook, in the sanitized build: no leak report from a
/// process that started Open MPI. Open MPI keeps allocations until exit
/// and unloads its components (dlclose) in MPI_Finalize, so the reports'
/// stacks end in "<unknown module>" and cannot be suppressed by library
/// (test/fuzz/lsan.supp). Every other sanitizer check stays on in these
/// processes, and leak checking in every process that does not start MPI
/// (unit tests, single-rank runs, fuzz harnesses).
extern "C" int __lsan_is_turned_off() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized || finalized;
}
#endif
#endif

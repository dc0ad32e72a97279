//===- comm_test.cpp - Single-process communicator, collective kernels ----===//
//
// Without MPI: the single-process communicator, mesh geometry, load-time
// validation of the collective kernels, and launchRanks (which starts
// cleave-mpi-hello under mpirun).
//
//===----------------------------------------------------------------------===//

#include "test_util.h"

#include "cleave/runtime/comm.h"
#include "cleave/runtime/thread_ranks.h"

#include <chrono>
#include <cstdlib>

using namespace cleave::rt;
using namespace cleave::rt::test;

namespace {

bool contains(const std::string &haystack, const std::string &needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(SingleProcessComm, GeometryAndCopies) {
  std::unique_ptr<Communicator> c = makeSingleProcessCommunicator();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
  EXPECT_EQ(c->meshShape(), (std::vector<int64_t>{1}));
  EXPECT_EQ(c->coordinates(), (std::vector<int64_t>{0}));
  EXPECT_EQ(c->groupSize({0}), 1);
  EXPECT_EQ(c->groupRank({0}), 0);
  EXPECT_EQ(c->groupMembers({0}), (std::vector<int>{0}));

  std::vector<float> buf = {1, -2, 3};
  for (Reduction r : {Reduction::Sum, Reduction::Max, Reduction::Min}) {
    ASSERT_TRUE(c->allReduce(buf.data(), 3, DType::F32, r, {0}));
    EXPECT_EQ(buf, (std::vector<float>{1, -2, 3}));
  }
  std::vector<float> out(3, 0);
  ASSERT_TRUE(c->allGather(buf.data(), out.data(), 12, {0}));
  EXPECT_EQ(out, buf);
  std::vector<int64_t> in64 = {5, 6}, out64(2);
  ASSERT_TRUE(c->reduceScatter(in64.data(), out64.data(), 2, DType::I64, {}));
  EXPECT_EQ(out64, in64);
  ASSERT_TRUE(c->broadcast(buf.data(), 12, 0, {0}));
  EXPECT_TRUE(c->barrier());

  Status s = c->broadcast(buf.data(), 12, 1, {0});
  EXPECT_FALSE(s);
  EXPECT_TRUE(contains(s.message(), "root 1 is out of range")) << s.message();
  s = c->allReduce(buf.data(), 3, DType::F32, Reduction::Sum, {1});
  EXPECT_FALSE(s);
  EXPECT_TRUE(contains(s.message(),
                       "all_reduce: mesh axis 1 is out of range for a mesh "
                       "of shape [1]"))
      << s.message();
  s = c->allGather(buf.data(), out.data(), 12, {0, 0});
  EXPECT_TRUE(contains(s.message(), "mesh axis 0 repeats")) << s.message();
  uint8_t flags[2] = {1, 0};
  s = c->allReduce(flags, 2, DType::Bool, Reduction::Sum, {0});
  EXPECT_TRUE(contains(s.message(), "bool")) << s.message();
  EXPECT_TRUE(c->allReduce(flags, 2, DType::Bool, Reduction::Max, {0}));
}

TEST(SingleProcessComm, MeshesOfProductOne) {
  std::unique_ptr<Communicator> c = makeSingleProcessCommunicator({1, 1, 1});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->coordinates(), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(c->groupSize({2, 0}), 1);
  EXPECT_TRUE(c->checkAxes({2, 0, 1}));
  EXPECT_FALSE(c->checkAxes({3}));
  EXPECT_FALSE(makeSingleProcessCommunicator({2}));
  EXPECT_FALSE(makeSingleProcessCommunicator({1, 0}));
  EXPECT_FALSE(makeSingleProcessCommunicator({-1, -1}));
}

/// A communicator that pretends to be rank \p rank of a bigger mesh: only
/// its geometry is real (the collectives are never run).
class FakeMeshComm final : public Communicator {
public:
  FakeMeshComm(std::vector<int64_t> mesh, int rank)
      : Communicator(std::move(mesh)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override {
    int n = 1;
    for (int64_t d : meshShape())
      n *= static_cast<int>(d);
    return n;
  }
  double timeoutSeconds() const override { return 1; }
  void setTimeoutSeconds(double) override {}
  Status allReduce(void *, int64_t, DType, Reduction,
                   const std::vector<int64_t> &) override {
    return Status::error("fake");
  }
  Status allGather(const void *, void *, int64_t,
                   const std::vector<int64_t> &) override {
    return Status::error("fake");
  }
  Status reduceScatter(const void *, void *, int64_t, DType,
                       const std::vector<int64_t> &) override {
    return Status::error("fake");
  }
  Status allToAll(const void *, void *, int64_t,
                  const std::vector<int64_t> &) override {
    return Status::error("fake");
  }
  Status broadcast(void *, int64_t, int,
                   const std::vector<int64_t> &) override {
    return Status::error("fake");
  }
  Status barrier() override { return Status::error("fake"); }

private:
  int rank_;
};

TEST(MeshGeometry, RowMajorGroups) {
  // Mesh [2,3,2]; rank 9 = (1, 1, 1).
  FakeMeshComm c({2, 3, 2}, 9);
  EXPECT_EQ(c.coordinates(), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(c.groupSize({0, 2}), 4);
  EXPECT_EQ(c.groupMembers({1}), (std::vector<int>{7, 9, 11}));
  EXPECT_EQ(c.groupRank({1}), 1);
  EXPECT_EQ(c.groupMembers({0, 2}), (std::vector<int>{2, 3, 8, 9}));
  EXPECT_EQ(c.groupRank({0, 2}), 3);
  EXPECT_EQ(c.groupMembers({2, 0}), (std::vector<int>{2, 8, 3, 9}));
  EXPECT_EQ(c.groupRank({2, 0}), 3);
  EXPECT_EQ(c.groupMembers({1, 0}), (std::vector<int>{1, 7, 3, 9, 5, 11}));
  EXPECT_EQ(c.groupRank({1, 0}), 3);
  EXPECT_EQ(c.groupMembers({}), (std::vector<int>{9}));
  EXPECT_EQ(c.groupMembers({0, 1, 2}).size(), 12u);
  EXPECT_EQ(c.groupRank({0, 1, 2}), 9);
}

//===----------------------------------------------------------------------===//
// Collective kernels on one process
//===----------------------------------------------------------------------===//

Attrs axesAttr(std::vector<int64_t> axes, std::optional<int64_t> dim = {},
               std::optional<int64_t> reduction = {}) {
  Attrs a = {{"axes", {std::move(axes), {}}}};
  if (dim)
    a["dim"] = {{*dim}, {}};
  if (reduction)
    a["reduction"] = {{*reduction}, {}};
  return a;
}

TEST(CollectiveKernels, AreCopiesOnOneProcess) {
  HostTensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  for (int64_t red = 0; red < 3; ++red)
    EXPECT_EQ(values<float>(run1("all_reduce", {x}, DType::F32, {2, 3},
                                 axesAttr({0}, {}, red))),
              values<float>(x));
  EXPECT_EQ(
      values<float>(run1("all_reduce", {x}, DType::F32, {2, 3}, axesAttr({}))),
      values<float>(x));
  for (int64_t dim = 0; dim < 2; ++dim) {
    EXPECT_EQ(values<float>(run1("all_gather", {x}, DType::F32, {2, 3},
                                 axesAttr({0}, dim))),
              values<float>(x));
    EXPECT_EQ(values<float>(run1("reduce_scatter", {x}, DType::F32, {2, 3},
                                 axesAttr({0}, dim))),
              values<float>(x));
  }
  HostTensor b = boolean({3}, {1, 0, 1});
  EXPECT_EQ(values<uint8_t>(run1("all_reduce", {b}, DType::Bool, {3},
                                 axesAttr({0}, {}, 1))),
            values<uint8_t>(b));
  HostTensor i = i64({2}, {7, -8});
  EXPECT_EQ(values<int64_t>(
                run1("all_gather", {i}, DType::I64, {2}, axesAttr({0}, 0))),
            values<int64_t>(i));
}

std::string loadError(const std::string &kernel, const HostTensor &x,
                      DType dtype, Shape shape, const Attrs &attrs,
                      Communicator *comm = nullptr) {
  plan::Program p = singleKernelProgram(kernel, {x}, {{dtype, shape}}, attrs);
  std::unique_ptr<Executor> exec;
  Status s = Executor::create(p, &exec, comm);
  return s ? std::string() : s.message();
}

TEST(CollectiveKernels, LoadTimeValidation) {
  HostTensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  struct Case {
    std::string kernel;
    DType dtype;
    Shape shape;
    Attrs attrs;
    std::string error;
  };
  std::vector<Case> cases = {
      {"all_reduce", DType::F32, {2, 3}, {}, "missing attribute 'axes'"},
      {"all_reduce",
       DType::F32,
       {2, 3},
       axesAttr({1}),
       "attribute 'axes': mesh axis 1 is out of range for a mesh of shape [1]"},
      {"all_reduce",
       DType::F32,
       {2, 3},
       axesAttr({0, 0}),
       "mesh axis 0 repeats"},
      {"all_reduce", DType::F32, {2, 3}, axesAttr({-1}), "mesh axis -1"},
      {"all_reduce", DType::F32, {3, 2}, axesAttr({0}), "same shape"},
      {"all_reduce", DType::I64, {2, 3}, axesAttr({0}), "same dtype"},
      {"all_reduce",
       DType::F32,
       {2, 3},
       axesAttr({0}, {}, 3),
       "attribute 'reduction' 3"},
      {"all_gather",
       DType::F32,
       {2, 3},
       axesAttr({0}),
       "missing attribute 'dim'"},
      {"all_gather",
       DType::F32,
       {2, 3},
       axesAttr({0}, 2),
       "attribute 'dim' 2 is out of range"},
      {"all_gather",
       DType::F32,
       {4, 3},
       axesAttr({0}, 0),
       "result f32[4,3] is not operand f32[2,3] gathered along dim 0 over a "
       "group of 1 ranks"},
      {"all_gather", DType::F32, {2, 3, 1}, axesAttr({0}, 0), "not operand"},
      {"reduce_scatter",
       DType::F32,
       {1, 3},
       axesAttr({0}, 0),
       "operand f32[2,3] does not scatter to result f32[1,3] along dim 0 "
       "over a group of 1 ranks"},
      {"reduce_scatter",
       DType::F32,
       {2, 3},
       axesAttr({0}, -1),
       "attribute 'dim' -1"},
      {"reduce_scatter", DType::I32, {2, 3}, axesAttr({0}, 0), "same dtype"},
  };
  for (const Case &c : cases) {
    std::string e = loadError(c.kernel, x, c.dtype, c.shape, c.attrs);
    EXPECT_TRUE(contains(e, c.error)) << c.kernel << ": " << e;
    EXPECT_TRUE(contains(e, "instruction 0 ('" + c.kernel + "'")) << e;
  }
  HostTensor b = boolean({3}, {1, 0, 1});
  EXPECT_TRUE(contains(
      loadError("all_reduce", b, DType::Bool, {3}, axesAttr({0}, {}, 0)),
      "bool"));
  EXPECT_TRUE(contains(
      loadError("reduce_scatter", b, DType::Bool, {3}, axesAttr({0}, 0)),
      "bool"));
}

TEST(CollectiveKernels, AllToAllDimensionsAreCheckedAtLoad) {
  FakeMeshComm comm({2, 2}, 1);
  HostTensor x = f32({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  auto attrs = [](int64_t split, int64_t concat) {
    Attrs a = axesAttr({1});
    a["split_dim"] = {{split}, {}};
    a["concat_dim"] = {{concat}, {}};
    return a;
  };
  // Over a group of 2: [2, 4] split along 1, concatenated along 0.
  EXPECT_EQ(loadError("all_to_all", x, DType::F32, {4, 2}, attrs(1, 0), &comm),
            "");
  for (auto [split, concat] :
       {std::pair<int64_t, int64_t>{1, 1}, {2, 0}, {-1, 0}, {0, 5}})
    EXPECT_TRUE(contains(loadError("all_to_all", x, DType::F32, {4, 2},
                                   attrs(split, concat), &comm),
                         "are not two dimensions of operand f32[2,4]"))
        << split << ", " << concat;
  EXPECT_TRUE(contains(
      loadError("all_to_all", x, DType::F32, {2, 4}, attrs(1, 0), &comm),
      "is not operand f32[2,4] split along dim 1 and concatenated along dim "
      "0 over a group of 2 ranks"));
  EXPECT_TRUE(contains(loadError("all_to_all", x, DType::F32, {4, 2},
                                 Attrs(axesAttr({1})), &comm),
                       "missing attribute"));
}

TEST(CollectiveKernels, GroupSizesComeFromTheCommunicator) {
  // Rank 1 of mesh [2,2]: groups of 2 along either axis, 4 over both.
  FakeMeshComm comm({2, 2}, 1);
  HostTensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(
      loadError("all_gather", x, DType::F32, {2, 6}, axesAttr({1}, 1), &comm),
      "");
  EXPECT_EQ(loadError("all_gather", x, DType::F32, {8, 3}, axesAttr({1, 0}, 0),
                      &comm),
            "");
  EXPECT_TRUE(contains(
      loadError("all_gather", x, DType::F32, {2, 3}, axesAttr({0}, 1), &comm),
      "over a group of 2 ranks"));
  EXPECT_EQ(loadError("reduce_scatter", x, DType::F32, {1, 3}, axesAttr({0}, 0),
                      &comm),
            "");
  EXPECT_TRUE(contains(loadError("reduce_scatter", x, DType::F32, {2, 1},
                                 axesAttr({0, 1}, 1), &comm),
                       "over a group of 4 ranks"));
  EXPECT_TRUE(contains(
      loadError("all_reduce", x, DType::F32, {2, 3}, axesAttr({2}), &comm),
      "mesh axis 2 is out of range for a mesh of shape [2,2]"));
  // The kernel reports the communicator's run-time errors.
  plan::Program p = singleKernelProgram("all_reduce", {x},
                                        {{DType::F32, {2, 3}}}, axesAttr({0}));
  std::unique_ptr<Executor> exec;
  ASSERT_TRUE(Executor::create(p, &exec, &comm));
  std::vector<HostTensor> out;
  Status s = exec->run({x}, &out);
  EXPECT_FALSE(s);
  EXPECT_TRUE(contains(s.message(), "instruction 0 ('all_reduce'"))
      << s.message();
  EXPECT_TRUE(contains(s.message(), "fake")) << s.message();
}

//===----------------------------------------------------------------------===//
// Launching
//===----------------------------------------------------------------------===//

/// Sets an environment variable for the scope, restoring it after.
class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value) : name_(name) {
    const char *old = std::getenv(name);
    if (old)
      old_ = old;
    hadOld_ = old != nullptr;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (hadOld_)
      setenv(name_.c_str(), old_.c_str(), 1);
    else
      unsetenv(name_.c_str());
  }

private:
  std::string name_, old_;
  bool hadOld_ = false;
};

TEST(Launch, LaunchedByMpiRecognisesLaunchers) {
  ScopedEnv a("OMPI_COMM_WORLD_SIZE", nullptr), b("PMI_SIZE", nullptr),
      c("PMIX_RANK", nullptr), d("SLURM_PROCID", nullptr),
      e("SLURM_NTASKS", nullptr);
  EXPECT_FALSE(launchedByMpi());
  {
    ScopedEnv v("OMPI_COMM_WORLD_SIZE", "4");
    EXPECT_TRUE(launchedByMpi());
  }
  {
    ScopedEnv v("PMI_SIZE", "2");
    EXPECT_TRUE(launchedByMpi());
  }
  {
    ScopedEnv v("PMIX_RANK", "0");
    EXPECT_TRUE(launchedByMpi());
  }
  {
    ScopedEnv v("SLURM_PROCID", "0");
    EXPECT_FALSE(launchedByMpi());
    ScopedEnv w("SLURM_NTASKS", "2");
    EXPECT_TRUE(launchedByMpi());
  }
  EXPECT_FALSE(launchedByMpi());
}

#ifdef CLEAVE_MPI_HELLO
TEST(Launch, RunsRanksUnderMpirun) {
  Status s = launchRanks({CLEAVE_MPI_HELLO}, 3, 120);
  EXPECT_TRUE(s) << s.message();
}

TEST(Launch, PropagatesTheExitStatus) {
  Status s = launchRanks({CLEAVE_MPI_HELLO, "--exit", "5"}, 2, 120);
  EXPECT_FALSE(s);
  EXPECT_TRUE(contains(s.message(), "exited with status 5")) << s.message();
}

TEST(Launch, TerminatesAfterTheTimeout) {
  auto start = std::chrono::steady_clock::now();
  Status s = launchRanks({CLEAVE_MPI_HELLO, "--sleep", "60"}, 2, 2);
  double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_FALSE(s);
  EXPECT_TRUE(contains(s.message(), "did not finish within 2 s"))
      << s.message();
  EXPECT_LT(elapsed, 20);
}
#endif

TEST(Launch, MissingMpirunIsAClearError) {
  ScopedEnv path("PATH", "/nonexistent");
  Status s = launchRanks({"true"}, 2, 10);
  EXPECT_FALSE(s);
  EXPECT_TRUE(contains(s.message(), "mpirun was not found on PATH"))
      << s.message();
  EXPECT_FALSE(launchRanks({}, 2, 10));
  EXPECT_FALSE(launchRanks({"true"}, 0, 10));
}

} // namespace

namespace cleave::rt {
namespace {

/// A collective on each of \p ranks' 3 ranks works: the mesh is usable.
void expectSumsOnEveryRank(ThreadRanks &ranks) {
  std::vector<float> sums(3);
  ASSERT_TRUE(ranks.run([&](int r) {
    float v = static_cast<float>(r + 1);
    Status st = ranks.comm(r).allReduce(&v, 1, DType::F32, Reduction::Sum, {0});
    sums[r] = v;
    return st;
  }));
  EXPECT_EQ(sums, std::vector<float>(3, 6.0f));
}

TEST(ThreadRanks, AxisViewOfTwoAxes) {
  // dp 2 x tp 2 x tp_inner 2: the tp ranks are the group over axes {1, 2},
  // numbered row-major, and the view's collectives run over that group.
  std::unique_ptr<ThreadRanks> ranks;
  ASSERT_TRUE(ThreadRanks::create({2, 2, 2}, 10, &ranks));
  std::vector<float> sums(8);
  std::vector<int> viewRanks(8), viewSizes(8);
  ASSERT_TRUE(ranks->run([&](int r) {
    std::unique_ptr<Communicator> tp = makeAxisView(ranks->comm(r), {1, 2});
    if (!tp)
      return Status::error("no view");
    viewRanks[r] = tp->rank();
    viewSizes[r] = tp->size();
    float v = static_cast<float>(r);
    Status s = tp->allReduce(&v, 1, DType::F32, Reduction::Sum, {0});
    sums[r] = v;
    return s;
  }));
  EXPECT_EQ(viewRanks, (std::vector<int>{0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_EQ(viewSizes, std::vector<int>(8, 4));
  EXPECT_EQ(sums, (std::vector<float>{6, 6, 6, 6, 22, 22, 22, 22}));
  EXPECT_FALSE(makeAxisView(ranks->comm(0), std::vector<int64_t>{1, 1}));
  EXPECT_FALSE(makeAxisView(ranks->comm(0), std::vector<int64_t>{3}));
  EXPECT_FALSE(makeAxisView(ranks->comm(0), std::vector<int64_t>{}));
}

TEST(ThreadRanks, AgreedFailuresLeaveTheMeshUsable) {
  std::unique_ptr<ThreadRanks> ranks;
  ASSERT_TRUE(ThreadRanks::create(3, 10, &ranks));
  // Every rank refuses alike (a checkpoint onto a full disk): the mesh stays.
  Status s = ranks->runAgreed(
      [](int) { return Status::error("no space left on device"); });
  // Any rank's line (they fail alike; the first to return is named).
  EXPECT_EQ(s.message().rfind("rank ", 0), 0u) << s.message();
  EXPECT_NE(s.message().find(": no space left on device"), std::string::npos)
      << s.message();
  EXPECT_FALSE(ranks->broken());
  expectSumsOnEveryRank(*ranks);
  // The message is the cause's, not an echo of another rank's failure.
  s = ranks->runAgreed([](int r) {
    return Status::error(r == 2 ? "the disk is full"
                                : "another rank failed to write");
  });
  EXPECT_EQ(s.message(), "rank 2: the disk is full");
  EXPECT_FALSE(ranks->broken());
  // Ranks that disagree may be mid-collective: the mesh is broken.
  s = ranks->runAgreed(
      [](int r) { return r == 1 ? Status::error("only me") : Status::ok(); });
  EXPECT_EQ(s.message(), "rank 1: only me");
  EXPECT_TRUE(ranks->broken());
  EXPECT_FALSE(ranks->run([](int) { return Status::ok(); }));
}

TEST(ThreadRanks, AFailureBeforeTheAgreementAbortsTheWaitingRanks) {
  std::unique_ptr<ThreadRanks> ranks;
  ASSERT_TRUE(ThreadRanks::create(2, 30, &ranks));
  ranks->setAgreeGraceSeconds(0.2);
  auto start = std::chrono::steady_clock::now();
  // Rank 1 fails on its own (an allocation, say); rank 0 waits in a
  // collective for it and would wait the whole timeout.
  Status s = ranks->runAgreed([&](int r) {
    if (r == 1)
      return Status::error("out of memory");
    float v = 1;
    return ranks->comm(r).allReduce(&v, 1, DType::F32, Reduction::Sum, {0});
  });
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_EQ(s.message(), "rank 1: out of memory");
  EXPECT_LT(seconds, 10.0);
  EXPECT_TRUE(ranks->broken());
}

TEST(ThreadRanks, AStepRefusedBeforeItWroteStateLeavesTheMeshUsable) {
  std::unique_ptr<ThreadRanks> ranks;
  ASSERT_TRUE(ThreadRanks::create(3, 30, &ranks));
  // Rank 2 refuses its batch mid-step after a first collective; ranks 0
  // and 1 are waiting in a second one, half-done rounds in the hub.
  std::vector<bool> kept(3, true);
  auto step = [&](int r) {
    float v = 1;
    if (Status s =
            ranks->comm(r).allReduce(&v, 1, DType::F32, Reduction::Sum, {0});
        !s)
      return s;
    if (r == 2)
      return Status::error("label 61 is out of range");
    return ranks->comm(r).allReduce(&v, 1, DType::F32, Reduction::Sum, {0});
  };
  auto isKept = [&](int r) { return static_cast<bool>(kept[r]); };
  EXPECT_EQ(ranks->run(step, isKept).message(),
            "rank 2: label 61 is out of range");
  EXPECT_FALSE(ranks->broken());
  expectSumsOnEveryRank(*ranks);
  // A rank that wrote its state first breaks the mesh, as does a rank that
  // finished its step.
  kept[1] = false;
  EXPECT_FALSE(ranks->run(step, isKept));
  EXPECT_TRUE(ranks->broken());
}

} // namespace
} // namespace cleave::rt

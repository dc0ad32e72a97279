//===- collectives_test.cpp - The Communicator API over MPI ---------------===//

#include "core/convert.h"
#include "mpi_test_util.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

using namespace cleave::rt;
using namespace cleave::rt::mpitest;

namespace {

/// Element i of rank r's data: small integers (exact in f32), of both signs,
/// different on every rank.
double sample(int r, int64_t i) {
  return static_cast<double>((r * 7 + i * 3) % 11) - 5 + r * 0.5;
}

template <typename T> std::vector<T> rankData(int r, int64_t n) {
  std::vector<T> v(n);
  for (int64_t i = 0; i < n; ++i)
    v[i] = static_cast<T>(sample(r, i));
  return v;
}

RANK_TEST(Mesh, Geometry) {
  Communicator &m4 = mesh4();
  Communicator &m22 = mesh22();
  EXPECT_EQ(m4.size(), 4);
  EXPECT_EQ(m22.size(), 4);
  EXPECT_EQ(m4.rank(), m22.rank());
  int r = m22.rank();
  EXPECT_EQ(m4.coordinates(), (std::vector<int64_t>{r}));
  EXPECT_EQ(m22.coordinates(), (std::vector<int64_t>{r / 2, r % 2}));
  EXPECT_EQ(m22.groupSize({0}), 2);
  EXPECT_EQ(m22.groupRank({0}), r / 2);
  EXPECT_EQ(m22.groupRank({1}), r % 2);
  EXPECT_EQ(m22.groupRank({0, 1}), r);
  EXPECT_EQ(m22.groupRank({1, 0}), (r % 2) * 2 + r / 2);
  EXPECT_EQ(m22.groupMembers({0}), (std::vector<int>{r % 2, 2 + r % 2}));
  EXPECT_EQ(m22.groupMembers({1}),
            (std::vector<int>{r / 2 * 2, r / 2 * 2 + 1}));
  EXPECT_EQ(m22.groupMembers({1, 0}), (std::vector<int>{0, 2, 1, 3}));
  EXPECT_EQ(m22.groupMembers({}), (std::vector<int>{r}));
  EXPECT_FALSE(m22.checkAxes({2}));
  EXPECT_FALSE(m22.checkAxes({0, 0}));
  EXPECT_TRUE(m22.barrier());
}

template <typename T>
void checkAllReduce(const MeshCase &c, DType dtype, Reduction reduction) {
  const int64_t n = 37;
  std::vector<T> buf = rankData<T>(c.comm->rank(), n);
  Status s = c.comm->allReduce(buf.data(), n, dtype, reduction, c.axes);
  std::string what =
      c.name() + " " + dtypeName(dtype) + " " + reductionName(reduction);
  ASSERT_TRUE(s) << what << ": " << s.message();
  std::vector<int> members = c.comm->groupMembers(c.axes);
  for (int64_t i = 0; i < n; ++i) {
    T expected = static_cast<T>(sample(members[0], i));
    for (size_t k = 1; k < members.size(); ++k) {
      T v = static_cast<T>(sample(members[k], i));
      expected = reduction == Reduction::Sum   ? T(expected + v)
                 : reduction == Reduction::Max ? std::max(expected, v)
                                               : std::min(expected, v);
    }
    ASSERT_EQ(buf[i], expected) << what << " at " << i;
  }
}

RANK_TEST(Collectives, AllReduceEveryDTypeAndReduction) {
  for (const MeshCase &c : meshCases())
    for (Reduction red : {Reduction::Sum, Reduction::Max, Reduction::Min}) {
      checkAllReduce<float>(c, DType::F32, red);
      checkAllReduce<int64_t>(c, DType::I64, red);
      checkAllReduce<int32_t>(c, DType::I32, red);
    }
}

// Mixed precision's bf16 and f16 sums (MPI has neither type: Cleave's own
// MPI_Op widens each pair and rounds once); the samples and their sums are
// exact in both, so every reduction order gives the same bits.
RANK_TEST(Collectives, AllReduceAndReduceScatterHalfPrecision) {
  for (const MeshCase &c : meshCases())
    for (DType d : {DType::BF16, DType::F16}) {
      auto narrow = [d](double x) {
        float f = static_cast<float>(x);
        return d == DType::BF16 ? floatToBf16(f) : floatToHalf(f);
      };
      auto widen = [d](uint16_t x) {
        return d == DType::BF16 ? bf16ToFloat(x) : halfToFloat(x);
      };
      std::vector<int> members = c.comm->groupMembers(c.axes);
      for (Reduction red : {Reduction::Sum, Reduction::Max, Reduction::Min}) {
        const int64_t n = 37;
        std::vector<uint16_t> buf(n);
        for (int64_t i = 0; i < n; ++i)
          buf[i] = narrow(sample(c.comm->rank(), i));
        ASSERT_TRUE(c.comm->allReduce(buf.data(), n, d, red, c.axes));
        for (int64_t i = 0; i < n; ++i) {
          double want = sample(members[0], i);
          for (size_t k = 1; k < members.size(); ++k) {
            double v = sample(members[k], i);
            want = red == Reduction::Sum   ? want + v
                   : red == Reduction::Max ? std::max(want, v)
                                           : std::min(want, v);
          }
          ASSERT_EQ(widen(buf[i]), static_cast<float>(want))
              << c.name() << " " << dtypeName(d) << " at " << i;
        }
      }
      int64_t g = static_cast<int64_t>(members.size());
      int64_t me = c.comm->groupRank(c.axes);
      const int64_t n = 9;
      std::vector<uint16_t> in(g * n), out(n);
      for (int64_t i = 0; i < g * n; ++i)
        in[i] = narrow(sample(c.comm->rank(), i));
      ASSERT_TRUE(c.comm->reduceScatter(in.data(), out.data(), n, d, c.axes));
      for (int64_t i = 0; i < n; ++i) {
        double want = 0;
        for (int m : members)
          want += sample(m, me * n + i);
        ASSERT_EQ(widen(out[i]), static_cast<float>(want))
            << c.name() << " " << dtypeName(d) << " at " << i;
      }
    }
}

RANK_TEST(Collectives, AllReduceBoolIsOrAndAnd) {
  for (const MeshCase &c : meshCases()) {
    std::vector<int> members = c.comm->groupMembers(c.axes);
    // Element i is true on rank r when bit r of i is set.
    std::vector<uint8_t> any(16), all(16);
    for (int i = 0; i < 16; ++i)
      any[i] = all[i] = (i >> c.comm->rank()) & 1;
    ASSERT_TRUE(
        c.comm->allReduce(any.data(), 16, DType::Bool, Reduction::Max, c.axes));
    ASSERT_TRUE(
        c.comm->allReduce(all.data(), 16, DType::Bool, Reduction::Min, c.axes));
    for (int i = 0; i < 16; ++i) {
      bool a = false, b = true;
      for (int m : members) {
        a = a || ((i >> m) & 1);
        b = b && ((i >> m) & 1);
      }
      EXPECT_EQ(any[i], a) << c.name() << " at " << i;
      EXPECT_EQ(all[i], b) << c.name() << " at " << i;
    }
    std::vector<uint8_t> bad(4);
    Status s =
        c.comm->allReduce(bad.data(), 4, DType::Bool, Reduction::Sum, c.axes);
    EXPECT_FALSE(s);
    EXPECT_NE(s.message().find("bool"), std::string::npos) << s.message();
  }
}

RANK_TEST(Collectives, AllGatherConcatenatesInGroupOrder) {
  for (const MeshCase &c : meshCases()) {
    const int64_t n = 10; // i64 elements: 80 bytes per rank
    std::vector<int64_t> in = rankData<int64_t>(c.comm->rank(), n);
    std::vector<int> members = c.comm->groupMembers(c.axes);
    std::vector<int64_t> out(n * members.size(), -999);
    Status s = c.comm->allGather(in.data(), out.data(), n * 8, c.axes);
    ASSERT_TRUE(s) << c.name() << ": " << s.message();
    for (size_t k = 0; k < members.size(); ++k)
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(out[k * n + i], static_cast<int64_t>(sample(members[k], i)))
            << c.name() << " member " << k << " at " << i;
  }
}

RANK_TEST(Collectives, AllToAllSendsEachMemberItsChunk) {
  for (const MeshCase &c : meshCases()) {
    std::vector<int> members = c.comm->groupMembers(c.axes);
    int64_t g = static_cast<int64_t>(members.size());
    int64_t me = c.comm->groupRank(c.axes);
    const int64_t n = 5; // floats per member
    std::vector<float> in = rankData<float>(c.comm->rank(), g * n);
    std::vector<float> out(g * n, -999);
    Status s = c.comm->allToAll(in.data(), out.data(), n * 4, c.axes);
    ASSERT_TRUE(s) << c.name() << ": " << s.message();
    // Chunk k of out is what member k sent this rank: its chunk `me`.
    for (int64_t k = 0; k < g; ++k)
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(out[k * n + i],
                  static_cast<float>(sample(members[k], me * n + i)))
            << c.name() << " from member " << k << " at " << i;
  }
}

RANK_TEST(Collectives, ReduceScatterKeepsThisRanksChunk) {
  for (const MeshCase &c : meshCases()) {
    std::vector<int> members = c.comm->groupMembers(c.axes);
    int64_t g = static_cast<int64_t>(members.size());
    int64_t me = c.comm->groupRank(c.axes);
    const int64_t n = 9;
    std::vector<float> in = rankData<float>(c.comm->rank(), g * n);
    std::vector<float> out(n, -999);
    Status s =
        c.comm->reduceScatter(in.data(), out.data(), n, DType::F32, c.axes);
    ASSERT_TRUE(s) << c.name() << ": " << s.message();
    for (int64_t i = 0; i < n; ++i) {
      double expected = 0;
      for (int m : members)
        expected += static_cast<float>(sample(m, me * n + i));
      ASSERT_EQ(out[i], static_cast<float>(expected))
          << c.name() << " at " << i;
    }
    std::vector<int32_t> inI(g * 3), outI(3);
    for (int64_t i = 0; i < g * 3; ++i)
      inI[i] = static_cast<int32_t>(i + 100 * c.comm->rank());
    ASSERT_TRUE(
        c.comm->reduceScatter(inI.data(), outI.data(), 3, DType::I32, c.axes));
    for (int64_t i = 0; i < 3; ++i) {
      int32_t expected = 0;
      for (int m : members)
        expected += static_cast<int32_t>(me * 3 + i + 100 * m);
      EXPECT_EQ(outI[i], expected) << c.name() << " i32 at " << i;
    }
  }
}

RANK_TEST(Collectives, BroadcastFromEveryRoot) {
  for (const MeshCase &c : meshCases()) {
    std::vector<int> members = c.comm->groupMembers(c.axes);
    for (int root = 0; root < static_cast<int>(members.size()); ++root) {
      std::vector<float> buf = rankData<float>(c.comm->rank(), 13);
      Status s = c.comm->broadcast(buf.data(), 13 * 4, root, c.axes);
      ASSERT_TRUE(s) << c.name() << ": " << s.message();
      EXPECT_EQ(buf, rankData<float>(members[root], 13))
          << c.name() << " root " << root;
    }
    std::vector<float> buf(1);
    Status s = c.comm->broadcast(buf.data(), 4,
                                 static_cast<int>(members.size()), c.axes);
    EXPECT_FALSE(s);
    EXPECT_NE(s.message().find("out of range"), std::string::npos)
        << s.message();
  }
}

RANK_TEST(Collectives, LargeBuffersAndEmptyCounts) {
  // Several MiB per rank, and zero-sized collectives (no-ops on every rank).
  const int64_t n = 3 << 20;
  std::vector<float> buf(n, static_cast<float>(mesh22().rank() + 1));
  ASSERT_TRUE(
      mesh22().allReduce(buf.data(), n, DType::F32, Reduction::Sum, {0, 1}));
  EXPECT_EQ(buf.front(), 10.0f);
  EXPECT_EQ(buf.back(), 10.0f);
  ASSERT_TRUE(
      mesh22().allReduce(buf.data(), 0, DType::F32, Reduction::Sum, {0, 1}));
  ASSERT_TRUE(mesh4().allGather(buf.data(), buf.data() + 8, 0, {0}));
  ASSERT_TRUE(
      mesh4().reduceScatter(buf.data(), buf.data(), 0, DType::F32, {0}));
  ASSERT_TRUE(mesh4().broadcast(buf.data(), 0, 0, {0}));
}

RANK_TEST(Collectives, BadAxesAreErrorsNamingTheRank) {
  float x = 1;
  Status s = mesh22().allReduce(&x, 1, DType::F32, Reduction::Sum, {2});
  EXPECT_FALSE(s);
  EXPECT_NE(s.message().find("rank " + std::to_string(mesh22().rank()) +
                             ": all_reduce: mesh axis 2 is out of range"),
            std::string::npos)
      << s.message();
  s = mesh22().allGather(&x, &x, 4, {1, 1});
  EXPECT_FALSE(s);
  EXPECT_NE(s.message().find("repeats"), std::string::npos) << s.message();
}

} // namespace

namespace {

RANK_TEST(Collectives, SmallAllReduceLatency) {
  // Informational: the mean time of a 1-element all_reduce over 4 ranks.
  float x = 1;
  ASSERT_TRUE(mesh4().barrier());
  const int n = 200;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i)
    ASSERT_TRUE(mesh4().allReduce(&x, 1, DType::F32, Reduction::Max, {0}));
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  if (mesh4().rank() == 0)
    std::printf("[rank 0] 1-element all_reduce over 4 ranks: %.1f us\n",
                seconds / n * 1e6);
}

} // namespace

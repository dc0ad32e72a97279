//===- kernels_test.cpp - Collective kernels in plans over MPI ------------===//
//
// The collective kernels run through the Executor on every rank and are
// compared with references rebuilt locally from every member's input; a
// tensor-parallel MLP is compared with the unsharded plan run by a single
// process.
//
//===----------------------------------------------------------------------===//

#include "mpi_test_util.h"

using namespace cleave::rt;
using namespace cleave::rt::test;
using namespace cleave::rt::mpitest;

namespace {

/// Rank r's input of shape \p s: integers (exact sums in f32).
HostTensor rankInput(DType dtype, const Shape &s, int r) {
  if (dtype != DType::F32)
    return randomInt(dtype, s, 1000 + r, -50, 50);
  HostTensor ints = randomInt(DType::I32, s, 1000 + r, -50, 50);
  HostTensor t = HostTensor::zeros(DType::F32, s);
  for (int64_t i = 0; i < t.numElements(); ++i)
    t.data<float>()[i] = static_cast<float>(ints.data<int32_t>()[i]);
  return t;
}

double element(const HostTensor &t, int64_t i) {
  switch (t.dtype) {
  case DType::F32:
    return t.data<float>()[i];
  case DType::I64:
    return static_cast<double>(t.data<int64_t>()[i]);
  case DType::I32:
    return t.data<int32_t>()[i];
  case DType::Bool:
    return t.data<uint8_t>()[i];
  default: // storage dtypes: collectives never carry them
    return 0;
  }
}

/// Runs a one-kernel plan over \p comm; fails the test on any error.
HostTensor runCollective(Communicator &comm, const std::string &kernel,
                         const HostTensor &x, const Shape &resultShape,
                         const Attrs &attrs) {
  plan::Program p =
      singleKernelProgram(kernel, {x}, {{x.dtype, resultShape}}, attrs);
  std::unique_ptr<Executor> exec;
  Status s = Executor::create(p, &exec, &comm);
  EXPECT_TRUE(s) << kernel << ": " << s.message();
  if (!s)
    return {};
  std::vector<HostTensor> out;
  s = exec->run({x}, &out);
  EXPECT_TRUE(s) << kernel << ": " << s.message();
  return s ? out[0] : HostTensor();
}

RANK_TEST(Kernels, AllReduce) {
  for (const MeshCase &c : meshCases())
    for (DType dtype : {DType::F32, DType::I64, DType::I32})
      for (int64_t red = 0; red < 3; ++red) {
        Shape shape = {3, 5};
        HostTensor x = rankInput(dtype, shape, c.comm->rank());
        HostTensor y =
            runCollective(*c.comm, "all_reduce", x, shape,
                          {{"axes", {c.axes, {}}}, {"reduction", {{red}, {}}}});
        ASSERT_EQ(y.shape, shape) << c.name();
        std::vector<int> members = c.comm->groupMembers(c.axes);
        for (int64_t i = 0; i < numel(shape); ++i) {
          double e = element(rankInput(dtype, shape, members[0]), i);
          for (size_t k = 1; k < members.size(); ++k) {
            double v = element(rankInput(dtype, shape, members[k]), i);
            e = red == 0 ? e + v : red == 1 ? std::max(e, v) : std::min(e, v);
          }
          ASSERT_EQ(element(y, i), e) << c.name() << " " << dtypeName(dtype)
                                      << " reduction " << red << " at " << i;
        }
      }
}

struct DimCase {
  Shape shape; // all_gather: the operand; reduce_scatter: the result
  int64_t dim;
};
const std::vector<DimCase> kDimCases = {
    {{3, 4}, 0}, {{3, 4}, 1}, {{2, 3, 4}, 0}, {{2, 3, 4}, 1}, {{2, 3, 4}, 2}};

Shape scaled(Shape s, int64_t dim, int64_t g) {
  s[dim] *= g;
  return s;
}

RANK_TEST(Kernels, AllGatherAlongEveryDim) {
  for (const MeshCase &c : meshCases())
    for (const DimCase &d : kDimCases)
      for (DType dtype : {DType::F32, DType::I64}) {
        std::vector<int> members = c.comm->groupMembers(c.axes);
        int64_t g = static_cast<int64_t>(members.size());
        Shape yShape = scaled(d.shape, d.dim, g);
        HostTensor x = rankInput(dtype, d.shape, c.comm->rank());
        HostTensor y =
            runCollective(*c.comm, "all_gather", x, yShape,
                          {{"axes", {c.axes, {}}}, {"dim", {{d.dim}, {}}}});
        ASSERT_EQ(y.shape, yShape) << c.name();
        std::vector<HostTensor> inputs;
        for (int m : members)
          inputs.push_back(rankInput(dtype, d.shape, m));
        for (int64_t i = 0; i < numel(yShape); ++i) {
          std::vector<int64_t> idx = unravel(i, yShape);
          int64_t k = idx[d.dim] / d.shape[d.dim];
          idx[d.dim] %= d.shape[d.dim];
          ASSERT_EQ(element(y, i), element(inputs[k], ravel(idx, d.shape)))
              << c.name() << " dim " << d.dim << " at " << i;
        }
      }
}

RANK_TEST(Kernels, ReduceScatterAlongEveryDim) {
  for (const MeshCase &c : meshCases())
    for (const DimCase &d : kDimCases)
      for (DType dtype : {DType::F32, DType::I32}) {
        std::vector<int> members = c.comm->groupMembers(c.axes);
        int64_t g = static_cast<int64_t>(members.size());
        int64_t me = c.comm->groupRank(c.axes);
        Shape xShape = scaled(d.shape, d.dim, g);
        HostTensor x = rankInput(dtype, xShape, c.comm->rank());
        HostTensor y =
            runCollective(*c.comm, "reduce_scatter", x, d.shape,
                          {{"axes", {c.axes, {}}}, {"dim", {{d.dim}, {}}}});
        ASSERT_EQ(y.shape, d.shape) << c.name();
        std::vector<HostTensor> inputs;
        for (int m : members)
          inputs.push_back(rankInput(dtype, xShape, m));
        for (int64_t i = 0; i < numel(d.shape); ++i) {
          std::vector<int64_t> idx = unravel(i, d.shape);
          idx[d.dim] += me * d.shape[d.dim];
          double e = 0;
          for (const HostTensor &in : inputs)
            e += element(in, ravel(idx, xShape));
          ASSERT_EQ(element(y, i), e)
              << c.name() << " dim " << d.dim << " at " << i;
        }
      }
}

RANK_TEST(Kernels, AllToAllMovesTheSplitBetweenEveryPairOfDims) {
  // t: the chunk one member sends another. x splits split_dim into one
  // chunk per member; y concatenates what arrives along concat_dim.
  const Shape t = {2, 3, 2};
  for (const MeshCase &c : meshCases())
    for (int64_t split = 0; split < 3; ++split)
      for (int64_t concat = 0; concat < 3; ++concat) {
        if (split == concat)
          continue;
        std::vector<int> members = c.comm->groupMembers(c.axes);
        int64_t g = static_cast<int64_t>(members.size());
        int64_t me = c.comm->groupRank(c.axes);
        Shape xShape = scaled(t, split, g), yShape = scaled(t, concat, g);
        for (DType dtype : {DType::F32, DType::I64}) {
          HostTensor x = rankInput(dtype, xShape, c.comm->rank());
          HostTensor y = runCollective(*c.comm, "all_to_all", x, yShape,
                                       {{"axes", {c.axes, {}}},
                                        {"split_dim", {{split}, {}}},
                                        {"concat_dim", {{concat}, {}}}});
          ASSERT_EQ(y.shape, yShape) << c.name();
          for (int64_t i = 0; i < numel(yShape); ++i) {
            std::vector<int64_t> idx = unravel(i, yShape);
            int64_t from = idx[concat] / t[concat];
            idx[concat] %= t[concat];
            idx[split] += me * t[split];
            HostTensor in = rankInput(dtype, xShape, members[from]);
            ASSERT_EQ(element(y, i), element(in, ravel(idx, xShape)))
                << c.name() << " split " << split << " concat " << concat
                << " at " << i;
          }
        }
      }
}

RANK_TEST(Kernels, AllToAllShapesThatDoNotMatchTheGroupFailAtLoad) {
  HostTensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  plan::Program p =
      singleKernelProgram("all_to_all", {x}, {{DType::F32, {1, 6}}},
                          {{"axes", {{0}, {}}},
                           {"split_dim", {{0}, {}}},
                           {"concat_dim", {{1}, {}}}});
  std::unique_ptr<Executor> exec;
  Status s = Executor::create(p, &exec, &mesh4());
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find("over a group of 4 ranks"), std::string::npos)
      << s.message();
  EXPECT_TRUE(Executor::create(p, &exec, &mesh22()));
}

RANK_TEST(Kernels, GroupSizeMismatchFailsAtLoad) {
  // Shapes for a group of 2, run over a group of 4.
  HostTensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  plan::Program p =
      singleKernelProgram("all_gather", {x}, {{DType::F32, {4, 3}}},
                          {{"axes", {{0}, {}}}, {"dim", {{0}, {}}}});
  std::unique_ptr<Executor> exec;
  Status s = Executor::create(p, &exec, &mesh4());
  EXPECT_FALSE(s);
  EXPECT_NE(s.message().find("group of 4 ranks"), std::string::npos)
      << s.message();
  // The same plan loads over a group of 2 of mesh [2,2].
  EXPECT_TRUE(Executor::create(p, &exec, &mesh22()));
  p = singleKernelProgram("reduce_scatter", {f32({3}, {1, 2, 3})},
                          {{DType::F32, {1}}},
                          {{"axes", {{0, 1}, {}}}, {"dim", {{0}, {}}}});
  s = Executor::create(p, &exec, &mesh22());
  EXPECT_FALSE(s);
  EXPECT_NE(s.message().find("does not scatter"), std::string::npos)
      << s.message();
  p = singleKernelProgram("all_reduce", {x}, {{DType::F32, {2, 3}}},
                          {{"axes", {{1}, {}}}});
  s = Executor::create(p, &exec, &mesh4());
  EXPECT_FALSE(s);
  EXPECT_NE(s.message().find("mesh axis 1 is out of range"), std::string::npos)
      << s.message();
}

/// The MLP relu(x @ w1) @ w2 as a plan: the unsharded reference when run by
/// one process, and each rank's shard in the tensor-parallel plan.
struct Mlp {
  static constexpr int64_t kBatch = 4, kIn = 6, kHidden = 8, kOut = 4;
  HostTensor x = randomF32({kBatch, kIn}, 7);
  HostTensor w1 = randomF32({kIn, kHidden}, 8);
  HostTensor w2 = randomF32({kHidden, kOut}, 9);

  /// Columns [begin, begin + n) of a 2-D tensor.
  static HostTensor columns(const HostTensor &t, int64_t begin, int64_t n) {
    HostTensor r = HostTensor::zeros(t.dtype, {t.shape[0], n});
    for (int64_t i = 0; i < t.shape[0]; ++i)
      for (int64_t j = 0; j < n; ++j)
        r.data<float>()[i * n + j] =
            t.data<float>()[i * t.shape[1] + begin + j];
    return r;
  }
  static HostTensor rows(const HostTensor &t, int64_t begin, int64_t n) {
    HostTensor r = HostTensor::zeros(t.dtype, {n, t.shape[1]});
    std::memcpy(r.bytes.data(), t.bytes.data() + begin * t.shape[1] * 4,
                r.bytes.size());
    return r;
  }

  /// Outputs h = x @ w1 and y = relu(h) @ w2, computed by one process.
  std::vector<HostTensor> reference(const HostTensor &xs) const {
    ProgramBuilder b;
    int64_t batch = xs.shape[0];
    int in = b.input("x", DType::F32, xs.shape);
    int a = b.constant(w1), c = b.constant(w2);
    int h = b.arena(DType::F32, {batch, kHidden});
    int r = b.arena(DType::F32, {batch, kHidden});
    int y = b.arena(DType::F32, {batch, kOut});
    b.instruction("matmul", {in, a}, {h});
    b.instruction("relu", {h}, {r});
    b.instruction("matmul", {r, c}, {y});
    b.output(h, "h");
    b.output(y, "y");
    std::unique_ptr<Executor> exec;
    Status s = Executor::create(b.program, &exec);
    EXPECT_TRUE(s) << s.message();
    std::vector<HostTensor> out;
    s = exec->run({xs}, &out);
    EXPECT_TRUE(s) << s.message();
    return out;
  }
};

/// Tensor parallelism over \p tp (w1 split by columns, w2 by rows), data
/// parallelism over \p dp (the batch split by rows).
void checkTensorParallelMlp(Communicator &comm, std::vector<int64_t> tp,
                            std::vector<int64_t> dp) {
  Mlp mlp;
  int64_t t = comm.groupSize(tp), tRank = comm.groupRank(tp);
  int64_t d = comm.groupSize(dp), dRank = comm.groupRank(dp);
  int64_t batch = Mlp::kBatch / d, hidden = Mlp::kHidden / t;
  HostTensor xs = Mlp::rows(mlp.x, dRank * batch, batch);
  HostTensor w1s = Mlp::columns(mlp.w1, tRank * hidden, hidden);
  HostTensor w2s = Mlp::rows(mlp.w2, tRank * hidden, hidden);

  ProgramBuilder b;
  int in = b.input("x", DType::F32, {batch, Mlp::kIn});
  int a = b.constant(w1s), c = b.constant(w2s);
  int h = b.arena(DType::F32, {batch, hidden});
  int r = b.arena(DType::F32, {batch, hidden});
  int partial = b.arena(DType::F32, {batch, Mlp::kOut});
  int y = b.arena(DType::F32, {batch, Mlp::kOut});
  int hAll = b.arena(DType::F32, {batch, Mlp::kHidden});
  int yCols = b.arena(DType::F32, {batch, Mlp::kOut / t});
  int yAll = b.arena(DType::F32, {Mlp::kBatch, Mlp::kOut});
  b.instruction("matmul", {in, a}, {h});
  b.instruction("relu", {h}, {r});
  b.instruction("matmul", {r, c}, {partial});
  b.instruction("all_reduce", {partial}, {y}, {{"axes", {tp, {}}}});
  b.instruction("all_gather", {h}, {hAll},
                {{"axes", {tp, {}}}, {"dim", {{1}, {}}}});
  b.instruction("reduce_scatter", {partial}, {yCols},
                {{"axes", {tp, {}}}, {"dim", {{1}, {}}}});
  b.instruction("all_gather", {y}, {yAll},
                {{"axes", {dp, {}}}, {"dim", {{0}, {}}}});
  b.output(y, "y");
  b.output(hAll, "h");
  b.output(yCols, "y_cols");
  b.output(yAll, "y_all");
  std::unique_ptr<Executor> exec;
  Status s = Executor::create(b.program, &exec, &comm);
  ASSERT_TRUE(s) << s.message();
  std::vector<HostTensor> out;
  for (int repeat = 0; repeat < 2; ++repeat) {
    s = exec->run({xs}, &out);
    ASSERT_TRUE(s) << s.message();
  }

  std::vector<HostTensor> local = mlp.reference(xs);
  std::vector<HostTensor> full = mlp.reference(mlp.x);
  auto asDouble = [](const HostTensor &t) {
    std::vector<float> v = values<float>(t);
    return std::vector<double>(v.begin(), v.end());
  };
  expectNear(values<float>(out[0]), asDouble(local[1]), 1e-5, "y");
  expectNear(values<float>(out[1]), asDouble(local[0]), 1e-5, "h");
  int64_t cols = Mlp::kOut / t;
  expectNear(values<float>(out[2]),
             asDouble(Mlp::columns(local[1], tRank * cols, cols)), 1e-5,
             "y_cols");
  expectNear(values<float>(out[3]), asDouble(full[1]), 1e-5, "y_all");
}

RANK_TEST(Kernels, TensorParallelMlpMatchesOneProcess) {
  checkTensorParallelMlp(mesh4(), {0}, {});
  checkTensorParallelMlp(mesh22(), {1}, {0});
  checkTensorParallelMlp(mesh22(), {0}, {1});
  checkTensorParallelMlp(mesh22(), {1, 0}, {});
}

} // namespace

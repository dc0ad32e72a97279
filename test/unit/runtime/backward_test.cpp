//===- backward_test.cpp - Adjoint and random kernels ---------------------===//
//
// Each adjoint kernel is checked against a naive reference and through the
// adjoint identity <f(x), g> == <x, f^T(g)> with its forward kernel.
//
//===----------------------------------------------------------------------===//

#include "core/philox.h"
#include "test_util.h"

#include <algorithm>
#include <limits>

using namespace cleave::rt;
using namespace cleave::rt::test;

namespace {

/// <a, b> in double, and sum |a_i b_i| to scale the tolerance.
struct Dot {
  double value = 0, scale = 0;
};
Dot dot(const HostTensor &a, const HostTensor &b) {
  std::vector<float> av = values<float>(a), bv = values<float>(b);
  EXPECT_EQ(av.size(), bv.size());
  Dot d;
  for (size_t i = 0; i < av.size() && i < bv.size(); ++i) {
    d.value += double(av[i]) * bv[i];
    d.scale += std::fabs(double(av[i]) * bv[i]);
  }
  return d;
}
void expectSameDot(const Dot &a, const Dot &b, const std::string &what) {
  double tol = 1e-5 * std::max({a.scale, b.scale, 1.0});
  EXPECT_NEAR(a.value, b.value, tol) << what;
}

/// Runs \p kernel into a result that a `copy` has first filled with junk
/// bytes, so that a kernel that does not write every element of its result
/// (arena slots are reused) gives a wrong answer.
HostTensor runOverJunk(const std::string &kernel,
                       const std::vector<HostTensor> &operands, DType dtype,
                       const Shape &shape, const Attrs &attrs) {
  HostTensor junk = HostTensor::zeros(dtype, shape);
  std::fill(junk.bytes.begin(), junk.bytes.end(), uint8_t(0x41));
  ProgramBuilder b;
  int j = b.input("junk", dtype, shape);
  std::vector<int> ops;
  for (size_t i = 0; i < operands.size(); ++i)
    ops.push_back(b.input("in" + std::to_string(i), operands[i].dtype,
                          operands[i].shape));
  int r = b.arena(dtype, shape);
  b.instruction("copy", {j}, {r});
  b.instruction(kernel, ops, {r}, attrs);
  b.output(r, "out");
  std::unique_ptr<Executor> exec;
  Status s = Executor::create(b.program, &exec);
  EXPECT_TRUE(s.isOk()) << s.message();
  if (!s)
    return {};
  std::vector<HostTensor> inputs = {junk};
  inputs.insert(inputs.end(), operands.begin(), operands.end());
  std::vector<HostTensor> out;
  s = exec->run(inputs, &out);
  EXPECT_TRUE(s.isOk()) << s.message();
  return out.empty() ? HostTensor() : out[0];
}

void expectLoadError(const plan::Program &p, const std::string &needle) {
  std::string error = createError(p);
  EXPECT_FALSE(error.empty()) << "plan loaded, expected: " << needle;
  EXPECT_NE(error.find(needle), std::string::npos) << error;
}

//===----------------------------------------------------------------------===//
// Philox and random_uniform
//===----------------------------------------------------------------------===//

TEST(Philox, KnownAnswerVectors) {
  // Random123's kat_vectors for philox4x32_10.
  EXPECT_EQ(philox::philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (philox::Counter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(
      philox::philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
                            {0xffffffff, 0xffffffff}),
      (philox::Counter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  // The third vector of the set (pi digits).
  EXPECT_EQ(
      philox::philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
                            {0xa4093822, 0x299f31d0}),
      (philox::Counter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

/// The contract's formula for element e, straight from the block function.
float referenceUniform(int64_t seed, int64_t stream, int64_t step, uint64_t e) {
  uint64_t s = static_cast<uint64_t>(seed);
  uint64_t block = e / 4;
  philox::Counter c = {static_cast<uint32_t>(block),
                       static_cast<uint32_t>(block >> 32),
                       static_cast<uint32_t>(static_cast<uint64_t>(step)),
                       static_cast<uint32_t>(static_cast<uint64_t>(stream))};
  philox::Counter words = philox::philox4x32_10(
      c, {static_cast<uint32_t>(s), static_cast<uint32_t>(s >> 32)});
  return static_cast<float>(words[e % 4] >> 8) / 16777216.0f;
}

Attrs randomAttrs(int64_t seed, int64_t stream) {
  return {{"seed", {{seed}, {}}}, {"stream", {{stream}, {}}}};
}

HostTensor stepTensor(int64_t step) {
  return makeTensor<int64_t>(DType::I64, {}, {step});
}

TEST(RandomUniform, MatchesTheContractFormula) {
  struct Case {
    int64_t seed, stream, step;
    Shape shape;
  };
  std::vector<Case> cases = {
      {0, 0, 0, {7}},
      {42, 3, 17, {3, 5, 2}},
      // Seed with both key words set, negative step and stream (low 32 bits).
      {int64_t(0x123456789abcdefLL), -5, -1, {2, 9}},
      {-1, 0x7fffffff, int64_t(1) << 40, {}},
  };
  for (const Case &c : cases) {
    HostTensor r = run1("random_uniform", {stepTensor(c.step)}, DType::F32,
                        c.shape, randomAttrs(c.seed, c.stream));
    std::vector<float> v = values<float>(r);
    ASSERT_EQ(v.size(), static_cast<size_t>(numel(c.shape)));
    for (size_t e = 0; e < v.size(); ++e)
      EXPECT_EQ(v[e], referenceUniform(c.seed, c.stream, c.step, e))
          << "seed " << c.seed << " element " << e;
  }
}

TEST(RandomUniform, DeterministicInRangeWithMeanOneHalf) {
  Shape s = {300, 401}; // Large enough for the parallel path; odd sizes.
  Attrs attrs = randomAttrs(1234, 7);
  HostTensor a = run1("random_uniform", {stepTensor(5)}, DType::F32, s, attrs);
  HostTensor b = run1("random_uniform", {stepTensor(5)}, DType::F32, s, attrs);
  EXPECT_EQ(a.bytes, b.bytes);
  std::vector<float> v = values<float>(a);
  double sum = 0, sq = 0;
  for (float x : v) {
    ASSERT_GE(x, 0.0f);
    ASSERT_LT(x, 1.0f);
    sum += x;
    sq += double(x) * x;
  }
  double mean = sum / v.size(), var = sq / v.size() - mean * mean;
  EXPECT_NEAR(mean, 0.5, 0.005);
  EXPECT_NEAR(var, 1.0 / 12.0, 0.002);
  // Spot-check elements across the parallel pieces.
  for (size_t e :
       {size_t(0), size_t(4095), size_t(4096), size_t(77777), v.size() - 1})
    EXPECT_EQ(v[e], referenceUniform(1234, 7, 5, e)) << e;
}

TEST(RandomUniform, DiffersAcrossSeedStepAndStream) {
  Shape s = {64};
  auto gen = [&](int64_t seed, int64_t stream, int64_t step) {
    return values<float>(run1("random_uniform", {stepTensor(step)}, DType::F32,
                              s, randomAttrs(seed, stream)));
  };
  std::vector<float> base = gen(1, 0, 0);
  for (const std::vector<float> &other :
       {gen(2, 0, 0), gen(1, 1, 0), gen(1, 0, 1),
        gen(int64_t(1) << 32, 0, 0)}) {
    int same = 0;
    for (size_t i = 0; i < base.size(); ++i)
      same += base[i] == other[i];
    EXPECT_LT(same, 3);
  }
}

TEST(RandomUniform, ShardsReproduceTheFullTensor) {
  Shape global = {6, 10, 7};
  Attrs attrs = randomAttrs(99, 2);
  std::vector<float> full = values<float>(
      run1("random_uniform", {stepTensor(3)}, DType::F32, global, attrs));
  struct Shard {
    std::vector<int64_t> offsets;
    Shape shape;
  };
  std::vector<Shard> shards = {
      {{2, 3, 1}, {3, 5, 4}},  // interior box
      {{3, 0, 0}, {3, 10, 7}}, // full trailing dims: one contiguous run
      {{0, 4, 0}, {6, 2, 7}},  // full innermost dim
      {{0, 0, 6}, {6, 10, 1}}, // a column
      {{0, 0, 0}, {6, 10, 7}}, // the whole tensor
  };
  for (const Shard &sh : shards) {
    Attrs a = attrs;
    a["offsets"] = {sh.offsets, {}};
    a["global_shape"] = {global, {}};
    std::vector<float> part = values<float>(
        run1("random_uniform", {stepTensor(3)}, DType::F32, sh.shape, a));
    ASSERT_EQ(part.size(), static_cast<size_t>(numel(sh.shape)));
    for (int64_t i = 0; i < numel(sh.shape); ++i) {
      std::vector<int64_t> idx = unravel(i, sh.shape);
      for (size_t d = 0; d < idx.size(); ++d)
        idx[d] += sh.offsets[d];
      EXPECT_EQ(part[i], full[ravel(idx, global)]) << "shard element " << i;
    }
  }
  // A large shard, for the parallel path: rows of a [512, 1024] tensor.
  Shape bigGlobal = {512, 1024}, bigShard = {200, 300};
  Attrs a = attrs;
  a["offsets"] = {{100, 500}, {}};
  a["global_shape"] = {bigGlobal, {}};
  std::vector<float> part = values<float>(
      run1("random_uniform", {stepTensor(8)}, DType::F32, bigShard, a));
  for (int64_t i = 0; i < numel(bigShard); i += 97) {
    std::vector<int64_t> idx = unravel(i, bigShard);
    uint64_t e = (idx[0] + 100) * 1024 + idx[1] + 500;
    EXPECT_EQ(part[i], referenceUniform(99, 2, 8, e)) << i;
  }
}

TEST(RandomUniform, BadPlansAreLoadErrors) {
  HostTensor step = stepTensor(0);
  Attrs ok = randomAttrs(1, 2);
  auto program = [&](const std::optional<HostTensor> &s, DType dtype,
                     const Shape &shape, const Attrs &attrs) {
    return singleKernelProgram("random_uniform", {s}, {{dtype, shape}}, attrs);
  };
  // Step not an i64 scalar.
  expectLoadError(program(i64({1}, {0}), DType::F32, {4}, ok), "scalar");
  expectLoadError(program(i32({}, {0}), DType::F32, {4}, ok), "scalar");
  // Result not f32.
  expectLoadError(program(step, DType::I32, {4}, ok), "f32");
  // Missing seed / stream.
  expectLoadError(program(step, DType::F32, {4}, {{"seed", {{1}, {}}}}),
                  "stream");
  expectLoadError(program(step, DType::F32, {4}, {{"stream", {{1}, {}}}}),
                  "seed");
  // offsets without global_shape, wrong counts, shard outside the tensor.
  Attrs a = ok;
  a["offsets"] = {{0, 0}, {}};
  expectLoadError(program(step, DType::F32, {2, 2}, a), "together");
  a["global_shape"] = {{4}, {}};
  expectLoadError(program(step, DType::F32, {2, 2}, a), "global_shape");
  a["global_shape"] = {{4, 4}, {}};
  a["offsets"] = {{0, 3}, {}};
  expectLoadError(program(step, DType::F32, {2, 2}, a), "does not fit");
  a["offsets"] = {{-1, 0}, {}};
  expectLoadError(program(step, DType::F32, {2, 2}, a), "does not fit");
  a["offsets"] = {{0, 0}, {}};
  a["global_shape"] = {{int64_t(1) << 40, int64_t(1) << 40}, {}};
  expectLoadError(program(step, DType::F32, {2, 2}, a), "2^63");
  // Arity.
  expectLoadError(
      singleKernelProgram("random_uniform", {}, {{DType::F32, {2}}}, ok),
      "operands");
}

//===----------------------------------------------------------------------===//
// scatter_add
//===----------------------------------------------------------------------===//

/// Serial reference in f32: the same summation order the contract implies.
HostTensor naiveScatterAdd(const HostTensor &updates,
                           const std::vector<int64_t> &indices,
                           const Shape &result, int64_t axis) {
  HostTensor r = HostTensor::zeros(DType::F32, result);
  int64_t extent = result[axis];
  const Shape &us = updates.shape;
  int64_t idxRank =
      static_cast<int64_t>(us.size()) - static_cast<int64_t>(result.size()) + 1;
  for (int64_t i = 0; i < numel(us); ++i) {
    std::vector<int64_t> u = unravel(i, us);
    // Flat index into the indices tensor from dims [axis, axis + idxRank).
    int64_t j = 0;
    for (int64_t d = axis; d < axis + idxRank; ++d)
      j = j * us[d] + u[d];
    int64_t v = indices[j] < 0 ? indices[j] + extent : indices[j];
    std::vector<int64_t> ri(u.begin(), u.begin() + axis);
    ri.push_back(v);
    ri.insert(ri.end(), u.begin() + axis + idxRank, u.end());
    r.data<float>()[ravel(ri, result)] += updates.data<float>()[i];
  }
  return r;
}

HostTensor indexTensor(DType dtype, const Shape &shape,
                       const std::vector<int64_t> &v) {
  if (dtype == DType::I64)
    return i64(shape, v);
  return i32(shape, std::vector<int32_t>(v.begin(), v.end()));
}

TEST(ScatterAdd, MatchesNaiveAndIsTheAdjointOfGather) {
  struct Case {
    Shape data;
    int64_t axis;
    Shape idxShape;
    std::vector<int64_t> idx;
  };
  std::vector<Case> cases = {
      // Axis 0 (embedding gradient), duplicates and negatives.
      {{5, 3}, 0, {6}, {0, -1, 2, 4, 0, -5}},
      // Axis 1, 2-D indices, duplicates, negatives.
      {{3, 4, 2}, 1, {2, 3}, {0, -1, 2, -4, 3, 3}},
      // Last axis, scalar-like 1-element indices.
      {{2, 3, 4}, 2, {1}, {-2}},
      // Rank-0 indices: updates drop the axis.
      {{4, 3}, 0, {}, {2}},
  };
  for (const Case &c : cases)
    for (DType idt : {DType::I32, DType::I64}) {
      Attrs attrs = {{"axis", {{c.axis}, {}}}};
      HostTensor x = randomF32(c.data, 201);
      HostTensor idx = indexTensor(idt, c.idxShape, c.idx);
      Shape us(c.data.begin(), c.data.begin() + c.axis);
      us.insert(us.end(), c.idxShape.begin(), c.idxShape.end());
      us.insert(us.end(), c.data.begin() + c.axis + 1, c.data.end());
      HostTensor g = randomF32(us, 202);
      HostTensor y = run1("gather", {x, idx}, DType::F32, us, attrs);
      HostTensor dx = run1("scatter_add", {g, idx}, DType::F32, c.data, attrs);
      EXPECT_EQ(values<float>(dx),
                values<float>(naiveScatterAdd(g, c.idx, c.data, c.axis)));
      expectSameDot(dot(y, g), dot(x, dx), "gather/scatter_add adjoint");
    }
}

TEST(ScatterAdd, LargeIsDeterministicAndSerialExact) {
  // Few destination rows, many duplicates, wide rows: the column-blocked
  // parallel path. The result must equal the serial f32 loop bit for bit.
  std::mt19937 gen(7);
  std::uniform_int_distribution<int64_t> pick(-6, 5);
  for (const Shape &data : {Shape{6, 1000}, Shape{3, 6, 129}}) {
    int64_t axis = data.size() == 2 ? 0 : 1;
    std::vector<int64_t> idx(3000);
    for (int64_t &v : idx)
      v = pick(gen);
    Shape us(data.begin(), data.begin() + axis);
    us.push_back(3000);
    us.insert(us.end(), data.begin() + axis + 1, data.end());
    HostTensor g = randomF32(us, 211);
    HostTensor ids = i64({3000}, idx);
    Attrs attrs = {{"axis", {{axis}, {}}}};
    HostTensor a = run1("scatter_add", {g, ids}, DType::F32, data, attrs);
    HostTensor b = run1("scatter_add", {g, ids}, DType::F32, data, attrs);
    EXPECT_EQ(a.bytes, b.bytes);
    EXPECT_EQ(values<float>(a),
              values<float>(naiveScatterAdd(g, idx, data, axis)));
  }
  // Many destination rows (parallel over rows), 1-element rows.
  std::vector<int64_t> idx(50000);
  std::uniform_int_distribution<int64_t> wide(-40000, 39999);
  for (int64_t &v : idx)
    v = wide(gen);
  HostTensor g = randomF32({50000}, 212);
  HostTensor r = run1("scatter_add", {g, i64({50000}, idx)}, DType::F32,
                      {40000}, {{"axis", {{0}, {}}}});
  EXPECT_EQ(values<float>(r),
            values<float>(naiveScatterAdd(g, idx, {40000}, 0)));
}

TEST(ScatterAdd, WritesEveryResultElement) {
  HostTensor g = randomF32({2, 3}, 221);
  for (int64_t axis : {0, 1}) {
    Shape rs = axis == 0 ? Shape{4, 3} : Shape{2, 5};
    Shape us = axis == 0 ? Shape{2, 3} : Shape{2, 3};
    std::vector<int64_t> idx =
        axis == 0 ? std::vector<int64_t>{2, 2} : std::vector<int64_t>{1, -1, 1};
    HostTensor ids = i64({static_cast<int64_t>(idx.size())}, idx);
    HostTensor r = runOverJunk("scatter_add", {g, ids}, DType::F32, rs,
                               {{"axis", {{axis}, {}}}});
    EXPECT_EQ(values<float>(r),
              values<float>(naiveScatterAdd(g, idx, rs, axis)));
  }
  // No updates at all: the result is all zeros.
  HostTensor r = runOverJunk("scatter_add", {f32({0, 3}, {}), i32({0}, {})},
                             DType::F32, {4, 3}, {{"axis", {{0}, {}}}});
  EXPECT_EQ(values<float>(r), std::vector<float>(12, 0.0f));
}

TEST(ScatterAdd, OutOfRangeIsARunError) {
  HostTensor g = randomF32({3, 2}, 231);
  HostTensor ids = i32({3}, {0, 4, 1});
  plan::Program p = singleKernelProgram(
      "scatter_add", {g, ids}, {{DType::F32, {4, 2}}}, {{"axis", {{0}, {}}}});
  std::unique_ptr<Executor> exec;
  ASSERT_TRUE(Executor::create(p, &exec).isOk());
  std::vector<HostTensor> out;
  Status s = exec->run({g, ids}, &out);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("index 4"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("scatter_add"), std::string::npos) << s.message();
  ids.data<int32_t>()[1] = -5;
  s = exec->run({g, ids}, &out);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("index -5"), std::string::npos) << s.message();
}

TEST(ScatterAdd, BadPlansAreLoadErrors) {
  HostTensor g = randomF32({3, 2}, 1);
  HostTensor ids = i64({3}, {0, 1, 2});
  Attrs axis0 = {{"axis", {{0}, {}}}};
  // Updates not result[:axis] ++ indices.shape ++ result[axis+1:].
  expectLoadError(singleKernelProgram("scatter_add", {g, ids},
                                      {{DType::F32, {4, 3}}}, axis0),
                  "shape");
  expectLoadError(singleKernelProgram("scatter_add", {g, ids},
                                      {{DType::F32, {4, 2}}},
                                      {{"axis", {{1}, {}}}}),
                  "shape");
  // Axis out of range or missing.
  expectLoadError(singleKernelProgram("scatter_add", {g, ids},
                                      {{DType::F32, {4, 2}}},
                                      {{"axis", {{2}, {}}}}),
                  "axis");
  expectLoadError(
      singleKernelProgram("scatter_add", {g, ids}, {{DType::F32, {4, 2}}}),
      "axis");
  // Index and value dtypes.
  expectLoadError(singleKernelProgram("scatter_add", {g, randomF32({3}, 2)},
                                      {{DType::F32, {4, 2}}}, axis0),
                  "i32 or i64");
  expectLoadError(singleKernelProgram("scatter_add", {g, ids},
                                      {{DType::I64, {4, 2}}}, axis0),
                  "f32");
}

//===----------------------------------------------------------------------===//
// slice_scatter
//===----------------------------------------------------------------------===//

struct SliceCase {
  Shape full;
  std::vector<int64_t> starts, steps;
  Shape part;
};
const std::vector<SliceCase> kSliceCases = {
    {{5, 6, 3}, {4, 1, 0}, {-2, 2, 1}, {3, 3, 3}},
    {{5, 6, 3}, {0, 5, 2}, {1, -1, -1}, {5, 6, 3}},
    {{5, 6, 3}, {1, 0, 1}, {3, 5, 1}, {2, 2, 2}},
    {{5, 6, 3}, {4, 5, 2}, {-1, -3, -2}, {5, 2, 2}},
    {{7}, {2}, {100}, {1}},           // one element: any step
    {{4, 0}, {1, 0}, {1, 1}, {2, 0}}, // empty
};

TEST(SliceScatter, MatchesNaiveAndIsTheAdjointOfSlice) {
  for (const SliceCase &c : kSliceCases) {
    Attrs attrs = {{"starts", {c.starts, {}}}, {"steps", {c.steps, {}}}};
    HostTensor x = randomF32(c.full, 301);
    HostTensor g = randomF32(c.part, 302);
    HostTensor y = run1("slice", {x}, DType::F32, c.part, attrs);
    HostTensor dx = run1("slice_scatter", {g}, DType::F32, c.full, attrs);
    std::vector<float> expected(numel(c.full), 0.0f);
    std::vector<float> gv = values<float>(g);
    for (int64_t i = 0; i < numel(c.part); ++i) {
      std::vector<int64_t> idx = unravel(i, c.part);
      for (size_t d = 0; d < idx.size(); ++d)
        idx[d] = c.starts[d] + idx[d] * c.steps[d];
      expected[ravel(idx, c.full)] = gv[i];
    }
    EXPECT_EQ(values<float>(dx), expected);
    expectSameDot(dot(y, g), dot(x, dx), "slice/slice_scatter adjoint");
  }
}

TEST(SliceScatter, AnyDTypeAndEveryElementWritten) {
  Attrs attrs = {{"starts", {{1, 3}, {}}}, {"steps", {{2, -1}, {}}}};
  // i64 over a junk-filled result, so that zeroing is observable.
  HostTensor r = runOverJunk("slice_scatter", {i64({2, 2}, {1, 2, 3, 4})},
                             DType::I64, {4, 4}, attrs);
  EXPECT_EQ(values<int64_t>(r), (std::vector<int64_t>{0, 0, 0, 0, 0, 0, 2, 1, 0,
                                                      0, 0, 0, 0, 0, 4, 3}));
  // An operand covering the whole result (negative steps).
  r = runOverJunk("slice_scatter", {i64({2, 2}, {1, 2, 3, 4})}, DType::I64,
                  {2, 2},
                  {{"starts", {{1, 1}, {}}}, {"steps", {{-1, -1}, {}}}});
  EXPECT_EQ(values<int64_t>(r), (std::vector<int64_t>{4, 3, 2, 1}));
  // An empty operand.
  r = runOverJunk("slice_scatter", {f32({0, 2}, {})}, DType::F32, {3, 2},
                  {{"starts", {{0, 0}, {}}}});
  EXPECT_EQ(values<float>(r), std::vector<float>(6, 0.0f));
  HostTensor b = runOverJunk("slice_scatter", {boolean({2, 2}, {1, 0, 1, 1})},
                             DType::Bool, {4, 4}, attrs);
  EXPECT_EQ(values<uint8_t>(b), (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 0, 1, 0,
                                                      0, 0, 0, 0, 0, 1, 1}));
  // Steps default to 1, like slice.
  HostTensor s = run1("slice_scatter", {i32({2}, {5, 6})}, DType::I32, {4},
                      {{"starts", {{1}, {}}}});
  EXPECT_EQ(values<int32_t>(s), (std::vector<int32_t>{0, 5, 6, 0}));
}

TEST(SliceScatter, BadPlansAreLoadErrors) {
  HostTensor g = randomF32({3}, 1);
  auto program = [&](const HostTensor &in, DType dtype, const Shape &shape,
                     const Attrs &attrs) {
    return singleKernelProgram("slice_scatter", {in}, {{dtype, shape}}, attrs);
  };
  // Writes past the end, before the start, zero step.
  expectLoadError(program(g, DType::F32, {5},
                          {{"starts", {{1}, {}}}, {"steps", {{2}, {}}}}),
                  "leaves the result");
  expectLoadError(program(g, DType::F32, {5},
                          {{"starts", {{1}, {}}}, {"steps", {{-1}, {}}}}),
                  "leaves the result");
  expectLoadError(program(g, DType::F32, {5},
                          {{"starts", {{1}, {}}}, {"steps", {{0}, {}}}}),
                  "zero step");
  // A step whose product overflows.
  expectLoadError(
      program(g, DType::F32, {5},
              {{"starts", {{0}, {}}}, {"steps", {{int64_t(1) << 62}, {}}}}),
      "leaves the result");
  // dtype, rank, attribute counts.
  expectLoadError(program(g, DType::I32, {5}, {{"starts", {{0}, {}}}}),
                  "dtype");
  expectLoadError(program(g, DType::F32, {5, 1}, {{"starts", {{0, 0}, {}}}}),
                  "rank");
  expectLoadError(program(g, DType::F32, {5}, {{"starts", {{0, 0}, {}}}}),
                  "starts");
  expectLoadError(program(g, DType::F32, {5}, {}), "starts");
}

//===----------------------------------------------------------------------===//
// conv2d_backward_input / conv2d_backward_filter
//===----------------------------------------------------------------------===//

struct ConvCase {
  int64_t n, c, h, w, f, kh, kw;
  std::vector<int64_t> strides, pads, dilations;
  int64_t groups;

  int64_t oh() const {
    return (h + pads[0] + pads[2] - dilations[0] * (kh - 1) - 1) / strides[0] +
           1;
  }
  int64_t ow() const {
    return (w + pads[1] + pads[3] - dilations[1] * (kw - 1) - 1) / strides[1] +
           1;
  }
  Shape xShape() const { return {n, c, h, w}; }
  Shape wShape() const { return {f, c / groups, kh, kw}; }
  Shape yShape() const { return {n, f, oh(), ow()}; }
  Attrs attrs() const {
    return {{"strides", {strides, {}}},
            {"pads", {pads, {}}},
            {"dilations", {dilations, {}}},
            {"groups", {{groups}, {}}}};
  }
};

const std::vector<ConvCase> kConvCases = {
    // Groups, asymmetric pads, dilation, stride.
    {2, 4, 7, 6, 6, 3, 2, {2, 1}, {1, 0, 2, 1}, {1, 2}, 2},
    // Plain 3x3, same padding.
    {1, 3, 8, 8, 5, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1},
    // Pointwise (no im2col), ungrouped and grouped.
    {2, 6, 5, 4, 4, 1, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1},
    {2, 6, 5, 4, 9, 1, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}, 3},
    // Depthwise, stride 2.
    {2, 4, 6, 6, 8, 3, 3, {2, 2}, {1, 1, 1, 1}, {1, 1}, 4},
    // Stride larger than the kernel (skipped inputs), non-square.
    {1, 2, 11, 7, 3, 2, 2, {3, 4}, {0, 1, 0, 0}, {1, 1}, 1},
    // 1x1 with stride and padding (not the pointwise path).
    {2, 3, 6, 5, 4, 1, 1, {2, 2}, {1, 0, 0, 1}, {1, 1}, 1},
    // Non-square kernel, dilation 3, floor mode leaves trailing rows unused.
    {1, 2, 10, 9, 2, 1, 3, {2, 1}, {0, 2, 1, 0}, {1, 3}, 1},
    // Padding wider than the kernel: windows entirely in the padding.
    {1, 2, 3, 3, 2, 2, 2, {1, 1}, {3, 3, 3, 3}, {1, 1}, 1},
    // Large enough for the parallel col2im / im2col paths.
    {2, 32, 24, 24, 16, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, 4},
    {1, 8, 30, 28, 8, 5, 3, {2, 1}, {2, 1, 2, 1}, {2, 2}, 1},
};

/// Naive adjoints in double.
void naiveConvBackward(const ConvCase &k, const std::vector<float> &x,
                       const std::vector<float> &w, const std::vector<float> &g,
                       std::vector<double> *dx, std::vector<double> *dw) {
  dx->assign(numel(k.xShape()), 0);
  dw->assign(numel(k.wShape()), 0);
  int64_t cg = k.c / k.groups, fg = k.f / k.groups;
  Shape ys = k.yShape();
  for (int64_t i = 0; i < numel(ys); ++i) {
    auto idx = unravel(i, ys);
    int64_t n = idx[0], f = idx[1], oy = idx[2], ox = idx[3];
    int64_t grp = f / fg;
    for (int64_t ci = 0; ci < cg; ++ci)
      for (int64_t a = 0; a < k.kh; ++a)
        for (int64_t b = 0; b < k.kw; ++b) {
          int64_t iy = oy * k.strides[0] - k.pads[0] + a * k.dilations[0];
          int64_t ix = ox * k.strides[1] - k.pads[1] + b * k.dilations[1];
          if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w)
            continue;
          int64_t xi = ravel({n, grp * cg + ci, iy, ix}, k.xShape());
          int64_t wi = ravel({f, ci, a, b}, k.wShape());
          (*dx)[xi] += double(w[wi]) * g[i];
          (*dw)[wi] += double(x[xi]) * g[i];
        }
  }
}

TEST(Conv2dBackward, AdjointIdentityAndNaiveReference) {
  int seed = 400;
  for (const ConvCase &k : kConvCases) {
    std::string what = "conv case " + std::to_string(seed - 400);
    HostTensor x = randomF32(k.xShape(), ++seed);
    HostTensor w = randomF32(k.wShape(), ++seed);
    HostTensor g = randomF32(k.yShape(), ++seed);
    Attrs attrs = k.attrs();
    HostTensor y = run1("conv2d", {x, w}, DType::F32, k.yShape(), attrs);
    HostTensor dx =
        run1("conv2d_backward_input", {g, w}, DType::F32, k.xShape(), attrs);
    HostTensor dw =
        run1("conv2d_backward_filter", {x, g}, DType::F32, k.wShape(), attrs);
    Dot yg = dot(y, g), xdx = dot(x, dx), wdw = dot(w, dw);
    expectSameDot(yg, xdx, what + ": <conv(x,w),g> vs <x,dx>");
    expectSameDot(yg, wdw, what + ": <conv(x,w),g> vs <w,dw>");
    std::vector<double> rdx, rdw;
    naiveConvBackward(k, values<float>(x), values<float>(w), values<float>(g),
                      &rdx, &rdw);
    expectNear(values<float>(dx), rdx, 1e-4, what + " grad_in");
    expectNear(values<float>(dw), rdw, 1e-4, what + " grad_w");
  }
}

TEST(Conv2dBackward, WritesEveryResultElement) {
  for (size_t i : {size_t(0), size_t(2), size_t(8)}) {
    const ConvCase &k = kConvCases[i];
    Attrs attrs = k.attrs();
    HostTensor w = randomF32(k.wShape(), 451), g = randomF32(k.yShape(), 452),
               x = randomF32(k.xShape(), 453);
    std::vector<double> rdx, rdw;
    naiveConvBackward(k, values<float>(x), values<float>(w), values<float>(g),
                      &rdx, &rdw);
    expectNear(values<float>(runOverJunk("conv2d_backward_input", {g, w},
                                         DType::F32, k.xShape(), attrs)),
               rdx, 1e-4, "grad_in over junk");
    expectNear(values<float>(runOverJunk("conv2d_backward_filter", {x, g},
                                         DType::F32, k.wShape(), attrs)),
               rdw, 1e-4, "grad_w over junk");
  }
  // An empty batch: grad_w is all zeros.
  ConvCase e = kConvCases[0];
  e.n = 0;
  HostTensor dw =
      runOverJunk("conv2d_backward_filter",
                  {randomF32(e.xShape(), 5), randomF32(e.yShape(), 6)},
                  DType::F32, e.wShape(), e.attrs());
  EXPECT_EQ(values<float>(dw), std::vector<float>(numel(e.wShape()), 0.0f));
  // A strided 1x1 kernel skips input positions: they get zeros.
  ConvCase z = {1, 2, 4, 4, 2, 1, 1, {3, 3}, {0, 0, 0, 0}, {1, 1}, 1};
  HostTensor gz = f32(z.yShape(), std::vector<float>(numel(z.yShape()), 1.0f));
  HostTensor wz = f32(z.wShape(), {1, 2, 3, 4});
  std::vector<double> rdx, rdw;
  naiveConvBackward(z, std::vector<float>(numel(z.xShape()), 0.0f),
                    values<float>(wz), values<float>(gz), &rdx, &rdw);
  expectNear(values<float>(runOverJunk("conv2d_backward_input", {gz, wz},
                                       DType::F32, z.xShape(), z.attrs())),
             rdx, 1e-6, "strided 1x1 grad_in");
}

TEST(Conv2dBackward, BadPlansAreLoadErrors) {
  const ConvCase &k = kConvCases[0];
  HostTensor x = randomF32(k.xShape(), 1), w = randomF32(k.wShape(), 2),
             g = randomF32(k.yShape(), 3);
  Attrs attrs = k.attrs();
  // grad_in's H does not give grad_out's OH.
  Shape badX = {k.n, k.c, k.h + 3, k.w};
  expectLoadError(singleKernelProgram("conv2d_backward_input", {g, w},
                                      {{DType::F32, badX}}, attrs),
                  "grad_out");
  // Groups that do not divide, or disagree with the weight.
  Attrs g3 = attrs;
  g3["groups"] = {{3}, {}};
  expectLoadError(singleKernelProgram("conv2d_backward_input", {g, w},
                                      {{DType::F32, k.xShape()}}, g3),
                  "groups");
  // grad_w of the wrong shape (C/groups) or dtype.
  Shape badW = {k.f, k.c, k.kh, k.kw};
  expectLoadError(singleKernelProgram("conv2d_backward_filter", {x, g},
                                      {{DType::F32, badW}}, attrs),
                  "groups");
  expectLoadError(singleKernelProgram("conv2d_backward_filter", {x, g},
                                      {{DType::I32, k.wShape()}}, attrs),
                  "f32");
  // grad_out with the wrong F, wrong rank.
  expectLoadError(
      singleKernelProgram("conv2d_backward_filter",
                          {x, randomF32({k.n, k.f + 2, k.oh(), k.ow()}, 4)},
                          {{DType::F32, k.wShape()}}, attrs),
      "grad_out");
  expectLoadError(singleKernelProgram("conv2d_backward_filter",
                                      {x, randomF32({k.n, k.f, k.oh()}, 5)},
                                      {{DType::F32, k.wShape()}}, attrs),
                  "4-D");
  // Bad attributes.
  Attrs badStrides = attrs;
  badStrides["strides"] = {{0, 1}, {}};
  expectLoadError(singleKernelProgram("conv2d_backward_input", {g, w},
                                      {{DType::F32, k.xShape()}}, badStrides),
                  "positive");
  Attrs badPads = attrs;
  badPads["pads"] = {{1, 1}, {}};
  expectLoadError(singleKernelProgram("conv2d_backward_filter", {x, g},
                                      {{DType::F32, k.wShape()}}, badPads),
                  "pads");
  Attrs hugePads = attrs;
  hugePads["pads"] = {{int64_t(1) << 62, 0, 0, 0}, {}};
  expectLoadError(singleKernelProgram("conv2d_backward_input", {g, w},
                                      {{DType::F32, k.xShape()}}, hugePads),
                  "at most");
  // Arity: conv2d_backward_* take no bias.
  expectLoadError(singleKernelProgram("conv2d_backward_input",
                                      {g, w, randomF32({k.f}, 6)},
                                      {{DType::F32, k.xShape()}}, attrs),
                  "operands");
}

//===----------------------------------------------------------------------===//
// max_pool2d_backward / avg_pool2d_backward
//===----------------------------------------------------------------------===//

struct PoolCase {
  Shape x;
  int64_t oh, ow;
  std::vector<int64_t> kernel, strides, pads, dilations;

  Shape yShape() const { return {x[0], x[1], oh, ow}; }
  Attrs attrs() const {
    return {{"kernel", {kernel, {}}},
            {"strides", {strides, {}}},
            {"pads", {pads, {}}},
            {"dilations", {dilations, {}}}};
  }
};

const std::vector<PoolCase> kPoolCases = {
    // 3x3 stride 2 pad 1 (overlapping windows).
    {{2, 3, 7, 7}, 4, 4, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}},
    // Asymmetric pads, dilation, non-square kernel.
    {{1, 2, 8, 9}, 4, 4, {2, 3}, {2, 2}, {0, 1, 1, 0}, {2, 1}},
    // Ceil-mode-like result: last window hangs past the padded input.
    {{1, 1, 6, 6}, 3, 3, {3, 3}, {2, 2}, {0, 0, 0, 0}, {1, 1}},
    // Padding where windows contain padded and out-of-input positions.
    {{1, 2, 5, 5}, 4, 4, {3, 3}, {2, 2}, {2, 2, 2, 2}, {1, 1}},
    // Stride larger than the kernel; non-square input.
    {{2, 2, 9, 11}, 3, 3, {2, 2}, {4, 5}, {0, 1, 0, 1}, {1, 1}},
    // Large enough for the parallel path.
    {{4, 16, 32, 30}, 16, 15, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}},
};

/// Naive adjoints: max (first max in row-major window order, NaN counting as
/// the maximum) and avg.
std::vector<double> naivePoolBackward(const HostTensor &x, const HostTensor &g,
                                      const PoolCase &c, bool isMax,
                                      bool countIncludePad) {
  std::vector<float> xv = values<float>(x), gv = values<float>(g);
  int64_t h = c.x[2], w = c.x[3];
  std::vector<double> dx(numel(c.x), 0);
  for (int64_t p = 0; p < c.x[0] * c.x[1]; ++p)
    for (int64_t oy = 0; oy < c.oh; ++oy)
      for (int64_t ox = 0; ox < c.ow; ++ox) {
        double grad = gv[(p * c.oh + oy) * c.ow + ox];
        std::vector<int64_t> inside;
        int64_t padded = 0;
        for (int64_t i = 0; i < c.kernel[0]; ++i)
          for (int64_t j = 0; j < c.kernel[1]; ++j) {
            int64_t iy = oy * c.strides[0] - c.pads[0] + i * c.dilations[0];
            int64_t ix = ox * c.strides[1] - c.pads[1] + j * c.dilations[1];
            padded += iy >= -c.pads[0] && iy < h + c.pads[2] &&
                      ix >= -c.pads[1] && ix < w + c.pads[3];
            if (iy >= 0 && iy < h && ix >= 0 && ix < w)
              inside.push_back((p * h + iy) * w + ix);
          }
        if (inside.empty())
          continue;
        if (isMax) {
          int64_t best = inside[0];
          for (int64_t pos : inside) {
            if (std::isnan(xv[best]))
              break;
            if (std::isnan(xv[pos]) || xv[pos] > xv[best])
              best = pos;
          }
          dx[best] += grad;
        } else {
          int64_t divisor = countIncludePad ? padded : inside.size();
          float v = static_cast<float>(grad) / static_cast<float>(divisor);
          for (int64_t pos : inside)
            dx[pos] += v;
        }
      }
  return dx;
}

TEST(MaxPool2dBackward, AdjointIdentityAndNaiveReference) {
  int seed = 500;
  for (const PoolCase &c : kPoolCases) {
    HostTensor x = randomF32(c.x, ++seed);
    HostTensor g = randomF32(c.yShape(), ++seed);
    Attrs attrs = c.attrs();
    HostTensor y = run1("max_pool2d", {x}, DType::F32, c.yShape(), attrs);
    HostTensor dx = run1("max_pool2d_backward", {x, g}, DType::F32, c.x, attrs);
    expectSameDot(dot(y, g), dot(x, dx), "max_pool2d adjoint");
    expectNear(values<float>(dx), naivePoolBackward(x, g, c, true, false), 1e-5,
               "max_pool2d_backward");
  }
}

TEST(MaxPool2dBackward, TiesGoToTheFirstMaximum) {
  // All equal: every 2x2 window's gradient goes to its top-left tap.
  Attrs attrs = {{"kernel", {{2, 2}, {}}}, {"strides", {{1, 1}, {}}}};
  HostTensor x = f32({1, 1, 3, 3}, std::vector<float>(9, 1.5f));
  HostTensor g = f32({1, 1, 2, 2}, {1, 2, 3, 4});
  EXPECT_EQ(values<float>(run1("max_pool2d_backward", {x, g}, DType::F32,
                               {1, 1, 3, 3}, attrs)),
            (std::vector<float>{1, 2, 0, 3, 4, 0, 0, 0, 0}));
  // Ties in the second row of a window, not the first tap.
  x = f32({1, 1, 2, 3}, {0, 1, 0, 5, 5, 5});
  g = f32({1, 1, 1, 2}, {10, 20});
  EXPECT_EQ(values<float>(run1("max_pool2d_backward", {x, g}, DType::F32,
                               {1, 1, 2, 3}, attrs)),
            (std::vector<float>{0, 0, 0, 10, 20, 0}));
  // A window of -inf (and padding, which is never the maximum) still routes
  // its gradient to its first tap inside the input; NaN is the maximum, and
  // the first NaN wins.
  float inf = std::numeric_limits<float>::infinity();
  float nan = std::numeric_limits<float>::quiet_NaN();
  Attrs padded = {{"kernel", {{2, 2}, {}}},
                  {"strides", {{2, 2}, {}}},
                  {"pads", {{1, 1, 1, 1}, {}}}};
  x = f32({1, 1, 2, 2}, {-inf, 3, nan, nan});
  g = f32({1, 1, 2, 2}, {1, 2, 4, 8});
  EXPECT_EQ(values<float>(run1("max_pool2d_backward", {x, g}, DType::F32,
                               {1, 1, 2, 2}, padded)),
            (std::vector<float>{1, 2, 4, 8}));
  Attrs whole = {{"kernel", {{2, 2}, {}}}, {"strides", {{1, 1}, {}}}};
  x = f32({1, 1, 2, 2}, {1, nan, 7, nan});
  g = f32({1, 1, 1, 1}, {5});
  std::vector<float> r = values<float>(
      run1("max_pool2d_backward", {x, g}, DType::F32, {1, 1, 2, 2}, whole));
  EXPECT_EQ(r, (std::vector<float>{0, 5, 0, 0}));
  // Random ties from a small set of values against the naive reference.
  for (const PoolCase &c : kPoolCases) {
    HostTensor xi = randomInt(DType::I32, c.x, 511, 0, 3);
    std::vector<float> xv(numel(c.x));
    for (size_t i = 0; i < xv.size(); ++i)
      xv[i] = static_cast<float>(xi.data<int32_t>()[i]);
    HostTensor xt = f32(c.x, xv);
    HostTensor gt = randomF32(c.yShape(), 512);
    HostTensor dx =
        run1("max_pool2d_backward", {xt, gt}, DType::F32, c.x, c.attrs());
    expectNear(values<float>(dx), naivePoolBackward(xt, gt, c, true, false),
               1e-5, "max_pool2d_backward ties");
  }
}

TEST(AvgPool2dBackward, AdjointIdentityAndNaiveReference) {
  std::vector<PoolCase> cases = kPoolCases;
  // Windows entirely in the padding (divisor 0 without count_include_pad).
  cases.push_back({{1, 1, 2, 2}, 4, 4, {1, 1}, {1, 1}, {1, 1, 1, 1}, {1, 1}});
  int seed = 600;
  for (const PoolCase &c : cases)
    for (bool include : {false, true}) {
      HostTensor x = randomF32(c.x, ++seed);
      HostTensor g = randomF32(c.yShape(), ++seed);
      Attrs attrs = c.attrs();
      attrs["count_include_pad"] = {{include}, {}};
      HostTensor y = run1("avg_pool2d", {x}, DType::F32, c.yShape(), attrs);
      HostTensor dx = run1("avg_pool2d_backward", {g}, DType::F32, c.x, attrs);
      std::string what = include ? "include pad" : "exclude pad";
      expectSameDot(dot(y, g), dot(x, dx), "avg_pool2d adjoint, " + what);
      expectNear(values<float>(dx), naivePoolBackward(x, g, c, false, include),
                 1e-5, "avg_pool2d_backward, " + what);
    }
}

TEST(Pool2dBackward, WritesEveryResultElement) {
  // Case 4 has input positions no window reaches (stride > kernel).
  for (size_t i : {size_t(0), size_t(4)}) {
    const PoolCase &c = kPoolCases[i];
    HostTensor x = randomF32(c.x, 701), g = randomF32(c.yShape(), 702);
    expectNear(values<float>(runOverJunk("max_pool2d_backward", {x, g},
                                         DType::F32, c.x, c.attrs())),
               naivePoolBackward(x, g, c, true, false), 1e-5, "max over junk");
    expectNear(values<float>(runOverJunk("avg_pool2d_backward", {g}, DType::F32,
                                         c.x, c.attrs())),
               naivePoolBackward(x, g, c, false, false), 1e-5, "avg over junk");
  }
}

TEST(Pool2dBackward, BadPlansAreLoadErrors) {
  const PoolCase &c = kPoolCases[0];
  HostTensor x = randomF32(c.x, 1), g = randomF32(c.yShape(), 2);
  Attrs attrs = c.attrs();
  // max: result must have x's type.
  expectLoadError(singleKernelProgram("max_pool2d_backward", {x, g},
                                      {{DType::F32, {2, 3, 7, 6}}}, attrs),
                  "grad_in");
  // max: grad_out with other N/C; missing kernel; missing strides.
  expectLoadError(singleKernelProgram("max_pool2d_backward",
                                      {x, randomF32({2, 4, 4, 4}, 3)},
                                      {{DType::F32, c.x}}, attrs),
                  "[N,C,H,W]");
  Attrs noKernel = attrs;
  noKernel.erase("kernel");
  expectLoadError(singleKernelProgram("max_pool2d_backward", {x, g},
                                      {{DType::F32, c.x}}, noKernel),
                  "kernel");
  Attrs noStrides = attrs;
  noStrides.erase("strides");
  expectLoadError(singleKernelProgram("avg_pool2d_backward", {g},
                                      {{DType::F32, c.x}}, noStrides),
                  "strides");
  // avg: N/C mismatch, bad pads, non-f32, wrong rank, extra operand.
  expectLoadError(singleKernelProgram("avg_pool2d_backward", {g},
                                      {{DType::F32, {2, 2, 7, 7}}}, attrs),
                  "[N,C,H,W]");
  Attrs badPads = attrs;
  badPads["pads"] = {{1, -1, 1, 1}, {}};
  expectLoadError(singleKernelProgram("avg_pool2d_backward", {g},
                                      {{DType::F32, c.x}}, badPads),
                  "non-negative");
  expectLoadError(singleKernelProgram("avg_pool2d_backward", {g},
                                      {{DType::I64, c.x}}, attrs),
                  "f32");
  expectLoadError(singleKernelProgram("avg_pool2d_backward", {g},
                                      {{DType::F32, {2, 3, 49}}}, attrs),
                  "[N,C,H,W]");
  expectLoadError(singleKernelProgram("avg_pool2d_backward", {g, g},
                                      {{DType::F32, c.x}}, attrs),
                  "operands");
  Attrs zeroKernel = attrs;
  zeroKernel["kernel"] = {{0, 3}, {}};
  expectLoadError(singleKernelProgram("max_pool2d_backward", {x, g},
                                      {{DType::F32, c.x}}, zeroKernel),
                  "kernel");
}

} // namespace

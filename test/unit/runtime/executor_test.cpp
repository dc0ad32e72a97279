//===- executor_test.cpp - Loading, validation and running of programs ----===//

#include "test_util.h"

#include "cpu/runner.h"

using namespace cleave::rt;
using namespace cleave::rt::test;

namespace {

bool contains(const std::string &haystack, const std::string &needle) {
  return haystack.find(needle) != std::string::npos;
}

/// x:[2,3] input, c:[1,3] and w:[3,2] constants.
/// t = add(x, c); y = matmul(t, w); outputs: y, x (INPUT), c (CONSTANT),
/// row 1 of x (an INPUT view), t viewed as [3,2] (an ARENA view).
struct SampleProgram {
  ProgramBuilder b;
  int x, c, w, t, y, xRow, tView;
  SampleProgram() {
    x = b.input("x", DType::F32, {2, 3});
    c = b.constant(f32({1, 3}, {10, 20, 30}));
    w = b.constant(f32({3, 2}, {1, 0, 0, 1, 1, 1}));
    t = b.arena(DType::F32, {2, 3});
    y = b.arena(DType::F32, {2, 2});
    xRow = b.addValue(DType::F32, {3}, plan::Value::INPUT, 12, 0);
    tView = b.addValue(DType::F32, {3, 2}, plan::Value::ARENA,
                       b.program.values(t).offset(), 0);
    b.instruction("add", {x, c}, {t}, {}, "model.py:3");
    b.instruction("matmul", {t, w}, {y}, {}, "model.py:4");
    b.output(y, "y");
    b.output(x, "x_again");
    b.output(c, "c");
    b.output(xRow, "x_row1");
    b.output(tView, "t_view");
  }
};

TEST(Executor, RunsAndCopiesOutputsFromEveryStorage) {
  SampleProgram s;
  std::unique_ptr<Executor> exec;
  Status st = Executor::create(s.b.program, &exec);
  ASSERT_TRUE(st.isOk()) << st.message();
  EXPECT_EQ(exec->inputNames(), std::vector<std::string>{"x"});
  EXPECT_EQ(exec->outputNames(), (std::vector<std::string>{
                                     "y", "x_again", "c", "x_row1", "t_view"}));
  EXPECT_EQ(exec->inputDType(0), DType::F32);
  EXPECT_EQ(exec->inputShape(0), (Shape{2, 3}));

  HostTensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  for (int repeat = 0; repeat < 2; ++repeat) {
    std::vector<HostTensor> out;
    st = exec->run({x}, &out);
    ASSERT_TRUE(st.isOk()) << st.message();
    ASSERT_EQ(out.size(), 5u);
    // t = [[11,22,33],[14,25,36]]; y = t @ w, w columns (1,0,1), (0,1,1).
    EXPECT_EQ(values<float>(out[0]), (std::vector<float>{44, 55, 50, 61}));
    EXPECT_EQ(out[0].shape, (Shape{2, 2}));
    EXPECT_EQ(values<float>(out[1]), values<float>(x));
    EXPECT_EQ(values<float>(out[2]), (std::vector<float>{10, 20, 30}));
    EXPECT_EQ(values<float>(out[3]), (std::vector<float>{4, 5, 6}));
    EXPECT_EQ(out[4].shape, (Shape{3, 2}));
    EXPECT_EQ(values<float>(out[4]),
              (std::vector<float>{11, 22, 33, 14, 25, 36}));
  }
}

/// A step over carried state: m' = 0.9 m + g, w' = w - 0.5 m' - 0.25 m
/// (old m read after m' is written); outputs w', m' and m' again. Kernels
/// write w' and the first m' straight into the caller's tensors; the second
/// m' is copied. Unfused (CLEAVE_NO_FUSION), so that an m' written over
/// m's buffer would be seen by the last instructions.
TEST(Executor, WritesOutputsInPlaceAcrossCarriedRuns) {
  ProgramBuilder b;
  int w = b.input("w", DType::F32, {4});
  int m = b.input("m", DType::F32, {4});
  int g = b.input("g", DType::F32, {4});
  int beta = b.constant(f32({4}, {0.9f, 0.9f, 0.9f, 0.9f}));
  int lr = b.constant(f32({4}, {0.5f, 0.5f, 0.5f, 0.5f}));
  int mb = b.arena(DType::F32, {4}), m2 = b.arena(DType::F32, {4});
  int quarter = b.constant(f32({4}, {0.25f, 0.25f, 0.25f, 0.25f}));
  int step = b.arena(DType::F32, {4}), w1 = b.arena(DType::F32, {4});
  int old = b.arena(DType::F32, {4}), w2 = b.arena(DType::F32, {4});
  b.instruction("mul", {m, beta}, {mb}, {}, "");
  b.instruction("add", {mb, g}, {m2}, {}, "");
  b.instruction("mul", {m2, lr}, {step}, {}, "");
  b.instruction("sub", {w, step}, {w1}, {}, "");
  b.instruction("mul", {m, quarter}, {old}, {}, "");
  b.instruction("sub", {w1, old}, {w2}, {}, "");
  b.output(w2, "w");
  b.output(m2, "m");
  b.output(m2, "m_again");
  std::unique_ptr<Executor> exec;
  setenv("CLEAVE_NO_FUSION", "1", 1);
  Status st = Executor::create(b.program, &exec);
  unsetenv("CLEAVE_NO_FUSION");
  ASSERT_TRUE(st.isOk()) << st.message();

  std::vector<float> wRef = {1, 2, 3, 4}, mRef = {0, 0, 0, 0};
  std::vector<float> grad = {0.5f, -1, 2, 0.25f};
  std::vector<HostTensor> in = {f32({4}, wRef), f32({4}, mRef), f32({4}, grad)};
  std::vector<HostTensor> out;
  for (int run = 0; run < 3; ++run) {
    ASSERT_TRUE(exec->run(in, &out).isOk());
    for (int i = 0; i < 4; ++i) {
      float m0 = mRef[i];
      mRef[i] = 0.9f * m0 + grad[i];
      wRef[i] = wRef[i] - 0.5f * mRef[i] - 0.25f * m0;
    }
    EXPECT_EQ(values<float>(out[0]), wRef) << "run " << run;
    EXPECT_EQ(values<float>(out[1]), mRef) << "run " << run;
    EXPECT_EQ(values<float>(out[2]), mRef) << "run " << run;
    // As a training loop carries state: last run's inputs become the
    // buffers of the next run's outputs.
    std::swap(in[0], out[0]);
    std::swap(in[1], out[1]);
  }
  // Outputs handed in as the inputs themselves are computed in the arena
  // and copied at the end, never written while still being read.
  std::vector<HostTensor> same = {f32({4}, wRef), f32({4}, mRef),
                                  f32({4}, grad)};
  ASSERT_TRUE(exec->run(same, &same).isOk());
  for (int i = 0; i < 4; ++i) {
    float m0 = mRef[i];
    mRef[i] = 0.9f * m0 + grad[i];
    wRef[i] = wRef[i] - 0.5f * mRef[i] - 0.25f * m0;
  }
  EXPECT_EQ(values<float>(same[0]), wRef);
  EXPECT_EQ(values<float>(same[1]), mRef);
  EXPECT_EQ(values<float>(same[2]), mRef);
}

/// SGD with momentum over 5000 elements (several segments and threads),
/// fused into one chain: w' = w - lr (beta m + g), m' = beta m + g. Through
/// the CPU runner, w' and m' are written over w and m (canDonate), and
/// every run's state is bit for bit the swapping executor's.
ProgramBuilder momentumStep(bool readWAfter, int *wOut, bool planned = false) {
  ProgramBuilder b;
  Shape s = {5000};
  int w = b.input("w", DType::F32, s);
  int m = b.input("m", DType::F32, s);
  int g = b.input("g", DType::F32, s);
  int beta = b.constant(f32({1}, {0.9f}));
  int lr = b.constant(f32({1}, {0.125f}));
  int mb = b.arena(DType::F32, s), step = b.arena(DType::F32, s);
  // Planned, w' and m' are made in the caller's tensors (outputs 0, 1).
  int w1 = planned ? b.outputSlot(DType::F32, s) : b.arena(DType::F32, s);
  int m2 = planned ? b.addValue(DType::F32, s, plan::Value::OUTPUT, 0, 1)
                   : b.arena(DType::F32, s);
  b.instruction("mul", {m, beta}, {mb});
  b.instruction("add", {mb, g}, {m2});
  b.instruction("mul", {m2, lr}, {step});
  b.instruction("sub", {w, step}, {w1});
  b.output(w1, "w");
  b.output(m2, "m");
  if (readWAfter) {
    // The old w is still read after the update: not donatable.
    int top = b.arena(DType::F32, {});
    b.instruction("reduce_max", {w}, {top}, {{"axes", {{0}}}});
    b.output(top, "top");
  }
  *wOut = w;
  return b;
}

class DonatesStateToFusedUpdates : public ::testing::TestWithParam<bool> {};

TEST_P(DonatesStateToFusedUpdates, BitForBitTheSwappingExecutors) {
  int w = 0;
  ProgramBuilder b = momentumStep(false, &w, /*planned=*/GetParam());
  std::unique_ptr<Executor> donor, plain;
  ASSERT_TRUE(Executor::create(b.program, &donor).isOk());
  ASSERT_TRUE(Executor::create(b.program, &plain).isOk());
  EXPECT_TRUE(donor->canDonate(0, 0));
  EXPECT_TRUE(donor->canDonate(1, 1));
  EXPECT_FALSE(donor->canDonate(0, 5)) << "no such output";

  std::unique_ptr<StepRunner> runner = makeCpuRunner(std::move(donor));
  HostTensor w0 = randomF32({5000}, 7), m0 = randomF32({5000}, 8),
             g0 = randomF32({5000}, 9);
  ASSERT_TRUE(runner->setInput(0, w0).isOk());
  ASSERT_TRUE(runner->setInput(1, m0).isOk());
  ASSERT_TRUE(runner->setInput(2, g0).isOk());
  ASSERT_TRUE(runner->carry(0, 0).isOk());
  ASSERT_TRUE(runner->carry(1, 1).isOk());
  std::vector<HostTensor> in = {w0, m0, g0}, out;
  for (int run = 0; run < 3; ++run) {
    ASSERT_TRUE(runner->run().isOk());
    ASSERT_TRUE(plain->run(in, &out).isOk());
    std::swap(in[0], out[0]);
    std::swap(in[1], out[1]);
    HostTensor got;
    ASSERT_TRUE(runner->getOutput(0, &got).isOk());
    EXPECT_EQ(got.bytes, in[0].bytes) << "w after run " << run;
    ASSERT_TRUE(runner->getInput(1, &got).isOk());
    EXPECT_EQ(got.bytes, in[1].bytes) << "m after run " << run;
  }
  EXPECT_NE(in[0].bytes, w0.bytes);
}

INSTANTIATE_TEST_SUITE_P(Executor, DonatesStateToFusedUpdates,
                         ::testing::Bool(), [](const auto &info) {
                           return info.param ? "InOutputTensors" : "InArena";
                         });

/// The plan places a step's results in the caller's tensors (OUTPUT
/// storage): t = exp(x) is output 0 and is listed again as output 2, a view
/// of it is read on the way, and the arena holds only u = neg(view).
TEST(Executor, MakesResultsInTheCallersTensors) {
  ProgramBuilder b;
  int x = b.input("x", DType::F32, {2, 3});
  int t = b.outputSlot(DType::F32, {2, 3});
  int flat = b.addValue(DType::F32, {3}, plan::Value::OUTPUT, 12, 0);
  int u = b.arena(DType::F32, {3});
  b.instruction("exp", {x}, {t});
  b.instruction("neg", {flat}, {u});
  b.output(t, "t");
  b.output(u, "u");
  b.output(t, "t_again");
  std::unique_ptr<Executor> exec;
  Status st = Executor::create(b.program, &exec);
  ASSERT_TRUE(st.isOk()) << st.message();
  EXPECT_EQ(b.program.arena_bytes(), 64) << "only u is in the arena";
  std::vector<float> xs = {0, 1, -1, 0.5f, 2, -2}, ts, us;
  for (float v : xs)
    ts.push_back(std::exp(v));
  for (int i = 3; i < 6; ++i)
    us.push_back(-ts[i]);
  std::vector<HostTensor> out;
  for (int run = 0; run < 2; ++run) {
    const uint8_t *before = out.empty() ? nullptr : out[0].bytes.data();
    ASSERT_TRUE(exec->run({f32({2, 3}, xs)}, &out).isOk());
    ASSERT_EQ(out.size(), 3u);
    EXPECT_EQ(values<float>(out[0]), ts) << "run " << run;
    EXPECT_EQ(values<float>(out[1]), us) << "run " << run;
    EXPECT_EQ(values<float>(out[2]), ts) << "run " << run;
    if (before)
      EXPECT_EQ(out[0].bytes.data(), before) << "the caller's tensor reused";
  }
  // The caller's output tensors are the inputs themselves: made aside,
  // copied at the end, the input never written while it is read.
  std::vector<HostTensor> same = {f32({2, 3}, xs)};
  ASSERT_TRUE(exec->run(same, &same).isOk());
  ASSERT_EQ(same.size(), 3u);
  EXPECT_EQ(values<float>(same[0]), ts);
  EXPECT_EQ(values<float>(same[1]), us);
}

TEST(ExecutorValidation, OutputStorage) {
  auto loadError = [](const ProgramBuilder &b) {
    std::unique_ptr<Executor> exec;
    Status st = Executor::create(b.program, &exec);
    return st.isOk() ? std::string() : st.message();
  };
  {
    ProgramBuilder b; // output index out of range
    int x = b.input("x", DType::F32, {4});
    int t = b.addValue(DType::F32, {4}, plan::Value::OUTPUT, 0, 3);
    b.instruction("exp", {x}, {t});
    b.output(t, "t");
    EXPECT_TRUE(contains(loadError(b), "output index 3 out of range"))
        << loadError(b);
  }
  {
    ProgramBuilder b; // in output 0's tensor, but output 0 is in the arena
    int x = b.input("x", DType::F32, {4});
    int a = b.arena(DType::F32, {4});
    int t = b.addValue(DType::F32, {4}, plan::Value::OUTPUT, 0, 0);
    b.instruction("exp", {x}, {a});
    b.instruction("exp", {a}, {t});
    b.output(a, "a");
    EXPECT_TRUE(contains(loadError(b), "not the whole of it")) << loadError(b);
  }
  {
    ProgramBuilder b; // a view past the output's bytes
    int x = b.input("x", DType::F32, {4});
    int t = b.outputSlot(DType::F32, {4});
    int past = b.addValue(DType::F32, {2}, plan::Value::OUTPUT, 12, 0);
    int u = b.arena(DType::F32, {2});
    b.instruction("exp", {x}, {t});
    b.instruction("neg", {past}, {u});
    b.output(t, "t");
    EXPECT_TRUE(contains(loadError(b), "exceed output 0")) << loadError(b);
  }
  {
    ProgramBuilder b; // an instruction writes a view of an output
    int x = b.input("x", DType::F32, {4});
    int t = b.outputSlot(DType::F32, {4});
    int half = b.addValue(DType::F32, {2}, plan::Value::OUTPUT, 8, 0);
    int y = b.input("y", DType::F32, {2});
    b.instruction("exp", {x}, {t});
    b.instruction("neg", {y}, {half});
    b.output(t, "t");
    EXPECT_TRUE(contains(loadError(b), "not in the arena or an output"))
        << loadError(b);
  }
}

TEST(Executor, DonatesOnlyWhereNothingReadsTheOldValue) {
  int w = 0;
  ProgramBuilder later = momentumStep(true, &w);
  std::unique_ptr<Executor> exec;
  ASSERT_TRUE(Executor::create(later.program, &exec).isOk());
  EXPECT_FALSE(exec->canDonate(0, 0)) << "w is read after its update";
  EXPECT_TRUE(exec->canDonate(1, 1));
  // Unfused, the update is four kernels whose own loops make no promise
  // about reading before writing.
  ProgramBuilder plain = momentumStep(false, &w);
  setenv("CLEAVE_NO_FUSION", "1", 1);
  Status st = Executor::create(plain.program, &exec);
  unsetenv("CLEAVE_NO_FUSION");
  ASSERT_TRUE(st.isOk()) << st.message();
  EXPECT_FALSE(exec->canDonate(0, 0));
  EXPECT_FALSE(exec->canDonate(1, 1));
}

TEST(Executor, InputMismatchesNameTheInput) {
  SampleProgram s;
  std::unique_ptr<Executor> exec;
  ASSERT_TRUE(Executor::create(s.b.program, &exec).isOk());
  std::vector<HostTensor> out;
  Status st = exec->run({}, &out);
  EXPECT_FALSE(st.isOk());
  EXPECT_TRUE(contains(st.message(), "expected 1 inputs")) << st.message();
  st = exec->run({f32({3, 2}, {1, 2, 3, 4, 5, 6})}, &out);
  EXPECT_FALSE(st.isOk());
  EXPECT_TRUE(contains(st.message(), "'x'")) << st.message();
  EXPECT_TRUE(contains(st.message(), "f32[2,3]")) << st.message();
  st = exec->run({i32({2, 3}, {1, 2, 3, 4, 5, 6})}, &out);
  EXPECT_FALSE(st.isOk());
  EXPECT_TRUE(contains(st.message(), "i32[2,3]")) << st.message();
  HostTensor bad = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  bad.bytes.pop_back();
  st = exec->run({bad}, &out);
  EXPECT_FALSE(st.isOk());
  EXPECT_TRUE(contains(st.message(), "bytes")) << st.message();
}

TEST(ExecutorValidation, UnknownKernel) {
  SampleProgram s;
  s.b.program.mutable_instructions(1)->set_kernel("frobnicate");
  std::string e = createError(s.b.program);
  EXPECT_TRUE(contains(e, "unknown kernel 'frobnicate'")) << e;
  EXPECT_TRUE(contains(e, "instruction 1")) << e;
  EXPECT_TRUE(contains(e, "model.py:4")) << e;
}

TEST(ExecutorValidation, ArenaOffsetOutOfBounds) {
  SampleProgram s;
  s.b.program.mutable_values(s.y)->set_offset(s.b.program.arena_bytes() - 8);
  std::string e = createError(s.b.program);
  EXPECT_TRUE(contains(e, "value " + std::to_string(s.y))) << e;
  EXPECT_TRUE(contains(e, "arena_bytes")) << e;
  SampleProgram neg;
  neg.b.program.mutable_values(neg.y)->set_offset(-64);
  EXPECT_FALSE(createError(neg.b.program).empty());
  SampleProgram misaligned;
  misaligned.b.program.mutable_values(misaligned.y)->set_offset(2);
  EXPECT_FALSE(createError(misaligned.b.program).empty());
}

TEST(ExecutorValidation, InputViewOutOfBounds) {
  SampleProgram s;
  s.b.program.mutable_values(s.xRow)->set_offset(16);
  std::string e = createError(s.b.program);
  EXPECT_TRUE(contains(e, "exceed input 0")) << e;
}

TEST(ExecutorValidation, WrongConstantSize) {
  SampleProgram s;
  s.b.program.mutable_constants(1)->append("\0\0\0\0", 4);
  std::string e = createError(s.b.program);
  EXPECT_TRUE(contains(e, "constant 1")) << e;
  SampleProgram shortConst;
  shortConst.b.program.mutable_constants(0)->resize(8);
  e = createError(shortConst.b.program);
  EXPECT_TRUE(contains(e, "constant 0")) << e;
  SampleProgram badIndex;
  badIndex.b.program.mutable_values(badIndex.c)->set_index(7);
  e = createError(badIndex.b.program);
  EXPECT_TRUE(contains(e, "constant index 7")) << e;
}

TEST(ExecutorValidation, ValueIdsAndOperandCounts) {
  SampleProgram s;
  s.b.program.mutable_instructions(0)->set_operands(1, 99);
  std::string e = createError(s.b.program);
  EXPECT_TRUE(contains(e, "instruction 0 ('add' at model.py:3)")) << e;
  EXPECT_TRUE(contains(e, "99")) << e;

  SampleProgram count;
  count.b.program.mutable_instructions(0)->add_operands(count.x);
  e = createError(count.b.program);
  EXPECT_TRUE(contains(e, "expects 2 operands, got 3")) << e;

  SampleProgram out;
  out.b.program.set_outputs(0, -3);
  EXPECT_TRUE(contains(createError(out.b.program), "output 0")) << e;

  SampleProgram resultInInput;
  resultInInput.b.program.mutable_instructions(0)->set_results(0,
                                                               resultInInput.x);
  EXPECT_TRUE(
      contains(createError(resultInInput.b.program), "not in the arena"));
}

TEST(ExecutorValidation, TypesAndAttributes) {
  SampleProgram s;
  s.b.program.mutable_values(s.y)->mutable_type()->set_shape(1, 3);
  std::string e = createError(s.b.program);
  EXPECT_TRUE(contains(e, "'matmul'")) << e;

  SampleProgram dtype;
  dtype.b.program.mutable_values(dtype.c)->mutable_type()->set_dtype(plan::I32);
  EXPECT_TRUE(contains(createError(dtype.b.program), "'add'"));

  SampleProgram unspecified;
  unspecified.b.program.mutable_values(unspecified.t)
      ->mutable_type()
      ->set_dtype(plan::DTYPE_UNSPECIFIED);
  EXPECT_TRUE(contains(createError(unspecified.b.program), "dtype"));

  HostTensor x = randomF32({2, 3}, 1);
  plan::Program noAttr =
      singleKernelProgram("softmax", {x}, {{DType::F32, {2, 3}}});
  EXPECT_TRUE(contains(createError(noAttr), "missing attribute 'axis'"));
  plan::Program badPerm = singleKernelProgram(
      "transpose", {x}, {{DType::F32, {3, 2}}}, {{"perm", {{0, 0}, {}}}});
  EXPECT_TRUE(contains(createError(badPerm), "permutation"));
}

/// Random corruptions of a valid program must be rejected or run cleanly,
/// never crash.
TEST(ExecutorValidation, CorruptedPlansNeverCrash) {
  std::mt19937 gen(1234);
  int loaded = 0;
  for (int iter = 0; iter < 400; ++iter) {
    SampleProgram s;
    plan::Program &p = s.b.program;
    int mutations = 1 + gen() % 3;
    for (int m = 0; m < mutations; ++m) {
      int v = gen() % p.values_size();
      switch (gen() % 7) {
      case 0:
        p.mutable_values(v)->set_offset(static_cast<int>(gen() % 80) - 8);
        break;
      case 1:
        p.mutable_values(v)->mutable_type()->set_shape(
            0, static_cast<int>(gen() % 5) - 1);
        break;
      case 2:
        p.mutable_values(v)->set_index(static_cast<int>(gen() % 4) - 1);
        break;
      case 3:
        p.mutable_values(v)->set_storage(
            static_cast<plan::Value::Storage>(gen() % 4));
        break;
      case 4:
        p.mutable_instructions(gen() % 2)->set_operands(
            gen() % 2, static_cast<int>(gen() % 9) - 1);
        break;
      case 5:
        p.set_arena_bytes(static_cast<int>(gen() % 128));
        break;
      case 6:
        p.mutable_values(v)->mutable_type()->set_dtype(
            static_cast<plan::DType>(gen() % 6));
        break;
      }
    }
    std::unique_ptr<Executor> exec;
    if (!Executor::create(p, &exec))
      continue;
    ++loaded;
    std::vector<HostTensor> inputs;
    for (size_t i = 0; i < exec->inputNames().size(); ++i)
      inputs.push_back(
          HostTensor::zeros(exec->inputDType(i), exec->inputShape(i)));
    std::vector<HostTensor> out;
    (void)exec->run(inputs, &out);
  }
  EXPECT_GT(loaded, 0);
}

} // namespace

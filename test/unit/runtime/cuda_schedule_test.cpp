//===- cuda_schedule_test.cpp - The CUDA backend's schedule, without a GPU ===//
//
// runtime/cuda/schedule.cpp decides which matmul + bias pairs become one
// cuBLASLt call and where the compute stream waits for collectives; it is
// plain C++, so its rules are checked here on every machine.
//
//===----------------------------------------------------------------------===//

#include "core/plan_reader.h"
#include "core/program.h"
#include "cpu/runner.h"
#include "cuda/schedule.h"
#include "test_util.h"

#include "cleave/runtime/comm.h"

namespace cleave::rt::test {
namespace {

using cuda::Schedule;

struct Loaded {
  std::unique_ptr<Communicator> comm = makeSingleProcessCommunicator();
  LoadedProgram program;
};

std::unique_ptr<Loaded> load(const plan::Program &program) {
  auto l = std::make_unique<Loaded>();
  PlanView view(program);
  std::vector<KernelFn> kernels;
  Status s =
      bindCpuKernels(view.program(), l->comm.get(), &l->program, &kernels);
  EXPECT_TRUE(s.isOk()) << s.message();
  return l;
}

Schedule scheduleOf(const plan::Program &program, bool aligned = true) {
  std::unique_ptr<Loaded> l = load(program);
  return cuda::schedule(l->program, /*fuseBias=*/true,
                        [&](int32_t) { return aligned; });
}

/// x [rows, 8] (or batched) times w, plus a bias row; the add's result at
/// \p outOffset (-1: a fresh slot).
struct Linear {
  ProgramBuilder b;
  int x, w, bias, r, out;
  Linear(Shape xShape, Shape wShape, int64_t outOffset = -1) {
    Shape rShape = xShape;
    rShape.back() = wShape.back();
    Shape biasShape(rShape.size(), 1);
    biasShape.back() = rShape.back();
    x = b.arena(DType::F32, xShape);
    w = b.input("w", DType::F32, wShape);
    bias = b.input("bias", DType::F32, biasShape);
    r = b.arena(DType::F32, rShape);
    out = outOffset < 0 ? b.arena(DType::F32, rShape)
                        : b.addValue(DType::F32, rShape, plan::Value::ARENA,
                                     outOffset, 0);
    int in = b.input("x", DType::F32, xShape);
    b.instruction("copy", {in}, {x});
    b.instruction("matmul", {x, w}, {r});
    b.instruction("add", {r, bias}, {out});
    b.output(out, "out");
  }
};

TEST(CudaSchedule, MatmulAndBiasAreOneCall) {
  Linear l({4, 8}, {8, 16});
  Schedule s = scheduleOf(l.b.program);
  ASSERT_EQ(s.steps.size(), 2u); // copy, matmul + add
  EXPECT_EQ(s.steps[1].biasOperand, 1);
  EXPECT_EQ(s.steps[1].operands,
            (std::vector<int32_t>{l.x, l.w, l.bias, l.r, l.bias}));
  EXPECT_EQ(s.steps[1].results, (std::vector<int32_t>{l.out, l.r}));
  // Stacked batches over one weight are one taller product: fused too.
  EXPECT_EQ(scheduleOf(Linear({2, 4, 8}, {1, 8, 16}).b.program).steps.size(),
            2u);
}

TEST(CudaSchedule, BiasIsNotFusedWhereItWouldBeWrong) {
  // The add's result over the matmul's operand x (dead after the matmul).
  EXPECT_EQ(scheduleOf(Linear({4, 8}, {8, 8}, /*outOffset=*/0).b.program)
                .steps.size(),
            3u);
  // Batches with a weight each: strided calls, no bias epilogue.
  EXPECT_EQ(scheduleOf(Linear({2, 4, 8}, {2, 8, 16}).b.program).steps.size(),
            3u);
  // A bias the device cannot use.
  EXPECT_EQ(scheduleOf(Linear({4, 8}, {8, 16}).b.program, /*aligned=*/false)
                .steps.size(),
            3u);
  // The matmul's result also read through a view.
  Linear viewed({4, 8}, {8, 16});
  int view = viewed.b.addValue(DType::F32, {64}, plan::Value::ARENA,
                               viewed.b.program.values(viewed.r).offset(), 0);
  int sum = viewed.b.arena(DType::F32, {});
  viewed.b.instruction("reduce_sum", {view}, {sum}, {{"axes", {{0}}}});
  viewed.b.output(sum, "sum");
  EXPECT_EQ(scheduleOf(viewed.b.program).steps.size(), 4u);
}

// Collectives run on their own stream: the compute stream waits for one
// only before a step touching its bytes, and for the rest at the end.
TEST(CudaSchedule, ComputeWaitsOnlyForCollectivesItTouches) {
  ProgramBuilder b;
  Shape s = {64};
  int in = b.input("x", DType::F32, s);
  int a = b.arena(DType::F32, s), c0 = b.arena(DType::F32, s),
      other = b.arena(DType::F32, s), use = b.arena(DType::F32, s),
      c1 = b.arena(DType::F32, s), c2 = b.arena(DType::F32, s);
  Attrs sum = {{"axes", {{0}}}, {"reduction", {{0}}}};
  b.instruction("copy", {in}, {a});              // 0
  b.instruction("all_reduce", {a}, {c0}, sum);   // 1: collective 0
  b.instruction("exp", {in}, {other});           // 2: independent
  b.instruction("neg", {c0}, {use});             // 3: reads collective 0
  b.instruction("all_reduce", {use}, {c1}, sum); // 4: collective 1
  // 5: writes over collective 1's operand bytes (arena reuse).
  int over = b.addValue(DType::F32, s, plan::Value::ARENA,
                        b.program.values(use).offset(), 0);
  b.instruction("exp", {in}, {over});
  b.instruction("all_reduce", {other}, {c2}, sum); // 6: collective 2
  b.output(c1, "c1");
  b.output(c2, "c2");
  b.output(over, "over");
  setenv("CLEAVE_NO_FUSION", "1", 1); // one step per instruction
  Schedule sch = scheduleOf(b.program);
  unsetenv("CLEAVE_NO_FUSION");
  ASSERT_EQ(sch.steps.size(), 7u);
  EXPECT_EQ(sch.steps[1].collectiveIndex, 0);
  EXPECT_TRUE(sch.steps[2].waitFor.empty());
  EXPECT_EQ(sch.steps[3].waitFor, (std::vector<int>{0}));
  EXPECT_EQ(sch.steps[4].collectiveIndex, 1);
  EXPECT_EQ(sch.steps[5].waitFor, (std::vector<int>{1}));
  EXPECT_EQ(sch.steps[6].collectiveIndex, 2);
  EXPECT_EQ(sch.finalWaits, (std::vector<int>{2}));
}

} // namespace
} // namespace cleave::rt::test

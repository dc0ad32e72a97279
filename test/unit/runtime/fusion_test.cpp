//===- fusion_test.cpp - Elementwise fusion: grouping, hazards, results ---===//

#include "core/convert.h"
#include "core/plan_reader.h"
#include "core/program.h"
#include "core/vector_math.h"
#include "cpu/runner.h"
#include "test_util.h"

#include "cleave/runtime/comm.h"

#include <cstdlib>
#include <cstring>

namespace cleave::rt::test {
namespace {

/// Runs \p program with fusion on or off; returns its outputs.
std::vector<HostTensor> runWith(bool fuse, const plan::Program &program,
                                const std::vector<HostTensor> &inputs) {
  if (fuse)
    unsetenv("CLEAVE_NO_FUSION");
  else
    setenv("CLEAVE_NO_FUSION", "1", 1);
  std::unique_ptr<Executor> exec;
  Status s = Executor::create(program, &exec);
  EXPECT_TRUE(s.isOk()) << s.message();
  std::vector<HostTensor> out;
  if (s)
    EXPECT_TRUE(exec->run(inputs, &out).isOk());
  unsetenv("CLEAVE_NO_FUSION");
  return out;
}

/// Kernel names of \p program after loading (fusion on).
std::vector<std::string> loadedKernels(const plan::Program &program) {
  auto comm = makeSingleProcessCommunicator();
  LoadedProgram loaded;
  PlanView view(program);
  std::vector<KernelFn> cpuKernels;
  Status s = bindCpuKernels(view.program(), comm.get(), &loaded, &cpuKernels);
  EXPECT_TRUE(s.isOk()) << s.message();
  std::vector<std::string> kernels;
  for (const ProgramInstruction &inst : loaded.instructions)
    kernels.push_back(inst.info.kernel);
  return kernels;
}

void expectSameBits(const std::vector<HostTensor> &a,
                    const std::vector<HostTensor> &b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(a[i].bytes, b[i].bytes) << "output " << i;
}

// An AdamW-like chain with a scalar, a live-out intermediate and a
// reduction after it: one fused instruction (the reduction included, on the
// CPU), bit-identical results.
TEST(Fusion, ChainIsOneInstructionWithTheSameBits) {
  ProgramBuilder b;
  Shape s = {37, 129}; // not a multiple of the CPU's 256-element chunks
  int x = b.input("x", DType::F32, s), y = b.input("y", DType::F32, s);
  int scale = b.constant(f32({1, 1}, {0.9f}));
  int t0 = b.arena(DType::F32, s), t1 = b.arena(DType::F32, s),
      t2 = b.arena(DType::F32, s), t3 = b.arena(DType::F32, s),
      t4 = b.arena(DType::F32, s), sum = b.arena(DType::F32, {});
  b.instruction("mul", {x, scale}, {t0});
  b.instruction("add", {t0, y}, {t1});
  b.instruction("abs", {t1}, {t2});
  b.instruction("sqrt", {t2}, {t3});
  b.instruction("div", {t1, t3}, {t4});
  b.instruction("reduce_sum", {t1}, {sum}, {{"axes", {{0, 1}}}});
  b.output(t4, "out");
  b.output(sum, "sum");
  EXPECT_EQ(loadedKernels(b.program),
            (std::vector<std::string>{"fused_elementwise"}));
  std::vector<HostTensor> in = {randomF32(s, 1), randomF32(s, 2)};
  expectSameBits(runWith(true, b.program, in), runWith(false, b.program, in));
}

// Sums and means of a chain's values join it (BatchNorm's statistics and
// its backward's sums) and add in the reduce kernels' order: over image
// planes longer than a chunk (and not a multiple of it or of the partial
// sums' split), and kept innermost lanes across two lane chunks or
// strips. Over short runs (a 2x2 plane) they stay separate kernels, which
// are faster there.
TEST(Fusion, ReductionsJoinChainsWithTheSameBits) {
  struct Case {
    Shape shape, per;
    std::vector<int64_t> axes;
    bool joins;
  };
  for (const Case &c : {Case{{2, 3, 17, 19}, {1, 3, 1, 1}, {0, 2, 3}, true},
                        Case{{37, 300}, {1, 300}, {0}, true},
                        // Strips of several segments per row, the last
                        // one partial.
                        Case{{37, 1100}, {1, 1100}, {0}, true},
                        Case{{4, 6, 2, 2}, {1, 6, 1, 1}, {0, 2, 3}, false}}) {
    Shape reducedShape = c.shape;
    for (int64_t a : c.axes)
      reducedShape[a] = 1;
    ProgramBuilder b;
    int x = b.input("x", DType::F32, c.shape);
    int g = b.input("g", DType::F32, c.shape);
    int m = b.input("m", DType::F32, c.per);
    int xc = b.arena(DType::F32, c.shape), sq = b.arena(DType::F32, c.shape);
    int prod = b.arena(DType::F32, c.shape);
    int var = b.arena(DType::F32, reducedShape);
    int dot = b.arena(DType::F32, reducedShape);
    int sum = b.arena(DType::F32, reducedShape);
    Attrs axes = {{"axes", {c.axes, {}}}};
    b.instruction("sub", {x, m}, {xc});
    b.instruction("mul", {xc, xc}, {sq});
    b.instruction("mul", {xc, g}, {prod});
    b.instruction("reduce_mean", {sq}, {var}, axes);
    b.instruction("reduce_sum", {prod}, {dot}, axes);
    b.instruction("reduce_sum", {xc}, {sum}, axes);
    b.output(xc, "xc");
    b.output(var, "var");
    b.output(dot, "dot");
    b.output(sum, "sum");
    std::vector<std::string> want = {"fused_elementwise"};
    if (!c.joins)
      want = {"fused_elementwise", "reduce_mean", "reduce_sum", "reduce_sum"};
    EXPECT_EQ(loadedKernels(b.program), want);
    std::vector<HostTensor> in = {randomF32(c.shape, 51),
                                  randomF32(c.shape, 52), randomF32(c.per, 53)};
    std::vector<HostTensor> fused = runWith(true, b.program, in);
    expectSameBits(fused, runWith(false, b.program, in));
  }
}

// A chain output may reuse the bytes of a chain input that is dead by then
// (the buffer planner does that), but fused, element i is written before
// element i + 4 is read: only the very same bytes are safe.
TEST(Fusion, OverlappingBuffersAreOnlyFusedWhenIdentical) {
  for (bool shifted : {false, true}) {
    ProgramBuilder b;
    Shape s = {300};
    int in = b.input("x", DType::F32, {600});
    int x = b.addValue(DType::F32, s, plan::Value::ARENA, 0, 0);
    int t0 = b.addValue(DType::F32, s, plan::Value::ARENA, 2048, 0);
    int out =
        b.addValue(DType::F32, s, plan::Value::ARENA, shifted ? 16 : 0, 0);
    b.program.set_arena_bytes(4096);
    b.instruction("slice", {in}, {x}, {{"starts", {{0}}}});
    b.instruction("exp", {x}, {t0}); // x's last use
    b.instruction("neg", {t0}, {out});
    b.output(out, "out");
    std::vector<std::string> kernels = loadedKernels(b.program);
    if (shifted)
      EXPECT_EQ(kernels, (std::vector<std::string>{"slice", "exp", "neg"}));
    else
      EXPECT_EQ(kernels,
                (std::vector<std::string>{"slice", "fused_elementwise"}));
    std::vector<HostTensor> inputs = {randomF32({600}, 3)};
    std::vector<HostTensor> fused = runWith(true, b.program, inputs);
    expectSameBits(fused, runWith(false, b.program, inputs));
    // And the value is right: -exp(x).
    ASSERT_EQ(fused.size(), 1u);
    std::vector<float> got = values<float>(fused[0]),
                       x0 = values<float>(inputs[0]);
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], -vecExp(x0[i])) << i;
  }
}

// A chain value read later through a view (a reshape is a second value on
// the same bytes, not an instruction) is still written.
TEST(Fusion, ValuesReadThroughViewsAreStillWritten) {
  ProgramBuilder b;
  int x = b.input("x", DType::F32, {4, 8});
  int t0 = b.arena(DType::F32, {4, 8}), t1 = b.arena(DType::F32, {4, 8});
  int view = b.addValue(DType::F32, {32}, plan::Value::ARENA,
                        b.program.values(t0).offset(), 0);
  int sum = b.arena(DType::F32, {});
  b.instruction("exp", {x}, {t0});
  b.instruction("neg", {t0}, {t1});
  b.instruction("reduce_sum", {view}, {sum}, {{"axes", {{0}}}});
  b.output(t1, "t1");
  b.output(sum, "sum");
  EXPECT_EQ(loadedKernels(b.program),
            (std::vector<std::string>{"fused_elementwise", "reduce_sum"}));
  std::vector<HostTensor> in = {randomF32({4, 8}, 5)};
  std::vector<HostTensor> fused = runWith(true, b.program, in);
  expectSameBits(fused, runWith(false, b.program, in));
  ASSERT_EQ(fused.size(), 2u);
  EXPECT_NE(values<float>(fused[1])[0], 0.0f);
}

// The arena reuses bytes: a view read while they held one value says
// nothing of a later value in them, which stays a register of its chain.
TEST(Fusion, AViewOfReusedBytesKeepsOnlyItsOwnValueWritten) {
  ProgramBuilder b;
  int x = b.input("x", DType::F32, {4, 8}),
      y = b.input("y", DType::F32, {8, 8});
  int slot = b.arena(DType::F32, {8, 8});
  int64_t at = b.program.values(slot).offset();
  int t0 = b.addValue(DType::F32, {4, 8}, plan::Value::ARENA, at, 0);
  int view = b.addValue(DType::F32, {32}, plan::Value::ARENA, at, 0);
  int sum = b.arena(DType::F32, {});
  int t1 = b.arena(DType::F32, {8, 8});
  int t2 = b.addValue(DType::F32, {8, 8}, plan::Value::ARENA, at, 0);
  int t3 = b.arena(DType::F32, {8, 8});
  b.instruction("exp", {x}, {t0});
  b.instruction("reduce_sum", {view}, {sum}, {{"axes", {{0}}}});
  b.instruction("neg", {y}, {t1});
  b.instruction("tanh", {t1}, {t2});
  b.instruction("abs", {t2}, {t3});
  b.output(sum, "sum");
  b.output(t3, "t3");
  auto comm = makeSingleProcessCommunicator();
  LoadedProgram loaded;
  PlanView plan(b.program);
  std::vector<KernelFn> kernels;
  ASSERT_TRUE(bindCpuKernels(plan.program(), comm.get(), &loaded, &kernels));
  std::vector<bool> viewed = viewedValues(loaded);
  EXPECT_TRUE(viewed[t0]);
  EXPECT_FALSE(viewed[t2]);
  ASSERT_EQ(loaded.instructions.back().info.kernel, "fused_elementwise");
  EXPECT_EQ(loaded.instructions.back().results, std::vector<int32_t>{t3});
  std::vector<HostTensor> in = {randomF32({4, 8}, 7), randomF32({8, 8}, 8)};
  expectSameBits(runWith(true, b.program, in), runWith(false, b.program, in));
}

// Instructions of another shape between a chain's links move aside: a
// per-channel op that needs nothing from the chain runs before it, a
// reduction of a link after it; the chain fuses whole.
TEST(Fusion, InterleavedInstructionsMoveAside) {
  ProgramBuilder b;
  Shape s = {40, 8}, c = {1, 8};
  int x = b.input("x", DType::F32, s), y = b.input("y", DType::F32, s);
  int cs = b.input("cs", DType::F32, c);
  int t0 = b.arena(DType::F32, s), c1 = b.arena(DType::F32, c);
  int r = b.arena(DType::F32, c), t1 = b.arena(DType::F32, s);
  int t2 = b.arena(DType::F32, s);
  b.instruction("mul", {x, y}, {t0});
  b.instruction("add", {cs, cs}, {c1});
  b.instruction("reduce_sum", {t0}, {r}, {{"axes", {{0}}}});
  b.instruction("sub", {t0, c1}, {t1});
  b.instruction("mul", {t1, t1}, {t2});
  b.output(t2, "t2");
  b.output(r, "r");
  EXPECT_EQ(
      loadedKernels(b.program),
      (std::vector<std::string>{"add", "fused_elementwise", "reduce_sum"}));
  std::vector<HostTensor> in = {randomF32(s, 41), randomF32(s, 42),
                                randomF32(c, 43)};
  expectSameBits(runWith(true, b.program, in), runWith(false, b.program, in));
}

// An instruction reading a link's bytes through a view cannot run before the
// chain, even though it names no value of it: it runs after, and the link
// is written for it.
TEST(Fusion, InstructionsReadingALinkThroughAViewStayAfterIt) {
  ProgramBuilder b;
  Shape s = {4, 8};
  int x = b.input("x", DType::F32, s);
  int t0 = b.arena(DType::F32, s), t1 = b.arena(DType::F32, s);
  int view = b.addValue(DType::F32, {32}, plan::Value::ARENA,
                        b.program.values(t1).offset(), 0);
  int w = b.arena(DType::F32, {32}), t2 = b.arena(DType::F32, s);
  b.instruction("exp", {x}, {t0});
  b.instruction("neg", {t0}, {t1});
  b.instruction("neg", {view}, {w});
  b.instruction("tanh", {t1}, {t2});
  b.output(t2, "t2");
  b.output(w, "w");
  EXPECT_EQ(loadedKernels(b.program),
            (std::vector<std::string>{"fused_elementwise", "neg"}));
  std::vector<HostTensor> in = {randomF32(s, 44)};
  std::vector<HostTensor> fused = runWith(true, b.program, in);
  expectSameBits(fused, runWith(false, b.program, in));
  ASSERT_EQ(fused.size(), 2u);
  // exp(x) itself; read before the chain ran it would be the arena's -0.
  EXPECT_EQ(values<float>(fused[1])[0], vecExp(values<float>(in[0])[0]));
}

// Operands broadcast along any dims (rows, columns, a middle dim) are read
// through their strides, across the CPU's 256-element chunk boundaries.
TEST(Fusion, BroadcastOperandsFuseWithTheSameBits) {
  ProgramBuilder b;
  Shape s = {3, 37, 11};
  int x = b.input("x", DType::F32, s);
  int row = b.input("row", DType::F32, {1, 1, 11});
  int col = b.input("col", DType::F32, {3, 37, 1});
  int mid = b.input("mid", DType::F32, {3, 1, 11});
  int t0 = b.arena(DType::F32, s), t1 = b.arena(DType::F32, s),
      t2 = b.arena(DType::F32, s), t3 = b.arena(DType::F32, s);
  b.instruction("mul", {x, row}, {t0});
  b.instruction("sub", {col, t0}, {t1});
  b.instruction("max", {t1, mid}, {t2});
  b.instruction("tanh", {t2}, {t3});
  b.output(t3, "out");
  EXPECT_EQ(loadedKernels(b.program),
            (std::vector<std::string>{"fused_elementwise"}));
  std::vector<HostTensor> in = {randomF32(s, 1), randomF32({1, 1, 11}, 2),
                                randomF32({3, 37, 1}, 3),
                                randomF32({3, 1, 11}, 4)};
  expectSameBits(runWith(true, b.program, in), runWith(false, b.program, in));
}

// select (attention's causal mask) joins chains: its bool condition is read
// as 0 or 1, broadcast like any operand; NaN and -inf pass through intact.
TEST(Fusion, SelectWithABroadcastMaskFusesWithTheSameBits) {
  ProgramBuilder b;
  Shape s = {2, 3, 19, 19};
  int w = b.input("w", DType::F32, s);
  int mask = b.input("mask", DType::Bool, {1, 1, 19, 19});
  int scale = b.constant(f32({1, 1, 1, 1}, {8.0f}));
  int ninf = b.constant(f32({1, 1, 1, 1}, {-INFINITY}));
  int t0 = b.arena(DType::F32, s), t1 = b.arena(DType::F32, s),
      t2 = b.arena(DType::F32, s);
  b.instruction("div", {w, scale}, {t0});
  b.instruction("select", {mask, t0, ninf}, {t1});
  b.instruction("exp", {t1}, {t2});
  b.output(t2, "out");
  EXPECT_EQ(loadedKernels(b.program),
            (std::vector<std::string>{"fused_elementwise"}));
  HostTensor m = HostTensor::zeros(DType::Bool, {1, 1, 19, 19});
  for (int i = 0; i < 19; ++i)
    for (int j = 0; j <= i; ++j)
      m.data<uint8_t>()[i * 19 + j] = j == 0 ? 7 : 1; // any non-zero byte
  HostTensor x = randomF32(s, 6);
  x.data<float>()[5] = NAN;
  std::vector<HostTensor> in = {x, m};
  std::vector<HostTensor> fused = runWith(true, b.program, in);
  expectSameBits(fused, runWith(false, b.program, in));
  ASSERT_EQ(fused.size(), 1u);
  EXPECT_EQ(values<float>(fused[0])[1], 0.0f); // masked: exp(-inf)
}

// Comparisons join chains as 0/1 registers (ReLU's backward: cmp_gt, then
// select); one whose bool escapes the chain is written as bytes. NaN
// compares false (true for cmp_ne), as the separate kernels have it.
TEST(Fusion, ComparisonsFuseAndWriteBoolsWithTheSameBits) {
  ProgramBuilder b;
  Shape s = {5, 3, 9, 13};
  int x = b.input("x", DType::F32, s), g = b.input("g", DType::F32, s);
  int y = b.input("y", DType::F32, {1, 3, 1, 1});
  int zero = b.constant(f32({1, 1, 1, 1}, {0.0f}));
  std::vector<std::string> kinds = {"cmp_eq", "cmp_ne", "cmp_lt",
                                    "cmp_le", "cmp_gt", "cmp_ge"};
  int cond = b.arena(DType::Bool, s), relu = b.arena(DType::F32, s);
  b.instruction("cmp_gt", {x, zero}, {cond});
  b.instruction("select", {cond, g, zero}, {relu});
  b.output(relu, "relu_grad");
  int prev = relu;
  for (const std::string &kind : kinds) {
    int c = b.arena(DType::Bool, s), t = b.arena(DType::F32, s);
    b.instruction(kind, {x, y}, {c});
    b.instruction("select", {c, prev, x}, {t});
    b.output(c, kind);
    prev = t;
  }
  b.output(prev, "chain");
  EXPECT_EQ(loadedKernels(b.program),
            (std::vector<std::string>{"fused_elementwise"}));
  HostTensor xs = randomF32(s, 21), ys = randomF32({1, 3, 1, 1}, 22);
  // Ties with y and NaN on both sides of the comparisons.
  for (int i = 0; i < 40; ++i)
    xs.data<float>()[i * 37] = ys.data<float>()[i % 3];
  xs.data<float>()[5] = NAN;
  ys.data<float>()[1] = NAN;
  std::vector<HostTensor> in = {xs, randomF32(s, 23), ys};
  std::vector<HostTensor> fused = runWith(true, b.program, in);
  expectSameBits(fused, runWith(false, b.program, in));
  ASSERT_EQ(fused.size(), 8u);
  EXPECT_EQ(fused[2].dtype, DType::Bool); // cmp_ne
  EXPECT_EQ(fused[2].data<uint8_t>()[5], 1);
}

// A per-channel operand over image planes longer than the CPU's chunks
// (BatchNorm's scale): runs of one value that chunks cut anywhere.
TEST(Fusion, PerChannelBroadcastOverLongPlanesHasTheSameBits) {
  ProgramBuilder b;
  Shape s = {3, 5, 17, 19};
  int x = b.input("x", DType::F32, s);
  int gamma = b.input("gamma", DType::F32, {1, 5, 1, 1});
  int beta = b.input("beta", DType::F32, {1, 5, 1, 19});
  int t0 = b.arena(DType::F32, s), t1 = b.arena(DType::F32, s);
  b.instruction("mul", {x, gamma}, {t0});
  b.instruction("add", {t0, beta}, {t1});
  b.output(t1, "out");
  EXPECT_EQ(loadedKernels(b.program),
            (std::vector<std::string>{"fused_elementwise"}));
  std::vector<HostTensor> in = {randomF32(s, 31), randomF32({1, 5, 1, 1}, 32),
                                randomF32({1, 5, 1, 19}, 33)};
  std::vector<HostTensor> fused = runWith(true, b.program, in);
  expectSameBits(fused, runWith(false, b.program, in));
  // And against the formula, so that both paths cannot share a mistake.
  const float *xv = in[0].data<float>(), *gv = in[1].data<float>(),
              *bv = in[2].data<float>(), *out = fused[0].data<float>();
  for (int64_t e = 0; e < 3 * 5 * 17 * 19; ++e) {
    int64_t c = e / (17 * 19) % 5, w = e % 19;
    ASSERT_EQ(out[e], xv[e] * gv[c] + bv[c * 19 + w]) << e;
  }
}

// broadcast and copy only move values: inside a chain they become strided
// reads, and the broadcast tensor is never written unless used elsewhere.
TEST(Fusion, BroadcastAndCopyJoinChains) {
  ProgramBuilder b;
  Shape s = {300, 7};
  int x = b.input("x", DType::F32, s), m = b.input("m", DType::F32, {300, 1});
  int wide = b.arena(DType::F32, s), t0 = b.arena(DType::F32, s),
      t1 = b.arena(DType::F32, s);
  b.instruction("broadcast", {m}, {wide});
  b.instruction("sub", {x, wide}, {t0});
  b.instruction("copy", {t0}, {t1});
  b.output(t1, "out");
  EXPECT_EQ(loadedKernels(b.program),
            (std::vector<std::string>{"fused_elementwise"}));
  std::vector<HostTensor> in = {randomF32(s, 8), randomF32({300, 1}, 9)};
  expectSameBits(runWith(true, b.program, in), runWith(false, b.program, in));
}

// Other dtypes and a change of shape end a chain.
// Mixed precision's casts join chains: a bf16 input widened as it is
// loaded, a value rounded to bf16 and stored in bf16 (and read on, rounded,
// by the chain), an f16 one likewise, with the separate kernels' bits. The
// casts of the smaller bias and scalar stay instructions of their own (a
// chain's members share its shape) and their f32 results are read as
// broadcast and scalar inputs.
TEST(Fusion, HalfPrecisionCastsJoinChainsWithTheSameBits) {
  ProgramBuilder b;
  Shape s = {37, 129};
  int x = b.input("x", DType::BF16, s), y = b.input("y", DType::F32, s);
  int bias = b.input("bias", DType::BF16, {1, 129});
  int k = b.input("k", DType::F16, {1, 1});
  int wx = b.arena(DType::F32, s), wb = b.arena(DType::F32, {1, 129}),
      wk = b.arena(DType::F32, {1, 1}), t0 = b.arena(DType::F32, s),
      t1 = b.arena(DType::F32, s), r16 = b.arena(DType::BF16, s),
      back = b.arena(DType::F32, s), t2 = b.arena(DType::F32, s),
      h16 = b.arena(DType::F16, s);
  b.instruction("cast", {x}, {wx});
  b.instruction("cast", {bias}, {wb});
  b.instruction("cast", {k}, {wk});
  b.instruction("add", {wx, wb}, {t0});
  b.instruction("mul", {t0, y}, {t1});
  b.instruction("cast", {t1}, {r16});
  b.instruction("cast", {r16}, {back});
  b.instruction("mul", {back, wk}, {t2});
  b.instruction("cast", {t2}, {h16});
  b.output(r16, "rounded");
  b.output(h16, "half");
  b.output(t2, "wide");
  EXPECT_EQ(loadedKernels(b.program),
            (std::vector<std::string>{"cast", "cast", "fused_elementwise"}));
  auto bf16 = [](const HostTensor &t) {
    HostTensor out = HostTensor::zeros(DType::BF16, t.shape);
    std::vector<float> v = values<float>(t);
    auto *dst = reinterpret_cast<uint16_t *>(out.bytes.data());
    for (size_t i = 0; i < v.size(); ++i) {
      uint32_t u;
      std::memcpy(&u, &v[i], 4);
      dst[i] = static_cast<uint16_t>(u >> 16);
    }
    return out;
  };
  HostTensor k16 = HostTensor::zeros(DType::F16, {1, 1});
  reinterpret_cast<uint16_t *>(k16.bytes.data())[0] = 0x3e00; // 1.5
  std::vector<HostTensor> in = {bf16(randomF32(s, 1)), randomF32(s, 2),
                                bf16(randomF32({1, 129}, 3)), k16};
  expectSameBits(runWith(true, b.program, in), runWith(false, b.program, in));
}

// A bf16 value widened into a chain whose rounded bf16 result takes its
// bytes (the arena reuses a product's result for the chain after it): one
// fused instruction, since each element is read before it is written; a
// result that overlaps it shifted is not fused with the widening.
TEST(Fusion, AHalfResultOverItsHalfInputFuses) {
  for (bool shifted : {false, true}) {
    ProgramBuilder b;
    Shape s = {300};
    int x = b.input("x", DType::BF16, {600});
    int h = b.addValue(DType::BF16, s, plan::Value::ARENA, 0, 0);
    int w = b.addValue(DType::F32, s, plan::Value::ARENA, 640, 0);
    int e = b.addValue(DType::F32, s, plan::Value::ARENA, 1920, 0);
    int r = b.addValue(DType::BF16, s, plan::Value::ARENA, shifted ? 64 : 0, 0);
    b.program.set_arena_bytes(4096);
    b.instruction("slice", {x}, {h}, {{"starts", {{0}}}});
    b.instruction("cast", {h}, {w}); // h's last use
    b.instruction("exp", {w}, {e});
    b.instruction("cast", {e}, {r});
    b.output(r, "r");
    std::vector<std::string> kernels = loadedKernels(b.program);
    if (!shifted)
      EXPECT_EQ(kernels,
                (std::vector<std::string>{"slice", "fused_elementwise"}));
    else
      EXPECT_NE(kernels,
                (std::vector<std::string>{"slice", "fused_elementwise"}));
    HostTensor wide = randomF32({600}, 5);
    HostTensor half = HostTensor::zeros(DType::BF16, {600});
    for (int64_t i = 0; i < 600; ++i)
      half.data<uint16_t>()[i] = floatToBf16(wide.data<float>()[i]);
    std::vector<HostTensor> inputs = {half};
    expectSameBits(runWith(true, b.program, inputs),
                   runWith(false, b.program, inputs));
  }
}

TEST(Fusion, OnlyF32ChainsOfOneShapeFuse) {
  ProgramBuilder b;
  int x = b.input("x", DType::F32, {4, 8});
  int i = b.input("i", DType::I64, {4, 8});
  int t0 = b.arena(DType::F32, {4, 8}), t1 = b.arena(DType::F32, {4, 8});
  int t2 = b.arena(DType::F32, {1, 8}), t3 = b.arena(DType::F32, {1, 8});
  int t4 = b.arena(DType::I64, {4, 8}), t5 = b.arena(DType::I64, {4, 8});
  b.instruction("exp", {x}, {t0});
  b.instruction("neg", {t0}, {t1});
  b.instruction("reduce_sum", {t1}, {t2}, {{"axes", {{0}}}});
  b.instruction("sqrt", {t2}, {t3});
  b.instruction("neg", {i}, {t4});
  b.instruction("abs", {t4}, {t5});
  b.output(t3, "a");
  b.output(t5, "b");
  EXPECT_EQ(loadedKernels(b.program),
            (std::vector<std::string>{"fused_elementwise", "reduce_sum", "sqrt",
                                      "neg", "abs"}));
}

} // namespace
} // namespace cleave::rt::test

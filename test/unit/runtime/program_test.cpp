//===- program_test.cpp - Loading backend_plugin.h's plain programs -------===//
//
// The loader reads the C description both the host and the CUDA plugin
// load. A description is data a plugin boundary hands over, so malformed
// ones (negative counts, a shape without dims) are refused by the loader
// itself, not trusted; and the protobuf view of a plan loads exactly as
// the plan does.
//
//===----------------------------------------------------------------------===//

#include "core/plan_reader.h"
#include "core/program.h"
#include "test_util.h"

#include "cleave/runtime/comm.h"

#include <gtest/gtest.h>

namespace cleave::rt {
namespace {

Status loadDesc(const cleave_program &p, LoadedProgram *out) {
  static std::unique_ptr<Communicator> comm = makeSingleProcessCommunicator();
  return loadProgram(p, comm.get(), nullptr, out);
}

TEST(ProgramDesc, RefusesNegativeCounts) {
  cleave_program p{};
  p.name = "bad";
  p.num_values = -1;
  LoadedProgram out;
  Status s = loadDesc(p, &out);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.message(), "program 'bad': malformed program (a negative count)");
}

TEST(ProgramDesc, RefusesAShapeWithoutDims) {
  cleave_value v{CLEAVE_F32, 2, nullptr, CLEAVE_ARENA, 0, 0};
  cleave_program p{};
  p.name = "bad";
  p.values = &v;
  p.num_values = 1;
  LoadedProgram out;
  Status s = loadDesc(p, &out);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.message(), "program 'bad': value 0: malformed shape");
}

TEST(ProgramDesc, RefusesAnInstructionWithANegativeArity) {
  int64_t shape[] = {2};
  cleave_value v{CLEAVE_F32, 1, shape, CLEAVE_ARENA, 0, 0};
  cleave_instruction inst{"relu",  "m.onnx:3", nullptr, -2,
                          nullptr, 0,          nullptr, 0};
  cleave_program p{};
  p.name = "bad";
  p.values = &v;
  p.num_values = 1;
  p.arena_bytes = 8;
  p.instructions = &inst;
  p.num_instructions = 1;
  LoadedProgram out;
  Status s = loadDesc(p, &out);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.message(), "program 'bad': instruction 0 ('relu' at m.onnx:3): "
                         "malformed instruction (a negative count)");
}

TEST(ProgramDesc, PlanViewLoadsAsThePlan) {
  test::ProgramBuilder b;
  int x = b.input("x", DType::F32, {2, 3});
  int y = b.arena(DType::F32, {2, 3});
  b.instruction("relu", {x}, {y}, {}, "m.onnx:3");
  b.output(y, "y");
  PlanView view(b.program);
  LoadedProgram out;
  Status s = loadDesc(view.program(), &out);
  ASSERT_TRUE(s) << s.message();
  ASSERT_EQ(out.instructions.size(), 1u);
  EXPECT_EQ(out.instructions[0].info.kernel, "relu");
  EXPECT_EQ(out.instructions[0].origin, 0);
  EXPECT_EQ(out.values[y].type.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(out.inputNames, (std::vector<std::string>{"x"}));
  EXPECT_EQ(out.instructions[0].location, "m.onnx:3");
}

} // namespace
} // namespace cleave::rt

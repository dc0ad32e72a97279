//===- program.h - A validated plan Program, backend-neutral ----*- C++ -*-===//
//
// What loading a plan::Program yields once every value and instruction has
// been checked (by the CPU kernels' prepare functions): the CPU executor runs
// it, and the CUDA backend (libcleave_cuda.so) receives it instead of the
// protobuf, so the plugin needs neither protobuf nor a second copy of the
// plan's descriptors, and both backends accept exactly the same programs.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_CPU_PROGRAM_H
#define CLEAVE_RUNTIME_CPU_PROGRAM_H

#include "fusion.h"
#include "kernel.h"

#include <memory>
#include <string>
#include <vector>

namespace cleave::rt {

enum class Storage { Arena, Input, Constant };

struct ProgramValue {
  TensorType type;
  int64_t numBytes = 0;
  Storage storage = Storage::Arena;
  /// Byte offset in the arena, input or constant.
  int64_t offset = 0;
  /// Input or constant index.
  int32_t index = 0;
};

struct ProgramInstruction {
  /// Operand/result types, attributes, communicator.
  KernelInfo info;
  std::string location;
  /// Value ids; -1 for an absent optional operand/result.
  std::vector<int32_t> operands, results;
  /// The CPU kernel the prepare function returned.
  KernelFn cpu;
  /// Set for a "fused_elementwise" instruction (fusion.h): operands are its
  /// inputs, results its outputs.
  std::shared_ptr<const FusedProgram> fused;
};

struct LoadedProgram {
  std::string name;
  std::vector<ProgramValue> values;
  std::vector<int32_t> inputs, outputs;
  std::vector<std::string> inputNames, outputNames;
  std::vector<std::string> constants;
  int64_t arenaBytes = 0;
  std::vector<ProgramInstruction> instructions;
};

/// Checks \p program and binds its CPU kernels; errors name the value or
/// instruction.
Status loadProgram(const plan::Program &program, Communicator *comm,
                   LoadedProgram *result);

/// "instruction 3 ('add' at model.onnx:12)", for messages.
std::string describeInstruction(size_t index, const std::string &kernel,
                                const std::string &location);

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_CPU_PROGRAM_H

//===- program.h - A validated plan program, backend-neutral ----*- C++ -*-===//
//
// Loading checks a program's values (dtypes, shapes, bytes inside their
// storage) and every instruction against the kernel schema, whatever backend
// will run it. It reads the plain C description of backend_plugin.h, not the
// protobuf: the host makes one from a plan::Program (plan_reader.h), the CUDA
// plugin receives one, and both load it with this one function, so both
// backends accept exactly the same programs and the plugin needs no
// protobuf.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_CORE_PROGRAM_H
#define CLEAVE_RUNTIME_CORE_PROGRAM_H

#include "cleave/runtime/backend_plugin.h"
#include "core/fusion.h"
#include "core/kernel_info.h"

#include <functional>

#include <memory>
#include <string>
#include <vector>

namespace cleave::rt {

/// Output: the caller's tensor of output `index` (plan.proto's OUTPUT).
enum class Storage { Arena, Input, Constant, Output };

struct ProgramValue {
  TensorType type;
  int64_t numBytes = 0;
  Storage storage = Storage::Arena;
  /// Byte offset in the arena, input, constant or output.
  int64_t offset = 0;
  /// Input, constant or output index.
  int32_t index = 0;
};

/// Whether \p a and \p b may cover some of the same bytes a step writes:
/// both in the arena, or both in one output's tensor, with byte ranges that
/// overlap. (Inputs and constants are never written.)
inline bool writableOverlap(const ProgramValue &a, const ProgramValue &b) {
  bool sameStorage = a.storage == b.storage &&
                     (a.storage == Storage::Arena ||
                      (a.storage == Storage::Output && a.index == b.index));
  return sameStorage && a.offset < b.offset + b.numBytes &&
         b.offset < a.offset + a.numBytes;
}

struct ProgramInstruction {
  /// Operand/result types, attributes, communicator.
  KernelInfo info;
  std::string location;
  /// Value ids; -1 for an absent optional operand/result.
  std::vector<int32_t> operands, results;
  /// The instruction's index in the plan; -1 for one fusion made.
  int32_t origin = -1;
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

/// Runs on each instruction right after the schema has checked it (the CPU
/// backend checks its shape rules here); an error stops the load and is
/// reported for that instruction.
using InstructionCheck = std::function<Status(const ProgramInstruction &)>;

/// Checks \p program and fills \p result; errors name the program and the
/// value or instruction. Collectives' axes are checked against \p comm
/// (not null), which the instructions keep.
Status loadProgram(const cleave_program &program, Communicator *comm,
                   const InstructionCheck &check, LoadedProgram *result);

/// "instruction 3 ('add' at model.onnx:12)", for messages.
std::string describeInstruction(size_t index, const std::string &kernel,
                                const std::string &location);

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_CORE_PROGRAM_H

//===- program.cpp - Loads and checks a program, for every backend --------===//
//
// Loading validates the whole program so that running it can only fail for
// data-dependent reasons (e.g. gather indices): every value's bytes are in
// bounds of their storage, and every instruction matches the kernel schema
// (the backend's check then adds its shape rules).
//
//===----------------------------------------------------------------------===//

#include "core/program.h"

#include "cleave/runtime/comm.h"

#include <algorithm>
#include <map>

namespace cleave::rt {

namespace {

/// Largest element count accepted; keeps byte sizes far from overflow.
constexpr int64_t kMaxElements = int64_t(1) << 48;

Status convertDType(int dtype, DType *out) {
  switch (dtype) {
  case CLEAVE_F32:
    *out = DType::F32;
    return Status::ok();
  case CLEAVE_I64:
    *out = DType::I64;
    return Status::ok();
  case CLEAVE_I32:
    *out = DType::I32;
    return Status::ok();
  case CLEAVE_BOOL:
    *out = DType::Bool;
    return Status::ok();
  case CLEAVE_F64:
    *out = DType::F64;
    return Status::ok();
  case CLEAVE_F16:
    *out = DType::F16;
    return Status::ok();
  case CLEAVE_BF16:
    *out = DType::BF16;
    return Status::ok();
  case CLEAVE_I8:
    *out = DType::I8;
    return Status::ok();
  case CLEAVE_I16:
    *out = DType::I16;
    return Status::ok();
  case CLEAVE_U8:
    *out = DType::U8;
    return Status::ok();
  case CLEAVE_U16:
    *out = DType::U16;
    return Status::ok();
  case CLEAVE_U32:
    *out = DType::U32;
    return Status::ok();
  default:
    return Status::error("unsupported dtype " + std::to_string(dtype));
  }
}

std::string str(const char *s) { return s ? s : ""; }

/// Checks value \p i's type and where its bytes lie.
Status loadValue(const cleave_program &program, int i, ProgramValue &info) {
  const cleave_value &v = program.values[i];
  auto fail = [&](const std::string &msg) {
    return Status::error("value " + std::to_string(i) + ": " + msg);
  };
  if (Status s = convertDType(v.dtype, &info.type.dtype); !s)
    return fail(s.message());
  if (v.rank < 0 || (v.rank > 0 && !v.shape))
    return fail("malformed shape");
  int64_t n = 1;
  for (int32_t k = 0; k < v.rank; ++k) {
    int64_t d = v.shape[k];
    if (d < 0)
      return fail("negative dimension " + std::to_string(d));
    if (d != 0 && n > kMaxElements / d)
      return fail("too many elements");
    n *= d;
    info.type.shape.push_back(d);
  }
  int64_t elemSize = static_cast<int64_t>(dtypeSize(info.type.dtype));
  info.numBytes = n * elemSize;
  info.offset = v.offset;
  info.index = v.index;
  if (info.offset < 0 || info.offset % elemSize != 0)
    return fail("offset " + std::to_string(info.offset) +
                " is negative or not a multiple of the element size");
  // Input, output and constant values name their entry of that table.
  auto indexIn = [&](int32_t count, const std::string &what) {
    if (info.index >= 0 && info.index < count)
      return Status::ok();
    return fail(what + " index " + std::to_string(info.index) +
                " out of range (program has " + std::to_string(count) + " " +
                what + "s)");
  };
  switch (v.storage) {
  case CLEAVE_ARENA:
    info.storage = Storage::Arena;
    if (info.offset > program.arena_bytes - info.numBytes)
      return fail("arena bytes [" + std::to_string(info.offset) + ", " +
                  std::to_string(info.offset + info.numBytes) +
                  ") exceed arena_bytes " +
                  std::to_string(program.arena_bytes));
    return Status::ok();
  case CLEAVE_INPUT:
    info.storage = Storage::Input;
    return indexIn(program.num_inputs, "input");
  case CLEAVE_OUTPUT:
    info.storage = Storage::Output;
    return indexIn(program.num_outputs, "output");
  case CLEAVE_CONSTANT:
    info.storage = Storage::Constant;
    if (Status s = indexIn(program.num_constants, "constant"); !s)
      return s;
    if (info.offset > program.constants[info.index].size - info.numBytes)
      return fail("bytes [" + std::to_string(info.offset) + ", " +
                  std::to_string(info.offset + info.numBytes) +
                  ") exceed constant " + std::to_string(info.index) + " of " +
                  std::to_string(program.constants[info.index].size) +
                  " bytes");
    return Status::ok();
  default:
    return fail("unknown storage " + std::to_string(v.storage));
  }
}

/// Inputs are whole values, views stay inside them, and constants are
/// exactly covered by their values.
Status checkStorage(const cleave_program &program, LoadedProgram &impl) {
  int numValues = program.num_values;
  // Inputs: the value listed at position i is the whole of input i.
  for (int i = 0; i < program.num_inputs; ++i) {
    int32_t id = program.inputs[i];
    std::string what = "input " + std::to_string(i);
    if (id < 0 || id >= numValues)
      return Status::error(what + ": value id " + std::to_string(id) +
                           " out of range");
    const ProgramValue &v = impl.values[id];
    if (v.storage != Storage::Input || v.index != i || v.offset != 0)
      return Status::error(what + ": value " + std::to_string(id) +
                           " is not INPUT storage with index " +
                           std::to_string(i) + " and offset 0");
    impl.inputs.push_back(id);
  }
  // Views of inputs must stay inside them.
  for (int i = 0; i < numValues; ++i) {
    const ProgramValue &v = impl.values[i];
    if (v.storage != Storage::Input)
      continue;
    const ProgramValue &whole = impl.values[impl.inputs[v.index]];
    if (v.offset > whole.numBytes - v.numBytes)
      return Status::error("value " + std::to_string(i) + ": bytes [" +
                           std::to_string(v.offset) + ", " +
                           std::to_string(v.offset + v.numBytes) +
                           ") exceed input " + std::to_string(v.index) +
                           " of " + std::to_string(whole.numBytes) + " bytes");
  }
  // A constant's bytes must be exactly what its values cover: the largest
  // value referring to it (its owner) ends where the constant ends.
  std::vector<int64_t> constantEnd(program.num_constants, -1);
  for (const ProgramValue &v : impl.values)
    if (v.storage == Storage::Constant)
      constantEnd[v.index] =
          std::max(constantEnd[v.index], v.offset + v.numBytes);
  for (int c = 0; c < program.num_constants; ++c) {
    int64_t size = program.constants[c].size;
    if (constantEnd[c] >= 0 && constantEnd[c] != size)
      return Status::error(
          "constant " + std::to_string(c) + " has " + std::to_string(size) +
          " bytes but its values cover " + std::to_string(constantEnd[c]));
  }
  for (int i = 0; i < program.num_outputs; ++i) {
    int32_t id = program.outputs[i];
    if (id < 0 || id >= numValues)
      return Status::error("output " + std::to_string(i) + ": value id " +
                           std::to_string(id) + " out of range");
    impl.outputs.push_back(id);
  }
  // A value in output k's tensor stays inside the value listed as output k,
  // which is the whole of it.
  for (int i = 0; i < numValues; ++i) {
    const ProgramValue &v = impl.values[i];
    if (v.storage != Storage::Output)
      continue;
    const ProgramValue &whole = impl.values[impl.outputs[v.index]];
    if (whole.storage != Storage::Output || whole.index != v.index ||
        whole.offset != 0)
      return Status::error("value " + std::to_string(i) + " is in output " +
                           std::to_string(v.index) +
                           "'s tensor, but that output's value is not the "
                           "whole of it");
    if (v.offset > whole.numBytes - v.numBytes)
      return Status::error("value " + std::to_string(i) + ": bytes [" +
                           std::to_string(v.offset) + ", " +
                           std::to_string(v.offset + v.numBytes) +
                           ") exceed output " + std::to_string(v.index) +
                           " of " + std::to_string(whole.numBytes) + " bytes");
  }
  return Status::ok();
}

/// Names given, one per input (output), or none: then "input0", ...
Status loadNames(const char *const *names, int32_t numNames, size_t count,
                 const char *what, std::vector<std::string> *out) {
  if (numNames == 0 || !names) {
    for (size_t i = 0; i < count; ++i)
      out->push_back(std::string(what) + std::to_string(i));
    return Status::ok();
  }
  if (static_cast<size_t>(numNames) != count)
    return Status::error(std::string("program has ") + std::to_string(count) +
                         " " + what + "s but " + std::to_string(numNames) +
                         " " + what + " names");
  for (int32_t i = 0; i < numNames; ++i)
    out->push_back(str(names[i]));
  return Status::ok();
}

Status loadValues(const cleave_program &program, LoadedProgram &impl) {
  if (program.arena_bytes < 0)
    return Status::error("negative arena_bytes " +
                         std::to_string(program.arena_bytes));
  if (program.num_values < 0 || program.num_inputs < 0 ||
      program.num_outputs < 0 || program.num_constants < 0 ||
      program.num_instructions < 0)
    return Status::error("malformed program (a negative count)");
  impl.values.resize(program.num_values);
  for (int i = 0; i < program.num_values; ++i)
    if (Status s = loadValue(program, i, impl.values[i]); !s)
      return s;
  if (Status s = checkStorage(program, impl); !s)
    return s;
  if (Status s = loadNames(program.input_names, program.num_input_names,
                           impl.inputs.size(), "input", &impl.inputNames);
      !s)
    return s;
  return loadNames(program.output_names, program.num_output_names,
                   impl.outputs.size(), "output", &impl.outputNames);
}

/// Resolves \p ids to the values' types (null for -1); results must be in
/// the arena.
Status typesOf(const int32_t *ids, int32_t count, bool results,
               const LoadedProgram &impl,
               std::vector<std::optional<TensorType>> *types) {
  const char *what = results ? "result" : "operand";
  int numValues = static_cast<int>(impl.values.size());
  for (int32_t k = 0; k < count; ++k) {
    int32_t id = ids[k];
    if (id == -1) {
      types->push_back(std::nullopt);
      continue;
    }
    if (id < 0 || id >= numValues)
      return Status::error(std::string(what) + " value id " +
                           std::to_string(id) + " out of range");
    const ProgramValue &v = impl.values[id];
    if (results && v.storage != Storage::Arena &&
        !(v.storage == Storage::Output && impl.outputs[v.index] == id))
      return Status::error("result value " + std::to_string(id) +
                           " is not in the arena or an output's tensor");
    types->push_back(impl.values[id].type);
  }
  return Status::ok();
}

Status loadInstruction(const cleave_program &program, size_t index,
                       Communicator *comm, const InstructionCheck &check,
                       LoadedProgram &impl) {
  const cleave_instruction &inst = program.instructions[index];
  std::string kernel = str(inst.kernel), location = str(inst.location);
  auto fail = [&](const std::string &msg) {
    return Status::error(describeInstruction(index, kernel, location) + ": " +
                         msg);
  };
  if (!schema::kernelNamed(kernel))
    return fail("unknown kernel '" + kernel + "'");
  if (inst.num_operands < 0 || inst.num_results < 0 || inst.num_attrs < 0)
    return fail("malformed instruction (a negative count)");

  ProgramInstruction loaded;
  KernelInfo &info = loaded.info;
  info.kernel = kernel;
  info.comm = comm;
  if (Status s = typesOf(inst.operands, inst.num_operands, false, impl,
                         &info.operands);
      !s)
    return fail(s.message());
  if (Status s =
          typesOf(inst.results, inst.num_results, true, impl, &info.results);
      !s)
    return fail(s.message());
  std::map<std::string, Attr> attrs;
  for (int32_t a = 0; a < inst.num_attrs; ++a) {
    const cleave_attr &attr = inst.attrs[a];
    attrs[str(attr.name)] =
        Attr{std::vector<int64_t>(attr.ints, attr.ints + attr.num_ints),
             std::vector<double>(attr.floats, attr.floats + attr.num_floats)};
  }
  if (Status s = validateInstruction(attrs, info); !s)
    return fail(s.message());
  loaded.location = location;
  loaded.operands.assign(inst.operands, inst.operands + inst.num_operands);
  loaded.results.assign(inst.results, inst.results + inst.num_results);
  loaded.origin = static_cast<int32_t>(index);
  if (check)
    if (Status s = check(loaded); !s)
      return fail(s.message());
  impl.instructions.push_back(std::move(loaded));
  return Status::ok();
}

} // namespace

Status loadProgram(const cleave_program &program, Communicator *comm,
                   const InstructionCheck &check, LoadedProgram *result) {
  LoadedProgram &loaded = *result;
  loaded.name = str(program.name);
  std::string prefix = "program '" + loaded.name + "': ";
  if (Status s = loadValues(program, loaded); !s)
    return Status::error(prefix + s.message());
  for (size_t i = 0; i < static_cast<size_t>(program.num_instructions); ++i)
    if (Status s = loadInstruction(program, i, comm, check, loaded); !s)
      return Status::error(prefix + s.message());
  for (int32_t c = 0; c < program.num_constants; ++c) {
    const cleave_bytes &bytes = program.constants[c];
    loaded.constants.push_back(
        bytes.size > 0 ? std::string(static_cast<const char *>(bytes.data),
                                     static_cast<size_t>(bytes.size))
                       : std::string());
  }
  loaded.arenaBytes = program.arena_bytes;
  return Status::ok();
}

} // namespace cleave::rt

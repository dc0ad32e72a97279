//===- executor.cpp - Loads and runs a plan Program on the CPU ------------===//
//
// Loading validates the whole program so that running it can only fail for
// data-dependent reasons (e.g. gather indices): every value's bytes are in
// bounds of their storage, and every kernel's prepare function has checked its
// operand types and attributes.
//
//===----------------------------------------------------------------------===//

#include "program.h"

#include "cleave/runtime/comm.h"
#include "plan/plan.pb.h"

#include <algorithm>
#include <cstdlib>
#include <limits>

namespace cleave::rt {

namespace {

// Indexed by schema::Kernel (kernels.def's order). Each name in kernels.def
// must have a prepare_<name> definition, or linking the runtime fails naming
// the missing symbol.
const PrepareFn kPrepare[] = {
#define CLEAVE_KERNEL(NAME) &prepare_##NAME,
#include "cleave/runtime/kernels.def"
};

struct FreeDeleter {
  void operator()(uint8_t *p) const { std::free(p); }
};
using AlignedBytes = std::unique_ptr<uint8_t[], FreeDeleter>;

/// 64-byte aligned, zeroed storage (at least one cache line, so that empty
/// buffers still have a valid address).
AlignedBytes allocateAligned(size_t size) {
  size_t rounded = (size + 63) / 64 * 64;
  if (rounded == 0)
    rounded = 64;
  auto *p = static_cast<uint8_t *>(std::aligned_alloc(64, rounded));
  if (p)
    std::memset(p, 0, rounded);
  return AlignedBytes(p);
}

/// Largest element count accepted; keeps byte sizes far from overflow.
constexpr int64_t kMaxElements = int64_t(1) << 48;

struct BoundInstruction {
  const ProgramInstruction *inst = nullptr;
  // Scratch for the pointers of one run; sized once here.
  std::vector<const void *> operandPtrs;
  std::vector<void *> resultPtrs;
};

} // namespace

struct Executor::Impl {
  /// The communicator collectives use; ownedComm when none was given.
  std::unique_ptr<Communicator> ownedComm;
  LoadedProgram program;
  std::vector<AlignedBytes> constants;
  AlignedBytes arena;
  std::vector<BoundInstruction> instructions;
  // Per-run base pointer of every value.
  std::vector<const uint8_t *> valuePtrs;
};

Executor::Executor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Executor::~Executor() = default;

static Status convertDType(int dtype, DType *out) {
  switch (dtype) {
  case plan::F32:
    *out = DType::F32;
    return Status::ok();
  case plan::I64:
    *out = DType::I64;
    return Status::ok();
  case plan::I32:
    *out = DType::I32;
    return Status::ok();
  case plan::BOOL:
    *out = DType::Bool;
    return Status::ok();
  default:
    return Status::error("unsupported dtype " + std::to_string(dtype));
  }
}

static Status loadValues(const plan::Program &program, LoadedProgram &impl) {
  if (program.arena_bytes() < 0)
    return Status::error("negative arena_bytes " +
                         std::to_string(program.arena_bytes()));
  impl.values.resize(program.values_size());
  for (int i = 0; i < program.values_size(); ++i) {
    const plan::Value &v = program.values(i);
    ProgramValue &info = impl.values[i];
    auto fail = [&](const std::string &msg) {
      return Status::error("value " + std::to_string(i) + ": " + msg);
    };
    if (Status s = convertDType(v.type().dtype(), &info.type.dtype); !s)
      return fail(s.message());
    int64_t n = 1;
    for (int64_t d : v.type().shape()) {
      if (d < 0)
        return fail("negative dimension " + std::to_string(d));
      if (d != 0 && n > kMaxElements / d)
        return fail("too many elements");
      n *= d;
      info.type.shape.push_back(d);
    }
    int64_t elemSize = static_cast<int64_t>(dtypeSize(info.type.dtype));
    info.numBytes = n * elemSize;
    info.offset = v.offset();
    info.index = v.index();
    if (info.offset < 0 || info.offset % elemSize != 0)
      return fail("offset " + std::to_string(info.offset) +
                  " is negative or not a multiple of the element size");
    switch (v.storage()) {
    case plan::Value::ARENA:
      info.storage = Storage::Arena;
      if (info.offset > program.arena_bytes() - info.numBytes)
        return fail("arena bytes [" + std::to_string(info.offset) + ", " +
                    std::to_string(info.offset + info.numBytes) +
                    ") exceed arena_bytes " +
                    std::to_string(program.arena_bytes()));
      break;
    case plan::Value::INPUT:
      info.storage = Storage::Input;
      if (info.index < 0 || info.index >= program.inputs_size())
        return fail("input index " + std::to_string(info.index) +
                    " out of range (program has " +
                    std::to_string(program.inputs_size()) + " inputs)");
      break;
    case plan::Value::CONSTANT:
      info.storage = Storage::Constant;
      if (info.index < 0 || info.index >= program.constants_size())
        return fail("constant index " + std::to_string(info.index) +
                    " out of range (program has " +
                    std::to_string(program.constants_size()) + " constants)");
      if (info.offset >
          static_cast<int64_t>(program.constants(info.index).size()) -
              info.numBytes)
        return fail("bytes [" + std::to_string(info.offset) + ", " +
                    std::to_string(info.offset + info.numBytes) +
                    ") exceed constant " + std::to_string(info.index) + " of " +
                    std::to_string(program.constants(info.index).size()) +
                    " bytes");
      break;
    default:
      return fail("unknown storage " + std::to_string(v.storage()));
    }
  }

  // Inputs: the value listed at position i is the whole of input i.
  int numValues = program.values_size();
  for (int i = 0; i < program.inputs_size(); ++i) {
    int32_t id = program.inputs(i);
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
  std::vector<int64_t> constantEnd(program.constants_size(), -1);
  for (const ProgramValue &v : impl.values)
    if (v.storage == Storage::Constant)
      constantEnd[v.index] =
          std::max(constantEnd[v.index], v.offset + v.numBytes);
  for (int c = 0; c < program.constants_size(); ++c) {
    int64_t size = static_cast<int64_t>(program.constants(c).size());
    if (constantEnd[c] >= 0 && constantEnd[c] != size)
      return Status::error(
          "constant " + std::to_string(c) + " has " + std::to_string(size) +
          " bytes but its values cover " + std::to_string(constantEnd[c]));
  }

  for (int i = 0; i < program.outputs_size(); ++i) {
    int32_t id = program.outputs(i);
    if (id < 0 || id >= numValues)
      return Status::error("output " + std::to_string(i) + ": value id " +
                           std::to_string(id) + " out of range");
    impl.outputs.push_back(id);
  }

  auto loadNames = [](const auto &names, size_t count, const char *what,
                      std::vector<std::string> *out) {
    if (names.empty()) {
      for (size_t i = 0; i < count; ++i)
        out->push_back(std::string(what) + std::to_string(i));
      return Status::ok();
    }
    if (static_cast<size_t>(names.size()) != count)
      return Status::error(
          std::string("program has ") + std::to_string(count) + " " + what +
          "s but " + std::to_string(names.size()) + " " + what + " names");
    out->assign(names.begin(), names.end());
    return Status::ok();
  };
  if (Status s = loadNames(program.input_names(), impl.inputs.size(), "input",
                           &impl.inputNames);
      !s)
    return s;
  return loadNames(program.output_names(), impl.outputs.size(), "output",
                   &impl.outputNames);
}

static Status bindInstruction(const plan::Program &program, size_t index,
                              Communicator *comm, LoadedProgram &impl) {
  const plan::Instruction &inst = program.instructions(index);
  auto fail = [&](const std::string &msg) {
    return Status::error(
        describeInstruction(index, inst.kernel(), inst.location()) + ": " +
        msg);
  };
  if (!schema::kernelNamed(inst.kernel()))
    return fail("unknown kernel '" + inst.kernel() + "'");

  KernelInfo info;
  info.kernel = inst.kernel();
  info.comm = comm;
  int numValues = program.values_size();
  for (int32_t id : inst.operands()) {
    if (id == -1) {
      info.operands.push_back(std::nullopt);
      continue;
    }
    if (id < 0 || id >= numValues)
      return fail("operand value id " + std::to_string(id) + " out of range");
    info.operands.push_back(impl.values[id].type);
  }
  for (int32_t id : inst.results()) {
    if (id == -1) {
      info.results.push_back(std::nullopt);
      continue;
    }
    if (id < 0 || id >= numValues)
      return fail("result value id " + std::to_string(id) + " out of range");
    if (impl.values[id].storage != Storage::Arena)
      return fail("result value " + std::to_string(id) +
                  " is not in the arena");
    info.results.push_back(impl.values[id].type);
  }
  std::map<std::string, Attr> attrs;
  for (const auto &[name, attr] : inst.attrs())
    attrs[name] =
        Attr{std::vector<int64_t>(attr.ints().begin(), attr.ints().end()),
             std::vector<double>(attr.floats().begin(), attr.floats().end())};
  if (Status s = validateInstruction(attrs, info); !s)
    return fail(s.message());
  PrepareFn prepare = kPrepare[static_cast<size_t>(*info.kernelId)];

  ProgramInstruction bound;
  if (Status s = prepare(info, &bound.cpu); !s)
    return fail(s.message());
  bound.info = std::move(info);
  bound.location = inst.location();
  bound.operands.assign(inst.operands().begin(), inst.operands().end());
  bound.results.assign(inst.results().begin(), inst.results().end());
  impl.instructions.push_back(std::move(bound));
  return Status::ok();
}

Status loadProgram(const plan::Program &program, Communicator *comm,
                   LoadedProgram *result) {
  LoadedProgram &loaded = *result;
  loaded.name = program.name();
  std::string prefix = "program '" + program.name() + "': ";
  if (Status s = loadValues(program, loaded); !s)
    return Status::error(prefix + s.message());
  for (size_t i = 0; i < static_cast<size_t>(program.instructions_size()); ++i)
    if (Status s = bindInstruction(program, i, comm, loaded); !s)
      return Status::error(prefix + s.message());
  loaded.constants.assign(program.constants().begin(),
                          program.constants().end());
  loaded.arenaBytes = program.arena_bytes();
  fuseElementwise(loaded);
  return Status::ok();
}

Status Executor::create(const plan::Program &program,
                        std::unique_ptr<Executor> *result, Communicator *comm) {
  auto impl = std::make_unique<Impl>();
  if (!comm) {
    impl->ownedComm = makeSingleProcessCommunicator({1});
    comm = impl->ownedComm.get();
  }
  if (Status s = loadProgram(program, comm, &impl->program); !s)
    return s;
  LoadedProgram &loaded = impl->program;
  std::string prefix = "program '" + program.name() + "': ";

  // Copy constants into aligned storage: protobuf strings give no alignment
  // guarantee suitable for f32/i64 loads.
  for (const std::string &c : loaded.constants) {
    AlignedBytes bytes = allocateAligned(c.size());
    if (!bytes)
      return Status::error(prefix + "out of memory for constants");
    std::memcpy(bytes.get(), c.data(), c.size());
    impl->constants.push_back(std::move(bytes));
  }
  loaded.constants.clear();
  impl->arena = allocateAligned(static_cast<size_t>(loaded.arenaBytes));
  if (!impl->arena)
    return Status::error(prefix + "cannot allocate an arena of " +
                         std::to_string(loaded.arenaBytes) + " bytes");
  for (const ProgramInstruction &inst : loaded.instructions) {
    BoundInstruction bound;
    bound.inst = &inst;
    // Optional trailing operands/results may be left out of the instruction;
    // kernels then read null pointers there.
    bound.operandPtrs.assign(std::max(inst.operands.size(), kMinArgSlots),
                             nullptr);
    bound.resultPtrs.assign(std::max(inst.results.size(), kMinArgSlots),
                            nullptr);
    impl->instructions.push_back(std::move(bound));
  }
  impl->valuePtrs.resize(loaded.values.size());
  result->reset(new Executor(std::move(impl)));
  return Status::ok();
}

Status Executor::run(const std::vector<HostTensor> &inputs,
                     std::vector<HostTensor> *outputs) {
  Impl &impl = *impl_;
  const LoadedProgram &program = impl.program;
  if (inputs.size() != program.inputs.size())
    return Status::error("expected " + std::to_string(program.inputs.size()) +
                         " inputs, got " + std::to_string(inputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ProgramValue &v = program.values[program.inputs[i]];
    const HostTensor &t = inputs[i];
    TensorType given{t.dtype, t.shape};
    if (t.dtype != v.type.dtype || t.shape != v.type.shape)
      return Status::error("input " + std::to_string(i) + " ('" +
                           program.inputNames[i] + "'): expected " +
                           v.type.str() + ", got " + given.str());
    if (static_cast<int64_t>(t.bytes.size()) != v.numBytes)
      return Status::error(
          "input " + std::to_string(i) + " ('" + program.inputNames[i] +
          "'): holds " + std::to_string(t.bytes.size()) +
          " bytes, its type needs " + std::to_string(v.numBytes));
  }

  for (size_t i = 0; i < program.values.size(); ++i) {
    const ProgramValue &v = program.values[i];
    const uint8_t *base = nullptr;
    switch (v.storage) {
    case Storage::Input:
      base = inputs[v.index].bytes.data();
      break;
    case Storage::Constant:
      base = impl.constants[v.index].get();
      break;
    default:
      base = impl.arena.get();
      break;
    }
    impl.valuePtrs[i] = base ? base + v.offset : nullptr;
  }

  for (size_t i = 0; i < impl.instructions.size(); ++i) {
    BoundInstruction &bound = impl.instructions[i];
    const ProgramInstruction &inst = *bound.inst;
    for (size_t k = 0; k < inst.operands.size(); ++k)
      bound.operandPtrs[k] =
          inst.operands[k] < 0 ? nullptr : impl.valuePtrs[inst.operands[k]];
    // Results are arena values (checked at load), so writable.
    for (size_t k = 0; k < inst.results.size(); ++k)
      bound.resultPtrs[k] =
          inst.results[k] < 0
              ? nullptr
              : impl.arena.get() + program.values[inst.results[k]].offset;
    KernelArgs args{bound.operandPtrs.data(), bound.resultPtrs.data()};
    if (Status s = inst.cpu(args); !s)
      return Status::error(
          describeInstruction(i, inst.info.kernel, inst.location) + ": " +
          s.message());
  }

  outputs->clear();
  outputs->reserve(program.outputs.size());
  for (int32_t id : program.outputs) {
    const ProgramValue &v = program.values[id];
    HostTensor t;
    t.dtype = v.type.dtype;
    t.shape = v.type.shape;
    t.bytes.resize(static_cast<size_t>(v.numBytes));
    if (v.numBytes > 0)
      std::memcpy(t.bytes.data(), impl.valuePtrs[id], v.numBytes);
    outputs->push_back(std::move(t));
  }
  return Status::ok();
}

const std::vector<std::string> &Executor::inputNames() const {
  return impl_->program.inputNames;
}
const std::vector<std::string> &Executor::outputNames() const {
  return impl_->program.outputNames;
}
DType Executor::inputDType(size_t i) const {
  return impl_->program.values[impl_->program.inputs[i]].type.dtype;
}
const std::vector<int64_t> &Executor::inputShape(size_t i) const {
  return impl_->program.values[impl_->program.inputs[i]].type.shape;
}

} // namespace cleave::rt

//===- executor.cpp - Runs a loaded program on the CPU --------------------===//
//
// Loading (core/program.cpp) has validated the whole program and each CPU
// prepare function its shape rules, so running it can only fail for
// data-dependent reasons (e.g. gather indices).
//
//===----------------------------------------------------------------------===//

#include "cpu/cpu_kernel.h"
#include "cpu/runner.h"

#include "cleave/runtime/comm.h"
#include "cleave/runtime/profile.h"
#include "core/fusion.h"
#include "core/plan_reader.h"
#include "core/program.h"
#include "plan/plan.pb.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <unordered_set>

#include <sys/mman.h>

namespace cleave::rt {

namespace {

// Indexed by schema::Kernel (kernels.def's order). Each name in kernels.def
// must have a prepare_<name> definition, or linking the runtime fails naming
// the missing symbol.
const PrepareFn kPrepare[] = {
#define CLEAVE_KERNEL(NAME) &prepare_##NAME,
#include "plan/kernels.def"
};

struct FreeDeleter {
  void operator()(uint8_t *p) const { std::free(p); }
};
using AlignedBytes = std::unique_ptr<uint8_t[], FreeDeleter>;

/// The arena: zero pages mapped on first touch, so the bytes of values no
/// kernel writes there (outputs written straight into the caller's tensors)
/// never become resident.
class Arena {
public:
  Arena() = default;
  Arena(const Arena &) = delete;
  Arena &operator=(const Arena &) = delete;
  ~Arena() {
    if (base_)
      munmap(base_, size_);
  }
  bool allocate(size_t size) {
    size_ = std::max<size_t>(size, 1);
    void *p = mmap(nullptr, size_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    base_ = p == MAP_FAILED ? nullptr : static_cast<uint8_t *>(p);
    return base_ != nullptr;
  }
  uint8_t *get() const { return base_; }

private:
  uint8_t *base_ = nullptr;
  size_t size_ = 0;
};

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

struct BoundInstruction {
  const ProgramInstruction *inst = nullptr;
  // Scratch for the pointers of one run; sized once here.
  std::vector<const void *> operandPtrs;
  std::vector<void *> resultPtrs;
};

/// The outputs an instruction writes into the caller's tensor: those the
/// plan places there (OUTPUT storage), and, in a plan that placed them in
/// the arena, those it can write there instead, saving the copy out (a training
/// step's outputs are every parameter, gradient and optimizer state): values an
/// instruction produces (not inputs, constants or reshape views), listed once,
/// that no view reads from the arena after they are produced. A view
/// overlapping such a value's bytes and read later can only be a view of it
/// (nothing else is live there), which would still read the arena; views of the
/// same bytes read before it is produced were of earlier values. The plan never
/// places an instruction's result over its operands (live ranges are
/// inclusive), so a result being elsewhere changes nothing else.
std::vector<bool> directOutputs(const LoadedProgram &program) {
  constexpr int64_t kEnd = INT64_MAX;
  size_t numValues = program.values.size();
  std::vector<int64_t> producer(numValues, -1), lastUse(numValues, -1);
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const ProgramInstruction &inst = program.instructions[i];
    for (int32_t id : inst.operands)
      if (id >= 0)
        lastUse[id] = static_cast<int64_t>(i);
    for (int32_t id : inst.results)
      if (id >= 0)
        producer[id] = static_cast<int64_t>(i);
  }
  for (int32_t id : program.outputs)
    lastUse[id] = kEnd;
  std::vector<size_t> views;
  for (size_t v = 0; v < numValues; ++v)
    if (producer[v] < 0 && program.values[v].storage == Storage::Arena &&
        program.values[v].numBytes > 0 && lastUse[v] >= 0)
      views.push_back(v);
  std::vector<bool> direct(program.outputs.size(), false), seen(numValues);
  for (size_t o = 0; o < program.outputs.size(); ++o) {
    int32_t id = program.outputs[o];
    const ProgramValue &r = program.values[id];
    if (r.storage == Storage::Output) {
      // Planned in the caller's tensor: written there, views and all.
      direct[o] = r.index == static_cast<int32_t>(o);
      seen[id] = true;
      continue;
    }
    bool ok = producer[id] >= 0 && !seen[id] && r.storage == Storage::Arena &&
              r.numBytes > 0;
    seen[id] = true;
    for (size_t k = 0; k < views.size() && ok; ++k) {
      const ProgramValue &v = program.values[views[k]];
      bool overlaps =
          v.offset < r.offset + r.numBytes && r.offset < v.offset + v.numBytes;
      ok = !overlaps || lastUse[views[k]] <= producer[id];
    }
    direct[o] = ok;
  }
  return direct;
}

} // namespace

struct Executor::Impl {
  /// The communicator collectives use; ownedComm when none was given.
  std::unique_ptr<Communicator> ownedComm;
  LoadedProgram program;
  /// Per instruction of program, its CPU kernel.
  std::vector<KernelFn> kernels;
  std::vector<AlignedBytes> constants;
  Arena arena;
  std::vector<BoundInstruction> instructions;
  // Per-run base pointer of every value.
  std::vector<const uint8_t *> valuePtrs;
  StepProfiler *profiler = nullptr;
  /// Per instruction, its profiler site; then the output copy's.
  std::vector<int32_t> sites;
  int32_t outputSite = -1;
  /// Per output, whether its producing instruction may write it straight
  /// into the caller's tensor (see directOutputs).
  std::vector<bool> direct;
  /// Per output, where a value planned in its tensor is made when the
  /// caller's tensor is also an input's (empty otherwise).
  std::vector<std::vector<uint8_t>> asideOutputs;
  /// Per value, the instruction that makes it (SIZE_MAX: none).
  std::vector<size_t> producer;
  /// The run in progress: the first instruction writing over an input's
  /// buffer (a donated output), and the instruction that failed.
  size_t firstInputWrite = SIZE_MAX, failedAt = SIZE_MAX;

  Status runInstructions();
  void bindValues(const std::vector<HostTensor> &inputs,
                  std::vector<HostTensor> &outputs,
                  const std::vector<std::pair<size_t, size_t>> &donated,
                  std::vector<bool> &copy);
  /// Whether value \p id is input \p input or a view of its bytes.
  bool isInputBytes(int32_t id, size_t input) const {
    return id >= 0 && program.values[id].storage == Storage::Input &&
           program.values[id].index == static_cast<int32_t>(input);
  }
};

Executor::Executor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Executor::~Executor() = default;

/// Binds the CPU kernels of \p program's instructions: the prepare
/// function of each instruction as it loads (its shape rules are the checks
/// both backends rely on), then fusion's kernels.
Status bindCpuKernels(const cleave_program &program, Communicator *comm,
                      LoadedProgram *loaded, std::vector<KernelFn> *kernels) {
  std::vector<KernelFn> prepared;
  InstructionCheck check = [&](const ProgramInstruction &inst) {
    prepared.emplace_back();
    return kPrepare[static_cast<size_t>(*inst.info.kernelId)](inst.info,
                                                              &prepared.back());
  };
  if (Status s = loadProgram(program, comm, check, loaded); !s)
    return s;
  fuseElementwise(*loaded, /*reductions=*/true);
  kernels->clear();
  for (const ProgramInstruction &inst : loaded->instructions)
    kernels->push_back(inst.fused ? fusedCpuKernel(inst.fused)
                                  : std::move(prepared[inst.origin]));
  return Status::ok();
}

Status Executor::create(const plan::Program &program,
                        std::unique_ptr<Executor> *result, Communicator *comm) {
  auto impl = std::make_unique<Impl>();
  if (!comm) {
    impl->ownedComm = makeSingleProcessCommunicator({1});
    comm = impl->ownedComm.get();
  }
  PlanView view(program);
  if (Status s =
          bindCpuKernels(view.program(), comm, &impl->program, &impl->kernels);
      !s)
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
  if (!impl->arena.allocate(static_cast<size_t>(loaded.arenaBytes)))
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
  impl->producer.assign(loaded.values.size(), SIZE_MAX);
  for (size_t i = 0; i < loaded.instructions.size(); ++i)
    for (int32_t id : loaded.instructions[i].results)
      if (id >= 0)
        impl->producer[id] = i;
  impl->valuePtrs.resize(loaded.values.size());
  impl->direct = directOutputs(loaded);
  impl->asideOutputs.resize(loaded.outputs.size());
  result->reset(new Executor(std::move(impl)));
  return Status::ok();
}

bool Executor::lastRunKeptInputs() const {
  return impl_->failedAt < impl_->firstInputWrite;
}

bool Executor::canDonate(size_t input, size_t output) const {
  const Impl &impl = *impl_;
  const LoadedProgram &program = impl.program;
  if (input >= program.inputs.size() || output >= program.outputs.size() ||
      !impl.direct[output])
    return false;
  int32_t out = program.outputs[output];
  const ProgramValue &r = program.values[out];
  const ProgramValue &in = program.values[program.inputs[input]];
  if (r.type.dtype != DType::F32 || in.type.dtype != DType::F32 ||
      r.numBytes != in.numBytes)
    return false;
  size_t producer = program.instructions.size();
  for (size_t i = 0; i < program.instructions.size(); ++i)
    for (int32_t id : program.instructions[i].results)
      if (id == out)
        producer = i;
  if (producer == program.instructions.size())
    return false;
  // Nothing reads the old value after its producer: no later instruction,
  // and no output passes it through.
  for (size_t i = producer + 1; i < program.instructions.size(); ++i)
    for (int32_t id : program.instructions[i].operands)
      if (impl.isInputBytes(id, input))
        return false;
  for (int32_t id : program.outputs)
    if (impl.isInputBytes(id, input))
      return false;
  // The chain reads element e of the input only for element e of its
  // results, loads every segment's operands before it writes the segment's
  // results, and no result is a copy of an operand register.
  const ProgramInstruction &inst = program.instructions[producer];
  const FusedProgram *f = inst.fused.get();
  if (!f || !f->reductions.empty() ||
      f->numElements * static_cast<int64_t>(sizeof(float)) != r.numBytes)
    return false;
  size_t numInputs = f->inputs.size();
  for (uint8_t reg : f->outputRegisters)
    if (reg < numInputs)
      return false;
  for (size_t k = 0; k < inst.operands.size(); ++k) {
    if (!impl.isInputBytes(inst.operands[k], input))
      continue;
    const ProgramValue &v = program.values[inst.operands[k]];
    if (k >= numInputs || f->inputs[k] != FusedInput::Full ||
        f->inputIsBool[k] || v.offset != 0 || v.numBytes != r.numBytes)
      return false;
  }
  return true;
}

Status Executor::run(const std::vector<HostTensor> &inputs,
                     std::vector<HostTensor> *outputs,
                     const std::vector<std::pair<size_t, size_t>> &donated) {
  Impl &impl = *impl_;
  const LoadedProgram &program = impl.program;
  // Refused before any kernel runs: nothing written.
  impl.failedAt = 0;
  impl.firstInputWrite = SIZE_MAX;
  if (outputs == &inputs) {
    // The outputs are made beside the inputs the step still reads.
    std::vector<HostTensor> made;
    if (Status s = run(inputs, &made, donated); !s)
      return s;
    *outputs = std::move(made);
    return Status::ok();
  }
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

  // Tensors \p outputs already holds are written over where their size
  // fits: a training loop hands the last step's back, and fresh buffers
  // each step cost page faults and zeroing (and fragment the heap).
  outputs->resize(program.outputs.size());
  std::vector<bool> inPlace(program.outputs.size(), false);
  for (auto [input, output] : donated)
    inPlace.at(output) = true;
  for (size_t o = 0; o < program.outputs.size(); ++o) {
    const ProgramValue &v = program.values[program.outputs[o]];
    HostTensor &t = (*outputs)[o];
    if (inPlace[o])
      continue;
    t.dtype = v.type.dtype;
    t.shape = v.type.shape;
    if (t.bytes.size() != static_cast<size_t>(v.numBytes))
      t.bytes = std::vector<uint8_t>(static_cast<size_t>(v.numBytes));
  }
  std::vector<bool> copy;
  impl.bindValues(inputs, *outputs, donated, copy);

  if (Status s = impl.runInstructions(); !s)
    return s;

  int64_t copyStart = impl.profiler ? StepProfiler::nowNs() : 0;
  // The remaining copies go in pieces the threads share.
  constexpr int64_t kPiece = int64_t(1) << 20;
  struct Piece {
    uint8_t *to;
    const uint8_t *from;
    int64_t bytes;
  };
  std::vector<Piece> pieces;
  for (size_t o = 0; o < program.outputs.size(); ++o) {
    if (!copy[o])
      continue;
    const ProgramValue &v = program.values[program.outputs[o]];
    HostTensor &t = (*outputs)[o];
    for (int64_t at = 0; at < v.numBytes; at += kPiece)
      pieces.push_back({t.bytes.data() + at,
                        impl.valuePtrs[program.outputs[o]] + at,
                        std::min(kPiece, v.numBytes - at)});
  }
  int64_t numPieces = static_cast<int64_t>(pieces.size());
#pragma omp parallel for schedule(dynamic) if (numPieces > 1)
  for (int64_t i = 0; i < numPieces; ++i)
    std::memcpy(pieces[i].to, pieces[i].from, pieces[i].bytes);
  if (impl.profiler)
    impl.profiler->record(impl.outputSite, copyStart, StepProfiler::nowNs());
  return Status::ok();
}

/// Points every value at its storage for one run: \p outputs' tensors for
/// the direct outputs, or the input buffer the caller gave up for one
/// (\p donated), the arena for the rest; \p copy marks the outputs still to
/// be copied out after the run.
void Executor::Impl::bindValues(
    const std::vector<HostTensor> &inputs, std::vector<HostTensor> &outputs,
    const std::vector<std::pair<size_t, size_t>> &donated,
    std::vector<bool> &copy) {
  std::unordered_set<const uint8_t *> inputBuffers;
  for (const HostTensor &t : inputs)
    inputBuffers.insert(t.bytes.data());
  // Where each output's own tensor is, when it is written directly.
  std::vector<const uint8_t *> outputBase(program.outputs.size(), nullptr);
  copy.assign(program.outputs.size(), true);
  for (size_t o = 0; o < program.outputs.size(); ++o) {
    if (!direct[o])
      continue;
    HostTensor &t = outputs[o];
    if (!t.bytes.empty() && inputBuffers.count(t.bytes.data())) {
      // The caller handed an input's buffer back as this output without
      // giving it up: the step still reads it, so a value planned in the
      // output's tensor is made aside and copied out.
      if (program.values[program.outputs[o]].storage == Storage::Output) {
        asideOutputs[o].resize(t.bytes.size());
        outputBase[o] = asideOutputs[o].data();
      }
      continue;
    }
    outputBase[o] = t.bytes.data();
    copy[o] = false;
  }
  failedAt = firstInputWrite = SIZE_MAX;
  for (auto [input, output] : donated) {
    // The caller owns the input tensor and gave it up for this output
    // (canDonate), so the kernel may write it.
    outputBase[output] = inputs.at(input).bytes.data();
    copy[output] = false;
    firstInputWrite =
        std::min(firstInputWrite, producer[program.outputs[output]]);
  }
  for (size_t i = 0; i < program.values.size(); ++i) {
    const ProgramValue &v = program.values[i];
    const uint8_t *base = nullptr;
    switch (v.storage) {
    case Storage::Input:
      base = inputs[v.index].bytes.data();
      break;
    case Storage::Constant:
      base = constants[v.index].get();
      break;
    case Storage::Output:
      base = outputBase[v.index];
      break;
    default:
      base = arena.get();
      break;
    }
    valuePtrs[i] = base ? base + v.offset : nullptr;
  }
  for (size_t o = 0; o < program.outputs.size(); ++o)
    if (!copy[o] &&
        program.values[program.outputs[o]].storage == Storage::Arena)
      valuePtrs[program.outputs[o]] = outputBase[o];
}

Status Executor::Impl::runInstructions() {
  for (size_t i = 0; i < instructions.size(); ++i) {
    BoundInstruction &bound = instructions[i];
    const ProgramInstruction &inst = *bound.inst;
    for (size_t k = 0; k < inst.operands.size(); ++k)
      bound.operandPtrs[k] =
          inst.operands[k] < 0 ? nullptr : valuePtrs[inst.operands[k]];
    // Results are arena values (checked at load) or the caller's output
    // tensors, so writable.
    for (size_t k = 0; k < inst.results.size(); ++k)
      bound.resultPtrs[k] =
          inst.results[k] < 0
              ? nullptr
              : const_cast<uint8_t *>(valuePtrs[inst.results[k]]);
    KernelArgs args{bound.operandPtrs.data(), bound.resultPtrs.data()};
    int64_t start = profiler ? StepProfiler::nowNs() : 0;
    if (Status s = kernels[i](args); !s) {
      failedAt = i;
      return Status::error(
          describeInstruction(i, inst.info.kernel, inst.location) + ": " +
          s.message());
    }
    if (profiler)
      profiler->record(sites[i], start, StepProfiler::nowNs());
  }
  return Status::ok();
}

void Executor::setProfiler(StepProfiler *profiler) {
  Impl &impl = *impl_;
  impl.profiler = profiler;
  impl.sites.clear();
  if (!profiler)
    return;
  for (const ProgramInstruction &inst : impl.program.instructions) {
    bool collective = !collectiveAxes(inst.info).empty();
    int fusedOps = inst.fused ? static_cast<int>(inst.fused->ops.size()) : 0;
    impl.sites.push_back(profiler->addSite(
        inst.fused ? "fused_elementwise" : inst.info.kernel, inst.location,
        collective ? SiteKind::Collective : SiteKind::Kernel,
        estimateKernelCost(inst.info, fusedOps)));
  }
  impl.outputSite =
      profiler->addSite("(copy outputs)", "", SiteKind::Host, KernelCost{});
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

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
#include "core/plan_reader.h"
#include "core/program.h"
#include "plan/plan.pb.h"

#include <algorithm>
#include <cstdlib>

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

} // namespace

struct Executor::Impl {
  /// The communicator collectives use; ownedComm when none was given.
  std::unique_ptr<Communicator> ownedComm;
  LoadedProgram program;
  /// Per instruction of program, its CPU kernel.
  std::vector<KernelFn> kernels;
  std::vector<AlignedBytes> constants;
  AlignedBytes arena;
  std::vector<BoundInstruction> instructions;
  // Per-run base pointer of every value.
  std::vector<const uint8_t *> valuePtrs;
  StepProfiler *profiler = nullptr;
  /// Per instruction, its profiler site; then the output copy's.
  std::vector<int32_t> sites;
  int32_t outputSite = -1;

  Status runInstructions();
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
  fuseElementwise(*loaded);
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

  if (Status s = impl.runInstructions(); !s)
    return s;

  int64_t copyStart = impl.profiler ? StepProfiler::nowNs() : 0;
  // Tensors \p outputs already holds are written over where their size
  // fits: a training loop hands the last step's back, and fresh buffers
  // each step cost page faults and zeroing (and fragment the heap).
  // The copies go in pieces the threads share: a step's outputs are every
  // parameter and optimizer state, tens of megabytes.
  constexpr int64_t kPiece = int64_t(1) << 20;
  struct Piece {
    uint8_t *to;
    const uint8_t *from;
    int64_t bytes;
  };
  std::vector<Piece> pieces;
  outputs->resize(program.outputs.size());
  for (size_t o = 0; o < program.outputs.size(); ++o) {
    const ProgramValue &v = program.values[program.outputs[o]];
    HostTensor &t = (*outputs)[o];
    t.dtype = v.type.dtype;
    t.shape = v.type.shape;
    if (t.bytes.size() != static_cast<size_t>(v.numBytes))
      t.bytes = std::vector<uint8_t>(static_cast<size_t>(v.numBytes));
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

Status Executor::Impl::runInstructions() {
  for (size_t i = 0; i < instructions.size(); ++i) {
    BoundInstruction &bound = instructions[i];
    const ProgramInstruction &inst = *bound.inst;
    for (size_t k = 0; k < inst.operands.size(); ++k)
      bound.operandPtrs[k] =
          inst.operands[k] < 0 ? nullptr : valuePtrs[inst.operands[k]];
    // Results are arena values (checked at load), so writable.
    for (size_t k = 0; k < inst.results.size(); ++k)
      bound.resultPtrs[k] =
          inst.results[k] < 0
              ? nullptr
              : arena.get() + program.values[inst.results[k]].offset;
    KernelArgs args{bound.operandPtrs.data(), bound.resultPtrs.data()};
    int64_t start = profiler ? StepProfiler::nowNs() : 0;
    if (Status s = kernels[i](args); !s)
      return Status::error(
          describeInstruction(i, inst.info.kernel, inst.location) + ": " +
          s.message());
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

//===- executor.cpp - Runs a validated program on one GPU -----------------===//
//
// The plan's layout is kept as is: one device arena of the plan's size (the
// compiler's buffer planner already packed every intermediate), one device
// buffer per input and per constant, so every instruction's pointers are
// fixed at load time. A step is enqueued on a compute stream; collectives go
// to a communication stream and the compute stream waits for one only
// before the first later instruction that touches its bytes, so a
// collective overlaps whatever independent work the plan puts after it. From
// the second step on the whole step is replayed as a CUDA graph (no launch
// overhead per kernel).
//
// State stays on the GPU: carried inputs are refreshed from their outputs
// by device copies at the end of each step; the host sees tensors only when
// it asks (loss, checkpoints, dumps).
//
//===----------------------------------------------------------------------===//

#include "core/program.h"
#include "cuda/collectives.h"
#include "cuda/cuda_kernel.h"
#include "cuda/matmul_cache.h"
#include "cuda/schedule.h"

#include "cleave/runtime/backend_plugin.h"
#include "cleave/runtime/comm.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

namespace cleave::rt::cuda {

namespace {

using PrepareFn = Status (*)(const KernelInfo &, DeviceFn *);

/// Indexed by schema::Kernel (kernels.def's order); a kernel without a
/// CUDA prepare function fails at link time.
const PrepareFn kPrepare[] = {
#define CLEAVE_KERNEL(NAME) &prepare_##NAME,
#include "plan/kernels.def"
};

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

bool envFlag(const char *name) {
  const char *v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

/// The GPU of this process: its rank among the ranks on this host, modulo
/// the GPUs it sees.
int chooseDevice(const Communicator &comm, int count) {
  for (const char *var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                          "SLURM_LOCALID", "LOCAL_RANK"})
    if (const char *v = std::getenv(var); v && *v)
      return std::atoi(v) % count;
  return comm.rank() % count;
}

struct Step {
  const ProgramInstruction *inst = nullptr;
  /// The instruction's index in the program (of the first, when fused).
  size_t index = 0;
  DeviceFn fn;
  std::vector<const void *> operands;
  std::vector<void *> results;
  bool collective = false;
  /// Collectives the compute stream must wait for before this step.
  std::vector<int> waitFor;
  /// For a collective: its number (ready_/done_).
  int collectiveIndex = -1;
};

/// The program on one GPU, behind backend_plugin.h's cleave_runner: inputs
/// and outputs move between the caller's host buffers and the device in
/// one copy (the host checked their dtypes and shapes; sizes are checked
/// here).
class CudaRunner {
public:
  ~CudaRunner();
  Status load(LoadedProgram program, Communicator *comm, bool bf16);

  Status carry(size_t input, size_t output);
  Status setInput(int64_t i, const void *bytes, int64_t size);
  Status run();
  Status getInput(int64_t i, void *bytes, int64_t size);
  Status getOutput(int64_t o, void *bytes, int64_t size);

private:
  Status allocate();
  Status bind();
  Status copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
              const char *what);
  Status mallocZeroed(void **p, size_t bytes, const std::string &what);
  /// The device address of value \p id (null for -1).
  uint8_t *pointer(int32_t id) const;
  Status enqueue();
  Status copyOut(const ProgramValue &v, const void *src, void *bytes,
                 int64_t size);
  std::string where(size_t i) const {
    const ProgramInstruction &inst = program_.instructions[i];
    return describeInstruction(i, inst.info.kernel, inst.location);
  }

  /// What check_index at instruction \p i found, in the CPU kernel's words
  /// (the value and its position): the kernel only raises the flag, so the
  /// host reads the operand back and finds the first value out of range.
  std::string indexErrorDetail(size_t i) {
    std::string generic = "an index is out of range";
    for (const Step &step : steps_) {
      if (step.index != i ||
          step.inst->info.kernelId != schema::Kernel::k_check_index ||
          step.operands.empty())
        continue;
      const KernelInfo &info = step.inst->info;
      const TensorType &x = info.operand(0);
      const auto &attrs = info.params<schema::Kernel::k_check_index>();
      int64_t bound = attrs.bound;
      std::optional<int64_t> ignore = attrs.ignore;
      HostTensor t = HostTensor::zeros(x.dtype, x.shape);
      if (!t.bytes.empty() &&
          !copy(t.bytes.data(), step.operands[0], t.bytes.size(),
                cudaMemcpyDeviceToHost, "cudaMemcpy (check_index operand)"))
        return generic;
      for (int64_t k = 0; k < t.numElements(); ++k) {
        int64_t v =
            x.dtype == DType::I64 ? t.data<int64_t>()[k] : t.data<int32_t>()[k];
        if ((v < 0 || v >= bound) && (!ignore || v != *ignore))
          return indexRangeError(x.shape, k, v, bound, ignore);
      }
    }
    return generic;
  }

  LoadedProgram program_;
  Communicator *comm_ = nullptr;
  int device_ = 0;
  cudaStream_t stream_ = nullptr, commStream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void *arena_ = nullptr, *workspace_ = nullptr, *castScratch_ = nullptr,
       *dequantScratch_ = nullptr;
  int *errorFlag_ = nullptr;
  /// outputs_[o]: output o's tensor where the plan places its value there
  /// (null otherwise).
  std::vector<void *> constants_, inputs_, outputs_;
  std::unique_ptr<MatmulCache> matmuls_;
  std::unique_ptr<Collectives> collectives_;
  Context ctx_;
  std::vector<Step> steps_;
  /// Per collective: recorded on the compute stream before it (the comm
  /// stream waits for it), and on the comm stream after it.
  std::vector<cudaEvent_t> ready_, done_;
  /// Collectives still unjoined after the last instruction.
  std::vector<int> finalWaits_;

  struct Carry {
    size_t input, output;
    /// Device staging for a source outside the arena, else null.
    void *staging;
  };
  std::vector<Carry> carried_;
  /// Record the graph on the run after this many runs (eager before).
  int64_t graphAfter_ = 1;
  cudaGraphExec_t graph_ = nullptr;
  bool useGraph_ = true, syncEach_ = false, fuseBias_ = true;
  int64_t runs_ = 0;
};

CudaRunner::~CudaRunner() {
  if (stream_)
    cudaStreamSynchronize(stream_);
  if (commStream_)
    cudaStreamSynchronize(commStream_);
  if (graph_)
    cudaGraphExecDestroy(graph_);
  for (cudaEvent_t e : ready_)
    cudaEventDestroy(e);
  for (cudaEvent_t e : done_)
    cudaEventDestroy(e);
  collectives_.reset();
  matmuls_.reset();
  for (void *p : constants_)
    cudaFree(p);
  for (void *p : outputs_)
    if (p)
      cudaFree(p);
  for (void *p : inputs_)
    cudaFree(p);
  for (const Carry &c : carried_)
    if (c.staging)
      cudaFree(c.staging);
  for (void *p : {arena_, workspace_, castScratch_, dequantScratch_,
                  static_cast<void *>(errorFlag_)})
    if (p)
      cudaFree(p);
  if (lt_)
    cublasLtDestroy(lt_);
  if (commStream_)
    cudaStreamDestroy(commStream_);
  if (stream_)
    cudaStreamDestroy(stream_);
}

// Host-side copies and memsets go through the compute stream and wait for
// it: plain cudaMemcpy from pageable memory may return before the data
// lands, and runs on the legacy stream, which the (non-blocking) compute
// stream does not wait for.
Status CudaRunner::copy(void *dst, const void *src, size_t bytes,
                        cudaMemcpyKind kind, const char *what) {
  if (bytes == 0)
    return Status::ok();
  if (Status s =
          cudaStatus(cudaMemcpyAsync(dst, src, bytes, kind, stream_), what);
      !s)
    return s;
  return cudaStatus(cudaStreamSynchronize(stream_), what);
}

Status CudaRunner::mallocZeroed(void **p, size_t bytes,
                                const std::string &what) {
  // Even empty buffers get an address, as on the CPU.
  size_t size = bytes ? bytes : 256;
  if (Status s = cudaStatus(cudaMalloc(p, size),
                            ("cudaMalloc (" + what + ")").c_str());
      !s)
    return s;
  if (Status s =
          cudaStatus(cudaMemsetAsync(*p, 0, size, stream_), "cudaMemsetAsync");
      !s)
    return s;
  return cudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

Status CudaRunner::allocate() {
  if (Status s = mallocZeroed(
          &arena_, program_.arenaBytes,
          "an arena of " + std::to_string(program_.arenaBytes) + " bytes");
      !s)
    return s;
  for (const std::string &c : program_.constants) {
    void *p = nullptr;
    if (Status s = mallocZeroed(&p, c.size(), "constants"); !s)
      return s;
    constants_.push_back(p);
    if (Status s = copy(p, c.data(), c.size(), cudaMemcpyHostToDevice,
                        "cudaMemcpy (constants)");
        !s)
      return s;
  }
  program_.constants.clear();
  for (int32_t id : program_.inputs) {
    void *p = nullptr;
    if (Status s = mallocZeroed(&p, program_.values[id].numBytes, "inputs"); !s)
      return s;
    inputs_.push_back(p);
  }
  outputs_.assign(program_.outputs.size(), nullptr);
  for (size_t o = 0; o < program_.outputs.size(); ++o) {
    const ProgramValue &v = program_.values[program_.outputs[o]];
    if (v.storage == Storage::Output && v.index == static_cast<int32_t>(o))
      if (Status s = mallocZeroed(&outputs_[o], static_cast<size_t>(v.numBytes),
                                  "outputs");
          !s)
        return s;
  }
  if (Status s = cudaStatus(cudaMalloc(&workspace_, kWorkspaceBytes),
                            "cudaMalloc (cuBLASLt workspace)");
      !s)
    return s;
  if (Status s = mallocZeroed(reinterpret_cast<void **>(&errorFlag_),
                              2 * sizeof(int), "error flag");
      !s)
    return s;
  int64_t dequantElements = 0;
  for (const ProgramInstruction &inst : program_.instructions)
    if (inst.info.kernel == "matmul_dequant")
      dequantElements =
          std::max(dequantElements, inst.info.operand(1).numElements());
  if (dequantElements > 0) {
    ctx_.dequantScratchBytes = static_cast<size_t>(dequantElements) * 4;
    if (Status s = mallocZeroed(&dequantScratch_, ctx_.dequantScratchBytes,
                                "dequantization scratch");
        !s)
      return s;
    ctx_.dequantScratch = dequantScratch_;
  }
  if (ctx_.bf16) {
    int64_t elements = 0;
    for (const ProgramInstruction &inst : program_.instructions)
      if (inst.info.kernel == "matmul")
        elements = std::max(elements, bf16ScratchElements(inst.info));
    ctx_.castScratchBytes = static_cast<size_t>(elements) * 2;
    if (Status s =
            mallocZeroed(&castScratch_, ctx_.castScratchBytes, "bf16 scratch");
        !s)
      return s;
    ctx_.castScratch = castScratch_;
  }
  return Status::ok();
}

uint8_t *CudaRunner::pointer(int32_t id) const {
  if (id < 0)
    return nullptr;
  const ProgramValue &v = program_.values[id];
  switch (v.storage) {
  case Storage::Input:
    return static_cast<uint8_t *>(inputs_[v.index]) + v.offset;
  case Storage::Constant:
    return static_cast<uint8_t *>(constants_[v.index]) + v.offset;
  case Storage::Output:
    return static_cast<uint8_t *>(outputs_[v.index]) + v.offset;
  default:
    return static_cast<uint8_t *>(arena_) + v.offset;
  }
}

Status CudaRunner::bind() {
  auto prepareOne = [&](size_t i, DeviceFn *fn) {
    const ProgramInstruction &inst = program_.instructions[i];
    if (inst.fused) {
      if (Status s = prepareFused(*inst.fused, fn); !s)
        return Status::error(where(i) + ": " + s.message());
      return Status::ok();
    }
    if (!inst.info.kernelId)
      return Status::error(where(i) + ": no CUDA kernel");
    PrepareFn prepare = kPrepare[static_cast<size_t>(*inst.info.kernelId)];
    if (Status s = prepare(inst.info, fn); !s)
      return Status::error(where(i) + ": " + s.message());
    return Status::ok();
  };
  // cuBLASLt wants a 16-byte aligned bias vector.
  Schedule plan = schedule(program_, fuseBias_, [&](int32_t bias) {
    return reinterpret_cast<uintptr_t>(pointer(bias)) % 16 == 0;
  });
  std::vector<std::vector<int64_t>> axesSets;
  size_t scratch = 0;
  for (ScheduledStep &s : plan.steps) {
    const ProgramInstruction &inst = program_.instructions[s.index];
    Step step;
    step.inst = &inst;
    step.index = s.index;
    if (Status st = prepareOne(s.index, &step.fn); !st)
      return st;
    if (s.biasOperand >= 0) {
      DeviceFn addFn, fused;
      if (Status st = prepareOne(s.index + 1, &addFn); !st)
        return st;
      if (Status st = prepareMatmulBias(inst.info, step.fn, addFn, &fused); !st)
        return Status::error(where(s.index) + ": " + st.message());
      step.fn = std::move(fused);
    }
    step.operands.assign(std::max(s.operands.size(), kMinArgSlots), nullptr);
    step.results.assign(std::max(s.results.size(), kMinArgSlots), nullptr);
    for (size_t k = 0; k < s.operands.size(); ++k)
      step.operands[k] = pointer(s.operands[k]);
    for (size_t k = 0; k < s.results.size(); ++k)
      step.results[k] = pointer(s.results[k]);
    step.collective = s.collective;
    step.collectiveIndex = s.collectiveIndex;
    step.waitFor = s.waitFor;
    if (step.collective) {
      cudaEvent_t ready = nullptr, done = nullptr;
      if (Status st = cudaStatus(
              cudaEventCreateWithFlags(&ready, cudaEventDisableTiming),
              "cudaEventCreate");
          !st)
        return st;
      ready_.push_back(ready);
      if (Status st = cudaStatus(
              cudaEventCreateWithFlags(&done, cudaEventDisableTiming),
              "cudaEventCreate");
          !st)
        return st;
      done_.push_back(done);
      axesSets.push_back(collectiveAxes(inst.info));
      scratch = std::max(scratch, collectiveScratchBytes(inst.info));
    }
    steps_.push_back(std::move(step));
  }
  finalWaits_ = plan.finalWaits;
  return Collectives::create(comm_, axesSets, scratch, &collectives_);
}

Status CudaRunner::load(LoadedProgram program, Communicator *comm, bool bf16) {
  program_ = std::move(program);
  comm_ = comm;
  ctx_.bf16 = bf16;
  useGraph_ = !envFlag("CLEAVE_CUDA_NO_GRAPH");
  // Debugging aid: synchronise after every instruction so that an
  // asynchronous fault is reported against the instruction that caused it.
  syncEach_ = envFlag("CLEAVE_CUDA_SYNC");
  fuseBias_ = !envFlag("CLEAVE_CUDA_NO_FUSION");
  if (syncEach_)
    useGraph_ = false;
  int count = 0;
  if (Status s = cudaStatus(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
      !s)
    return s;
  if (count <= 0)
    return Status::error("no CUDA GPU is present");
  // NCCL needs a GPU per rank: two ranks of one host on one GPU fail deep
  // inside ncclCommInitRank.
  for (const char *var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                          "SLURM_NTASKS_PER_NODE", "LOCAL_WORLD_SIZE"})
    if (const char *v = std::getenv(var); v && *v) {
      if (std::atoi(v) > count)
        return Status::error(std::string(v) +
                             " ranks run on this host but it "
                             "has " +
                             std::to_string(count) +
                             " GPU(s): the CUDA backend needs one GPU per "
                             "rank");
      break;
    }
  device_ = chooseDevice(*comm, count);
  if (Status s = cudaStatus(cudaSetDevice(device_), "cudaSetDevice"); !s)
    return s;
  if (Status s =
          cudaStatus(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                     "cudaStreamCreate");
      !s)
    return s;
  if (Status s = cudaStatus(
          cudaStreamCreateWithFlags(&commStream_, cudaStreamNonBlocking),
          "cudaStreamCreate");
      !s)
    return s;
  if (cublasLtCreate(&lt_) != CUBLAS_STATUS_SUCCESS)
    return Status::error("cublasLtCreate failed");
  if (Status s = allocate(); !s)
    return s;
  matmuls_ = std::make_unique<MatmulCache>(lt_, kWorkspaceBytes);
  ctx_.stream = stream_;
  ctx_.lt = lt_;
  ctx_.workspace = workspace_;
  ctx_.workspaceBytes = kWorkspaceBytes;
  ctx_.errorFlag = errorFlag_;
  ctx_.matmuls = matmuls_.get();
  if (Status s = bind(); !s)
    return s;
  ctx_.collectives = collectives_.get();
  return Status::ok();
}

Status CudaRunner::carry(size_t input, size_t output) {
  if (input >= program_.inputs.size() || output >= program_.outputs.size())
    return Status::error("carry: no input " + std::to_string(input) +
                         " or output " + std::to_string(output));
  const ProgramValue &in = program_.values[program_.inputs[input]];
  const ProgramValue &out = program_.values[program_.outputs[output]];
  if (in.type.dtype != out.type.dtype || in.type.shape != out.type.shape)
    return Status::error("carry: input " + in.type.str() + " and output " +
                         out.type.str() + " differ");
  Carry c{input, output, nullptr};
  // An output that is (a view of) an input or a constant is staged, so that
  // carried inputs can swap values.
  if (out.storage == Storage::Input || out.storage == Storage::Constant)
    if (Status s = mallocZeroed(&c.staging, static_cast<size_t>(out.numBytes),
                                "carried state");
        !s)
      return s;
  carried_.push_back(c);
  // The graph holds the carried copies: record it again.
  if (graph_) {
    cudaGraphExecDestroy(graph_);
    graph_ = nullptr;
    graphAfter_ = runs_ + 1;
  }
  return Status::ok();
}

Status CudaRunner::setInput(int64_t i, const void *bytes, int64_t size) {
  if (i < 0 || static_cast<size_t>(i) >= program_.inputs.size())
    return Status::error("no input " + std::to_string(i));
  const ProgramValue &v = program_.values[program_.inputs[i]];
  if (size != v.numBytes)
    return Status::error(
        "input " + std::to_string(i) + " ('" + program_.inputNames[i] +
        "'): " + std::to_string(size) + " bytes for " + v.type.str());
  if (v.numBytes == 0)
    return Status::ok();
  return copy(inputs_[i], bytes, static_cast<size_t>(v.numBytes),
              cudaMemcpyHostToDevice, "cudaMemcpy (input)");
}

Status CudaRunner::enqueue() {
  if (Status s =
          cudaStatus(cudaMemsetAsync(errorFlag_, 0, 2 * sizeof(int), stream_),
                     "cudaMemsetAsync");
      !s)
    return s;
  for (size_t i = 0; i < steps_.size(); ++i) {
    Step &step = steps_[i];
    KernelArgs args{step.operands.data(), step.results.data()};
    ctx_.instruction = static_cast<int>(step.index);
    Status s = Status::ok();
    if (step.collective) {
      int c = step.collectiveIndex;
      s = cudaStatus(cudaEventRecord(ready_[c], stream_), "cudaEventRecord");
      if (s)
        s = cudaStatus(cudaStreamWaitEvent(commStream_, ready_[c], 0),
                       "cudaStreamWaitEvent");
      ctx_.stream = commStream_;
      if (s)
        s = step.fn(args, ctx_);
      ctx_.stream = stream_;
      if (s)
        s = cudaStatus(cudaEventRecord(done_[c], commStream_),
                       "cudaEventRecord");
    } else {
      for (int c : step.waitFor)
        if (s)
          s = cudaStatus(cudaStreamWaitEvent(stream_, done_[c], 0),
                         "cudaStreamWaitEvent");
      if (s)
        s = step.fn(args, ctx_);
    }
    if (s && syncEach_) {
      s = cudaStatus(cudaStreamSynchronize(commStream_),
                     "cudaStreamSynchronize");
      if (s)
        s = cudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    }
    if (!s)
      return Status::error(where(step.index) + ": " + s.message());
  }
  for (int c : finalWaits_)
    if (Status s = cudaStatus(cudaStreamWaitEvent(stream_, done_[c], 0),
                              "cudaStreamWaitEvent");
        !s)
      return s;
  auto copyAsync = [&](void *dst, const void *src, int64_t bytes) {
    if (bytes == 0 || dst == src)
      return Status::ok();
    return cudaStatus(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes),
                                      cudaMemcpyDeviceToDevice, stream_),
                      "cudaMemcpyAsync (state)");
  };
  // Sources outside the arena are staged first: they may be carried inputs.
  for (const Carry &c : carried_)
    if (c.staging)
      if (Status s =
              copyAsync(c.staging, pointer(program_.outputs[c.output]),
                        program_.values[program_.outputs[c.output]].numBytes);
          !s)
        return s;
  for (const Carry &c : carried_) {
    int32_t id = program_.outputs[c.output];
    const void *src = c.staging ? c.staging : pointer(id);
    if (Status s =
            copyAsync(inputs_[c.input], src, program_.values[id].numBytes);
        !s)
      return s;
  }
  return Status::ok();
}

Status CudaRunner::run() {
  if (useGraph_ && runs_ >= graphAfter_ && !graph_) {
    // The first run was eager: cuBLASLt's algorithm choices are made and
    // every launch is known to enqueue. Record the step once.
    cudaGraph_t graph = nullptr;
    Status s = cudaStatus(
        cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
        "cudaStreamBeginCapture");
    if (s)
      s = enqueue();
    cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
    if (s)
      s = cudaStatus(ended, "cudaStreamEndCapture");
    if (s)
      s = cudaStatus(cudaGraphInstantiate(&graph_, graph, 0),
                     "cudaGraphInstantiate");
    if (graph)
      cudaGraphDestroy(graph);
    if (!s) {
      // Not capturable (a library that synchronises): run eagerly.
      cudaGetLastError();
      graph_ = nullptr;
      useGraph_ = false;
    }
  }
  Status s =
      graph_ ? cudaStatus(cudaGraphLaunch(graph_, stream_), "cudaGraphLaunch")
             : enqueue();
  if (!s)
    return s;
  if (Status done =
          cudaStatus(cudaStreamSynchronize(stream_), "the step on the GPU");
      !done)
    return Status::error(done.message() +
                         " (set CLEAVE_CUDA_SYNC=1 to find the instruction)");
  ++runs_;
  int flag[2] = {0, 0};
  if (Status e = copy(flag, errorFlag_, sizeof(flag), cudaMemcpyDeviceToHost,
                      "cudaMemcpy (error flag)");
      !e)
    return e;
  if (flag[0] != 0) {
    size_t i = static_cast<size_t>(flag[0] - 1);
    std::string what = flag[1] == kErrorIndexOutOfRange ? indexErrorDetail(i)
                       : flag[1] == kErrorDivisionByZero
                           ? "integer division by zero"
                           : "error " + std::to_string(flag[1]);
    return Status::error(
        (i < program_.instructions.size() ? where(i) : "instruction ?") + ": " +
        what);
  }
  return Status::ok();
}

Status CudaRunner::copyOut(const ProgramValue &v, const void *src, void *bytes,
                           int64_t size) {
  if (size != v.numBytes)
    return Status::error("a buffer of " + std::to_string(size) + " bytes for " +
                         v.type.str());
  if (v.numBytes == 0)
    return Status::ok();
  return copy(bytes, src, static_cast<size_t>(v.numBytes),
              cudaMemcpyDeviceToHost, "cudaMemcpy (to host)");
}

Status CudaRunner::getInput(int64_t i, void *bytes, int64_t size) {
  if (i < 0 || static_cast<size_t>(i) >= program_.inputs.size())
    return Status::error("no input " + std::to_string(i));
  return copyOut(program_.values[program_.inputs[i]], inputs_[i], bytes, size);
}

Status CudaRunner::getOutput(int64_t o, void *bytes, int64_t size) {
  if (o < 0 || static_cast<size_t>(o) >= program_.outputs.size())
    return Status::error("no output " + std::to_string(o));
  if (runs_ == 0)
    return Status::error("output " + std::to_string(o) +
                         " is not available before a run");
  return copyOut(program_.values[program_.outputs[o]],
                 pointer(program_.outputs[o]), bytes, size);
}

} // namespace

} // namespace cleave::rt::cuda

// The plugin's entry points (backend_plugin.h; train/backend.cpp loads
// them). Nothing but C types crosses: the program arrives as a
// cleave_program and is loaded here by the runtime's core, linked into the
// plugin.

namespace cleave::rt::cuda {
namespace {

void writeError(char *error, size_t size, const std::string &message) {
  if (error && size > 0)
    std::snprintf(error, size, "%s", message.c_str());
}

int report(const Status &s, char *error, size_t size) {
  if (s)
    return 0;
  writeError(error, size, s.message());
  return 1;
}

/// The host's mesh, reached through cleave_mesh: this rank's place, and the
/// broadcast that shares NCCL's unique id. Collectives on tensors run over
/// NCCL (collectives.h), never through here.
class MeshCommunicator final : public Communicator {
public:
  explicit MeshCommunicator(const cleave_mesh &mesh)
      : Communicator(
            std::vector<int64_t>(mesh.shape, mesh.shape + mesh.num_dims)),
        mesh_(mesh) {}
  int rank() const override { return mesh_.rank; }
  int size() const override {
    int64_t n = 1;
    for (int64_t d : meshShape())
      n *= d;
    return static_cast<int>(n);
  }
  double timeoutSeconds() const override { return mesh_.timeout_seconds; }
  void setTimeoutSeconds(double seconds) override {
    mesh_.timeout_seconds = seconds;
  }
  Status broadcast(void *buf, int64_t bytes, int root,
                   const std::vector<int64_t> &axes) override {
    char error[1024] = "";
    if (mesh_.broadcast(mesh_.context, buf, bytes, root, axes.data(),
                        static_cast<int32_t>(axes.size()), error,
                        sizeof(error)) == 0)
      return Status::ok();
    return Status::error(error);
  }
  Status allReduce(void *, int64_t, DType, Reduction,
                   const std::vector<int64_t> &) override {
    return hostOnly("all_reduce");
  }
  Status allGather(const void *, void *, int64_t,
                   const std::vector<int64_t> &) override {
    return hostOnly("all_gather");
  }
  Status reduceScatter(const void *, void *, int64_t, DType,
                       const std::vector<int64_t> &) override {
    return hostOnly("reduce_scatter");
  }
  Status allToAll(const void *, void *, int64_t,
                  const std::vector<int64_t> &) override {
    return hostOnly("all_to_all");
  }
  Status barrier() override { return hostOnly("barrier"); }

private:
  static Status hostOnly(const char *what) {
    return Status::error(std::string("the CUDA backend runs ") + what +
                         " over NCCL, not the host's communicator");
  }
  cleave_mesh mesh_;
};

/// What a cleave_runner's handle points to.
struct PluginRunner {
  std::unique_ptr<MeshCommunicator> comm;
  CudaRunner runner;
};

PluginRunner *self(void *handle) { return static_cast<PluginRunner *>(handle); }

int carry(void *handle, int32_t input, int32_t output, char *error,
          size_t size) {
  return report(self(handle)->runner.carry(input, output), error, size);
}

int setInput(void *handle, int32_t input, const void *bytes, int64_t count,
             char *error, size_t size) {
  return report(self(handle)->runner.setInput(input, bytes, count), error,
                size);
}

int runStep(void *handle, char *error, size_t size) {
  return report(self(handle)->runner.run(), error, size);
}

int getInput(void *handle, int32_t input, void *bytes, int64_t count,
             char *error, size_t size) {
  return report(self(handle)->runner.getInput(input, bytes, count), error,
                size);
}

int getOutput(void *handle, int32_t output, void *bytes, int64_t count,
              char *error, size_t size) {
  return report(self(handle)->runner.getOutput(output, bytes, count), error,
                size);
}

void destroy(void *handle) { delete self(handle); }

} // namespace
} // namespace cleave::rt::cuda

#define CLEAVE_EXPORT extern "C" __attribute__((visibility("default")))

CLEAVE_EXPORT uint32_t cleave_cuda_abi_version(void) {
  return CLEAVE_PLUGIN_ABI_VERSION;
}

CLEAVE_EXPORT int cleave_cuda_probe(char *reason, size_t reasonSize) {
  using cleave::rt::cuda::writeError;
  // The runtime library loads without a driver; say plainly when there is
  // none rather than relay "driver version is insufficient".
  if (void *driver = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    ::dlclose(driver);
  } else {
    writeError(reason, reasonSize,
               "no NVIDIA driver on this machine (libcuda.so.1 is missing)");
    return 0;
  }
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    writeError(reason, reasonSize,
               std::string("no usable CUDA GPU (") + cudaGetErrorString(e) +
                   ")");
    return 0;
  }
  if (count == 0)
    writeError(reason, reasonSize, "no CUDA GPU is present");
  return count;
}

CLEAVE_EXPORT int cleave_cuda_create(const cleave_program *program,
                                     const cleave_mesh *mesh, int32_t precision,
                                     cleave_runner *out, char *error,
                                     size_t errorSize) {
  namespace cuda = cleave::rt::cuda;
  using cleave::rt::Status;
  auto plugin = std::make_unique<cuda::PluginRunner>();
  plugin->comm = std::make_unique<cuda::MeshCommunicator>(*mesh);
  cleave::rt::LoadedProgram loaded;
  Status s =
      cleave::rt::loadProgram(*program, plugin->comm.get(), nullptr, &loaded);
  if (s) {
    cleave::rt::fuseElementwise(loaded);
    s = plugin->runner.load(std::move(loaded), plugin->comm.get(),
                            precision == 1);
  }
  if (!s)
    return cuda::report(s, error, errorSize);
  *out = cleave_runner{plugin.release(), &cuda::carry,    &cuda::setInput,
                       &cuda::runStep,   &cuda::getInput, &cuda::getOutput,
                       &cuda::destroy};
  return 0;
}

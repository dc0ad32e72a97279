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

#include "collectives.h"
#include "cuda_kernel.h"
#include "matmul_cache.h"
#include "program.h"
#include "schedule.h"

#include "cleave/runtime/runner.h"

#include <dlfcn.h>

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
#include "cleave/runtime/kernels.def"
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

class CudaRunner final : public StepRunner {
public:
  ~CudaRunner() override;
  Status load(LoadedProgram program, Communicator *comm, bool bf16);

  Backend backend() const override { return Backend::Cuda; }
  Status carry(size_t input, size_t output) override;
  Status setInput(size_t i, HostTensor value) override;
  Status run() override;
  Status getInput(size_t i, HostTensor *value) override;
  Status getOutput(size_t o, HostTensor *value) override;
  size_t numInputs() const override { return program_.inputs.size(); }
  DType inputDType(size_t i) const override {
    return program_.values[program_.inputs[i]].type.dtype;
  }
  const std::vector<int64_t> &inputShape(size_t i) const override {
    return program_.values[program_.inputs[i]].type.shape;
  }

private:
  Status allocate();
  Status bind();
  Status copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
              const char *what);
  Status mallocZeroed(void **p, size_t bytes, const std::string &what);
  /// The device address of value \p id (null for -1).
  uint8_t *pointer(int32_t id) const;
  Status enqueue();
  Status copyOut(const ProgramValue &v, const void *src, HostTensor *out);
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
  void *arena_ = nullptr, *workspace_ = nullptr, *castScratch_ = nullptr;
  int *errorFlag_ = nullptr;
  std::vector<void *> constants_, inputs_;
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
  for (void *p : inputs_)
    cudaFree(p);
  for (const Carry &c : carried_)
    if (c.staging)
      cudaFree(c.staging);
  for (void *p :
       {arena_, workspace_, castScratch_, static_cast<void *>(errorFlag_)})
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
  if (Status s = cudaStatus(cudaMalloc(&workspace_, kWorkspaceBytes),
                            "cudaMalloc (cuBLASLt workspace)");
      !s)
    return s;
  if (Status s = mallocZeroed(reinterpret_cast<void **>(&errorFlag_),
                              2 * sizeof(int), "error flag");
      !s)
    return s;
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
  if (out.storage != Storage::Arena)
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

Status CudaRunner::setInput(size_t i, HostTensor value) {
  if (i >= program_.inputs.size())
    return Status::error("no input " + std::to_string(i));
  const ProgramValue &v = program_.values[program_.inputs[i]];
  if (value.dtype != v.type.dtype || value.shape != v.type.shape ||
      static_cast<int64_t>(value.bytes.size()) != v.numBytes)
    return Status::error("input " + std::to_string(i) + " ('" +
                         program_.inputNames[i] + "'): expected " +
                         v.type.str() + ", got " +
                         describeTensor(value.dtype, value.shape));
  if (v.numBytes == 0)
    return Status::ok();
  return copy(inputs_[i], value.bytes.data(), static_cast<size_t>(v.numBytes),
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

Status CudaRunner::copyOut(const ProgramValue &v, const void *src,
                           HostTensor *out) {
  *out = HostTensor::zeros(v.type.dtype, v.type.shape);
  if (v.numBytes == 0)
    return Status::ok();
  return copy(out->bytes.data(), src, static_cast<size_t>(v.numBytes),
              cudaMemcpyDeviceToHost, "cudaMemcpy (to host)");
}

Status CudaRunner::getInput(size_t i, HostTensor *value) {
  if (i >= program_.inputs.size())
    return Status::error("no input " + std::to_string(i));
  return copyOut(program_.values[program_.inputs[i]], inputs_[i], value);
}

Status CudaRunner::getOutput(size_t o, HostTensor *value) {
  if (o >= program_.outputs.size())
    return Status::error("no output " + std::to_string(o));
  if (runs_ == 0)
    return Status::error("output " + std::to_string(o) +
                         " is not available before a run");
  return copyOut(program_.values[program_.outputs[o]],
                 pointer(program_.outputs[o]), value);
}

} // namespace

} // namespace cleave::rt::cuda

// The plugin's entry points (runtime/cpu/runner.cpp loads them).

#define CLEAVE_EXPORT extern "C" __attribute__((visibility("default")))

CLEAVE_EXPORT int cleave_cuda_probe(std::string *reason) {
  // The runtime library loads without a driver; say plainly when there is
  // none rather than relay "driver version is insufficient".
  if (void *driver = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    ::dlclose(driver);
  } else {
    *reason = "no NVIDIA driver on this machine (libcuda.so.1 is missing)";
    return 0;
  }
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    *reason = std::string("no usable CUDA GPU (") + cudaGetErrorString(e) + ")";
    return 0;
  }
  if (count == 0)
    *reason = "no CUDA GPU is present";
  return count;
}

CLEAVE_EXPORT int cleave_cuda_create(const cleave::rt::LoadedProgram *program,
                                     cleave::rt::Communicator *comm,
                                     int precision,
                                     cleave::rt::StepRunner **result,
                                     std::string *error) {
  auto runner = std::make_unique<cleave::rt::cuda::CudaRunner>();
  if (cleave::rt::Status s = runner->load(*program, comm, precision == 1); !s) {
    *error = s.message();
    return 1;
  }
  *result = runner.release();
  return 0;
}

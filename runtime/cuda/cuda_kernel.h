//===- cuda_kernel.h - The CUDA executor and its kernels --------*- C++ -*-===//
//
// Private to libcleave_cuda.so. The CUDA backend runs the same plan as the
// CPU backend, kernel for kernel (kernels.def): before any CUDA prepare
// function sees an instruction, the schema's validator (validateInstruction,
// runtime/core/kernel_schema.cpp) has checked its arity, dtypes and
// attributes, decoded into KernelInfo::decoded, and its kernel's shape
// rule (core/shape_rules.h, in the plugin itself), so the CUDA prepare
// functions only turn a valid KernelInfo into a launch; they
// still return an error for a valid instruction they cannot run (a rank above
// kMaxRank, a size beyond what a launch can index).
//
// Every kernel is enqueued on Context::stream and must not synchronise with
// the host: the executor captures the whole step into a CUDA graph.
// Data-dependent errors (an out-of-range gather index) are recorded in
// Context::errorFlag and reported by the executor after the step.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_CUDA_CUDA_KERNEL_H
#define CLEAVE_RUNTIME_CUDA_CUDA_KERNEL_H

#include "core/kernel_info.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <functional>
#include <string>

namespace cleave::rt {
struct FusedProgram;
} // namespace cleave::rt

namespace cleave::rt::cuda {

/// Largest tensor rank the indexing kernels handle.
constexpr int kMaxRank = 8;

class Collectives;
class MatmulCache;

/// What a running kernel may use. One per executor; kernels are called from
/// one host thread.
struct Context {
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  /// cuBLASLt workspace.
  void *workspace = nullptr;
  size_t workspaceBytes = 0;
  /// Matmuls take bf16 operands (rounded from the f32 values) and accumulate
  /// in f32 (--precision bf16).
  bool bf16 = false;
  /// Device scratch for bf16 copies of matmul operands (2 bytes per element
  /// of the largest operand pair).
  void *castScratch = nullptr;
  size_t castScratchBytes = 0;
  /// Device scratch for the f32 weight a matmul_dequant dequantizes (4
  /// bytes per element of the largest such weight).
  void *dequantScratch = nullptr;
  size_t dequantScratchBytes = 0;
  /// Device word: 0, or 1 + the index of the first instruction that met a
  /// data error, with the error code in errorFlag[1] (see reportError).
  int *errorFlag = nullptr;
  /// Index of the instruction being enqueued (pass it to kernels that may
  /// report errors).
  int instruction = 0;
  MatmulCache *matmuls = nullptr;
  Collectives *collectives = nullptr;
};

/// Error codes kernels record in errorFlag[1].
enum ErrorCode : int {
  kErrorNone = 0,
  kErrorIndexOutOfRange = 1,
  kErrorDivisionByZero = 2,
};

using DeviceFn = std::function<Status(const KernelArgs &, Context &)>;

#define CLEAVE_KERNEL(NAME)                                                    \
  Status prepare_##NAME(const KernelInfo &, DeviceFn *);
#include "plan/kernels.def"

/// A fused elementwise chain (runtime/core/fusion.h).
Status prepareFused(const rt::FusedProgram &program, DeviceFn *fn);

/// Ok, or an error naming the CUDA call and its message.
Status cudaStatus(cudaError_t error, const char *what);

/// Status of the launch just enqueued (cudaGetLastError).
Status launchStatus(const char *kernel);

/// The error of a kernel given bf16 / f16 values (a plan compiled with
/// --precision): the CUDA backend runs f32 plans only, so far.
Status halfPlanRefused(const char *kernel);

} // namespace cleave::rt::cuda

#endif // CLEAVE_RUNTIME_CUDA_CUDA_KERNEL_H

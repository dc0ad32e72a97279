//===- cuda.cu - Batched matrix multiplication through cuBLASLt -----------===//
//
// Row-major C = op(A) op(B) is computed as the column-major product
// C^T = op(B)^T op(A)^T, so no operand is ever copied for layout. Batches
// whose matrices are equally spaced run as one strided-batched cuBLASLt call;
// a batch broadcast in a way that is not equally spaced (an operand shared
// along an outer batch dim only) falls back to one call per matrix.
//
// The algorithm for each problem (shape, strides, transposition, precision,
// pointer alignment) is chosen once by cuBLASLt's heuristic and cached. f32
// runs with CUBLAS_COMPUTE_32F (no TF32: the CPU backend is the reference
// at 1e-4). With --precision bf16 the operands are rounded to bf16 in a
// scratch buffer and the product is accumulated and stored in f32.
//
//===----------------------------------------------------------------------===//

#include "core/convert.h"
#include "cuda/cuda_common.cuh"
#include "cuda/matmul_cache.h"

#include <cuda_bf16.h>

#include <map>
#include <memory>
#include <mutex>
#include <tuple>

namespace cleave::rt::cuda {

namespace {

__global__ void toBf16(const float *in, __nv_bfloat16 *out, int64_t n) {
  CLEAVE_GRID_LOOP(i, n) { out[i] = __float2bfloat16_rn(in[i]); }
}

/// One cuBLASLt call's geometry in the column-major view.
struct Problem {
  bool transA = false, transB = false; // of the row-major operands
  int64_t m = 0, n = 0, k = 0;
  int64_t batch = 1;
  /// Element strides between batches (0: shared).
  int64_t strideA = 0, strideB = 0, strideC = 0;
};

int alignmentOf(const void *p, int64_t byteStride) {
  auto bits =
      reinterpret_cast<uintptr_t>(p) | static_cast<uintptr_t>(byteStride);
  int align = 16;
  while (align > 1 && (bits % align))
    align /= 2;
  return align;
}

struct Runner {
  Problem p;
  /// Per call: element offsets of A and B (several calls only when the
  /// batches are not equally spaced).
  std::vector<int64_t> aOffsets, bOffsets;
  /// Elements of A and B as stored (for the bf16 copies).
  int64_t aElements = 0, bElements = 0;

  /// \p bias (length n, added to every row) is fused as cuBLASLt's BIAS
  /// epilogue; only for single-call problems (fusedBiasOk()).
  Status run(const float *a, const float *b, float *c, Context &ctx,
             const float *bias = nullptr) const;
  bool fusedBiasOk() const { return aOffsets.size() == 1 && p.batch == 1; }
};

Status Runner::run(const float *a, const float *b, float *c, Context &ctx,
                   const float *bias) const {
  int64_t calls = static_cast<int64_t>(aOffsets.size());
  if (p.m == 0 || p.n == 0 || p.batch == 0)
    return Status::ok();
  if (p.k == 0 && bias)
    return Status::error("a fused bias needs k > 0");
  if (p.k == 0)
    return cudaStatus(
        cudaMemsetAsync(c, 0, sizeof(float) * calls * p.batch * p.m * p.n,
                        ctx.stream),
        "cudaMemsetAsync");
  const void *aData = a, *bData = b;
  if (ctx.bf16) {
    if (static_cast<size_t>((aElements + 7) / 8 * 8 + bElements) * 2 >
        ctx.castScratchBytes)
      return Status::error("bf16 scratch too small for a matmul");
    auto *a16 = static_cast<__nv_bfloat16 *>(ctx.castScratch);
    // B's copy starts 16-byte aligned, so cuBLASLt's fast kernels qualify.
    __nv_bfloat16 *b16 = a16 + (aElements + 7) / 8 * 8;
    toBf16<<<gridFor(aElements), kBlock, 0, ctx.stream>>>(a, a16, aElements);
    toBf16<<<gridFor(bElements), kBlock, 0, ctx.stream>>>(b, b16, bElements);
    if (Status s = launchStatus("matmul (bf16 operands)"); !s)
      return s;
    aData = a16;
    bData = b16;
  }
  size_t elem = ctx.bf16 ? 2 : 4;
  int align = 16;
  for (int64_t i = 0; i < calls; ++i) {
    align = std::min(align, alignmentOf(static_cast<const char *>(aData) +
                                            aOffsets[i] * elem,
                                        p.strideA * elem));
    align = std::min(align, alignmentOf(static_cast<const char *>(bData) +
                                            bOffsets[i] * elem,
                                        p.strideB * elem));
  }
  // One call per matrix (unequally spaced batches) writes C at m*n steps.
  align = std::min(align,
                   alignmentOf(c, calls > 1 ? p.m * p.n * 4 : p.strideC * 4));
  const MatmulGeometry *plan = nullptr;
  MatmulKey key{p.transA,  p.transB, p.m,       p.n,
                p.k,       p.batch,  p.strideA, p.strideB,
                p.strideC, ctx.bf16, align,     bias != nullptr};
  if (Status s = ctx.matmuls->get(key, &plan); !s)
    return s;
  if (bias) {
    // The descriptor is shared by every matmul of this problem: set this
    // call's bias right before it is enqueued.
    cublasStatus_t st = cublasLtMatmulDescSetAttribute(
        plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
    if (st != CUBLAS_STATUS_SUCCESS)
      return Status::error(std::string("cublasLtMatmulDescSetAttribute: ") +
                           cublasLtGetStatusName(st));
  }
  const float alpha = 1.0f, beta = 0.0f;
  for (int64_t i = 0; i < calls; ++i) {
    // Column-major: cuBLASLt's A is our B, its B is our A.
    const char *ab = static_cast<const char *>(bData) + bOffsets[i] * elem;
    const char *bb = static_cast<const char *>(aData) + aOffsets[i] * elem;
    float *cc = c + i * p.batch * p.m * p.n;
    cublasStatus_t st =
        cublasLtMatmul(ctx.lt, plan->desc, &alpha, ab, plan->aLayout, bb,
                       plan->bLayout, &beta, cc, plan->cLayout, cc,
                       plan->cLayout, plan->hasAlgo ? &plan->algo : nullptr,
                       ctx.workspace, ctx.workspaceBytes, ctx.stream);
    if (st != CUBLAS_STATUS_SUCCESS)
      return Status::error(std::string("cublasLtMatmul: ") +
                           cublasLtGetStatusName(st));
  }
  return Status::ok();
}

} // namespace

namespace {

Status makeRunner(const KernelInfo &info, Runner *out) {
  const TensorType &a = info.operand(0), &b = info.operand(1),
                   &r = info.result(0);
  const auto &attrs = info.params<schema::Kernel::k_matmul>();
  bool ta = attrs.transpose_a, tb = attrs.transpose_b;
  Runner run;
  Problem &p = run.p;
  p.transA = ta;
  p.transB = tb;
  size_t rank = r.shape.size();
  p.m = r.shape[rank - 2];
  p.n = r.shape[rank - 1];
  int64_t aRows = a.shape[rank - 2], aCols = a.shape[rank - 1];
  int64_t bRows = b.shape[rank - 2], bCols = b.shape[rank - 1];
  p.k = ta ? aRows : aCols;
  std::vector<int64_t> rBatch(r.shape.begin(), r.shape.end() - 2);
  std::vector<int64_t> aBatch(a.shape.begin(), a.shape.end() - 2);
  std::vector<int64_t> bBatch(b.shape.begin(), b.shape.end() - 2);
  std::vector<int64_t> aOff = batchOffsets(aBatch, rBatch, aRows * aCols);
  std::vector<int64_t> bOff = batchOffsets(bBatch, rBatch, bRows * bCols);
  int64_t batches = static_cast<int64_t>(aOff.size());
  run.aElements = a.numElements();
  run.bElements = b.numElements();

  bool sharedB = true, stackedA = !p.transA;
  for (int64_t i = 0; i < batches; ++i) {
    sharedB &= bOff[i] == 0;
    stackedA &= aOff[i] == i * aRows * aCols;
  }
  int64_t sa = 0, sb = 0;
  if (batches > 1 && sharedB && stackedA) {
    // One B for every batch and the A matrices stacked: one taller product.
    p.m *= batches;
    run.aOffsets = {0};
    run.bOffsets = {0};
  } else if (equallySpaced(aOff, &sa) && equallySpaced(bOff, &sb)) {
    p.batch = batches;
    p.strideA = sa;
    p.strideB = sb;
    p.strideC = p.m * p.n;
    run.aOffsets = {0};
    run.bOffsets = {0};
  } else {
    run.aOffsets = aOff;
    run.bOffsets = bOff;
  }
  if (p.m > INT32_MAX || p.n > INT32_MAX || p.k > INT32_MAX ||
      p.batch > INT32_MAX)
    return Status::error("matrix dims exceed cuBLASLt's int range");
  *out = run;
  return Status::ok();
}

} // namespace

Status prepare_matmul(const KernelInfo &info, DeviceFn *fn) {
  if (info.operand(0).dtype != DType::F32)
    return halfPlanRefused("matmul");
  Runner run;
  if (Status s = makeRunner(info, &run); !s)
    return s;
  *fn = [run](const KernelArgs &args, Context &ctx) {
    return run.run(static_cast<const float *>(args.operands[0]),
                   static_cast<const float *>(args.operands[1]),
                   static_cast<float *>(args.results[0]), ctx);
  };
  return Status::ok();
}

Status prepareMatmulBias(const KernelInfo &matmul, DeviceFn unfusedMatmul,
                         DeviceFn unfusedAdd, DeviceFn *fn) {
  Runner run;
  if (Status s = makeRunner(matmul, &run); !s)
    return s;
  // schedule.cpp's oneCallMatmul promised this.
  if (!run.fusedBiasOk() || run.p.k == 0)
    return Status::error("internal: a matmul fused with its bias is batched");
  // Operands: a, b, bias; results: the add's result. The unfused pair
  // (operands a, b, matmul result scratch) stays as the fallback for a
  // problem cuBLASLt has no bias algorithm for; the choice is made on the
  // first (eager) run, before the step is recorded as a graph.
  auto fused = std::make_shared<int>(-1); // -1 unknown, 0 no, 1 yes
  *fn = [=](const KernelArgs &args, Context &ctx) {
    const auto *a = static_cast<const float *>(args.operands[0]);
    const auto *b = static_cast<const float *>(args.operands[1]);
    const auto *bias = static_cast<const float *>(args.operands[2]);
    auto *out = static_cast<float *>(args.results[0]);
    if (*fused != 0) {
      Status s = run.run(a, b, out, ctx, bias);
      if (s || *fused == 1) {
        *fused = s ? 1 : *fused;
        return s;
      }
      *fused = 0;
    }
    // Unfused: the matmul into args.results[1] (its own result), then the
    // add of the bias.
    const void *mmOps[kMinArgSlots] = {a, b};
    void *mmRes[kMinArgSlots] = {args.results[1]};
    if (Status s = unfusedMatmul(KernelArgs{mmOps, mmRes}, ctx); !s)
      return s;
    const void *addOps[kMinArgSlots] = {args.operands[3], args.operands[4]};
    void *addRes[kMinArgSlots] = {out};
    return unfusedAdd(KernelArgs{addOps, addRes}, ctx);
  };
  return Status::ok();
}

int64_t bf16ScratchElements(const KernelInfo &info) {
  return (info.operand(0).numElements() + 7) / 8 * 8 +
         info.operand(1).numElements();
}

namespace {

/// w [rows, cols] (int8, bf16 or f16) as f32 times its scales (per row, or
/// per row and group of cols / groups columns), the CPU kernel's formula.
template <typename T, typename Widen>
__global__ void dequantizeWeight(const T *w, const float *scale, int64_t groups,
                                 int64_t cols, float *out, int64_t n,
                                 Widen widen) {
  CLEAVE_GRID_LOOP(i, n) {
    int64_t row = i / cols, group = (i % cols) / (cols / groups);
    out[i] = widen(w[i]) * (scale ? scale[row * groups + group] : 1.0f);
  }
}

struct WidenInt8 {
  __device__ float operator()(int8_t v) const { return static_cast<float>(v); }
};
struct WidenBf16 {
  __device__ float operator()(uint16_t v) const { return bf16ToFloat(v); }
};
struct WidenF16 {
  __device__ float operator()(uint16_t v) const { return halfToFloat(v); }
};

} // namespace

/// The weight is dequantized whole into the executor's scratch (the
/// largest such weight, once per run) and multiplied by the f32 cuBLASLt
/// path: a device holds one f32 copy at a time, where the CPU kernel's
/// blocks hold 2 MiB.
Status prepare_matmul_dequant(const KernelInfo &info, DeviceFn *fn) {
  DequantProduct d;
  if (Status s = readDequantProduct(info, &d); !s)
    return s;
  bool scaled = d.scaled;
  int64_t groups = d.groups, cols = d.cols, n = d.rows * d.cols;
  Runner run;
  run.p.transB = d.transposeB;
  run.p.m = d.m;
  run.p.n = d.n;
  run.p.k = d.k;
  run.aOffsets = {0};
  run.bOffsets = {0};
  run.aElements = info.operand(0).numElements();
  run.bElements = n;
  DType dtype = info.operand(1).dtype;
  *fn = [=](const KernelArgs &args, Context &ctx) {
    if (static_cast<size_t>(n) * 4 > ctx.dequantScratchBytes)
      return Status::error("dequantization scratch too small");
    auto *f = static_cast<float *>(ctx.dequantScratch);
    const float *scale =
        scaled ? static_cast<const float *>(args.operands[2]) : nullptr;
    if (dtype == DType::I8)
      dequantizeWeight<<<gridFor(n), kBlock, 0, ctx.stream>>>(
          static_cast<const int8_t *>(args.operands[1]), scale, groups, cols, f,
          n, WidenInt8{});
    else if (dtype == DType::BF16)
      dequantizeWeight<<<gridFor(n), kBlock, 0, ctx.stream>>>(
          static_cast<const uint16_t *>(args.operands[1]), scale, groups, cols,
          f, n, WidenBf16{});
    else
      dequantizeWeight<<<gridFor(n), kBlock, 0, ctx.stream>>>(
          static_cast<const uint16_t *>(args.operands[1]), scale, groups, cols,
          f, n, WidenF16{});
    if (Status s = launchStatus("matmul_dequant (dequantize)"); !s)
      return s;
    // The product of the exact f32 weight: --precision bf16's operand
    // rounding would use the scratch the weight is in.
    Context f32 = ctx;
    f32.bf16 = false;
    return run.run(static_cast<const float *>(args.operands[0]), f,
                   static_cast<float *>(args.results[0]), f32);
  };
  return Status::ok();
}

} // namespace cleave::rt::cuda

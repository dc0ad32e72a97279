//===- matmul_cache.cpp - cuBLASLt descriptors and algorithms per problem -===//

#include "cuda/matmul_cache.h"

namespace cleave::rt::cuda {

MatmulGeometry::~MatmulGeometry() {
  if (cLayout)
    cublasLtMatrixLayoutDestroy(cLayout);
  if (bLayout)
    cublasLtMatrixLayoutDestroy(bLayout);
  if (aLayout)
    cublasLtMatrixLayoutDestroy(aLayout);
  if (desc)
    cublasLtMatmulDescDestroy(desc);
}

namespace {

Status check(cublasStatus_t st, const char *what) {
  if (st == CUBLAS_STATUS_SUCCESS)
    return Status::ok();
  return Status::error(std::string(what) + ": " + cublasLtGetStatusName(st));
}

/// A column-major layout of \p rows x \p cols (ld = rows), batched.
Status layout(cudaDataType type, int64_t rows, int64_t cols, int64_t batch,
              int64_t stride, cublasLtMatrixLayout_t *out) {
  if (Status s = check(cublasLtMatrixLayoutCreate(out, type, rows, cols, rows),
                       "cublasLtMatrixLayoutCreate");
      !s)
    return s;
  if (batch == 1)
    return Status::ok();
  int32_t count = static_cast<int32_t>(batch);
  if (Status s = check(
          cublasLtMatrixLayoutSetAttribute(
              *out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)),
          "cublasLtMatrixLayoutSetAttribute");
      !s)
    return s;
  return check(cublasLtMatrixLayoutSetAttribute(
                   *out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                   sizeof(stride)),
               "cublasLtMatrixLayoutSetAttribute");
}

} // namespace

Status MatmulCache::get(const MatmulKey &key, const MatmulGeometry **result) {
  auto it = plans_.find(key);
  if (it != plans_.end()) {
    *result = it->second.get();
    return Status::ok();
  }
  auto plan = std::make_unique<MatmulGeometry>();
  cudaDataType in = key.bf16 ? CUDA_R_16BF : CUDA_R_32F;
  if (Status s = check(
          cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
          "cublasLtMatmulDescCreate");
      !s)
    return s;
  // cuBLASLt's A is the row-major B and its B the row-major A (matmul.cu).
  cublasOperation_t opA = key.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opB = key.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (Status s =
          check(cublasLtMatmulDescSetAttribute(
                    plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof(opA)),
                "cublasLtMatmulDescSetAttribute");
      !s)
    return s;
  if (Status s =
          check(cublasLtMatmulDescSetAttribute(
                    plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof(opB)),
                "cublasLtMatmulDescSetAttribute");
      !s)
    return s;
  if (key.bias) {
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    cudaDataType biasType = CUDA_R_32F;
    if (Status s = check(cublasLtMatmulDescSetAttribute(
                             plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                             &epilogue, sizeof(epilogue)),
                         "cublasLtMatmulDescSetAttribute");
        !s)
      return s;
    if (Status s = check(cublasLtMatmulDescSetAttribute(
                             plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                             &biasType, sizeof(biasType)),
                         "cublasLtMatmulDescSetAttribute");
        !s)
      return s;
  }
  int64_t aRows = key.transB ? key.k : key.n,
          aCols = key.transB ? key.n : key.k;
  int64_t bRows = key.transA ? key.m : key.k,
          bCols = key.transA ? key.k : key.m;
  if (Status s =
          layout(in, aRows, aCols, key.batch, key.strideB, &plan->aLayout);
      !s)
    return s;
  if (Status s =
          layout(in, bRows, bCols, key.batch, key.strideA, &plan->bLayout);
      !s)
    return s;
  if (Status s = layout(CUDA_R_32F, key.n, key.m, key.batch, key.strideC,
                        &plan->cLayout);
      !s)
    return s;

  cublasLtMatmulPreference_t pref = nullptr;
  if (Status s = check(cublasLtMatmulPreferenceCreate(&pref),
                       "cublasLtMatmulPreferenceCreate");
      !s)
    return s;
  uint64_t workspace = workspaceBytes_;
  uint32_t align = static_cast<uint32_t>(key.alignment);
  cublasLtMatmulPreferenceSetAttribute(pref,
                                       CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                       &workspace, sizeof(workspace));
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align));
  cublasLtMatmulHeuristicResult_t found{};
  int count = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(
      lt_, plan->desc, plan->aLayout, plan->bLayout, plan->cLayout,
      plan->cLayout, pref, 1, &found, &count);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || count == 0)
    return Status::error(
        "cuBLASLt has no algorithm for a " + std::to_string(key.m) + "x" +
        std::to_string(key.n) + "x" + std::to_string(key.k) +
        " matmul (batch " + std::to_string(key.batch) + ", alignment " +
        std::to_string(key.alignment) + "): " + cublasLtGetStatusName(st));
  plan->algo = found.algo;
  plan->hasAlgo = true;
  *result = plan.get();
  plans_.emplace(key, std::move(plan));
  return Status::ok();
}

} // namespace cleave::rt::cuda

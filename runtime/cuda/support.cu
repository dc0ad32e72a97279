//===- support.cu - Shared helpers of the CUDA kernels --------------------===//

#include "cuda/cuda_common.cuh"

namespace cleave::rt::cuda {

Status cudaStatus(cudaError_t error, const char *what) {
  if (error == cudaSuccess)
    return Status::ok();
  return Status::error(std::string(what) + ": " + cudaGetErrorName(error) +
                       " (" + cudaGetErrorString(error) + ")");
}

Status launchStatus(const char *kernel) {
  return cudaStatus(cudaGetLastError(), kernel);
}

Status halfPlanRefused(const char *kernel) {
  return Status::error(std::string(kernel) +
                       ": this plan was compiled with --precision bf16 or "
                       "fp16, which the CUDA backend does not run yet; run it "
                       "on the CPU backend, or compile in f32 and run with "
                       "--precision bf16 (bf16 matmul operands)");
}

Status makeIndexer(const std::vector<int64_t> &resultShape,
                   const std::vector<std::vector<int64_t>> &operandStrides,
                   Indexer *out) {
  size_t count = operandStrides.size();
  // Coalesce adjacent dims d-1, d when, for every operand, stepping d-1 once
  // equals stepping d dims[d] times; drop size-1 dims.
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> strides(count);
  for (size_t d = 0; d < resultShape.size(); ++d) {
    if (resultShape[d] == 1)
      continue;
    bool merge = !dims.empty();
    for (size_t k = 0; k < count && merge; ++k)
      merge = strides[k].back() == operandStrides[k][d] * resultShape[d];
    if (merge) {
      dims.back() *= resultShape[d];
      for (size_t k = 0; k < count; ++k)
        strides[k].back() = operandStrides[k][d];
      continue;
    }
    dims.push_back(resultShape[d]);
    for (size_t k = 0; k < count; ++k)
      strides[k].push_back(operandStrides[k][d]);
  }
  if (dims.empty()) {
    dims.push_back(1);
    for (size_t k = 0; k < count; ++k)
      strides[k].push_back(0);
  }
  if (dims.size() > static_cast<size_t>(kMaxRank) || count > 3)
    return Status::error("the CUDA backend indexes at most " +
                         std::to_string(kMaxRank) +
                         " non-mergeable dims and 3 operands");
  Indexer ix;
  ix.rank = static_cast<int>(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    ix.dims[d] = dims[d];
    for (size_t k = 0; k < count; ++k)
      ix.strides[k][d] = strides[k][d];
  }
  *out = ix;
  return Status::ok();
}

} // namespace cleave::rt::cuda

//===- matmul.cpp - Batched matrix multiplication through cblas_sgemm -----===//
//
// Operands are used in place: transposition is passed to BLAS, and broadcast
// batch dims only change which matrix each sgemm call reads.
//
//===----------------------------------------------------------------------===//

#include "cpu/cpu_kernel.h"

#include <cblas.h>

namespace cleave::rt {
namespace {

struct MatmulGeometry {
  bool transposeA = false, transposeB = false;
  int64_t m = 0, n = 0, k = 0;
  /// Element offsets of each batch's A and B matrices; C is contiguous.
  std::vector<int64_t> aOffsets, bOffsets;
};

void runMatmul(const MatmulGeometry &p, const float *a, const float *b,
               float *c) {
  int64_t batches = static_cast<int64_t>(p.aOffsets.size());
  if (p.m == 0 || p.n == 0)
    return;
  if (p.k == 0) {
    std::memset(c, 0, sizeof(float) * batches * p.m * p.n);
    return;
  }
  CBLAS_TRANSPOSE ta = p.transposeA ? CblasTrans : CblasNoTrans;
  CBLAS_TRANSPOSE tb = p.transposeB ? CblasTrans : CblasNoTrans;
  int lda = static_cast<int>(p.transposeA ? p.m : p.k);
  int ldb = static_cast<int>(p.transposeB ? p.k : p.n);
  for (int64_t i = 0; i < batches; ++i)
    cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(p.m),
                static_cast<int>(p.n), static_cast<int>(p.k), 1.0f,
                a + p.aOffsets[i], lda, b + p.bOffsets[i], ldb, 0.0f,
                c + i * p.m * p.n, static_cast<int>(p.n));
}

} // namespace

Status prepare_matmul(const KernelInfo &info, KernelFn *fn) {
  if (Status s = info.checkArity(2, 2, 1); !s)
    return s;
  const TensorType &a = info.operand(0), &b = info.operand(1),
                   &r = info.result(0);
  if (a.dtype != DType::F32 || b.dtype != DType::F32 || r.dtype != DType::F32)
    return Status::error("operands " + a.str() + ", " + b.str() +
                         " and result " + r.str() + " must be f32");
  if (r.rank() < 2 || a.rank() != r.rank() || b.rank() != r.rank())
    return Status::error("operands " + a.str() + ", " + b.str() +
                         " and result " + r.str() +
                         " must share a rank of at least 2");
  MatmulGeometry plan;
  const auto &attrs = info.params<schema::Kernel::k_matmul>();
  bool ta = attrs.transpose_a, tb = attrs.transpose_b;
  plan.transposeA = ta;
  plan.transposeB = tb;
  size_t rank = r.shape.size();
  plan.m = r.shape[rank - 2];
  plan.n = r.shape[rank - 1];
  int64_t aRows = a.shape[rank - 2], aCols = a.shape[rank - 1];
  int64_t bRows = b.shape[rank - 2], bCols = b.shape[rank - 1];
  plan.k = ta ? aRows : aCols;
  int64_t aM = ta ? aCols : aRows;
  int64_t bK = tb ? bCols : bRows;
  int64_t bN = tb ? bRows : bCols;
  if (aM != plan.m || bK != plan.k || bN != plan.n)
    return Status::error("shapes " + a.str() + (ta ? "^T" : "") + " x " +
                         b.str() + (tb ? "^T" : "") +
                         " do not multiply to result " + r.str());
  if (plan.m > INT32_MAX || plan.n > INT32_MAX || plan.k > INT32_MAX)
    return Status::error("matrix dims exceed the BLAS int range");
  std::vector<int64_t> rBatch(r.shape.begin(), r.shape.end() - 2);
  std::vector<int64_t> aBatch(a.shape.begin(), a.shape.end() - 2);
  std::vector<int64_t> bBatch(b.shape.begin(), b.shape.end() - 2);
  for (size_t d = 0; d + 2 < rank; ++d)
    if ((aBatch[d] != rBatch[d] && aBatch[d] != 1) ||
        (bBatch[d] != rBatch[d] && bBatch[d] != 1))
      return Status::error("batch dims of " + a.str() + " and " + b.str() +
                           " do not broadcast to result " + r.str());
  plan.aOffsets = batchOffsets(aBatch, rBatch, aRows * aCols);
  plan.bOffsets = batchOffsets(bBatch, rBatch, bRows * bCols);

  // One B shared by every batch, and the A matrices stacked contiguously
  // without transposition: the batches are rows of one taller sgemm.
  bool sharedB = true, stackedA = !plan.transposeA;
  for (size_t i = 0; i < plan.aOffsets.size(); ++i) {
    sharedB &= plan.bOffsets[i] == 0;
    stackedA &= plan.aOffsets[i] == static_cast<int64_t>(i) * aRows * aCols;
  }
  int64_t batches = static_cast<int64_t>(plan.aOffsets.size());
  if (batches > 1 && sharedB && stackedA && batches * plan.m <= INT32_MAX) {
    plan.m *= batches;
    plan.aOffsets = {0};
    plan.bOffsets = {0};
  }
  *fn = [plan](const KernelArgs &args) {
    runMatmul(plan, static_cast<const float *>(args.operands[0]),
              static_cast<const float *>(args.operands[1]),
              static_cast<float *>(args.results[0]));
    return Status::ok();
  };
  return Status::ok();
}

} // namespace cleave::rt

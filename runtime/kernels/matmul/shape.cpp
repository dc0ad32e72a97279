//===- shape.cpp - matmul's shape rule ------------------------------------===//

#include "core/shape_rules.h"

namespace cleave::rt {

Status check_matmul(const KernelInfo &info) {
  const TensorType &a = info.operand(0), &b = info.operand(1),
                   &r = info.result(0);
  if (r.rank() < 2 || a.rank() != r.rank() || b.rank() != r.rank())
    return Status::error("operands " + a.str() + ", " + b.str() +
                         " and result " + r.str() +
                         " must share a rank of at least 2");
  const auto &attrs = info.params<schema::Kernel::k_matmul>();
  bool ta = attrs.transpose_a, tb = attrs.transpose_b;
  size_t rank = r.shape.size();
  int64_t aRows = a.shape[rank - 2], aCols = a.shape[rank - 1];
  int64_t bRows = b.shape[rank - 2], bCols = b.shape[rank - 1];
  int64_t m = ta ? aCols : aRows, k = ta ? aRows : aCols;
  int64_t bK = tb ? bCols : bRows, n = tb ? bRows : bCols;
  if (m != r.shape[rank - 2] || bK != k || n != r.shape[rank - 1])
    return Status::error("shapes " + a.str() + (ta ? "^T" : "") + " x " +
                         b.str() + (tb ? "^T" : "") +
                         " do not multiply to result " + r.str());
  for (size_t d = 0; d + 2 < rank; ++d)
    if ((a.shape[d] != r.shape[d] && a.shape[d] != 1) ||
        (b.shape[d] != r.shape[d] && b.shape[d] != 1))
      return Status::error("batch dims of " + a.str() + " and " + b.str() +
                           " do not broadcast to result " + r.str());
  return Status::ok();
}

Status check_matmul_dequant(const KernelInfo &info) {
  const TensorType &a = info.operand(0), &w = info.operand(1),
                   &r = info.result(0);
  bool tb = info.params<schema::Kernel::k_matmul_dequant>().transpose_b;
  if (a.rank() < 2 || w.rank() != 2 || r.rank() != a.rank())
    return Status::error("operand " + a.str() + " (rank >= 2), weight " +
                         w.str() + " (rank 2) and result " + r.str() +
                         " do not fit");
  int64_t k = tb ? w.shape[1] : w.shape[0], n = tb ? w.shape[0] : w.shape[1];
  std::vector<int64_t> want = a.shape;
  want.back() = n;
  if (a.shape.back() != k || r.shape != want)
    return Status::error("shapes " + a.str() + " x " + w.str() +
                         (tb ? "^T" : "") + " do not multiply to result " +
                         r.str());
  if (info.hasOperand(2)) {
    const TensorType &s = info.operand(2);
    int64_t groups = s.rank() == 2 ? s.shape[1] : 1;
    if (s.rank() < 1 || s.rank() > 2 || s.shape[0] != w.shape[0] ||
        groups < 1 || w.shape[1] % groups != 0)
      return Status::error("scale " + s.str() +
                           " must hold one value per row of " + w.str() +
                           ", or per row and group of columns");
  }
  return Status::ok();
}

} // namespace cleave::rt

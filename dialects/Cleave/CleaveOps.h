//===- CleaveOps.h - Ops of the cleave dialect ------------------*- C++ -*-===//

#ifndef CLEAVE_DIALECT_CLEAVEOPS_H
#define CLEAVE_DIALECT_CLEAVEOPS_H

#include "Cleave/CleaveDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_OP_CLASSES
#include "Cleave/CleaveOps.h.inc"

namespace mlir::cleave {
/// The shape two or more same-rank operands broadcast to (each dimension equal
/// or 1), or failure with a diagnostic at \p loc when they do not.
FailureOr<SmallVector<int64_t>>
broadcastShapes(std::optional<Location> loc,
                ArrayRef<ArrayRef<int64_t>> shapes);

/// The products (matmul, conv2d and its adjoints): the ops mixed precision
/// runs on bf16 / f16 operands, accumulating in f32.
inline bool isProductOp(Operation *op) {
  return isa_and_present<MatmulOp, Conv2DOp, Conv2DBackwardInputOp,
                         Conv2DBackwardFilterOp>(op);
}

/// Whether \p v is a ranked tensor of f32 (what mixed precision rounds).
inline bool isF32Tensor(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && t.getElementType().isF32();
}

/// Whether transpose permutation \p perm swaps the last two dims and keeps
/// the others: what matmul's transpose_lhs / transpose_rhs read for free.
inline bool swapsLastTwo(ArrayRef<int64_t> perm) {
  int64_t r = static_cast<int64_t>(perm.size());
  if (r < 2 || perm[r - 2] != r - 1 || perm[r - 1] != r - 2)
    return false;
  for (int64_t i = 0; i + 2 < r; ++i)
    if (perm[i] != i)
      return false;
  return true;
}
} // namespace mlir::cleave

#endif // CLEAVE_DIALECT_CLEAVEOPS_H

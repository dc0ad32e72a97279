//===- ConstantEvaluator.h - Folds ops with the runtime's -------*- C++ -*-===//

#ifndef CLEAVE_EVALUATE_CONSTANTEVALUATOR_H
#define CLEAVE_EVALUATE_CONSTANTEVALUATOR_H

#include "cleave/runtime/executor.h"
#include "mlir/IR/Block.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"

namespace mlir::cleave {

/// Evaluates \p op, all of whose operands are constants, by lowering it to a
/// one-instruction plan and running it on the CPU runtime. The runtime's
/// kernels are the only implementation of each op's semantics, so folding
/// and execution cannot disagree. Fails (without a diagnostic) for ops with
/// non-constant operands, no kernel, more than \p maxElements results, or
/// operands of more than kOperandFactor times that: a splat operand costs
/// nothing in the IR but is filled in full to run the kernel (a 4-byte
/// ConstantOfShape value reduced over 30000x30000 took 3.6 GB to fold).
inline constexpr int64_t kOperandFactor = 256;
FailureOr<SmallVector<DenseElementsAttr>>
evaluateWithRuntime(Operation *op, int64_t maxElements = 1 << 16);

/// Replaces every op in [begin, end) whose operands are constants with
/// constants, in order, so chains fold. \p replaced maps each folded result
/// to its constant.
void foldConstantOps(Block::iterator begin, Block::iterator end,
                     DenseMap<Value, Value> &replaced,
                     int64_t maxElements = 1 << 16);

/// The runtime's dtype for \p element (f32, i64, i32, i1); f32 otherwise.
::cleave::rt::DType runtimeDType(Type element);
/// The element type of runtime dtype \p dtype.
Type elementTypeOf(MLIRContext *context, ::cleave::rt::DType dtype);

/// \p t's elements as a constant of \p type (which must match its size).
DenseElementsAttr hostTensorToAttr(RankedTensorType type,
                                   const ::cleave::rt::HostTensor &t);

} // namespace mlir::cleave

#endif // CLEAVE_EVALUATE_CONSTANTEVALUATOR_H

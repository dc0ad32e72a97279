//===- PlanBuffers.h - Buffer planning contract -----------------*- C++ -*-===//
//
// Names and helpers shared by the buffer planner and plan emission.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_LOWERING_PLANBUFFERS_H
#define CLEAVE_LOWERING_PLANBUFFERS_H

#include "Cleave/CleaveAttrNames.h"
#include "Cleave/TensorSize.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Operation.h"
#include "mlir/IR/Types.h"
#include "llvm/ADT/DenseMap.h"

#include <vector>

namespace mlir::cleave {

/// Whether \p op's result aliases its first operand's storage.
bool isView(Operation *op);
/// Whether \p op is a constant stored in the plan's constant table (needing
/// no arena bytes). Large splats are not: they are filled at run time, so a
/// zero gradient of a big parameter does not put its bytes in the plan.
bool isStoredConstant(Operation *op);
/// Splat constants above this many elements are filled at run time.
inline constexpr int64_t kMaxStoredSplatElements = 64;
/// The results of \p func the plan places in the caller's output tensors
/// instead of the arena, each at its first position in the return: values an
/// op of the body makes (not arguments, views or stored constants).
llvm::DenseMap<Value, unsigned> plannedOutputs(func::FuncOp func);

/// A value the arena holds, from the op that makes it to its last reader
/// (op indices in the block, inclusive; a view's readers extend its root).
struct BufferLifetime {
  Value value;
  int64_t bytes;
  int64_t begin, end;
  int64_t offset = -1;
};
/// The arena's values of single-block \p func in the order they are made;
/// \p lifetimeOf, when given, maps each to its index.
std::vector<BufferLifetime>
bufferLifetimes(func::FuncOp func,
                llvm::DenseMap<Value, unsigned> *lifetimeOf = nullptr);
/// The most bytes of the arena's values live at once: the arena's lower
/// bound, which --cleave-plan-buffers' packing approaches.
int64_t peakLiveBytes(func::FuncOp func);
} // namespace mlir::cleave

#endif // CLEAVE_LOWERING_PLANBUFFERS_H

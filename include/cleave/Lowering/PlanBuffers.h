//===- PlanBuffers.h - Buffer planning contract -----------------*- C++ -*-===//
//
// Names and helpers shared by the buffer planner and plan emission.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_LOWERING_PLANBUFFERS_H
#define CLEAVE_LOWERING_PLANBUFFERS_H

#include "mlir/IR/Operation.h"
#include "mlir/IR/Types.h"

namespace mlir::cleave {
/// Per-op attribute: one arena byte offset per result, -1 for a view.
inline constexpr char kOffsetsAttr[] = "cleave.offsets";
/// Per-function attribute: arena size in bytes.
inline constexpr char kArenaBytesAttr[] = "cleave.arena_bytes";

/// Bytes of a static tensor type as the runtime stores it (i1 takes a byte).
int64_t storageBytes(Type type);
/// Whether \p op's result aliases its first operand's storage.
bool isView(Operation *op);
} // namespace mlir::cleave

#endif // CLEAVE_LOWERING_PLANBUFFERS_H

//===- TensorSize.h - Overflow-checked tensor sizes -------------*- C++ -*-===//
//
// Part of the IR's contract: a tensor type of the cleave dialect has a static
// shape whose byte count fits in int64. Shapes come from model files, flags
// and constants an attacker may choose, and every later size computation
// (arena offsets, sharding, the runtime's buffers) multiplies dims without
// checking; so every place that makes a shape from such input asks here
// first. One helper, so that no caller forgets the negative or the zero
// dimension.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_DIALECT_TENSORSIZE_H
#define CLEAVE_DIALECT_TENSORSIZE_H

#include "mlir/IR/BuiltinTypes.h"

#include <cstdint>
#include <optional>

namespace mlir::cleave {

/// The product of \p shape times \p elementBytes; nullopt when a dim is
/// negative (dynamic) or the product does not fit in int64.
inline std::optional<int64_t> checkedByteCount(ArrayRef<int64_t> shape,
                                               int64_t elementBytes = 1) {
  int64_t count = elementBytes;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(count, d, &count))
      return std::nullopt;
  return count;
}

/// The element count of \p shape, checked as checkedByteCount.
inline std::optional<int64_t> checkedElementCount(ArrayRef<int64_t> shape) {
  return checkedByteCount(shape, 1);
}

/// Bytes of one element of \p type (i1 is one byte, as stored).
inline int64_t elementByteSize(Type type) {
  if (!type.isIntOrFloat())
    return 8;
  return std::max<int64_t>(1, type.getIntOrFloatBitWidth() / 8);
}

/// Bytes of a static tensor type as the runtime stores it (i1 takes a
/// byte); the partitioner's memory estimates and the buffer planner agree
/// through it.
inline int64_t storageBytes(Type type) {
  auto tensor = cast<RankedTensorType>(type);
  return tensor.getNumElements() * elementByteSize(tensor.getElementType());
}

/// Whether \p type is a statically shaped tensor whose bytes fit in int64.
inline bool hasCheckedSize(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return !tensor ||
         (tensor.hasStaticShape() &&
          checkedByteCount(tensor.getShape(),
                           elementByteSize(tensor.getElementType())));
}

} // namespace mlir::cleave

#endif // CLEAVE_DIALECT_TENSORSIZE_H

//===- int_arith.h - Integer arithmetic both backends compute ---*- C++ -*-===//
//
// Integer kernels wrap around (through the unsigned type) instead of
// overflowing into undefined behaviour, and integer pow is exact squaring:
// one definition for the CPU kernels and the CUDA ones, so the two cannot
// round or wrap differently.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_CORE_INT_ARITH_H
#define CLEAVE_RUNTIME_CORE_INT_ARITH_H

#include "core/host_device.h"

#include <type_traits>

namespace cleave::rt {

template <typename T> CLEAVE_HOST_DEVICE T wrapAdd(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
}
template <typename T> CLEAVE_HOST_DEVICE T wrapSub(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
}
template <typename T> CLEAVE_HOST_DEVICE T wrapMul(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
}

/// Integer power by squaring, wrapping. A negative exponent gives the
/// truncated value of 1 / base^-exp: 0 except for bases 1 and -1 (and 0,
/// whose reciprocal does not exist; it also gives 0 rather than trapping).
template <typename T> CLEAVE_HOST_DEVICE T intPow(T base, T exp) {
  if (exp < 0) {
    if (base == 1)
      return 1;
    if (base == -1)
      return (exp % 2 == 0) ? 1 : -1;
    return 0;
  }
  T result = 1;
  while (exp > 0) {
    if (exp & 1)
      result = wrapMul(result, base);
    base = wrapMul(base, base);
    exp >>= 1;
  }
  return result;
}

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_CORE_INT_ARITH_H

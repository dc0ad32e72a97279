//===- convert.h - Element conversions both backends compute ----*- C++ -*-===//
//
// The cast kernel's element conversion, one definition for the CPU and the
// CUDA kernels: float to integer truncates toward zero, saturates and maps
// NaN to 0 (the plain C++ conversion is undefined out of range); to bool is
// x != 0 (NaN is true); bools are stored as bytes and any non-zero byte
// reads as true, so a non-canonical byte cannot make an invalid bool.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_CORE_CONVERT_H
#define CLEAVE_RUNTIME_CORE_CONVERT_H

#include "core/host_device.h"

#include <cstdint>
#include <limits>
#include <type_traits>

namespace cleave::rt {

/// How a dtype is stored: bools as bytes.
template <typename T> struct StorageOf { using type = T; };
template <> struct StorageOf<bool> { using type = uint8_t; };

/// Every float is a whole number where it reaches an integer type's bounds
/// (a float has fractions only below 2^23), so comparing before truncating
/// saturates exactly as truncating first would.
template <typename To> CLEAVE_HOST_DEVICE To floatToInt(float x) {
  if (x != x) // NaN
    return 0;
  constexpr To lo = std::numeric_limits<To>::min();
  constexpr To hi = std::numeric_limits<To>::max();
  double d = static_cast<double>(x);
  if (d <= static_cast<double>(lo))
    return lo;
  if (d >= static_cast<double>(hi))
    return hi;
  return static_cast<To>(d); // truncates toward zero
}

template <typename From, typename To>
CLEAVE_HOST_DEVICE typename StorageOf<To>::type
convertValue(typename StorageOf<From>::type x) {
  using Out = typename StorageOf<To>::type;
  if constexpr (std::is_same_v<From, bool> || std::is_same_v<To, bool>) {
    return static_cast<Out>(x != 0);
  } else if constexpr (std::is_floating_point_v<From> &&
                       std::is_integral_v<To>) {
    return floatToInt<To>(x);
  } else {
    return static_cast<Out>(x);
  }
}

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_CORE_CONVERT_H

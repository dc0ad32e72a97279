//===- convert.h - Element conversions both backends compute ----*- C++ -*-===//
//
// The cast kernel's element conversion, one definition for the CPU and the
// CUDA kernels: float to integer truncates toward zero, saturates and maps
// NaN to 0 (the plain C++ conversion is undefined out of range); to bool is
// x != 0 (NaN is true); bools are stored as bytes and any non-zero byte
// reads as true, so a non-canonical byte cannot make an invalid bool. The
// 16-bit floats (storage dtypes) convert through f32, rounding to nearest
// even, written out here rather than with _Float16 / __half so that both
// compilers compute the same bits.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_CORE_CONVERT_H
#define CLEAVE_RUNTIME_CORE_CONVERT_H

#include "core/host_device.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace cleave::rt {

/// Tags of the 16-bit float storage dtypes (stored as their bits).
struct Half {};
struct BFloat16 {};

/// How a dtype is stored: bools as bytes, 16-bit floats as their bits.
template <typename T> struct StorageOf {
  using type = T;
};
template <> struct StorageOf<bool> {
  using type = uint8_t;
};
template <> struct StorageOf<Half> {
  using type = uint16_t;
};
template <> struct StorageOf<BFloat16> {
  using type = uint16_t;
};

template <typename T>
constexpr bool kIsHalfLike =
    std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

CLEAVE_HOST_DEVICE inline uint32_t floatBits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
CLEAVE_HOST_DEVICE inline float bitsFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/// IEEE binary16 to f32 (exact).
CLEAVE_HOST_DEVICE inline float halfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 31)
    return bitsFloat(sign | 0x7f800000 | (m << 13));
  if (e != 0)
    return bitsFloat(sign | ((e + 112) << 23) | (m << 13));
  if (m == 0)
    return bitsFloat(sign);
  // A subnormal: normalised into f32's range.
  e = 113;
  while (!(m & 0x400)) {
    m <<= 1;
    --e;
  }
  return bitsFloat(sign | (e << 23) | ((m & 0x3ff) << 13));
}

/// f32 to IEEE binary16, rounding to nearest even (overflow to infinity,
/// NaN stays NaN).
CLEAVE_HOST_DEVICE inline uint16_t floatToHalf(float f) {
  uint32_t x = floatBits(f);
  uint32_t sign = (x >> 16) & 0x8000, abs = x & 0x7fffffff;
  if (abs > 0x7f800000)
    return static_cast<uint16_t>(sign | 0x7e00);
  if (abs >= 0x47800000) // 65536 and above, infinity included
    return static_cast<uint16_t>(sign | 0x7c00);
  uint32_t exponent = abs >> 23;
  if (exponent < 113) { // below 2^-14: a subnormal half, or zero
    if (exponent < 102)
      return static_cast<uint16_t>(sign);
    uint32_t m = (abs & 0x7fffff) | 0x800000, shift = 126 - exponent;
    uint32_t q = m >> shift, rest = m & ((1u << shift) - 1),
             halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (q & 1)))
      ++q;
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t h = ((exponent - 112) << 10) | ((abs & 0x7fffff) >> 13);
  uint32_t rest = abs & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
    ++h; // a carry into the exponent rounds up to the next binade or inf
  return static_cast<uint16_t>(sign | h);
}

CLEAVE_HOST_DEVICE inline float bf16ToFloat(uint16_t b) {
  return bitsFloat(static_cast<uint32_t>(b) << 16);
}

/// f32 to bfloat16, rounding to nearest even (NaN stays a quiet NaN).
/// Both outcomes are computed and one selected, so that a loop of these
/// vectorises (a branch kept fused chains' bf16 stores scalar).
CLEAVE_HOST_DEVICE inline uint16_t floatToBf16(float f) {
  uint32_t x = floatBits(f);
  uint32_t quiet = (x >> 16) | 0x40;
  uint32_t rounded = (x + 0x7fff + ((x >> 16) & 1)) >> 16;
  return static_cast<uint16_t>((x & 0x7fffffff) > 0x7f800000 ? quiet : rounded);
}

/// Every float is a whole number where it reaches an integer type's bounds
/// (a float has fractions only below 2^23, a double below 2^52), so
/// comparing before truncating saturates exactly as truncating first
/// would.
template <typename To, typename From> CLEAVE_HOST_DEVICE To floatToInt(From x) {
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
  if constexpr (std::is_same_v<From, To>) {
    return x;
  } else if constexpr (kIsHalfLike<From>) {
    // Through f32, which holds every 16-bit float exactly.
    float f = std::is_same_v<From, Half> ? halfToFloat(x) : bf16ToFloat(x);
    return convertValue<float, To>(f);
  } else if constexpr (kIsHalfLike<To>) {
    float f = convertValue<From, float>(x);
    return std::is_same_v<To, Half> ? floatToHalf(f) : floatToBf16(f);
  } else if constexpr (std::is_same_v<From, bool> || std::is_same_v<To, bool>) {
    return static_cast<Out>(x != 0);
  } else if constexpr (std::is_floating_point_v<From> &&
                       std::is_integral_v<To>) {
    return floatToInt<To>(x);
  } else {
    return static_cast<Out>(x);
  }
}

/// Every dtype with the type its kernels are instantiated for:
/// X(DType::NAME, TYPE).
#define CLEAVE_FOR_EACH_DTYPE(X)                                               \
  X(DType::F32, float)                                                         \
  X(DType::I64, int64_t)                                                       \
  X(DType::I32, int32_t)                                                       \
  X(DType::Bool, bool)                                                         \
  X(DType::F64, double)                                                        \
  X(DType::F16, Half)                                                          \
  X(DType::BF16, BFloat16)                                                     \
  X(DType::I8, int8_t)                                                         \
  X(DType::I16, int16_t)                                                       \
  X(DType::U8, uint8_t)                                                        \
  X(DType::U16, uint16_t)                                                      \
  X(DType::U32, uint32_t)

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_CORE_CONVERT_H

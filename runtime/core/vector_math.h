//===- vector_math.h - exp, erf and tanh that vectorise ---------*- C++ -*-===//
//
// The CPU kernels' exp, erf and tanh (softmax, cross-entropy, attention,
// GELU, sigmoid, SiLU). libm's expf and erff are calls, one element at a
// time, and they were most of a GELU's or a softmax's time. These are
// branch-free arithmetic on one float (selects, integer bits), so the
// compiler vectorises every loop that calls them; scalar and vector code
// compute the same operations, so a value never depends on where in a loop
// it fell, and fused chains stay bit-identical to their separate kernels.
// Accuracy, measured against float64 by scripts/fit_vector_math.py (which
// also fits the polynomials): exp 0.94, erf 1.21, tanh 1.29 units in the
// last place (glibc: exp 0.5, erf 1; PyTorch's vectorised Sleef: 1.0).
// Special values follow libm: NaN in, NaN out; exp overflows to inf and
// underflows through the subnormals to 0; erf and tanh reach +-1 exactly.
//
// Hand-written rather than a library: glibc's libmvec has vector variants
// whose results differ from its scalar ones, and Debian's Sleef would be a
// dependency for three functions; see docs/design.md.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_CORE_VECTOR_MATH_H
#define CLEAVE_RUNTIME_CORE_VECTOR_MATH_H

#include <cmath>
#include <cstdint>
#include <cstring>

/// One copy of a function per instruction set (AVX-512, AVX2, baseline),
/// chosen when the library loads (GNU ifunc): the runtime is otherwise
/// built for baseline x86-64 (4 lanes) to run on every machine.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(CLEAVE_NO_CLONES)
#define CLEAVE_CLONES                                                          \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CLEAVE_CLONES
#endif

namespace cleave::rt {

namespace vmath {

inline float fromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

/// 2^n for an integral \p n in [-126, 127], from its exponent bits.
inline float pow2(int32_t n) {
  return fromBits(static_cast<uint32_t>(n + 127) << 23);
}

// scripts/fit_vector_math.py's fits: erf(x) / x - 1 in x^2 on [0, 0.9];
// erfc(x) exp(x^2) on [0.9, 4] as a Chebyshev series in (x - 2.45) / 1.55;
// tanh(x) / x - 1 in x^2 on [0, 0.625].
constexpr float kErfSmall[] = {
    1.283791668e-01f, -3.761263525e-01f, 1.128371890e-01f, -2.686070930e-02f,
    5.204332072e-03f, -8.180783604e-04f, 8.534122960e-05f};
constexpr float kErfcScaled[] = {
    2.529869049e-01f, -1.483650665e-01f, 4.093989449e-02f, -1.072206872e-02f,
    2.682177647e-03f, -6.440377286e-04f, 1.490239074e-04f, -3.333618154e-05f,
    7.228579027e-06f, -1.522829942e-06f, 3.122877587e-07f, -6.244606061e-08f,
    1.219348421e-08f};
constexpr float kTanhSmall[] = {
    -1.406787632e-10f, -3.333332976e-01f, 1.333318456e-01f, -5.394488932e-02f,
    2.169275955e-02f,  -8.161236196e-03f, 2.130309986e-03f};

// exp: its argument clamped to [kExpMin, kExpMax] (beyond, e^x is 0 or
// inf in f32), x = n ln2 + r with ln2 in Cody and Waite's two parts, n
// rounded by adding and subtracting 1.5 * 2^23, e^r by Taylor's series.
constexpr float kExpMax = 89.0f, kExpMin = -104.0f;
constexpr float kLog2e = 1.44269504088896341f, kLn2High = 0.693359375f,
                kLn2Low = -2.12194440e-4f, kRoundToInt = 12582912.0f;
constexpr float kExpTaylor[] = {1.0f / 2,   1.0f / 6,   1.0f / 24,
                                1.0f / 120, 1.0f / 720, 1.0f / 5040};
// erf's polynomial below kErfSplit, erfc's series above it (up to kErfMax)
// in (x - kErfcCenter) * kErfcScale; tanh's polynomial below kTanhSplit.
constexpr float kErfSplit = 0.9f, kErfMax = 4.0f, kErfcCenter = 2.45f,
                kErfcScale = 0.64516129032258063f, kTanhSplit = 0.625f;

template <int N> inline float horner(const float (&c)[N], float s) {
  float r = c[N - 1];
  for (int k = N - 2; k >= 0; --k)
    r = r * s + c[k];
  return r;
}

} // namespace vmath

/// e^x: x = n ln2 + r (Cody and Waite's two-part ln2, |r| <= ln2 / 2), e^r
/// by Taylor's series to r^7 with 1 + r added last, times 2^n in two
/// halves so that results in the subnormals round once.
inline float vecExp(float x) {
  // Past these e^x is inf or 0 in f32; NaN compares false and stays.
  float c = x > vmath::kExpMax ? vmath::kExpMax : x;
  c = c < vmath::kExpMin ? vmath::kExpMin : c;
  bool nan = x != x;
  c = nan ? 0.0f : c;
  // Rounds to the nearest integer: 1.5 * 2^23 leaves no fraction bits.
  float n = (c * vmath::kLog2e + vmath::kRoundToInt) - vmath::kRoundToInt;
  float r = (c - n * vmath::kLn2High) - n * vmath::kLn2Low;
  float p = 1.0f + (r + (r * r) * vmath::horner(vmath::kExpTaylor, r));
  int32_t k = static_cast<int32_t>(n);
  int32_t half = k >> 1;
  float y = p * vmath::pow2(half) * vmath::pow2(k - half);
  return nan ? x : y;
}

/// erf: x (1 + P(x^2)) below 0.9; 1 - e^(-x^2) R(x) up to 4, where erf is
/// 1 in f32.
inline float vecErf(float x) {
  float a = std::fabs(x);
  float s = a * a;
  float small = a + a * vmath::horner(vmath::kErfSmall, s);
  float b = a > vmath::kErfMax ? vmath::kErfMax : a;
  float u = (b - vmath::kErfcCenter) * vmath::kErfcScale;
  // Clenshaw's recurrence: stable where the monomial form would cancel.
  float b1 = 0.0f, b2 = 0.0f;
  for (int k = 12; k > 0; --k) {
    float t = 2.0f * u * b1 - b2 + vmath::kErfcScaled[k];
    b2 = b1;
    b1 = t;
  }
  float scaled = u * b1 - b2 + vmath::kErfcScaled[0];
  float large = 1.0f - vecExp(-(b * b)) * scaled;
  return std::copysign(a < vmath::kErfSplit ? small : large, x);
}

/// tanh: x (1 + P(x^2)) below 0.625, else 1 - 2 / (e^(2|x|) + 1).
inline float vecTanh(float x) {
  float a = std::fabs(x);
  float small = a + a * vmath::horner(vmath::kTanhSmall, a * a);
  float large = 1.0f - 2.0f / (vecExp(2.0f * a) + 1.0f);
  return std::copysign(a < vmath::kTanhSplit ? small : large, x);
}

/// Arrays of them, the kernels' hot loops: out[i] = exp(in[i] - shift),
/// erf(in[i]), tanh(in[i]), sigmoid(in[i]). Compiled for AVX-512, AVX2 and
/// baseline x86-64 and chosen by the machine at load time (the rest of the
/// runtime is built for baseline x86-64, 4 lanes); -ffp-contract=off keeps
/// the wider code's values those of the element functions above, so a
/// fused chain still equals its separate kernels bit for bit. \p out may be
/// \p in.
void expArray(const float *in, float shift, float *out, int64_t n);
void erfArray(const float *in, float *out, int64_t n);
void tanhArray(const float *in, float *out, int64_t n);
void sigmoidArray(const float *in, float *out, int64_t n);

/// bf16 to f32 and f32 to bf16 (round to nearest even; core/convert.h's
/// conversions) over arrays, compiled per instruction set like the above:
/// mixed precision's casts and the kernels that read bf16 rows directly.
void widenBf16Array(const uint16_t *in, float *out, int64_t n);
void narrowBf16Array(const float *in, uint16_t *out, int64_t n);

} // namespace cleave::rt

/// In code for both backends: the device's own f32 function (expf, erff,
/// tanhf) in device code, vecExp / vecErf / vecTanh on the host.
#if defined(__CUDA_ARCH__)
#define CLEAVE_VEC_MATH(Name, libm) ::libm##f
#else
#define CLEAVE_VEC_MATH(Name, libm) ::cleave::rt::vec##Name
#endif

#endif // CLEAVE_RUNTIME_CORE_VECTOR_MATH_H

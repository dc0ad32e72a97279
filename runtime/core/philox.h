//===- philox.h - Philox-4x32-10 counter-based generator --------*- C++ -*-===//
//
// Philox-4x32 with 10 rounds (Salmon, Moraes, Dror, Shaw: "Parallel random
// numbers: as easy as 1, 2, 3", SC'11), bit-exact with Random123's
// philox4x32 (R = 10). Private to the runtime; the unit tests check it
// against Random123's known-answer vectors.
//
// Shared by the CPU and CUDA backends (dropout masks must agree bit for bit
// across them), so every function is also a device function under nvcc, and
// the word arrays are plain structs rather than std::array, whose members are
// host-only.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_CORE_PHILOX_H
#define CLEAVE_RUNTIME_CORE_PHILOX_H

#include <cstddef>
#include <cstdint>

#include "core/host_device.h"

namespace cleave::rt::philox {

/// N 32-bit words, an aggregate: built from braced lists like std::array.
template <size_t N> struct Words {
  uint32_t words[N];

  CLEAVE_HOST_DEVICE uint32_t &operator[](size_t i) { return words[i]; }
  CLEAVE_HOST_DEVICE const uint32_t &operator[](size_t i) const {
    return words[i];
  }
  CLEAVE_HOST_DEVICE friend bool operator==(const Words &a, const Words &b) {
    for (size_t i = 0; i < N; ++i)
      if (a.words[i] != b.words[i])
        return false;
    return true;
  }
  CLEAVE_HOST_DEVICE friend bool operator!=(const Words &a, const Words &b) {
    return !(a == b);
  }
};

using Counter = Words<4>;
using Key = Words<2>;

constexpr uint32_t kMultiplier0 = 0xD2511F53u;
constexpr uint32_t kMultiplier1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;
constexpr uint32_t kWeyl1 = 0xBB67AE85u;
constexpr int kRounds = 10;

/// One Philox-4x32 round.
CLEAVE_HOST_DEVICE inline Counter singleRound(const Counter &c, const Key &k) {
  uint64_t p0 = static_cast<uint64_t>(kMultiplier0) * c[0];
  uint64_t p1 = static_cast<uint64_t>(kMultiplier1) * c[2];
  uint32_t hi0 = static_cast<uint32_t>(p0 >> 32),
           lo0 = static_cast<uint32_t>(p0);
  uint32_t hi1 = static_cast<uint32_t>(p1 >> 32),
           lo1 = static_cast<uint32_t>(p1);
  return {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
}

/// The Philox-4x32-10 block of \p counter under \p key: 10 rounds, the key
/// bumped by the Weyl constants between rounds.
CLEAVE_HOST_DEVICE inline Counter philox4x32_10(Counter counter, Key key) {
  for (int r = 0; r < kRounds; ++r) {
    if (r > 0) {
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    counter = singleRound(counter, key);
  }
  return counter;
}

/// Uniform float in [0, 1) from the top 24 bits of \p word.
CLEAVE_HOST_DEVICE inline float uniform24(uint32_t word) {
  return static_cast<float>(word >> 8) * (1.0f / 16777216.0f);
}

} // namespace cleave::rt::philox

#endif // CLEAVE_RUNTIME_CORE_PHILOX_H

//===- machine_rates.cpp - The yardsticks of a profile --------------------===//
//
// A profile's FLOP/s and bytes/s mean little alone; against what this
// machine reaches with the same threads they say whether a kernel is at the
// floor (a big matmul at 80% of sgemm) or far from it (a reduction at 5% of
// the copy rate). Measured when the profile is reported, after the steps,
// so it does not disturb them; a few hundred milliseconds.
//
//===----------------------------------------------------------------------===//

#include "cpu/runner.h"

#include "cleave/runtime/profile.h"

#include "cpu/cpu_kernel.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace cleave::rt {

namespace {

/// The best of \p repeats runs of \p fn, in seconds.
template <typename Fn> double bestSeconds(int repeats, Fn fn) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    int64_t start = StepProfiler::nowNs();
    fn();
    best = std::min(best, (StepProfiler::nowNs() - start) * 1e-9);
  }
  return best;
}

} // namespace

MachineRates measureMachineRates() {
  MachineRates rates;
  // 512^3: big enough for OpenBLAS's blocking to reach its steady rate on
  // a few cores, small enough to take milliseconds.
  constexpr int kN = 512;
  std::vector<float> a(kN * kN, 0.5f), b(kN * kN, 0.25f), c(kN * kN);
  // Through the kernels' own tiling: the rate matmuls can reach here.
  const int64_t zero = 0;
  auto sgemm = [&] {
    sgemmTiled(false, false, kN, kN, kN, 1, a.data(), &zero, kN, b.data(),
               &zero, kN, c.data(), 0, kN);
  };
  sgemm();
  rates.sgemmFlops = 2.0 * kN * kN * kN / bestSeconds(5, sgemm);
  // 64 MiB each way: past the caches, as the step's big tensors are.
  constexpr size_t kBytes = size_t(64) << 20;
  std::vector<char> from(kBytes, 1), to(kBytes, 0);
  double seconds =
      bestSeconds(3, [&] { std::memcpy(to.data(), from.data(), kBytes); });
  rates.copyBytes = 2.0 * kBytes / seconds;
  return rates;
}

} // namespace cleave::rt

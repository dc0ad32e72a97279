//===- cpu.cpp - Fused cross-entropy statistics ---------------------------===//
//
// One pass over each row of logits for both sums (forward) and one write of
// the logits' gradient (backward), instead of the shifted logits, their
// exponentials and the one-hot selection as tensors of the logits' size.
// Rows are independent, so threads split them and each row is summed in one
// order whatever the thread count.
//
//===----------------------------------------------------------------------===//

#include "core/nn_geometry.h"
#include "core/vector_math.h"
#include "cpu/cpu_kernel.h"

#include <algorithm>
#include <cmath>

namespace cleave::rt {
namespace {

/// Classes whose exponentials are computed before they are summed.
constexpr int64_t kBlock = 256;

using nn::CrossEntropyGeometry;

int64_t labelAt(const void *labels, bool wide, int64_t i) {
  return wide ? static_cast<const int64_t *>(labels)[i]
              : static_cast<const int32_t *>(labels)[i];
}

} // namespace

Status prepare_cross_entropy(const KernelInfo &info, KernelFn *fn) {
  CrossEntropyGeometry g;
  if (Status s = nn::readCrossEntropyGeometry(info, false, &g); !s)
    return s;
  *fn = [g](const KernelArgs &args) {
    const auto *x = static_cast<const float *>(args.operands[0]);
    const void *labels = args.operands[1], *ids = args.operands[2];
    const auto *shift = static_cast<const float *>(args.operands[3]);
    auto *sumExp = static_cast<float *>(args.results[0]);
    auto *target = static_cast<float *>(args.results[1]);
    int64_t rows = g.outer * g.inner;
#pragma omp parallel for schedule(static) if (rows * g.classes >               \
                                                  kParallelThreshold)
    for (int64_t r = 0; r < rows; ++r) {
      int64_t o = r / g.inner, i = r % g.inner;
      const float *row = x + o * g.classes * g.inner + i;
      float m = shift[r];
      int64_t label = labelAt(labels, g.wide, r);
      double sum = 0, picked = 0;
      // The exponentials a block at a time (a loop per instruction set),
      // then their sum in order.
      float e[kBlock];
      for (int64_t c0 = 0; c0 < g.classes; c0 += kBlock) {
        int64_t n = std::min(kBlock, g.classes - c0);
        if (g.inner == 1)
          expArray(row + c0, m, e, n);
        else
          for (int64_t c = 0; c < n; ++c)
            e[c] = vecExp(row[(c0 + c) * g.inner] - m);
        for (int64_t c = 0; c < n; ++c)
          sum += e[c];
      }
      for (int64_t c = 0; c < g.classes; ++c)
        if (labelAt(ids, g.wide, c) == label)
          picked += row[c * g.inner] - m;
      sumExp[r] = static_cast<float>(sum);
      target[r] = static_cast<float>(picked);
    }
    return Status::ok();
  };
  return Status::ok();
}

Status prepare_cross_entropy_backward(const KernelInfo &info, KernelFn *fn) {
  CrossEntropyGeometry g;
  if (Status s = nn::readCrossEntropyGeometry(info, true, &g); !s)
    return s;
  *fn = [g](const KernelArgs &args) {
    const auto *x = static_cast<const float *>(args.operands[0]);
    const void *labels = args.operands[1], *ids = args.operands[2];
    const auto *shift = static_cast<const float *>(args.operands[3]);
    const auto *gSum = static_cast<const float *>(args.operands[4]);
    const auto *gTarget = static_cast<const float *>(args.operands[5]);
    auto *dx = static_cast<float *>(args.results[0]);
    int64_t rows = g.outer * g.inner;
#pragma omp parallel for schedule(static) if (rows * g.classes >               \
                                                  kParallelThreshold)
    for (int64_t r = 0; r < rows; ++r) {
      int64_t o = r / g.inner, i = r % g.inner;
      int64_t base = o * g.classes * g.inner + i;
      float m = shift[r], gs = gSum[r], gt = gTarget[r];
      int64_t label = labelAt(labels, g.wide, r);
      if (g.inner == 1) {
        expArray(x + base, m, dx + base, g.classes);
        for (int64_t c = 0; c < g.classes; ++c)
          dx[base + c] *= gs;
      } else {
        for (int64_t c = 0; c < g.classes; ++c)
          dx[base + c * g.inner] = gs * vecExp(x[base + c * g.inner] - m);
      }
      for (int64_t c = 0; c < g.classes; ++c)
        if (labelAt(ids, g.wide, c) == label)
          dx[base + c * g.inner] += gt;
    }
    return Status::ok();
  };
  return Status::ok();
}

} // namespace cleave::rt

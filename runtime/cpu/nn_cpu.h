//===- nn_cpu.h - Helpers of the CPU conv and pool kernels ------*- C++ -*-===//

#ifndef CLEAVE_RUNTIME_CPU_NN_CPU_H
#define CLEAVE_RUNTIME_CPU_NN_CPU_H

#include "core/nn_geometry.h"
#include "cpu/cpu_kernel.h"

namespace cleave::rt::nn {

/// Lays out the receptive fields of one group of one image as a
/// [cg * kh * kw, oh * ow] matrix.
void im2col(const ConvGeometry &p, const float *x, int64_t cg, float *col);

/// avg_pool2d's divisor of output (oy, ox) is rowTaps[oy] * colTaps[ox].
void avgPoolTaps(const PoolGeometry &p, std::vector<int64_t> *rowTaps,
                 std::vector<int64_t> *colTaps);

} // namespace cleave::rt::nn

#endif // CLEAVE_RUNTIME_CPU_NN_CPU_H

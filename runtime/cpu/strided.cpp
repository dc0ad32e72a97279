//===- strided.cpp - Strided walks and copies of the CPU kernels ----------===//

#include "cpu/cpu_kernel.h"

#include <algorithm>

namespace cleave::rt {

int64_t StridedLoop::outerSize() const {
  int64_t p = 1;
  for (size_t d = 0; d + 1 < dims.size(); ++d)
    p *= dims[d];
  return p;
}

StridedLoop
StridedLoop::build(const std::vector<int64_t> &resultShape,
                   const std::vector<std::vector<int64_t>> &operandStrides) {
  StridedLoop loop;
  loop.numOperands = static_cast<int>(operandStrides.size());
  int n = loop.numOperands;
  for (int64_t extent : resultShape) {
    if (extent == 0) {
      // Nothing to visit; a single empty dim keeps the loops trivial.
      loop.dims = {0};
      for (int k = 0; k < n; ++k)
        loop.strides[k] = {0};
      return loop;
    }
  }
  // Walk from the innermost dim outwards, dropping unit dims and merging a dim
  // into the group inside it when every operand steps through both as one.
  std::vector<int64_t> dims;
  std::vector<int64_t> strides[kMaxOperands];
  for (int64_t d = static_cast<int64_t>(resultShape.size()) - 1; d >= 0; --d) {
    int64_t extent = resultShape[d];
    if (extent == 1)
      continue;
    bool merge = !dims.empty();
    for (int k = 0; k < n && merge; ++k)
      merge = operandStrides[k][d] == strides[k].back() * dims.back();
    if (merge) {
      dims.back() *= extent;
      continue;
    }
    dims.push_back(extent);
    for (int k = 0; k < n; ++k)
      strides[k].push_back(operandStrides[k][d]);
  }
  if (dims.empty()) {
    dims.push_back(1);
    for (int k = 0; k < n; ++k)
      strides[k].push_back(0);
  }
  loop.dims.assign(dims.rbegin(), dims.rend());
  for (int k = 0; k < n; ++k)
    loop.strides[k].assign(strides[k].rbegin(), strides[k].rend());
  return loop;
}

/// Copy whose input is contiguous along the result's second-innermost dim
/// (a transpose of the last two dims): a plain row walk would read with a
/// large stride, so the [rows, cols] matrices are copied in square tiles that
/// stay in cache.
template <typename T>
static void tiledTransposeCopy(const StridedLoop &loop, const T *in, T *out) {
  constexpr int64_t kTile = 32;
  size_t rank = loop.dims.size();
  int64_t rows = loop.dims[rank - 2], cols = loop.dims[rank - 1];
  int64_t colStride = loop.strides[0][rank - 1];
  int64_t matrices = 1;
  for (size_t d = 0; d + 2 < rank; ++d)
    matrices *= loop.dims[d];
  int64_t rowTiles = (rows + kTile - 1) / kTile;
  int64_t colTiles = (cols + kTile - 1) / kTile;
  int64_t tiles = matrices * rowTiles * colTiles;
#pragma omp parallel for schedule(                                             \
        static) if (tiles > 1 && matrices * rows * cols > kParallelThreshold)
  for (int64_t t = 0; t < tiles; ++t) {
    int64_t matrix = t / (rowTiles * colTiles);
    int64_t r0 = (t / colTiles) % rowTiles * kTile;
    int64_t c0 = t % colTiles * kTile;
    int64_t base = loop.baseOffset[0];
    int64_t rest = matrix;
    for (int64_t d = static_cast<int64_t>(rank) - 3; d >= 0; --d) {
      base += (rest % loop.dims[d]) * loop.strides[0][d];
      rest /= loop.dims[d];
    }
    int64_t r1 = std::min(rows, r0 + kTile), c1 = std::min(cols, c0 + kTile);
    T *dst = out + matrix * rows * cols;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < c1; ++c)
        dst[r * cols + c] = in[base + r + c * colStride];
  }
}

template <typename T>
static void stridedCopyTyped(const StridedLoop &loop, const T *in, T *out) {
  size_t rank = loop.dims.size();
  if (rank >= 2 && loop.strides[0][rank - 2] == 1 &&
      std::abs(loop.innerStride(0)) > 1 && loop.dims[rank - 2] >= 4 &&
      loop.dims[rank - 1] >= 4)
    return tiledTransposeCopy(loop, in, out);
  int64_t inner = loop.innerSize();
  int64_t stride = loop.innerStride(0);
  loop.forEachRow([&](int64_t outOffset, const int64_t *offsets) {
    const T *src = in + offsets[0];
    T *dst = out + outOffset;
    if (stride == 1) {
      std::memcpy(dst, src, inner * sizeof(T));
    } else {
      for (int64_t i = 0; i < inner; ++i)
        dst[i] = src[i * stride];
    }
  });
}

void stridedCopy(const StridedLoop &loop, size_t elemSize, const void *in,
                 void *out) {
  switch (elemSize) {
  case 1:
    return stridedCopyTyped(loop, static_cast<const uint8_t *>(in),
                            static_cast<uint8_t *>(out));
  case 2: // mixed precision's bf16 / f16
    return stridedCopyTyped(loop, static_cast<const uint16_t *>(in),
                            static_cast<uint16_t *>(out));
  case 4:
    return stridedCopyTyped(loop, static_cast<const uint32_t *>(in),
                            static_cast<uint32_t *>(out));
  default:
    return stridedCopyTyped(loop, static_cast<const uint64_t *>(in),
                            static_cast<uint64_t *>(out));
  }
}

} // namespace cleave::rt

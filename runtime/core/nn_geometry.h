//===- nn_geometry.h - Window geometry of conv and pool kernels -*- C++ -*-===//
//
// The forward kernels and their adjoints, on both backends, validate the
// same attributes and shapes; they share the readers here, so that a plan
// the forward kernel accepts has the same geometry in its backward kernels
// and on the GPU.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_CORE_NN_GEOMETRY_H
#define CLEAVE_RUNTIME_CORE_NN_GEOMETRY_H

#include "core/kernel_info.h"

#include <algorithm>
#include <vector>

namespace cleave::rt::nn {

/// Extents, strides, pads and dilations above this are rejected: they keep
/// every index computation (e.g. oy * stride + ky * dilation) far from int64
/// overflow, and BLAS takes 32-bit sizes anyway.
constexpr int64_t kMaxGeometry = INT32_MAX;

Status checkF32(const TensorType &t, const std::string &what);

/// 2-D window geometry shared by conv2d and the pools.
struct Window {
  int64_t kh = 1, kw = 1;
  int64_t strideH = 1, strideW = 1;
  int64_t padTop = 0, padLeft = 0, padBottom = 0, padRight = 0;
  int64_t dilationH = 1, dilationW = 1;
};

/// The window attributes of conv2d, the pools and their adjoints, whichever
/// of them \p info is (their Params share these fields).
struct WindowAttrs {
  std::vector<int64_t> kernel, strides, pads, dilations;
  int64_t groups = 1;
  bool countIncludePad = false;
};
WindowAttrs windowAttrs(const KernelInfo &info);

/// Checks strides, pads and dilations and copies them into \p w.
Status readWindow(const WindowAttrs &attrs, Window *w);

/// Output extent of a window sliding over \p size (floor mode).
int64_t slidingExtent(int64_t size, int64_t padBegin, int64_t padEnd,
                      int64_t kernel, int64_t stride, int64_t dilation);

/// Number of window taps along one dim that fall inside [lo, hi).
int64_t tapsInside(int64_t start, int64_t kernel, int64_t dilation, int64_t lo,
                   int64_t hi);

/// The range [*lo, *hi) of output positions o in [0, out) whose tap
/// o * stride + offset lies inside [0, size).
void validOutputRange(int64_t offset, int64_t stride, int64_t size, int64_t out,
                      int64_t *lo, int64_t *hi);

//===----------------------------------------------------------------------===//
// conv2d
//===----------------------------------------------------------------------===//

struct ConvGeometry {
  Window win;
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t f = 0, oh = 0, ow = 0, groups = 1;
  bool hasBias = false;
  /// 1x1, unit stride, no padding: the input plane is already the im2col
  /// matrix.
  bool pointwise = false;
};

/// Names of the three tensors of a convolution, for error messages.
struct ConvRoles {
  const char *x, *w, *y;
};

/// Validates the types of a convolution's input \p x [N,C,H,W], weight \p w
/// [F,C/groups,KH,KW] and output \p y [N,F,OH,OW] (whichever of them are
/// operands or the result of the kernel at hand) and the conv2d attributes.
Status readConvGeometry(const KernelInfo &info, const TensorType &x,
                        const TensorType &w, const TensorType &y,
                        const ConvRoles &roles, ConvGeometry *p);

//===----------------------------------------------------------------------===//
// Pools
//===----------------------------------------------------------------------===//

struct PoolGeometry {
  Window win;
  int64_t planes = 0, h = 0, w = 0, oh = 0, ow = 0;
  bool countIncludePad = false;
};

/// Validates a pool's input \p x [N,C,H,W] and output \p y [N,C,OH,OW] (f32)
/// and the pool attributes (count_include_pad unless \p isMax).
Status readPoolGeometry(const KernelInfo &info, const TensorType &x,
                        const TensorType &y, const char *xWhat,
                        const char *yWhat, bool isMax, PoolGeometry *p);

//===----------------------------------------------------------------------===//
// attention
//===----------------------------------------------------------------------===//

struct AttentionGeometry {
  int64_t b = 0, h = 0, hk = 0, sq = 0, sk = 0, d = 0, dv = 0;
  float scale = 1.0f;
  bool causal = false;
  bool hasBias = false;
  /// q, k, v and the output's gradient are bf16: the products round their
  /// operands to bf16 and sum in f32; everything else is f32.
  bool bf16 = false;
  /// Element strides of the bias over [B, H, Sq, Sk] (0 where it
  /// broadcasts).
  int64_t biasStride[4] = {0, 0, 0, 0};

  /// Query rows below this (in the row's own coordinates) see every key up
  /// to \p i + sk - sq: the first key a causal row excludes.
  int64_t keyEnd(int64_t i) const {
    return causal ? std::clamp<int64_t>(i + sk - sq + 1, 0, sk) : sk;
  }
};

/// Validates attention's (or, with \p backward, attention_backward's)
/// operands, results and attributes.
Status readAttentionGeometry(const KernelInfo &info, bool backward,
                             AttentionGeometry *p);

//===----------------------------------------------------------------------===//
// cross_entropy
//===----------------------------------------------------------------------===//

/// The logits viewed as [outer, classes, inner] (the class axis in the
/// middle); labels, shift and the results as [outer, inner].
struct CrossEntropyGeometry {
  int64_t outer = 1, classes = 0, inner = 1;
  /// Labels and class ids are i64 (else i32).
  bool wide = true;
};

/// Validates cross_entropy's (or, with \p backward,
/// cross_entropy_backward's) operands, result and axis.
Status readCrossEntropyGeometry(const KernelInfo &info, bool backward,
                                CrossEntropyGeometry *p);

} // namespace cleave::rt::nn

#endif // CLEAVE_RUNTIME_CORE_NN_GEOMETRY_H

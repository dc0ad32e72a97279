//===- nn_plan.cpp - Geometry of convolution and pooling instructions -----===//
//
// Shared by the CPU kernels and the CUDA backend plugin (which compiles this
// file too), so both read an instruction's window the same way.
//
//===----------------------------------------------------------------------===//

#include "core/nn_geometry.h"

#include <algorithm>
#include <cmath>

namespace cleave::rt {
namespace nn {

Status checkF32(const TensorType &t, const std::string &what) {
  if (t.dtype != DType::F32)
    return Status::error(what + " " + t.str() + " must be f32");
  return Status::ok();
}

namespace {
template <typename P> WindowAttrs windowOf(const P &p) {
  WindowAttrs w;
  w.strides = p.strides;
  w.pads = p.pads;
  w.dilations = p.dilations;
  return w;
}
template <typename P> WindowAttrs convWindowOf(const P &p) {
  WindowAttrs w = windowOf(p);
  w.groups = p.groups;
  return w;
}
template <typename P> WindowAttrs poolWindowOf(const P &p) {
  WindowAttrs w = windowOf(p);
  w.kernel = p.kernel;
  return w;
}
} // namespace

WindowAttrs windowAttrs(const KernelInfo &info) {
  using K = schema::Kernel;
  if (!info.kernelId)
    return WindowAttrs();
  switch (*info.kernelId) {
  case K::k_conv2d:
    return convWindowOf(info.params<K::k_conv2d>());
  case K::k_conv2d_backward_input:
    return convWindowOf(info.params<K::k_conv2d_backward_input>());
  case K::k_conv2d_backward_filter:
    return convWindowOf(info.params<K::k_conv2d_backward_filter>());
  case K::k_max_pool2d:
    return poolWindowOf(info.params<K::k_max_pool2d>());
  case K::k_max_pool2d_backward:
    return poolWindowOf(info.params<K::k_max_pool2d_backward>());
  case K::k_avg_pool2d: {
    const auto &p = info.params<K::k_avg_pool2d>();
    WindowAttrs w = poolWindowOf(p);
    w.countIncludePad = p.count_include_pad;
    return w;
  }
  case K::k_avg_pool2d_backward: {
    const auto &p = info.params<K::k_avg_pool2d_backward>();
    WindowAttrs w = poolWindowOf(p);
    w.countIncludePad = p.count_include_pad;
    return w;
  }
  default:
    return WindowAttrs();
  }
}

Status readWindow(const WindowAttrs &attrs, Window *w) {
  const std::vector<int64_t> &strides = attrs.strides, &pads = attrs.pads,
                             &dilations = attrs.dilations;
  if (strides[0] < 1 || strides[1] < 1 || dilations[0] < 1 || dilations[1] < 1)
    return Status::error("strides and dilations must be positive");
  for (int64_t p : pads)
    if (p < 0)
      return Status::error("pads must be non-negative");
  for (const std::vector<int64_t> *v : {&strides, &pads, &dilations})
    for (int64_t x : *v)
      if (x > kMaxGeometry)
        return Status::error("strides, pads and dilations must be at most " +
                             std::to_string(kMaxGeometry));
  w->strideH = strides[0];
  w->strideW = strides[1];
  w->padTop = pads[0];
  w->padLeft = pads[1];
  w->padBottom = pads[2];
  w->padRight = pads[3];
  w->dilationH = dilations[0];
  w->dilationW = dilations[1];
  return Status::ok();
}

int64_t slidingExtent(int64_t size, int64_t padBegin, int64_t padEnd,
                      int64_t kernel, int64_t stride, int64_t dilation) {
  int64_t span = size + padBegin + padEnd - dilation * (kernel - 1) - 1;
  return span < 0 ? 0 : span / stride + 1;
}

void validOutputRange(int64_t offset, int64_t stride, int64_t size, int64_t out,
                      int64_t *lo, int64_t *hi) {
  // o * stride + offset >= 0  <=>  o >= ceil(-offset / stride).
  int64_t first = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  // o * stride + offset <= size - 1  <=>  o <= floor((size - 1 - offset) /
  // stride), empty when the numerator is negative.
  int64_t num = size - 1 - offset;
  int64_t last = num < 0 ? -1 : num / stride;
  *lo = std::min(first, out);
  *hi = std::max(*lo, std::min(last + 1, out));
}

int64_t tapsInside(int64_t start, int64_t kernel, int64_t dilation, int64_t lo,
                   int64_t hi) {
  // Taps i with start + i * dilation in [lo, hi).
  int64_t first, last;
  validOutputRange(start - lo, dilation, hi - lo, kernel, &first, &last);
  return last - first;
}

/// Whether a tensor dim is small enough for the index arithmetic.
static Status checkExtents(const TensorType &t, const std::string &what) {
  for (int64_t d : t.shape)
    if (d > kMaxGeometry)
      return Status::error(what + " " + t.str() + " has a dim above " +
                           std::to_string(kMaxGeometry));
  return Status::ok();
}

Status readConvGeometry(const KernelInfo &info, const TensorType &x,
                        const TensorType &w, const TensorType &y,
                        const ConvRoles &roles, ConvGeometry *p) {
  std::string names = std::string(roles.x) + " " + x.str() + ", " + roles.w +
                      " " + w.str() + " and " + roles.y + " " + y.str();
  // f32, or one half-precision dtype throughout (mixed precision).
  bool half = x.dtype == DType::BF16 || x.dtype == DType::F16;
  if ((x.dtype != DType::F32 && !half) || w.dtype != x.dtype ||
      y.dtype != x.dtype)
    return Status::error(names + " must be f32 (or all bf16, or all f16)");
  if (x.rank() != 4 || w.rank() != 4 || y.rank() != 4)
    return Status::error(names + " must be 4-D");
  for (const auto &[t, what] :
       {std::pair{&x, roles.x}, std::pair{&w, roles.w}, std::pair{&y, roles.y}})
    if (Status s = checkExtents(*t, what); !s)
      return s;
  WindowAttrs attrs = windowAttrs(info);
  if (Status s = readWindow(attrs, &p->win); !s)
    return s;
  p->groups = attrs.groups;
  p->n = x.shape[0];
  p->c = x.shape[1];
  p->h = x.shape[2];
  p->w = x.shape[3];
  p->f = w.shape[0];
  p->win.kh = w.shape[2];
  p->win.kw = w.shape[3];
  if (p->groups < 1 || p->c % p->groups != 0 || p->f % p->groups != 0 ||
      w.shape[1] != p->c / p->groups)
    return Status::error("groups " + std::to_string(p->groups) +
                         " does not divide " + roles.x + " " + x.str() +
                         " and " + roles.w + " " + w.str());
  p->oh = slidingExtent(p->h, p->win.padTop, p->win.padBottom, p->win.kh,
                        p->win.strideH, p->win.dilationH);
  p->ow = slidingExtent(p->w, p->win.padLeft, p->win.padRight, p->win.kw,
                        p->win.strideW, p->win.dilationW);
  if (y.shape != std::vector<int64_t>{p->n, p->f, p->oh, p->ow})
    return Status::error(std::string(roles.y) + " " + y.str() + " is not [" +
                         std::to_string(p->n) + "," + std::to_string(p->f) +
                         "," + std::to_string(p->oh) + "," +
                         std::to_string(p->ow) + "] for " + roles.x + " " +
                         x.str() + " and " + roles.w + " " + w.str());
  int64_t kdim = 0, plane = 0;
  if (__builtin_mul_overflow(w.shape[1] * p->win.kh, p->win.kw, &kdim) ||
      __builtin_mul_overflow(p->oh, p->ow, &plane) || kdim > INT32_MAX ||
      plane > INT32_MAX)
    return Status::error("convolution exceeds the BLAS int range");
  p->pointwise = p->win.kh == 1 && p->win.kw == 1 && p->win.strideH == 1 &&
                 p->win.strideW == 1 && p->win.padTop == 0 &&
                 p->win.padLeft == 0 && p->win.padBottom == 0 &&
                 p->win.padRight == 0;
  return Status::ok();
}

Status readPoolGeometry(const KernelInfo &info, const TensorType &x,
                        const TensorType &y, const char *xWhat,
                        const char *yWhat, bool isMax, PoolGeometry *p) {
  if (Status s = checkF32(x, xWhat); !s)
    return s;
  if (Status s = checkF32(y, yWhat); !s)
    return s;
  if (x.rank() != 4 || y.rank() != 4 || x.shape[0] != y.shape[0] ||
      x.shape[1] != y.shape[1])
    return Status::error(std::string(xWhat) + " " + x.str() + " and " + yWhat +
                         " " + y.str() + " must be [N,C,H,W] and [N,C,OH,OW]");
  if (Status s = checkExtents(x, xWhat); !s)
    return s;
  if (Status s = checkExtents(y, yWhat); !s)
    return s;
  WindowAttrs attrs = windowAttrs(info);
  const std::vector<int64_t> &kernel = attrs.kernel;
  if (kernel.size() != 2)
    return Status::error("pool: no kernel window");
  if (kernel[0] < 1 || kernel[1] < 1 || kernel[0] > kMaxGeometry ||
      kernel[1] > kMaxGeometry)
    return Status::error("attribute 'kernel' must be positive and at most " +
                         std::to_string(kMaxGeometry));
  if (Status s = readWindow(attrs, &p->win); !s)
    return s;
  p->win.kh = kernel[0];
  p->win.kw = kernel[1];
  p->countIncludePad = !isMax && attrs.countIncludePad;
  p->planes = x.shape[0] * x.shape[1];
  p->h = x.shape[2];
  p->w = x.shape[3];
  p->oh = y.shape[2];
  p->ow = y.shape[3];
  return Status::ok();
}

Status readAttentionGeometry(const KernelInfo &info, bool backward,
                             AttentionGeometry *p) {
  // Operand positions: forward (q, k, v, bias?), backward (q, k, v, out, lse,
  // dout, bias?).
  size_t biasAt = backward ? 6 : 3;
  const TensorType &q = info.operand(0), &k = info.operand(1),
                   &v = info.operand(2);
  std::string names =
      "query " + q.str() + ", key " + k.str() + " and value " + v.str();
  // Mixed precision's products read bf16 q, k, v (and output gradient).
  p->bf16 = q.dtype == DType::BF16;
  for (const TensorType *t : {&q, &k, &v})
    if (t->dtype != q.dtype || t->rank() != 4 ||
        (q.dtype != DType::F32 && q.dtype != DType::BF16))
      return Status::error(names + " must be 4-D, all f32 or all bf16");
  for (const auto &[t, what] : {std::pair{&q, "query"}, std::pair{&k, "key"},
                                std::pair{&v, "value tensor"}})
    if (Status s = checkExtents(*t, what); !s)
      return s;
  p->b = q.shape[0];
  p->h = q.shape[1];
  p->sq = q.shape[2];
  p->d = q.shape[3];
  p->hk = k.shape[1];
  p->sk = k.shape[2];
  p->dv = v.shape[3];
  if (k.shape[0] != p->b || v.shape[0] != p->b || v.shape[1] != p->hk ||
      v.shape[2] != p->sk || k.shape[3] != p->d || p->hk < 1 ||
      p->h % p->hk != 0)
    return Status::error(names + " disagree (want [B, H, Sq, D], [B, Hk, Sk, "
                                 "D], [B, Hk, Sk, Dv], H a multiple of Hk)");
  std::vector<int64_t> outShape{p->b, p->h, p->sq, p->dv};
  std::vector<int64_t> lseShape{p->b, p->h, p->sq};
  auto expect = [&](const TensorType &t, const std::vector<int64_t> &shape,
                    const char *what, DType dtype = DType::F32) -> Status {
    if (t.dtype != dtype || t.shape != shape)
      return Status::error(std::string(what) + " " + t.str() +
                           " does not fit " + names);
    return Status::ok();
  };
  if (backward) {
    if (Status s = expect(info.operand(3), outShape, "output"); !s)
      return s;
    if (Status s = expect(info.operand(4), lseShape, "lse"); !s)
      return s;
    if (Status s =
            expect(info.operand(5), outShape, "output gradient", q.dtype);
        !s)
      return s;
    for (size_t r = 0; r < 3; ++r)
      if (Status s = expect(info.result(r), info.operand(r).shape, "gradient");
          !s)
        return s;
  } else {
    if (Status s = expect(info.result(0), outShape, "result"); !s)
      return s;
    if (Status s = expect(info.result(1), lseShape, "lse"); !s)
      return s;
  }
  p->hasBias = info.hasOperand(biasAt);
  if (p->hasBias) {
    const TensorType &bias = info.operand(biasAt);
    int64_t full[4] = {p->b, p->h, p->sq, p->sk};
    if (bias.dtype != DType::F32 || bias.rank() != 4)
      return Status::error("bias " + bias.str() + " must be 4-D f32");
    int64_t stride = 1;
    for (int d = 3; d >= 0; --d) {
      if (bias.shape[d] != 1 && bias.shape[d] != full[d])
        return Status::error("bias " + bias.str() +
                             " does not broadcast to the scores");
      p->biasStride[d] = bias.shape[d] == 1 ? 0 : stride;
      stride *= bias.shape[d];
    }
  }
  if (backward) {
    const auto &a = info.params<schema::Kernel::k_attention_backward>();
    p->scale = static_cast<float>(a.scale);
    p->causal = a.causal;
  } else {
    const auto &a = info.params<schema::Kernel::k_attention>();
    p->scale = static_cast<float>(a.scale);
    p->causal = a.causal;
  }
  if (!std::isfinite(p->scale))
    return Status::error("attribute 'scale' must be finite");
  return Status::ok();
}

Status readCrossEntropyGeometry(const KernelInfo &info, bool backward,
                                CrossEntropyGeometry *p) {
  const TensorType &x = info.operand(0);
  int64_t axis =
      backward ? info.params<schema::Kernel::k_cross_entropy_backward>().axis
               : info.params<schema::Kernel::k_cross_entropy>().axis;
  if (x.dtype != DType::F32 || axis < 0 || axis >= x.rank())
    return Status::error("logits " + x.str() + " must be f32 with axis " +
                         std::to_string(axis));
  std::vector<int64_t> kept = x.shape, ids(x.shape.size(), 1);
  kept[axis] = 1;
  ids[axis] = x.shape[axis];
  auto expect = [&](const TensorType &t, const std::vector<int64_t> &shape,
                    bool integer, const char *what) -> Status {
    bool dtypeOk = integer ? (t.dtype == DType::I64 || t.dtype == DType::I32)
                           : t.dtype == DType::F32;
    if (!dtypeOk || t.shape != shape)
      return Status::error(std::string(what) + " " + t.str() +
                           " does not fit logits " + x.str() + " over axis " +
                           std::to_string(axis));
    return Status::ok();
  };
  if (Status s = expect(info.operand(1), kept, true, "labels"); !s)
    return s;
  if (Status s = expect(info.operand(2), ids, true, "class ids"); !s)
    return s;
  if (Status s = expect(info.operand(3), kept, false, "shift"); !s)
    return s;
  if (backward) {
    for (size_t i : {4, 5})
      if (Status s = expect(info.operand(i), kept, false, "gradient"); !s)
        return s;
    if (Status s = expect(info.result(0), x.shape, false, "result"); !s)
      return s;
  } else {
    for (size_t i : {0, 1})
      if (Status s = expect(info.result(i), kept, false, "result"); !s)
        return s;
  }
  p->classes = x.shape[axis];
  p->outer = 1;
  for (int64_t d = 0; d < axis; ++d)
    p->outer *= x.shape[d];
  p->inner = 1;
  for (int64_t d = axis + 1; d < x.rank(); ++d)
    p->inner *= x.shape[d];
  p->wide = info.operand(1).dtype == DType::I64;
  return Status::ok();
}

} // namespace nn
} // namespace cleave::rt

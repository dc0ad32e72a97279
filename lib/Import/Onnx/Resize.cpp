//===- Resize.cpp - ONNX Resize and Upsample --------------------*- C++ -*-===//
//
// Resize is separable: along each resized axis, every output position reads
// a few input positions (1 for nearest, 2 for linear, 4 for cubic) with
// weights that depend only on the position. The importer computes those
// taps and weights once, in double precision and by the ONNX reference's
// own rules (coordinate transformation, nearest rounding, ratio 1 at whole
// coordinates, edge clamping, exclude_outside, tf_crop_and_resize's
// extrapolation), and writes the axis as gathers of the taps times their
// weights. So a resize has kernels, a gradient (gather's) and sharding
// rules without new code. The constants hold taps x output size per axis,
// never the tensor's size; an output dimension beyond kMaxTaps is refused.
//
//===----------------------------------------------------------------------===//

#include "Cleave/TensorSize.h"
#include "Expr.h"

#include <cmath>

using namespace mlir;
using namespace mlir::cleave;
using namespace mlir::cleave::onnx_import;

namespace {

/// The most taps x output positions one resized axis may hold as
/// constants.
constexpr int64_t kMaxTaps = int64_t(1) << 22;

enum class Mode { Nearest, Linear, Cubic };

struct ResizeSpec {
  Mode mode = Mode::Nearest;
  std::string coordinates = "half_pixel";
  std::string nearest = "round_prefer_floor";
  double cubicA = -0.75;
  bool excludeOutside = false;
  double extrapolation = 0;
};

/// One axis's taps: for output position x, taps[t * out + x] reads input
/// index[t * out + x] with weight[t * out + x]; outside[x] marks positions
/// that take the extrapolation value.
struct AxisTaps {
  int64_t count = 0;
  SmallVector<int64_t> index;
  SmallVector<float> weight;
  SmallVector<bool> outside;
  bool anyOutside = false;
};

/// The input coordinate of output position \p x, as onnx's reference
/// resize computes it (outWidth is scale * n, not the rounded size).
double sourceCoordinate(const ResizeSpec &spec, double x, int64_t n,
                        double scale, double roiStart, double roiEnd) {
  double outWidth = scale * n;
  const std::string &m = spec.coordinates;
  if (m == "align_corners")
    return outWidth == 1 ? 0 : x * (n - 1) / (outWidth - 1);
  if (m == "asymmetric")
    return x / scale;
  if (m == "tf_half_pixel_for_nn")
    return (x + 0.5) / scale;
  if (m == "tf_crop_and_resize")
    return (outWidth == 1
                ? (roiEnd - roiStart) * (n - 1) / 2
                : x * (roiEnd - roiStart) * (n - 1) / (outWidth - 1)) +
           roiStart * (n - 1);
  if (m == "pytorch_half_pixel")
    return outWidth == 1 ? -0.5 : (x + 0.5) / scale - 0.5;
  return (x + 0.5) / scale - 0.5; // half_pixel
}

SmallVector<double> coefficients(const ResizeSpec &spec, double ratio) {
  if (spec.mode == Mode::Linear)
    return {1 - ratio, ratio};
  double a = spec.cubicA;
  auto far = [&](double t) {
    return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a;
  };
  auto near = [&](double t) { return ((a + 2) * t - (a + 3)) * t * t + 1; };
  return {far(ratio + 1), near(ratio), near(1 - ratio), far(2 - ratio)};
}

/// Whether nearest rounding takes the upper neighbour at \p ratio in (0, 1).
bool roundsUp(const ResizeSpec &spec, double ratio, bool downsampling) {
  const std::string &m = spec.nearest;
  if (m == "round_prefer_ceil")
    return ratio >= 0.5;
  if (m == "floor")
    return false;
  if (m == "ceil")
    return true;
  if (m == "simple") // Resize-10 and Upsample, as onnxruntime does them.
    return downsampling;
  return ratio > 0.5; // round_prefer_floor
}

AxisTaps axisTaps(const ResizeSpec &spec, int64_t n, int64_t out, double scale,
                  double roiStart, double roiEnd) {
  AxisTaps taps;
  taps.count = spec.mode == Mode::Nearest  ? 1
               : spec.mode == Mode::Linear ? 2
                                           : 4;
  taps.index.assign(taps.count * out, 0);
  taps.weight.assign(taps.count * out, 0);
  taps.outside.assign(out, false);
  for (int64_t x = 0; x < out; ++x) {
    double src = sourceCoordinate(spec, x, n, scale, roiStart, roiEnd);
    if (spec.coordinates == "tf_crop_and_resize" && (src < 0 || src > n - 1)) {
      taps.outside[x] = true;
      taps.anyOutside = true;
    }
    double base = std::floor(src);
    bool whole = src == base;
    auto clampIndex = [&](double i) {
      return static_cast<int64_t>(std::clamp<double>(i, 0, n - 1));
    };
    if (spec.mode == Mode::Nearest) {
      bool up = !whole && roundsUp(spec, src - base, scale < 1);
      taps.index[x] = clampIndex(base + (up ? 1 : 0));
      taps.weight[x] = 1;
      continue;
    }
    // The reference takes ratio 1 at a whole coordinate, and the taps
    // nearest to it (ties to the lower index).
    double ratio = whole ? 1 : src - base;
    double first = whole ? src - taps.count / 2 : base - taps.count / 2 + 1;
    SmallVector<double> c = coefficients(spec, ratio);
    double sum = 0;
    for (int64_t t = 0; t < taps.count; ++t) {
      double i = first + t;
      if (spec.excludeOutside && (i < 0 || i >= n))
        c[t] = 0;
      sum += c[t];
    }
    for (int64_t t = 0; t < taps.count; ++t) {
      taps.index[t * out + x] = clampIndex(first + t);
      taps.weight[t * out + x] = static_cast<float>(
          spec.excludeOutside && sum != 0 ? c[t] / sum : c[t]);
    }
  }
  return taps;
}

/// \p x resized along \p axis to \p out positions by \p taps.
Value resizeAxis(NodeContext &ctx, const ResizeSpec &spec, Value x,
                 int64_t axis, int64_t out, const AxisTaps &taps) {
  auto type = NodeContext::typeOf(x);
  int64_t rank = type.getRank();
  SmallVector<int64_t> along(rank, 1);
  along[axis] = out;
  Type f = type.getElementType();
  Expr e(ctx, f);
  Value y;
  for (int64_t t = 0; t < taps.count; ++t) {
    ArrayRef<int64_t> idx = ArrayRef(taps.index).slice(t * out, out);
    auto idxType = RankedTensorType::get({out}, ctx.b.getI64Type());
    Value positions =
        ConstantOp::create(ctx.b, DenseElementsAttr::get(idxType, idx));
    Value g = ctx.b.createOrFold<GatherOp>(x, positions, axis);
    if (spec.mode != Mode::Nearest) {
      ArrayRef<float> w = ArrayRef(taps.weight).slice(t * out, out);
      Value weights = ConstantOp::create(
          ctx.b, DenseElementsAttr::get(RankedTensorType::get(along, f), w));
      g = e.mul(g, weights);
    }
    y = y ? e.add(y, g) : g;
  }
  if (taps.anyOutside) {
    SmallVector<bool> mask(taps.outside.begin(), taps.outside.end());
    Value outside = ConstantOp::create(
        ctx.b,
        DenseElementsAttr::get(RankedTensorType::get(along, ctx.b.getI1Type()),
                               ArrayRef(mask)));
    y = e.select(outside, e.k(spec.extrapolation), y);
  }
  return y;
}

FailureOr<ResizeSpec> specOf(NodeContext &ctx, bool legacy) {
  ResizeSpec spec;
  std::string mode = ctx.attrString("mode", "nearest");
  if (mode == "nearest")
    spec.mode = Mode::Nearest;
  else if (mode == "linear" || mode == "bilinear")
    spec.mode = Mode::Linear;
  else if (mode == "cubic" && !legacy)
    spec.mode = Mode::Cubic;
  else
    return ctx.error() << "mode '" << mode << "' is not supported";
  if (legacy) {
    spec.coordinates = "asymmetric";
    spec.nearest = "simple";
    return spec;
  }
  spec.coordinates =
      ctx.attrString("coordinate_transformation_mode", "half_pixel");
  static const char *const known[] = {
      "half_pixel", "pytorch_half_pixel", "align_corners",
      "asymmetric", "tf_crop_and_resize", "tf_half_pixel_for_nn"};
  if (!llvm::is_contained(known, spec.coordinates))
    return ctx.error() << "coordinate_transformation_mode '" << spec.coordinates
                       << "' is not supported";
  spec.nearest = ctx.attrString("nearest_mode", "round_prefer_floor");
  static const char *const rounding[] = {"round_prefer_floor",
                                         "round_prefer_ceil", "floor", "ceil"};
  if (!llvm::is_contained(rounding, spec.nearest))
    return ctx.error() << "nearest_mode '" << spec.nearest
                       << "' is not supported";
  spec.cubicA = ctx.attrFloat("cubic_coeff_a", -0.75f);
  spec.excludeOutside = ctx.attrInt("exclude_outside", 0) != 0;
  spec.extrapolation = ctx.attrFloat("extrapolation_value", 0.0f);
  if (ctx.attrInt("antialias", 0))
    return ctx.error() << "antialias is not supported";
  if (ctx.attrString("keep_aspect_ratio_policy", "stretch") != "stretch")
    return ctx.error() << "keep_aspect_ratio_policy '"
                       << ctx.attrString("keep_aspect_ratio_policy", "")
                       << "' is not supported (stretch is)";
  return spec;
}

/// Optional input \p i as doubles: empty when absent or empty.
FailureOr<SmallVector<double>> optionalDoubles(NodeContext &ctx, unsigned i,
                                               StringRef what) {
  if (!ctx.hasInput(i))
    return SmallVector<double>();
  return ctx.constantDoubles(i, what);
}

/// Resizes input 0 to \p sizes or by \p scales (one of them given, over
/// \p axes), with \p roi for tf_crop_and_resize.
LogicalResult resizeWith(NodeContext &ctx, const ResizeSpec &spec,
                         ArrayRef<double> scalesIn, ArrayRef<double> sizesIn,
                         ArrayRef<double> roiIn, ArrayRef<int64_t> axesIn) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  auto shape = NodeContext::typeOf(*x).getShape();
  int64_t rank = shape.size();
  if (!NodeContext::typeOf(*x).getElementType().isF32())
    return ctx.error() << "needs a float32 input, got "
                       << NodeContext::typeOf(*x).getElementType();
  SmallVector<int64_t> axes;
  for (int64_t a : axesIn) {
    FailureOr<int64_t> axis = ctx.normaliseAxis(a, rank);
    if (failed(axis))
      return failure();
    axes.push_back(*axis);
  }
  if (axes.empty())
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  int64_t k = axes.size();
  bool bySizes = !sizesIn.empty();
  if ((bySizes ? sizesIn.size() : scalesIn.size()) != static_cast<size_t>(k))
    return ctx.error() << (bySizes ? "sizes" : "scales") << " must hold " << k
                       << " values, one per resized axis";
  if (!roiIn.empty() && roiIn.size() != static_cast<size_t>(2 * k))
    return ctx.error() << "roi must hold " << 2 * k << " values";
  Value y = *x;
  for (int64_t i = 0; i < k; ++i) {
    int64_t d = axes[i], n = shape[d];
    double scale = bySizes ? sizesIn[i] / n : scalesIn[i];
    if (!(scale > 0) || !std::isfinite(scale) || n == 0)
      return ctx.error() << "the scale of axis " << d << " must be positive";
    double outSize = bySizes ? sizesIn[i] : std::floor(n * scale);
    if (outSize < 1 || outSize > static_cast<double>(kMaxTaps))
      return ctx.error() << "the resized dim " << d << " (" << outSize
                         << ") is not supported: 1 to " << kMaxTaps;
    int64_t out = static_cast<int64_t>(outSize);
    double roiStart = roiIn.empty() ? 0 : roiIn[i];
    double roiEnd = roiIn.empty() ? 1 : roiIn[k + i];
    bool identity = out == n && scale == 1 &&
                    (spec.coordinates != "tf_crop_and_resize" ||
                     (roiStart == 0 && roiEnd == 1));
    if (identity)
      continue;
    SmallVector<int64_t> wide(NodeContext::typeOf(y).getShape());
    wide[d] = out;
    if (!hasCheckedSize(NodeContext::typeOf(y).clone(wide)))
      return ctx.error() << "the resized tensor holds more bytes than fit in "
                            "memory";
    AxisTaps taps = axisTaps(spec, n, out, scale, roiStart, roiEnd);
    if (taps.count * out > kMaxTaps)
      return ctx.error() << "the resized dim " << d << " (" << out
                         << ") is not supported: at most "
                         << kMaxTaps / taps.count;
    y = resizeAxis(ctx, spec, y, d, out, taps);
    if (!y)
      return failure();
  }
  ctx.setOutput(0, y);
  return success();
}

/// Upsample-7 (scales an attribute) and -9 / Resize-10 (scales input 1).
LogicalResult upsample(NodeContext &ctx) {
  FailureOr<ResizeSpec> spec = specOf(ctx, /*legacy=*/true);
  if (failed(spec))
    return failure();
  SmallVector<double> scales;
  if (ctx.opset < 9) {
    const onnx::AttributeProto *a = ctx.attr("scales");
    if (!a)
      return ctx.error() << "scales is required";
    scales.assign(a->floats().begin(), a->floats().end());
  } else {
    FailureOr<SmallVector<double>> s = ctx.constantDoubles(1, "scales");
    if (failed(s))
      return failure();
    scales = *s;
  }
  return resizeWith(ctx, *spec, scales, {}, {}, {});
}

/// Resize-11 on: X, roi, scales, sizes (scales or sizes given), and from
/// 18 the axes they apply to.
LogicalResult resize11(NodeContext &ctx) {
  FailureOr<ResizeSpec> spec = specOf(ctx, /*legacy=*/false);
  if (failed(spec))
    return failure();
  // One at a time: each failure is an error line, and a node gets one.
  FailureOr<SmallVector<double>> roi = optionalDoubles(ctx, 1, "roi");
  if (failed(roi))
    return failure();
  FailureOr<SmallVector<double>> scales = optionalDoubles(ctx, 2, "scales");
  if (failed(scales))
    return failure();
  FailureOr<SmallVector<double>> sizes = optionalDoubles(ctx, 3, "sizes");
  if (failed(sizes))
    return failure();
  if (scales->empty() == sizes->empty())
    return ctx.error() << "exactly one of scales and sizes must be given";
  if (spec->coordinates != "tf_crop_and_resize")
    roi->clear();
  SmallVector<int64_t> axes;
  if (auto a = ctx.attrInts("axes"))
    axes = *a;
  return resizeWith(ctx, *spec, *scales, *sizes, *roi, axes);
}

} // namespace

void onnx_import::registerResizeHandlers(HandlerTable &t) {
  t.on("Upsample", 7, upsample);
  t.on("Resize", 10, upsample);
  t.on("Resize", 11, resize11);
}

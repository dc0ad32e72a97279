//===- cpu_half.cpp - bf16 and f16 matrix products through oneDNN ---------===//
//
// Mixed precision's GEMMs: bf16 (or f16) operands, the products accumulated
// in f32 and the result rounded once to the operands' dtype, as PyTorch's
// autocast and cuBLASLt compute them. Debian's OpenBLAS has no sbgemm, so
// oneDNN's matmul primitive runs them (AVX512_BF16 here: 2.2x OpenBLAS's
// sgemm on one core, bench/bf16_step.py). The primitive is built once per
// instruction, transposition and batch strides written into its memory
// descriptors so no operand is copied. Where oneDNN has no implementation
// (f16 on CPUs without AVX512_FP16; bf16 without AVX512) the operands are
// widened to f32 for sgemm: bf16 and f16 products are exact in f32, so only
// the summation order differs.
//
//===----------------------------------------------------------------------===//

#include "cpu/cpu_kernel.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <cstring>

namespace cleave::rt {

namespace {

using dims = dnnl::memory::dims;

dnnl::engine &cpuEngine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

struct HalfGeometry {
  bool transposeA = false, transposeB = false;
  int64_t m = 0, n = 0, k = 0;
  /// Matrices per primitive call (1, or the batch in one 3-D call) and the
  /// element strides between them (0: shared).
  int64_t batch = 1, strideA = 0, strideB = 0;
  /// Per call: element offsets of A and B; C's calls are contiguous.
  std::vector<int64_t> aOffsets{0}, bOffsets{0};
};

HalfGeometry geometryOf(const KernelInfo &info) {
  const TensorType &a = info.operand(0), &b = info.operand(1),
                   &r = info.result(0);
  const auto &attrs = info.params<schema::Kernel::k_matmul>();
  HalfGeometry g;
  g.transposeA = attrs.transpose_a;
  g.transposeB = attrs.transpose_b;
  size_t rank = r.shape.size();
  g.m = r.shape[rank - 2];
  g.n = r.shape[rank - 1];
  int64_t aRows = a.shape[rank - 2], aCols = a.shape[rank - 1];
  int64_t bRows = b.shape[rank - 2], bCols = b.shape[rank - 1];
  g.k = g.transposeA ? aRows : aCols;
  std::vector<int64_t> rBatch(r.shape.begin(), r.shape.end() - 2);
  std::vector<int64_t> aOff =
      batchOffsets(std::vector<int64_t>(a.shape.begin(), a.shape.end() - 2),
                   rBatch, aRows * aCols);
  std::vector<int64_t> bOff =
      batchOffsets(std::vector<int64_t>(b.shape.begin(), b.shape.end() - 2),
                   rBatch, bRows * bCols);
  int64_t batches = static_cast<int64_t>(aOff.size());
  bool sharedB = true, stackedA = !g.transposeA;
  for (int64_t i = 0; i < batches; ++i) {
    sharedB &= bOff[i] == 0;
    stackedA &= aOff[i] == i * aRows * aCols;
  }
  int64_t sa = 0, sb = 0;
  if (batches > 1 && sharedB && stackedA) {
    g.m *= batches; // one B for all: the batches are rows of one product
  } else if (equallySpaced(aOff, &sa) && equallySpaced(bOff, &sb)) {
    g.batch = batches;
    g.strideA = sa;
    g.strideB = sb;
  } else {
    g.aOffsets = aOff;
    g.bOffsets = bOff;
  }
  return g;
}

/// A [rows, cols] matrix operand (stored transposed when \p transposed),
/// with a leading batch dim when the geometry has one.
dnnl::memory::desc matrixDesc(const HalfGeometry &g, int64_t rows, int64_t cols,
                              bool transposed, int64_t stride,
                              dnnl::memory::data_type type) {
  dims shape{rows, cols};
  dims strides = transposed ? dims{1, rows} : dims{cols, 1};
  if (g.batch > 1) {
    shape.insert(shape.begin(), stride ? g.batch : 1);
    strides.insert(strides.begin(), stride ? stride : rows * cols);
  }
  return dnnl::memory::desc(shape, type, strides);
}

struct HalfMatmul {
  HalfGeometry g;
  dnnl::matmul primitive;
  dnnl::memory::desc a, b, c, scratch;
  size_t elem = 2;

  Status run(const uint8_t *a, const uint8_t *b, uint8_t *c) const {
    int64_t calls = static_cast<int64_t>(g.aOffsets.size());
    size_t cBytes = static_cast<size_t>(g.batch * g.m * g.n) * elem;
    if (g.m == 0 || g.n == 0)
      return Status::ok();
    if (g.k == 0) {
      std::memset(c, 0, cBytes * calls); // +0.0 in bf16 and f16 alike
      return Status::ok();
    }
    // User-managed scratch: concurrent ranks (threads) may run one plan's
    // kernels at once, and the library's own scratch is shared.
    std::unique_ptr<uint8_t[]> scratch(new uint8_t[scratchBytes()]);
    try {
      dnnl::engine &engine = cpuEngine();
      dnnl::stream stream(engine);
      dnnl::memory sm(this->scratch, engine, scratch.get());
      for (int64_t i = 0; i < calls; ++i) {
        dnnl::memory am(this->a, engine,
                        const_cast<uint8_t *>(a) + g.aOffsets[i] * elem);
        dnnl::memory bm(this->b, engine,
                        const_cast<uint8_t *>(b) + g.bOffsets[i] * elem);
        dnnl::memory cm(this->c, engine, c + i * cBytes);
        primitive.execute(stream, {{DNNL_ARG_SRC, am},
                                   {DNNL_ARG_WEIGHTS, bm},
                                   {DNNL_ARG_DST, cm},
                                   {DNNL_ARG_SCRATCHPAD, sm}});
      }
      stream.wait();
    } catch (const dnnl::error &e) {
      return Status::error(std::string("oneDNN matmul: ") + e.what());
    }
    return Status::ok();
  }
  size_t scratchBytes() const { return scratch.get_size(); }
};

} // namespace

Status prepareHalfMatmul(const KernelInfo &info, KernelFn *fn) {
  auto mm = std::make_shared<HalfMatmul>();
  mm->g = geometryOf(info);
  const HalfGeometry &g = mm->g;
  if (g.m == 0 || g.n == 0 || g.k == 0) {
    *fn = [mm](const KernelArgs &args) {
      return mm->run(static_cast<const uint8_t *>(args.operands[0]),
                     static_cast<const uint8_t *>(args.operands[1]),
                     static_cast<uint8_t *>(args.results[0]));
    };
    return Status::ok();
  }
  auto type = info.operand(0).dtype == DType::BF16
                  ? dnnl::memory::data_type::bf16
                  : dnnl::memory::data_type::f16;
  try {
    mm->a = matrixDesc(g, g.m, g.k, g.transposeA, g.strideA, type);
    mm->b = matrixDesc(g, g.k, g.n, g.transposeB, g.strideB, type);
    mm->c = matrixDesc(g, g.m, g.n, false, g.m * g.n, type);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(mm->a, mm->b, mm->c),
                                    attr, cpuEngine());
    mm->scratch = pd.scratchpad_desc();
    mm->primitive = dnnl::matmul(pd);
  } catch (const dnnl::error &) {
    // No implementation for this dtype on this CPU: sgemm on f32 copies.
    return prepareWidened(info, &prepare_matmul, fn);
  }
  *fn = [mm](const KernelArgs &args) {
    return mm->run(static_cast<const uint8_t *>(args.operands[0]),
                   static_cast<const uint8_t *>(args.operands[1]),
                   static_cast<uint8_t *>(args.results[0]));
  };
  return Status::ok();
}

} // namespace cleave::rt

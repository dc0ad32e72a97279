//===- bf16_gemm.h - Small bf16 products for kernels' tiles -----*- C++ -*-===//
//
// The products inside a fused kernel's tiles under mixed precision
// (attention's q k^T, p v and their adjoints): operands rounded to bf16, the
// products accumulated in f32, as PyTorch's autocast bmm and FlashAttention
// compute them. oneDNN's matmul primitive runs the step's large products;
// a tile of 64 x 128 x 64 is over before a primitive call's fixed cost is
// (docs/design.md), so these run on AVX512_BF16's dot-product instruction
// directly, and on widened copies through sgemm where the CPU lacks it.
//
// The dot product reads pairs of consecutive k elements in one 32-bit word
// (element 2p in the low half). Operands are packed into such pairs once:
// a kernel packs what it reuses across tiles (a head's keys) once per head.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_CPU_BF16_GEMM_H
#define CLEAVE_RUNTIME_CPU_BF16_GEMM_H

#include <cstdint>
#include <vector>

namespace cleave::rt {

/// A matrix to pack: f32 values (rounded to bf16, nearest even, as they
/// are packed) or bf16 bits, row-major with leading dimension \p ld.
struct Bf16Source {
  const void *data;
  bool bf16;
  int64_t ld;
};

/// op(A) [m, k] in pairs: pair p of row i at data[i * rowStride + p *
/// pairStride].
struct PackedA {
  const uint32_t *data;
  int64_t rowStride, pairStride;
};

/// op(B) [k, n] in pairs: pair p of column j at data[p * ld + j]; columns
/// are readable (zero past the matrix) up to a multiple of 32.
struct PackedB {
  const uint32_t *data;
  int64_t ld;
};

/// Packs op(A) (A^T when \p trans) into \p buf; a bf16 A read as it is
/// (no copy) where its rows already are pairs (k even, not transposed).
PackedA packA(bool trans, int64_t m, int64_t k, Bf16Source a,
              std::vector<uint32_t> &buf);
/// Packs op(B) (B^T when \p trans) into \p buf.
PackedB packB(bool trans, int64_t k, int64_t n, Bf16Source b,
              std::vector<uint32_t> &buf);

/// C = alpha op(A) op(B) + beta C on one thread, row-major C, the bf16
/// products summed in f32 (C is not read when beta is 0). \p k is the
/// product's depth: neither operand is read past it (a packed whole-head
/// operand read in a tile of odd depth has a next element there).
void bf16Gemm(int64_t m, int64_t n, int64_t k, float alpha, PackedA a,
              PackedB b, float beta, float *c, int64_t ldc);

/// Whether this CPU has AVX512_BF16 (else bf16Gemm widens to f32 and calls
/// sgemm: the same products, summed in another order).
bool hasBf16DotProduct();

/// Makes bf16Gemm take the widened path on any CPU (tests compare the two).
void widenBf16GemmForTesting(bool widen);

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_CPU_BF16_GEMM_H

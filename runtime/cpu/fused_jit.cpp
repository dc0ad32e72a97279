//===- fused_jit.cpp - Fused chains compiled to AVX-512 at load -----------===//
//
// Xbyak (Debian's libxbyak-dev, header-only) assembles the loop. Register
// use: zmm0-19 hold the chain's values (allocated in program order, freed
// after their last read), zmm20-22 a binary or select op's operands loaded
// from memory, zmm23-31 an op's temporaries; k1-k3 masks. Arguments (SysV):
// rdi the register pointers, rsi the scalars, rdx the constant pool, rcx
// the bytes to run; rax walks them, r8 holds a register's pointer.
//
//===----------------------------------------------------------------------===//

#include "cpu/fused_jit.h"

#include "core/convert.h"
#include "core/vector_math.h"

#include <cstdlib>
#include <map>

#if defined(CLEAVE_HAVE_XBYAK) && defined(__x86_64__)
#include <xbyak/xbyak.h>
#include <xbyak/xbyak_util.h>
#endif

namespace cleave::rt {

std::vector<OperandMode> operandModes(const FusedProgram &f) {
  size_t numInputs = f.inputs.size();
  auto scalar = [&](uint8_t r) {
    return r < numInputs && f.inputs[r] == FusedInput::Scalar &&
           !f.inputIsBool[r];
  };
  std::vector<OperandMode> modes;
  for (const FusedOp &op : f.ops) {
    bool binary = fusedArity(op.code) == 2;
    modes.push_back(
        binary && scalar(op.b) && !scalar(op.a)   ? OperandMode::ScalarB
        : binary && scalar(op.a) && !scalar(op.b) ? OperandMode::ScalarA
                                                  : OperandMode::Vectors);
  }
  return modes;
}

#if defined(CLEAVE_HAVE_XBYAK) && defined(__x86_64__)

namespace {

using Xbyak::Address;
using Xbyak::Zmm;

constexpr int kValueRegs = 20;
// vcmpps predicates (their signalling forms give the same masks).
constexpr uint8_t kEq = 0x00, kLt = 0x01, kLe = 0x02, kUnord = 0x03,
                  kNeq = 0x04, kNotLt = 0x05, kGe = 0x0d, kGt = 0x0e;
// vpcmpud: unsigned greater than.
constexpr uint8_t kUnsignedGt = 0x06;

class Generator : public Xbyak::CodeGenerator {
public:
  /// Writable while assembled; compileFusedJit then makes it read and
  /// execute only, never both writable and executable.
  explicit Generator(size_t bytes)
      : Xbyak::CodeGenerator(bytes, Xbyak::DontSetProtectRWE) {}

  /// Emits the chain; false where an op is not compiled or values do not
  /// fit the registers.
  bool emit(const FusedProgram &f, const std::vector<OperandMode> &modes);

  std::vector<uint32_t> pool;

private:
  const Zmm a_{20}, b_{21}, c_{22};
  std::map<uint32_t, int> poolIndex_;

  int slot(uint32_t bits) {
    auto [it, fresh] = poolIndex_.emplace(bits, static_cast<int>(pool.size()));
    if (fresh)
      pool.push_back(bits);
    return it->second * 4;
  }
  /// A constant's bits as an operand broadcast to every lane ({1to16}).
  Address pattern(uint32_t bits) { return ptr_b[rdx + slot(bits)]; }
  Address num(float v) { return pattern(floatBits(v)); }
  /// A constant for vbroadcastss, which takes a plain 32-bit operand.
  Address scalar(float v) { return dword[rdx + slot(floatBits(v))]; }
  static Zmm tmp(int i) { return Zmm(23 + i); }

  void load(const Zmm &z, int reg, bool scalar) {
    if (scalar) {
      vbroadcastss(z, dword[rsi + reg * 4]);
      return;
    }
    mov(r8, ptr[rdi + reg * 8]);
    vmovups(z, ptr[r8 + rax]);
  }
  /// r = c[n-1]; r = r * s + c[k] down to k = 0, each step two roundings.
  template <int N>
  void horner(const Zmm &r, const float (&c)[N], const Zmm &s) {
    vbroadcastss(r, scalar(c[N - 1]));
    for (int k = N - 2; k >= 0; --k) {
      vmulps(r, r, s);
      vaddps(r, r, num(c[k]));
    }
  }
  void exp(const Zmm &y, const Zmm &x, int t0);
  void erf(const Zmm &d, const Zmm &x);
  void tanh(const Zmm &d, const Zmm &x);
  void sigmoid(const Zmm &d, const Zmm &x);
  void roundBf16(const Zmm &d, const Zmm &x);
  void copySign(const Zmm &d, const Zmm &x, const Zmm &scratch) {
    vpandd(d, d, pattern(0x7fffffff));
    vpandd(scratch, x, pattern(0x80000000));
    vpord(d, d, scratch);
  }
  void maxMin(const Zmm &d, const Zmm &a, const Zmm &b, bool max);
  void compare(const Zmm &d, const Zmm &a, const Zmm &b, uint8_t pred) {
    vcmpps(k1, a, b, pred);
    vpxord(d, d, d);
    vbroadcastss(d | k1, scalar(1.0f));
  }
  bool emitOp(FusedCode code, const Zmm &d, const Zmm &a, const Zmm &b,
              const Zmm &c);
};

/// vecExp (core/vector_math.h) of x into y; temporaries t0..t0+3 (y and x
/// may be any others).
void Generator::exp(const Zmm &y, const Zmm &x, int t0) {
  Zmm c = tmp(t0), n = tmp(t0 + 1), r = tmp(t0 + 2), p = tmp(t0 + 3);
  vmovaps(c, x);
  vcmpps(k1, x, num(vmath::kExpMax), kGt);
  vbroadcastss(c | k1, scalar(vmath::kExpMax));
  vcmpps(k1, c, num(vmath::kExpMin), kLt);
  vbroadcastss(c | k1, scalar(vmath::kExpMin));
  vcmpps(k2, x, x, kUnord);
  vpxord(c | k2, c, c);
  vmulps(n, c, num(vmath::kLog2e));
  vaddps(n, n, num(vmath::kRoundToInt));
  vsubps(n, n, num(vmath::kRoundToInt));
  vmulps(r, n, num(vmath::kLn2High));
  vsubps(r, c, r);
  vmulps(c, n, num(vmath::kLn2Low));
  vsubps(r, r, c);
  horner(p, vmath::kExpTaylor, r);
  vmulps(c, r, r);
  vmulps(c, c, p);
  vaddps(c, r, c);
  vbroadcastss(p, scalar(1.0f));
  vaddps(p, p, c);
  // 2^half and 2^(k - half) from their exponent bits.
  vcvttps2dq(n, n);
  vpsrad(c, n, 1);
  vpsubd(n, n, c);
  vpaddd(c, c, pattern(127));
  vpslld(c, c, 23);
  vpaddd(n, n, pattern(127));
  vpslld(n, n, 23);
  vmulps(p, p, c);
  vmulps(p, p, n);
  vmovaps(p | k2, x); // y may be x
  vmovaps(y, p);
}

/// vecErf: x (1 + P(x^2)) below 0.9, 1 - e^(-x^2) R(x) (Clenshaw) above.
/// The second branch (most of the work) is skipped where no lane needs it.
void Generator::erf(const Zmm &d, const Zmm &x) {
  Zmm a = tmp(0), small = tmp(1), s = tmp(2), b = tmp(3), u = tmp(4),
      twoU = tmp(5), b1 = tmp(6), b2 = tmp(7), t = tmp(8);
  vpandd(a, x, pattern(0x7fffffff));
  vmulps(s, a, a);
  horner(small, vmath::kErfSmall, s);
  vmulps(small, a, small);
  vaddps(small, a, small);
  Xbyak::Label done;
  // The lanes that take the large branch.
  vcmpps(k3, a, num(vmath::kErfSplit), kNotLt);
  kortestw(k3, k3);
  jz(done, T_NEAR);
  vmovaps(b, a);
  vcmpps(k1, a, num(vmath::kErfMax), kGt);
  vbroadcastss(b | k1, scalar(vmath::kErfMax));
  vsubps(u, b, num(vmath::kErfcCenter));
  vmulps(u, u, num(vmath::kErfcScale));
  vaddps(twoU, u, u); // 2.0f * u, exactly
  vpxord(b1, b1, b1);
  vpxord(b2, b2, b2);
  for (int k = 12; k > 0; --k) {
    vmulps(t, twoU, b1);
    vsubps(t, t, b2);
    vaddps(t, t, num(vmath::kErfcScaled[k]));
    std::swap(b2, b1); // b2 = b1, the old b2's register is free
    std::swap(b1, t);  // b1 = t
  }
  // scaled = u b1 - b2 + c0, into u; e^(-(b b)) into s.
  vmulps(u, u, b1);
  vsubps(u, u, b2);
  vaddps(u, u, num(vmath::kErfcScaled[0]));
  vmulps(s, b, b);
  vpxord(s, s, pattern(0x80000000));
  exp(s, s, 5);
  vmulps(s, s, u);
  vbroadcastss(b, scalar(1.0f));
  vsubps(b, b, s);
  vmovaps(small | k3, b);
  L(done);
  vmovaps(d, small);
  copySign(d, x, a);
}

/// vecTanh: x (1 + P(x^2)) below 0.625, else 1 - 2 / (e^(2|x|) + 1); the
/// second skipped where no lane needs it.
void Generator::tanh(const Zmm &d, const Zmm &x) {
  Zmm a = tmp(0), small = tmp(1), s = tmp(2), e = tmp(3), q = tmp(4);
  vpandd(a, x, pattern(0x7fffffff));
  vmulps(s, a, a);
  horner(small, vmath::kTanhSmall, s);
  vmulps(small, a, small);
  vaddps(small, a, small);
  Xbyak::Label done;
  vcmpps(k3, a, num(vmath::kTanhSplit), kNotLt);
  kortestw(k3, k3);
  jz(done, T_NEAR);
  vaddps(s, a, a); // 2.0f * a, exactly
  exp(e, s, 5);
  vaddps(e, e, num(1.0f));
  vbroadcastss(q, scalar(2.0f));
  vdivps(q, q, e);
  vbroadcastss(e, scalar(1.0f));
  vsubps(e, e, q);
  vmovaps(small | k3, e);
  L(done);
  vmovaps(d, small);
  copySign(d, x, a);
}

/// e = e^(-|x|); x >= 0 ? 1 / (1 + e) : e / (1 + e).
void Generator::sigmoid(const Zmm &d, const Zmm &x) {
  Zmm e = tmp(0), den = tmp(1), pos = tmp(2);
  vpandd(e, x, pattern(0x7fffffff));
  vpxord(e, e, pattern(0x80000000));
  exp(e, e, 5);
  vbroadcastss(den, scalar(1.0f));
  vaddps(den, den, e);
  vbroadcastss(pos, scalar(1.0f));
  vdivps(pos, pos, den);
  vdivps(d, e, den);
  vcmpps(k1, x, num(0.0f), kGe);
  vmovaps(d | k1, pos);
}

/// bf16ToFloat(floatToBf16(x)): to nearest even; a NaN quieted.
void Generator::roundBf16(const Zmm &d, const Zmm &x) {
  Zmm t = tmp(0), q = tmp(1);
  vpsrld(t, x, 16);
  vpandd(t, t, pattern(1));
  vpaddd(t, t, pattern(0x7fff));
  vpaddd(t, t, x);
  vpandd(d, t, pattern(0xffff0000));
  vpandd(q, x, pattern(0xffff0000));
  vpord(q, q, pattern(0x00400000));
  vpandd(t, x, pattern(0x7fffffff));
  vpcmpud(k1, t, pattern(0x7f800000), kUnsignedGt);
  vmovaps(d | k1, q);
}

/// NaN first (a's, then b's), else the larger (smaller), a on a tie.
void Generator::maxMin(const Zmm &d, const Zmm &a, const Zmm &b, bool max) {
  vmovaps(d, a);
  if (max)
    vcmpps(k1, a, b, kLt);
  else
    vcmpps(k1, b, a, kLt);
  vmovaps(d | k1, b);
  vcmpps(k1, b, b, kUnord);
  vmovaps(d | k1, b);
  vcmpps(k1, a, a, kUnord);
  vmovaps(d | k1, a);
}

bool Generator::emitOp(FusedCode code, const Zmm &d, const Zmm &a, const Zmm &b,
                       const Zmm &c) {
  switch (code) {
  case FusedCode::Add:
    vaddps(d, a, b);
    return true;
  case FusedCode::Sub:
    vsubps(d, a, b);
    return true;
  case FusedCode::Mul:
    vmulps(d, a, b);
    return true;
  case FusedCode::Div:
    vdivps(d, a, b);
    return true;
  case FusedCode::Max:
  case FusedCode::Min:
    maxMin(d, a, b, code == FusedCode::Max);
    return true;
  case FusedCode::Eq:
    compare(d, a, b, kEq);
    return true;
  case FusedCode::Ne:
    compare(d, a, b, kNeq);
    return true;
  case FusedCode::Lt:
    compare(d, a, b, kLt);
    return true;
  case FusedCode::Le:
    compare(d, a, b, kLe);
    return true;
  case FusedCode::Gt:
    compare(d, a, b, kGt);
    return true;
  case FusedCode::Ge:
    compare(d, a, b, kGe);
    return true;
  case FusedCode::Neg:
    vpxord(d, a, pattern(0x80000000));
    return true;
  case FusedCode::Abs:
    vpandd(d, a, pattern(0x7fffffff));
    return true;
  case FusedCode::Exp:
    exp(d, a, 0);
    return true;
  case FusedCode::Sqrt:
    vsqrtps(d, a);
    return true;
  case FusedCode::Rsqrt:
    vsqrtps(tmp(0), a);
    vbroadcastss(d, scalar(1.0f));
    vdivps(d, d, tmp(0));
    return true;
  case FusedCode::Reciprocal:
    vbroadcastss(d, scalar(1.0f));
    vdivps(d, d, a);
    return true;
  case FusedCode::Tanh:
    tanh(d, a);
    return true;
  case FusedCode::Erf:
    erf(d, a);
    return true;
  case FusedCode::Sigmoid:
    sigmoid(d, a);
    return true;
  case FusedCode::Relu:
    vmovaps(d, a);
    vcmpps(k1, a, num(0.0f), kLt);
    vpxord(d | k1, d, d);
    return true;
  case FusedCode::Identity:
    vmovaps(d, a);
    return true;
  case FusedCode::RoundBf16:
    roundBf16(d, a);
    return true;
  case FusedCode::Select: // a ? b : c (applySelect's cond, a, b)
    vcmpps(k1, a, num(0.0f), kNeq);
    vmovaps(d, c);
    vmovaps(d | k1, b);
    return true;
  case FusedCode::Pow:
  case FusedCode::Log:
  case FusedCode::RoundF16:
    return false;
  }
  return false;
}

bool Generator::emit(const FusedProgram &f,
                     const std::vector<OperandMode> &modes) {
  int numInputs = static_cast<int>(f.inputs.size());
  // The op after which each register is last read; kept ones never die.
  constexpr int kKept = 1 << 30;
  std::vector<int> lastRead(f.numRegisters, -1);
  for (size_t o = 0; o < f.ops.size(); ++o) {
    const FusedOp &op = f.ops[o];
    int arity = fusedArity(op.code);
    for (int k = 0; k < arity; ++k)
      lastRead[k == 0 ? op.a : k == 1 ? op.b : op.c] = static_cast<int>(o);
  }
  std::vector<uint8_t> kept(f.outputRegisters.begin(), f.outputRegisters.end());
  for (const FusedReduction &red : f.reductions)
    kept.push_back(red.reg);
  for (uint8_t k : kept)
    lastRead[k] = kKept;

  Xbyak::Label loop, done;
  xor_(rax, rax);
  L(loop);
  cmp(rax, rcx);
  jge(done, T_NEAR);
  std::vector<int> zmmOf(f.numRegisters, -1);
  std::vector<int> free;
  for (int z = kValueRegs - 1; z >= 0; --z)
    free.push_back(z);
  for (size_t o = 0; o < f.ops.size(); ++o) {
    const FusedOp &op = f.ops[o];
    if (op.dst < numInputs || free.empty())
      return false;
    int arity = fusedArity(op.code);
    const uint8_t regs[3] = {op.a, op.b, op.c};
    const Zmm loaded[3] = {a_, b_, c_};
    Zmm operand[3] = {a_, b_, c_};
    for (int k = 0; k < arity; ++k) {
      int reg = regs[k];
      if (reg >= numInputs) {
        if (zmmOf[reg] < 0)
          return false; // read before written: not a chain this compiles
        operand[k] = Zmm(zmmOf[reg]);
        continue;
      }
      bool scalar =
          arity == 2 && ((k == 0 && modes[o] == OperandMode::ScalarA) ||
                         (k == 1 && modes[o] == OperandMode::ScalarB));
      load(loaded[k], reg, scalar);
    }
    int z = free.back();
    free.pop_back();
    zmmOf[op.dst] = z;
    if (!emitOp(op.code, Zmm(z), operand[0], operand[1], operand[2]))
      return false;
    for (int k = 0; k < arity; ++k)
      if (regs[k] >= numInputs && lastRead[regs[k]] == static_cast<int>(o) &&
          zmmOf[regs[k]] >= 0) {
        free.push_back(zmmOf[regs[k]]);
        zmmOf[regs[k]] = -1;
      }
    if (lastRead[op.dst] < 0) { // never read: computed, as the interpreter does
      free.push_back(z);
      zmmOf[op.dst] = -1;
    }
  }
  for (uint8_t k : kept) {
    if (k < numInputs)
      continue; // the outputs read the input where it is
    if (zmmOf[k] < 0)
      return false;
    mov(r8, ptr[rdi + k * 8]);
    vmovups(ptr[r8 + rax], Zmm(zmmOf[k]));
  }
  add(rax, 64);
  jmp(loop, T_NEAR);
  L(done);
  vzeroupper();
  ret();
  return true;
}

// UBSan's function check (-fsanitize=undefined in the sanitized build)
// reads a type signature stored before an indirectly called function's
// entry; assembled code has none, and the bytes before it may be unmapped.
#if defined(__clang__)
#define CLEAVE_CALLS_ASSEMBLED_CODE __attribute__((no_sanitize("function")))
#else
#define CLEAVE_CALLS_ASSEMBLED_CODE
#endif

class CompiledChain : public FusedJit {
public:
  using Fn = void (*)(const float *const *, const float *, const uint32_t *,
                      int64_t);
  explicit CompiledChain(std::unique_ptr<Generator> gen)
      : gen_(std::move(gen)), pool_(gen_->pool), fn_(gen_->getCode<Fn>()) {}
  CLEAVE_CALLS_ASSEMBLED_CODE void
  run(const float *const *reg, const float *scalars, int64_t n) const override {
    fn_(reg, scalars, pool_.data(), n * static_cast<int64_t>(sizeof(float)));
  }

private:
  std::unique_ptr<Generator> gen_;
  std::vector<uint32_t> pool_;
  Fn fn_;
};

bool machineHasAvx512() {
  static const bool has = [] {
    Xbyak::util::Cpu cpu;
    return cpu.has(Xbyak::util::Cpu::tAVX512F);
  }();
  return has;
}

} // namespace

std::unique_ptr<FusedJit> compileFusedJit(const FusedProgram &program) {
  if (std::getenv("CLEAVE_NO_JIT") || !machineHasAvx512() ||
      program.ops.empty())
    return nullptr;
  std::vector<OperandMode> modes = operandModes(program);
  // Most chains take a few hundred bytes; one of 48 erfs about 40 KiB.
  for (size_t bytes : {size_t(16) << 10, size_t(64) << 10}) {
    try {
      auto gen = std::make_unique<Generator>(bytes);
      if (!gen->emit(program, modes))
        return nullptr;
      gen->setProtectModeRE();
      return std::make_unique<CompiledChain>(std::move(gen));
    } catch (const std::exception &) {
      // Xbyak's errors: code past the buffer (try the larger one), or
      // memory that cannot be made executable (interpret).
    }
  }
  return nullptr;
}

#else

std::unique_ptr<FusedJit> compileFusedJit(const FusedProgram &) {
  return nullptr;
}

#endif

} // namespace cleave::rt

//===- TorchAtenCall.h - How a handler reads its aten op --------*- C++ -*-===//
//
// Private to libcleave_torchscript.so: the AtenCall every handler in
// TorchOps.cpp and TorchIndexing.cpp reads its op through, and ATEN_LOCALS.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_LIB_IMPORT_TORCH_TORCHATENCALL_H
#define CLEAVE_LIB_IMPORT_TORCH_TORCHATENCALL_H

#include "TorchTranslator.h"

namespace cleave_torch {

/// What every handler reads an aten op through: its kind (an
/// in-place activation's functional one), operands, the default result rank
/// and dtype (the widest tensor operand's, the first one's), and the helpers
/// below. Each handler defines the same names with ATEN_LOCALS, so they
/// read alike.
struct Translator::AtenCall {
  Translator &t;
  Node *n;
  std::string kind;
  at::ArrayRef<torch::jit::Value *> ins;
  int64_t widest = -1;
  std::optional<at::ScalarType> firstType;

  AtenCall(Translator &t, Node *n)
      : t(t), n(n), kind(n->kind().toQualString()), ins(n->inputs()) {
    for (const TValue *v : ins) {
      auto it = t.items.find(v);
      if (it == t.items.end() || it->second.kind != Item::Tensor)
        continue;
      widest = std::max(widest, t.rankOf(v));
      if (!firstType)
        firstType = t.dtypeOr(v, at::kFloat);
    }
  }
  std::string T(size_t i) { return t.tensor(ins[i]); }
  void outRD(std::string name, int64_t rank,
             std::optional<at::ScalarType> dtype, size_t i = 0) {
    t.setTensor(n->outputs()[i], std::move(name), rank, dtype);
  }
  void out(std::string name, size_t i = 0) {
    outRD(std::move(name), widest, firstType, i);
  }
  void unary(const char *op) { out(t.emit(op, {T(0)})); }
  /// PyTorch's promotion: numbers and 0-d tensors take the dtype of a
  /// dimensioned operand; otherwise integers meet floats as floats.
  at::ScalarType promoted(const TValue *a, const TValue *b) {
    auto kindOf = [&](const TValue *v) {
      return !t.isTensor(v) ? 0 : t.rankOf(v) == 0 ? 1 : 2;
    };
    const TValue *lead = kindOf(a) >= kindOf(b) ? a : b;
    const TValue *other = lead == a ? b : a;
    at::ScalarType r = t.dtypeOr(lead, at::kFloat);
    bool leadFloat = r == at::kFloat || r == at::kDouble;
    bool otherFloat = t.isTensor(other)
                          ? (t.dtypeOr(other, at::kFloat) == at::kFloat ||
                             t.dtypeOr(other, at::kFloat) == at::kDouble)
                          : t.item(other).kind == Item::Scalar &&
                                t.item(other).scalar.isDouble();
    if (!leadFloat && otherFloat)
      r = at::kFloat;
    return r;
  }
  /// \p v (an operand) as a tensor of \p type.
  std::string as(const TValue *v, at::ScalarType type) {
    if (!t.isTensor(v))
      return t.tensor(v, type);
    return t.dtypeOr(v, at::kFloat) == type
               ? T(std::find(ins.begin(), ins.end(), v) - ins.begin())
               : t.cast(t.item(v).name, type);
  }
  /// An elementwise binary op on tensors and Python scalars.
  std::string binary(const char *op, const TValue *a, const TValue *b) {
    at::ScalarType type = promoted(a, b);
    return t.emit(op, {as(a, type), as(b, type)});
  }
  void binaryOut(const char *op) {
    at::ScalarType type = promoted(ins[0], ins[1]);
    outRD(t.emit(op, {as(ins[0], type), as(ins[1], type)}), widest, type);
  }
};

// The names every handler reads the op through (see AtenCall).
#define ATEN_LOCALS(c)                                                         \
  [[maybe_unused]] const std::string &kind = (c).kind;                         \
  [[maybe_unused]] const auto &ins = (c).ins;                                  \
  [[maybe_unused]] Node *n = (c).n;                                            \
  [[maybe_unused]] int64_t widest = (c).widest;                                \
  [[maybe_unused]] std::optional<at::ScalarType> firstType = (c).firstType;    \
  [[maybe_unused]] auto T = [&](size_t i) { return (c).T(i); };                \
  [[maybe_unused]] auto out = [&](std::string s, size_t i = 0) {               \
    (c).out(std::move(s), i);                                                  \
  };                                                                           \
  [[maybe_unused]] auto outRD =                                                \
      [&](std::string s, int64_t r, std::optional<at::ScalarType> d,           \
          size_t i = 0) { (c).outRD(std::move(s), r, d, i); };                 \
  [[maybe_unused]] auto unary = [&](const char *op) { (c).unary(op); };        \
  [[maybe_unused]] auto promoted = [&](const TValue *a, const TValue *b) {     \
    return (c).promoted(a, b);                                                 \
  };                                                                           \
  [[maybe_unused]] auto as = [&](const TValue *v, at::ScalarType d) {          \
    return (c).as(v, d);                                                       \
  };                                                                           \
  [[maybe_unused]] auto binary = [&](const char *op, const TValue *a,          \
                                     const TValue *b) {                        \
    return (c).binary(op, a, b);                                               \
  };                                                                           \
  [[maybe_unused]] auto binaryOut = [&](const char *op) { (c).binaryOut(op); }

} // namespace cleave_torch

#endif // CLEAVE_LIB_IMPORT_TORCH_TORCHATENCALL_H

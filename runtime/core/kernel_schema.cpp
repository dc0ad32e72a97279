//===- kernel_schema.cpp - The one validator of plan instructions ---------===//
//
// Every instruction of a plan passes here before a backend's prepare
// function sees it: the kernel must be one of kernels.def, its operands and
// results must have the arity and dtypes the schema gives, and its
// attributes must be the schema's, of the right type and count, decoded into
// the kernel's Params. Backends then read fields, never attribute names.
//
//===----------------------------------------------------------------------===//

#include "core/kernel_info.h"
#include "core/shape_rules.h"

#include <set>

namespace cleave::rt {

using namespace schema;

namespace {

/// The signatures, built from kernels.def once.
struct Tables {
  std::vector<KernelSignature> signatures;
  Tables() : signatures(kNumKernels) {
    KernelSignature *sig = nullptr;
#define CLEAVE_KERNEL_BEGIN(K)                                                 \
  sig = &signatures[static_cast<size_t>(Kernel::k_##K)];                       \
  sig->name = #K;
#define CLEAVE_OPERAND(K, NAME, PRESENCE, TIE, DTYPES)                         \
  sig->operands.push_back({#NAME, Presence::PRESENCE, Tie::TIE, DTYPES});
#define CLEAVE_RESULT(K, NAME, PRESENCE, TIE, DTYPES)                          \
  sig->results.push_back({#NAME, Presence::PRESENCE, Tie::TIE, DTYPES});
#define CLEAVE_ATTR(K, NAME, TYPE, COUNT, RULE, ...)                           \
  sig->attrs.push_back({#NAME, AttrType::TYPE, COUNT, AttrRule::RULE});
#include "plan/kernels.def"
  }
};

const Tables &tables() {
  static const Tables t;
  return t;
}

uint16_t maskOf(DType d) {
  switch (d) {
  case DType::F32:
    return kF32;
  case DType::I64:
    return kI64;
  case DType::I32:
    return kI32;
  case DType::Bool:
    return kBool;
  default:
    // The storage dtypes, in DType's order from F64.
    return static_cast<uint16_t>(
        kF64 << (static_cast<int>(d) - static_cast<int>(DType::F64)));
  }
}

/// "f32, i32 or i64"; "an i64 scalar".
std::string maskPhrase(uint16_t mask) {
  std::vector<const char *> names;
  for (auto [bit, name] : {std::pair{kF32, "f32"}, std::pair{kI32, "i32"},
                           std::pair{kI64, "i64"}, std::pair{kBool, "bool"}})
    if (mask & bit)
      names.push_back(name);
  if ((mask & kStorage) == kStorage)
    names.push_back("a storage dtype");
  else
    for (auto [bit, name] : {std::pair{kF16, "f16"}, std::pair{kBF16, "bf16"}})
      if (mask & bit)
        names.push_back(name);
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += (i == 0                  ? ""
            : i + 1 == names.size() ? " or "
                                    : ", ") +
           std::string(names[i]);
  return mask & kScalarOnly ? "an " + out + " scalar" : out;
}

/// The first Tied value of an instruction, which the others must match.
struct TiedValue {
  std::optional<TensorType> type;
  std::string name;
};

/// Checks \p values against \p rules; \p tied collects the Tied dtype.
Status checkValues(const std::vector<std::optional<TensorType>> &values,
                   const std::vector<ValueRule> &rules, const char *what,
                   TiedValue &tied) {
  size_t required = 0, max = rules.size();
  bool variadic = !rules.empty() && rules.back().presence == Presence::Variadic;
  for (const ValueRule &r : rules)
    required += r.presence != Presence::Optional;
  if (variadic)
    max = SIZE_MAX;
  if (values.size() < required || values.size() > max) {
    std::string expected = variadic ? "at least " + std::to_string(required)
                           : required == max ? std::to_string(required)
                                             : std::to_string(required) +
                                                   " to " + std::to_string(max);
    return Status::error("expects " + expected + " " + what + "s, got " +
                         std::to_string(values.size()));
  }
  for (size_t i = 0; i < values.size(); ++i) {
    const ValueRule &r = rules[std::min(i, rules.size() - 1)];
    if (!values[i]) {
      if (r.presence != Presence::Optional)
        return Status::error(std::string(what) + " " + std::to_string(i) +
                             " (" + r.name + ") is required but absent (-1)");
      continue;
    }
    DType d = values[i]->dtype;
    std::string name = std::string(what) + " " + std::to_string(i) + " (" +
                       r.name + ") " + values[i]->str();
    if (!(maskOf(d) & r.dtypes) ||
        ((r.dtypes & kScalarOnly) && values[i]->rank() != 0))
      return Status::error(name + " must be " + maskPhrase(r.dtypes));
    if (r.tie == Tie::Tied) {
      if (tied.type && tied.type->dtype != d)
        return Status::error(name + " must have the same dtype as " +
                             tied.name);
      if (!tied.type) {
        tied.type = values[i];
        tied.name = name;
      }
    }
  }
  return Status::ok();
}

/// Reads attributes into one kernel's Params, refusing what the schema
/// does not list.
class AttrReader {
public:
  AttrReader(const std::map<std::string, Attr> &attrs) : attrs(attrs) {}

  template <typename T>
  bool read(const char *name, AttrRule rule, int count, T &field) {
    auto it = attrs.find(name);
    if (it == attrs.end()) {
      if (rule == AttrRule::Required)
        return fail("missing attribute '" + std::string(name) + "'");
      return true; // Optional: nullopt; Default: the field's initialiser
    }
    seen.insert(name);
    return decode(name, it->second, count, field);
  }

  /// Ok unless a read failed or an attribute was not the schema's.
  Status finish() const {
    if (!error.empty())
      return Status::error(error);
    for (const auto &[name, attr] : attrs)
      if (!seen.count(name))
        return Status::error("unknown attribute '" + name + "'");
    return Status::ok();
  }

private:
  bool fail(std::string message) {
    if (error.empty())
      error = std::move(message);
    return false;
  }
  bool expect(const char *name, const Attr &a, size_t ints, size_t floats,
              const char *what) {
    if (a.ints.size() == ints && a.floats.size() == floats)
      return true;
    return fail("attribute '" + std::string(name) + "' needs " + what +
                ", got " + std::to_string(a.ints.size()) + " ints and " +
                std::to_string(a.floats.size()) + " floats");
  }
  bool decode(const char *name, const Attr &a, int, bool &out) {
    if (!expect(name, a, 1, 0, "one int (0 or 1)"))
      return false;
    if (a.ints[0] != 0 && a.ints[0] != 1)
      return fail("attribute '" + std::string(name) + "' must be 0 or 1, got " +
                  std::to_string(a.ints[0]));
    out = a.ints[0] == 1;
    return true;
  }
  bool decode(const char *name, const Attr &a, int, int64_t &out) {
    if (!expect(name, a, 1, 0, "one int"))
      return false;
    out = a.ints[0];
    return true;
  }
  bool decode(const char *name, const Attr &a, int, double &out) {
    if (!expect(name, a, 0, 1, "one float"))
      return false;
    out = a.floats[0];
    return true;
  }
  bool decode(const char *name, const Attr &a, int, ScalarValue &out) {
    if (a.ints.size() + a.floats.size() != 1)
      return expect(name, a, 1, 0, "one int or one float");
    out.isFloat = a.floats.size() == 1;
    if (out.isFloat)
      out.f = a.floats[0];
    else
      out.i = a.ints[0];
    return true;
  }
  bool decode(const char *name, const Attr &a, int count,
              std::vector<int64_t> &out) {
    if (!a.floats.empty() ||
        (count != kAnyCount && a.ints.size() != static_cast<size_t>(count)))
      return expect(name, a, count == kAnyCount ? a.ints.size() : count, 0,
                    count == kAnyCount
                        ? "ints"
                        : (std::to_string(count) + " ints").c_str());
    out = a.ints;
    return true;
  }
  template <typename T>
  bool decode(const char *name, const Attr &a, int count,
              std::optional<T> &out) {
    T value{};
    if (!decode(name, a, count, value))
      return false;
    out = std::move(value);
    return true;
  }

  const std::map<std::string, Attr> &attrs;
  std::set<std::string> seen;
  std::string error;
};

template <Kernel K>
Status decode(const std::map<std::string, Attr> &attrs, AnyParams *out);

#define CLEAVE_KERNEL_BEGIN(K)                                                 \
  template <>                                                                  \
  Status decode<Kernel::k_##K>(const std::map<std::string, Attr> &attrs,       \
                               AnyParams *out) {                               \
    Params<Kernel::k_##K> p;                                                   \
    AttrReader r(attrs);
#define CLEAVE_ATTR(K, NAME, TYPE, COUNT, RULE, ...)                           \
  r.read(#NAME, AttrRule::RULE, COUNT, p.NAME);
#define CLEAVE_KERNEL_END(K)                                                   \
  if (Status s = r.finish(); !s)                                               \
    return s;                                                                  \
  *out = std::move(p);                                                         \
  return Status::ok();                                                         \
  }
#include "plan/kernels.def"

using DecodeFn = Status (*)(const std::map<std::string, Attr> &, AnyParams *);
const DecodeFn kDecoders[] = {
#define CLEAVE_KERNEL_BEGIN(K) &decode<Kernel::k_##K>,
#include "plan/kernels.def"
};

} // namespace

const KernelSignature &signatureOf(Kernel kernel) {
  return tables().signatures[static_cast<size_t>(kernel)];
}

Status validateInstruction(const std::map<std::string, Attr> &attrs,
                           KernelInfo &info) {
  std::optional<Kernel> kernel = kernelNamed(info.kernel);
  if (!kernel)
    return Status::error("unknown kernel '" + info.kernel + "'");
  const KernelSignature &sig = signatureOf(*kernel);
  TiedValue tied;
  if (Status s = checkValues(info.operands, sig.operands, "operand", tied); !s)
    return s;
  if (Status s = checkValues(info.results, sig.results, "result", tied); !s)
    return s;
  info.kernelId = *kernel;
  if (Status s = decodeParams(*kernel, attrs, &info.decoded); !s)
    return s;
  return checkShapeRule(info);
}

Status decodeParams(Kernel kernel, const std::map<std::string, Attr> &attrs,
                    AnyParams *params) {
  return kDecoders[static_cast<size_t>(kernel)](attrs, params);
}

} // namespace cleave::rt

//===- kernel_schema_test.cpp - The plan's typed contract -----------------===//
//
// kernels.def's writer (the compiler's side) and decoder (the runtime's)
// agree for every kernel, and the validator refuses what the schema does
// not allow, before any backend sees it.
//
//===----------------------------------------------------------------------===//

#include "core/kernel_info.h"
#include "test_util.h"

#include "plan/plan_writer.h"

#include <gtest/gtest.h>

namespace cleave::rt {
namespace {

using schema::Kernel;

std::map<std::string, Attr> attrsOf(const plan::Instruction &inst) {
  std::map<std::string, Attr> out;
  for (const auto &[name, a] : inst.attrs())
    out[name] = Attr{{a.ints().begin(), a.ints().end()},
                     {a.floats().begin(), a.floats().end()}};
  return out;
}

/// Writes \p p, decodes it, writes the decoded Params again: both
/// instructions must be equal, attribute for attribute.
template <Kernel K> void roundTrip(const schema::Params<K> &p) {
  plan::Instruction first;
  schema::writeInstruction(p, first);
  EXPECT_EQ(first.kernel(), schema::kernelName(K));
  schema::AnyParams decoded;
  Status s = decodeParams(K, attrsOf(first), &decoded);
  ASSERT_TRUE(s.isOk()) << first.kernel() << ": " << s.message();
  plan::Instruction second;
  schema::writeInstruction(std::get<schema::Params<K>>(decoded), second);
  std::map<std::string, Attr> a = attrsOf(first), b = attrsOf(second);
  ASSERT_EQ(a.size(), b.size()) << first.kernel();
  for (const auto &[name, attr] : a) {
    EXPECT_EQ(attr.ints, b[name].ints) << first.kernel() << " " << name;
    EXPECT_EQ(attr.floats, b[name].floats) << first.kernel() << " " << name;
  }
}

TEST(KernelSchema, EveryKernelRoundTripsThroughWriterAndDecoder) {
  size_t kernels = 0;
#define CLEAVE_KERNEL_BEGIN(K)                                                 \
  roundTrip(schema::Params<Kernel::k_##K>());                                  \
  ++kernels;
#include "plan/kernels.def"
  EXPECT_EQ(kernels, schema::kNumKernels);
  // Set values survive too, optionals included.
  schema::Params<Kernel::k_gather> g;
  g.axis = 2;
  g.shard_axes = std::vector<int64_t>{0, 1};
  g.shard_size = 50257;
  roundTrip(g);
  schema::Params<Kernel::k_fill> f;
  f.value.isFloat = true;
  f.value.f = -0.25;
  roundTrip(f);
}

TEST(KernelSchema, NamesAndSignatures) {
  EXPECT_EQ(schema::kernelNamed("matmul"), Kernel::k_matmul);
  EXPECT_EQ(schema::kernelNamed("and"), Kernel::k_and);
  EXPECT_FALSE(schema::kernelNamed("fused_elementwise").has_value());
  const schema::KernelSignature &ln = signatureOf(Kernel::k_layer_norm);
  ASSERT_EQ(ln.operands.size(), 3u);
  EXPECT_EQ(ln.operands[1].presence, schema::Presence::Optional);
  EXPECT_EQ(ln.results.size(), 3u);
  EXPECT_EQ(ln.attrs.size(), 2u);
}

std::string decodeError(Kernel k, std::map<std::string, Attr> attrs) {
  schema::AnyParams out;
  Status s = decodeParams(k, attrs, &out);
  return s.isOk() ? "" : s.message();
}

TEST(KernelSchema, DecoderRefusesWhatTheSchemaDoesNotList) {
  EXPECT_EQ(decodeError(Kernel::k_matmul, {{"transpose_c", {{1}, {}}}}),
            "unknown attribute 'transpose_c'");
  EXPECT_NE(decodeError(Kernel::k_matmul, {{"transpose_a", {{2}, {}}}})
                .find("must be 0 or 1"),
            std::string::npos);
  EXPECT_NE(decodeError(Kernel::k_conv2d, {{"strides", {{1, 1, 1}, {}}}})
                .find("needs 2 ints"),
            std::string::npos);
  EXPECT_NE(decodeError(Kernel::k_layer_norm, {{"axis", {{1}, {}}}})
                .find("missing attribute 'epsilon'"),
            std::string::npos);
  EXPECT_NE(decodeError(Kernel::k_leaky_relu, {{"alpha", {{1}, {}}}})
                .find("needs one float"),
            std::string::npos);
  EXPECT_EQ(decodeError(Kernel::k_conv2d, {}), "");
}

TEST(KernelSchema, ValidatorChecksArityAndDtypesBeforeAnyBackend) {
  auto check = [](const std::string &kernel, std::vector<TensorType> operands,
                  std::vector<TensorType> results) {
    KernelInfo info;
    info.kernel = kernel;
    for (const TensorType &t : operands)
      info.operands.push_back(t);
    for (const TensorType &t : results)
      info.results.push_back(t);
    std::map<std::string, Attr> attrs;
    if (kernel == "concat")
      attrs["axis"] = Attr{{0}, {}};
    Status s = validateInstruction(attrs, info);
    return s.isOk() ? std::string() : s.message();
  };
  TensorType f32{DType::F32, {4}}, i64{DType::I64, {4}}, b{DType::Bool, {4}};
  EXPECT_EQ(check("add", {f32, f32}, {f32}), "");
  EXPECT_NE(check("add", {f32, i64}, {f32}).find("same dtype"),
            std::string::npos);
  EXPECT_NE(check("add", {f32}, {f32}).find("expects 2 operands"),
            std::string::npos);
  EXPECT_NE(check("exp", {i64}, {i64}).find("must be f32"), std::string::npos);
  EXPECT_EQ(check("cmp_lt", {i64, i64}, {b}), "");
  EXPECT_NE(check("cmp_lt", {i64, i64}, {i64}).find("must be bool"),
            std::string::npos);
  EXPECT_EQ(check("concat", {f32, f32, f32}, {TensorType{DType::F32, {12}}}),
            "");
  EXPECT_NE(check("concat", {}, {f32}).find("at least 1"), std::string::npos);
  EXPECT_NE(check("frobnicate", {}, {}).find("unknown kernel"),
            std::string::npos);
}

} // namespace
} // namespace cleave::rt

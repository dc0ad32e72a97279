//===- shape_rules_test.cpp - Every family's shape rule, backend-free -----===//
//
// Linked against the core layer alone (no CPU kernels, no BLAS): the shape
// rules refuse a bad instruction through the schema's validator, as the CUDA
// plugin runs them, with no CPU prepare function behind them. One bad shape
// (and one good one) per kernel family.
//
//===----------------------------------------------------------------------===//

#include "cleave/runtime/comm.h"
#include "core/kernel_info.h"

#include <gtest/gtest.h>

namespace cleave::rt {
namespace {

TensorType f32(std::vector<int64_t> shape) { return {DType::F32, shape}; }
TensorType i64(std::vector<int64_t> shape) { return {DType::I64, shape}; }

/// The validator's message for the instruction ("" when it passes).
std::string check(const std::string &kernel, std::vector<TensorType> operands,
                  std::vector<TensorType> results,
                  std::map<std::string, Attr> attrs = {},
                  Communicator *comm = nullptr) {
  KernelInfo info;
  info.kernel = kernel;
  info.comm = comm;
  for (TensorType &t : operands)
    info.operands.push_back(std::move(t));
  for (TensorType &t : results)
    info.results.push_back(std::move(t));
  Status s = validateInstruction(attrs, info);
  return s.isOk() ? std::string() : s.message();
}

Attr ints(std::vector<int64_t> v) { return Attr{std::move(v), {}}; }
Attr floats(std::vector<double> v) { return Attr{{}, std::move(v)}; }

#define EXPECT_REFUSED(MESSAGE, PART)                                          \
  EXPECT_NE((MESSAGE).find(PART), std::string::npos) << (MESSAGE)

TEST(ShapeRules, Elementwise) {
  EXPECT_EQ(check("add", {f32({2, 3}), f32({1, 3})}, {f32({2, 3})}), "");
  EXPECT_REFUSED(check("add", {f32({2, 3}), f32({4, 3})}, {f32({2, 3})}),
                 "operand 1 f32[4,3] does not broadcast");
  EXPECT_REFUSED(check("gelu", {f32({2, 3})}, {f32({3, 2})}),
                 "must have the same shape");
}

TEST(ShapeRules, CastAndFill) {
  EXPECT_REFUSED(check("cast", {f32({2})}, {i64({3})}),
                 "must have the same shape");
  EXPECT_REFUSED(check("fill", {}, {i64({2})}, {{"value", floats({1.5})}}),
                 "must be an integer");
  EXPECT_REFUSED(check("iota", {}, {i64({2})}, {{"dim", ints({1})}}),
                 "has no dim 1");
}

TEST(ShapeRules, ReductionsSoftmaxCrossEntropy) {
  EXPECT_EQ(
      check("reduce_sum", {f32({2, 3})}, {f32({2})}, {{"axes", ints({1})}}),
      "");
  EXPECT_REFUSED(
      check("reduce_sum", {f32({2, 3})}, {f32({2})}, {{"axes", ints({1, 0})}}),
      "sorted, unique");
  EXPECT_REFUSED(
      check("softmax", {f32({2, 3})}, {f32({2, 3})}, {{"axis", ints({2})}}),
      "out of range");
  EXPECT_REFUSED(check("cross_entropy",
                       {f32({4, 10}), i64({5, 1}), i64({1, 10}), f32({4, 1})},
                       {f32({4, 1}), f32({4, 1})}, {{"axis", ints({1})}}),
                 "labels i64[5,1] does not fit logits");
}

TEST(ShapeRules, NormsAttentionMatmul) {
  EXPECT_REFUSED(check("layer_norm", {f32({2, 8}), f32({4})}, {f32({2, 8})},
                       {{"axis", ints({1})}, {"epsilon", floats({1e-5})}}),
                 "scale f32[4] must be f32 of x.shape[axis:]");
  EXPECT_REFUSED(
      check("attention", {f32({2, 4, 8}), f32({2, 4, 8}), f32({2, 4, 8})},
            {f32({2, 4, 8}), f32({2, 4})}, {{"scale", floats({0.5})}}),
      "4-D");
  EXPECT_EQ(check("matmul", {f32({5, 2, 3}), f32({1, 3, 4})}, {f32({5, 2, 4})}),
            "");
  EXPECT_REFUSED(check("matmul", {f32({2, 3}), f32({4, 5})}, {f32({2, 5})}),
                 "do not multiply");
}

TEST(ShapeRules, ConvolutionAndPooling) {
  std::map<std::string, Attr> pool = {{"kernel", ints({2, 2})},
                                      {"strides", ints({2, 2})}};
  EXPECT_EQ(check("max_pool2d", {f32({1, 3, 4, 4})}, {f32({1, 3, 2, 2})}, pool),
            "");
  EXPECT_REFUSED(
      check("max_pool2d", {f32({1, 3, 4, 4})}, {f32({1, 4, 2, 2})}, pool),
      "must be [N,C,H,W] and [N,C,OH,OW]");
  EXPECT_REFUSED(check("conv2d",
                       {f32({1, 3, 4, 4}), f32({8, 3, 1, 1}), f32({3})},
                       {f32({1, 8, 4, 4})}),
                 "bias f32[3] must be f32[8]");
}

TEST(ShapeRules, Movement) {
  EXPECT_REFUSED(
      check("slice", {f32({4})}, {f32({3})}, {{"starts", ints({2})}}),
      "slice of dim 0 (start 2, step 1, 3 elements) leaves");
  EXPECT_REFUSED(check("gather", {f32({10, 4}), i64({3})}, {f32({3, 5})},
                       {{"axis", ints({0})}}),
                 "does not have the shape of data");
  EXPECT_REFUSED(check("transpose", {f32({2, 3})}, {f32({2, 3})},
                       {{"perm", ints({1, 0})}}),
                 "permuted by 'perm'");
  EXPECT_REFUSED(check("concat", {f32({2, 3}), f32({2, 3})}, {f32({5, 3})},
                       {{"axis", ints({0})}}),
                 "sum to 4");
}

TEST(ShapeRules, CollectivesAgainstTheMesh) {
  std::unique_ptr<Communicator> one = makeSingleProcessCommunicator({1});
  std::map<std::string, Attr> gather = {{"axes", ints({0})},
                                        {"dim", ints({0})}};
  EXPECT_EQ(
      check("all_gather", {f32({2, 3})}, {f32({2, 3})}, gather, one.get()), "");
  EXPECT_REFUSED(
      check("all_gather", {f32({2, 3})}, {f32({4, 3})}, gather, one.get()),
      "over a group of 1 ranks");
  EXPECT_REFUSED(check("all_gather", {f32({2, 3})}, {f32({2, 3})},
                       {{"axes", ints({1})}, {"dim", ints({0})}}, one.get()),
                 "attribute 'axes'");
  EXPECT_REFUSED(
      check("all_reduce", {f32({2})}, {f32({2})}, {{"axes", ints({0})}}),
      "no communicator for a collective");
}

} // namespace
} // namespace cleave::rt

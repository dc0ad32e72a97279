//===- test_util.h - Helpers to build and run plans in tests ----*- C++ -*-===//

#ifndef CLEAVE_TEST_UNIT_RUNTIME_TEST_UTIL_H
#define CLEAVE_TEST_UNIT_RUNTIME_TEST_UTIL_H

#include "cleave/runtime/executor.h"
#include "cleave/runtime/npy.h"
#include "core/convert.h"
#include "plan/plan.pb.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace cleave::rt::test {

namespace plan = cleave::plan;
using Shape = std::vector<int64_t>;

inline plan::DType toPlan(DType d) {
  switch (d) {
  case DType::F32:
    return plan::F32;
  case DType::I64:
    return plan::I64;
  case DType::I32:
    return plan::I32;
  case DType::Bool:
    return plan::BOOL;
  case DType::F64:
    return plan::F64;
  case DType::F16:
    return plan::F16;
  case DType::BF16:
    return plan::BF16;
  case DType::I8:
    return plan::I8;
  case DType::I16:
    return plan::I16;
  case DType::U8:
    return plan::U8;
  case DType::U16:
    return plan::U16;
  case DType::U32:
    return plan::U32;
  }
  return plan::DTYPE_UNSPECIFIED;
}

inline int64_t numel(const Shape &s) {
  int64_t n = 1;
  for (int64_t d : s)
    n *= d;
  return n;
}

template <typename T>
HostTensor makeTensor(DType dtype, Shape shape, const std::vector<T> &data) {
  HostTensor t = HostTensor::zeros(dtype, std::move(shape));
  EXPECT_EQ(static_cast<size_t>(t.numElements()), data.size());
  if (!data.empty())
    std::memcpy(t.bytes.data(), data.data(), data.size() * sizeof(T));
  return t;
}
inline HostTensor f32(Shape s, const std::vector<float> &d) {
  return makeTensor(DType::F32, std::move(s), d);
}
inline HostTensor i64(Shape s, const std::vector<int64_t> &d) {
  return makeTensor(DType::I64, std::move(s), d);
}
inline HostTensor i32(Shape s, const std::vector<int32_t> &d) {
  return makeTensor(DType::I32, std::move(s), d);
}
inline HostTensor boolean(Shape s, const std::vector<uint8_t> &d) {
  return makeTensor(DType::Bool, std::move(s), d);
}

/// Deterministic pseudo-random f32 tensor in [lo, hi).
inline HostTensor randomF32(Shape s, uint32_t seed, float lo = -2.0f,
                            float hi = 2.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(numel(s));
  for (float &x : v)
    x = dist(gen);
  return f32(std::move(s), v);
}
inline HostTensor randomInt(DType dtype, Shape s, uint32_t seed, int lo,
                            int hi) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  HostTensor t = HostTensor::zeros(dtype, std::move(s));
  for (int64_t i = 0; i < t.numElements(); ++i) {
    int v = dist(gen);
    if (dtype == DType::I64)
      t.data<int64_t>()[i] = v;
    else if (dtype == DType::I32)
      t.data<int32_t>()[i] = v;
    else
      t.data<uint8_t>()[i] = v != 0;
  }
  return t;
}

template <typename T> std::vector<T> values(const HostTensor &t) {
  std::vector<T> v(t.numElements());
  if (!v.empty())
    std::memcpy(v.data(), t.bytes.data(), v.size() * sizeof(T));
  return v;
}

/// \p t (f32) in \p d: unchanged for f32, else rounded to bf16 / f16.
inline HostTensor asDtype(const HostTensor &t, DType d) {
  if (d == DType::F32)
    return t;
  std::vector<float> v = values<float>(t);
  std::vector<uint16_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    bits[i] = d == DType::BF16 ? floatToBf16(v[i]) : floatToHalf(v[i]);
  return makeTensor<uint16_t>(d, t.shape, bits);
}

/// \p t's values as f32: its own, or its bf16 / f16 values widened.
inline std::vector<float> widenedValues(const HostTensor &t) {
  if (t.dtype == DType::F32)
    return values<float>(t);
  std::vector<uint16_t> bits = values<uint16_t>(t);
  std::vector<float> v(bits.size());
  for (size_t i = 0; i < bits.size(); ++i)
    v[i] = t.dtype == DType::BF16 ? bf16ToFloat(bits[i]) : halfToFloat(bits[i]);
  return v;
}

/// Row-major multi-index of flat index \p i.
inline std::vector<int64_t> unravel(int64_t i, const Shape &s) {
  std::vector<int64_t> idx(s.size());
  for (int64_t d = static_cast<int64_t>(s.size()) - 1; d >= 0; --d) {
    idx[d] = i % s[d];
    i /= s[d];
  }
  return idx;
}
inline int64_t ravel(const std::vector<int64_t> &idx, const Shape &s) {
  int64_t i = 0;
  for (size_t d = 0; d < s.size(); ++d)
    i = i * s[d] + idx[d];
  return i;
}
/// Flat index into \p operand (dims equal or 1) of result multi-index \p idx.
inline int64_t broadcastIndex(const std::vector<int64_t> &idx,
                              const Shape &operand) {
  std::vector<int64_t> j(idx.size());
  for (size_t d = 0; d < idx.size(); ++d)
    j[d] = operand[d] == 1 ? 0 : idx[d];
  return ravel(j, operand);
}

struct AttrSpec {
  std::vector<int64_t> ints;
  std::vector<double> floats;
};
using Attrs = std::map<std::string, AttrSpec>;

/// Builds a Program value by value.
class ProgramBuilder {
public:
  ProgramBuilder() { program.set_name("test"); }

  int addValue(DType dtype, const Shape &shape, plan::Value::Storage storage,
               int64_t offset, int index) {
    plan::Value *v = program.add_values();
    v->mutable_type()->set_dtype(toPlan(dtype));
    for (int64_t d : shape)
      v->mutable_type()->add_shape(d);
    v->set_storage(storage);
    v->set_offset(offset);
    v->set_index(index);
    return program.values_size() - 1;
  }
  int input(const std::string &name, DType dtype, const Shape &shape) {
    int id =
        addValue(dtype, shape, plan::Value::INPUT, 0, program.inputs_size());
    program.add_inputs(id);
    program.add_input_names(name);
    return id;
  }
  int constant(const HostTensor &t) {
    program.add_constants(std::string(
        reinterpret_cast<const char *>(t.bytes.data()), t.bytes.size()));
    return addValue(t.dtype, t.shape, plan::Value::CONSTANT, 0,
                    program.constants_size() - 1);
  }
  /// A fresh 64-byte aligned arena slot.
  int arena(DType dtype, const Shape &shape) {
    int64_t bytes = numel(shape) * static_cast<int64_t>(dtypeSize(dtype));
    int id = addValue(dtype, shape, plan::Value::ARENA, arenaTop_, 0);
    arenaTop_ += (bytes + 63) / 64 * 64;
    program.set_arena_bytes(arenaTop_);
    return id;
  }
  void instruction(const std::string &kernel, const std::vector<int> &operands,
                   const std::vector<int> &results, const Attrs &attrs = {},
                   const std::string &location = "test.py:1") {
    plan::Instruction *inst = program.add_instructions();
    inst->set_kernel(kernel);
    for (int o : operands)
      inst->add_operands(o);
    for (int r : results)
      inst->add_results(r);
    for (const auto &[name, a] : attrs) {
      plan::Attribute &attr = (*inst->mutable_attrs())[name];
      for (int64_t i : a.ints)
        attr.add_ints(i);
      for (double f : a.floats)
        attr.add_floats(f);
    }
    inst->set_location(location);
  }
  /// A value in the tensor of the output added next (OUTPUT storage).
  int outputSlot(DType dtype, const Shape &shape) {
    return addValue(dtype, shape, plan::Value::OUTPUT, 0,
                    program.outputs_size());
  }
  void output(int id, const std::string &name) {
    program.add_outputs(id);
    program.add_output_names(name);
  }

  plan::Program program;

private:
  int64_t arenaTop_ = 0;
};

struct ResultType {
  DType dtype;
  Shape shape;
};

/// Builds a one-instruction program whose operands are inputs (nullopt: -1)
/// and whose results are outputs.
inline plan::Program
singleKernelProgram(const std::string &kernel,
                    const std::vector<std::optional<HostTensor>> &operands,
                    const std::vector<ResultType> &results,
                    const Attrs &attrs = {}) {
  ProgramBuilder b;
  std::vector<int> ops, res;
  for (size_t i = 0; i < operands.size(); ++i)
    ops.push_back(operands[i] ? b.input("in" + std::to_string(i),
                                        operands[i]->dtype, operands[i]->shape)
                              : -1);
  for (const ResultType &r : results)
    res.push_back(b.arena(r.dtype, r.shape));
  b.instruction(kernel, ops, res, attrs);
  for (size_t i = 0; i < res.size(); ++i)
    b.output(res[i], "out" + std::to_string(i));
  return b.program;
}

/// Runs a single kernel; fails the test on any error.
inline std::vector<HostTensor>
runKernel(const std::string &kernel,
          const std::vector<std::optional<HostTensor>> &operands,
          const std::vector<ResultType> &results, const Attrs &attrs = {}) {
  plan::Program program = singleKernelProgram(kernel, operands, results, attrs);
  std::unique_ptr<Executor> exec;
  Status s = Executor::create(program, &exec);
  EXPECT_TRUE(s.isOk()) << kernel << ": " << s.message();
  if (!s)
    return {};
  std::vector<HostTensor> inputs;
  for (const auto &o : operands)
    if (o)
      inputs.push_back(*o);
  std::vector<HostTensor> outputs;
  s = exec->run(inputs, &outputs);
  EXPECT_TRUE(s.isOk()) << kernel << ": " << s.message();
  return outputs;
}

/// Runs one kernel with one result.
inline HostTensor run1(const std::string &kernel,
                       const std::vector<std::optional<HostTensor>> &operands,
                       DType dtype, Shape shape, const Attrs &attrs = {}) {
  std::vector<HostTensor> out =
      runKernel(kernel, operands, {{dtype, std::move(shape)}}, attrs);
  return out.empty() ? HostTensor() : out[0];
}

/// The load-time error of a one-kernel program ("" when it loads).
inline std::string createError(const plan::Program &program) {
  std::unique_ptr<Executor> exec;
  Status s = Executor::create(program, &exec);
  return s ? std::string() : s.message();
}

inline void expectNear(const std::vector<float> &actual,
                       const std::vector<double> &expected, double tol,
                       const std::string &what = "") {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(actual[i])) << what << " at " << i;
      continue;
    }
    double bound = tol * std::max(1.0, std::fabs(expected[i]));
    EXPECT_NEAR(actual[i], expected[i], bound) << what << " at " << i;
  }
}

} // namespace cleave::rt::test

#endif // CLEAVE_TEST_UNIT_RUNTIME_TEST_UTIL_H

//===- executor.h - Executes a plan Program on the CPU ----------*- C++ -*-===//
//
// The runtime's public API. No MLIR or LLVM header may be included from
// runtime/: the plan (plan.proto) is the only contract with the compiler.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_EXECUTOR_H
#define CLEAVE_RUNTIME_EXECUTOR_H

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace cleave::plan {
class Program;
} // namespace cleave::plan

namespace cleave::rt {

class Communicator;
class StepProfiler;

/// Element types; mirrors plan::DType. The compute dtypes are F32, I64,
/// I32 and Bool; the others are storage dtypes of a model's inputs and
/// outputs, which only cast (and the data movement around a step) reads.
enum class DType { F32, I64, I32, Bool, F64, F16, BF16, I8, I16, U8, U16, U32 };

/// Bytes per element of \p dtype.
size_t dtypeSize(DType dtype);
/// "f32", "i64", "i32", "bool", "f64", "f16", "bf16", "i8", "i16", "u8",
/// "u16", "u32".
const char *dtypeName(DType dtype);
/// "f32 [2, 3]", for messages.
std::string describeTensor(DType dtype, const std::vector<int64_t> &shape);

/// A dense, row-major, contiguous host tensor that owns its bytes.
struct HostTensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  int64_t numElements() const;
  /// Allocates zeroed storage for \p shape.
  static HostTensor zeros(DType dtype, std::vector<int64_t> shape);
  template <typename T> T *data() {
    return reinterpret_cast<T *>(bytes.data());
  }
  template <typename T> const T *data() const {
    return reinterpret_cast<const T *>(bytes.data());
  }
};

/// Success, or an error message meant for the user.
class Status {
public:
  static Status ok() { return Status(); }
  static Status error(std::string message) {
    Status s;
    s.message_ = std::move(message);
    s.failed_ = true;
    return s;
  }
  bool isOk() const { return !failed_; }
  explicit operator bool() const { return !failed_; }
  const std::string &message() const { return message_; }

private:
  bool failed_ = false;
  std::string message_;
};

/// A loaded program: kernels bound, arena allocated, ready to run repeatedly.
class Executor {
public:
  /// Validates \p program (kernel names, value ids, types, arena bounds,
  /// constant sizes) and binds its kernels. On failure returns an error naming
  /// the offending instruction or value.
  ///
  /// Collective instructions run over \p comm (not owned; it must outlive
  /// the executor); their mesh axes and group sizes are checked against it
  /// here. Without one, the program runs alone on a mesh of shape [1], where
  /// every group has one member.
  static Status create(const plan::Program &program,
                       std::unique_ptr<Executor> *result,
                       Communicator *comm = nullptr);
  ~Executor();

  /// Runs the program. \p inputs must match the program's inputs in order,
  /// dtype and shape (a mismatch is an error naming the input). Fills
  /// \p outputs in the program's output order, reusing the storage of the
  /// tensors it already holds (kernels write most outputs there directly,
  /// so after a failed run their contents are unspecified).
  ///
  /// Each (input, output) pair of \p donated (pairs canDonate accepted)
  /// writes the output over that input's buffer instead, leaving
  /// (*outputs)[output] untouched: the caller then holds the new value in
  /// its input tensor, as it would after moving the output there.
  Status run(const std::vector<HostTensor> &inputs,
             std::vector<HostTensor> *outputs,
             const std::vector<std::pair<size_t, size_t>> &donated = {});

  /// Whether output \p output may be written over input \p input's buffer
  /// during a run (an optimizer's new state over its old one): the
  /// instruction producing it is a fused elementwise chain without
  /// reductions that reads the input element for element, is the input's
  /// last reader, and writes no output straight from an input register; the
  /// output is written directly (no view of it read later) with the input's
  /// type. Writing in place saves the read-for-ownership of a second buffer
  /// per element.
  bool canDonate(size_t input, size_t output) const;

  /// Times every instruction of each later run into \p profiler (null:
  /// stop); it must outlive the runs.
  void setProfiler(StepProfiler *profiler);

  const std::vector<std::string> &inputNames() const;
  const std::vector<std::string> &outputNames() const;
  /// Declared dtype and shape of input \p i.
  DType inputDType(size_t i) const;
  const std::vector<int64_t> &inputShape(size_t i) const;

  struct Impl;

private:
  explicit Executor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Reads a NumPy .npy file (format 1.0-3.0, little-endian, C order) of dtype
/// <f4, <f8, <f2, <i8, <i4, <i2, |i1, |b1, |u1, <u2 or <u4. Errors name the
/// file and the cause (missing, truncated, unsupported dtype, Fortran order).
Status readNpy(const std::string &path, HostTensor *result);
/// \p t as an input of dtype \p want where numpy's files say the same
/// thing another way: uint8 data for a bool input (any non-zero byte is
/// true). Other dtypes are left for the caller's check.
void conformInput(HostTensor &t, DType want);
/// Writes \p tensor as .npy atomically (temporary file, then rename).
Status writeNpy(const std::string &path, const HostTensor &tensor);
/// Maps characters outside [A-Za-z0-9._-] to '_' (file names of tensors).
std::string sanitizeFileName(const std::string &name);

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_EXECUTOR_H

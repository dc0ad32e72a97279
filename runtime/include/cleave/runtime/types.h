//===- types.h - The runtime's value types ----------------------*- C++ -*-===//
//
// What every layer of the runtime and both backends share: element types,
// the host tensor and the status a fallible call returns. No backend's
// header is needed to hold a tensor or report an error.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_TYPES_H
#define CLEAVE_RUNTIME_TYPES_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace cleave::rt {

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

/// Widens a float tensor of a storage dtype (f16, bf16: exactly; f64:
/// rounded to nearest) to f32 in place; false, with \p t unchanged, when it
/// is not a float tensor or an f64 value lies beyond f32's range.
bool widenToF32(HostTensor *t);

/// Rounds an f32 tensor to \p to (bf16 or f16, to nearest even) in place:
/// mixed precision's frozen weights, held at their own size. False, with
/// \p t unchanged, for any other pair of dtypes.
bool narrowFromF32(HostTensor *t, DType to);

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

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_TYPES_H

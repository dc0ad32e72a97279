//===- Tensors.cpp - ONNX tensors: fields, external data, decoding --------===//
//
// A TensorProto's bytes, wherever the model keeps them (typed fields, raw
// data, external files held inside the model's folder), every size checked
// before anything is read.
//
//===----------------------------------------------------------------------===//

#include "Tensors.h"
#include "Cleave/TensorSize.h"
#include "NodeContext.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include <climits>
#include <fstream>

using namespace mlir;
using namespace mlir::cleave;
using namespace mlir::cleave::onnx_import;

std::string onnx_import::onnxTypeName(int32_t dataType) {
  if (onnx::TensorProto::DataType_IsValid(dataType))
    return onnx::TensorProto::DataType_Name(
        static_cast<onnx::TensorProto::DataType>(dataType));
  return "type " + std::to_string(dataType);
}

/// Bytes of the typed (non-raw) fields of \p t, or an error.
static FailureOr<std::string>
typedFieldBytes(const onnx::TensorProto &t, int64_t count, std::string &error) {
  std::string out;
  auto check = [&](int64_t have) {
    if (have == count)
      return true;
    error = "holds " + std::to_string(have) + " elements, its shape needs " +
            std::to_string(count);
    return false;
  };
  switch (t.data_type()) {
  case onnx::TensorProto::FLOAT:
    if (!check(t.float_data_size()))
      return failure();
    out.assign(reinterpret_cast<const char *>(t.float_data().data()),
               count * 4);
    return out;
  case onnx::TensorProto::INT64:
    if (!check(t.int64_data_size()))
      return failure();
    out.assign(reinterpret_cast<const char *>(t.int64_data().data()),
               count * 8);
    return out;
  case onnx::TensorProto::INT32:
  case onnx::TensorProto::BOOL: {
    if (!check(t.int32_data_size()))
      return failure();
    bool isBool = t.data_type() == onnx::TensorProto::BOOL;
    for (int32_t v : t.int32_data()) {
      if (isBool)
        out.push_back(v ? 1 : 0);
      else
        out.append(reinterpret_cast<const char *>(&v), 4);
    }
    return out;
  }
  case onnx::TensorProto::DOUBLE:
    if (!check(t.double_data_size()))
      return failure();
    out.assign(reinterpret_cast<const char *>(t.double_data().data()),
               count * 8);
    return out;
  case onnx::TensorProto::UINT32:
    if (!check(t.uint64_data_size()))
      return failure();
    for (uint64_t v : t.uint64_data()) {
      auto narrow = static_cast<uint32_t>(v);
      out.append(reinterpret_cast<const char *>(&narrow), 4);
    }
    return out;
  case onnx::TensorProto::FLOAT16:
  case onnx::TensorProto::BFLOAT16:
  case onnx::TensorProto::INT16:
  case onnx::TensorProto::UINT16:
  case onnx::TensorProto::INT8:
  case onnx::TensorProto::UINT8: {
    // One element (its bits, for the 16-bit floats) per int32_data entry.
    if (!check(t.int32_data_size()))
      return failure();
    bool twoBytes = t.data_type() != onnx::TensorProto::INT8 &&
                    t.data_type() != onnx::TensorProto::UINT8;
    for (int32_t v : t.int32_data()) {
      auto bits = static_cast<uint16_t>(v);
      out.append(reinterpret_cast<const char *>(&bits), twoBytes ? 2 : 1);
    }
    return out;
  }
  default:
    error = "has unsupported element type " + onnxTypeName(t.data_type());
    return failure();
  }
}

std::string onnx_import::modelFolder(StringRef modelPath) {
  StringRef dir = llvm::sys::path::parent_path(modelPath);
  return dir.empty() ? "." : dir.str();
}

/// The file that external data \p location of a model in \p baseDir names,
/// held to onnxruntime's rule: a relative path inside the model's folder,
/// no "..", and no symbolic link leading out of it. A model file from an
/// untrusted source must not make Cleave read (and a bundle carry, and
/// export hand back) any other file.
static LogicalResult resolveExternalData(StringRef baseDir, StringRef location,
                                         std::string &path,
                                         std::string &error) {
  namespace fs = llvm::sys::fs;
  namespace sp = llvm::sys::path;
  if (baseDir.empty()) {
    error = "has external data, which only the initializers of a model file "
            "may have";
    return failure();
  }
  if (location.empty()) {
    error = "has external data without a location";
    return failure();
  }
  std::string quoted = "'" + location.str() + "'";
  if (sp::is_absolute(location) || location.starts_with("~")) {
    error = "has external data at the absolute path " + quoted +
            ": external data must lie in the model's folder";
    return failure();
  }
  for (auto it = sp::begin(location), end = sp::end(location); it != end; ++it)
    if (*it == "..") {
      error = "has external data at " + quoted +
              ", which leads out of the model's folder";
      return failure();
    }
  SmallString<256> base, joined(baseDir), real;
  sp::append(joined, location);
  if (std::error_code ec = fs::real_path(baseDir, base)) {
    error =
        "has external data in a folder that cannot be read: " + ec.message();
    return failure();
  }
  if (std::error_code ec = fs::real_path(joined, real)) {
    error = "has external data file '" + std::string(joined) +
            "' which cannot be opened: " + ec.message();
    return failure();
  }
  if (!StringRef(real).starts_with(std::string(base) + "/")) {
    error = "has external data at " + quoted +
            ", which a symbolic link leads out of the model's folder";
    return failure();
  }
  if (!fs::is_regular_file(real)) {
    error = "has external data file '" + std::string(joined) +
            "' which is not a regular file";
    return failure();
  }
  path = std::string(real);
  return success();
}

LogicalResult onnx_import::locateTensor(MLIRContext *context,
                                        const onnx::TensorProto &t,
                                        const std::string &baseDir,
                                        TensorSource &src, std::string &error) {
  TensorData &data = src.header;
  data.elementType = elementTypeFromOnnx(context, t.data_type());
  if (!data.elementType) {
    error = "has unsupported element type " + onnxTypeName(t.data_type());
    return failure();
  }
  int64_t elementBytes = data.elementType.isInteger(1)
                             ? 1
                             : data.elementType.getIntOrFloatBitWidth() / 8;
  data.shape.assign(t.dims().begin(), t.dims().end());
  if (llvm::any_of(data.shape, [](int64_t d) { return d < 0; })) {
    error = "has a negative dimension";
    return failure();
  }
  std::optional<int64_t> bytes = checkedByteCount(data.shape, elementBytes);
  if (!bytes) {
    error = "has more elements than fit in memory";
    return failure();
  }
  src.count = *checkedElementCount(data.shape);
  src.bytes = *bytes;
  if (t.data_location() != onnx::TensorProto::EXTERNAL) {
    if (t.has_raw_data() &&
        static_cast<int64_t>(t.raw_data().size()) != src.bytes) {
      error = "holds " + std::to_string(t.raw_data().size()) +
              " bytes of raw data, its shape needs " +
              std::to_string(src.bytes);
      return failure();
    }
    if (!t.has_raw_data()) {
      std::string why;
      FailureOr<std::string> bytes = typedFieldBytes(t, src.count, why);
      if (failed(bytes)) {
        error = why;
        return failure();
      }
    }
    return success();
  }
  std::string location;
  int64_t length = -1;
  for (const auto &kv : t.external_data()) {
    int64_t *field = kv.key() == "offset"   ? &src.offset
                     : kv.key() == "length" ? &length
                                            : nullptr;
    if (kv.key() == "location")
      location = kv.value();
    else if (field &&
             (StringRef(kv.value()).getAsInteger(10, *field) || *field < 0)) {
      error = "has external data " + kv.key() + " '" + kv.value() +
              "', which is not a size";
      return failure();
    }
  }
  if (failed(resolveExternalData(baseDir, location, src.file, error)))
    return failure();
  if (length >= 0 && length != src.bytes) {
    error = "has external data of length " + std::to_string(length) +
            ", its shape needs " + std::to_string(src.bytes);
    return failure();
  }
  uint64_t size = 0;
  if (std::error_code ec = llvm::sys::fs::file_size(src.file, size)) {
    error = "has external data file '" + src.file +
            "' which cannot be read: " + ec.message();
    return failure();
  }
  if (src.offset > static_cast<int64_t>(size) ||
      src.bytes > static_cast<int64_t>(size) - src.offset) {
    error = "has external data file '" + location + "' that is truncated (" +
            std::to_string(size) + " bytes; the tensor needs " +
            std::to_string(src.bytes) + " from offset " +
            std::to_string(src.offset) + ")";
    return failure();
  }
  return success();
}

FailureOr<TensorData> onnx_import::decodeTensor(MLIRContext *context,
                                                const onnx::TensorProto &t,
                                                const std::string &baseDir,
                                                std::string &error) {
  TensorSource src;
  if (failed(locateTensor(context, t, baseDir, src, error)))
    return failure();
  TensorData data = std::move(src.header);
  if (!src.file.empty()) {
    std::ifstream in(src.file, std::ios::binary);
    data.bytes.resize(src.bytes);
    in.seekg(src.offset);
    in.read(reinterpret_cast<char *>(data.bytes.data()), src.bytes);
    if (!in || in.gcount() != src.bytes) {
      error = "has external data file '" + src.file + "' that cannot be read";
      return failure();
    }
    return data;
  }
  if (t.has_raw_data()) {
    data.bytes.assign(t.raw_data().begin(), t.raw_data().end());
    return data;
  }
  FailureOr<std::string> bytes = typedFieldBytes(t, src.count, error);
  if (failed(bytes))
    return failure();
  data.bytes.assign(bytes->begin(), bytes->end());
  return data;
}

DenseElementsAttr mlir::cleave::tensorDataToAttr(const TensorData &data) {
  auto type = RankedTensorType::get(data.shape, data.elementType);
  if (data.elementType.isInteger(1)) {
    SmallVector<bool> values;
    for (uint8_t c : data.bytes)
      values.push_back(c != 0);
    return DenseElementsAttr::get(type, values);
  }
  return DenseElementsAttr::getFromRawBuffer(
      type, ArrayRef<char>(reinterpret_cast<const char *>(data.bytes.data()),
                           data.bytes.size()));
}

FailureOr<DenseElementsAttr>
onnx_import::tensorToAttr(MLIRContext *context, const onnx::TensorProto &tensor,
                          std::string &error) {
  FailureOr<TensorData> data = decodeTensor(context, tensor, "", error);
  if (failed(data))
    return failure();
  bool overflow;
  DenseElementsAttr attr = toComputeType(tensorDataToAttr(*data), &overflow);
  if (overflow) {
    error = kBeyondF32;
    return failure();
  }
  return attr;
}

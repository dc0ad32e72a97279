//===- safetensors.h - safetensors files, streamed --------------*- C++ -*-===//
//
// Weights, checkpoints and exports are safetensors files (Hugging Face's
// format: an 8-byte little-endian header length, a JSON header naming each
// tensor's dtype, shape and byte range, then the raw data). Writers stream
// one tensor at a time, so nothing holds more than the tensor being written;
// readers read the byte range of one tensor, so a rank reads only its own
// bytes. Every file's size and CRC-32 are recorded by whoever lists it (the
// plan, a checkpoint) and checked on open: a truncated or altered file is an
// error naming it, never wrong numbers.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_SAFETENSORS_H
#define CLEAVE_RUNTIME_SAFETENSORS_H

#include "cleave/runtime/executor.h"

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace cleave::rt {

/// One tensor of a safetensors file.
struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  /// Byte range in the file (absolute, header included).
  uint64_t begin = 0, end = 0;
  uint64_t bytes() const { return end - begin; }
};

/// CRC-32 (zlib's) of \p size bytes, continuing \p crc.
uint32_t crc32Update(uint32_t crc, const void *data, size_t size);

/// Writes a safetensors file whose tensors are declared up front and then
/// written in that order, one at a time. The file appears under its name only
/// when finish() succeeds (written to a temporary name, flushed, fsynced,
/// renamed).
class SafetensorsWriter {
public:
  static Status create(const std::string &path,
                       const std::vector<TensorInfo> &tensors,
                       const std::map<std::string, std::string> &metadata,
                       std::unique_ptr<SafetensorsWriter> *result);
  ~SafetensorsWriter();
  /// The tensors with their byte ranges.
  const std::vector<TensorInfo> &tensors() const { return tensors_; }
  /// Appends the next tensor's bytes (tensors()[next].bytes() of them), in
  /// pieces if the caller likes: the byte count is checked at finish().
  Status write(const void *data, size_t size);
  /// Completes the file; its size and CRC-32 come back for the listing.
  Status finish(uint64_t *size, uint32_t *crc);

private:
  SafetensorsWriter() = default;
  std::string path_, tmp_;
  std::FILE *file_ = nullptr;
  std::vector<TensorInfo> tensors_;
  uint64_t written_ = 0, total_ = 0;
  uint32_t crc_ = 0;
};

/// A safetensors file opened for reading byte ranges.
class SafetensorsFile {
public:
  /// Opens and parses \p path. With \p expectedSize set (not ~0), checks the
  /// size and, streaming the file once, its CRC-32 against \p expectedCrc.
  static Status open(const std::string &path,
                     std::unique_ptr<SafetensorsFile> *result,
                     uint64_t expectedSize = ~uint64_t(0),
                     uint32_t expectedCrc = 0);
  ~SafetensorsFile();
  const std::vector<TensorInfo> &tensors() const { return tensors_; }
  const std::map<std::string, std::string> &metadata() const {
    return metadata_;
  }
  /// The tensor named \p name, or null.
  const TensorInfo *find(const std::string &name) const;
  /// Reads tensor \p info whole.
  Status read(const TensorInfo &info, HostTensor *out) const;
  /// Reads \p size bytes at \p offset (absolute) into \p dst.
  Status readBytes(uint64_t offset, void *dst, size_t size) const;
  const std::string &path() const { return path_; }

private:
  SafetensorsFile() = default;
  std::string path_;
  int fd_ = -1;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

/// "F32", "I64", "BF16", ... (safetensors' names).
const char *safetensorsDType(DType dtype);

/// Size and CRC-32 of the file at \p path, streaming it.
Status fileDigest(const std::string &path, uint64_t *size, uint32_t *crc);

/// fsyncs the directory \p dir, so a rename inside it is durable.
Status syncDirectory(const std::string &dir);

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_SAFETENSORS_H

//===- safetensors.cpp - safetensors files, streamed ----------------------===//

#include "cleave/runtime/safetensors.h"
#include "cleave/runtime/files.h"

#include <nlohmann/json.hpp>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace cleave::rt {

using json = nlohmann::ordered_json;

const char *safetensorsDType(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return "F32";
  case DType::I64:
    return "I64";
  case DType::I32:
    return "I32";
  case DType::Bool:
    return "BOOL";
  case DType::F64:
    return "F64";
  case DType::F16:
    return "F16";
  case DType::BF16:
    return "BF16";
  case DType::I8:
    return "I8";
  case DType::I16:
    return "I16";
  case DType::U8:
    return "U8";
  case DType::U16:
    return "U16";
  case DType::U32:
    return "U32";
  }
  return "";
}

namespace {

bool parseDType(const std::string &name, DType *dtype) {
  for (DType d :
       {DType::F32, DType::I64, DType::I32, DType::Bool, DType::F64, DType::F16,
        DType::BF16, DType::I8, DType::I16, DType::U8, DType::U16, DType::U32})
    if (name == safetensorsDType(d)) {
      *dtype = d;
      return true;
    }
  return false;
}

std::string errnoText() { return std::strerror(errno); }

/// pread of exactly \p size bytes.
bool preadAll(int fd, void *dst, size_t size, uint64_t offset) {
  auto *p = static_cast<uint8_t *>(dst);
  while (size > 0) {
    ssize_t n = ::pread(fd, p, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    p += n;
    size -= n;
    offset += n;
  }
  return true;
}

} // namespace

uint32_t crc32Update(uint32_t crc, const void *data, size_t size) {
  const auto *p = static_cast<const Bytef *>(data);
  // zlib takes lengths as uInt: feed large buffers in pieces.
  while (size > 0) {
    uInt piece = static_cast<uInt>(std::min<size_t>(size, 1u << 30));
    crc = static_cast<uint32_t>(::crc32(crc, p, piece));
    p += piece;
    size -= piece;
  }
  return crc;
}

// --- Writer ------------------------------------------------------------------

Status
SafetensorsWriter::create(const std::string &path,
                          const std::vector<TensorInfo> &tensors,
                          const std::map<std::string, std::string> &metadata,
                          std::unique_ptr<SafetensorsWriter> *result) {
  std::unique_ptr<SafetensorsWriter> w(new SafetensorsWriter());
  w->path_ = path;
  w->tmp_ = path + ".tmp-" + std::to_string(::getpid());
  json header = json::object();
  if (!metadata.empty()) {
    json meta = json::object();
    for (const auto &[k, v] : metadata)
      meta[k] = v;
    header["__metadata__"] = meta;
  }
  uint64_t offset = 0;
  for (const TensorInfo &t : tensors) {
    if (header.contains(t.name))
      return Status::error("cannot write '" + path + "': tensor '" + t.name +
                           "' twice");
    HostTensor probe;
    probe.shape = t.shape;
    uint64_t bytes = probe.numElements() * dtypeSize(t.dtype);
    header[t.name] = {{"dtype", safetensorsDType(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    TensorInfo info = t;
    info.begin = offset;
    info.end = offset + bytes;
    w->tensors_.push_back(info);
    offset += bytes;
  }
  std::string text = header.dump();
  // The data starts 8-aligned (the format pads the header with spaces).
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  uint64_t base = 8 + text.size();
  for (TensorInfo &t : w->tensors_) {
    t.begin += base;
    t.end += base;
  }
  w->total_ = base + offset;
  w->file_ = std::fopen(w->tmp_.c_str(), "wb");
  if (!w->file_)
    return Status::error("cannot write '" + w->tmp_ + "': " + errnoText());
  uint8_t length[8];
  for (int i = 0; i < 8; ++i)
    length[i] =
        static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  if (Status s = w->write(length, 8); !s)
    return s;
  if (Status s = w->write(text.data(), text.size()); !s)
    return s;
  *result = std::move(w);
  return Status::ok();
}

SafetensorsWriter::~SafetensorsWriter() {
  if (file_) {
    std::fclose(file_);
    ::unlink(tmp_.c_str()); // not finished: leave nothing behind
  }
}

Status SafetensorsWriter::write(const void *data, size_t size) {
  if (written_ + size > total_)
    return Status::error("cannot write '" + path_ +
                         "': more bytes than its tensors declare");
  if (size && std::fwrite(data, 1, size, file_) != size)
    return Status::error("cannot write '" + tmp_ + "': " + errnoText());
  crc_ = crc32Update(crc_, data, size);
  written_ += size;
  return Status::ok();
}

Status SafetensorsWriter::finish(uint64_t *size, uint32_t *crc) {
  if (written_ != total_)
    return Status::error("cannot write '" + path_ +
                         "': " + std::to_string(written_) + " of " +
                         std::to_string(total_) + " bytes written");
  bool ok = std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0;
  ok &= std::fclose(file_) == 0;
  file_ = nullptr;
  if (!ok || std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    std::string why = errnoText();
    ::unlink(tmp_.c_str());
    return Status::error("cannot write '" + path_ + "': " + why);
  }
  if (size)
    *size = total_;
  if (crc)
    *crc = crc_;
  return Status::ok();
}

// --- Reader ------------------------------------------------------------------

Status fileDigest(const std::string &path, uint64_t *size, uint32_t *crc) {
  int fd;
  if (Status s = openRegularFile(path, "file", &fd); !s)
    return s;
  std::vector<uint8_t> buf(1 << 20);
  uint64_t total = 0;
  uint32_t c = 0;
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      std::string why = errnoText();
      ::close(fd);
      return Status::error("cannot read '" + path + "': " + why);
    }
    if (n == 0)
      break;
    c = crc32Update(c, buf.data(), n);
    total += n;
  }
  ::close(fd);
  *size = total;
  *crc = c;
  return Status::ok();
}

Status SafetensorsFile::open(const std::string &path,
                             std::unique_ptr<SafetensorsFile> *result,
                             uint64_t expectedSize, uint32_t expectedCrc) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  if (Status s = openRegularFile(path, "safetensors file", &f->fd_); !s)
    return s;
  struct stat st;
  if (::fstat(f->fd_, &st) != 0)
    return Status::error("cannot read '" + path + "': " + errnoText());
  uint64_t fileSize = static_cast<uint64_t>(st.st_size);
  if (expectedSize != ~uint64_t(0)) {
    if (fileSize != expectedSize)
      return Status::error("'" + path + "' is " + std::to_string(fileSize) +
                           " bytes, not the " + std::to_string(expectedSize) +
                           " recorded: it is truncated or was changed");
    uint64_t size;
    uint32_t crc;
    if (Status s = fileDigest(path, &size, &crc); !s)
      return s;
    if (crc != expectedCrc)
      return Status::error("'" + path +
                           "' does not match its recorded checksum: it is "
                           "corrupt or was changed");
  }
  auto corrupt = [&](const std::string &why) {
    return Status::error("'" + path + "' is not a valid safetensors file (" +
                         why + ")");
  };
  uint8_t length[8];
  if (fileSize < 8 || !preadAll(f->fd_, length, 8, 0))
    return corrupt("too short");
  uint64_t headerSize = 0;
  for (int i = 0; i < 8; ++i)
    headerSize |= static_cast<uint64_t>(length[i]) << (8 * i);
  if (headerSize > fileSize - 8 || headerSize > (100u << 20))
    return corrupt("header length out of range");
  std::string text(headerSize, '\0');
  if (!preadAll(f->fd_, text.data(), headerSize, 8))
    return corrupt("cannot read the header");
  json header = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!header.is_object())
    return corrupt("the header is not a JSON object");
  uint64_t base = 8 + headerSize;
  for (const auto &[name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object())
        return corrupt("__metadata__ is not an object");
      for (const auto &[k, v] : entry.items())
        if (v.is_string())
          f->metadata_[k] = v.get<std::string>();
      continue;
    }
    TensorInfo t;
    t.name = name;
    if (!entry.is_object() || !entry.contains("dtype") ||
        !entry["dtype"].is_string() ||
        !parseDType(entry["dtype"].get<std::string>(), &t.dtype))
      return corrupt("tensor '" + name + "' has no dtype Cleave reads");
    const json &shape = entry.contains("shape") ? entry["shape"] : json();
    const json &range =
        entry.contains("data_offsets") ? entry["data_offsets"] : json();
    if (!shape.is_array() || !range.is_array() || range.size() != 2 ||
        !range[0].is_number_unsigned() || !range[1].is_number_unsigned())
      return corrupt("tensor '" + name + "' has no shape or byte range");
    for (const json &d : shape) {
      if (!d.is_number_unsigned())
        return corrupt("tensor '" + name + "' has a bad shape");
      t.shape.push_back(d.get<int64_t>());
    }
    t.begin = base + range[0].get<uint64_t>();
    t.end = base + range[1].get<uint64_t>();
    HostTensor probe;
    probe.shape = t.shape;
    if (t.end < t.begin || t.end > fileSize ||
        t.bytes() != probe.numElements() * dtypeSize(t.dtype))
      return corrupt("tensor '" + name + "' lies outside the file");
    f->tensors_.push_back(std::move(t));
  }
  *result = std::move(f);
  return Status::ok();
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0)
    ::close(fd_);
}

const TensorInfo *SafetensorsFile::find(const std::string &name) const {
  for (const TensorInfo &t : tensors_)
    if (t.name == name)
      return &t;
  return nullptr;
}

Status SafetensorsFile::readBytes(uint64_t offset, void *dst,
                                  size_t size) const {
  if (!preadAll(fd_, dst, size, offset))
    return Status::error("cannot read '" + path_ + "': it is truncated");
  return Status::ok();
}

Status SafetensorsFile::read(const TensorInfo &info, HostTensor *out) const {
  *out = HostTensor::zeros(info.dtype, info.shape);
  return readBytes(info.begin, out->bytes.data(), info.bytes());
}

Status syncDirectory(const std::string &dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return Status::error("cannot open '" + dir + "': " + errnoText());
  int r = ::fsync(fd);
  ::close(fd);
  if (r != 0)
    return Status::error("cannot sync '" + dir + "': " + errnoText());
  return Status::ok();
}

} // namespace cleave::rt

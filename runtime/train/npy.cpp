//===- npy.cpp - NumPy .npy reading and writing ---------------------------===//
//
// Format:
// https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html The
// header is a Python dict literal; only the subset numpy writes (string, bool
// and int-tuple values) is parsed.
//
//===----------------------------------------------------------------------===//

#include "cleave/runtime/npy.h"
#include "cleave/runtime/executor.h"
#include "cleave/runtime/files.h"

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <unistd.h>

namespace cleave::rt {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;

struct Header {
  std::string descr;
  bool fortranOrder = false;
  bool hasDescr = false, hasFortran = false, hasShape = false;
  std::vector<int64_t> shape;
};

class HeaderParser {
public:
  explicit HeaderParser(const std::string &text) : text_(text) {}

  Status parse(Header *h) {
    skipSpace();
    if (!consume('{'))
      return fail("expected '{'");
    while (true) {
      skipSpace();
      if (consume('}'))
        return Status::ok();
      std::string key;
      if (Status s = parseString(&key); !s)
        return s;
      skipSpace();
      if (!consume(':'))
        return fail("expected ':' after '" + key + "'");
      skipSpace();
      if (key == "descr") {
        if (Status s = parseString(&h->descr); !s)
          return s;
        h->hasDescr = true;
      } else if (key == "fortran_order") {
        if (Status s = parseBool(&h->fortranOrder); !s)
          return s;
        h->hasFortran = true;
      } else if (key == "shape") {
        if (Status s = parseShape(&h->shape); !s)
          return s;
        h->hasShape = true;
      } else {
        return fail("unexpected key '" + key + "'");
      }
      skipSpace();
      if (consume(','))
        continue;
      skipSpace();
      if (consume('}'))
        return Status::ok();
      return fail("expected ',' or '}'");
    }
  }

private:
  Status fail(const std::string &msg) {
    return Status::error("malformed header (" + msg + " at offset " +
                         std::to_string(pos_) + ")");
  }
  void skipSpace() {
    while (pos_ < text_.size() &&
           std::isspace(static_cast<unsigned char>(text_[pos_])))
      ++pos_;
  }
  bool consume(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  Status parseString(std::string *out) {
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"'))
      return fail("expected a string");
    char quote = text_[pos_++];
    size_t end = text_.find(quote, pos_);
    if (end == std::string::npos)
      return fail("unterminated string");
    *out = text_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return Status::ok();
  }
  Status parseBool(bool *out) {
    if (text_.compare(pos_, 4, "True") == 0) {
      pos_ += 4;
      *out = true;
      return Status::ok();
    }
    if (text_.compare(pos_, 5, "False") == 0) {
      pos_ += 5;
      *out = false;
      return Status::ok();
    }
    return fail("expected True or False");
  }
  Status parseShape(std::vector<int64_t> *out) {
    if (!consume('('))
      return fail("expected '(' for shape");
    while (true) {
      skipSpace();
      if (consume(')'))
        return Status::ok();
      if (pos_ >= text_.size() ||
          !std::isdigit(static_cast<unsigned char>(text_[pos_])))
        return fail("expected a dimension");
      int64_t v = 0;
      while (pos_ < text_.size() &&
             std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        if (v > (int64_t(1) << 50))
          return fail("dimension too large");
        v = v * 10 + (text_[pos_++] - '0');
      }
      // Python longs may carry an 'L' suffix in files from Python 2.
      consume('L');
      out->push_back(v);
      skipSpace();
      if (consume(','))
        continue;
      skipSpace();
      if (consume(')'))
        return Status::ok();
      return fail("expected ',' or ')' in shape");
    }
  }

  const std::string &text_;
  size_t pos_ = 0;
};

/// numpy's little-endian descr of each dtype (bfloat16 has none).
constexpr std::pair<DType, const char *> kDescrs[] = {
    {DType::F32, "<f4"},  {DType::I64, "<i8"}, {DType::I32, "<i4"},
    {DType::Bool, "|b1"}, {DType::F64, "<f8"}, {DType::F16, "<f2"},
    {DType::I8, "|i1"},   {DType::I16, "<i2"}, {DType::U8, "|u1"},
    {DType::U16, "<u2"},  {DType::U32, "<u4"}};

Status dtypeFromDescr(const std::string &descr, DType *dtype) {
  for (auto [d, name] : kDescrs)
    if (descr == name) {
      *dtype = d;
      return Status::ok();
    }
  return Status::error("unsupported dtype '" + descr +
                       "' (supported: <f4, <f8, <f2, <i8, <i4, <i2, |i1, "
                       "|b1, |u1, <u2, <u4)");
}

const char *descrOf(DType dtype) {
  for (auto [d, name] : kDescrs)
    if (d == dtype)
      return name;
  return nullptr;
}

uint32_t readLE(const unsigned char *p, size_t bytes) {
  uint32_t v = 0;
  for (size_t i = 0; i < bytes; ++i)
    v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

} // namespace

Status readNpy(const std::string &path, HostTensor *result) {
  auto fail = [&](const std::string &msg) {
    return Status::error(path + ": " + msg);
  };
  std::string file;
  if (Status s = readWholeFile(path, ".npy file", &file); !s)
    return s;
  const auto *bytes = reinterpret_cast<const unsigned char *>(file.data());

  if (file.size() < kMagicSize || file.compare(0, kMagicSize, kMagic) != 0)
    return fail("not a .npy file (bad magic)");
  if (file.size() < 10)
    return fail("truncated header");
  unsigned major = bytes[6];
  size_t lengthBytes;
  if (major == 1)
    lengthBytes = 2;
  else if (major == 2 || major == 3)
    lengthBytes = 4;
  else
    return fail("unsupported format version " + std::to_string(major) + "." +
                std::to_string(bytes[7]));
  size_t headerStart = 8 + lengthBytes;
  if (file.size() < headerStart)
    return fail("truncated header");
  size_t headerLength = readLE(bytes + 8, lengthBytes);
  if (file.size() - headerStart < headerLength)
    return fail("truncated header");
  std::string headerText = file.substr(headerStart, headerLength);

  Header header;
  if (Status s = HeaderParser(headerText).parse(&header); !s)
    return fail(s.message());
  if (!header.hasDescr || !header.hasFortran || !header.hasShape)
    return fail("header lacks descr, fortran_order or shape");
  if (header.fortranOrder)
    return fail("Fortran-order arrays are not supported");
  DType dtype = DType::F32;
  if (Status s = dtypeFromDescr(header.descr, &dtype); !s)
    return fail(s.message());

  int64_t count = 1;
  for (int64_t d : header.shape) {
    if (d != 0 && count > (int64_t(1) << 50) / d)
      return fail("shape too large");
    count *= d;
  }
  size_t dataBytes = static_cast<size_t>(count) * dtypeSize(dtype);
  size_t dataStart = headerStart + headerLength;
  if (file.size() - dataStart < dataBytes)
    return fail("truncated data: expected " + std::to_string(dataBytes) +
                " bytes, found " + std::to_string(file.size() - dataStart));

  HostTensor t;
  t.dtype = dtype;
  t.shape = header.shape;
  t.bytes.assign(bytes + dataStart, bytes + dataStart + dataBytes);
  // Runtime bools are canonical 0/1 bytes.
  if (dtype == DType::Bool)
    for (uint8_t &b : t.bytes)
      b = b != 0;
  *result = std::move(t);
  return Status::ok();
}

void conformInput(HostTensor &t, DType want) {
  if (t.dtype == DType::U8 && want == DType::Bool) {
    t.dtype = DType::Bool;
    for (uint8_t &b : t.bytes)
      b = b != 0;
  }
}

Status writeNpy(const std::string &path, const HostTensor &tensor) {
  auto fail = [&](const std::string &msg) {
    return Status::error(path + ": " + msg);
  };
  size_t expected =
      static_cast<size_t>(tensor.numElements()) * dtypeSize(tensor.dtype);
  if (tensor.bytes.size() != expected)
    return fail("tensor holds " + std::to_string(tensor.bytes.size()) +
                " bytes, its shape needs " + std::to_string(expected));

  if (!descrOf(tensor.dtype))
    return fail(std::string("numpy has no dtype for ") +
                dtypeName(tensor.dtype));
  std::string dict = std::string("{'descr': '") + descrOf(tensor.dtype) +
                     "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < tensor.shape.size(); ++i)
    dict +=
        std::to_string(tensor.shape[i]) +
        (tensor.shape.size() == 1 || i + 1 < tensor.shape.size() ? ", " : "");
  if (tensor.shape.size() == 1)
    dict.pop_back(); // "(5,)" rather than "(5, )"
  dict += "), }";
  // Pad with spaces and a final newline so that the data starts 64-aligned.
  size_t total = kMagicSize + 4 + dict.size() + 1;
  size_t padded = (total + 63) / 64 * 64;
  dict.append(padded - total, ' ');
  dict += '\n';
  if (dict.size() > 0xffff)
    return fail("header too long for format 1.0");

  std::string out(kMagic, kMagicSize);
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>((dict.size() >> 8) & 0xff);
  out += dict;

  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return fail(std::string("cannot create ") + tmp + ": " +
                std::strerror(errno));
  auto writeAll = [fd](const void *data, size_t size) {
    const char *p = static_cast<const char *>(data);
    while (size > 0) {
      ssize_t n = ::write(fd, p, size);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return false;
      p += n;
      size -= static_cast<size_t>(n);
    }
    return true;
  };
  bool ok = writeAll(out.data(), out.size()) &&
            writeAll(tensor.bytes.data(), tensor.bytes.size()) &&
            ::fsync(fd) == 0;
  int savedErrno = errno;
  ok = (::close(fd) == 0) && ok;
  if (!ok) {
    ::unlink(tmp.c_str());
    return fail(std::string("write failed: ") + std::strerror(savedErrno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    savedErrno = errno;
    ::unlink(tmp.c_str());
    return fail(std::string("cannot rename ") + tmp + ": " +
                std::strerror(savedErrno));
  }
  return Status::ok();
}

std::string sanitizeFileName(const std::string &name) {
  std::string out = name;
  for (char &c : out) {
    bool keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!keep)
      c = '_';
  }
  return out;
}

} // namespace cleave::rt

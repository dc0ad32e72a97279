//===- TorchLoader.cpp - Loads the TorchScript plugin on demand -----------===//
//
// The TorchScript translator lives in libcleave_torchscript.so (it links
// libtorch); cleave loads it only when it is given a .pt model, and runs it
// in a child process: libtorch's archive reader is not hardened against
// hostile input (it dereferences uninitialised memory on some mutated
// archives), and a crash there must reach the user as one error line, not
// a core dump.
//
//===----------------------------------------------------------------------===//

#include "cleave/Import/TorchImporter.h"

#include "onnx/onnx_pb.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <fcntl.h>
#include <new>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

using namespace mlir;
using namespace mlir::cleave;

namespace {

using Entry = int (*)(const char *, const char *, char **, size_t *, char **);

/// BINDIR/../lib/libcleave_torchscript.so, beside the running binary;
/// $CLEAVE_TORCHSCRIPT_PLUGIN when set (the Python package sets it: its
/// running binary is the interpreter).
std::string pluginPath() {
  if (const char *env = std::getenv("CLEAVE_TORCHSCRIPT_PLUGIN"); env && *env)
    return env;
  std::string exe = llvm::sys::fs::getMainExecutable(
      nullptr, reinterpret_cast<void *>(&pluginPath));
  llvm::SmallString<256> path(
      llvm::sys::path::parent_path(llvm::sys::path::parent_path(exe)));
  llvm::sys::path::append(path, "lib", "libcleave_torchscript.so");
  return std::string(path);
}

/// Opens the plugin and finds \p symbol; null with \p error on failure.
void *pluginSymbol(const char *symbol, const std::string &model,
                   std::string &error) {
  std::string plugin = pluginPath();
  if (!llvm::sys::fs::exists(plugin)) {
    error = "'" + model +
            "' is a TorchScript module, and this cleave was built without "
            "libtorch (install Debian's libtorch-dev and rebuild)";
    return nullptr;
  }
  void *handle = ::dlopen(plugin.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    error = "cannot load the TorchScript front end '" + plugin +
            "': " + ::dlerror();
    return nullptr;
  }
  void *entry = ::dlsym(handle, symbol);
  if (!entry)
    error = "'" + plugin + "' is not Cleave's TorchScript front end";
  return entry;
}

/// How a child process ended, and what it wrote to its pipe.
struct ChildResult {
  int status = 0; ///< as waitpid reports it
  std::string payload;
};

/// Runs \p work in a forked child, which writes \p work's string to a pipe
/// and exits with its return value. False (errno set) if no child could be
/// started.
bool runInChild(llvm::function_ref<int(std::string &)> work,
                ChildResult &result) {
  int fds[2];
  if (::pipe(fds) != 0)
    return false;
  std::fflush(nullptr); // buffered output must not be written twice
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return false;
  }
  if (pid == 0) {
    ::close(fds[0]);
    // The parent's crash reporting (LLVM's stack dump, its out-of-memory
    // new-handler that aborts) would speak for a child whose death the
    // parent words: a failed allocation throws, a fatal signal just ends it.
    std::set_new_handler(nullptr);
    for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP})
      std::signal(sig, SIG_DFL);
    std::string out;
    int code = work(out);
    for (size_t at = 0; at < out.size();) {
      ssize_t n = ::write(fds[1], out.data() + at, out.size() - at);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        ::_exit(3);
      at += static_cast<size_t>(n);
    }
    std::fflush(nullptr);
    ::_exit(code); // no atexit handlers: they belong to the parent
  }
  ::close(fds[1]);
  char buffer[1 << 16];
  for (;;) {
    ssize_t n = ::read(fds[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    result.payload.append(buffer, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  while (::waitpid(pid, &result.status, 0) < 0 && errno == EINTR) {
  }
  return true;
}

/// The message for a child that did not exit normally.
std::string childDied(const std::string &path, int status) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return "libtorch crashed reading '" + path + "' (signal " +
           std::to_string(sig) + ", " + ::strsignal(sig) +
           "): the TorchScript archive is malformed";
  }
  return "the TorchScript front end failed on '" + path + "' (exit " +
         std::to_string(WEXITSTATUS(status)) + ")";
}

/// Reads \p size bytes at \p offset of \p f; false past the end.
bool readAt(std::FILE *f, uint64_t offset, void *out, size_t size) {
  return ::fseeko(f, static_cast<off_t>(offset), SEEK_SET) == 0 &&
         std::fread(out, 1, size, f) == size;
}

uint64_t le(const unsigned char *p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i)
    v = v << 8 | p[i];
  return v;
}

/// Checks what libtorch's zip reader (miniz) trusts before it reads a
/// record: it allocates each record's declared size first, so a header
/// that claims gigabytes in a small file would be a memory bomb (a libFuzzer
/// finding). Every record of the central directory must fit in the file as
/// stored (torch.jit.save's way) or as deflate could expand it (at most
/// 1032:1). Returns the first problem, or "" when the directory is sound.
std::string zipDirectoryProblem(std::FILE *f, uint64_t maxInflated) {
  if (::fseeko(f, 0, SEEK_END) != 0)
    return "cannot be read";
  uint64_t fileSize = static_cast<uint64_t>(::ftello(f));
  // The end-of-directory record: 22 bytes and a comment of up to 64 KiB.
  uint64_t tail = std::min<uint64_t>(fileSize, 22 + 65535);
  std::vector<unsigned char> buf(tail);
  if (tail < 22 || !readAt(f, fileSize - tail, buf.data(), tail))
    return "has no zip directory";
  int64_t eocd = -1;
  for (int64_t i = static_cast<int64_t>(tail) - 22; i >= 0 && eocd < 0; --i)
    if (le(&buf[i], 4) == 0x06054b50)
      eocd = i;
  if (eocd < 0)
    return "has no zip directory";
  const unsigned char *e = &buf[eocd];
  uint64_t entries = le(e + 10, 2), cdSize = le(e + 12, 4),
           cdOffset = le(e + 16, 4);
  uint64_t eocdAt = fileSize - tail + static_cast<uint64_t>(eocd);
  // miniz reads the zip64 record whenever its locator is there, whatever
  // the 32-bit record says: so must the check, or a second directory would
  // pass unseen.
  unsigned char loc[20];
  bool zip64 = eocdAt >= 20 && readAt(f, eocdAt - 20, loc, 20) &&
               le(loc, 4) == 0x07064b50;
  if (zip64 || entries == 0xFFFF || cdSize == 0xFFFFFFFF ||
      cdOffset == 0xFFFFFFFF) {
    unsigned char z[56];
    if (!zip64 || !readAt(f, le(loc + 8, 8), z, 56) || le(z, 4) != 0x06064b50)
      return "has a malformed zip64 directory";
    entries = le(z + 32, 8);
    cdSize = le(z + 40, 8);
    cdOffset = le(z + 48, 8);
  }
  if (cdOffset > fileSize || cdSize > fileSize - cdOffset ||
      entries > cdSize / 46)
    return "has a zip directory that does not fit in the file";
  std::vector<unsigned char> cd(cdSize);
  if (cdSize && !readAt(f, cdOffset, cd.data(), cdSize))
    return "cannot be read";
  if (maxInflated == 0)
    maxInflated = std::max<uint64_t>(
        uint64_t(1) << 30,
        fileSize > (uint64_t(1) << 57) ? UINT64_MAX : fileSize * 64);
  uint64_t inflated = 0;
  size_t at = 0;
  for (uint64_t n = 0; n < entries; ++n) {
    if (cdSize - at < 46 || le(&cd[at], 4) != 0x02014b50)
      return "has a malformed zip directory entry";
    const unsigned char *c = &cd[at];
    uint64_t method = le(c + 10, 2), comp = le(c + 20, 4),
             uncomp = le(c + 24, 4), nameLen = le(c + 28, 2),
             extraLen = le(c + 30, 2), commentLen = le(c + 32, 2),
             local = le(c + 42, 4);
    if (cdSize - at - 46 < nameLen + extraLen + commentLen)
      return "has a malformed zip directory entry";
    std::string name(reinterpret_cast<const char *>(c + 46), nameLen);
    // zip64: the fields saturated at 0xFFFFFFFF follow in the extra field,
    // in this order.
    for (size_t x = 0; x + 4 <= extraLen;) {
      const unsigned char *h = c + 46 + nameLen + x;
      uint64_t id = le(h, 2), len = le(h + 2, 2);
      if (x + 4 + len > extraLen)
        return "has a malformed zip directory entry";
      if (id == 0x0001) {
        const unsigned char *v = h + 4, *end = h + 4 + len;
        for (uint64_t *field : {&uncomp, &comp, &local}) {
          if (*field != 0xFFFFFFFF)
            continue;
          if (end - v < 8)
            return "has a malformed zip64 entry";
          *field = le(v, 8);
          v += 8;
        }
        break; // miniz reads the first zip64 field only
      }
      x += 4 + len;
    }
    if (method != 0 && method != 8)
      return "compresses record '" + name + "' with zip method " +
             std::to_string(method) + ", which libtorch cannot read";
    bool fits = local <= cdOffset && comp <= cdOffset - local &&
                (method == 0 ? uncomp == comp : uncomp / 1032 <= comp + 1);
    if (!fits)
      return "has a record '" + name + "' that claims " +
             std::to_string(uncomp) + " bytes (" + std::to_string(comp) +
             " stored) in a file of " + std::to_string(fileSize);
    // Each record may be plausible and all of them together a bomb (four
    // records of 2 GB in 8 MB): libtorch inflates every one it reads.
    if (__builtin_add_overflow(inflated, uncomp, &inflated) ||
        inflated > maxInflated)
      return "inflates to more than " + std::to_string(maxInflated) +
             " bytes in all (" + std::to_string(fileSize) +
             " stored; --max-archive-bytes raises the limit)";
    at += 46 + nameLen + extraLen + commentLen;
  }
  return "";
}

/// Refuses what is not a TorchScript archive, or one whose zip directory
/// libtorch must not be given (zipDirectoryProblem), with one error.
bool checkArchive(const std::string &path, std::string &error,
                  uint64_t maxInflated = 0) {
  std::FILE *f = std::fopen(path.c_str(), "rb");
  if (!f)
    return true; // libtorch words the missing file
  // torch.jit.save writes a zip archive: anything else (an ONNX file given
  // a .pt name, a pickled state_dict of old torch.save) is named as such
  // before libtorch words it as a zip reader's complaint.
  char magic[4] = {0, 0, 0, 0};
  size_t got = std::fread(magic, 1, sizeof magic, f);
  if (got != sizeof magic || std::memcmp(magic, "PK\x03\x04", 4)) {
    std::fclose(f);
    error = "'" + path +
            "' is not a TorchScript module (torch.jit.save writes a zip "
            "archive; an ONNX model must be named .onnx)";
    return false;
  }
  std::string problem = zipDirectoryProblem(f, maxInflated);
  std::fclose(f);
  if (problem.empty())
    return true;
  error = "'" + path + "' is a malformed TorchScript archive: it " + problem;
  return false;
}

} // namespace

bool mlir::cleave::libtorchSurvivesLoading(const std::string &path) {
  // An archive the loader refuses never reaches libtorch.
  std::string refused;
  if (!checkArchive(path, refused))
    return true;
  ChildResult child;
  if (!runInChild(
          [&](std::string &) {
            // The child's sanitizer report is not a finding: quiet it.
            int null = ::open("/dev/null", O_WRONLY);
            if (null >= 0)
              ::dup2(null, 2);
            std::string error;
            auto probe = reinterpret_cast<int (*)(const char *)>(
                pluginSymbol("cleave_torchscript_probe", path, error));
            return probe ? probe(path.c_str()) : 0;
          },
          child))
    return true;
  // A sanitizer's or libFuzzer's own abort exits non-zero without a signal.
  return WIFEXITED(child.status) && WEXITSTATUS(child.status) == 0;
}

std::unique_ptr<OnnxModel>
mlir::cleave::loadTorchScript(MLIRContext *, const std::string &path,
                              const std::map<std::string, InputSpec> &inputs,
                              std::string &error, TorchIsolation isolation,
                              uint64_t maxArchiveBytes) {
  if (!checkArchive(path, error, maxArchiveBytes))
    return nullptr;
  std::string specs;
  for (const auto &[name, spec] : inputs) {
    llvm::raw_string_ostream os(specs);
    os << name << "=";
    for (size_t i = 0; i < spec.shape.size(); ++i)
      os << (i ? "x" : "") << spec.shape[i];
    if (spec.elementType) {
      Type t = spec.elementType;
      os << "x"
         << (t.isInteger(64)   ? "i64"
             : t.isInteger(32) ? "i32"
             : t.isInteger(1)  ? "bool"
                               : "f32");
    }
    os << ";";
  }
  // In the child: 'M' + message, or 'B' + the serialized model.
  auto translate = [&](std::string &out) {
    auto entry = reinterpret_cast<Entry>(
        pluginSymbol("cleave_torchscript_to_onnx", path, out));
    if (!entry) {
      out = "M" + out;
      return 1;
    }
    char *bytes = nullptr, *message = nullptr;
    size_t size = 0;
    if (entry(path.c_str(), specs.c_str(), &bytes, &size, &message) != 0) {
      out = std::string("M") +
            (message ? message : "the TorchScript front end failed");
      std::free(message);
      return 1;
    }
    out.reserve(size + 1);
    out = "B";
    out.append(bytes, size);
    std::free(bytes);
    return 0;
  };
  std::string reply;
  if (isolation == TorchIsolation::InProcess) {
    translate(reply);
  } else {
    ChildResult child;
    if (!runInChild(translate, child)) {
      error = "cannot start a process to read '" + path +
              "': " + std::strerror(errno);
      return nullptr;
    }
    if (!WIFEXITED(child.status) || child.payload.empty()) {
      error = childDied(path, child.status);
      return nullptr;
    }
    reply = std::move(child.payload);
  }
  if (reply.empty() || reply[0] != 'B') {
    error =
        reply.empty() ? "the TorchScript front end failed" : reply.substr(1);
    return nullptr;
  }
  size_t size = reply.size() - 1;
  auto proto = std::make_unique<onnx::ModelProto>();
  if (size > static_cast<size_t>(INT32_MAX)) {
    error = "'" + path +
            "': TorchScript models over 2 GB are not supported yet (their "
            "weights are carried in one protobuf)";
    return nullptr;
  }
  bool parsed = proto->ParseFromArray(reply.data() + 1, static_cast<int>(size));
  if (!parsed) {
    error = "the TorchScript front end returned no valid model";
    return nullptr;
  }
  return OnnxModel::fromProto(std::move(proto), path);
}

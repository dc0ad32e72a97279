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

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <fcntl.h>
#include <new>
#include <sys/wait.h>
#include <unistd.h>

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

} // namespace

bool mlir::cleave::libtorchSurvivesLoading(const std::string &path) {
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
                              std::string &error, TorchIsolation isolation) {
  // torch.jit.save writes a zip archive: anything else (an ONNX file given
  // a .pt name, a pickled state_dict of old torch.save) is named as such
  // before libtorch words it as a zip reader's complaint.
  {
    char magic[4] = {0, 0, 0, 0};
    std::FILE *f = std::fopen(path.c_str(), "rb");
    size_t got = f ? std::fread(magic, 1, sizeof magic, f) : 0;
    if (f)
      std::fclose(f);
    if (f && (got != sizeof magic || std::memcmp(magic, "PK\x03\x04", 4))) {
      error = "'" + path +
              "' is not a TorchScript module (torch.jit.save writes a zip "
              "archive; an ONNX model must be named .onnx)";
      return nullptr;
    }
  }
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

//===- TorchLoader.cpp - Loads the TorchScript plugin on demand -----------===//
//
// The TorchScript translator lives in libcleave_torchscript.so (it links
// libtorch); cleave loads it only when it is given a .pt model.
//
//===----------------------------------------------------------------------===//

#include "cleave/Import/TorchImporter.h"

#include "onnx/onnx_pb.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>

using namespace mlir;
using namespace mlir::cleave;

namespace {

using Entry = int (*)(const char *, const char *, char **, size_t *, char **);

/// BINDIR/../lib/libcleave_torchscript.so, beside the running binary.
std::string pluginPath() {
  std::string exe = llvm::sys::fs::getMainExecutable(
      nullptr, reinterpret_cast<void *>(&pluginPath));
  llvm::SmallString<256> path(
      llvm::sys::path::parent_path(llvm::sys::path::parent_path(exe)));
  llvm::sys::path::append(path, "lib", "libcleave_torchscript.so");
  return std::string(path);
}

} // namespace

std::unique_ptr<OnnxModel>
mlir::cleave::loadTorchScript(MLIRContext *, const std::string &path,
                              const std::map<std::string, InputSpec> &inputs,
                              std::string &error) {
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
  std::string plugin = pluginPath();
  if (!llvm::sys::fs::exists(plugin)) {
    error = "'" + path +
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
  auto entry =
      reinterpret_cast<Entry>(::dlsym(handle, "cleave_torchscript_to_onnx"));
  if (!entry) {
    error = "'" + plugin + "' is not Cleave's TorchScript front end";
    return nullptr;
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
  char *bytes = nullptr, *message = nullptr;
  size_t size = 0;
  if (entry(path.c_str(), specs.c_str(), &bytes, &size, &message) != 0) {
    error = message ? message : "the TorchScript front end failed";
    std::free(message);
    return nullptr;
  }
  auto proto = std::make_unique<onnx::ModelProto>();
  if (size > static_cast<size_t>(INT32_MAX)) {
    std::free(bytes);
    error = "'" + path +
            "': TorchScript models over 2 GB are not supported yet (their "
            "weights are carried in one protobuf)";
    return nullptr;
  }
  bool parsed = proto->ParseFromArray(bytes, static_cast<int>(size));
  std::free(bytes);
  if (!parsed) {
    error = "the TorchScript front end returned no valid model";
    return nullptr;
  }
  return OnnxModel::fromProto(std::move(proto), path);
}

//===- SafetensorsFuzzer.cpp - libFuzzer: safetensors bytes -> tensors ----===//
//
// Weights given with --weights, bundle weights and checkpoint files: the
// header is parsed (with and without a recorded digest) and every tensor
// the file declares is read. A tensor the reader returns must have the
// bytes its shape and dtype need, and every byte range must lie in the file.
//
//===----------------------------------------------------------------------===//

#include "FuzzSupport.h"
#include "cleave/runtime/safetensors.h"

namespace rt = cleave::rt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const std::string path = [] {
    cleave::fuzz::removeScratchAtExit();
    return cleave::fuzz::scratchDir() + "/w.safetensors";
  }();
  cleave::fuzz::writeFile(path, data, size);
  std::unique_ptr<rt::SafetensorsFile> file;
  // The recorded digest of the bytes themselves: the checked open must
  // then accept exactly what the unchecked one accepts.
  uint32_t crc = rt::crc32Update(0, data, size);
  rt::Status checked = rt::SafetensorsFile::open(path, &file, size, crc);
  rt::Status plain = rt::SafetensorsFile::open(path, &file);
  if (bool(checked) != bool(plain))
    std::abort();
  if (!plain)
    return 0;
  for (const rt::TensorInfo &info : file->tensors()) {
    if (info.begin > info.end || info.end > size)
      std::abort();
    rt::HostTensor t;
    if (!file->read(info, &t))
      continue;
    if (t.bytes.size() != info.bytes() ||
        t.bytes.size() != size_t(t.numElements()) * rt::dtypeSize(t.dtype))
      std::abort();
  }
  return 0;
}

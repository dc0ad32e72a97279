//===- NpyFuzzer.cpp - libFuzzer: .npy bytes -> a host tensor -------------===//
//
// `--inputs DIR` arrays: readNpy on arbitrary bytes. An array it accepts
// must hold exactly the bytes its header declares.
//
//===----------------------------------------------------------------------===//

#include "FuzzSupport.h"
#include "cleave/runtime/executor.h"
#include "cleave/runtime/npy.h"

namespace rt = cleave::rt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const std::string path = [] {
    cleave::fuzz::removeScratchAtExit();
    return cleave::fuzz::scratchDir() + "/x.npy";
  }();
  cleave::fuzz::writeFile(path, data, size);
  rt::HostTensor t;
  if (!rt::readNpy(path, &t))
    return 0;
  if (t.numElements() < 0 ||
      t.bytes.size() != size_t(t.numElements()) * rt::dtypeSize(t.dtype))
    std::abort();
  return 0;
}

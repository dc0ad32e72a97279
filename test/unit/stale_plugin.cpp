//===- stale_plugin.cpp - A CUDA plugin of another interface version ------===//
//
// Exports the CUDA plugin's entry points but reports an interface version
// this cleave does not speak: test/e2e/plugin-abi.test checks that cleave
// refuses it by its version, before calling anything else.
//
//===----------------------------------------------------------------------===//

#include "cleave/runtime/backend_plugin.h"

#include <cstdio>

#define EXPORT extern "C" __attribute__((visibility("default")))

EXPORT uint32_t cleave_cuda_abi_version(void) {
  return CLEAVE_PLUGIN_ABI_VERSION + 1000;
}

EXPORT int cleave_cuda_probe(char *reason, size_t size) {
  std::snprintf(reason, size, "the stale plugin's probe must not be called");
  return 1;
}

EXPORT int cleave_cuda_create(const cleave_program *, const cleave_mesh *,
                              int32_t, cleave_runner *, char *error,
                              size_t size) {
  std::snprintf(error, size, "the stale plugin's create must not be called");
  return 1;
}

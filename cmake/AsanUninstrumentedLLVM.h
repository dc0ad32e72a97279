// Force-included into every C++ file of the sanitized build (CLEAVE_SANITIZE).
//
// Debian's LLVM and MLIR libraries are not built with AddressSanitizer. Under
// ASan, LLVM's headers (Allocator.h, Recycler.h, FunctionExtras.h) poison the
// slabs of a BumpPtrAllocator and unpoison each allocation; when such an
// inline function lands in our instrumented code while its partner runs
// uninstrumented inside libMLIR, the library writes to memory our copy
// poisoned, a false "use-after-poison" (seen at the first MLIRContext: the
// builtin dialect's type registration). The headers' manual poisoning is
// therefore made a no-op; ASan's own instrumentation of every load and
// store, heap redzones and use-after-free detection are untouched. This is
// the one place the sanitized build departs from a plain ASan build.
#ifndef CLEAVE_ASAN_UNINSTRUMENTED_LLVM_H
#define CLEAVE_ASAN_UNINSTRUMENTED_LLVM_H
#include <sanitizer/asan_interface.h>
#define __asan_poison_memory_region(p, size) ((void)(p), (void)(size))
#define __asan_unpoison_memory_region(p, size) ((void)(p), (void)(size))
#endif

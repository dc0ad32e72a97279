//===- FuzzSupport.h - What every libFuzzer harness shares ------*- C++ -*-===//
//
// The harnesses feed the bytes through the very path a user's file takes:
// each input is written to a scratch file (on tmpfs where there is one) and
// handed to the reader by name, so the file helpers, size checks and error
// paths are all under test, not a parse-from-memory shortcut that no command
// uses.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_TEST_FUZZ_FUZZSUPPORT_H
#define CLEAVE_TEST_FUZZ_FUZZSUPPORT_H

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

namespace cleave::fuzz {

/// A folder of this process's own, made once: /dev/shm/cleave-fuzz-PID (or
/// under TMPDIR).
inline const std::string &scratchDir() {
  // Never destroyed: the exit handler that removes it runs after statics
  // made later than its registration are gone.
  static const std::string &dir = *new std::string([] {
    const char *base = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm"
                       : std::getenv("TMPDIR")         ? std::getenv("TMPDIR")
                                                       : "/tmp";
    std::string d = std::string(base) + "/cleave-fuzz-" +
                    std::to_string(static_cast<long>(::getpid()));
    std::string cmd = "mkdir -p '" + d + "'";
    if (std::system(cmd.c_str()) != 0)
      std::abort();
    return d;
  }());
  return dir;
}

/// Writes \p size bytes to \p path (replacing it); aborts if it cannot, as
/// the harness is then testing nothing.
inline void writeFile(const std::string &path, const uint8_t *data,
                      size_t size) {
  std::FILE *f = std::fopen(path.c_str(), "wb");
  if (!f || (size && std::fwrite(data, 1, size, f) != size) ||
      std::fclose(f) != 0)
    std::abort();
}

/// The scratch folder is removed at exit.
inline void removeScratchAtExit() {
  std::atexit([] {
    std::string cmd = "rm -rf '" + scratchDir() + "'";
    (void)std::system(cmd.c_str());
  });
}

/// Caps on what a harness lets a fuzzed file make it allocate or run: a
/// file may legitimately declare a tensor of gigabytes, which the reader
/// must then read (or refuse) - the harness only keeps the fuzzer from
/// spending its memory limit on legitimate work.
constexpr uint64_t kMaxBytes = 64ull << 20;

/// Whether \p name, a file name an accepted plan or checkpoint index
/// stores, stays in its folder: relative, not empty, no ".." part. Written
/// here apart from the loader's own check (checkStoredName), which the
/// harnesses hold to it: a loader that accepts another name would let a
/// file from someone else read any file.
inline bool staysInside(const std::string &name) {
  if (name.empty() || name[0] == '/' || name[0] == '~')
    return false;
  size_t at = 0;
  while (at <= name.size()) {
    size_t end = name.find('/', at);
    if (end == std::string::npos)
      end = name.size();
    if (name.compare(at, end - at, "..") == 0)
      return false;
    at = end + 1;
  }
  return true;
}

/// Aborts (a finding) when an accepted store \p msg (a plan::Plan or
/// plan::Checkpoint) names a file outside its folder.
template <typename Store> void checkStoredNamesStayInside(const Store &msg) {
  bool inside = msg.model_file().empty() || staysInside(msg.model_file());
  for (const auto &d : msg.files())
    inside = inside && staysInside(d.path());
  for (const auto &t : msg.tensors())
    for (const auto &s : t.slices())
      inside = inside && staysInside(s.file());
  if (!inside) {
    std::fprintf(stderr, "accepted a store naming a file outside its folder\n");
    std::abort();
  }
}

} // namespace cleave::fuzz

#endif // CLEAVE_TEST_FUZZ_FUZZSUPPORT_H

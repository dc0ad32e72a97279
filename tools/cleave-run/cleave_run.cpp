//===- cleave_run.cpp - Runs compiled bundles without the compiler --------===//
//
// `cleave-run BUNDLE [flags]` is `cleave run BUNDLE [flags]` linked against
// the runtime alone: no MLIR or LLVM, so it can be deployed to (or carried
// onto) machines that only run bundles compiled elsewhere, such as a GPU
// node. The flags are cleave run's bundle flags, with the same meaning.
//
//===----------------------------------------------------------------------===//

#include "cleave/runtime/run_flags.h"
#include "cleave/runtime/trainer.h"

#include <unistd.h>

#include <climits>
#include <iostream>
#include <string>
#include <vector>

namespace {

std::string usage() {
  return cleave::rt::runFlagsUsage("usage: cleave-run BUNDLE") +
         "Runs a bundle compiled by `cleave compile`, like `cleave run "
         "BUNDLE`.\n";
}

} // namespace

int main(int argc, char **argv) {
  cleave::rt::RunBundleArgs args;
  args.argv.assign(argv, argv + argc);
  char exe[PATH_MAX];
  if (ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1); n > 0)
    args.argv[0] = std::string(exe, static_cast<size_t>(n));
  std::vector<std::string> words(argv + 1, argv + argc);
  for (const std::string &word : words) {
    if (word == "-h" || word == "--help") {
      std::cout << usage();
      return 0;
    }
  }
  std::string error;
  if (cleave::rt::parseRunFlags(words, args, &error) && args.bundle.empty())
    error = "give the BUNDLE to run";
  if (!error.empty()) {
    std::cerr << "cleave: error: " << error << "\n" << usage();
    return 2;
  }
  return cleave::rt::runBundle(args);
}

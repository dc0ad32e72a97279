//===- cleave_run.cpp - Runs compiled bundles without the compiler --------===//
//
// `cleave-run BUNDLE [flags]` is `cleave run BUNDLE [flags]` linked against
// the runtime alone: no MLIR or LLVM, so it can be deployed to (or carried
// onto) machines that only run bundles compiled elsewhere, such as a GPU
// node. The flags are cleave run's bundle flags, with the same meaning.
//
//===----------------------------------------------------------------------===//

#include "cleave/runtime/trainer.h"

#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <string>

namespace {

constexpr const char *kUsage =
    "usage: cleave-run BUNDLE [--steps N] [--inputs DIR | --text FILE]\n"
    "         [--batch-from-arrays] [--shuffle] [--seed N] [--dump DIR]\n"
    "         [--log-every N] [--metrics FILE] [--progress auto|live|lines]\n"
    "         [--checkpoint DIR] [--save-every N] [--keep-checkpoints N]\n"
    "         [--resume DIR] [--backend cpu|cuda|auto] [--precision f32|bf16]\n"
    "         [--ranks N] [--threads] [--timeout SECONDS] [--random-weights]\n"
    "         [--profile] [--trace FILE]\n"
    "Runs a bundle compiled by `cleave compile`, like `cleave run BUNDLE`.\n";

int usageError(const std::string &message) {
  std::cerr << "cleave: error: " << message << "\n" << kUsage;
  return 2;
}

bool parseInt(const std::string &text, int64_t *out) {
  char *end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end)
    return false;
  *out = v;
  return true;
}

} // namespace

int main(int argc, char **argv) {
  cleave::rt::RunBundleArgs args;
  args.argv.assign(argv, argv + argc);
  char exe[PATH_MAX];
  if (ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1); n > 0)
    args.argv[0] = std::string(exe, static_cast<size_t>(n));

  std::map<std::string, std::function<bool(const std::string &)>> valued = {
      {"steps", [&](auto v) { return parseInt(v, &args.steps); }},
      {"inputs", [&](auto v) { return args.data.inputsDir = v, true; }},
      {"text", [&](auto v) { return args.data.textFile = v, true; }},
      {"seed",
       [&](auto v) {
         int64_t s = 0;
         bool ok = parseInt(v, &s);
         args.data.seed = static_cast<uint64_t>(s);
         return ok;
       }},
      {"dump", [&](auto v) { return args.dumpDir = v, true; }},
      {"log-every", [&](auto v) { return parseInt(v, &args.logEvery); }},
      {"metrics", [&](auto v) { return args.metricsFile = v, true; }},
      {"progress", [&](auto v) { return args.progress = v, true; }},
      {"checkpoint", [&](auto v) { return args.checkpointDir = v, true; }},
      {"save-every", [&](auto v) { return parseInt(v, &args.saveEvery); }},
      {"keep-checkpoints",
       [&](auto v) { return parseInt(v, &args.keepCheckpoints); }},
      {"resume", [&](auto v) { return args.resumeFrom = v, true; }},
      {"backend", [&](auto v) { return args.backend = v, true; }},
      {"precision", [&](auto v) { return args.precision = v, true; }},
      {"ranks", [&](auto v) { return parseInt(v, &args.ranks); }},
      {"trace", [&](auto v) { return args.traceFile = v, !v.empty(); }},
      {"timeout",
       [&](auto v) {
         char *end = nullptr;
         args.timeoutSeconds = std::strtod(v.c_str(), &end);
         return !v.empty() && !*end && args.timeoutSeconds > 0;
       }},
  };
  std::map<std::string, bool *> flags = {
      {"batch-from-arrays", &args.data.batchFromArrays},
      {"shuffle", &args.data.shuffle},
      {"random-weights", &args.randomWeights},
      {"threads", &args.threads},
      {"profile", &args.profile},
  };
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      return 0;
    }
    if (arg.rfind("--", 0) != 0) {
      if (!args.bundle.empty())
        return usageError("one BUNDLE only ('" + args.bundle + "' and '" + arg +
                          "')");
      args.bundle = arg;
      continue;
    }
    std::string name = arg.substr(2), value;
    bool hasValue = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      hasValue = true;
    }
    if (auto it = flags.find(name); it != flags.end() && !hasValue) {
      *it->second = true;
      continue;
    }
    auto it = valued.find(name);
    if (it == valued.end())
      return usageError("unknown flag '" + arg + "'");
    if (!hasValue) {
      if (i + 1 >= argc)
        return usageError("--" + name + " needs a value");
      value = argv[++i];
    }
    if (!it->second(value))
      return usageError("bad value '" + value + "' for --" + name);
  }
  if (args.bundle.empty())
    return usageError("give the BUNDLE to run");
  return cleave::rt::runBundle(args);
}

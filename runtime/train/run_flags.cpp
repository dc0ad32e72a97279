//===- run_flags.cpp - The flags of cleave run and cleave-run -------------===//

#include "cleave/runtime/run_flags.h"

#include <cstdlib>

namespace cleave::rt {
namespace {

bool parseInt(const std::string &text, int64_t *out) {
  char *end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end)
    return false;
  *out = v;
  return true;
}

bool setString(std::string *field, const std::string &value) {
  *field = value;
  return true;
}

// Captureless lambdas, one per field: the table stays plain data.
#define CLEAVE_INT(field)                                                      \
  [](RunBundleArgs &a, const std::string &v) { return parseInt(v, &a.field); }
#define CLEAVE_STRING(field)                                                   \
  [](RunBundleArgs &a, const std::string &v) { return setString(&a.field, v); }
#define CLEAVE_SWITCH(field)                                                   \
  [](RunBundleArgs &a, const std::string &) { return a.field = true; }

const std::vector<RunFlag> kFlags = {
    {"steps", "N", "Training steps to run", CLEAVE_INT(steps)},
    {"inputs", "DIR", "Directory of NAME.npy inputs",
     CLEAVE_STRING(data.inputsDir)},
    {"text", "FILE",
     "Train a byte-level language model on this file's bytes (ids and "
     "next-byte labels)",
     CLEAVE_STRING(data.textFile)},
    {"batch-from-arrays", "",
     "--inputs holds one array per input; batches are runs of its rows "
     "(dimension 0)",
     CLEAVE_SWITCH(data.batchFromArrays)},
    {"shuffle", "", "Shuffle the samples every epoch (with --seed)",
     CLEAVE_SWITCH(data.shuffle)},
    {"seed", "N", "Seed of the data's shuffle",
     [](RunBundleArgs &a, const std::string &v) {
       int64_t s = 0;
       if (!parseInt(v, &s) || s < 0)
         return false;
       a.data.seed = static_cast<uint64_t>(s);
       return true;
     }},
    {"dump", "DIR", "Directory for NAME.npy outputs", CLEAVE_STRING(dumpDir)},
    {"log-every", "N",
     "Progress line every N steps (default: about 20 lines a run)",
     CLEAVE_INT(logEvery)},
    {"metrics", "FILE", "Write a JSON line per step here",
     CLEAVE_STRING(metricsFile)},
    {"progress", "auto|live|lines",
     "One line updated in place (default on a terminal) or a line every "
     "--log-every steps",
     CLEAVE_STRING(progress)},
    {"checkpoint", "DIR", "Write checkpoints (step-N directories) here",
     CLEAVE_STRING(checkpointDir)},
    {"save-every", "N", "Checkpoint every N steps (and after the last)",
     CLEAVE_INT(saveEvery)},
    {"keep-checkpoints", "N",
     "Keep only the newest N checkpoints (default: all)",
     CLEAVE_INT(keepCheckpoints)},
    {"resume", "DIR",
     "Continue from a checkpoint (a step directory, or a --checkpoint "
     "directory: its newest)",
     CLEAVE_STRING(resumeFrom)},
    {"backend", "cpu|cuda|auto",
     "Where the step runs (auto: CUDA when a GPU is present, else the CPU)",
     CLEAVE_STRING(backend)},
    {"precision", "f32|bf16",
     "bf16 matmuls with f32 master weights, optimizer state and reductions "
     "(CUDA)",
     CLEAVE_STRING(precision)},
    {"ranks", "N",
     "Processes to start (one per rank); default: one per rank of the "
     "bundle's mesh",
     CLEAVE_INT(ranks)},
    {"threads", "", "Run the ranks as threads of this process (no MPI)",
     CLEAVE_SWITCH(threads)},
    {"timeout", "SECONDS", "Seconds a rank waits for its peers (default 60)",
     [](RunBundleArgs &a, const std::string &v) {
       char *end = nullptr;
       double t = std::strtod(v.c_str(), &end);
       if (v.empty() || *end || !(t > 0))
         return false;
       a.timeoutSeconds = t;
       return true;
     }},
    {"eval", "",
     "Evaluate instead of training: the mean loss of the first --steps "
     "batches, the model in eval mode, no update (of a checkpoint with "
     "--resume)",
     CLEAVE_SWITCH(eval)},
    {"random-weights", "",
     "Train from seeded random parameters instead of the bundle's weights "
     "(benchmarks of --plan-only bundles)",
     CLEAVE_SWITCH(randomWeights)},
    {"profile", "",
     "Time every kernel; after the run, print where the steps after the "
     "first spent their time (by kernel kind, source block and op, with "
     "FLOP/s and bytes/s against this machine's)",
     CLEAVE_SWITCH(profile)},
    {"trace", "FILE",
     "Write every rank's kernels and collectives as a Chrome trace (open "
     "in ui.perfetto.dev)",
     [](RunBundleArgs &a, const std::string &v) {
       a.traceFile = v;
       return !v.empty();
     }},
};

#undef CLEAVE_INT
#undef CLEAVE_STRING
#undef CLEAVE_SWITCH

} // namespace

const std::vector<RunFlag> &runFlags() { return kFlags; }

const RunFlag *findRunFlag(const std::string &name) {
  for (const RunFlag &flag : kFlags)
    if (name == flag.name)
      return &flag;
  return nullptr;
}

bool parseRunFlags(const std::vector<std::string> &argv, RunBundleArgs &args,
                   std::string *error) {
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string &arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      if (!args.bundle.empty()) {
        *error = "one BUNDLE only ('" + args.bundle + "' and '" + arg + "')";
        return false;
      }
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
    const RunFlag *flag = findRunFlag(name);
    if (!flag || (flag->isSwitch() && hasValue)) {
      *error = "unknown flag '" + arg + "'";
      return false;
    }
    if (flag->isSwitch()) {
      value = "1";
    } else if (!hasValue) {
      if (i + 1 >= argv.size()) {
        *error = "--" + name + " needs a value";
        return false;
      }
      value = argv[++i];
    }
    if (!flag->set(args, value)) {
      *error = "bad value '" + value + "' for --" + name;
      return false;
    }
  }
  return true;
}

std::string runFlagsUsage(const std::string &prefix) {
  std::string out = prefix, line = prefix;
  for (const RunFlag &flag : kFlags) {
    std::string item =
        std::string(" [--") + flag.name +
        (flag.isSwitch() ? "" : std::string(" ") + flag.valueName) + "]";
    if (line.size() + item.size() > 79) {
      out += "\n        ";
      line = "        ";
    }
    out += item;
    line += item;
  }
  return out + "\n";
}

} // namespace cleave::rt

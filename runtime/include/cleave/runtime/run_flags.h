//===- run_flags.h - The flags of cleave run and cleave-run -----*- C++ -*-===//
//
// One table of the flags that run a bundle. `cleave run` (LLVM's option
// parser) registers an option per entry, `cleave-run` (no LLVM) parses argv
// with it; both set RunBundleArgs through the entry, so a flag, its value's
// check and its help exist once.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_RUN_FLAGS_H
#define CLEAVE_RUNTIME_RUN_FLAGS_H

#include "cleave/runtime/trainer.h"

#include <string>
#include <vector>

namespace cleave::rt {

/// One flag of a bundle's run.
struct RunFlag {
  /// Its name without the leading "--".
  const char *name;
  /// What its value is ("N", "DIR"); empty for a switch, which takes none.
  const char *valueName;
  const char *help;
  /// Sets the flag in \p args from \p value ("1" for a switch); false when
  /// the value is not one the flag takes.
  bool (*set)(RunBundleArgs &args, const std::string &value);

  bool isSwitch() const { return !*valueName; }
};

/// Every flag, in the order the usage lists them.
const std::vector<RunFlag> &runFlags();

/// The entry named \p name, or null.
const RunFlag *findRunFlag(const std::string &name);

/// argv (without the program's name) into \p args: a first word without
/// "--" is the bundle, `--name value`, `--name=value` and switches the flags.
/// On a mistake returns false with the one line to print in \p error.
bool parseRunFlags(const std::vector<std::string> &argv, RunBundleArgs &args,
                   std::string *error);

/// The flags as a usage line wrapped at 80 columns after \p prefix.
std::string runFlagsUsage(const std::string &prefix);

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_RUN_FLAGS_H

//===- Inspect.h - cleave inspect -------------------------------*- C++ -*-===//

#ifndef CLEAVE_DRIVER_INSPECT_H
#define CLEAVE_DRIVER_INSPECT_H

#include <string>

namespace cleave::driver {

/// Prints what \p bundle does (a table, or JSON); returns the exit status.
int runInspect(const std::string &bundle, bool json);

} // namespace cleave::driver

#endif // CLEAVE_DRIVER_INSPECT_H

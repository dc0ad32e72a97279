//===- files.h - Opening the files a user names -----------------*- C++ -*-===//
//
// Every file Cleave reads on a user's word (data, plans, checkpoints, .npy
// inputs) is opened here, so that a directory, a missing file, a file the
// user may not read or a FIFO (which would block forever) is one error
// that names it, never a crash or a hang.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_FILES_H
#define CLEAVE_RUNTIME_FILES_H

#include "cleave/runtime/executor.h"

#include <string>

namespace cleave::rt {

/// Reads all of regular file \p path into \p out. \p what says what the
/// file is to the user ("--text file"); the error is "cannot read WHAT
/// 'PATH': it is a directory" (or not found, permission denied, ...).
Status readWholeFile(const std::string &path, const std::string &what,
                     std::string *out);

/// Opens \p path for reading into \p fd, refusing anything but a regular
/// file; the open itself does not block (a FIFO would wait for a writer
/// forever). Errors as readWholeFile's.
Status openRegularFile(const std::string &path, const std::string &what,
                       int *fd);

/// Checks that \p path is a regular file that can be opened for reading.
Status checkReadable(const std::string &path, const std::string &what);

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_FILES_H

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

/// Checks that files can be made in folder \p dir (or, while it does not
/// exist, in its nearest existing ancestor, where it would be made): a
/// probe file is created and removed, so a read-only mount, an immutable
/// folder or a full inode table is found before the first step, not
/// after an hour of training. \p what names the flag ("--dump").
Status checkWritableDir(const std::string &dir, const std::string &what);

/// Checks \p name, a file name stored inside \p container (a bundle plan,
/// a checkpoint index) for \p entry ("the weights of rank 0"), by
/// onnxruntime's rule for external data: not empty, relative, no "..", no
/// leading "~". The file that stores a name may come from someone else and
/// must not make Cleave read, train from or hand back any other file.
Status checkStoredName(const std::string &name, const std::string &container,
                       const std::string &entry);

/// \p name (as checkStoredName) resolved inside folder \p dir: its real
/// path must lie in \p dir's real path (no symbolic link leading out). Sets
/// \p full to the joined path; opening it (openRegularFile) then refuses a
/// folder or a FIFO in the file's place.
Status resolveStoredName(const std::string &dir, const std::string &name,
                         const std::string &container, const std::string &entry,
                         std::string *full);

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_FILES_H

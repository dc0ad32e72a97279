//===- files.cpp - Opening the files a user names ---------------*- C++ -*-===//

#include "cleave/runtime/files.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace cleave::rt {

Status openRegularFile(const std::string &path, const std::string &what,
                       int *fd) {
  auto fail = [&](const std::string &why) {
    return Status::error("cannot read " + what + " '" + path + "': " + why);
  };
  *fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (*fd < 0)
    return fail(errno == ENOENT ? "no such file" : std::strerror(errno));
  struct stat st;
  if (::fstat(*fd, &st) != 0) {
    Status s = fail(std::strerror(errno));
    ::close(*fd);
    *fd = -1;
    return s;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(*fd);
    *fd = -1;
    return fail(S_ISDIR(st.st_mode) ? "it is a directory"
                                    : "it is not a regular file");
  }
  int flags = ::fcntl(*fd, F_GETFL);
  if (flags >= 0)
    (void)::fcntl(*fd, F_SETFL, flags & ~O_NONBLOCK);
  return Status::ok();
}

Status readWholeFile(const std::string &path, const std::string &what,
                     std::string *out) {
  int fd;
  if (Status s = openRegularFile(path, what, &fd); !s)
    return s;
  out->clear();
  char buffer[1 << 16];
  while (true) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      Status s = Status::error("cannot read " + what + " '" + path +
                               "': " + std::strerror(errno));
      ::close(fd);
      return s;
    }
    if (n == 0)
      break;
    out->append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return Status::ok();
}

Status checkReadable(const std::string &path, const std::string &what) {
  int fd;
  if (Status s = openRegularFile(path, what, &fd); !s)
    return s;
  ::close(fd);
  return Status::ok();
}

} // namespace cleave::rt

//===- files.cpp - Opening the files a user names ---------------*- C++ -*-===//

#include "cleave/runtime/files.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
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

Status checkWritableDir(const std::string &dir, const std::string &what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path at = dir.empty() ? fs::path(".") : fs::path(dir);
  while (!fs::exists(at, ec) && at.has_parent_path() && at.parent_path() != at)
    at = at.parent_path();
  if (!fs::exists(at, ec))
    at = ".";
  if (!fs::is_directory(at, ec))
    return Status::error(what + " '" + dir + "': '" + at.string() +
                         "' is not a directory");
  std::string probe = (at / ".cleave-probe-XXXXXX").string();
  int fd = ::mkstemp(probe.data());
  if (fd < 0)
    return Status::error(what + " '" + dir +
                         "' cannot be written: " + std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
  return Status::ok();
}

Status checkStoredName(const std::string &name, const std::string &container,
                       const std::string &entry) {
  auto refuse = [&](const std::string &why) {
    return Status::error(container + " names " + entry + " '" + name + "', " +
                         why);
  };
  if (name.empty())
    return refuse("which is empty");
  if (name.find('\0') != std::string::npos)
    return refuse("which holds a NUL byte");
  std::filesystem::path p(name);
  if (p.is_absolute() || name[0] == '~')
    return refuse("an absolute path: the files it lists must lie in its "
                  "folder");
  for (const std::filesystem::path &part : p)
    if (part == "..")
      return refuse("which leads out of its folder");
  return Status::ok();
}

Status resolveStoredName(const std::string &dir, const std::string &name,
                         const std::string &container, const std::string &entry,
                         std::string *full) {
  namespace fs = std::filesystem;
  if (Status s = checkStoredName(name, container, entry); !s)
    return s;
  std::error_code ec;
  fs::path folder = dir.empty() ? fs::path(".") : fs::path(dir);
  fs::path joined = folder / name;
  fs::path base = fs::canonical(folder, ec);
  if (ec)
    return Status::error("cannot read the folder of " + container + ": " +
                         ec.message());
  fs::path real = fs::canonical(joined, ec);
  if (ec)
    return Status::error(container + " is missing its file '" +
                         joined.string() + "'");
  if (real == base)
    return Status::error(container + " names " + entry + " '" + name +
                         "', which is its folder, not a file");
  std::string prefix = base.string();
  if (prefix.back() != '/')
    prefix += '/';
  if (real.string().rfind(prefix, 0) != 0)
    return Status::error(container + " names " + entry + " '" + name +
                         "', which a symbolic link leads out of its folder");
  *full = joined.string();
  return Status::ok();
}

} // namespace cleave::rt

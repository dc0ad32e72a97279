//===- launch.cpp - Starts the ranks of a run under mpirun ----------------===//

#include "cleave/runtime/comm.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace cleave::rt {

namespace {

/// The first executable `name` on PATH, or "".
std::string findOnPath(const std::string &name) {
  const char *env = std::getenv("PATH");
  std::string path = env ? env : "/usr/local/bin:/usr/bin:/bin";
  size_t begin = 0;
  while (begin <= path.size()) {
    size_t end = path.find(':', begin);
    if (end == std::string::npos)
      end = path.size();
    std::string dir = path.substr(begin, end - begin);
    if (dir.empty())
      dir = ".";
    std::string candidate = dir + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0)
      return candidate;
    begin = end + 1;
  }
  return "";
}

std::string formatSeconds(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", seconds);
  return buf;
}

/// waitpid that retries on EINTR; \p block false polls.
pid_t waitChild(pid_t pid, int *status, bool block) {
  for (;;) {
    pid_t r = ::waitpid(pid, status, block ? 0 : WNOHANG);
    if (r >= 0 || errno != EINTR)
      return r;
  }
}

/// Waits up to \p seconds for \p pid: 1 when it ended, 0 when it still
/// runs, -1 when it cannot be waited for.
int waitFor(pid_t pid, int *status, double seconds) {
  auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(seconds));
  for (;;) {
    pid_t r = waitChild(pid, status, /*block=*/false);
    if (r == pid)
      return 1;
    if (r < 0)
      return -1;
    if (std::chrono::steady_clock::now() >= deadline)
      return 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

} // namespace

Status launchRanks(const std::vector<std::string> &argv, int ranks,
                   double timeoutSeconds) {
  if (argv.empty())
    return Status::error("launching ranks: no program to run");
  if (ranks < 1)
    return Status::error("launching ranks: the rank count must be positive, "
                         "got " +
                         std::to_string(ranks));
  std::string mpirun = findOnPath("mpirun");
  if (mpirun.empty())
    return Status::error(
        "cannot launch " + std::to_string(ranks) +
        " ranks: mpirun was not found on PATH (install Open MPI, e.g. "
        "Debian's openmpi-bin, or run the ranks with your own launcher)");

  std::vector<std::string> args = {mpirun, "--oversubscribe", "--bind-to",
                                   "none"};
  if (::geteuid() == 0)
    args.push_back("--allow-run-as-root");
  // The ranks share the machine's cores: unless the user chose, each gets
  // its share of OpenMP/OpenBLAS threads (oversubscribed threads spin
  // against each other in every collective).
  if (!std::getenv("OMP_NUM_THREADS")) {
    unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    std::string threads =
        std::to_string(std::max(1u, cores / static_cast<unsigned>(ranks)));
    for (const char *var : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"}) {
      args.push_back("-x");
      args.push_back(std::string(var) + "=" + threads);
    }
  }
  args.push_back("-np");
  args.push_back(std::to_string(ranks));
  args.insert(args.end(), argv.begin(), argv.end());
  std::vector<char *> cargs;
  for (std::string &a : args)
    cargs.push_back(a.data());
  cargs.push_back(nullptr);

  // exec failures come back through a close-on-exec pipe.
  int pipeFds[2];
  if (::pipe2(pipeFds, O_CLOEXEC) != 0)
    return Status::error(std::string("launching ranks: pipe: ") +
                         std::strerror(errno));
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = ::fork();
  if (pid < 0) {
    int err = errno;
    ::close(pipeFds[0]);
    ::close(pipeFds[1]);
    return Status::error(std::string("launching ranks: fork: ") +
                         std::strerror(err));
  }
  if (pid == 0) {
    // mpirun (and with it every rank) goes when the launching cleave goes,
    // even when it is killed: no orphaned ranks.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    ::close(pipeFds[0]);
    ::execv(cargs[0], cargs.data());
    int err = errno;
    ssize_t ignored = ::write(pipeFds[1], &err, sizeof err);
    (void)ignored;
    ::_exit(127);
  }
  ::close(pipeFds[1]);
  int execErr = 0;
  ssize_t n;
  do {
    n = ::read(pipeFds[0], &execErr, sizeof execErr);
  } while (n < 0 && errno == EINTR);
  ::close(pipeFds[0]);
  int status = 0;
  if (n == static_cast<ssize_t>(sizeof execErr)) {
    waitChild(pid, &status, /*block=*/true);
    return Status::error("cannot run " + mpirun + ": " +
                         std::strerror(execErr));
  }

  std::string command = "mpirun -np " + std::to_string(ranks) + " " + argv[0];
  if (timeoutSeconds > 0) {
    int ended = waitFor(pid, &status, timeoutSeconds);
    if (ended < 0)
      return Status::error("waiting for " + command + ": " +
                           std::strerror(errno));
    if (ended == 0) {
      // mpirun forwards SIGTERM to its ranks and exits; SIGKILL if it
      // does not.
      ::kill(pid, SIGTERM);
      if (waitFor(pid, &status, 10.0) == 0) {
        ::kill(pid, SIGKILL);
        waitChild(pid, &status, /*block=*/true);
      }
      return Status::error(command + " did not finish within " +
                           formatSeconds(timeoutSeconds) +
                           " s and was terminated");
    }
  } else if (waitChild(pid, &status, /*block=*/true) < 0) {
    return Status::error("waiting for " + command + ": " +
                         std::strerror(errno));
  }
  if (WIFEXITED(status)) {
    if (WEXITSTATUS(status) == 0)
      return Status::ok();
    return Status::error(command + " exited with status " +
                         std::to_string(WEXITSTATUS(status)));
  }
  if (WIFSIGNALED(status))
    return Status::error(command + " was killed by signal " +
                         std::to_string(WTERMSIG(status)) + " (" +
                         strsignal(WTERMSIG(status)) + ")");
  return Status::error(command + " ended abnormally");
}

} // namespace cleave::rt

//===- launch.cpp - Starts the ranks of a run under mpirun ----------------===//

#include "cleave/runtime/comm.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <thread>

#include <fcntl.h>
#include <poll.h>
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

/// Passes mpirun's stderr through, line by line, except Open MPI's banners
/// (text between lines of dashes): the ones that repeat what a rank already
/// said (MPI_ABORT, "the job has been aborted") are dropped, the ones that
/// say a rank died become one cleave error line, others pass unchanged.
class MpirunStderrFilter {
public:
  explicit MpirunStderrFilter(int fd) : fd(fd) {
    thread = std::thread([this] { loop(); });
  }
  /// Drains what is left (the ranks' last words) for up to a second, then
  /// stops: a process that kept the pipe open must not hold us.
  void finish() {
    stopAt = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    stopping = true;
    thread.join();
    ::close(fd);
  }

private:
  int fd;
  std::thread thread;
  std::atomic<bool> stopping{false};
  std::chrono::steady_clock::time_point stopAt;
  std::string pending, banner;
  bool inBanner = false;

  static bool isRule(const std::string &line) {
    return line.size() >= 20 &&
           line.find_first_not_of('-') == std::string::npos;
  }

  /// The first `cleave: error:` line a rank prints is the cause; whatever
  /// follows on stderr is its echo (the same error on the other ranks,
  /// Open MPI's account of the abort, ORTE_ERROR_LOG lines of its help
  /// system): the user gets the one line.
  void emit(const std::string &text) {
    if (errorShown)
      return;
    errorShown = text.rfind("cleave: error:", 0) == 0;
    ssize_t ignored = ::write(2, text.data(), text.size());
    (void)ignored;
  }
  bool errorShown = false;

  void endBanner() {
    static const std::regex signalled(
        "process rank ([0-9]+) with PID [0-9]+ on node \\S+ exited on "
        "signal ([0-9]+) \\(([^)]*)\\)");
    static const std::regex exited("Process name: +\\[\\[[0-9]+,[0-9]+\\],"
                                   "([0-9]+)\\].*Exit code: +([0-9]+)");
    std::string text = banner;
    for (char &c : text)
      if (c == '\n')
        c = ' ';
    std::smatch m;
    if (std::regex_search(text, m, signalled))
      emit("cleave: error: rank " + m[1].str() + " died (signal " + m[2].str() +
           ", " + m[3].str() + "); the other ranks were stopped\n");
    else if (std::regex_search(text, m, exited))
      emit("cleave: error: rank " + m[1].str() + " exited with status " +
           m[2].str() + "; the other ranks were stopped\n");
    else if (text.find("MPI_ABORT was invoked") == std::string::npos &&
             text.find("Per user-direction, the job has been aborted") ==
                 std::string::npos)
      emit(std::string(74, '-') + "\n" + banner + std::string(74, '-') + "\n");
    banner.clear();
  }

  void line(const std::string &l) {
    if (isRule(l)) {
      if (inBanner)
        endBanner();
      inBanner = !inBanner;
      return;
    }
    // Open MPI's count of repeats of a banner it showed (or we dropped).
    static const std::regex repeats(
        "^\\[[^\\]]*\\] [0-9]+ more process(es)? ha(s|ve) sent help message .*|"
        "^\\[[^\\]]*\\] Set MCA parameter \"orte_base_help_aggregate\" .*");
    if (inBanner)
      banner += l + "\n";
    else if (!std::regex_match(l, repeats))
      emit(l + "\n");
  }

  void loop() {
    char buf[4096];
    for (;;) {
      if (stopping && std::chrono::steady_clock::now() >= stopAt)
        break;
      pollfd p{fd, POLLIN, 0};
      int r = ::poll(&p, 1, 50);
      if (r < 0 && errno == EINTR)
        continue;
      if (r <= 0)
        continue;
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        break; // EOF: mpirun and the ranks are gone
      pending.append(buf, n);
      size_t nl;
      while ((nl = pending.find('\n')) != std::string::npos) {
        line(pending.substr(0, nl));
        pending.erase(0, nl + 1);
      }
    }
    if (!pending.empty())
      line(pending);
    if (inBanner && !banner.empty())
      emit(banner);
  }
};

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

  // exec failures come back through a close-on-exec pipe; mpirun's stderr
  // through another, to filter Open MPI's banners.
  int pipeFds[2], errFds[2];
  if (::pipe2(pipeFds, O_CLOEXEC) != 0)
    return Status::error(std::string("launching ranks: pipe: ") +
                         std::strerror(errno));
  if (::pipe2(errFds, O_CLOEXEC) != 0) {
    int err = errno;
    ::close(pipeFds[0]);
    ::close(pipeFds[1]);
    return Status::error(std::string("launching ranks: pipe: ") +
                         std::strerror(err));
  }
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = ::fork();
  if (pid < 0) {
    int err = errno;
    for (int fd : {pipeFds[0], pipeFds[1], errFds[0], errFds[1]})
      ::close(fd);
    return Status::error(std::string("launching ranks: fork: ") +
                         std::strerror(err));
  }
  if (pid == 0) {
    // mpirun (and with it every rank) goes when the launching cleave goes,
    // even when it is killed: no orphaned ranks.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    ::close(pipeFds[0]);
    ::dup2(errFds[1], 2); // dup2 clears close-on-exec on the copy
    ::execv(cargs[0], cargs.data());
    int err = errno;
    ssize_t ignored = ::write(pipeFds[1], &err, sizeof err);
    (void)ignored;
    ::_exit(127);
  }
  ::close(pipeFds[1]);
  ::close(errFds[1]);
  MpirunStderrFilter filter(errFds[0]);
  // Whatever way this returns, the ranks' last lines are out first.
  struct FinishFilter {
    MpirunStderrFilter &filter;
    ~FinishFilter() { filter.finish(); }
  } finishFilter{filter};
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

bool launchedByMpi() {
  auto has = [](const char *name) {
    const char *v = std::getenv(name);
    return v && *v;
  };
  return has("OMPI_COMM_WORLD_SIZE") || has("PMI_SIZE") || has("PMIX_RANK") ||
         (has("SLURM_PROCID") && has("SLURM_NTASKS"));
}

} // namespace cleave::rt

//===- run_bundle.cpp - `cleave run BUNDLE`, shared by cleave and cleave-run
//===//
//
// Everything between parsed flags and the trainer: flag checks, starting one
// process per rank under mpirun, MPI start-up with a deadline, and the exit
// status. cleave (the compiler) and cleave-run (the runtime alone, for
// machines that run bundles compiled elsewhere) both call it.
//
//===----------------------------------------------------------------------===//

#include "cleave/runtime/comm.h"
#include "cleave/runtime/files.h"
#include "cleave/runtime/thread_ranks.h"
#include "cleave/runtime/trainer.h"

#include "plan/plan.pb.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <thread>

namespace cleave::rt {

/// One `cleave: error:` line in one write: a rank's stderr reaches the
/// user through mpirun, which interleaves its own abort banner between the
/// pieces of a line written piecemeal.
static void printError(const std::string &message) {
  std::string line = "cleave: error: " + message + "\n";
  for (size_t done = 0; done < line.size();) {
    ssize_t n = ::write(2, line.data() + done, line.size() - done);
    if (n <= 0)
      break;
    done += static_cast<size_t>(n);
  }
}

static int fail(const std::string &message) {
  printError(message);
  return 1;
}

int runBundle(const RunBundleArgs &args) {
  TrainerOptions options;
  options.bundleDir = args.bundle;
  options.steps = args.steps;
  options.data = args.data;
  options.dumpDir = args.dumpDir;
  options.logEvery = args.logEvery;
  options.log = &std::cout;
  options.metricsFile = args.metricsFile;
  options.checkpointDir = args.checkpointDir;
  options.saveEvery = args.saveEvery;
  options.randomWeights = args.randomWeights;
  options.profile = args.profile;
  options.traceFile = args.traceFile;
  options.evaluate = args.eval;
  if (args.eval && (!args.checkpointDir.empty() || args.profile ||
                    !args.dumpDir.empty() || !args.metricsFile.empty()))
    return fail("--eval evaluates with no update: --checkpoint, --dump, "
                "--metrics and --profile apply to training");
  if (args.keepCheckpoints < 0)
    return fail("--keep-checkpoints must not be negative");
  options.keepCheckpoints = args.keepCheckpoints;
  options.resumeFrom = args.resumeFrom;
  const std::string &progress = args.progress;
  if (progress != "auto" && progress != "live" && progress != "lines")
    return fail("--progress must be auto, live or lines, not '" + progress +
                "'");
  options.liveProgress =
      progress == "live" || (progress == "auto" && ::isatty(1) != 0);
  if (Status s = parseBackend(args.backend, &options.backend.backend); !s)
    return fail(s.message());
  if (Status s = parsePrecision(args.precision, &options.backend.precision); !s)
    return fail(s.message());
  // Checked before the ranks start (each would say it again) and before
  // any step runs (a dump that fails after an hour of training loses it).
  if (!(args.timeoutSeconds > 0) || !std::isfinite(args.timeoutSeconds))
    return fail("--timeout must be a positive number of seconds");
  std::error_code dumpEc;
  if (!args.dumpDir.empty() && std::filesystem::exists(args.dumpDir, dumpEc) &&
      !std::filesystem::is_directory(args.dumpDir, dumpEc))
    return fail("--dump '" + args.dumpDir + "' exists and is not a directory");
  if (!args.dumpDir.empty())
    if (Status s = checkWritableDir(args.dumpDir, "--dump"); !s)
      return fail(s.message());
  if (!args.traceFile.empty()) {
    std::filesystem::path trace(args.traceFile);
    std::filesystem::path parent =
        trace.has_parent_path() ? trace.parent_path() : ".";
    std::error_code ec;
    if (std::filesystem::is_directory(trace, ec))
      return fail("--trace '" + args.traceFile + "' is a directory");
    if (!std::filesystem::is_directory(parent, ec))
      return fail("--trace '" + args.traceFile + "': no directory '" +
                  parent.string() + "'");
  }
  if (args.saveEvery < 0)
    return fail("--save-every must not be negative");
  if (args.saveEvery > 0 && args.checkpointDir.empty())
    return fail("--save-every needs --checkpoint DIR");
  if (!args.checkpointDir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(args.checkpointDir, ec);
    if (ec)
      return fail("cannot create --checkpoint directory '" +
                  args.checkpointDir + "': " + ec.message());
    if (Status s = checkWritableDir(args.checkpointDir, "--checkpoint"); !s)
      return fail(s.message());
  }
  plan::Plan plan;
  if (Status s = loadBundlePlan(args.bundle, &plan); !s)
    return fail(s.message());
  MeshGeometry mesh = meshOf(plan);
  int64_t ranks = mesh.ranks();
  if (args.ranks && args.ranks != ranks)
    return fail("bundle '" + args.bundle + "' is compiled for " + mesh.str() +
                (mesh.dpAxis < 0 ? std::string()
                                 : " (" + std::to_string(ranks) + " ranks)") +
                "; --ranks " + std::to_string(args.ranks) +
                " does not match (recompile " +
                (mesh.dpAxis < 0 ? "with --tp " + std::to_string(args.ranks)
                                 : std::string("for that mesh")) +
                ")");
  if (args.threads && ranks > 1) {
    std::unique_ptr<ThreadRanks> threads;
    if (Status s =
            ThreadRanks::create(mesh.shape, args.timeoutSeconds, &threads);
        !s)
      return fail(s.message());
    Status s = threads->run([&](int rank) {
      TrainerOptions own = options;
      own.comm = &threads->comm(rank);
      return train(own);
    });
    return s ? 0 : fail(s.message());
  }
  if (ranks == 1 && !launchedByMpi()) {
    if (Status s = train(options); !s)
      return fail(s.message());
    return 0;
  }
  if (!launchedByMpi()) {
    // Start one process per rank running this same command; they see a
    // pipe, not the terminal, so the progress mode is decided here.
    std::vector<std::string> argv = args.argv;
    argv.push_back(std::string("--progress=") +
                   (options.liveProgress ? "live" : "lines"));
    Status s = launchRanks(argv, static_cast<int>(ranks), 0);
    if (!s && s.message().find("mpirun") != std::string::npos &&
        s.message().find("PATH") != std::string::npos)
      return fail(s.message());
    return s ? 0 : 1; // the ranks printed their errors
  }
  // MPI start-up waits for every rank with no deadline of its own: a
  // watchdog bounds it too.
  std::atomic<bool> started{false};
  std::thread watchdog([&started, limit = args.timeoutSeconds] {
    auto until =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(limit);
    while (!started && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!started) {
      std::ostringstream seconds;
      seconds << limit;
      printError("MPI start-up timed out after " + seconds.str() +
                 " s waiting for its peers (a rank died or hangs)");
      std::_Exit(1);
    }
  });
  std::unique_ptr<Communicator> comm;
  Status made = makeMpiCommunicator(mesh.shape, args.timeoutSeconds, &comm);
  started = true;
  watchdog.join();
  if (!made) {
    printError(made.message());
    abortAllRanks(1);
  }
  options.comm = comm.get();
  if (Status s = train(options); !s) {
    printError("rank " + std::to_string(comm->rank()) + ": " + s.message());
    abortAllRanks(1);
  }
  comm.reset();
  finalizeMpi();
  return 0;
}

} // namespace cleave::rt

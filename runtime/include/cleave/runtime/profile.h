//===- profile.h - Where a training step's time goes ------------*- C++ -*-===//
//
// `cleave run --profile` and `--trace FILE`. A backend's executor names
// each instruction it will run once (a site: its kernel, the source op it
// was compiled from, its work in FLOPs and bytes) and then records one
// interval per run of it; the trainer brackets every step. The aggregate
// answers "which kernels and which ops of my model take the step", against
// the rates this machine reaches (sgemm for FLOP/s, memcpy for bytes/s);
// the intervals become a Chrome trace (chrome://tracing, Perfetto), one
// lane per rank. Steady-clock nanoseconds throughout: every rank of one
// machine reads the same clock, so their lanes line up.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_PROFILE_H
#define CLEAVE_RUNTIME_PROFILE_H

#include "cleave/runtime/executor.h"

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace cleave::rt {

class Communicator;
struct KernelInfo;

/// What one run of an instruction does.
struct KernelCost {
  double flops = 0;
  /// Bytes its operands and results occupy (read once, written once).
  double bytes = 0;
};

/// An estimate from the instruction's kernel and types: 2MNK for matmuls
/// and convolutions, an operation per element for elementwise kernels
/// (\p fusedOps of them for a fused chain), none for data movement and
/// collectives.
KernelCost estimateKernelCost(const KernelInfo &info, int fusedOps = 0);

/// What this machine reaches, per rank (measured with the rank's own
/// threads): the yardsticks of the report's FLOP/s and bytes/s.
struct MachineRates {
  double sgemmFlops = 0; ///< per second
  double copyBytes = 0;  ///< bytes read and written per second
};

enum class SiteKind : uint8_t { Kernel, Collective, Host };

class StepProfiler {
public:
  /// \p keepTrace keeps every interval (for writeTrace) rather than only
  /// the sums.
  StepProfiler(int rank, bool keepTrace);

  /// Registers what an executor will run; its id for record().
  int32_t addSite(std::string kernel, std::string location, SiteKind kind,
                  KernelCost cost);
  static int64_t nowNs();
  /// One run of \p site from \p startNs to \p endNs.
  void record(int32_t site, int64_t startNs, int64_t endNs);

  /// Brackets step \p step (0-based). Intervals outside a step still go to
  /// the trace; the report counts only profiled steps (beginStep's
  /// \p counted: the first step, warming caches and thread pools, is not).
  void beginStep(int64_t step, bool counted);
  void endStep();

  /// The report (leader only writes it; every rank calls: it gathers each
  /// rank's step time). Errors come from the communicator.
  Status report(Communicator &comm, const MachineRates &rates,
                std::ostream &os) const;
  /// Gathers every rank's intervals to rank 0, whose \p json becomes the
  /// Chrome trace (JSON object format: a process per rank). Every rank
  /// calls.
  Status gatherTrace(Communicator &comm, const std::string &title,
                     std::string *json) const;

private:
  struct Site {
    std::string kernel, location;
    SiteKind kind = SiteKind::Kernel;
    KernelCost cost;
    // Sums over counted steps.
    int64_t calls = 0, totalNs = 0;
  };
  struct Interval {
    int32_t site; ///< -1: a step
    int64_t step, startNs, endNs;
  };

  std::string traceFragment(int64_t originNs) const;
  int rank_;
  bool keepTrace_;
  std::vector<Site> sites_;
  std::vector<Interval> intervals_;
  bool truncated_ = false;
  bool inStep_ = false, counted_ = false;
  int64_t step_ = 0, stepStartNs_ = 0;
  int64_t countedSteps_ = 0, countedStepNs_ = 0;
};

/// The source op of an instruction, from its MLIR location string:
/// loc("/h.0/attn/MatMul"("m.onnx":0:0)) -> "/h.0/attn/MatMul"; the
/// compiler's tags show (loc(fused<"backward">[...]) -> "... (backward)",
/// the optimizer's update of parameter P -> "optimizer: P"); the string
/// itself where it names no op.
std::string profileOpOf(const std::string &location);
/// The block a source op belongs to, forward and backward together: its
/// name with the last path component dropped ("/h.0/attn/MatMul_1" ->
/// "/h.0/attn"), the op's own name when it has no path, "(optimizer)".
std::string profileBlockOf(const std::string &location);
/// "forward", "backward" or "optimizer", from the compiler's tag.
std::string profilePhaseOf(const std::string &location);

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_PROFILE_H

//===- trainer.h - Runs a compiled training bundle --------------*- C++ -*-===//
//
// A bundle is a directory: plan.pb (the versioned plan: the train-step
// program, the tensor table with each rank's slice, the file digests, how it
// was compiled), weights/rank-K.safetensors (each rank's slices of the
// parameters and buffers) and model.onnx (the source graph, for export).
// The trainer owns the training state (parameters, buffers, optimizer state,
// step counter), feeds each step its batch, reports progress, writes and
// resumes checkpoints and writes what --dump asks for.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_TRAINER_H
#define CLEAVE_RUNTIME_TRAINER_H

#include "cleave/runtime/data.h"
#include "cleave/runtime/executor.h"
#include "cleave/runtime/runner.h"

#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace cleave::plan {
class Plan;
} // namespace cleave::plan

namespace cleave::rt {

class Communicator;

/// The plan format this runtime reads and the compiler writes.
constexpr uint32_t kPlanFormatVersion = 4;
/// File names inside a bundle directory.
constexpr const char *kBundlePlanFile = "plan.pb";
constexpr const char *kBundleWeightsDir = "weights";
constexpr const char *kBundleModelFile = "model.onnx";

/// Reads and checks BUNDLE/plan.pb (presence, parse, format version).
Status loadBundlePlan(const std::string &bundleDir, plan::Plan *plan);
/// The whole batch's shape of \p program's input \p i on \p dp
/// data-parallel ranks: the dimension its binding splits over dp is dp
/// times the program's extent (a split dimension the input lacks is left).
std::vector<int64_t> globalInputShape(const plan::Program &program, int i,
                                      int64_t dp);
/// Whether \p program is a forward pass ("forward", "forward_eval"), not
/// a train step.
bool isForwardProgram(const plan::Program &program);

/// A plan's device mesh: its shape (outermost axis first) and where its dp
/// and tp axes are (-1: absent, size 1). Tensors are split over the tp
/// ranks (tensorParts), which may be two axes, tp x tp_inner (tp is then
/// their product); data inputs over dp.
struct MeshGeometry {
  std::vector<int64_t> shape;
  int64_t dpAxis = -1, tpAxis = -1, tpInnerAxis = -1, dp = 1, tp = 1;
  /// The axes of the tp ranks, outermost first.
  std::vector<int64_t> tpAxes() const;
  int64_t ranks() const;
  /// The parts of the axis tensors are split over: tp on a 2-D mesh, the
  /// only axis's size on a 1-D one (dp for ZeRO's optimizer state).
  int64_t tensorParts() const;
  /// "dp = 2, tp = 4", for messages.
  std::string str() const;
};
/// Checks a plan's mesh (at most dp and tp, each once).
Status checkMesh(const plan::Plan &plan);
MeshGeometry meshOf(const plan::Plan &plan);

struct TrainerOptions {
  std::string bundleDir;
  /// Steps this run makes (a resumed run continues the step count).
  int64_t steps = 1;
  DataOptions data;
  /// Where loss.npy, parameters, buffers and last gradients go (if set).
  std::string dumpDir;
  /// Progress: a line every this many steps (0: choose from --steps).
  int64_t logEvery = 0;
  std::ostream *log = nullptr;
  /// One progress line rewritten in place (a terminal) instead of lines.
  bool liveProgress = false;
  /// A JSON line per step (step, loss, seconds, tokens or samples per
  /// second), if set.
  std::string metricsFile;
  /// Checkpoints: a step-N directory under checkpointDir every saveEvery
  /// steps and after the last one.
  std::string checkpointDir;
  int64_t saveEvery = 0;
  /// Keep only the newest this many checkpoints (0: all).
  int64_t keepCheckpoints = 0;
  /// Continue from this checkpoint (a step directory or a root: its newest).
  std::string resumeFrom;
  /// This process's rank of the bundle's mesh (tensor parallelism); null:
  /// one process. Each rank loads its slices of the weights; rank 0 logs and
  /// writes the dumps (full, gathered tensors).
  Communicator *comm = nullptr;
  /// Where the step runs (cpu, cuda, auto) and at what precision.
  BackendOptions backend;
  /// Start from random parameters (seeded, N(0, 0.02)-like) instead of the
  /// bundle's weights: benchmarks of bundles compiled with --plan-only.
  bool randomWeights = false;
  /// train(): evaluate `steps` batches (Trainer::evaluate) instead of
  /// training.
  bool evaluate = false;
  /// Time every kernel (profile.h): finish() prints where the steps after
  /// the first spent their time to options.log (rank 0)...
  bool profile = false;
  /// ...and, if set, writes every rank's kernels as a Chrome trace here.
  std::string traceFile;
};

class TrainSession;

/// A training run as a library: `cleave run` and the Python package drive
/// it. open() reads the bundle (or resumes a checkpoint of any layout,
/// resharding it), binds the state to the backend and opens the data; each
/// step() feeds the next batch and runs one step. On a mesh every rank
/// makes the same calls in the same order (they run collectives).
class Trainer {
public:
  static Status open(const TrainerOptions &options,
                     std::unique_ptr<Trainer> *result);
  ~Trainer();

  /// Steps made (a resumed run starts at its checkpoint's count).
  int64_t stepsDone() const;
  /// After a step that failed: whether it failed before writing any state
  /// (a bad batch found by a kernel, a peer that failed first), so the run
  /// is as it was and the caller may go on with another batch.
  bool lastStepKeptState() const;
  /// The base learning rate the run's schedule scales (the compiled one,
  /// a checkpoint's, or the last setLearningRate's).
  double learningRate() const;
  /// A new base rate from the next step on, with no recompile; kept in
  /// checkpoints. An error where the step holds its rate as a constant.
  Status setLearningRate(double lr);
  /// What the last step reported: "lr" (the rate it applied) and the
  /// step's metrics ("grad_norm" under clipping).
  const std::map<std::string, double> &lastMetrics() const;
  /// The step count the run ends at: stepsDone() at open plus
  /// options.steps.
  int64_t lastStep() const;
  /// One step on the data feed's next batch (its loss in \p loss, 0 for a
  /// program without one); checkpoints where options.saveEvery says.
  /// An error after lastStep().
  Status step(float *loss = nullptr);
  /// One step on \p batch (options.data.fedByCaller): every input of
  /// inputs(), by name; an error naming what is missing, unknown or of
  /// another dtype or shape, with nothing run.
  Status step(const std::map<std::string, HostTensor> &batch,
              float *loss = nullptr);
  /// One update on \p microBatches, as many as microBatches() (a step
  /// compiled with gradient accumulation), each checked as step()'s batch.
  Status step(const std::vector<std::map<std::string, HostTensor>> &batches,
              float *loss = nullptr);
  /// The model's forward pass on \p batch (forwardInputs(), by name) with
  /// the current state, split as the step splits it: no update, no step
  /// counted; in eval mode (\p eval: dropout off, BatchNorm on its running
  /// statistics) or training mode. Every output of the model, whole, by
  /// name. An error naming why where the bundle has no such pass (a dp
  /// mesh).
  Status forward(const std::map<std::string, HostTensor> &batch, bool eval,
                 std::vector<std::pair<std::string, HostTensor>> *outputs);
  /// The mean loss of the data feed's first \p batches batches (from its
  /// start, whatever the steps done), the model in eval mode, with no
  /// update: the model's first output where it is the loss, else the loss
  /// the step appends. Rank 0 prints it to options.log.
  Status evaluate(int64_t batches, double *mean);
  /// The inputs forward() takes (empty without a forward pass), for the
  /// first batch shape.
  const std::vector<InputSlot> &forwardInputs() const;
  /// Every batch shape's inputs, of its step or (\p forward) its forward
  /// pass: a bundle compiled for several shapes trains on each.
  std::vector<std::vector<InputSlot>> batchShapes(bool forward) const;
  /// Whether step() (or, \p forward, forward()) takes \p batch: an error
  /// naming what is missing, unknown, or of a dtype or shape no step was
  /// compiled for (and how to add one). Touches nothing.
  Status checkBatch(const std::map<std::string, HostTensor> &batch,
                    bool forward) const;
  /// The batches one step reads: the micro-batches whose gradients its
  /// update sums (1 without gradient accumulation).
  int64_t microBatches() const;
  /// A checkpoint of the state after stepsDone() steps, under
  /// options.checkpointDir (\p root when given); its step directory in
  /// \p written.
  Status saveCheckpoint(const std::string &root = "",
                        std::string *written = nullptr);
  /// Model tensor \p name (a parameter or buffer as the model names it),
  /// whole: gathered from every rank's slices, on every rank.
  Status readTensor(const std::string &name, HostTensor *value);
  /// Replaces model tensor \p name with \p value (whole; every rank gets
  /// its slice). The optimizer state is kept. Every rank calls it.
  Status writeTensor(const std::string &name, const HostTensor &value);
  /// Whether writeTensor(\p name, \p value) would be refused (an unknown
  /// name, another shape or dtype), checked on this rank alone and touching
  /// nothing, so a caller can refuse a write before any rank starts it.
  Status checkTensorWrite(const std::string &name,
                          const HostTensor &value) const;
  /// The model's parameters and buffers (names as the model gives them),
  /// in the bundle's order, and whether each is trained.
  std::vector<std::pair<std::string, bool>> tensorNames() const;
  /// The inputs each step takes (data, labels), for the first batch shape
  /// (the data feed's).
  const std::vector<InputSlot> &inputs() const;
  /// Ends the run: the re-sharded checkpoint of a 0-step run, then what
  /// options.dumpDir asks for.
  Status finish();
  /// Times every kernel of the steps from here on (as options.profile
  /// does), keeping each interval for a trace with \p keepTrace.
  Status startProfile(bool keepTrace);
  /// Where the steps since startProfile() spent their time (the first of
  /// them traced, not counted): rank 0's report in \p text, every rank's
  /// kernels as a Chrome trace to \p traceFile if set; stops timing. Every
  /// rank calls it.
  Status profileReport(const std::string &traceFile, std::string *text);

private:
  explicit Trainer(std::unique_ptr<TrainSession> session);
  /// \p value (f32) rounded to the dtype the step holds tensor \p name in
  /// (bf16 for a frozen weight under mixed precision).
  Status heldAs(const std::string &name, HostTensor *value) const;
  std::unique_ptr<TrainSession> session_;
};

/// Runs \p options.steps training steps (Trainer from open to finish).
/// Errors name the file or tensor.
Status train(const TrainerOptions &options);

/// The flags of `cleave run BUNDLE` (cleave and cleave-run parse them).
struct RunBundleArgs {
  std::string bundle;
  int64_t steps = 1;
  DataOptions data;
  std::string dumpDir, metricsFile, checkpointDir, resumeFrom;
  int64_t logEvery = 0, saveEvery = 0, keepCheckpoints = 0, ranks = 0;
  std::string progress = "auto", backend = "cpu", precision = "f32";
  double timeoutSeconds = 60;
  bool randomWeights = false;
  bool profile = false;
  std::string traceFile;
  /// --eval: the mean loss of `steps` batches in eval mode, no update.
  bool eval = false;
  /// The ranks are threads of this process (no MPI).
  bool threads = false;
  /// The whole command line with argv[0] resolved: each rank runs it again
  /// under mpirun.
  std::vector<std::string> argv;
};

/// Checks the flags, starts the ranks when the bundle has several, trains,
/// and prints errors as "cleave: error: ..."; returns the exit status.
int runBundle(const RunBundleArgs &args);

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_TRAINER_H

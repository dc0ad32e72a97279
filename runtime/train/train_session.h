//===- train_session.h - One run of a bundle on one rank ------------------===//
//
// The Trainer facade's implementation, shared by trainer.cpp (opening a
// bundle, loading state, running steps) and session_tensors.cpp (reading,
// writing, gathering and dumping model tensors). Internal to runtime/train.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_TRAIN_TRAIN_SESSION_H
#define CLEAVE_RUNTIME_TRAIN_TRAIN_SESSION_H

#include "cleave/runtime/checkpoint.h"
#include "cleave/runtime/comm.h"
#include "cleave/runtime/data.h"
#include "cleave/runtime/lr_schedule.h"
#include "cleave/runtime/profile.h"
#include "cleave/runtime/runner.h"
#include "cleave/runtime/store.h"
#include "cleave/runtime/trainer.h"
#include "forward_pass.h"
#include "progress.h"

#include "plan/plan.pb.h"

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace cleave::rt {

namespace pb = ::cleave::plan;
using Batch = std::map<std::string, HostTensor>;

/// The key a state tensor is held under ("p:NAME", "b:NAME", "o:NAME/slot");
/// empty for a binding that is no state.
std::string stateKey(const pb::Binding &b);
std::string stateKeyOf(const pb::TensorEntry &e);
/// The full tensor from every rank's chunk along \p split (collective).
Status gatherAlong(Communicator &comm, const HostTensor &local, Split split,
                   int64_t size, HostTensor *full);

/// What the train step of one batch shape needs beside the run's state:
/// its program and runner, and which of its inputs and outputs are what.
/// The session holds the active shape's as its own members; a bundle of
/// several shapes keeps the others' aside and swaps one in when a batch of
/// its shape comes, moving the state into its runner (useShape).
struct ShapeStep {
  const pb::Program *program = nullptr;
  std::unique_ptr<StepRunner> executor;
  size_t numInputs = 0;
  /// Where the step takes each state tensor, by state key.
  std::map<std::string, size_t> stateInput;
  /// The step's "lr" input (-1: the rate is a constant of the step), its
  /// loss output and the outputs it reports.
  int lrInput = -1, lossOutput = -1;
  std::vector<std::pair<std::string, int>> metricOutputs;
  std::vector<InputSlot> dataInputs;
  /// Data inputs split over the ranks (data parallelism), by name.
  std::map<std::string, Split> inputSplit;
  /// The rows of each global batch this rank's feed builds (rowCount 0:
  /// every row; data parallelism splits them).
  int64_t rowFirst = 0, rowCount = 0;
  /// The shape's forward passes, one per set of arguments (with labels,
  /// without), in training mode ("forward" programs) and in eval mode
  /// ("forward_eval"; none: as in training mode, unless the plan's
  /// eval_missing says why not).
  std::vector<ForwardPass> forwardPasses, evalPasses;
};

/// One run of a bundle on this rank, one method per job: open the bundle
/// and its runner, build the state table, load the state (from the bundle
/// or a checkpoint, in any layout: resume and reshard), bind it to the
/// runner, open the data, run steps, and save or dump what it holds.
class TrainSession : public ShapeStep {
  // The facade reaches the profiler's state to start and stop it mid-run.
  friend class Trainer;

public:
  explicit TrainSession(const TrainerOptions &options) : options(options) {}

  Status openAll() {
    for (Status (TrainSession::*phase)() :
         {&TrainSession::open, &TrainSession::buildTable,
          &TrainSession::loadState, &TrainSession::checkInputs,
          &TrainSession::openData, &TrainSession::bindState,
          &TrainSession::bindSchedule})
      if (Status s = (this->*phase)(); !s)
        return s;
    next = first;
    return Status::ok();
  }
  Status runStep(float *loss,
                 const std::vector<const Batch *> *batches = nullptr);
  Status runForward(const Batch &batch, bool eval,
                    std::vector<std::pair<std::string, HostTensor>> *outputs);
  /// The mean loss of the feed's first \p batches batches in eval mode.
  Status evaluate(int64_t batches, double *mean);
  /// Batch shape \p k's step (the active one is this session's own).
  ShapeStep &shapeStep(size_t k) {
    return k == activeShape ? *this : shapes[k];
  }
  const ShapeStep &shapeStep(size_t k) const {
    return k == activeShape ? *this : shapes[k];
  }
  size_t shapeCount() const { return shapes.size(); }
  /// The batch shape \p batch has (its step's or forward pass's inputs).
  Status batchShapeOf(const Batch &batch, bool forward, size_t *k) const;
  /// Every shape's forward passes in training mode, in order.
  std::vector<const ForwardPass *> allForwardPasses() const;
  /// The forward pass (\p eval: in eval mode) whose arguments \p batch
  /// gives; an error naming why where none does.
  Status findForwardPass(const Batch &batch, bool eval, ForwardPass **pass);
  Status finish();
  Status save(int64_t steps, std::string *written = nullptr);
  Status readTensor(const std::string &name, HostTensor *value);
  Status writeTensor(const std::string &name, const HostTensor &value);
  Status checkTensorWrite(const std::string &name, const HostTensor &value,
                          ModelTensor *t) const;
  Status findTensor(const std::string &name, ModelTensor *out) const;

  TrainerOptions options;
  pb::Plan plan;
  /// Batches per step: the micro-batches of one update.
  int64_t microBatches = 1;

  int64_t next = 0;
  int64_t first = 0, last = 0;

private:
  Status open();
  Status buildTable();
  Status loadState();
  Status loadCheckpoint();
  Status loadBundle();
  Status checkInputs();
  Status openData();
  Status bindState();
  Status setStepInputs(int64_t step, const std::vector<const Batch *> *given);
  Status fetchState();
  Status dump();
  Status shareOverDp(Status *status, std::string *text);
  Status dumpTensor(const ModelTensor &t, bool grads);
  Status gatherTensor(const ModelTensor &t, bool grads, HostTensor *full,
                      bool *present);
  Status gatherFull(const HostTensor &t, const std::string &key,
                    HostTensor *full);
  /// The program's chunk of \p value, padded where tp does not divide.
  void padChunk(const pb::TensorEntry &e, HostTensor *value) const;
  std::string bundle() const { return "bundle '" + options.bundleDir + "'"; }

  MeshGeometry mesh;
  /// tp: the parts tensors are split in (mesh.tensorParts()); rank: this
  /// rank's index among them; dpRank: its index on the dp axis.
  int64_t tp = 1, rank = 0, dpRank = 0;
  bool leader = false;
  std::unique_ptr<Communicator> single, tpView, dpView;
  /// The whole mesh (the step's collectives), this rank's tp group, and
  /// (2-D meshes) its dp group.
  Communicator *comm = nullptr, *tpComm = nullptr, *dpComm = nullptr;
  /// Every batch shape's step, by shape; the active one's entry is empty
  /// (its members are this session's).
  std::vector<ShapeStep> shapes;
  size_t activeShape = 0;
  /// Makes shape \p k's step the active one, its runner holding the state.
  Status useShape(size_t k);
  /// Times every made runner's kernels into \p to (null: stops).
  Status profileEveryShape(StepProfiler *to);
  /// The active step's runner, inputs and outputs, from its program.
  Status setUpShape();
  Status readDataInputs();
  Status mapState();
  Status mapSchedule();
  /// Whether the last step that failed left the state as before it.
  bool keptState = true;
  /// The schedule the rate follows from the base rate.
  LrSchedule schedule;
  /// The last step's rate and reported outputs ("lr", "grad_norm").
  std::map<std::string, double> metrics;
  Status bindSchedule();
  /// After a step the guard refused: which value was not finite (the
  /// loss, else the first gradient of this rank's that holds one).
  std::string firstNonfinite(float loss);
  double baseLr() const {
    auto &hp = plan.train_config().hyperparameters();
    auto it = hp.find("lr");
    return it == hp.end() ? 0 : it->second;
  }
  /// --profile / --trace; null otherwise.
  std::unique_ptr<StepProfiler> profiler;
  int32_t feedSite = -1;
  Status finishProfile();
  /// With \p report, the profile's report (rank 0's text into \p log);
  /// the trace to \p traceFile if set. Collective.
  Status reportProfile(bool report, std::ostream *log,
                       const std::string &traceFile);
  /// Steps after this one count in the profile (the first is traced only).
  int64_t profileFrom = 0;
  std::map<std::string, Split> layoutOf;
  /// Gradients the step returns split otherwise than their parameter (ZeRO
  /// 2 returns each rank's shard), by parameter name.
  std::map<std::string, Split> gradientLayout;
  /// ZeRO on a dp x tp mesh: tensors whose tp-local chunk is split again
  /// over dp (by state key), and gradients returned so (by name).
  std::map<std::string, Split> dpLayoutOf, gradientDpLayout;
  /// This rank's dp chunk of tp-local \p value of state \p key.
  void takeDpChunk(const std::string &key, HostTensor *value) const;
  /// \p value (dp-split along \p split) whole over the dp group.
  Status gatherDp(const HostTensor &value, Split split, HostTensor *out);
  /// gatherFull's tp half.
  Status gatherTp(const HostTensor &t, const std::string &key,
                  HostTensor *full);
  std::vector<pb::TensorEntry> table;
  std::map<std::string, const pb::TensorEntry *> bundleEntry;
  std::map<std::string, HostTensor> state;
  std::string resumedData;
  std::unique_ptr<DataFeed> feed;
  std::unique_ptr<Progress> progress;
  std::vector<float> losses;
  std::map<std::string, HostTensor> lastGrads;
};

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_TRAIN_TRAIN_SESSION_H

//===- MeshChoice.h - The mesh's choice (--devices) -------------*- C++ -*-===//
//
// `cleave compile --devices N` compiles the model for every dp x tp
// factorization of N (and the ZeRO stages that apply), costs each plan with
// an alpha-beta model of its collectives over the axes' links plus its
// matmul FLOPs, and keeps the fastest whose per-rank memory fits the budget.
// The costing reads only the compiled plan, so what is costed is what runs.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_DRIVER_MESHCHOICE_H
#define CLEAVE_DRIVER_MESHCHOICE_H

#include "plan/plan.pb.h"

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace cleave::driver {

/// The machine the mesh is chosen for. Defaults: a DGX H100-like node
/// (8 devices on NVLink, about 450 GB/s per device each way; one 400 Gb/s
/// NIC, 50 GB/s, per device across nodes).
struct Topology {
  int64_t nodeSize = 8;
  double intraGBps = 450, interGBps = 50;
  /// Per-message latency (alpha) of one ring step, in microseconds.
  double intraLatencyUs = 5, interLatencyUs = 15;
  /// Dense float32 (TF32 tensor core) rate one device sustains.
  double deviceTflops = 400;
};

/// What one step of a compiled program costs on one rank.
struct StepEstimate {
  double computeSeconds = 0, communicationSeconds = 0;
  int64_t memoryBytes = 0;
  std::vector<std::pair<std::string, double>> communicationByAxis;
};

/// Costs \p program on the mesh \p mesh ((axis name, size), outermost
/// first; ranks row-major, so the innermost axis is a node's neighbours).
StepEstimate
estimateStep(const ::cleave::plan::Program &program,
             const std::vector<std::pair<std::string, int64_t>> &mesh,
             const Topology &topology);

/// A mesh to try.
struct MeshTrial {
  int64_t dp = 1, tp = 1, zero = 0;
  /// What the forward keeps for the backward: "none", "selective", "full".
  std::string recompute = "none";
  /// Megatron's sequence parallelism (tp > 1).
  bool sequenceParallel = false;
};

/// The first trials for \p devices: every dp x tp = devices, ZeRO stage 0
/// (chooseMesh adds stages 1 to 3 of a mesh whose stage 0 is over the
/// memory budget).
std::vector<MeshTrial> meshTrials(int64_t devices,
                                  const std::string &recompute = "none");

/// Compiles one trial into a program; false with \p error when it cannot.
using CompileTrial = std::function<bool(
    const MeshTrial &, ::cleave::plan::Program &program, std::string &error)>;

/// Tries every trial with \p compile, costs it, and fills \p choice (usable
/// candidates first, fastest first). A trial over the memory budget brings
/// in its ZeRO stages (where dp > 1) and, when \p recomputeLadder, the
/// same mesh with selective and then full recomputation: the fastest that
/// fits wins; when \p sequenceLadder, such a trial with tp > 1 is also
/// tried with sequence parallelism (and that with each recomputation).
/// Returns the chosen trial in \p chosenTrial and its program
/// in \p chosen, or false with \p error naming why no mesh can be used.
/// \p devices is 0 where the mesh was given (one trial, and only what it
/// keeps is chosen).
bool chooseMesh(std::vector<MeshTrial> trials, int64_t devices,
                int64_t memoryPerDevice, bool recomputeLadder,
                bool sequenceLadder, const Topology &topology,
                const CompileTrial &compile, ::cleave::plan::MeshChoice &choice,
                ::cleave::plan::Program &chosen, MeshTrial &chosenTrial,
                std::string &error);

/// Multiply-adds x 2 of \p inst where it is a product (matmul,
/// convolutions): the FLOPs that dominate a step; 0 for the rest.
double instructionFlops(const ::cleave::plan::Program &program,
                        const ::cleave::plan::Instruction &inst);

/// What a rank holds for one step of \p program, as --devices and
/// --memory-per-device count it: every input (weights, optimizer state,
/// the rank's batch), the arena, and the results made beside the inputs.
int64_t stepMemoryBytes(const ::cleave::plan::Program &program);

/// The arena's busiest moment: the most bytes of its values live at once
/// (the arena's lower bound; its planned size packs them at least that
/// tight) and the instruction during which they are.
struct ArenaPeak {
  int64_t liveBytes = 0;
  int64_t instruction = -1;
};
ArenaPeak arenaPeak(const ::cleave::plan::Program &program);

/// Bytes of a plan tensor of type \p t (its dtype's size, runtime/core).
int64_t planTensorBytes(const ::cleave::plan::TensorType &t);

/// "1.5 GB", "320 MB", for messages.
std::string humanBytes(int64_t bytes);

/// Bytes of the results a step makes in the caller's tensors (OUTPUT
/// storage) beside its inputs: new parameters, buffers and optimizer state
/// (the CPU backend writes those over their inputs where it can, the CUDA
/// backend holds a second buffer: writing in place on every backend is
/// issue 38's), the loss, model outputs and, with \p gradients, returned
/// gradients.
int64_t returnedBytes(const ::cleave::plan::Program &program, bool gradients);

} // namespace cleave::driver

#endif // CLEAVE_DRIVER_MESHCHOICE_H

//===- MeshChoice.cpp - cleave compile --devices: the mesh's choice -------===//
//
// Each candidate mesh is compiled in full (the sharding search, the
// partitioner, buffer planning) and costed from its plan, rather than
// predicted from the model: the plan is what runs, so the choice cannot
// disagree with the program it picks (docs/design.md, "Choosing the mesh").
//
//===----------------------------------------------------------------------===//

#include "cleave/Driver/MeshChoice.h"
#include "cleave/runtime/executor.h"
#include "cleave/runtime/store.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

namespace pb = ::cleave::plan;
namespace rt = ::cleave::rt;

namespace cleave::driver {
namespace {

int64_t numel(const pb::TensorType &t) {
  int64_t n = 1;
  for (int64_t d : t.shape())
    n *= d;
  return n;
}

int64_t bytesOf(const pb::TensorType &t) { return planTensorBytes(t); }

const pb::TensorType &typeOf(const pb::Program &p, int32_t id) {
  return p.values(id).type();
}

/// Multiply-adds x 2 of the kernels that dominate a step's compute: the
/// element-wise rest is memory-bound and small beside them at the sizes a
/// mesh is chosen for.
double flopsOf(const pb::Program &p, const pb::Instruction &inst) {
  const std::string &k = inst.kernel();
  if (k == "matmul") {
    const pb::TensorType &a = typeOf(p, inst.operands(0));
    int rank = a.shape_size();
    if (rank < 2)
      return 0;
    auto it = inst.attrs().find("transpose_a");
    bool ta = it != inst.attrs().end() && it->second.ints_size() &&
              it->second.ints(0);
    int64_t contraction = a.shape(ta ? rank - 2 : rank - 1);
    return 2.0 * numel(typeOf(p, inst.results(0))) * contraction;
  }
  // conv2d (x, w) -> y; conv2d_backward_input (dy, w) -> dx;
  // conv2d_backward_filter (x, dy) -> dw: each 2 x |y| x |w| / F.
  if (k == "conv2d" || k == "conv2d_backward_input" ||
      k == "conv2d_backward_filter") {
    bool filter = k == "conv2d_backward_filter";
    const pb::TensorType &w =
        filter ? typeOf(p, inst.results(0)) : typeOf(p, inst.operands(1));
    const pb::TensorType &y = k == "conv2d" ? typeOf(p, inst.results(0))
                              : filter      ? typeOf(p, inst.operands(1))
                                            : typeOf(p, inst.operands(0));
    if (w.shape_size() != 4 || w.shape(0) == 0)
      return 0;
    return 2.0 * numel(y) * (static_cast<double>(numel(w)) / w.shape(0));
  }
  return 0;
}

} // namespace

double instructionFlops(const pb::Program &program,
                        const pb::Instruction &inst) {
  return flopsOf(program, inst);
}

int64_t planTensorBytes(const pb::TensorType &t) {
  return static_cast<int64_t>(rt::dtypeSize(rt::fromPlan(t.dtype()))) *
         numel(t);
}

int64_t returnedBytes(const pb::Program &p, bool gradients) {
  int64_t bytes = 0;
  for (int i = 0; i < p.outputs_size(); ++i) {
    const pb::Value &v = p.values(p.outputs(i));
    const pb::Binding *b =
        i < p.output_bindings_size() ? &p.output_bindings(i) : nullptr;
    if (b && !gradients && b->role() == pb::Binding::GRADIENT)
      continue;
    if (v.storage() == pb::Value::OUTPUT && v.index() == i)
      bytes += bytesOf(v.type());
  }
  return bytes;
}

std::string humanBytes(int64_t bytes) {
  const char *units[] = {"B", "KB", "MB", "GB", "TB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1000 && u < 4) {
    v /= 1000;
    ++u;
  }
  char buf[32];
  // %.3g rounds 999.6 up to 1e+03: such values go to the next unit.
  if (u < 4 && v >= 999.5) {
    v /= 1000;
    ++u;
  }
  std::snprintf(buf, sizeof buf, u ? "%.3g %s" : "%.0f %s", v, units[u]);
  return buf;
}

StepEstimate
estimateStep(const pb::Program &program,
             const std::vector<std::pair<std::string, int64_t>> &mesh,
             const Topology &topology) {
  StepEstimate out;
  // Ranks are row-major over the mesh: the ranks of a group over axes
  // a..end lie in a run of the product of those axes' sizes and the inner
  // ones, runs starting at multiples of it; the group is on one node when
  // no run of the mesh crosses a node's boundary (nodes hold ranks
  // [k * nodeSize, (k + 1) * nodeSize); the last may be partly filled).
  int64_t devices = 1;
  for (const auto &[axis, size] : mesh)
    devices *= size;
  auto span = [&](int64_t axis) {
    int64_t s = 1;
    for (size_t i = axis; i < mesh.size(); ++i)
      s *= mesh[i].second;
    return s;
  };
  auto withinNodes = [&](int64_t run) {
    for (int64_t first = 0; first < devices; first += run)
      if (first / topology.nodeSize != (first + run - 1) / topology.nodeSize)
        return false;
    return true;
  };
  std::map<std::string, double> byAxis;
  for (const pb::Instruction &inst : program.instructions()) {
    const std::string &k = inst.kernel();
    bool reduce = k == "all_reduce";
    if (!reduce && k != "all_gather" && k != "reduce_scatter" &&
        k != "all_to_all") {
      out.computeSeconds +=
          flopsOf(program, inst) / (topology.deviceTflops * 1e12);
      continue;
    }
    int64_t group = 1, outermost = static_cast<int64_t>(mesh.size());
    std::string axes;
    if (auto it = inst.attrs().find("axes"); it != inst.attrs().end())
      for (int64_t a : it->second.ints()) {
        if (a < 0 || a >= static_cast<int64_t>(mesh.size()))
          continue;
        group *= mesh[a].second;
        outermost = std::min(outermost, a);
        axes += (axes.empty() ? "" : ",") + mesh[a].first;
      }
    if (group <= 1)
      continue;
    bool onNode = withinNodes(span(outermost));
    double bw = (onNode ? topology.intraGBps : topology.interGBps) * 1e9;
    double alpha =
        (onNode ? topology.intraLatencyUs : topology.interLatencyUs) * 1e-6;
    // Ring algorithms: an all-reduce is a reduce-scatter and an all-gather,
    // each moving (n-1)/n of the payload in n-1 steps.
    int64_t bytes = std::max(bytesOf(typeOf(program, inst.operands(0))),
                             bytesOf(typeOf(program, inst.results(0))));
    double phases = reduce ? 2 : 1;
    double n = static_cast<double>(group);
    double t = phases * ((n - 1) / n * bytes / bw + (n - 1) * alpha);
    out.communicationSeconds += t;
    byAxis[axes] += t;
  }
  for (auto &[axis, t] : byAxis)
    out.communicationByAxis.push_back({axis, t});
  out.memoryBytes = stepMemoryBytes(program);
  return out;
}

int64_t stepMemoryBytes(const pb::Program &program) {
  // Per rank: every input (weights, optimizer state, the rank's batch), the
  // arena of everything the step computes, and the results it returns
  // beside its inputs (new parameters and state, gradients, the loss).
  int64_t bytes = 0;
  for (int32_t id : program.inputs())
    bytes += bytesOf(typeOf(program, id));
  return bytes + program.arena_bytes() + returnedBytes(program, true);
}

ArenaPeak arenaPeak(const pb::Program &program) {
  // The arena's buffers are the values instructions make there; a view
  // (no instruction of its own) shares its offset, and a read of it keeps
  // alive the buffer made last at that offset before the read.
  int64_t n = program.instructions_size();
  std::vector<int64_t> def(program.values_size(), -1),
      last(program.values_size(), -1);
  std::map<int64_t, std::vector<std::pair<int64_t, int32_t>>> madeAt;
  for (int64_t i = 0; i < n; ++i)
    for (int32_t r : program.instructions(i).results())
      if (r >= 0 && r < program.values_size() &&
          program.values(r).storage() == pb::Value::ARENA) {
        def[r] = last[r] = i;
        madeAt[program.values(r).offset()].push_back({i, r});
      }
  for (int64_t i = 0; i < n; ++i)
    for (int32_t o : program.instructions(i).operands()) {
      if (o < 0 || o >= program.values_size() ||
          program.values(o).storage() != pb::Value::ARENA)
        continue;
      int32_t buffer = o;
      if (def[o] < 0) {
        auto it = madeAt.find(program.values(o).offset());
        if (it == madeAt.end())
          continue;
        auto after =
            std::upper_bound(it->second.begin(), it->second.end(),
                             std::pair<int64_t, int32_t>{i, INT32_MAX});
        if (after == it->second.begin())
          continue;
        buffer = std::prev(after)->second;
      }
      last[buffer] = std::max(last[buffer], i);
    }
  std::vector<int64_t> delta(n + 1, 0);
  for (int32_t v = 0; v < program.values_size(); ++v)
    if (def[v] >= 0) {
      delta[def[v]] += bytesOf(typeOf(program, v));
      delta[last[v] + 1] -= bytesOf(typeOf(program, v));
    }
  ArenaPeak peak;
  int64_t live = 0;
  for (int64_t i = 0; i < n; ++i) {
    live += delta[i];
    if (live > peak.liveBytes)
      peak = {live, i};
  }
  return peak;
}

std::vector<MeshTrial> meshTrials(int64_t devices,
                                  const std::string &recompute) {
  std::vector<MeshTrial> out;
  for (int64_t tp = 1; tp <= devices; ++tp)
    if (devices % tp == 0)
      out.push_back({devices / tp, tp, 0, recompute});
  return out;
}

/// Why no candidate can be used: a fault of the model, not of a mesh, once
/// (as without --devices); else every candidate's reason.
static std::string noFitError(const std::vector<pb::MeshCandidate> &candidates,
                              const std::vector<size_t> &order, int64_t devices,
                              int64_t memoryPerDevice) {
  bool same = !order.empty();
  for (size_t i : order)
    same = same && candidates[i].memory_bytes() == 0 &&
           candidates[i].refused() == candidates[order[0]].refused();
  if (same)
    return candidates[order[0]].refused();
  std::string error = devices > 0 ? "no mesh of " + std::to_string(devices) +
                                        " devices can train this model:"
                                  : "the step does not fit " +
                                        humanBytes(memoryPerDevice) +
                                        " per device with any recomputation "
                                        "or sequence parallelism:";
  for (size_t i : order) {
    const pb::MeshCandidate &c = candidates[i];
    error += " dp=" + std::to_string(c.dp()) + ",tp=" + std::to_string(c.tp()) +
             (c.zero() ? ",zero=" + std::to_string(c.zero()) : "") +
             (c.recompute().empty() ? "" : ",recompute=" + c.recompute()) +
             (c.sequence_parallel() ? ",sequence-parallel" : "") + ": " +
             c.refused() + ";";
  }
  error.pop_back();
  return error;
}

bool chooseMesh(std::vector<MeshTrial> trials, int64_t devices,
                int64_t memoryPerDevice, bool recomputeLadder,
                bool sequenceLadder, const Topology &topology,
                const CompileTrial &compile, pb::MeshChoice &choice,
                pb::Program &chosen, MeshTrial &chosenTrial,
                std::string &error) {
  choice.set_devices(devices);
  choice.set_memory_per_device(memoryPerDevice);
  choice.set_node_size(topology.nodeSize);
  choice.set_intra_node_gbps(topology.intraGBps);
  choice.set_inter_node_gbps(topology.interGBps);
  choice.set_device_tflops(topology.deviceTflops);
  choice.set_intra_node_latency_us(topology.intraLatencyUs);
  choice.set_inter_node_latency_us(topology.interLatencyUs);
  std::vector<pb::MeshCandidate> candidates;
  std::vector<pb::Program> programs;
  std::vector<bool> redundant;
  // Best first: a ZeRO stage or a recomputation of a plan is never faster
  // than the plan (more traffic, more FLOPs), so the plan's time bounds
  // it, and once a plan that fits is at least as fast as every bound left,
  // nothing left is compiled (LLaMA-3-8B on 64 devices: a fifth of the
  // trials).
  std::vector<std::pair<double, MeshTrial>> pending;
  for (const MeshTrial &t : trials)
    pending.push_back({0.0, t});
  trials.clear();
  double bestFit = std::numeric_limits<double>::infinity();
  while (!pending.empty()) {
    auto next = std::min_element(
        pending.begin(), pending.end(),
        [](const auto &a, const auto &b) { return a.first < b.first; });
    if (next->first >= bestFit)
      break;
    trials.push_back(next->second);
    pending.erase(next);
    size_t i = trials.size() - 1;
    MeshTrial trial = trials[i];
    programs.emplace_back();
    redundant.push_back(false);
    pb::MeshCandidate c;
    c.set_dp(trial.dp);
    c.set_tp(trial.tp);
    c.set_zero(trial.zero);
    if (trial.recompute != "none")
      c.set_recompute(trial.recompute);
    c.set_sequence_parallel(trial.sequenceParallel);
    std::string why;
    if (!compile(trial, programs[i], why)) {
      c.set_refused(why.empty() ? "does not compile" : why);
      candidates.push_back(c);
      continue;
    }
    // A policy that made nothing again (no copy lowered the peak) is the
    // plan without it: not a candidate of its own.
    if (trial.recompute != "none" &&
        std::none_of(
            programs[i].instructions().begin(),
            programs[i].instructions().end(),
            [](const pb::Instruction &inst) { return inst.recomputed(); })) {
      redundant[i] = true;
      candidates.push_back(c);
      continue;
    }
    std::vector<std::pair<std::string, int64_t>> mesh;
    if (trial.dp > 1)
      mesh.push_back({"dp", trial.dp});
    if (trial.tp > 1 || trial.dp == 1)
      mesh.push_back({"tp", trial.tp});
    StepEstimate e = estimateStep(programs[i], mesh, topology);
    c.set_compute_seconds(e.computeSeconds);
    c.set_communication_seconds(e.communicationSeconds);
    c.set_memory_bytes(e.memoryBytes);
    for (const auto &[axis, t] : e.communicationByAxis)
      (*c.mutable_communication_by_axis())[axis] = t;
    if (memoryPerDevice > 0 && e.memoryBytes > memoryPerDevice) {
      std::string need = humanBytes(e.memoryBytes),
                  budget = humanBytes(memoryPerDevice);
      if (need == budget) { // close: the exact counts tell them apart
        need = std::to_string(e.memoryBytes) + " B";
        budget = std::to_string(memoryPerDevice) + " B";
      }
      c.set_refused("needs " + need + " per device, over " + budget);
      // ZeRO moves at least the bytes stage 0 does (an all-reduce is a
      // reduce-scatter and an all-gather), so it only ever wins on memory:
      // its stages are tried where stage 0 does not fit.
      double bound = e.computeSeconds + e.communicationSeconds;
      // (With --sequence-parallel on every trial has it: its stages too.)
      bool plain = trial.recompute == "none" && !trial.sequenceParallel;
      if (trial.zero == 0 && trial.dp > 1 && trial.recompute == "none" &&
          (plain || !sequenceLadder))
        for (int64_t stage = 1; stage <= 3; ++stage)
          pending.push_back(
              {bound,
               {trial.dp, trial.tp, stage, "none", trial.sequenceParallel}});
      // Sequence parallelism moves the all-reduces' bytes as reduce-scatters
      // and all-gathers (a latency more each) and splits the activations
      // between the blocks: tried, as recomputation, where the plan does
      // not fit.
      // (Neither helps where what is not activations is over the budget.)
      bool restFits =
          e.memoryBytes - programs[i].arena_bytes() <= memoryPerDevice;
      if (sequenceLadder && trial.tp > 1 && plain && restFits)
        pending.push_back(
            {bound, {trial.dp, trial.tp, trial.zero, "none", true}});
      // Recomputation trades FLOPs for activations: each policy is tried
      // on a mesh (and ZeRO stage) that does not fit without it.
      if (recomputeLadder && trial.recompute == "none" && restFits)
        for (const char *policy : {"selective", "full"})
          pending.push_back({bound,
                             {trial.dp, trial.tp, trial.zero, policy,
                              trial.sequenceParallel}});
    } else {
      bestFit = std::min(bestFit, e.computeSeconds + e.communicationSeconds);
    }
    candidates.push_back(c);
  }
  // Usable first, then by step time (compute and communication, not
  // overlapped: the conservative bound), then by memory.
  std::vector<size_t> order;
  for (size_t i = 0; i < candidates.size(); ++i)
    if (!redundant[i])
      order.push_back(i);
  auto seconds = [&](size_t i) {
    return candidates[i].compute_seconds() +
           candidates[i].communication_seconds();
  };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    bool ua = candidates[a].refused().empty(),
         ub = candidates[b].refused().empty();
    if (ua != ub)
      return ua;
    if (seconds(a) != seconds(b))
      return seconds(a) < seconds(b);
    return candidates[a].memory_bytes() < candidates[b].memory_bytes();
  });
  for (size_t i : order)
    *choice.add_candidates() = candidates[i];
  if (order.empty() || !candidates[order[0]].refused().empty()) {
    error = noFitError(candidates, order, devices, memoryPerDevice);
    return false;
  }
  chosen = std::move(programs[order[0]]);
  chosenTrial = trials[order[0]];
  return true;
}

} // namespace cleave::driver

//===- Inspect.cpp - cleave inspect: what a bundle does -------------------===//
//
// Reads only the bundle's plan: per parameter its global shape, sharding and
// per-rank shape; the collectives of one step; per-rank memory.
//
//===----------------------------------------------------------------------===//

#include "cleave/Driver/Inspect.h"
#include "cleave/Driver/Bundle.h"
#include "cleave/Driver/Driver.h"
#include "cleave/Driver/MeshChoice.h"
#include "cleave/runtime/executor.h"
#include "cleave/runtime/store.h"
#include "cleave/runtime/trainer.h"
#include "cleave/runtime/types.h"
#include "plan/plan.pb.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <map>

namespace pb = ::cleave::plan;
namespace rt = ::cleave::rt;

namespace {

int64_t bytesOf(const pb::TensorType &t) {
  return cleave::driver::planTensorBytes(t);
}

std::string shapeString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

} // namespace

namespace {
struct ParamRow {
  std::string name, sharding;
  std::vector<int64_t> shape, local;
  std::string segmentOf;   // a piece of this model tensor
  int64_t dpSplitDim = -1; // ZeRO 3 on a dp x tp mesh: split over dp too
  /// As the step holds it: f32, or bf16 for a frozen weight under mixed
  /// precision.
  std::string dtype = "f32";
};
/// The layer a location names: its op's module path up to the first
/// component that ends in ".N" ("/layers.3/mlp/w2/MatMul": "layers.3";
/// "/encoder/layer.0/attention/...": "encoder/layer.0"), "" where none
/// does (embeddings, the head, the loss).
std::string layerOf(llvm::StringRef loc) {
  size_t q = loc.find("\"/");
  if (q == llvm::StringRef::npos)
    return "";
  llvm::StringRef path =
      loc.substr(q + 2).take_until([](char c) { return c == '"'; });
  llvm::SmallVector<llvm::StringRef> parts;
  path.split(parts, '/', -1, /*KeepEmpty=*/false);
  std::string prefix;
  for (llvm::StringRef part : parts) {
    prefix += (prefix.empty() ? "" : "/") + part.str();
    auto [name, number] = part.rsplit('.');
    if (!number.empty() && number != part && !name.empty() &&
        llvm::all_of(number, [](char c) { return c >= '0' && c <= '9'; }))
      return prefix;
  }
  return "";
}

struct CollectiveRow {
  std::string kind, phase, source, reason, carries, origin, layer;
  int64_t bytes;
  /// What each rank sends on a ring of the group's n ranks: 2(n-1)/n of
  /// an all-reduce's payload, (n-1)/n of the others' (an all_to_all keeps
  /// its own chunk), so that plans mixing kinds compare.
  int64_t wireBytes;
  bool megatron;
  std::vector<std::string> axes;
};
/// What `cleave inspect` shows of a bundle.
struct BundleSummary {
  int64_t tp = 1;
  /// The mesh's axes, outermost first: (name, size).
  std::vector<std::pair<std::string, int64_t>> mesh;
  std::vector<ParamRow> params;
  /// What does not train (frozen weights, BatchNorm statistics), split as
  /// the layout search chose like the parameters.
  std::vector<ParamRow> buffers;
  std::vector<CollectiveRow> collectives;
  int64_t paramBytes = 0, gradientBytes = 0, stateBytes = 0,
          activationBytes = 0;
  /// Mixed precision: the f32 masters of the weights read through bf16
  /// copies (0 in f32, where the parameters are what the products read).
  int64_t masterBytes = 0;
  /// What the step returns beside its inputs, gradients aside: new
  /// parameters and state, the loss, the model's outputs (made in the
  /// caller's tensors, not the arena).
  int64_t resultBytes = 0;
  /// State that does not train (frozen weights, BatchNorm statistics), as
  /// each rank holds it: the mesh chooser counts it too.
  int64_t bufferBytes = 0;
  /// ZeRO 2 returns each rank's gradient shard; else they are counted at
  /// the parameters' size.
  bool gradientsReturned = false;
  /// "f32", or the mixed precision the step was compiled with.
  std::string precision = "f32";
  /// How --devices chose the mesh; null when the mesh was given.
  const pb::MeshChoice *choice = nullptr;
  /// Instructions per kernel of the step (attention and attention_backward
  /// show whether the fusion happened).
  std::map<std::string, int64_t> kernels;
  /// --recompute's policy ("none" when the step keeps everything), the
  /// forward ops it copies into the backward and their product FLOPs,
  /// beside the whole step's.
  std::string recompute = "none";
  int64_t recomputedOps = 0;
  double recomputedFlops = 0, stepFlops = 0;
  /// The kernels made again, with their counts.
  std::map<std::string, int64_t> recomputedKernels;
  /// Sequence parallelism: whether it was asked for, and where its
  /// regions start (each reduce-scatter of a block's partial sum into the
  /// tokens' split, up to the all-gather of the next op that reads it
  /// whole): the collective's index among the step's.
  bool sequenceParallel = false;
  std::vector<size_t> sequenceRegions;
  /// What --devices and --memory-per-device count for the rank.
  int64_t totalBytes = 0;
  /// Every batch shape's inputs (batchShapeText) and its step's arena: a
  /// bundle compiled for several trains on each (the figures here are the
  /// first's).
  std::vector<std::pair<std::string, int64_t>> batchShapes;
  /// The planned arena (activationBytes less the half copies counted as
  /// parameters), its most bytes live at once, and the instruction then
  /// running.
  int64_t arenaBytes = 0;
  cleave::driver::ArenaPeak peak;
  std::string peakKernel, peakLocation;
};

/// Mixed precision, counted as ZeRO's paper and Megatron count it: a weight
/// the step reads through a bf16 copy is that copy under parameters (and
/// its gradient, made by bf16 products, at the same size), its f32 master
/// is a row of its own beside the optimizer state, and the copies leave
/// the arena's figure (they live there) so that the rows still add up to
/// what the rank holds.
void countHalfCopies(const pb::Program &program, BundleSummary &out) {
  // Mixed precision rounds a weight before it moves it (x W^T), so its
  // copy is a cast of the weight itself.
  std::map<int32_t, int64_t> copyBytes; // weight value -> its copy's bytes
  for (const pb::Instruction &inst : program.instructions()) {
    if (inst.kernel() != "cast" || inst.operands_size() != 1)
      continue;
    int dtype = program.values(inst.results(0)).type().dtype();
    if (dtype == pb::BF16 || dtype == pb::F16)
      copyBytes[inst.operands(0)] +=
          bytesOf(program.values(inst.results(0)).type());
  }
  int64_t copies = 0, masters = 0;
  for (int i = 0; i < program.inputs_size(); ++i) {
    auto it = copyBytes.find(program.inputs(i));
    if (program.input_bindings(i).role() != pb::Binding::PARAMETER ||
        it == copyBytes.end())
      continue;
    copies += it->second;
    masters += bytesOf(program.values(program.inputs(i)).type());
  }
  out.paramBytes += copies - masters;
  if (!out.gradientsReturned) // else they are the step's f32 results
    out.gradientBytes += copies - masters;
  out.masterBytes += masters;
  out.activationBytes -= std::min(copies, out.activationBytes);
}

BundleSummary summarize(const pb::Plan &plan) {
  BundleSummary out;
  rt::MeshGeometry mesh = rt::meshOf(plan);
  out.tp = mesh.tensorParts();
  for (size_t i = 0; i < mesh.shape.size(); ++i)
    out.mesh.push_back(
        {plan.mesh_axes_size() ? plan.mesh_axes(i) : "tp", mesh.shape[i]});
  const pb::Program &program = plan.programs(0);
  for (const pb::Program &p : plan.programs())
    if (!rt::isForwardProgram(p))
      out.batchShapes.emplace_back(cleave::driver::batchShapeText(p, mesh.dp),
                                   p.arena_bytes());
  std::map<std::string, rt::Split> split;
  std::map<std::string, int64_t> dpSplit; // ZeRO 3 on a dp x tp mesh
  for (const pb::Binding &b : program.input_bindings()) {
    bool weight =
        b.role() == pb::Binding::PARAMETER || b.role() == pb::Binding::BUFFER;
    if (weight && b.has_split_dim())
      split[b.name()] = rt::splitOf(b);
    if (weight && b.has_dp_split_dim())
      dpSplit[b.name()] = b.dp_split_dim();
  }

  for (const pb::TensorEntry &t : plan.tensors()) {
    bool trains = t.role() == pb::Binding::PARAMETER;
    if (!trains && t.role() != pb::Binding::BUFFER)
      continue;
    ParamRow row{t.name(),
                 "replicated",
                 {t.type().shape().begin(), t.type().shape().end()},
                 {}};
    row.local = row.shape;
    row.segmentOf = t.segment_of();
    row.dtype = rt::dtypeName(rt::fromPlan(t.type().dtype()));
    int64_t bytes = bytesOf(t.type());
    if (auto it = split.find(t.name()); it != split.end()) {
      rt::Split s = it->second;
      int64_t dim = s.dim;
      row.sharding =
          "split(" + std::to_string(dim) +
          (s.blocks > 1 ? ", " + std::to_string(s.blocks) + " blocks"
                        : std::string()) +
          (s.granule > 1 ? ", by " + std::to_string(s.granule) + "-wide heads"
                         : std::string()) +
          ")";
      // tp factored: each chunk held by a group of neighbouring ranks (or
      // the inner axis's ranks of every group cutting it alike).
      if (s.copies > 1)
        row.sharding += " per group of " + std::to_string(s.copies) + " ranks";
      else if (s.parts > 0)
        row.sharding += " in " + std::to_string(s.parts) + ", alike per group";
      // A dimension tp does not divide is split in padded chunks.
      row.local[dim] = rt::localExtent(row.local[dim], s, out.tp);
      bytes = bytes / row.shape[dim] * row.local[dim];
    }
    if (auto it = dpSplit.find(t.name()); it != dpSplit.end()) {
      row.dpSplitDim = it->second;
      row.local[it->second] /= mesh.dp;
      bytes /= mesh.dp;
    }
    if (trains) {
      out.paramBytes += bytes;
      out.params.push_back(row);
    } else {
      out.buffers.push_back(row);
    }
  }
  for (int i = 0; i < program.inputs_size(); ++i) {
    pb::Binding::Role role = program.input_bindings(i).role();
    int64_t bytes = bytesOf(program.values(program.inputs(i)).type());
    if (role == pb::Binding::OPTIMIZER_STATE)
      out.stateBytes += bytes;
    else if (role == pb::Binding::BUFFER)
      out.bufferBytes += bytes;
  }
  // Gradients as the step returns them: each rank's shard under ZeRO 2.
  bool returnsGradients = false;
  for (int i = 0; i < program.output_bindings_size(); ++i)
    if (program.output_bindings(i).role() == pb::Binding::GRADIENT) {
      returnsGradients = true;
      out.gradientBytes += bytesOf(program.values(program.outputs(i)).type());
    }
  if (!returnsGradients)
    out.gradientBytes = out.paramBytes;
  out.gradientsReturned = returnsGradients;

  if (!plan.train_config().recompute().empty())
    out.recompute = plan.train_config().recompute();
  out.sequenceParallel = plan.train_config().sequence_parallel();
  for (const pb::Instruction &inst : program.instructions()) {
    ++out.kernels[inst.kernel()];
    double flops = cleave::driver::instructionFlops(program, inst);
    out.stepFlops += flops;
    if (inst.recomputed()) {
      ++out.recomputedOps;
      ++out.recomputedKernels[inst.kernel()];
      out.recomputedFlops += flops;
    }
    if (inst.kernel() != "all_reduce" && inst.kernel() != "all_gather" &&
        inst.kernel() != "reduce_scatter" && inst.kernel() != "all_to_all")
      continue;
    // The payload: the larger side (the gathered or reduced tensor).
    int64_t bytes = std::max(bytesOf(program.values(inst.operands(0)).type()),
                             bytesOf(program.values(inst.results(0)).type()));
    // The mesh axes it runs over, by name.
    std::vector<std::string> axes;
    int64_t group = 1;
    auto it = inst.attrs().find("axes");
    if (it != inst.attrs().end())
      for (int64_t a : it->second.ints()) {
        bool known = a >= 0 && a < static_cast<int64_t>(out.mesh.size());
        axes.push_back(known ? out.mesh[a].first : std::to_string(a));
        group *= known ? out.mesh[a].second : 1;
      }
    int64_t wire =
        bytes * (group - 1) / group * (inst.kernel() == "all_reduce" ? 2 : 1);
    out.collectives.push_back(
        {inst.kernel(), inst.phase().empty() ? "forward" : inst.phase(),
         inst.location(), inst.reason(), inst.carries(), inst.origin(),
         layerOf(inst.origin()), bytes, wire, inst.megatron(), axes});
    if (llvm::StringRef(inst.reason()).starts_with("sequence parallelism"))
      out.sequenceRegions.push_back(out.collectives.size() - 1);
  }
  out.arenaBytes = out.activationBytes = program.arena_bytes();
  out.totalBytes = cleave::driver::stepMemoryBytes(program);
  out.peak = cleave::driver::arenaPeak(program);
  if (out.peak.instruction >= 0) {
    const pb::Instruction &at = program.instructions(out.peak.instruction);
    out.peakKernel = at.kernel();
    out.peakLocation = at.location();
  }
  out.resultBytes = cleave::driver::returnedBytes(program, /*gradients=*/false);
  if (!plan.train_config().precision().empty()) {
    out.precision = plan.train_config().precision();
    countHalfCopies(program, out);
  }
  if (plan.has_mesh_choice())
    out.choice = &plan.mesh_choice();
  return out;
}

llvm::json::Object choiceJson(const pb::MeshChoice &choice) {
  llvm::json::Array candidates;
  for (const pb::MeshCandidate &c : choice.candidates()) {
    llvm::json::Object byAxis;
    for (const auto &[axis, t] : c.communication_by_axis())
      byAxis[axis] = t;
    llvm::json::Object o{
        {"dp", c.dp()},
        {"tp", c.tp()},
        {"zero", c.zero()},
        {"recompute", c.recompute().empty() ? "none" : c.recompute()},
        {"sequence_parallel", c.sequence_parallel()},
        {"chosen", &c == &choice.candidates(0)},
        {"step_seconds", c.compute_seconds() + c.communication_seconds()},
        {"compute_seconds", c.compute_seconds()},
        {"communication_seconds", c.communication_seconds()},
        {"communication_by_axis", std::move(byAxis)},
        {"memory_bytes", c.memory_bytes()}};
    if (!c.refused().empty())
      o["refused"] = c.refused();
    candidates.push_back(std::move(o));
  }
  return llvm::json::Object{
      {"devices", choice.devices()},
      {"memory_per_device", choice.memory_per_device()},
      {"node_size", choice.node_size()},
      {"intra_node_gbps", choice.intra_node_gbps()},
      {"inter_node_gbps", choice.inter_node_gbps()},
      {"device_tflops", choice.device_tflops()},
      {"intra_node_latency_us", choice.intra_node_latency_us()},
      {"inter_node_latency_us", choice.inter_node_latency_us()},
      {"candidates", std::move(candidates)}};
}

/// The table of --devices' candidates, the chosen one marked.
void printChoice(const pb::MeshChoice &choice, llvm::raw_ostream &os) {
  os << "\n"
     << (choice.devices() ? "mesh chosen for " +
                                std::to_string(choice.devices()) + " devices"
                          : std::string("recomputation chosen for the mesh"))
     << " ("
     << (choice.memory_per_device()
             ? cleave::driver::humanBytes(choice.memory_per_device()) +
                   " per device"
             : std::string("no memory budget"))
     << "; " << choice.node_size() << " per node, links "
     << llvm::format("%g/%g GB/s, %g TFLOP/s)\n", choice.intra_node_gbps(),
                     choice.inter_node_gbps(), choice.device_tflops())
     << "     dp   tp  zero recompute sp    step (ms)  compute  "
        "communication  memory/rank\n";
  for (const pb::MeshCandidate &c : choice.candidates()) {
    os << (&c == &choice.candidates(0) && c.refused().empty() ? "  * " : "    ")
       << llvm::format("%-4lld %-4lld %-4lld %-9s %-3s", (long long)c.dp(),
                       (long long)c.tp(), (long long)c.zero(),
                       c.recompute().empty() ? "none" : c.recompute().c_str(),
                       c.sequence_parallel() ? "sp" : "-");
    if (c.refused().empty() || c.memory_bytes())
      os << llvm::format(
                " %10.3f %8.3f %14.3f  ",
                1e3 * (c.compute_seconds() + c.communication_seconds()),
                1e3 * c.compute_seconds(), 1e3 * c.communication_seconds())
         << cleave::driver::humanBytes(c.memory_bytes());
    if (!c.refused().empty())
      os << "  refused: " << c.refused();
    os << "\n";
  }
}

/// Per layer, in the order the step first meets it: its collectives, how
/// many are Megatron's own, and their bytes. Collectives whose value was
/// made outside any layer (embeddings, the head, the loss) are "".
struct LayerRow {
  std::string layer;
  int collectives = 0, megatron = 0;
  int64_t bytes = 0;
};
std::vector<LayerRow> byLayer(const BundleSummary &sum) {
  std::vector<LayerRow> rows;
  std::map<std::string, size_t> at;
  for (const CollectiveRow &c : sum.collectives) {
    auto [it, fresh] = at.try_emplace(c.layer, rows.size());
    if (fresh)
      rows.push_back({c.layer});
    LayerRow &r = rows[it->second];
    ++r.collectives;
    r.megatron += c.megatron;
    r.bytes += c.bytes;
  }
  return rows;
}

void printJson(const BundleSummary &sum, llvm::raw_ostream &os) {
  llvm::json::Object root;
  llvm::json::Object mesh;
  for (const auto &[axis, size] : sum.mesh)
    mesh[axis] = size;
  root["mesh"] = std::move(mesh);
  root["precision"] = sum.precision;
  llvm::json::Array shapes;
  for (const auto &[inputs, arena] : sum.batchShapes)
    shapes.push_back(
        llvm::json::Object{{"inputs", inputs}, {"arena_bytes", arena}});
  root["batch_shapes"] = std::move(shapes);
  auto rows = [](const std::vector<ParamRow> &list, bool trainable) {
    llvm::json::Array ps;
    for (const ParamRow &p : list) {
      llvm::json::Object o{{"name", p.name},         {"shape", p.shape},
                           {"sharding", p.sharding}, {"local_shape", p.local},
                           {"dtype", p.dtype},       {"trainable", trainable}};
      if (!p.segmentOf.empty())
        o["segment_of"] = p.segmentOf;
      if (p.dpSplitDim >= 0)
        o["dp_split_dim"] = p.dpSplitDim;
      ps.push_back(std::move(o));
    }
    return ps;
  };
  root["parameters"] = rows(sum.params, true);
  root["buffers"] = rows(sum.buffers, false);
  llvm::json::Array cs;
  for (const CollectiveRow &c : sum.collectives)
    cs.push_back(llvm::json::Object{{"kind", c.kind},
                                    {"phase", c.phase},
                                    {"bytes", c.bytes},
                                    {"wire_bytes", c.wireBytes},
                                    {"source", c.source},
                                    {"megatron", c.megatron},
                                    {"axes", c.axes},
                                    {"reason", c.reason},
                                    {"carries", c.carries},
                                    {"origin", c.origin},
                                    {"layer", c.layer}});
  root["collectives"] = std::move(cs);
  llvm::json::Array layers;
  for (const LayerRow &r : byLayer(sum))
    layers.push_back(llvm::json::Object{{"layer", r.layer},
                                        {"collectives", r.collectives},
                                        {"megatron", r.megatron},
                                        {"bytes", r.bytes}});
  root["layers"] = std::move(layers);
  root["memory_per_rank"] = llvm::json::Object{
      {"parameters", sum.paramBytes},
      {"master_weights", sum.masterBytes},
      {"gradients", sum.gradientBytes},
      {"optimizer_state", sum.stateBytes},
      {"buffers", sum.bufferBytes},
      {"activations_peak", sum.activationBytes},
      {"arena", sum.arenaBytes},
      {"arena_live_at_peak", sum.peak.liveBytes},
      {"peak_instruction", llvm::json::Object{{"index", sum.peak.instruction},
                                              {"kernel", sum.peakKernel},
                                              {"location", sum.peakLocation}}},
      {"results", sum.resultBytes},
      {"total", sum.totalBytes}};
  llvm::json::Object kernels;
  for (const auto &[name, count] : sum.kernels)
    kernels[name] = count;
  root["kernels"] = std::move(kernels);
  llvm::json::Object remade;
  for (const auto &[name, count] : sum.recomputedKernels)
    remade[name] = count;
  root["recompute"] = llvm::json::Object{{"policy", sum.recompute},
                                         {"ops", sum.recomputedOps},
                                         {"kernels", std::move(remade)},
                                         {"flops", sum.recomputedFlops},
                                         {"step_flops", sum.stepFlops}};
  llvm::json::Array regions;
  for (size_t i : sum.sequenceRegions) {
    const CollectiveRow &c = sum.collectives[i];
    regions.push_back(llvm::json::Object{
        {"phase", c.phase}, {"source", c.source}, {"bytes", c.bytes}});
  }
  root["sequence_parallel"] = llvm::json::Object{
      {"on", sum.sequenceParallel}, {"regions", std::move(regions)}};
  if (sum.choice)
    root["mesh_choice"] = choiceJson(*sum.choice);
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(root))) << "\n";
}

void printText(const BundleSummary &sum, llvm::raw_ostream &os) {
  os << "mesh:";
  for (const auto &[axis, size] : sum.mesh)
    os << (&axis == &sum.mesh.front().first ? " " : ", ") << axis << " = "
       << size;
  if (sum.batchShapes.size() > 1) {
    os << "\nbatch shapes (a step each, the weights shared; the figures "
          "below are the first's):";
    for (const auto &[inputs, arena] : sum.batchShapes)
      os << "\n  " << inputs << "  (arena " << arena << " B)";
  }
  if (sum.precision != "f32")
    os << "\nprecision: " << sum.precision
       << " (matmuls and convolutions on rounded copies, accumulated in f32; "
          "f32 master weights, optimizer state and reductions)";
  size_t width = 4;
  for (const auto *list : {&sum.params, &sum.buffers})
    for (const ParamRow &p : *list)
      width = std::max(width, p.name.size());
  auto table = [&](const std::vector<ParamRow> &list) {
    for (const ParamRow &p : list)
      os << "  " << llvm::left_justify(p.name, width) << "  "
         << llvm::left_justify(shapeString(p.shape), 16) << "  "
         << llvm::left_justify(p.sharding, 10) << "  " << shapeString(p.local)
         << "\n";
  };
  os << "\n\nparameters\n";
  table(sum.params);
  if (!sum.buffers.empty()) {
    os << "\nbuffers (do not train: frozen weights, statistics)\n";
    table(sum.buffers);
  }
  std::map<std::pair<std::string, std::string>, std::pair<int, int64_t>> sums;
  for (const CollectiveRow &c : sum.collectives) {
    auto &s = sums[{c.phase, c.kind}];
    ++s.first;
    s.second += c.bytes;
  }
  os << "\ncollectives per step\n";
  if (sums.empty())
    os << "  none\n";
  for (const auto &[key, s] : sums)
    os << "  " << llvm::left_justify(key.first, 10) << " "
       << llvm::left_justify(key.second, 15) << llvm::format("%4d", s.first)
       << "  " << s.second << " bytes\n";
  std::vector<LayerRow> layers = byLayer(sum);
  if (layers.size() > 1 || (layers.size() == 1 && !layers[0].layer.empty())) {
    os << "\ncollectives by layer (where the value they carry is made)\n";
    for (const LayerRow &r : layers)
      os << "  "
         << llvm::left_justify(r.layer.empty() ? "(outside layers)" : r.layer,
                               18)
         << llvm::format("%4d", r.collectives) << "  (" << r.megatron
         << " Megatron's)  " << r.bytes << " bytes\n";
  }
  // The collectives a user should look at: the ones Megatron's own plan
  // would not have, each with the partitioner's reason.
  std::vector<const CollectiveRow *> others;
  for (const CollectiveRow &c : sum.collectives)
    if (!c.megatron)
      others.push_back(&c);
  if (!others.empty()) {
    constexpr size_t kShown = 20;
    os << "\noutside Megatron's pattern (" << others.size() << ")\n";
    for (size_t i = 0; i < others.size() && i < kShown; ++i)
      os << "  " << others[i]->phase << " " << others[i]->kind << " "
         << others[i]->bytes << " bytes: "
         << (others[i]->reason.empty() ? "(no reason recorded)"
                                       : others[i]->reason)
         << "\n";
    if (others.size() > kShown)
      os << "  ... " << others.size() - kShown
         << " more; --json lists every collective with its reason\n";
  }
  bool half = sum.precision != "f32";
  os << "\nmemory per rank (bytes)\n"
     << "  parameters       " << sum.paramBytes
     << (half ? " (the " + sum.precision + " copies the products read)" : "")
     << "\n"
     << "  gradients        " << sum.gradientBytes << "\n";
  if (half)
    os << "  master weights   " << sum.masterBytes
       << " (f32, read by the update only)\n";
  os << "  optimizer state  " << sum.stateBytes << "\n"
     << "  buffers          " << sum.bufferBytes
     << " (state that does not train: frozen weights, statistics)\n"
     << "  activations peak " << sum.activationBytes << " (of the arena's "
     << sum.arenaBytes << ", " << sum.peak.liveBytes
     << " live at once during instruction " << sum.peak.instruction << ", "
     << sum.peakKernel
     << (sum.peakLocation.empty() ? "" : " at " + sum.peakLocation) << ")\n"
     << "  step results     " << sum.resultBytes
     << " (new parameters and state, the loss: made beside the inputs; "
        "the CPU backend writes the new state over the old)\n"
     << "  total            " << sum.totalBytes
     << " (inputs, arena and step results: what --devices and "
        "--memory-per-device count)\n";
  if (sum.recompute != "none") {
    double share =
        sum.stepFlops > 0 ? 100 * sum.recomputedFlops / sum.stepFlops : 0.0;
    os << "\nrecomputation: " << sum.recompute << ", " << sum.recomputedOps
       << " forward ops made again in the backward, "
       << llvm::format("%.4g", sum.recomputedFlops / 1e9)
       << " GFLOP of products (" << llvm::format("%.1f", share)
       << "% of the step's)\n ";
    for (const auto &[name, count] : sum.recomputedKernels)
      os << " " << name << " x" << count;
    os << "\n";
  }
  if (sum.sequenceParallel) {
    os << "\nsequence parallelism: " << sum.sequenceRegions.size()
       << " regions between the blocks hold each rank's share of the tokens "
          "(each from a reduce-scatter to the all-gather of the next op that "
          "reads the value whole):\n";
    for (size_t i : sum.sequenceRegions)
      os << "  " << sum.collectives[i].phase << " " << sum.collectives[i].source
         << "\n";
  }
  if (sum.choice)
    printChoice(*sum.choice, os);
}
} // namespace

/// "input_ids int64[4, 32], labels int64[4, 32]".
std::string cleave::driver::batchShapeText(const pb::Program &program,
                                           int64_t dp) {
  std::string text;
  for (int i = 0; i < program.input_bindings_size(); ++i) {
    const pb::Binding &b = program.input_bindings(i);
    if (b.role() != pb::Binding::INPUT || b.micro_batch() > 0)
      continue;
    const pb::TensorType &t = program.values(program.inputs(i)).type();
    text += (text.empty() ? "" : ", ") + b.name() + " " +
            rt::describeTensor(rt::fromPlan(t.dtype()),
                               rt::globalInputShape(program, i, dp));
  }
  return text;
}

rt::Status cleave::driver::inspectBundle(const std::string &bundle, bool json,
                                         std::string *out) {
  pb::Plan plan;
  if (rt::Status s = rt::loadBundlePlan(bundle, &plan); !s)
    return s;
  BundleSummary sum = summarize(plan);
  llvm::raw_string_ostream os(*out);
  if (json)
    printJson(sum, os);
  else
    printText(sum, os);
  return rt::Status::ok();
}

int cleave::driver::runInspect(const std::string &bundle, bool json) {
  std::string text;
  if (rt::Status s = cleave::driver::inspectBundle(bundle, json, &text); !s) {
    llvm::errs() << "cleave: error: " << s.message() << "\n";
    return 1;
  }
  llvm::outs() << text;
  return 0;
}

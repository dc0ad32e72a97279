//===- fusion.cpp - Merges chains of elementwise instructions -------------===//

#include "core/program.h"
#include "core/reduce_plan.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>

namespace cleave::rt {

namespace {

std::optional<FusedCode> fusedCode(const std::string &kernel) {
  static const std::map<std::string, FusedCode> codes = {
      {"add", FusedCode::Add},         {"sub", FusedCode::Sub},
      {"mul", FusedCode::Mul},         {"div", FusedCode::Div},
      {"max", FusedCode::Max},         {"min", FusedCode::Min},
      {"pow", FusedCode::Pow},         {"neg", FusedCode::Neg},
      {"abs", FusedCode::Abs},         {"exp", FusedCode::Exp},
      {"log", FusedCode::Log},         {"sqrt", FusedCode::Sqrt},
      {"rsqrt", FusedCode::Rsqrt},     {"reciprocal", FusedCode::Reciprocal},
      {"tanh", FusedCode::Tanh},       {"erf", FusedCode::Erf},
      {"sigmoid", FusedCode::Sigmoid}, {"relu", FusedCode::Relu},
      {"select", FusedCode::Select},   {"broadcast", FusedCode::Identity},
      {"copy", FusedCode::Identity},   {"cmp_eq", FusedCode::Eq},
      {"cmp_ne", FusedCode::Ne},       {"cmp_lt", FusedCode::Lt},
      {"cmp_le", FusedCode::Le},       {"cmp_gt", FusedCode::Gt},
      {"cmp_ge", FusedCode::Ge},
  };
  auto it = codes.find(kernel);
  if (it == codes.end())
    return std::nullopt;
  return it->second;
}

/// \p operand broadcasts to \p result: same rank, each dim equal or 1.
bool broadcasts(const TensorType &operand, const TensorType &result) {
  if (operand.shape.size() != result.shape.size())
    return false;
  for (size_t d = 0; d < operand.shape.size(); ++d)
    if (operand.shape[d] != result.shape[d] && operand.shape[d] != 1)
      return false;
  return true;
}

bool isCompare(FusedCode c) { return c >= FusedCode::Eq && c <= FusedCode::Ge; }

bool isHalf(DType d) { return d == DType::BF16 || d == DType::F16; }

/// A cast between f32 and bf16 / f16 (mixed precision's): rounding, whose
/// result is stored in half precision, or widening, whose operand is read
/// from it.
std::optional<FusedCode> castCode(const LoadedProgram &p,
                                  const ProgramInstruction &inst) {
  if (inst.info.kernel != "cast" || inst.operands.size() != 1 ||
      inst.results.size() != 1 || inst.operands[0] < 0 || inst.results[0] < 0)
    return std::nullopt;
  DType from = p.values[inst.operands[0]].type.dtype;
  DType to = p.values[inst.results[0]].type.dtype;
  if (from == DType::F32 && isHalf(to))
    return to == DType::BF16 ? FusedCode::RoundBf16 : FusedCode::RoundF16;
  if (isHalf(from) && to == DType::F32)
    return FusedCode::Identity;
  return std::nullopt;
}

std::optional<FusedCode> codeOf(const LoadedProgram &p,
                                const ProgramInstruction &inst) {
  if (std::optional<FusedCode> c = castCode(p, inst))
    return c;
  return fusedCode(inst.info.kernel);
}

/// An f32 elementwise instruction (a comparison of f32 operands, bool; a
/// cast between f32 and bf16 / f16) whose operands are of its result's
/// shape, single elements, or broadcast to it.
bool fusable(const LoadedProgram &p, const ProgramInstruction &inst) {
  std::optional<FusedCode> code = codeOf(p, inst);
  if (!code || inst.results.size() != 1 || inst.results[0] < 0 ||
      inst.operands.size() != static_cast<size_t>(fusedArity(*code)))
    return false;
  const TensorType &r = p.values[inst.results[0]].type;
  bool cast = inst.info.kernel == "cast";
  DType result = isCompare(*code) ? DType::Bool : cast ? r.dtype : DType::F32;
  if (r.dtype != result || r.numElements() == 0)
    return false;
  for (size_t k = 0; k < inst.operands.size(); ++k) {
    int32_t id = inst.operands[k];
    if (id < 0)
      return false;
    const TensorType &t = p.values[id].type;
    // select's condition is bool; a widening cast reads bf16 / f16; every
    // other operand is f32.
    DType want = *code == FusedCode::Select && k == 0   ? DType::Bool
                 : cast && *code == FusedCode::Identity ? t.dtype
                                                        : DType::F32;
    if (t.dtype != want || (t.numElements() != 1 && !broadcasts(t, r)))
      return false;
  }
  return true;
}

bool overlap(const ProgramValue &a, const ProgramValue &b) {
  return writableOverlap(a, b);
}

struct Built;
void coalesce(const LoadedProgram &p, Built &b, const TensorType &shape);

/// The fused form of instructions \p members (in program order), or nullopt
/// when it cannot be (too many inputs, outputs or registers, or buffers that
/// overlap unsafely).
struct Built {
  FusedProgram program;
  std::vector<int32_t> inputs, outputs;
};

/// A reduce_sum or reduce_mean of f32, and its axes.
std::optional<std::vector<int64_t>> reduction(const ProgramInstruction &inst,
                                              bool *mean) {
  if (inst.info.kernel == "reduce_sum") {
    *mean = false;
    return inst.info.params<schema::Kernel::k_reduce_sum>().axes;
  }
  if (inst.info.kernel == "reduce_mean") {
    *mean = true;
    return inst.info.params<schema::Kernel::k_reduce_mean>().axes;
  }
  return std::nullopt;
}

/// \p reductions: reduce instructions of member results, all over the same
/// axes, that the group computes too.
std::optional<Built> build(const LoadedProgram &p,
                           const std::vector<size_t> &members,
                           const std::vector<int> &uses,
                           const std::vector<bool> &viewed,
                           const std::vector<size_t> &reductions = {}) {
  Built b;
  std::map<int32_t, int> reg;
  std::map<int32_t, int> usesInside;
  for (size_t r : reductions)
    ++usesInside[p.instructions[r].operands[0]];
  const TensorType &shape =
      p.values[p.instructions[members.front()].results[0]].type;
  b.program.numElements = shape.numElements();
  // Inputs first: registers 0..inputs-1.
  for (size_t m = 0; m < members.size(); ++m)
    for (int32_t id : p.instructions[members[m]].operands) {
      ++usesInside[id];
      bool produced = false;
      for (size_t j = 0; j < m && !produced; ++j)
        produced = p.instructions[members[j]].results[0] == id;
      if (produced || reg.count(id))
        continue;
      reg[id] = static_cast<int>(b.inputs.size());
      b.inputs.push_back(id);
      const TensorType &t = p.values[id].type;
      b.program.inputIsBool.push_back(t.dtype == DType::Bool);
      b.program.inputStorage.push_back(isHalf(t.dtype) ? t.dtype : DType::F32);
      if (isHalf(t.dtype) && t.shape != shape.shape)
        return std::nullopt; // the kernels read half inputs whole
      b.program.inputs.push_back(t.shape == shape.shape ? FusedInput::Full
                                 : t.numElements() == 1
                                     ? FusedInput::Scalar
                                     : FusedInput::Broadcast);
    }
  coalesce(p, b, shape);
  int next = static_cast<int>(b.inputs.size());
  for (size_t i : members) {
    const ProgramInstruction &inst = p.instructions[i];
    FusedOp op{*codeOf(p, inst), 0, 0, 0, 0};
    op.a = static_cast<uint8_t>(reg.at(inst.operands[0]));
    op.b = inst.operands.size() > 1
               ? static_cast<uint8_t>(reg.at(inst.operands[1]))
               : op.a;
    op.c = inst.operands.size() > 2
               ? static_cast<uint8_t>(reg.at(inst.operands[2]))
               : op.a;
    op.dst = static_cast<uint8_t>(next);
    reg[inst.results[0]] = next++;
    b.program.ops.push_back(op);
  }
  b.program.numRegisters = next;
  for (size_t i : members) {
    int32_t id = p.instructions[i].results[0];
    if (uses[id] > usesInside[id] || viewed[id]) {
      b.outputs.push_back(id);
      b.program.outputRegisters.push_back(static_cast<uint8_t>(reg.at(id)));
      DType d = p.values[id].type.dtype;
      b.program.outputIsBool.push_back(d == DType::Bool);
      b.program.outputStorage.push_back(isHalf(d) ? d : DType::F32);
    }
  }
  for (size_t r : reductions) {
    const ProgramInstruction &inst = p.instructions[r];
    bool mean = false;
    std::vector<int64_t> axes = *reduction(inst, &mean);
    b.program.reductions.push_back(
        {static_cast<uint8_t>(reg.at(inst.operands[0])), mean});
    b.program.shape = shape.shape;
    b.program.reduceAxes = axes;
    // Written when a thread finishes its outputs, while others still read:
    // no byte in common with what the group reads or writes.
    const ProgramValue &res = p.values[inst.results[0]];
    for (int32_t id : b.inputs)
      if (overlap(res, p.values[id]))
        return std::nullopt;
    for (size_t i : members)
      if (overlap(res, p.values[p.instructions[i].results[0]]))
        return std::nullopt;
  }
  if (b.inputs.size() > FusedProgram::kMaxInputs ||
      b.program.dims.size() > FusedProgram::kMaxDims ||
      b.outputs.size() > FusedProgram::kMaxOutputs ||
      next > FusedProgram::kMaxRegisters ||
      (b.outputs.empty() && reductions.empty()))
    return std::nullopt;
  // Element i of an output may be written before element j of an input is
  // read (other threads, other blocks): an output may only cover the same
  // bytes as a whole, same-shaped input of its own dtype (element i read
  // before it is written, by the same thread: a bf16 product's result read
  // widened and a bf16 result rounded in its place), or none of an input's.
  for (int32_t out : b.outputs) {
    const ProgramValue &o = p.values[out];
    for (size_t k = 0; k < b.inputs.size(); ++k) {
      const ProgramValue &in = p.values[b.inputs[k]];
      bool same = b.program.inputs[k] == FusedInput::Full &&
                  !b.program.inputIsBool[k] &&
                  b.program.inputStorage[k] == o.type.dtype &&
                  in.storage == o.storage && in.index == o.index &&
                  in.offset == o.offset && in.numBytes == o.numBytes;
      if (overlap(o, in) && !same)
        return std::nullopt;
    }
    for (int32_t other : b.outputs)
      if (other != out && overlap(o, p.values[other]))
        return std::nullopt;
  }
  return b;
}

/// The result's dims, merged where every Broadcast input's strides allow
/// (size-1 dims dropped), and those inputs' strides along them.
void coalesce(const LoadedProgram &p, Built &b, const TensorType &shape) {
  FusedProgram &f = b.program;
  f.strides.assign(f.inputs.size(), {});
  std::vector<std::vector<int64_t>> full(f.inputs.size());
  bool any = false;
  for (size_t k = 0; k < f.inputs.size(); ++k)
    if (f.inputs[k] == FusedInput::Broadcast) {
      full[k] = broadcastStrides(p.values[b.inputs[k]].type.shape, shape.shape);
      any = true;
    }
  f.dims.clear();
  if (!any)
    return;
  for (size_t d = 0; d < shape.shape.size(); ++d) {
    int64_t n = shape.shape[d];
    if (n == 1)
      continue;
    bool merge = !f.dims.empty();
    for (size_t k = 0; k < f.inputs.size() && merge; ++k)
      if (f.inputs[k] == FusedInput::Broadcast)
        merge = f.strides[k].back() == full[k][d] * n;
    if (merge) {
      f.dims.back() *= n;
      for (size_t k = 0; k < f.inputs.size(); ++k)
        if (f.inputs[k] == FusedInput::Broadcast)
          f.strides[k].back() = full[k][d];
      continue;
    }
    f.dims.push_back(n);
    for (size_t k = 0; k < f.inputs.size(); ++k)
      if (f.inputs[k] == FusedInput::Broadcast)
        f.strides[k].push_back(full[k][d]);
  }
}

/// Whether running \p a and \p b in the other order could change a result:
/// one reads or writes bytes the other writes (views included, as bytes).
bool conflicts(const LoadedProgram &p, const ProgramInstruction &a,
               const ProgramInstruction &b) {
  auto touches = [&](const std::vector<int32_t> &writes,
                     const std::vector<int32_t> &reads) {
    for (int32_t w : writes)
      for (int32_t r : reads)
        if (w >= 0 && r >= 0 && (w == r || overlap(p.values[w], p.values[r])))
          return true;
    return false;
  };
  return touches(a.results, b.operands) || touches(b.results, a.operands) ||
         touches(a.results, b.results);
}

bool conflictsWithAny(const LoadedProgram &p, const std::vector<size_t> &group,
                      const ProgramInstruction &inst) {
  for (size_t j : group)
    if (conflicts(p, p.instructions[j], inst))
      return true;
  return false;
}

/// A fused group: its members, and the instructions between them that run
/// before (hoisted) or after (sunk) the fused instruction instead.
struct Group {
  std::vector<size_t> members, hoisted, sunk, reductions;
  std::optional<Built> built;
};

/// Moves into \p g the sums and means of its members' values that it sank
/// (in order, all over the first one's axes), where each can run at the
/// group's place: no instruction sunk before it touches its bytes.
void absorbReductions(const LoadedProgram &p, Group &g,
                      const std::vector<int> &uses,
                      const std::vector<bool> &viewed) {
  const TensorType &shape =
      p.values[p.instructions[g.members.front()].results[0]].type;
  // A chain evaluated run by run pays its setup per run: short runs (a 4x4
  // plane) are faster as a separate reduction.
  constexpr int64_t kMinRun = 256;
  auto longRuns = [&](const std::vector<int64_t> &axes) {
    std::vector<bool> reduced(shape.shape.size(), false);
    for (int64_t a : axes)
      if (a >= 0 && a < static_cast<int64_t>(reduced.size()))
        reduced[a] = true;
    ReduceGeometry walk = planReduction(shape.shape, reduced);
    return (walk.lanes > 0 ? walk.lanes : walk.innerRun) >= kMinRun;
  };
  auto ofMember = [&](int32_t id) {
    for (size_t m : g.members)
      if (p.instructions[m].results[0] == id)
        return true;
    return false;
  };
  std::vector<size_t> kept;
  std::optional<std::vector<int64_t>> axes;
  for (size_t k = 0; k < g.sunk.size(); ++k) {
    const ProgramInstruction &inst = p.instructions[g.sunk[k]];
    bool mean = false;
    std::optional<std::vector<int64_t>> own = reduction(inst, &mean);
    bool ok = own && (!axes || *own == *axes) &&
              g.reductions.size() < FusedProgram::kMaxReductions &&
              inst.operands.size() == 1 && inst.results.size() == 1 &&
              p.values[inst.operands[0]].type.dtype == DType::F32 &&
              ofMember(inst.operands[0]) && longRuns(*own);
    for (size_t j : kept)
      ok = ok && !conflicts(p, p.instructions[j], inst);
    if (ok) {
      std::vector<size_t> trial = g.reductions;
      trial.push_back(g.sunk[k]);
      if (std::optional<Built> grown =
              build(p, g.members, uses, viewed, trial)) {
        g.reductions = std::move(trial);
        g.built = std::move(grown);
        axes = own;
        continue;
      }
    }
    kept.push_back(g.sunk[k]);
  }
  g.sunk = std::move(kept);
}

/// Gathers the group starting at fusable instruction \p i. Instructions of
/// another shape interleave with a chain (a backward pass computes a
/// per-channel scale between two full-size products): one that does not
/// conflict with the members so far moves before them, any other after the
/// group, as long as no later member conflicts with it. Collectives stay
/// where they are (and end the group).
std::optional<Group> gather(const LoadedProgram &p, size_t i,
                            const std::vector<int> &uses,
                            const std::vector<bool> &viewed, bool reductions) {
  constexpr size_t kLookahead = 64;
  const auto &shape = p.values[p.instructions[i].results[0]].type.shape;
  Group g;
  g.members = {i};
  // The group as of its last member that fused: what follows it is not
  // moved, and is scanned again from there.
  size_t members = 0, hoisted = 0, sunk = 0;
  size_t n = std::min(p.instructions.size(), i + kLookahead);
  for (size_t k = i + 1; k < n; ++k) {
    const ProgramInstruction &inst = p.instructions[k];
    bool member = fusable(p, inst) &&
                  p.values[inst.results[0]].type.shape == shape &&
                  !conflictsWithAny(p, g.sunk, inst);
    if (member) {
      g.members.push_back(k);
      if (g.members.size() > FusedProgram::kMaxRegisters)
        break;
      // A group that cannot be built may become buildable with the next
      // member: a value it would have to write (read after it so far)
      // becomes internal, and the bytes the planner gave that value (over a
      // half-precision input the group widens) no longer matter.
      std::optional<Built> grown = build(p, g.members, uses, viewed);
      if (!grown)
        continue;
      g.built = std::move(grown);
      members = g.members.size();
      hoisted = g.hoisted.size();
      sunk = g.sunk.size();
      continue;
    }
    if (!collectiveAxes(inst.info).empty())
      break;
    if (!conflictsWithAny(p, g.members, inst) &&
        !conflictsWithAny(p, g.sunk, inst))
      g.hoisted.push_back(k);
    else
      g.sunk.push_back(k);
  }
  g.members.resize(members);
  g.hoisted.resize(hoisted);
  g.sunk.resize(sunk);
  if (reductions && g.built) {
    // Reductions right after the chain were never sunk: they may join too
    // (those that do not stay after the fused instruction).
    for (size_t k = g.members.back() + 1; k < n; ++k) {
      bool mean = false;
      if (!reduction(p.instructions[k], &mean))
        break;
      g.sunk.push_back(k);
    }
    absorbReductions(p, g, uses, viewed);
  }
  if (!g.built)
    return std::nullopt;
  return g;
}

} // namespace

std::vector<int> useCounts(const LoadedProgram &p) {
  std::vector<int> uses(p.values.size(), 0);
  for (const ProgramInstruction &inst : p.instructions)
    for (int32_t id : inst.operands)
      if (id >= 0)
        ++uses[id];
  for (int32_t id : p.outputs)
    ++uses[id];
  return uses;
}

std::vector<bool> viewedValues(const LoadedProgram &p) {
  std::vector<bool> produced(p.values.size(), false);
  for (const ProgramInstruction &inst : p.instructions)
    for (int32_t id : inst.results)
      if (id >= 0)
        produced[id] = true;
  std::vector<bool> viewed(p.values.size(), false);
  // A view read by instruction \p at (or an output, at the end) reads the
  // bytes the latest instructions before it wrote: those results are
  // viewed. The arena reuses bytes, so a view of one value says nothing of
  // the others that held its bytes at other times (marking them all kept
  // most of a large program's intermediates out of fusion).
  auto markWriters = [&](int32_t view, size_t at) {
    if (view < 0 || produced[view])
      return; // an absent optional operand, or no view
    const ProgramValue &w = p.values[view];
    if ((w.storage != Storage::Arena && w.storage != Storage::Output) ||
        !w.numBytes)
      return;
    for (size_t j = at; j-- > 0;) {
      bool covered = false;
      for (int32_t id : p.instructions[j].results) {
        if (id < 0 || !overlap(p.values[id], w))
          continue;
        const ProgramValue &v = p.values[id];
        viewed[id] = true;
        covered = covered || (v.offset <= w.offset &&
                              w.offset + w.numBytes <= v.offset + v.numBytes);
      }
      if (covered)
        return;
    }
  };
  for (size_t i = 0; i < p.instructions.size(); ++i)
    for (int32_t id : p.instructions[i].operands)
      markWriters(id, i);
  for (int32_t id : p.outputs)
    markWriters(id, p.instructions.size());
  return viewed;
}

namespace {

/// One pass of grouping over \p p's instructions.
void fusePass(LoadedProgram &p, bool reductions) {
  std::vector<int> uses = useCounts(p);
  std::vector<bool> viewed = viewedValues(p);

  std::vector<ProgramInstruction> rewritten;
  size_t n = p.instructions.size();
  for (size_t i = 0; i < n;) {
    std::optional<Group> group;
    if (fusable(p, p.instructions[i]))
      group = gather(p, i, uses, viewed, reductions);
    if (!group) {
      rewritten.push_back(std::move(p.instructions[i]));
      ++i;
      continue;
    }
    size_t first = group->members.front();
    for (size_t j : group->hoisted)
      rewritten.push_back(std::move(p.instructions[j]));
    std::optional<Built> &built = group->built;
    ProgramInstruction fused;
    fused.info.kernel = "fused_elementwise";
    fused.info.comm = p.instructions[first].info.comm;
    fused.location = p.instructions[first].location;
    fused.operands = built->inputs;
    fused.results = built->outputs;
    for (size_t r : group->reductions)
      fused.results.push_back(p.instructions[r].results[0]);
    for (int32_t id : fused.operands)
      fused.info.operands.push_back(p.values[id].type);
    for (int32_t id : fused.results)
      fused.info.results.push_back(p.values[id].type);
    auto program = std::make_shared<const FusedProgram>(built->program);
    fused.fused = std::move(program);
    rewritten.push_back(std::move(fused));
    for (size_t j : group->sunk)
      rewritten.push_back(std::move(p.instructions[j]));
    i = group->members.back() + 1;
    for (const std::vector<size_t> *moved : {&group->sunk, &group->reductions})
      for (size_t j : *moved)
        i = std::max(i, j + 1);
  }
  p.instructions = std::move(rewritten);
}

} // namespace

void fuseElementwise(LoadedProgram &p, bool reductions) {
  if (const char *off = std::getenv("CLEAVE_NO_FUSION");
      off && *off && std::strcmp(off, "0") != 0)
    return;
  // Instructions a group moved aside are left unfused by its pass; they now
  // sit next to each other, so another pass fuses them (a per-channel chain
  // hoisted out of a full-size one).
  for (int pass = 0; pass < 3; ++pass) {
    size_t before = p.instructions.size();
    fusePass(p, reductions);
    if (p.instructions.size() == before)
      break;
  }
}

} // namespace cleave::rt

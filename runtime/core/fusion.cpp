//===- fusion.cpp - Merges chains of elementwise instructions -------------===//

#include "core/program.h"

#include <algorithm>
#include <climits>
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
      {"copy", FusedCode::Identity},
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

/// An f32 elementwise instruction whose operands are of its result's shape,
/// single elements, or broadcast to it.
bool fusable(const LoadedProgram &p, const ProgramInstruction &inst) {
  std::optional<FusedCode> code = fusedCode(inst.info.kernel);
  if (!code || inst.results.size() != 1 || inst.results[0] < 0 ||
      inst.operands.size() != static_cast<size_t>(fusedArity(*code)))
    return false;
  const TensorType &r = p.values[inst.results[0]].type;
  if (r.dtype != DType::F32 || r.numElements() == 0)
    return false;
  for (size_t k = 0; k < inst.operands.size(); ++k) {
    int32_t id = inst.operands[k];
    if (id < 0)
      return false;
    const TensorType &t = p.values[id].type;
    // select's condition is bool; every other operand is f32.
    DType want =
        *code == FusedCode::Select && k == 0 ? DType::Bool : DType::F32;
    if (t.dtype != want || (t.numElements() != 1 && !broadcasts(t, r)))
      return false;
  }
  return true;
}

bool overlap(const ProgramValue &a, const ProgramValue &b) {
  return a.storage == Storage::Arena && b.storage == Storage::Arena &&
         a.offset < b.offset + b.numBytes && b.offset < a.offset + a.numBytes;
}

struct Built;
void coalesce(const LoadedProgram &p, Built &b, const TensorType &shape);

/// The fused form of instructions [begin, end), or nullopt when it cannot be
/// (too many inputs, outputs or registers, or buffers that overlap unsafely).
struct Built {
  FusedProgram program;
  std::vector<int32_t> inputs, outputs;
};

std::optional<Built> build(const LoadedProgram &p, size_t begin, size_t end,
                           const std::vector<int> &uses,
                           const std::vector<bool> &viewed) {
  Built b;
  std::map<int32_t, int> reg;
  std::map<int32_t, int> usesInside;
  const TensorType &shape = p.values[p.instructions[begin].results[0]].type;
  b.program.numElements = shape.numElements();
  // Inputs first: registers 0..inputs-1.
  for (size_t i = begin; i < end; ++i)
    for (int32_t id : p.instructions[i].operands) {
      ++usesInside[id];
      bool produced = false;
      for (size_t j = begin; j < i && !produced; ++j)
        produced = p.instructions[j].results[0] == id;
      if (produced || reg.count(id))
        continue;
      reg[id] = static_cast<int>(b.inputs.size());
      b.inputs.push_back(id);
      const TensorType &t = p.values[id].type;
      b.program.inputIsBool.push_back(t.dtype == DType::Bool);
      b.program.inputs.push_back(t.shape == shape.shape ? FusedInput::Full
                                 : t.numElements() == 1
                                     ? FusedInput::Scalar
                                     : FusedInput::Broadcast);
    }
  coalesce(p, b, shape);
  int next = static_cast<int>(b.inputs.size());
  for (size_t i = begin; i < end; ++i) {
    const ProgramInstruction &inst = p.instructions[i];
    FusedOp op{*fusedCode(inst.info.kernel), 0, 0, 0, 0};
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
  for (size_t i = begin; i < end; ++i) {
    int32_t id = p.instructions[i].results[0];
    if (uses[id] > usesInside[id] || viewed[id]) {
      b.outputs.push_back(id);
      b.program.outputRegisters.push_back(static_cast<uint8_t>(reg.at(id)));
    }
  }
  if (b.inputs.size() > FusedProgram::kMaxInputs ||
      b.program.dims.size() > FusedProgram::kMaxDims ||
      b.outputs.size() > FusedProgram::kMaxOutputs ||
      next > FusedProgram::kMaxRegisters || b.outputs.empty())
    return std::nullopt;
  // Element i of an output may be written before element j of an input is
  // read (other threads, other blocks): an output may only cover the same
  // bytes as a whole, same-shaped input, or none of an input's.
  for (int32_t out : b.outputs) {
    const ProgramValue &o = p.values[out];
    for (size_t k = 0; k < b.inputs.size(); ++k) {
      const ProgramValue &in = p.values[b.inputs[k]];
      bool same = b.program.inputs[k] == FusedInput::Full &&
                  !b.program.inputIsBool[k] && in.storage == o.storage &&
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
  // Views sorted by offset, with the running maximum of their ends: the
  // views starting before a value ends overlap it iff the largest end among
  // them passes its start.
  std::vector<std::pair<int64_t, int64_t>> views;
  for (size_t v = 0; v < p.values.size(); ++v)
    if (!produced[v] && p.values[v].storage == Storage::Arena &&
        p.values[v].numBytes > 0)
      views.push_back(
          {p.values[v].offset, p.values[v].offset + p.values[v].numBytes});
  std::sort(views.begin(), views.end());
  std::vector<int64_t> maxEnd(views.size());
  for (size_t k = 0; k < views.size(); ++k)
    maxEnd[k] = std::max(views[k].second, k ? maxEnd[k - 1] : INT64_MIN);
  std::vector<bool> viewed(p.values.size(), false);
  for (size_t v = 0; v < p.values.size(); ++v) {
    const ProgramValue &value = p.values[v];
    if (!produced[v] || value.storage != Storage::Arena || !value.numBytes)
      continue;
    int64_t end = value.offset + value.numBytes;
    auto it = std::lower_bound(views.begin(), views.end(),
                               std::make_pair(end, INT64_MIN));
    size_t before = static_cast<size_t>(it - views.begin());
    viewed[v] = before > 0 && maxEnd[before - 1] > value.offset;
  }
  return viewed;
}

void fuseElementwise(LoadedProgram &p) {
  if (const char *off = std::getenv("CLEAVE_NO_FUSION");
      off && *off && std::strcmp(off, "0") != 0)
    return;
  std::vector<int> uses = useCounts(p);
  std::vector<bool> viewed = viewedValues(p);

  std::vector<ProgramInstruction> rewritten;
  size_t n = p.instructions.size();
  for (size_t i = 0; i < n;) {
    size_t end = i;
    if (fusable(p, p.instructions[i])) {
      const auto &shape = p.values[p.instructions[i].results[0]].type.shape;
      while (end < n && fusable(p, p.instructions[end]) &&
             p.values[p.instructions[end].results[0]].type.shape == shape)
        ++end;
    }
    // Grow the group one instruction at a time while it still fuses; every
    // op takes a register, so groups stay short and this stays cheap.
    std::optional<Built> built;
    size_t stop = i;
    end = std::min(end, i + FusedProgram::kMaxRegisters);
    for (size_t next = i + 2; next <= end; ++next) {
      std::optional<Built> grown = build(p, i, next, uses, viewed);
      if (!grown)
        break;
      built = std::move(grown);
      stop = next;
    }
    if (!built) {
      rewritten.push_back(std::move(p.instructions[i]));
      ++i;
      continue;
    }
    ProgramInstruction fused;
    fused.info.kernel = "fused_elementwise";
    fused.info.comm = p.instructions[i].info.comm;
    fused.location = p.instructions[i].location;
    fused.operands = built->inputs;
    fused.results = built->outputs;
    for (int32_t id : fused.operands)
      fused.info.operands.push_back(p.values[id].type);
    for (int32_t id : fused.results)
      fused.info.results.push_back(p.values[id].type);
    auto program = std::make_shared<const FusedProgram>(built->program);
    fused.fused = std::move(program);
    rewritten.push_back(std::move(fused));
    i = stop;
  }
  p.instructions = std::move(rewritten);
}

} // namespace cleave::rt

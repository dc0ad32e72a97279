//===- schedule.cpp - Steps, fusions and stream waits of a GPU program ----===//

#include "cuda/schedule.h"

namespace cleave::rt::cuda {

namespace {

/// Bytes a step touches in the arena (space -1) or in output space's tensor.
struct Range {
  int32_t space;
  int64_t begin, end;
  bool overlaps(const Range &o) const {
    return space == o.space && begin < o.end && o.begin < end;
  }
};

/// Whether the matmul runs as one cuBLASLt call without batches (see
/// matmul.cu): no batch dims, or one B for every batch and A's matrices
/// stacked (one taller product); and k > 0.
bool oneCallMatmul(const KernelInfo &info) {
  const TensorType &a = info.operand(0), &b = info.operand(1),
                   &r = info.result(0);
  bool ta = info.params<schema::Kernel::k_matmul>().transpose_a;
  size_t rank = r.shape.size();
  int64_t k = ta ? a.shape[rank - 2] : a.shape[rank - 1];
  if (k == 0)
    return false;
  bool sharedB = true, stackedA = !ta;
  for (size_t d = 0; d + 2 < rank; ++d) {
    sharedB &= b.shape[d] == 1;
    stackedA &= a.shape[d] == r.shape[d];
  }
  return product(r.shape, 0, rank - 2) == 1 || (sharedB && stackedA);
}

} // namespace

bool isCollective(const std::string &kernel) {
  return kernel == "all_reduce" || kernel == "all_gather" ||
         kernel == "reduce_scatter" || kernel == "all_to_all";
}

int biasOperand(const LoadedProgram &program, const ProgramInstruction &mm,
                const ProgramInstruction &add, const std::vector<int> &uses,
                const std::vector<bool> &viewed) {
  if (mm.info.kernel != "matmul" || add.info.kernel != "add" ||
      mm.results.size() != 1 || add.operands.size() != 2 ||
      add.results.size() != 1 || !oneCallMatmul(mm.info))
    return -1;
  int32_t r = mm.results[0];
  // Fused, the matmul's result is never written: nothing else may read it,
  // under its own id or through a view of its bytes.
  if (r < 0 || uses[r] != 1 || viewed[r] || add.results[0] < 0)
    return -1;
  int pos = add.operands[0] == r ? 1 : add.operands[1] == r ? 0 : -1;
  if (pos < 0 || add.operands[pos] < 0 || add.operands[pos] == r)
    return -1;
  const ProgramValue &rv = program.values[r];
  const ProgramValue &bias = program.values[add.operands[pos]];
  const ProgramValue &out = program.values[add.results[0]];
  if (bias.type.dtype != DType::F32 || out.type.shape != rv.type.shape ||
      out.type.dtype != DType::F32 || bias.type.rank() != rv.type.rank())
    return -1;
  for (size_t d = 0; d + 1 < bias.type.shape.size(); ++d)
    if (bias.type.shape[d] != 1)
      return -1;
  if (bias.type.shape.back() != rv.type.shape.back())
    return -1;
  // cuBLASLt reads the bias and the matmul's operands while it writes the
  // add's result, which the buffer planner may have placed over an operand
  // whose last use is the matmul.
  auto overlaps = [&](const ProgramValue &v) {
    return writableOverlap(v, out);
  };
  if (overlaps(bias) || overlaps(program.values[mm.operands[0]]) ||
      overlaps(program.values[mm.operands[1]]))
    return -1;
  return pos;
}

Schedule schedule(const LoadedProgram &program, bool fuseBias,
                  const std::function<bool(int32_t)> &biasAligned) {
  Schedule out;
  std::vector<int> uses = useCounts(program);
  std::vector<bool> viewed = viewedValues(program);
  const auto &insts = program.instructions;
  // Per collective: its step and the bytes it reads or writes.
  std::vector<std::vector<Range>> collectiveRanges;
  std::vector<int> outstanding;
  for (size_t i = 0; i < insts.size(); ++i) {
    ScheduledStep step;
    step.index = i;
    step.operands = insts[i].operands;
    step.results = insts[i].results;
    if (fuseBias && i + 1 < insts.size()) {
      int pos = biasOperand(program, insts[i], insts[i + 1], uses, viewed);
      if (pos >= 0 && biasAligned(insts[i + 1].operands[pos])) {
        const ProgramInstruction &add = insts[i + 1];
        step.biasOperand = pos;
        step.operands = {insts[i].operands[0], insts[i].operands[1],
                         add.operands[pos], add.operands[0], add.operands[1]};
        step.results = {add.results[0], insts[i].results[0]};
        ++i;
      }
    }
    std::vector<Range> ranges;
    for (const std::vector<int32_t> *ids : {&step.operands, &step.results})
      for (int32_t id : *ids)
        if (const ProgramValue *v = id >= 0 ? &program.values[id] : nullptr;
            v && v->numBytes > 0 &&
            (v->storage == Storage::Arena || v->storage == Storage::Output))
          ranges.push_back({v->storage == Storage::Arena ? -1 : v->index,
                            v->offset, v->offset + v->numBytes});
    step.collective = isCollective(insts[step.index].info.kernel);
    if (step.collective) {
      step.collectiveIndex = static_cast<int>(collectiveRanges.size());
      collectiveRanges.push_back(ranges);
      outstanding.push_back(step.collectiveIndex);
    } else {
      // Wait for a collective before touching any of its bytes: reading its
      // result, or overwriting its operand or result (arena reuse). Later
      // collectives need no wait: the communication stream runs them in
      // order, after the compute work enqueued before them.
      for (auto it = outstanding.begin(); it != outstanding.end();) {
        bool touches = false;
        for (const Range &r : ranges)
          for (const Range &q : collectiveRanges[*it])
            touches |= r.overlaps(q);
        if (touches) {
          step.waitFor.push_back(*it);
          it = outstanding.erase(it);
        } else {
          ++it;
        }
      }
    }
    out.steps.push_back(std::move(step));
  }
  out.finalWaits = outstanding;
  return out;
}

} // namespace cleave::rt::cuda

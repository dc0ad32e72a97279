//===- fused.cu - Fused elementwise chains (runtime/core/fusion.h) --------===//
//
// One thread per element runs the chain's ops over registers; inputs are
// read once and only the chain's live-out values are written. The program
// travels as a kernel parameter (a few hundred bytes), so every thread reads
// it from the constant bank.
//
//===----------------------------------------------------------------------===//

#include "core/fused_ops.h"
#include "core/fusion.h"
#include "cuda/cuda_common.cuh"

#include <memory>

namespace cleave::rt::cuda {

namespace {

constexpr int kMaxOps = FusedProgram::kMaxRegisters;

struct DeviceProgram {
  int numInputs, numOutputs, numOps, rank;
  const void *inputs[FusedProgram::kMaxInputs];
  uint8_t isBool[FusedProgram::kMaxInputs];
  void *outputs[FusedProgram::kMaxOutputs];
  uint8_t outputIsBool[FusedProgram::kMaxOutputs];
  FusedInput kinds[FusedProgram::kMaxInputs];
  int64_t dims[FusedProgram::kMaxDims];
  int64_t strides[FusedProgram::kMaxInputs][FusedProgram::kMaxDims];
  uint8_t outputRegisters[FusedProgram::kMaxOutputs];
  FusedOp ops[kMaxOps];
};

__global__ void fusedKernel(DeviceProgram p, int64_t n) {
  CLEAVE_GRID_LOOP(i, n) {
    float r[FusedProgram::kMaxRegisters];
    for (int k = 0; k < p.numInputs; ++k) {
      int64_t offset = i;
      if (p.kinds[k] == FusedInput::Scalar) {
        offset = 0;
      } else if (p.kinds[k] == FusedInput::Broadcast) {
        offset = 0;
        int64_t rest = i;
        for (int d = p.rank - 1; d >= 0; --d) {
          offset += (rest % p.dims[d]) * p.strides[k][d];
          rest /= p.dims[d];
        }
      }
      r[k] = p.isBool[k] ? static_cast<float>(static_cast<const uint8_t *>(
                               p.inputs[k])[offset])
                         : static_cast<const float *>(p.inputs[k])[offset];
    }
    for (int o = 0; o < p.numOps; ++o) {
      const FusedOp &op = p.ops[o];
      r[op.dst] = op.code == FusedCode::Select
                      ? applySelect(r[op.a], r[op.b], r[op.c])
                      : applyFused(op.code, r[op.a], r[op.b]);
    }
    for (int o = 0; o < p.numOutputs; ++o) {
      float v = r[p.outputRegisters[o]];
      if (p.outputIsBool[o])
        static_cast<uint8_t *>(p.outputs[o])[i] = v != 0.0f;
      else
        static_cast<float *>(p.outputs[o])[i] = v;
    }
  }
}

} // namespace

Status prepareFused(const FusedProgram &program, DeviceFn *fn) {
  if (program.ops.size() > static_cast<size_t>(kMaxOps) ||
      program.inputs.size() > FusedProgram::kMaxInputs ||
      program.dims.size() > FusedProgram::kMaxDims ||
      program.outputRegisters.size() > FusedProgram::kMaxOutputs)
    return Status::error("fused chain too long");
  // The device's loader fuses without reductions (fuseElementwise).
  if (!program.reductions.empty())
    return Status::error("fused chain with reductions");
  for (const auto *storage : {&program.inputStorage, &program.outputStorage})
    for (DType d : *storage)
      if (d != DType::F32)
        return halfPlanRefused("fused_elementwise");
  DeviceProgram p{};
  p.numInputs = static_cast<int>(program.inputs.size());
  p.rank = static_cast<int>(program.dims.size());
  for (int d = 0; d < p.rank; ++d)
    p.dims[d] = program.dims[d];
  p.numOutputs = static_cast<int>(program.outputRegisters.size());
  p.numOps = static_cast<int>(program.ops.size());
  for (int k = 0; k < p.numInputs; ++k) {
    p.kinds[k] = program.inputs[k];
    p.isBool[k] = program.inputIsBool[k];
    for (size_t d = 0; d < program.strides[k].size(); ++d)
      p.strides[k][d] = program.strides[k][d];
  }
  for (int o = 0; o < p.numOutputs; ++o) {
    p.outputRegisters[o] = program.outputRegisters[o];
    p.outputIsBool[o] = program.outputIsBool[o];
  }
  for (int o = 0; o < p.numOps; ++o)
    p.ops[o] = program.ops[o];
  int64_t n = program.numElements;
  *fn = [p, n](const KernelArgs &args, Context &ctx) mutable {
    for (int k = 0; k < p.numInputs; ++k)
      p.inputs[k] = args.operands[k];
    for (int o = 0; o < p.numOutputs; ++o)
      p.outputs[o] = args.results[o];
    fusedKernel<<<gridFor(n), kBlock, 0, ctx.stream>>>(p, n);
    return launchStatus("fused_elementwise");
  };
  return Status::ok();
}

} // namespace cleave::rt::cuda

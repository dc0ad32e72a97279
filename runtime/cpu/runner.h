//===- runner.h - The CPU backend's entry points ----------------*- C++ -*-===//
//
// What the layers above see of the CPU backend: loading a program with its
// kernels bound (which is also the shape check every backend relies on) and
// its StepRunner.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_CPU_RUNNER_H
#define CLEAVE_RUNTIME_CPU_RUNNER_H

#include "cleave/runtime/backend_plugin.h"
#include "cleave/runtime/runner.h"

#include "core/kernel_info.h"

namespace cleave::rt {

struct LoadedProgram;

/// Loads \p program (core/program.h) with each instruction's CPU kernel
/// from its prepare function, fuses it, and fills \p kernels, one per
/// instruction of \p loaded.
Status bindCpuKernels(const cleave_program &program, Communicator *comm,
                      LoadedProgram *loaded, std::vector<KernelFn> *kernels);

struct MachineRates;
/// This machine's sgemm and copy rates with the calling thread's OpenMP
/// and BLAS threads (profile.h's yardsticks).
MachineRates measureMachineRates();

/// Runs \p executor's program on the host; state moves between runs instead
/// of being copied.
std::unique_ptr<StepRunner> makeCpuRunner(std::unique_ptr<Executor> executor);

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_CPU_RUNNER_H

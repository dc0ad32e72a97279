//===- host_device.h - Host and device functions ---------------*- C++ -*-===//
//
// CLEAVE_HOST_DEVICE marks functions that the CPU runtime and the CUDA
// backend share (the Philox generator, the fused elementwise ops), so both
// backends compute them from one definition.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_CORE_HOST_DEVICE_H
#define CLEAVE_RUNTIME_CORE_HOST_DEVICE_H

#ifdef __CUDACC__
#define CLEAVE_HOST_DEVICE __host__ __device__
#else
#define CLEAVE_HOST_DEVICE
#endif

#endif // CLEAVE_RUNTIME_CORE_HOST_DEVICE_H

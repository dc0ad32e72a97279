//===- npy.h - NumPy .npy files ---------------------------------*- C++ -*-===//
//
// Inputs and dumps of `cleave run` and the data feeds (runtime/train).
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_NPY_H
#define CLEAVE_RUNTIME_NPY_H

#include "cleave/runtime/types.h"

#include <string>

namespace cleave::rt {

/// Reads a NumPy .npy file (format 1.0-3.0, little-endian, C order) of dtype
/// <f4, <f8, <f2, <i8, <i4, <i2, |i1, |b1, |u1, <u2 or <u4. Errors name the
/// file and the cause (missing, truncated, unsupported dtype, Fortran order).
Status readNpy(const std::string &path, HostTensor *result);
/// \p t as an input of dtype \p want where numpy's files say the same
/// thing another way: uint8 data for a bool input (any non-zero byte is
/// true). Other dtypes are left for the caller's check.
void conformInput(HostTensor &t, DType want);
/// Writes \p tensor as .npy atomically (temporary file, then rename).
Status writeNpy(const std::string &path, const HostTensor &tensor);
/// Maps characters outside [A-Za-z0-9._-] to '_' (file names of tensors).
std::string sanitizeFileName(const std::string &name);

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_NPY_H

//===- shape_rules.h - Every kernel's shape rule, for every backend -*- C++
//-*-===//
//
// What kernels.def's operand, result and attribute rules cannot say: how an
// instruction's shapes relate to one another, to its attributes and (for
// collectives) to its mesh. One rule per kernel, written in its family's
// folder (runtime/kernels/<family>/shape.cpp, compiled into the core layer)
// and run by the schema's validator on every instruction any backend loads,
// so that the CPU and CUDA prepare functions only bind what is valid: the
// CUDA plugin refuses a bad program without the CPU backend, and no backend
// restates a rule.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_CORE_SHAPE_RULES_H
#define CLEAVE_RUNTIME_CORE_SHAPE_RULES_H

#include "core/kernel_info.h"

namespace cleave::rt {

/// check_K: kernel K's shape rule, for an instruction whose arity, dtypes
/// and attributes the schema has accepted (info.decoded holds its Params).
#define CLEAVE_KERNEL(NAME) Status check_##NAME(const KernelInfo &);
#include "plan/kernels.def"

/// Runs info.kernelId's rule (validateInstruction's last step).
Status checkShapeRule(const KernelInfo &info);

/// "operand X and result Y must have the same shape".
Status checkSameShape(const TensorType &operand, const TensorType &result);

/// Every operand broadcasts to result 0 (kernels.def's "broadcasting");
/// \p names names the operands in errors.
Status checkOperandsBroadcast(const KernelInfo &info,
                              std::initializer_list<const char *> names);

/// Attribute 'axis' names a dimension of \p t (\p role, e.g. "result ",
/// prefixes t in the error).
Status checkAxis(int64_t axis, const TensorType &t, const char *role);

} // namespace cleave::rt

#endif // CLEAVE_RUNTIME_CORE_SHAPE_RULES_H

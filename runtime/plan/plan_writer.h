//===- plan_writer.h - Plan instructions from typed Params ------*- C++ -*-===//
//
// The compiler's half of the kernel schema: writeInstruction(params, inst)
// sets the kernel name and every attribute kernels.def declares for it, so
// plan emission never spells a kernel attribute. Optional attributes that
// are unset are left out; all others are written, defaults included.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_RUNTIME_PLAN_WRITER_H
#define CLEAVE_RUNTIME_PLAN_WRITER_H

#include "plan/kernel_schema.h"
#include "plan/plan.pb.h"

namespace cleave::rt::schema {

namespace detail {
inline plan::Attribute &attr(plan::Instruction &inst, const char *name) {
  return (*inst.mutable_attrs())[name];
}
inline void put(plan::Instruction &inst, const char *name, bool v) {
  attr(inst, name).add_ints(v ? 1 : 0);
}
inline void put(plan::Instruction &inst, const char *name, int64_t v) {
  attr(inst, name).add_ints(v);
}
inline void put(plan::Instruction &inst, const char *name, double v) {
  attr(inst, name).add_floats(v);
}
inline void put(plan::Instruction &inst, const char *name,
                const ScalarValue &v) {
  if (v.isFloat)
    attr(inst, name).add_floats(v.f);
  else
    attr(inst, name).add_ints(v.i);
}
inline void put(plan::Instruction &inst, const char *name,
                const std::vector<int64_t> &v) {
  plan::Attribute &a = attr(inst, name);
  for (int64_t x : v)
    a.add_ints(x);
}
template <typename T>
void put(plan::Instruction &inst, const char *name, const std::optional<T> &v) {
  if (v)
    put(inst, name, *v);
}
} // namespace detail

#define CLEAVE_KERNEL_BEGIN(K)                                                 \
  inline void writeInstruction(const Params<Kernel::k_##K> &p,                 \
                               plan::Instruction &inst) {                      \
    (void)p;                                                                   \
    inst.set_kernel(#K);
#define CLEAVE_ATTR(K, NAME, TYPE, COUNT, RULE, ...)                           \
  detail::put(inst, #NAME, p.NAME);
#define CLEAVE_KERNEL_END(K) }
#include "plan/kernels.def"

} // namespace cleave::rt::schema

#endif // CLEAVE_RUNTIME_PLAN_WRITER_H

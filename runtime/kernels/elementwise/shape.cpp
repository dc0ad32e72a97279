//===- shape.cpp - Elementwise kernels' shape rules -----------------------===//
//
// Binary, comparison, logic and select kernels broadcast every operand to
// the result; unary kernels keep the shape. Dtypes are kernels.def's.
//
//===----------------------------------------------------------------------===//

#include "core/shape_rules.h"

namespace cleave::rt {

#define CLEAVE_BROADCAST_RULE(NAME)                                            \
  Status check_##NAME(const KernelInfo &info) {                                \
    return checkOperandsBroadcast(info, {"operand 0", "operand 1"});           \
  }
CLEAVE_BROADCAST_RULE(add)
CLEAVE_BROADCAST_RULE(sub)
CLEAVE_BROADCAST_RULE(mul)
CLEAVE_BROADCAST_RULE(div)
CLEAVE_BROADCAST_RULE(pow)
CLEAVE_BROADCAST_RULE(max)
CLEAVE_BROADCAST_RULE(min)
CLEAVE_BROADCAST_RULE(cmp_eq)
CLEAVE_BROADCAST_RULE(cmp_ne)
CLEAVE_BROADCAST_RULE(cmp_lt)
CLEAVE_BROADCAST_RULE(cmp_le)
CLEAVE_BROADCAST_RULE(cmp_gt)
CLEAVE_BROADCAST_RULE(cmp_ge)
CLEAVE_BROADCAST_RULE(and)
CLEAVE_BROADCAST_RULE(or)
CLEAVE_BROADCAST_RULE(xor)
#undef CLEAVE_BROADCAST_RULE

Status check_select(const KernelInfo &info) {
  return checkOperandsBroadcast(info, {"condition", "operand 1", "operand 2"});
}

#define CLEAVE_SAME_SHAPE_RULE(NAME)                                           \
  Status check_##NAME(const KernelInfo &info) {                                \
    return checkSameShape(info.operand(0), info.result(0));                    \
  }
CLEAVE_SAME_SHAPE_RULE(not)
CLEAVE_SAME_SHAPE_RULE(neg)
CLEAVE_SAME_SHAPE_RULE(abs)
CLEAVE_SAME_SHAPE_RULE(exp)
CLEAVE_SAME_SHAPE_RULE(log)
CLEAVE_SAME_SHAPE_RULE(sqrt)
CLEAVE_SAME_SHAPE_RULE(rsqrt)
CLEAVE_SAME_SHAPE_RULE(reciprocal)
CLEAVE_SAME_SHAPE_RULE(tanh)
CLEAVE_SAME_SHAPE_RULE(sigmoid)
CLEAVE_SAME_SHAPE_RULE(relu)
CLEAVE_SAME_SHAPE_RULE(erf)
CLEAVE_SAME_SHAPE_RULE(sin)
CLEAVE_SAME_SHAPE_RULE(cos)
CLEAVE_SAME_SHAPE_RULE(gelu)
CLEAVE_SAME_SHAPE_RULE(leaky_relu)
#undef CLEAVE_SAME_SHAPE_RULE

} // namespace cleave::rt

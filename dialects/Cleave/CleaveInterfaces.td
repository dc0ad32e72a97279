//===- CleaveInterfaces.td - Interfaces of the cleave dialect -*- tablegen -*-===//
//
// Op interfaces that passes query instead of switching on op kinds. Their
// implementations for cleave ops are external models registered by the pass
// libraries (lib/Autodiff for differentiation), so the dialect itself stays
// free of pass logic.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_INTERFACES_TD
#define CLEAVE_INTERFACES_TD

include "mlir/IR/OpBase.td"

def Cleave_DifferentiableOpInterface
    : OpInterface<"DifferentiableOpInterface"> {
  let cppNamespace = "::mlir::cleave";
  let description = [{
    An op that can propagate gradients backwards: its vector-Jacobian
    product (VJP). Given the gradient of the loss with respect to each
    result, it builds the ops that compute the gradient with respect to each
    operand whose gradient is needed. Reverse-mode differentiation
    (`--cleave-autodiff`) calls it on every op between the parameters and the
    loss, in reverse order.

    Gradients have the type of the value they belong to: a rule whose
    operand was broadcast reduces the gradient back to the operand's shape.
    A rule reuses the forward op's operands and results rather than
    recomputing them.
  }];
  let methods = [
    InterfaceMethod<[{
        Builds the gradients of the operands at the builder's insertion
        point. `resultGrads[i]` is the gradient of result `i`, or null when
        nothing depends on that result (zero). `needed[j]` says whether
        operand `j`'s gradient is wanted; the rule sets `operandGrads[j]`
        (already sized to the operand count and null) for those, and may
        leave the others null. Fails with a diagnostic when the gradient
        cannot be formed.
      }],
      "::mlir::LogicalResult", "buildVJP",
      (ins "::mlir::OpBuilder &":$builder,
           "::mlir::ArrayRef<::mlir::Value>":$resultGrads,
           "::llvm::ArrayRef<bool>":$needed,
           "::llvm::MutableArrayRef<::mlir::Value>":$operandGrads)>
  ];
}

def Cleave_ShardingRuleOpInterface : OpInterface<"ShardingRuleOpInterface"> {
  let cppNamespace = "::mlir::cleave";
  let description = [{
    An op's sharding rule: the op as an einsum over factors (ShardingRule.h,
    after OpenXLA Shardy). Sharding propagation and partitioning read only
    this; a split contracted factor gives a partial result, a split parallel
    factor a split result. Ops whose dimensions map to several factors at
    once (reshape) are handled by the partitioner itself.
  }];
  let methods = [
    InterfaceMethod<"Fills the op's factor rule; fails if the op has none.",
      "::mlir::LogicalResult", "getShardingRule",
      (ins "::mlir::cleave::ShardingRule &":$rule)>
  ];
}

#endif // CLEAVE_INTERFACES_TD

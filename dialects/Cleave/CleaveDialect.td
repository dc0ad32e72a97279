//===- CleaveDialect.td - The cleave dialect ---------------*- tablegen -*-===//
//
// The dialect definition and its enums. Ops are in CleaveOps.td.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_DIALECT_TD
#define CLEAVE_DIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Cleave_Dialect : Dialect {
  let name = "cleave";
  let cppNamespace = "::mlir::cleave";
  let summary = "Value-semantics tensor ops of neural-network training programs";
  let description = [{
    The `cleave` dialect is the IR that every stage of Cleave shares: the
    importers produce it, automatic differentiation extends it into a
    train-step function, sharding annotates it, partitioning rewrites it per
    rank and the lowering turns it into a plan of kernel calls.

    Ops work on builtin ranked tensors with static shapes and have value
    semantics. The op set is small and orthogonal: one ONNX op may become
    several cleave ops. Ops are kept fused only where the fused form matters
    for speed or for sharding (matmul, softmax, layer norm, gather).
    Elementwise ops broadcast implicitly, but only between operands of the
    same rank (dims equal or 1): rank alignment is explicit in the IR, so a
    dimension of an operand always corresponds to the same dimension of the
    result, which keeps sharding factors and gradient reductions trivial.

    Parameters are function arguments, never constants: the IR of a large
    model stays small and weights live outside it.
  }];
  let hasConstantMaterializer = 1;
  // The discardable cleave.* attributes (CleaveAttrNames.h) are verified
  // wherever they appear.
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let useDefaultAttributePrinterParser = 1;
}

def Cleave_CmpPredicate : I32EnumAttr<"CmpPredicate", "comparison predicate", [
  I32EnumAttrCase<"eq", 0>, I32EnumAttrCase<"ne", 1>,
  I32EnumAttrCase<"lt", 2>, I32EnumAttrCase<"le", 3>,
  I32EnumAttrCase<"gt", 4>, I32EnumAttrCase<"ge", 5>]> {
  let cppNamespace = "::mlir::cleave";
  let genSpecializedAttr = 0;
}
def Cleave_CmpPredicateAttr : EnumAttr<Cleave_Dialect, Cleave_CmpPredicate, "cmp">;

def Cleave_ReduceKind : I32EnumAttr<"ReduceKind", "reduction kind", [
  I32EnumAttrCase<"sum", 0>, I32EnumAttrCase<"mean", 1>,
  I32EnumAttrCase<"max", 2>, I32EnumAttrCase<"min", 3>,
  I32EnumAttrCase<"prod", 4>]> {
  let cppNamespace = "::mlir::cleave";
  let genSpecializedAttr = 0;
}
def Cleave_ReduceKindAttr : EnumAttr<Cleave_Dialect, Cleave_ReduceKind, "reduce">;

#endif // CLEAVE_DIALECT_TD

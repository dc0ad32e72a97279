//===- CleaveAttrs.td - The dialect's attributes -----------*- tablegen -*-===//
//
// Attributes with structure of their own; the discardable cleave.* names
// they are stored under are listed in CleaveAttrNames.h.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_ATTRS_TD
#define CLEAVE_ATTRS_TD

include "Cleave/CleaveDialect.td"
include "mlir/IR/AttrTypeBase.td"

def Cleave_LayoutAttr : AttrDef<Cleave_Dialect, "Layout"> {
  let mnemonic = "layout";
  let summary = "How an argument or result of the per-rank step is split";
  let description = [{
    Stored as `cleave.layout` on an argument or result of the partitioned
    train step: which dimension of the tensor each rank holds a chunk of,
    and how the chunks are cut. It is what the plan's bindings, the weight
    store and checkpoints read to cut and reassemble the tensor.

    - `dim`: the dimension split over the mesh's first axis (tp; dp on a
      mesh of dp alone), or -1 where the tensor is whole along it.
    - `blocks`: with `dim`, the dimension is that many equal blocks (a
      fused q/k/v projection), each split on its own.
    - `granule`: with `dim`, where the axis does not divide a block, chunks
      are whole multiples of this many indices (a head's width), padded to
      one extent.
    - `dp_dim`: on a dp x tp mesh with ZeRO, the dimension of the tp-local
      tensor split over the dp axis, or -1.
    - `parts`, `copies`: where tp is factored into two mesh axes (outer x
      inner, `cleave.mesh_axes` "tp,tp_inner"), the chunks `dim` is cut
      into and how many neighbouring tp ranks hold each: tp rank r holds
      chunk (r / copies) % parts. A split over the outer axis alone (K/V
      heads held by the group of ranks whose query heads read them) has
      `copies` the inner axis's size; over the inner alone, `parts` its
      size. At their default (0: tp / copies, 1) each tp rank holds a
      chunk of its own.

    Parameters at their default (-1, 1, 1, -1) are not printed:
    ```mlir
    %w: tensor<8x8xf32> {cleave.parameter = "w", cleave.layout = #cleave.layout<dim = 0>}
    %qkv: tensor<24x8xf32> {cleave.layout = #cleave.layout<dim = 0, blocks = 3, granule = 4>}
    %m: tensor<4x8xf32> {cleave.layout = #cleave.layout<dim = 1, dp_dim = 0>}
    %k: tensor<8x64xf32> {cleave.layout = #cleave.layout<dim = 0, parts = 2, copies = 2>}
    ```
    A layout that splits nothing is refused: a whole tensor carries none.
  }];
  let parameters = (ins
    DefaultValuedParameter<"int64_t", "-1",
                           "dimension split over the first axis">:$dim,
    DefaultValuedParameter<"int64_t", "1",
                           "equal blocks of dim, each split alone">:$blocks,
    DefaultValuedParameter<"int64_t", "1",
                           "chunks are multiples of this">:$granule,
    DefaultValuedParameter<"int64_t", "-1",
                           "dimension split over dp (ZeRO)">:$dp_dim,
    DefaultValuedParameter<"int64_t", "0",
                           "chunks of dim (0: tp / copies)">:$parts,
    DefaultValuedParameter<"int64_t", "1",
                           "neighbouring tp ranks holding one chunk">:$copies);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let skipDefaultBuilders = 1;
  let builders = [
    AttrBuilder<(ins "int64_t":$dim, "int64_t":$blocks, "int64_t":$granule,
                     "int64_t":$dp_dim, CArg<"int64_t", "0">:$parts,
                     CArg<"int64_t", "1">:$copies), [{
      return $_get($_ctxt, dim, blocks, granule, dp_dim, parts, copies);
    }]>
  ];
  let extraClassDeclaration = [{
    /// Whether the first axis splits the tensor.
    bool isSplit() const { return getDim() >= 0; }
    /// Checks the dimensions against a tensor of rank \p rank.
    ::mlir::LogicalResult verifyRank(
        int64_t rank,
        ::llvm::function_ref<::mlir::InFlightDiagnostic()> emitError) const;
  }];
}

#endif // CLEAVE_ATTRS_TD

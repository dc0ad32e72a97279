//===- Passes.td - Tensor-parallel passes ------------------*- tablegen -*-===//

#ifndef CLEAVE_SHARDING_PASSES_TD
#define CLEAVE_SHARDING_PASSES_TD

include "mlir/Pass/PassBase.td"

def ChooseLayoutsPass : Pass<"cleave-choose-layouts", "ModuleOp"> {
  let summary = "Chooses how each parameter is split over tp ranks, and records it";
  let description = [{
    The layout search of the partitioner on its own: each parameter of
    every function is replicated or split along one dimension (in blocks
    for a fused projection, by whole heads where tp does not divide them),
    the layouts of `plan` rules fixed first, the rest chosen by scoring
    candidate plans with a dry run of the partitioner over the whole train
    step (alpha-beta communication time plus a charge for per-rank memory).
    Nothing is rewritten: each split parameter's argument gets its
    `cleave.layout` (the global tensor's), each parameter the search
    weighed its `cleave.layout_why` (what its cheapest other layout would
    have cost, for the reasons of the collectives the chosen one causes),
    and the function `cleave.layouts_for` (the tp) and
    `cleave.partition_how` (how the search scored them: whether a split a
    reshape cannot keep becomes a partial sum, whether partial sums fan
    out). `--cleave-partition` then applies them as they are (every
    parameter without a layout replicated) instead of searching; the compile pipeline runs the two in
    turn (plain dp x tp excepted: its tp layouts are chosen on the
    per-dp-rank step, inside the partitioner).

    Before (`tp=2`):
    ```mlir
    func.func @main(%x: tensor<8x256xf32> {cleave.input = "x"}, %up: tensor<512x256xf32> {cleave.parameter = "up"}, %down: tensor<256x512xf32> {cleave.parameter = "down"}) -> (tensor<f32> {cleave.loss}) {
      %0 = cleave.matmul %x, %up {transpose_rhs} : (tensor<8x256xf32>, tensor<512x256xf32>) -> tensor<8x512xf32>
      %1 = cleave.gelu %0 : tensor<8x512xf32>
      %2 = cleave.matmul %1, %down {transpose_rhs} : (tensor<8x512xf32>, tensor<256x512xf32>) -> tensor<8x256xf32>
      ...
    }
    ```
    After (Megatron's MLP: `up` by its output rows, `down` by its input
    columns):
    ```mlir
    func.func @main(%x: tensor<8x256xf32> {cleave.input = "x"}, %up: tensor<512x256xf32> {cleave.layout = #cleave.layout<dim = 0>, cleave.layout_why = "the search keeps it S(0); its cheapest other layout, R, would add ...", cleave.parameter = "up"}, %down: tensor<256x512xf32> {cleave.layout = #cleave.layout<dim = 1>, cleave.layout_why = "...", cleave.parameter = "down"}) -> (tensor<f32> {cleave.loss}) attributes {cleave.layouts_for = 2 : i64, cleave.partition_how = ""} {
      ...
    }
    ```
  }];
  let options = [
    Option<"tp", "tp", "int64_t", /*default=*/"1", "Tensor-parallel ranks">,
    Option<"planFile", "plan", "std::string", /*default=*/"\"\"",
           "File of `REGEX KIND` rules applied before the search (KIND "
           "colwise, rowwise, replicate, vocab, or a layout written out: "
           "R, S(DIM[,BLOCKS][;GRANULE]))">,
  ];
}

def PartitionPass : Pass<"cleave-partition", "ModuleOp"> {
  let summary = "Chooses parameter layouts and rewrites the train step per rank";
  let description = [{
    Tensor parallelism over a 1-D mesh of `tp` ranks (axis 0, "tp"), or
    over axis 1 of the dp x tp mesh `--cleave-partition-data` made. Each
    parameter is replicated or split along one dimension (in blocks for a
    fused projection, and by whole heads where tp does not divide them,
    each rank's chunk padded to the same extent); the layouts come
    from `plan` rules where given (a file of `REGEX KIND` lines, KIND one of
    colwise, rowwise, replicate, vocab, or a layout written out as
    `cleave inspect` prints it, `R` or `S(DIM[,BLOCKS][;GRANULE])`: how a
    bundle's other batch shapes take its first shape's layouts), the rest from a search that scores
    each candidate plan by a dry run of the partitioner over the whole train
    step (alpha-beta communication time plus a charge for per-rank memory);
    layouts `--cleave-choose-layouts` recorded (`cleave.layout` on the
    parameters, `cleave.layout_why` their reasons) are taken as they are,
    and no search runs; layouts chosen for another tp are an error.

    The partitioner then walks the step once: every op picks, from its
    ShardingRuleOpInterface factors, the split that needs the least
    communication for its operands' layouts; values are rebuilt on local
    shapes, and `cleave.all_reduce` / `cleave.all_gather` /
    `cleave.shard_slice` are inserted where layouts meet. Partial sums stay
    pending through linear ops. A contraction over a split factor (the
    combine of a mixture of experts split by expert) may instead move its
    operand's split to a factor it keeps by a `cleave.all_to_all` and
    gather its result whole, where those two cost less than the all-reduce
    of the partial sum (expert parallelism). Replicated parameters' partial gradients
    are priced as one bucket and each marked `cleave.bucket`, for
    `--cleave-bucket-gradients` to sum as one. Every collective carries `cleave.reason`
    (the op that needed it and what keeping the split would have cost) and,
    where it is one of Megatron's reductions, `cleave.megatron`. The result
    is one SPMD program: every rank
    runs it, collectives and `shard_slice` find the rank at run time. Split
    arguments and results are marked `cleave.layout` (a `#cleave.layout`:
    the split dimension, its blocks and granule); the module gets
    `cleave.mesh`.

    With `sequence-parallel` (Megatron's sequence parallelism), a partial
    activation an op reads split (a residual add and the norm after a
    row-parallel product, on the tokens) is reduce-scattered into that
    split, not all-reduced whole: the token-wise ops between the blocks run
    on each rank's tokens, and the next op that needs the value whole (a
    column-parallel product) all-gathers it, once for every view of it.
    The all-reduce's bytes, a latency more, and those activations a tp-th
    the size (`--cleave-recompute=selective` then gathers them again for
    the backward instead of keeping them whole). A split weight is gathered
    only where nothing else can be (at long sequences a weight is smaller
    than the tokens, and gathering weights would make the tp ranks data
    parallel). In the example below, a `tanh` and a third product `u` after
    it would read `cleave.reduce_scatter %2 dim = 0` (tensor<2x8xf32>) and
    `cleave.all_gather` of the tanh.

    With `tp-inner=N` (N dividing tp) the tp ranks are factored into two
    mesh axes, tp / N outer x N inner (`cleave.mesh_axes` "tp,tp_inner",
    a group of N neighbouring ranks on the inner axis), and the step is
    partitioned over the outer axis, then the outer pass's per-rank step
    over the inner axis, as dp x tp partitions dp then tp. What neither
    axis alone divides finds its layout per axis: with 8 query and 2 K/V
    heads at tp 4 = 2 x 2, the outer pass gives each group of ranks 4
    query heads and the 1 K/V head they read (Megatron's plan), the inner
    pass splits the query heads and keeps the K/V head whole within the
    group, so its gradient is summed over the inner axis only (what vLLM's
    replicated K/V heads leave a training step to do), not over all tp
    ranks. An all-reduce over one axis of a value summed over the other
    becomes one all-reduce over both. A tensor split over both axes along
    one dimension is a plain split of tp ranks (the same chunks, or the
    factoring is refused); split over one axis it has `parts` and `copies`
    in its `#cleave.layout`. After `--cleave-partition-data` the tp axis
    of its dp x tp mesh is factored alike (axes "dp,tp,tp_inner"; not under
    ZeRO). With `tp-inner=0` the pass partitions copies
    of the step over one axis and over each factoring of tp (without a
    `plan` or sequence parallelism) and keeps the one whose collectives
    (latency and bytes on the wire over their groups) and per-rank state
    the cost model charges least, one axis unless a factoring costs less.

    Before (`tp=2`, `x W^T` then `relu` then `h V^T`):
    ```mlir
    func.func @main(%x: tensor<4x8xf32>, %w: tensor<16x8xf32> {cleave.parameter = "w"}, %v: tensor<8x16xf32> {cleave.parameter = "v"}) -> (tensor<4x8xf32> {cleave.loss}) {
      %0 = cleave.matmul %x, %w {transpose_rhs} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
      %1 = cleave.relu %0 : tensor<4x16xf32>
      %2 = cleave.matmul %1, %v {transpose_rhs} : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
      return %2 : tensor<4x8xf32>
    }
    ```
    After (`w` split by rows, `v` by columns: Megatron's MLP, one all-reduce):
    ```mlir
    module attributes {cleave.mesh = array<i64: 2>} {
      func.func @main(%x: tensor<4x8xf32>, %w: tensor<8x8xf32> {cleave.parameter = "w", cleave.layout = #cleave.layout<dim = 0>}, %v: tensor<8x8xf32> {cleave.parameter = "v", cleave.layout = #cleave.layout<dim = 1>}) -> (tensor<4x8xf32> {cleave.loss}) {
        %0 = cleave.matmul %x, %w {transpose_rhs} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
        %1 = cleave.relu %0 : tensor<4x8xf32>
        %2 = cleave.matmul %1, %v {transpose_rhs} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
        %3 = cleave.all_reduce sum %2 axes = [0] {cleave.megatron, cleave.reason = "sums the partial results of ... (cleave.matmul), which contracts a split dimension with a weight; ... needs them whole"} : tensor<4x8xf32>
        return %3 : tensor<4x8xf32>
      }
    }
    ```
  }];
  let options = [
    Option<"tp", "tp", "int64_t", /*default=*/"1", "Tensor-parallel ranks">,
    Option<"planFile", "plan", "std::string", /*default=*/"\"\"",
           "File of `REGEX KIND` rules applied before the search (KIND "
           "colwise, rowwise, replicate, vocab, R or "
           "S(DIM[,BLOCKS][;GRANULE]))">,
    Option<"sequenceParallel", "sequence-parallel", "bool", /*default=*/"false",
           "Reduce-scatter partial activations into the split their next op "
           "reads (Megatron's sequence parallelism), gathering them where "
           "an op needs them whole">,
    Option<"tpInner", "tp-inner", "int64_t", /*default=*/"1",
           "Factor the tp ranks into two mesh axes, tp / tp-inner outer x "
           "tp-inner inner, partitioned one after the other; 0: partition "
           "over one axis and over each factoring, and keep the one the "
           "cost model charges least">,
  ];
}

def PartitionDataPass : Pass<"cleave-partition-data", "ModuleOp"> {
  let summary = "Splits the train step's batch over dp ranks, with ZeRO's state sharding";
  let description = [{
    Data parallelism on the mesh's first axis ("dp"): every data input
    whose first dimension is the batch (the first dimension most inputs
    share) is split along it, which `dp` must divide; parameters stay
    replicated; a weight's gradient, a contraction over the batch, is a
    partial sum reduced over the ranks, and a reduction over the batch (the
    loss's mean, BatchNorm's statistics) sees the global batch (each rank's
    mean scaled by its share of the rows, then summed).

    Gradients are summed where the backward pass finishes them, so the rest
    of it hides the sums: in buckets of at least `gradient-bucket-bytes`
    (by default the smallest whose latency is a tenth of its transfer),
    each reduced right after the gradient that fills it (one all-reduce per
    gradient, marked `cleave.bucket`; `--cleave-bucket-gradients` merges
    each bucket). ZeRO (`zero`):
    stage 1 splits the optimizer state over dp (each rank updates its
    shard, the parameters are gathered), 2 also reduce-scatters each
    gradient where it is final, 3 also keeps the parameters split and
    gathers them at each use.

    With `tp` > 1 the mesh is dp x tp ("dp,tp") and `--cleave-partition`
    then splits the per-dp-rank step over axis 1; gradients are reduced
    one by one (a bucket's flattening would undo the tp splits), and ZeRO
    splits the state along a dimension tp does not, reading the tp layouts
    `--cleave-choose-layouts` recorded (or choosing them).

    Before (`dp=2`):
    ```mlir
    func.func @step(%x: tensor<4x8xf32> {cleave.input = "x"}, %w: tensor<8x2xf32> {cleave.parameter = "w"}) -> (tensor<f32> {cleave.loss}, tensor<8x2xf32> {cleave.gradient = "w"}) {
      %y = cleave.matmul %x, %w : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
      %l = cleave.reduce mean %y dims = [0, 1] : (tensor<4x2xf32>) -> tensor<f32>
      ...
    }
    ```
    After (each rank's two rows; the loss and the gradient summed over dp):
    ```mlir
    module attributes {cleave.mesh = array<i64: 2>, cleave.mesh_axes = "dp"} {
      func.func @step(%x: tensor<2x8xf32> {cleave.input = "x", cleave.layout = #cleave.layout<dim = 0>}, %w: tensor<8x2xf32> {cleave.parameter = "w"}) -> ... {
        %y = cleave.matmul %x, %w : (tensor<2x8xf32>, tensor<8x2xf32>) -> tensor<2x2xf32>
        %m = cleave.reduce mean %y dims = [0, 1] : (tensor<2x2xf32>) -> tensor<f32>
        %half = cleave.constant dense<5.000000e-01> : tensor<f32>
        %share = cleave.mul %m, %half : (tensor<f32>, tensor<f32>) -> tensor<f32>
        %l = cleave.all_reduce sum %share axes = [0] ... : tensor<f32>
        ...
      }
    }
    ```
  }];
  let options = [
    Option<"dp", "dp", "int64_t", /*default=*/"1",
           "Data-parallel ranks: every data input is split along its batch "
           "dimension, parameters replicated, gradients summed over them">,
    Option<"tp", "tp", "int64_t", /*default=*/"1",
           "Tensor-parallel ranks of the axis --cleave-partition splits "
           "next (the mesh is dp x tp)">,
    Option<"zero", "zero", "int64_t", /*default=*/"0",
           "ZeRO stage over dp: 1 splits the optimizer state over the dp "
           "ranks (each updates its shard; the parameters are gathered); 2 "
           "also reduce-scatters each gradient as soon as it is final; 3 "
           "also keeps the parameters split, gathered at each use">,
    Option<"bucketBytes", "gradient-bucket-bytes", "int64_t",
           /*default=*/"-1",
           "Gradients are summed over dp in buckets of at least this many "
           "bytes, each right after the gradient that fills it (-1: the "
           "cost model's size, where a bucket's latency is a tenth of its "
           "transfer)">,
  ];
}

def BucketGradientsPass : Pass<"cleave-bucket-gradients", "func::FuncOp"> {
  let summary = "Sums each gradient bucket the partitioner priced as one flat all-reduce";
  let description = [{
    The partition passes price gradient buckets (one latency per bucket is
    what makes keeping a gradient partial until the backward pass finishes
    it pay) and emit one `cleave.all_reduce` per gradient, each marked
    `cleave.bucket = N`, the members of a bucket adjacent where its last
    gradient is final. This pass sums each bucket of two or more as one:
    the members' operands flattened and concatenated, one all-reduce (with
    the bucket's phase and reason), cut apart and reshaped back for their
    users; a bucket of one just loses its mark. Every member of a bucket
    must be a sum over the same mesh axes of one element type.

    Before (two gradients in bucket 0):
    ```mlir
    %a = cleave.all_reduce sum %g1 axes = [0] {cleave.bucket = 0 : i64, cleave.phase = "backward", cleave.reason = "one bucket: ..."} : tensor<4x4xf32>
    %b = cleave.all_reduce sum %g2 axes = [0] {cleave.bucket = 0 : i64, cleave.phase = "backward", cleave.reason = "one bucket: ..."} : tensor<8xf32>
    ```
    After (one all-reduce of 24 floats):
    ```mlir
    %0 = cleave.reshape %g1 : tensor<4x4xf32> -> tensor<16xf32>
    %1 = cleave.reshape %g2 : tensor<8xf32> -> tensor<8xf32>
    %2 = cleave.concat %0, %1 axis = 0 : (tensor<16xf32>, tensor<8xf32>) -> tensor<24xf32>
    %3 = cleave.all_reduce sum %2 axes = [0] {cleave.phase = "backward", cleave.reason = "one bucket: ..."} : tensor<24xf32>
    %4 = cleave.slice %3 starts = [0] steps = [1] : tensor<24xf32> -> tensor<16xf32>
    %a = cleave.reshape %4 : tensor<16xf32> -> tensor<4x4xf32>
    %5 = cleave.slice %3 starts = [16] steps = [1] : tensor<24xf32> -> tensor<8xf32>
    %b = cleave.reshape %5 : tensor<8xf32> -> tensor<8xf32>
    ```
  }];
}

def SegmentParametersPass : Pass<"cleave-segment-parameters", "func::FuncOp"> {
  let summary = "Makes each piece of a parameter used only in unequal pieces its own parameter";
  let description = [{
    Runs on the forward, before the backward pass is derived. A parameter
    whose only use is a chain of single-use ops (transposes, reshapes that
    keep the dimension, the weight side of a matmul, a bias added, casts)
    ending in unit-step slices along one dimension, disjoint, covering it and
    not all of one size, is one tensor to the model but several to sharding:
    Falcon's fused q|k|v with one K/V head wants its query rows split by
    heads and its K/V rows replicated, which no single layout of the fused
    tensor expresses (equal pieces, as GPT-2's q|k|v, stay one parameter
    split in blocks). Each piece becomes a parameter of its own, named in
    NumPy's notation (`w[0:64]`, `w[:, 8:16]`), marked `cleave.segment_of`
    (the model's tensor) and `cleave.segment` ([dim, offset, size]), and the
    chain is copied per piece, a bias it adds cut the same way (and then
    segmented in turn). Each piece gets its own gradient, optimizer state
    and layout; the bundle cuts the initial values from the model's tensor
    and dumps and export put it back together. The pieces run as separate,
    smaller matmuls.

    Before:
    ```mlir
    func.func @main(%x: tensor<4x8xf32> {cleave.input = "x"}, %w: tensor<10x8xf32> {cleave.parameter = "w"}) -> (tensor<4x8xf32>, tensor<4x2xf32>) {
      %0 = cleave.matmul %x, %w {transpose_rhs} : (tensor<4x8xf32>, tensor<10x8xf32>) -> tensor<4x10xf32>
      %1 = cleave.slice %0 starts = [0, 0] steps = [1, 1] : tensor<4x10xf32> -> tensor<4x8xf32>
      %2 = cleave.slice %0 starts = [0, 8] steps = [1, 1] : tensor<4x10xf32> -> tensor<4x2xf32>
      return %1, %2 : tensor<4x8xf32>, tensor<4x2xf32>
    }
    ```
    After:
    ```mlir
    func.func @main(%x: tensor<4x8xf32> {cleave.input = "x"}, %w0: tensor<8x8xf32> {cleave.parameter = "w[0:8]", cleave.segment = array<i64: 0, 0, 8>, cleave.segment_of = "w"}, %w1: tensor<2x8xf32> {cleave.parameter = "w[8:10]", cleave.segment = array<i64: 0, 8, 2>, cleave.segment_of = "w"}) -> (tensor<4x8xf32>, tensor<4x2xf32>) {
      %0 = cleave.matmul %x, %w0 {transpose_rhs} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
      %1 = cleave.matmul %x, %w1 {transpose_rhs} : (tensor<4x8xf32>, tensor<2x8xf32>) -> tensor<4x2xf32>
      return %0, %1 : tensor<4x8xf32>, tensor<4x2xf32>
    }
    ```
  }];
}

def PrintShardingRulesPass : Pass<"cleave-print-sharding-rules", "func::FuncOp"> {
  let summary = "Attaches each op's factor sharding rule as a readable attribute";
  let description = [{
    For tests and for reading what the partitioner may do: every op with a
    ShardingRuleOpInterface rule gets `cleave.sharding_rule`, written as in
    OpenXLA Shardy: one letter per factor, per operand and result the
    factor of each dimension (`_` where none, e.g. a broadcast dimension),
    and the factors that are reductions (`sum`, `max`, `min`) or must stay
    whole. `linear` lists how a partial sum may pass through.

    Before:
    ```mlir
    %0 = cleave.matmul %a, %b : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
    ```
    After:
    ```mlir
    %0 = cleave.matmul %a, %b {cleave.sharding_rule = "([i, k], [k, j]) -> ([i, j]) sum={k} linear=scaling(0,1)"} : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
    ```
  }];
}

#endif // CLEAVE_SHARDING_PASSES_TD

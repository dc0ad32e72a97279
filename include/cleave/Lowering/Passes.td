//===- Passes.td - Lowering passes -------------------------*- tablegen -*-===//
//
// Passes from the cleave dialect towards a plan of kernel calls.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_LOWERING_PASSES_TD
#define CLEAVE_LOWERING_PASSES_TD

include "mlir/Pass/PassBase.td"

def FuseDequantizePass : Pass<"cleave-fuse-dequantize", "func::FuncOp"> {
  let summary = "Multiplies weight-only int8 weights without an f32 copy";
  let description = [{
    A frozen int8 weight (a weight-only quantized checkpoint: LLM.int8's or
    GPTQ's int8 form with one scale per output channel) arrives as the
    exporter wrote it: `cast` to f32, `mul` by the scale broadcast along the
    rows, perhaps `transpose` and a `reshape` adding unit batch dims, then
    `matmul`. As plain ops the f32 matrix would live in the arena from the
    forward's product to the backward's, on every rank. This pass, run on a
    rank's finished program just before buffer planning, replaces each
    `matmul` whose right operand is such a chain by `cleave.matmul_dequant`
    reading the int8 weight and its scale, whose kernel dequantizes a block
    of rows at a time; the chain then has no user and goes. A bf16 or f16
    weight widened to f32 is the same pattern without a scale. Any other
    right operand, a scale that is not one per row, or a lhs read
    transposed, is left as it is: still exact, only not fused.

    Before:
    ```mlir
    %w = cleave.cast %q : tensor<256x64xi8> -> tensor<256x64xf32>
    %s2 = cleave.reshape %s : tensor<256xf32> -> tensor<256x1xf32>
    %d = cleave.mul %w, %s2 : (tensor<256x64xf32>, tensor<256x1xf32>) -> tensor<256x64xf32>
    %t = cleave.transpose %d perm = [1, 0] : (tensor<256x64xf32>) -> tensor<64x256xf32>
    %r = cleave.reshape %t : tensor<64x256xf32> -> tensor<1x64x256xf32>
    %y = cleave.matmul %x, %r : (tensor<8x16x64xf32>, tensor<1x64x256xf32>) -> tensor<8x16x256xf32>
    ```
    After:
    ```mlir
    %y = cleave.matmul_dequant %x, %q, %s {transpose_rhs} : (tensor<8x16x64xf32>, tensor<256x64xi8>, tensor<256xf32>) -> tensor<8x16x256xf32>
    ```
  }];
}

def FoldTransposesPass : Pass<"cleave-fold-transposes", "func::FuncOp"> {
  let summary = "Products read transposed operands as they are";
  let description = [{
    torch.onnx without constant folding (the Python package's export)
    writes nn.Linear's `x W^T` as `MatMul(x, Transpose(W))`, and the
    backward's input gradient reads the same transpose: as plain ops, every
    weight (or its bf16 copy) is transposed into the arena every step. This
    pass, run on a rank's finished program before buffer planning, makes a
    `matmul` whose operand is a `transpose` of its last two dims, perhaps
    seen through a `reshape` that only adds unit dims in front, read the
    transpose's operand instead with `transpose_lhs` / `transpose_rhs`
    flipped; the transpose, then unread, goes. A transpose of a product
    read by nothing else (the weight's gradient, made as W^T's by the
    backward of x W^T) becomes the product of the operands swapped, each
    read the other way ((AB)^T = B^T A^T). Other permutations (attention's
    heads) and other reshapes stay. Run after the layouts are chosen: the
    search groups parameters by their forward chains.

    Before:
    ```mlir
    %t = cleave.transpose %w perm = [1, 0] : (tensor<6x4xf32>) -> tensor<4x6xf32>
    %r = cleave.reshape %t : tensor<4x6xf32> -> tensor<1x4x6xf32>
    %y = cleave.matmul %x, %r : (tensor<2x3x4xf32>, tensor<1x4x6xf32>) -> tensor<2x3x6xf32>
    ```
    After:
    ```mlir
    %r = cleave.reshape %w : tensor<6x4xf32> -> tensor<1x6x4xf32>
    %y = cleave.matmul %x, %r {transpose_rhs} : (tensor<2x3x4xf32>, tensor<1x6x4xf32>) -> tensor<2x3x6xf32>
    ```
  }];
}

def JoinScatteredSlicesPass
    : Pass<"cleave-join-scattered-slices", "func::FuncOp"> {
  let summary = "A sum of slices placed side by side becomes a concat";
  let description = [{
    The backward of a fused projection's split (GPT-2's c_attn into q, k and
    v; a gate/up projection into its halves) places each piece's gradient
    into zeros of the whole (`slice_scatter`) and adds the placed pieces:
    each `slice_scatter` writes the whole tensor, each `add` reads two and
    writes one, where the gradient is the pieces side by side. This pass,
    run on a rank's finished program, replaces an `add` tree (its inner
    adds read by the tree alone) whose leaves are `slice_scatter`s with unit
    steps, windows along one dim that tile the result exactly, by the
    pieces' `concat` in window order: one write. Any other sum stays.

    Before:
    ```mlir
    %a = cleave.slice_scatter %q starts = [0, 0] steps = [1, 1] : tensor<4x2xf32> -> tensor<4x6xf32>
    %b = cleave.slice_scatter %k starts = [0, 2] steps = [1, 1] : tensor<4x2xf32> -> tensor<4x6xf32>
    %c = cleave.slice_scatter %v starts = [0, 4] steps = [1, 1] : tensor<4x2xf32> -> tensor<4x6xf32>
    %s = cleave.add %a, %b : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
    %g = cleave.add %s, %c : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
    ```
    After:
    ```mlir
    %g = cleave.concat %q, %k, %v axis = 1 : (tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<4x6xf32>
    ```
  }];
}

def RecomputePass : Pass<"cleave-recompute", "func::FuncOp"> {
  let summary = "Keeps fewer activations for the backward and makes the rest again";
  let description = [{
    What the forward keeps for the backward is most of a train step's
    memory. This pass, run on a rank's finished program (its collectives in
    place), keeps less: it copies into the backward the forward ops that
    make the rest again from what is kept, right before the first op after
    the loss that reads them (the copies carry `cleave.recomputed`; the
    forward and the loss are unchanged, and the copies compute the same
    bits, random numbers included: they are a pure function of their
    operands). Two policies besides `none`:

    - `selective` (Megatron's selective recomputation, generalised): a
      value the backward reads is made again when the ops that make it
      from kept values do a few operations per element: norms, softmax,
      elementwise chains, reshapes, and products of two activations
      (attention's scores when it is not fused). A product with a weight,
      attention, the loss, convolutions and pools, BatchNorm and
      collectives are kept.
    - `full` (activation checkpointing): the forward is cut where the
      values live across the cut take few bytes; only those are kept, and
      each segment but the last runs again before its backward, collectives
      included (as Megatron's full recomputation repeats the forward's
      all-reduces). The cuts minimise the kept bytes plus the largest
      segment's saved bytes (the backward's peak of what this pass
      governs), by dynamic programming over the forward's order for each
      bound on a segment: a transformer is cut on its residual stream,
      about every sqrt(layers) layers, from the model's graph alone.

    A value read amid the forward by an op that is not the forward's is
    kept. `cleave compile --recompute` chooses the policy (`auto`: the
    least that fits `--memory-per-device`).

    Before (`full`; `%a` and `%b` are read after the loss, `%h` is live
    across the forward's cheapest cut):
    ```mlir
    %a = cleave.matmul %x, %w1 : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
    %h = cleave.tanh %a : tensor<64x64xf32>
    %b = cleave.matmul %h, %w2 : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
    ...
    %g = cleave.mul %dy, %a : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
    ```
    After (`%a` is made again from `%x` where the backward first reads it):
    ```mlir
    %a = cleave.matmul %x, %w1 : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
    ...
    %a2 = cleave.matmul %x, %w1 {cleave.recomputed} : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
    %g = cleave.mul %dy, %a2 : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
    ```
  }];
  let options = [
    Option<"policy", "policy", "std::string", /*default=*/"\"none\"",
           "none, selective or full">,
  ];
}

def SaveDerivativesPass : Pass<"cleave-save-derivatives", "func::FuncOp"> {
  let summary = "Saves an elementwise chain's derivative in place of the values it is made from";
  let description = [{
    The backward of an elementwise chain is linear in the gradient it
    receives: GELU's erf form gives dx = dy 0.5 (1 + erf(x / sqrt(2))) +
    dy 0.5 x exp(-x^2 / 2) / sqrt(2 pi), which reads three forward values
    (x, x / sqrt(2), 1 + erf) or, recomputed, evaluates erf a second time.
    Where a backward value is built from one gradient `dy` by
    multiplications and divisions by values free of it (forward values,
    constants, and elementwise ops of those), negations, and sums and
    differences of such terms of the same `dy`, it equals `dy * f(1, F)`
    with `F` the forward values it reads. This pass computes that factor
    in the forward, right after the last of `F` is made (where the forward's
    own elementwise kernel computes it beside them; its ops are marked
    `cleave.forward`, and the larger operand of each is made first so that
    fewer of its values are live at once), and replaces the
    backward value by one product, when the forward values only that
    chain reads after the loss take at least the factor's bytes: the step
    keeps the factor in their place, and the backward's chain is one
    multiplication (PyTorch's GELU backward evaluates erf again). The sum
    is regrouped, so the result differs in the last bits: under bf16 mixed
    precision only (`cleave.precision = "bf16"`), whose values are rounded
    to bf16 anyway; run before `--cleave-recompute-elementwise` and
    `--cleave-narrow-saved`, which stores the factor in bf16.

    Before (`%dy` is a gradient after the loss; `%x`, `%e` forward values):
    ```mlir
    %a = cleave.mul %dy, %e : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    %b = cleave.mul %dy, %x : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    %c = cleave.exp %x : tensor<8xf32>
    %d = cleave.mul %b, %c : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    %dx = cleave.add %a, %d : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    ```
    After (the factor made where `%x` and `%e` are, in the forward):
    ```mlir
    %c1 = cleave.exp %x {cleave.forward} : tensor<8xf32>
    %d1 = cleave.mul %x, %c1 {cleave.forward} : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    %f = cleave.add %e, %d1 {cleave.forward} : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    ...
    %dx = cleave.mul %dy, %f : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    ```
  }];
}

def RecomputeElementwisePass
    : Pass<"cleave-recompute-elementwise", "func::FuncOp"> {
  let summary = "Recomputes in the backward the cheap elementwise values it would save";
  let description = [{
    An elementwise chain keeps, for its backward, the input of each of its
    ops: GELU's erf form saves its input x, x / sqrt(2) and 1 + erf(x /
    sqrt(2)), three tensors where PyTorch's GELU saves one. Where a value
    the backward reads is an elementwise function (add, sub, mul, div,
    neg, exp, erf, tanh, sigmoid, sqrt, rsqrt, reciprocal, gelu, a float
    cast) of values the backward reads anyway, of parameters and of
    constants, through at most four such ops, and the forward reads it only
    inside elementwise chains (which then need not write it; a value a
    product or a norm reads is written anyway), this pass recomputes it
    right before its first reader after the loss, so that only the chain's
    inputs are kept from the forward: fewer bytes written in the forward
    and read in the backward, the recomputation fused into the backward's
    own elementwise kernels. The forward and the loss are unchanged; the
    recomputed values are the same ops on the same inputs. Under mixed
    precision only (`cleave.precision`), where the elementwise chains are
    bound by the bytes they move; run before `--cleave-narrow-saved`,
    which then rounds the chain's inputs once.

    Before (`%u` and `%e` are read after the loss, `%x` too):
    ```mlir
    %u = cleave.div %x, %c : (tensor<8xf32>, tensor<1xf32>) -> tensor<8xf32>
    %e = cleave.erf %u : tensor<8xf32>
    %l = cleave.reduce sum %e dims = [0] : (tensor<8xf32>) -> tensor<f32>
    %g = cleave.mul %u, %x : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    %h = cleave.mul %e, %g : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    ```
    After:
    ```mlir
    %u = cleave.div %x, %c : (tensor<8xf32>, tensor<1xf32>) -> tensor<8xf32>
    %e = cleave.erf %u : tensor<8xf32>
    %l = cleave.reduce sum %e dims = [0] : (tensor<8xf32>) -> tensor<f32>
    %u2 = cleave.div %x, %c : (tensor<8xf32>, tensor<1xf32>) -> tensor<8xf32>
    %g = cleave.mul %u2, %x : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    %u3 = cleave.div %x, %c : (tensor<8xf32>, tensor<1xf32>) -> tensor<8xf32>
    %e3 = cleave.erf %u3 : tensor<8xf32>
    %h = cleave.mul %e3, %g : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    ```
  }];
}

def SumProductCopiesPass
    : Pass<"cleave-sum-product-copies", "func::FuncOp"> {
  let summary = "A backward sum reads the bf16 copy a product reads of the same value";
  let description = [{
    Under mixed precision a gradient that a product reads is rounded to a
    bf16 copy; a bias's gradient is a sum of the same gradient over the
    tokens. Read in f32, the sum makes the elementwise chain that computes
    the gradient write it twice, in bf16 for the product and in f32 for
    the sum (6 bytes an element where 2 do). This pass makes a sum after
    the loss read the widened bf16 copy instead, so the chain writes the
    copy alone and the sum reads half the bytes: PyTorch's autocast sums
    the same rounded gradient for its bias (its sum is rounded to bf16
    too; here it stays f32). Forward sums are left as they are, and f32
    and fp16 steps too.

    Before (`cleave.precision = "bf16"`; `%g` is a gradient after the loss):
    ```mlir
    %c = cleave.cast %g : tensor<4x8xf32> -> tensor<4x8xbf16>
    %p = cleave.matmul %c, %w : (tensor<4x8xbf16>, tensor<8x2xbf16>) -> tensor<4x2xbf16>
    %b = cleave.reduce sum %g dims = [0] : (tensor<4x8xf32>) -> tensor<8xf32>
    ```
    After:
    ```mlir
    %c = cleave.cast %g : tensor<4x8xf32> -> tensor<4x8xbf16>
    %p = cleave.matmul %c, %w : (tensor<4x8xbf16>, tensor<8x2xbf16>) -> tensor<4x2xbf16>
    %r = cleave.cast %c : tensor<4x8xbf16> -> tensor<4x8xf32>
    %b = cleave.reduce sum %r dims = [0] : (tensor<4x8xf32>) -> tensor<8xf32>
    ```
  }];
}

def NarrowSavedPass : Pass<"cleave-narrow-saved", "func::FuncOp"> {
  let summary = "Keeps the activations a bf16 step saves for its backward in bf16";
  let description = [{
    Mixed precision (`cleave.precision = "bf16"`) stores the products'
    results in bf16, but the values the step computes from them in f32 -
    the residual stream, a norm's output, an activation function's input
    and output, softmax's probabilities - would still be held in f32 from
    the forward, where they are made, to the backward, which reads them
    again: the bulk of a transformer's activation memory. This pass, on a
    rank's finished program, holds each such value in bf16 across that
    span, as Megatron stores activations: the forward still computes and
    reads it in f32 (the loss is unchanged), and the backward reads it
    rounded once, the rounding PyTorch's autocast gives every value a
    bf16 product reads.

    A value is saved when it is made before the op that makes the loss
    (the function result marked `cleave.loss`) and read after it. It is
    held in bf16 unless it is a statistic or a log-domain value (a
    reduction's result, a norm's mean and inverse deviation, attention's
    log-sum-exp, a log or log-softmax: their rounding error would be an
    exponent's or every element's), or the backward reads it where a
    rounding could change more than a last bit of the result (a
    comparison, a select, a maximum, exp, a pooling backward), or it is
    returned. The bf16 copy a product already reads is reused; the
    backward's readers read a widening of it, which `--cleave-sink-widening`
    (run next) moves next to them. f32 and fp16 steps are left as they are.

    Before (`cleave.precision = "bf16"`; `%y` is read after the loss):
    ```mlir
    %y = cleave.tanh %x : tensor<8xf32>
    %l = cleave.reduce sum %y dims = [0] : (tensor<8xf32>) -> tensor<f32>
    %g = cleave.mul %y, %d : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    ```
    After:
    ```mlir
    %y = cleave.tanh %x : tensor<8xf32>
    %h = cleave.cast %y : tensor<8xf32> -> tensor<8xbf16>
    %w = cleave.cast %h : tensor<8xbf16> -> tensor<8xf32>
    %l = cleave.reduce sum %y dims = [0] : (tensor<8xf32>) -> tensor<f32>
    %g = cleave.mul %w, %d : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    ```
  }];
}

def SinkWideningPass : Pass<"cleave-sink-widening", "func::FuncOp"> {
  let summary = "Widens a bf16 value again where a far reader needs it";
  let description = [{
    Mixed precision stores a product's result in bf16 and widens it for the
    f32 ops that read it. One widening shared by a forward op and the
    backward op that reads the same value (the MLP's gate for its
    activation's derivative, a product's output for the next norm) keeps
    an f32 copy alive from the forward to the backward: the activations
    are stored twice as wide as they are. This pass, run on a rank's
    finished program after CSE (which would merge the copies back), gives
    a reader of a widened bf16 or f16 value more than `near` (64) ops past
    the last copy (the backward's, typically) a `cast` of its own placed
    just before it, shared with the readers that follow within `near`: the
    half-width value lives across the step, each f32 copy for a few ops,
    and nearby readers still share one widening. Each widening is placed
    right before its first reader, so that an elementwise reader fuses it
    into its loads (the runtime's chains widen half inputs as they read
    them, from a cast next to them). A reader whose kernel widens the
    operand itself (`layer_norm_backward`'s input and gradient, bf16) reads
    the bf16 value, with no f32 copy made for it.

    Before:
    ```mlir
    %w = cleave.cast %h : tensor<8xbf16> -> tensor<8xf32>
    %a = cleave.exp %w : tensor<8xf32>
    ... (more than 64 ops: the rest of the forward, the backward's start)
    %b = cleave.mul %w, %g : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    ```
    After:
    ```mlir
    %w0 = cleave.cast %h : tensor<8xbf16> -> tensor<8xf32>
    %a = cleave.exp %w0 : tensor<8xf32>
    ...
    %w1 = cleave.cast %h : tensor<8xbf16> -> tensor<8xf32>
    %b = cleave.mul %w1, %g : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    ```
  }];
  let options = [
    Option<"near", "near", "int64_t", /*default=*/"64",
           "Readers at most this many ops past a copy share it (readers "
           "this close widen once; a copy lives this long at most)">,
  ];
}

def PlanBuffersPass : Pass<"cleave-plan-buffers", "func::FuncOp"> {
  let summary = "Assigns every tensor a static offset in one scratch arena";
  let description = [{
    Static buffer planning. Every op result that needs storage gets a byte
    offset in a per-function arena; values whose lifetimes do not overlap
    share bytes. The program is a straight line, so a value's lifetime is the
    interval from its definition to its last use. Offsets come from a
    best-fit choice among free gaps, largest value first (the classic
    greedy-by-size heuristic), aligned to 64 bytes.

    The function's results are not in the arena: the op that makes one
    writes it into the caller's output tensor (the plan's OUTPUT storage),
    so the arena holds what the step computes on the way and its size is
    what a runtime needs beside the step's inputs and outputs (a training
    step's new parameters and optimizer state, written over the old ones
    where the runtime can, are never counted twice). Views need no storage
    of their own: `cleave.reshape` aliases its operand (which then stays
    alive as long as the view), and constants and function arguments live
    outside the arena. The pass records offsets as `cleave.offsets` (one
    per result; -1 for a view or a result of the function, which have no
    arena bytes of their own) and the arena size as `cleave.arena_bytes` on
    the function; plan emission reads both.

    Before:
    ```mlir
    func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
      %0 = cleave.exp %x : tensor<4xf32>
      %1 = cleave.tanh %0 : tensor<4xf32>
      %2 = cleave.exp %1 : tensor<4xf32>
      %3 = cleave.tanh %2 : tensor<4xf32>
      return %3 : tensor<4xf32>
    }
    ```
    After (`%0` is dead once `%1` exists, so `%2` reuses its bytes; `%3`
    is made in the caller's tensor):
    ```mlir
    func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> attributes {cleave.arena_bytes = 128 : i64} {
      %0 = cleave.exp %x {cleave.offsets = array<i64: 0>} : tensor<4xf32>
      %1 = cleave.tanh %0 {cleave.offsets = array<i64: 64>} : tensor<4xf32>
      %2 = cleave.exp %1 {cleave.offsets = array<i64: 0>} : tensor<4xf32>
      %3 = cleave.tanh %2 {cleave.offsets = array<i64: -1>} : tensor<4xf32>
      return %3 : tensor<4xf32>
    }
    ```
  }];
  let options = [
    Option<"alignment", "alignment", "int64_t", /*default=*/"64",
           "Byte alignment of every buffer">,
  ];
}

def EmitPlanPass : Pass<"cleave-emit-plan", "ModuleOp"> {
  let summary = "Prints the plan Program each function lowers to, as text";
  let description = [{
    Plan emission, made visible: every function, in order, already through
    `cleave-plan-buffers` is translated to the plan's Program (one
    instruction per op, written through the kernel schema of
    runtime/plan/kernels.def) and printed to stdout in
    protobuf's text format, so lowering is tested with FileCheck like every
    other pass. The IR is left as it is; an op with no kernel is an error.
    `cleave compile` writes the same Program, in binary, into a bundle.

    Before:
    ```mlir
    func.func @f(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>) -> tensor<2x4xf32>
        attributes {cleave.arena_bytes = 64 : i64} {
      %0 = cleave.matmul %a, %b {cleave.offsets = array<i64: 0>}
          : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
      return %0 : tensor<2x4xf32>
    }
    ```
    Printed (abridged):
    ```
    name: "f"
    instructions {
      kernel: "matmul"
      operands: 0
      operands: 1
      results: 2
      attrs { key: "transpose_a" value { ints: 0 } }
      attrs { key: "transpose_b" value { ints: 0 } }
    }
    ```
  }];
}

#endif // CLEAVE_LOWERING_PASSES_TD

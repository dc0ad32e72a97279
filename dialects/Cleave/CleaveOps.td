//===- CleaveOps.td - Ops of the cleave dialect ------------*- tablegen -*-===//
//
// Every op: value semantics on static-shape ranked tensors, a verifier (most
// through result-type inference, which rejects bad operands with a message),
// an assembly format and an example.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_OPS_TD
#define CLEAVE_OPS_TD

include "Cleave/CleaveDialect.td"
include "Cleave/CleaveAttrs.td"
include "mlir/IR/BuiltinTypes.td"
include "mlir/IR/CommonTypeConstraints.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

// The compute element types, and the storage ones (F64, F16, BF16, I8, I16,
// UI8, UI16, UI32) a model's inputs and outputs may have, which only cast
// reads at run time (the importer widens them: computeTypeOf).
def Cleave_Tensor : StaticShapeTensorOf<[F32, F16, BF16, I1, I32, I64, F64, I8,
                                         I16, UI8, UI16, UI32]>;
def Cleave_FloatTensor : StaticShapeTensorOf<[F32, F16, BF16]>;
def Cleave_NumericTensor : StaticShapeTensorOf<[F32, F16, BF16, I32, I64]>;
def Cleave_SignedTensor : StaticShapeTensorOf<[F32, F16, BF16, I32, I64]>;
def Cleave_BoolTensor : StaticShapeTensorOf<[I1]>;
def Cleave_IndexTensor : StaticShapeTensorOf<[I32, I64]>;

class Cleave_Op<string mnemonic, list<Trait> traits = []>
    : Op<Cleave_Dialect, mnemonic, !listconcat([Pure], traits)>;

//===----------------------------------------------------------------------===//
// Constants
//===----------------------------------------------------------------------===//

def Cleave_ConstantOp : Cleave_Op<"constant",
    [ConstantLike, AllTypesMatch<["value", "result"]>]> {
  let summary = "A tensor constant";
  let description = [{
    A dense tensor literal. Parameters never become constants (they are
    function arguments); constants hold shapes, indices, masks and small
    literals of the model.

    ```mlir
    %0 = cleave.constant dense<[1.0, 2.0]> : tensor<2xf32>
    ```
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Cleave_Tensor:$result);
  let assemblyFormat = "attr-dict $value";
  let hasFolder = 1;
  let builders = [OpBuilder<(ins "::mlir::ElementsAttr":$value), [{
    build($_builder, $_state, value.getType(), value);
  }]>];
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

class Cleave_BroadcastingOp<string mnemonic, list<Trait> traits = []>
    : Cleave_Op<mnemonic, !listconcat([InferTypeOpAdaptor], traits)> {
  let assemblyFormat = [{
    operands attr-dict `:` functional-type(operands, results)
  }];
}

class Cleave_BinaryOp<string mnemonic, string body, Type operandType = Cleave_NumericTensor>
    : Cleave_BroadcastingOp<mnemonic> {
  let summary = "Elementwise " # body;
  let description = [{
    Elementwise }] # body # [{ of two tensors of one element type. The operands
    have the same rank; each dimension is equal to the result's or 1
    (broadcast).

    ```mlir
    %0 = cleave.}] # mnemonic # [{ %a, %b : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
    ```
  }];
  let arguments = (ins operandType:$lhs, operandType:$rhs);
  let results = (outs operandType:$result);
}

// Identities (x + 0, x - 0, x * 1, x / 1 with x of the result's type) fold:
// the backward pass seeds gradients with ones and would otherwise carry them.
def Cleave_AddOp : Cleave_BinaryOp<"add", "addition"> { let hasFolder = 1; }
def Cleave_SubOp : Cleave_BinaryOp<"sub", "subtraction"> { let hasFolder = 1; }
def Cleave_MulOp : Cleave_BinaryOp<"mul", "multiplication"> { let hasFolder = 1; }
def Cleave_DivOp : Cleave_BinaryOp<"div", "division (integers truncate toward zero)"> {
  let hasFolder = 1;
}
def Cleave_PowOp : Cleave_BinaryOp<"pow", "power lhs ^ rhs">;
def Cleave_MaxOp : Cleave_BinaryOp<"max", "maximum">;
def Cleave_MinOp : Cleave_BinaryOp<"min", "minimum">;
def Cleave_AndOp : Cleave_BinaryOp<"and", "logical and", Cleave_BoolTensor>;
def Cleave_OrOp : Cleave_BinaryOp<"or", "logical or", Cleave_BoolTensor>;
def Cleave_XorOp : Cleave_BinaryOp<"xor", "logical exclusive or", Cleave_BoolTensor>;

def Cleave_CmpOp : Cleave_Op<"cmp", [InferTypeOpAdaptor]> {
  let summary = "Elementwise comparison";
  let description = [{
    Compares two tensors of one element type with broadcasting (as in the
    binary ops) and yields an i1 tensor.

    ```mlir
    %0 = cleave.cmp lt, %a, %b : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xi1>
    ```
  }];
  let arguments = (ins Cleave_CmpPredicateAttr:$predicate, Cleave_Tensor:$lhs,
                   Cleave_Tensor:$rhs);
  let results = (outs Cleave_BoolTensor:$result);
  let assemblyFormat = [{
    $predicate `,` $lhs `,` $rhs attr-dict `:` functional-type(operands, results)
  }];
}

def Cleave_SelectOp : Cleave_BroadcastingOp<"select"> {
  let summary = "Elementwise choice between two tensors";
  let description = [{
    `cond ? on_true : on_false` per element, all three broadcasting to the
    result as in the binary ops.

    ```mlir
    %0 = cleave.select %c, %a, %b : (tensor<4x4xi1>, tensor<4x4xf32>, tensor<1x1xf32>) -> tensor<4x4xf32>
    ```
  }];
  let arguments = (ins Cleave_BoolTensor:$cond, Cleave_Tensor:$on_true,
                   Cleave_Tensor:$on_false);
  let results = (outs Cleave_Tensor:$result);
}

class Cleave_UnaryOp<string mnemonic, string body, Type type = Cleave_FloatTensor,
                     dag extraArgs = (ins)>
    : Cleave_Op<mnemonic, [SameOperandsAndResultType]> {
  let summary = "Elementwise " # body;
  let description = [{
    Elementwise }] # body # [{.

    ```mlir
    %0 = cleave.}] # mnemonic # [{ %x : tensor<4x8xf32>
    ```
  }];
  let arguments = !con((ins type:$input), extraArgs);
  let results = (outs type:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Cleave_NegOp : Cleave_UnaryOp<"neg", "negation", Cleave_SignedTensor>;
def Cleave_AbsOp : Cleave_UnaryOp<"abs", "absolute value", Cleave_SignedTensor>;
def Cleave_ExpOp : Cleave_UnaryOp<"exp", "exponential">;
def Cleave_LogOp : Cleave_UnaryOp<"log", "natural logarithm">;
def Cleave_SqrtOp : Cleave_UnaryOp<"sqrt", "square root">;
def Cleave_RsqrtOp : Cleave_UnaryOp<"rsqrt", "reciprocal square root">;
def Cleave_ReciprocalOp : Cleave_UnaryOp<"reciprocal", "reciprocal 1/x">;
def Cleave_TanhOp : Cleave_UnaryOp<"tanh", "hyperbolic tangent">;
def Cleave_SigmoidOp : Cleave_UnaryOp<"sigmoid", "logistic sigmoid 1/(1+exp(-x))">;
def Cleave_ReluOp : Cleave_UnaryOp<"relu", "rectified linear unit max(x, 0)">;
def Cleave_ErfOp : Cleave_UnaryOp<"erf", "error function">;
def Cleave_SinOp : Cleave_UnaryOp<"sin", "sine">;
def Cleave_CosOp : Cleave_UnaryOp<"cos", "cosine">;
def Cleave_NotOp : Cleave_UnaryOp<"not", "logical negation", Cleave_BoolTensor>;
def Cleave_GeluOp : Cleave_UnaryOp<"gelu",
    "Gaussian error linear unit x*Phi(x); with `approximate`, the tanh form. "
    "Kept as one op because its fused form and its derivative matter",
    Cleave_FloatTensor, (ins UnitAttr:$approximate)>;
def Cleave_LeakyReluOp : Cleave_UnaryOp<"leaky_relu",
    "leaky ReLU: x if x >= 0 else alpha * x",
    Cleave_FloatTensor, (ins F32Attr:$alpha)>;

def Cleave_CastOp : Cleave_Op<"cast"> {
  let summary = "Element type conversion";
  let description = [{
    Converts every element to the result's element type. Float to integer
    truncates toward zero; any type to i1 is `x != 0`. With `range_checked`
    (a float64 input entering a program that computes in f32), a finite
    element that the result type cannot hold stops the step with an error
    instead of becoming infinity.

    ```mlir
    %0 = cleave.cast %x : tensor<4xi64> -> tensor<4xf32>
    %1 = cleave.cast %y {range_checked} : tensor<4xf64> -> tensor<4xf32>
    ```
  }];
  let arguments = (ins Cleave_Tensor:$input, UnitAttr:$range_checked);
  let results = (outs Cleave_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Contractions, reductions, normalisations
//===----------------------------------------------------------------------===//

def Cleave_MatmulOp : Cleave_Op<"matmul", [InferTypeOpAdaptor]> {
  let summary = "Batched matrix product";
  let description = [{
    `lhs [..., m, k] x rhs [..., k, n] -> [..., m, n]`. Both operands have
    the same rank (>= 2); batch dimensions broadcast. `transpose_lhs` and
    `transpose_rhs` read the last two dimensions of an operand swapped, so no
    transpose is materialised for `x W^T`. Kept as one op: it is where the
    time goes and where a split factor becomes a partial sum.

    ```mlir
    %0 = cleave.matmul %x, %w {transpose_rhs} : (tensor<8x16x64xf32>, tensor<1x256x64xf32>) -> tensor<8x16x256xf32>
    ```
  }];
  let arguments = (ins Cleave_FloatTensor:$lhs, Cleave_FloatTensor:$rhs,
                   UnitAttr:$transpose_lhs, UnitAttr:$transpose_rhs);
  let results = (outs Cleave_FloatTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` functional-type(operands, results)
  }];
}

def Cleave_MatmulDequantOp : Cleave_Op<"matmul_dequant",
    [InferTypeOpAdaptor]> {
  let summary = "Matrix product with a weight-only quantized right operand";
  let description = [{
    `lhs [..., m, k] x (f32(weight) * scale[:, None])`: `weight` is a 2-D
    int8 (or bf16 / f16) matrix `[rows, cols]` and `scale`, when present,
    holds one f32 factor per row (`[rows]`: a weight-only int8
    checkpoint's per-output-channel scale) or per group of `cols / groups`
    consecutive elements of a row (`[rows, groups]`: GPTQ's groups). The dequantized matrix is the right operand
    as it is (`[k, n]`), or read transposed with `transpose_rhs`
    (`[n, k]`, the `x W^T` of a Linear). The lhs's leading dims are rows of
    one product. The kernel dequantizes the weight a block of rows at a
    time, so the f32 matrix never exists whole; `--cleave-fuse-dequantize`
    forms the op on a rank's finished program.

    ```mlir
    %0 = cleave.matmul_dequant %x, %q, %s {transpose_rhs} : (tensor<8x16x64xf32>, tensor<256x64xi8>, tensor<256xf32>) -> tensor<8x16x256xf32>
    ```
  }];
  let arguments = (ins Cleave_FloatTensor:$lhs, Cleave_Tensor:$weight,
                   Optional<Cleave_FloatTensor>:$scale,
                   UnitAttr:$transpose_rhs);
  let results = (outs Cleave_FloatTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $weight (`,` $scale^)? attr-dict `:` functional-type(operands, results)
  }];
}

def Cleave_ReduceOp : Cleave_Op<"reduce", [InferTypeOpAdaptor]> {
  let summary = "Reduction over dimensions";
  let description = [{
    Reduces `dims` (sorted, unique) with `sum`, `mean`, `max`, `min` or
    `prod`. With `keep_dims` the reduced dimensions stay as 1, else they are
    dropped.

    ```mlir
    %0 = cleave.reduce sum %x dims = [1] : (tensor<4x8xf32>) -> tensor<4xf32>
    %1 = cleave.reduce max %x dims = [0, 1] {keep_dims} : (tensor<4x8xf32>) -> tensor<1x1xf32>
    ```
  }];
  let arguments = (ins Cleave_ReduceKindAttr:$kind, Cleave_NumericTensor:$input,
                   DenseI64ArrayAttr:$dims, UnitAttr:$keep_dims);
  let results = (outs Cleave_NumericTensor:$result);
  let assemblyFormat = [{
    $kind $input `dims` `=` $dims attr-dict `:` functional-type(operands, results)
  }];
}

class Cleave_SoftmaxLikeOp<string mnemonic, string body>
    : Cleave_Op<mnemonic, [SameOperandsAndResultType]> {
  let summary = body # " along one dimension";
  let description = [{
    Numerically stable }] # body # [{ along dimension `axis`. Kept fused: its
    sharding needs the axis whole, and its gradient is cheaper than that of
    the decomposition.

    ```mlir
    %0 = cleave.}] # mnemonic # [{ %x axis = 1 : tensor<4x10xf32>
    ```
  }];
  let arguments = (ins Cleave_FloatTensor:$input, I64Attr:$axis);
  let results = (outs Cleave_FloatTensor:$result);
  let assemblyFormat = "$input `axis` `=` $axis attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Cleave_SoftmaxOp : Cleave_SoftmaxLikeOp<"softmax", "softmax">;
def Cleave_LogSoftmaxOp : Cleave_SoftmaxLikeOp<"log_softmax", "log-softmax">;

def Cleave_AttentionOp : Cleave_Op<"attention", [InferTypeOpAdaptor]> {
  let summary = "Fused scaled dot-product attention";
  let description = [{
    `softmax(scale * query key^T + bias, masked) value` per batch and head,
    without the score matrix as a value: query `[B, H, Sq, D]`, key
    `[B, Hk, Sk, D]`, value `[B, Hk, Sk, Dv]` with `H` a multiple of `Hk`
    (query head `h` reads key/value head `h / (H / Hk)`: grouped-query
    attention), and an optional additive `bias` of rank 4 that broadcasts
    to `[B, H, Sq, Sk]` (padding masks, ALiBi, relative position biases).
    `causal` excludes key `j` from query `i` when `j > i + Sk - Sq`. The
    second result is each row's log-sum-exp of the scores, which the
    backward reads instead of the probabilities (FlashAttention). Formed by
    `--cleave-fuse-attention` from the exporter's
    matmul-scale-mask-softmax-matmul. Under mixed precision query, key and
    value are bf16 (or f16): both products read bf16 operands (the
    probabilities rounded as they enter the second) and sum in f32, the
    softmax runs in f32, and both results are f32; a bias stays f32.

    ```mlir
    %o, %lse = cleave.attention %q, %k, %v scale = 2.500000e-01 causal : (tensor<2x4x16x16xf32>, tensor<2x4x16x16xf32>, tensor<2x4x16x16xf32>) -> (tensor<2x4x16x16xf32>, tensor<2x4x16xf32>)
    ```
  }];
  let arguments = (ins Cleave_FloatTensor:$query, Cleave_FloatTensor:$key,
                   Cleave_FloatTensor:$value,
                   Optional<Cleave_FloatTensor>:$bias, F32Attr:$scale,
                   UnitAttr:$causal);
  let results = (outs Cleave_FloatTensor:$result, Cleave_FloatTensor:$lse);
  let assemblyFormat = [{
    $query `,` $key `,` $value (`bias` $bias^)? `scale` `=` $scale
    (`causal` $causal^)? attr-dict `:` functional-type(operands, results)
  }];
}

def Cleave_AttentionBackwardOp : Cleave_Op<"attention_backward",
    [InferTypeOpAdaptor]> {
  let summary = "Gradients of query, key and value through attention";
  let description = [{
    The vector-Jacobian product of `cleave.attention` for its query, key and
    value, from the forward's operands, its `output` and `lse` results and
    the output's gradient `grad`; attributes as the forward's. The
    probabilities are recomputed in blocks from `lse`, never stored. A
    bias's gradient, when one is needed, is formed apart by the
    differentiation rule. With bf16 (or f16) query, key and value, `grad`
    is of their type, every product reads bf16 operands and sums in f32,
    and the three gradients are f32.

    ```mlir
    %dq, %dk, %dv = cleave.attention_backward %q, %k, %v, %o, %lse, %g scale = 2.500000e-01 causal : (tensor<2x4x16x16xf32>, tensor<2x4x16x16xf32>, tensor<2x4x16x16xf32>, tensor<2x4x16x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16x16xf32>) -> (tensor<2x4x16x16xf32>, tensor<2x4x16x16xf32>, tensor<2x4x16x16xf32>)
    ```
  }];
  let arguments = (ins Cleave_FloatTensor:$query, Cleave_FloatTensor:$key,
                   Cleave_FloatTensor:$value, Cleave_FloatTensor:$output,
                   Cleave_FloatTensor:$lse, Cleave_FloatTensor:$grad,
                   Optional<Cleave_FloatTensor>:$bias, F32Attr:$scale,
                   UnitAttr:$causal);
  let results = (outs Cleave_FloatTensor:$query_grad,
                 Cleave_FloatTensor:$key_grad,
                 Cleave_FloatTensor:$value_grad);
  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $output `,` $lse `,` $grad
    (`bias` $bias^)? `scale` `=` $scale (`causal` $causal^)? attr-dict `:`
    functional-type(operands, results)
  }];
}

def Cleave_CrossEntropyOp : Cleave_Op<"cross_entropy", [InferTypeOpAdaptor]> {
  let summary = "Fused softmax statistics of cross-entropy";
  let description = [{
    The two reductions over the class axis `axis` of `logits` that
    cross-entropy is made of, in one pass that keeps nothing of the logits'
    size: `sum_exp = sum_c exp(logits - shift)` and
    `target = sum_c [labels == class_ids[c]] (logits - shift)`, where
    `shift` (the logits' maximum, which only stabilises) and `labels` have
    the logits' shape with the class axis 1, and `class_ids` is 1 but along
    the class axis. The loss is `log(sum_exp) - target`. Both results are
    sums over the classes, so a class axis split across ranks (the
    vocab-parallel loss) needs only their all-reduce. Formed by
    `--cleave-fuse-cross-entropy` from the losses' reductions.

    ```mlir
    %s, %t = cleave.cross_entropy %x, %labels, %ids, %m axis = 1 : (tensor<8x512xf32>, tensor<8x1xi64>, tensor<1x512xi64>, tensor<8x1xf32>) -> (tensor<8x1xf32>, tensor<8x1xf32>)
    ```
  }];
  let arguments = (ins Cleave_FloatTensor:$logits, Cleave_IndexTensor:$labels,
                   Cleave_IndexTensor:$class_ids, Cleave_FloatTensor:$shift,
                   I64Attr:$axis);
  let results = (outs Cleave_FloatTensor:$sum_exp, Cleave_FloatTensor:$target);
  let assemblyFormat = [{
    $logits `,` $labels `,` $class_ids `,` $shift `axis` `=` $axis attr-dict
    `:` functional-type(operands, results)
  }];
}

def Cleave_CrossEntropyBackwardOp : Cleave_Op<"cross_entropy_backward",
    [InferTypeOpAdaptor]> {
  let summary = "Gradient of the logits through cross_entropy";
  let description = [{
    `sum_exp_grad * exp(logits - shift) + [labels == class_ids]
    target_grad`: the logits' gradient from those of `cross_entropy`'s two
    results (the operands as the forward's). One pass, one tensor of the
    logits' size written.

    ```mlir
    %g = cleave.cross_entropy_backward %x, %labels, %ids, %m, %gs, %gt axis = 1 : (tensor<8x512xf32>, tensor<8x1xi64>, tensor<1x512xi64>, tensor<8x1xf32>, tensor<8x1xf32>, tensor<8x1xf32>) -> tensor<8x512xf32>
    ```
  }];
  let arguments = (ins Cleave_FloatTensor:$logits, Cleave_IndexTensor:$labels,
                   Cleave_IndexTensor:$class_ids, Cleave_FloatTensor:$shift,
                   Cleave_FloatTensor:$sum_exp_grad,
                   Cleave_FloatTensor:$target_grad, I64Attr:$axis);
  let results = (outs Cleave_FloatTensor:$result);
  let assemblyFormat = [{
    $logits `,` $labels `,` $class_ids `,` $shift `,` $sum_exp_grad `,`
    $target_grad `axis` `=` $axis attr-dict `:`
    functional-type(operands, results)
  }];
}

def Cleave_LayerNormOp : Cleave_Op<"layer_norm",
    [InferTypeOpAdaptor, AttrSizedOperandSegments]> {
  let summary = "Layer normalisation over trailing dimensions";
  let description = [{
    Normalises `input` over dimensions `[axis, rank)`:
    `result = (x - mean) * inv_std_dev * scale + bias` with the biased
    variance and `inv_std_dev = 1 / sqrt(var + epsilon)`. `scale` and `bias`
    are optional and have the shape of the normalised dimensions. `mean` and
    `inv_std_dev` are also results (shape of `input` with the normalised
    dimensions set to 1) because the gradient reuses them.

    ```mlir
    %y, %m, %r = cleave.layer_norm %x scale %g bias %b axis = 1 eps = 1.0e-05 : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>, tensor<4x1xf32>)
    ```
  }];
  let arguments = (ins Cleave_FloatTensor:$input,
                   Optional<Cleave_FloatTensor>:$scale,
                   Optional<Cleave_FloatTensor>:$bias, I64Attr:$axis,
                   F32Attr:$epsilon);
  let results = (outs Cleave_FloatTensor:$result, Cleave_FloatTensor:$mean,
                 Cleave_FloatTensor:$inv_std_dev);
  let assemblyFormat = [{
    $input (`scale` $scale^)? (`bias` $bias^)? `axis` `=` $axis `eps` `=`
    $epsilon attr-dict `:` functional-type(operands, results)
  }];
}

def Cleave_LayerNormBackwardOp : Cleave_Op<"layer_norm_backward",
    [InferTypeOpAdaptor]> {
  let summary = "Gradients through layer_norm";
  let description = [{
    The gradients of `layer_norm` over dimensions `[axis, rank)` from its
    `mean` and `inv_std_dev` and the gradient `grad` of its result. With
    `g = grad * scale` (`grad` where there is no scale) and
    `xhat = (input - mean) * inv_std_dev`:
    `grad_input = inv_std_dev * ((g - mean(g)) - xhat * mean(g * xhat))`,
    the means over `[axis, rank)`; `grad_scale` and `grad_bias` (the shape
    of the normalised dimensions) are the sums over `[0, axis)` of
    `grad * xhat` and of `grad` (with `axis` 0, those values themselves).
    Each product is rounded to f32 and the sums are f64; the CPU adds in
    the reduce kernels' order, so its results are those of these formulas
    written op by op, bit for bit, in two passes over the rows instead of a
    chain of elementwise ops and five reductions. `input` and `grad`
    may be bf16 (widened as read); the results are f32.

    ```mlir
    %gx, %gs, %gb = cleave.layer_norm_backward %x, %m, %r, %g scale %s axis = 1 : (tensor<4x8xf32>, tensor<4x1xf32>, tensor<4x1xf32>, tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
    ```
  }];
  let arguments = (ins Cleave_FloatTensor:$input, Cleave_FloatTensor:$mean,
                   Cleave_FloatTensor:$inv_std_dev, Cleave_FloatTensor:$grad,
                   Optional<Cleave_FloatTensor>:$scale, I64Attr:$axis);
  let results = (outs Cleave_FloatTensor:$grad_input,
                 Cleave_FloatTensor:$grad_scale,
                 Cleave_FloatTensor:$grad_bias);
  let assemblyFormat = [{
    $input `,` $mean `,` $inv_std_dev `,` $grad (`scale` $scale^)? `axis` `=`
    $axis attr-dict `:` functional-type(operands, results)
  }];
}

def Cleave_BatchNormOp : Cleave_Op<"batch_norm", [InferTypeOpAdaptor]> {
  let summary = "Batch normalisation with given statistics";
  let description = [{
    Inference-form batch normalisation over channel dimension 1 of
    `input [N, C, ...]`: `(x - mean[c]) / sqrt(variance[c] + epsilon) *
    scale[c] + bias[c]`. Training mode computes the statistics with
    reductions and feeds them here.

    ```mlir
    %0 = cleave.batch_norm %x, %g, %b, %m, %v eps = 1.0e-05 : (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<2x3x4x4xf32>
    ```
  }];
  let arguments = (ins Cleave_FloatTensor:$input, Cleave_FloatTensor:$scale,
                   Cleave_FloatTensor:$bias, Cleave_FloatTensor:$mean,
                   Cleave_FloatTensor:$variance, F32Attr:$epsilon);
  let results = (outs Cleave_FloatTensor:$result);
  let assemblyFormat = [{
    operands `eps` `=` $epsilon attr-dict `:` functional-type(operands, results)
  }];
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

def Cleave_ReshapeOp : Cleave_Op<"reshape"> {
  let summary = "Reinterprets the shape";
  let description = [{
    Same elements in row-major order, another static shape. Free at run time
    (the result aliases the operand's buffer).

    ```mlir
    %0 = cleave.reshape %x : tensor<8x16x256xf32> -> tensor<8x16x4x64xf32>
    ```
  }];
  let arguments = (ins Cleave_Tensor:$input);
  let results = (outs Cleave_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Cleave_TransposeOp : Cleave_Op<"transpose", [InferTypeOpAdaptor]> {
  let summary = "Permutes dimensions";
  let description = [{
    Result dimension `i` is operand dimension `permutation[i]`.

    ```mlir
    %0 = cleave.transpose %x perm = [0, 2, 1, 3] : (tensor<8x16x4x64xf32>) -> tensor<8x4x16x64xf32>
    ```
  }];
  let arguments = (ins Cleave_Tensor:$input, DenseI64ArrayAttr:$permutation);
  let results = (outs Cleave_Tensor:$result);
  let assemblyFormat = [{
    $input `perm` `=` $permutation attr-dict `:` functional-type(operands, results)
  }];
  let hasFolder = 1;
}

def Cleave_BroadcastOp : Cleave_Op<"broadcast"> {
  let summary = "Expands size-1 dimensions";
  let description = [{
    The operand has the result's rank; each of its dimensions equals the
    result's or is 1 and is repeated.

    ```mlir
    %0 = cleave.broadcast %x : tensor<1x8xf32> -> tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Cleave_Tensor:$input);
  let results = (outs Cleave_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Cleave_ConcatOp : Cleave_Op<"concat", [InferTypeOpAdaptor]> {
  let summary = "Concatenation along one dimension";
  let description = [{
    Joins operands of one element type and rank, equal in every dimension but
    `axis`.

    ```mlir
    %0 = cleave.concat %a, %b axis = 1 : (tensor<2x3xf32>, tensor<2x5xf32>) -> tensor<2x8xf32>
    ```
  }];
  let arguments = (ins Variadic<Cleave_Tensor>:$inputs, I64Attr:$axis);
  let results = (outs Cleave_Tensor:$result);
  // Unit slices of one value along `axis`, each repeated in place, joined
  // in order: the value repeated in place (see ConcatOfRepeatedSlices).
  let hasCanonicalizer = 1;
  let assemblyFormat = [{
    $inputs `axis` `=` $axis attr-dict `:` functional-type(operands, results)
  }];
}

def Cleave_SliceOp : Cleave_Op<"slice"> {
  let summary = "Strided slice with static bounds";
  let description = [{
    Result element `i` along dimension `d` is operand element
    `starts[d] + i * steps[d]`; the result type gives the counts. Steps are
    non-zero and may be negative; every index read is in range.

    ```mlir
    %0 = cleave.slice %x starts = [0, 2] steps = [1, 2] : tensor<4x8xf32> -> tensor<4x3xf32>
    ```
  }];
  let arguments = (ins Cleave_Tensor:$input, DenseI64ArrayAttr:$starts,
                   DenseI64ArrayAttr:$steps);
  let results = (outs Cleave_Tensor:$result);
  let assemblyFormat = [{
    $input `starts` `=` $starts `steps` `=` $steps attr-dict `:` type($input)
    `->` type($result)
  }];
  let hasVerifier = 1;
}

def Cleave_GatherOp : Cleave_Op<"gather", [InferTypeOpAdaptor]> {
  let summary = "Gathers slices along one dimension (embedding lookup)";
  let description = [{
    `result[p..., i..., q...] = data[p..., indices[i...], q...]` where `p`
    spans the dimensions before `axis`. Negative indices count from the end;
    an out-of-range index is a run-time error. Kept as one op: with `data`
    split along `axis` it is the vocab-parallel embedding.

    ```mlir
    %0 = cleave.gather %table, %ids axis = 0 : (tensor<1000x64xf32>, tensor<8x16xi64>) -> tensor<8x16x64xf32>
    ```
  }];
  let arguments = (ins Cleave_Tensor:$data, Cleave_IndexTensor:$indices,
                   I64Attr:$axis);
  let results = (outs Cleave_Tensor:$result);
  let assemblyFormat = [{
    $data `,` $indices `axis` `=` $axis attr-dict `:` functional-type(operands, results)
  }];
}

//===----------------------------------------------------------------------===//
// Convolution and pooling
//===----------------------------------------------------------------------===//

def Cleave_Conv2DOp : Cleave_Op<"conv2d", [InferTypeOpAdaptor]> {
  let summary = "2-D convolution, NCHW";
  let description = [{
    `input [N, C, H, W]`, `filter [F, C/groups, KH, KW]`, optional
    `bias [F]` -> `[N, F, OH, OW]` with `OH = (H + pad_top + pad_bottom -
    dilation_h * (KH - 1) - 1) / stride_h + 1` (likewise OW). `pads` are
    (top, left, bottom, right). 1-D convolutions import with H = 1.

    ```mlir
    %0 = cleave.conv2d %x, %w strides = [1, 1] pads = [1, 1, 1, 1] dilations = [1, 1] groups = 1 : (tensor<2x3x8x8xf32>, tensor<16x3x3x3xf32>) -> tensor<2x16x8x8xf32>
    ```
  }];
  let arguments = (ins Cleave_FloatTensor:$input, Cleave_FloatTensor:$filter,
                   Optional<Cleave_FloatTensor>:$bias,
                   DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                   DenseI64ArrayAttr:$dilations, I64Attr:$groups);
  let results = (outs Cleave_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $filter (`bias` $bias^)? `strides` `=` $strides `pads` `=` $pads
    `dilations` `=` $dilations `groups` `=` $groups attr-dict `:`
    functional-type(operands, results)
  }];
}

class Cleave_Pool2DOp<string mnemonic, string body, dag extraArgs = (ins)>
    : Cleave_Op<mnemonic> {
  let summary = body # " pooling, NCHW";
  let description = [{
    }] # body # [{ pooling over windows of `kernel` with `strides`,
    `dilations` and `pads` (top, left, bottom, right). The result type gives
    the output size, so floor and ceil modes are both expressed; the verifier
    accepts either. Window positions outside the input are ignored by max;
    for average, `count_include_pad` counts those inside the padding.

    ```mlir
    %0 = cleave.}] # mnemonic # [{ %x kernel = [2, 2] strides = [2, 2] pads = [0, 0, 0, 0] dilations = [1, 1] : tensor<2x3x8x8xf32> -> tensor<2x3x4x4xf32>
    ```
  }];
  let arguments = !con((ins Cleave_FloatTensor:$input,
                   DenseI64ArrayAttr:$kernel, DenseI64ArrayAttr:$strides,
                   DenseI64ArrayAttr:$pads, DenseI64ArrayAttr:$dilations),
                   extraArgs);
  let results = (outs Cleave_FloatTensor:$result);
  let assemblyFormat = [{
    $input `kernel` `=` $kernel `strides` `=` $strides `pads` `=` $pads
    `dilations` `=` $dilations attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Cleave_MaxPool2DOp : Cleave_Pool2DOp<"max_pool2d", "Max">;
def Cleave_AvgPool2DOp : Cleave_Pool2DOp<"avg_pool2d", "Average",
    (ins UnitAttr:$count_include_pad)>;

//===----------------------------------------------------------------------===//
// Training: adjoints of data movement, convolution and pooling; randomness
//===----------------------------------------------------------------------===//

def Cleave_ScatterAddOp : Cleave_Op<"scatter_add"> {
  let summary = "Adjoint of gather: accumulates slices into zeros";
  let description = [{
    The result (the shape of the gathered `data`) starts as zeros; every
    slice of `updates` (shaped like the gather's result) is added where
    `gather` with the same `indices` and `axis` read it. Repeated indices
    accumulate. The backward pass of an embedding lookup.

    ```mlir
    %0 = cleave.scatter_add %g, %ids axis = 0 : (tensor<8x16x64xf32>, tensor<8x16xi64>) -> tensor<1000x64xf32>
    ```
  }];
  let arguments = (ins Cleave_FloatTensor:$updates, Cleave_IndexTensor:$indices,
                   I64Attr:$axis);
  let results = (outs Cleave_FloatTensor:$result);
  let assemblyFormat = [{
    $updates `,` $indices `axis` `=` $axis attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Cleave_SliceScatterOp : Cleave_Op<"slice_scatter"> {
  let summary = "Adjoint of slice: places a tensor into zeros";
  let description = [{
    The result is zeros except element `starts[d] + i * steps[d]` along each
    dimension `d`, which is operand element `i`: `slice` of the result with
    the same `starts` and `steps` gives the operand back.

    ```mlir
    %0 = cleave.slice_scatter %g starts = [0, 2] steps = [1, 2] : tensor<4x3xf32> -> tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Cleave_Tensor:$input, DenseI64ArrayAttr:$starts,
                   DenseI64ArrayAttr:$steps);
  let results = (outs Cleave_Tensor:$result);
  let assemblyFormat = [{
    $input `starts` `=` $starts `steps` `=` $steps attr-dict `:` type($input)
    `->` type($result)
  }];
  let hasVerifier = 1;
}

def Cleave_Conv2DBackwardInputOp : Cleave_Op<"conv2d_backward_input"> {
  let summary = "Gradient of conv2d with respect to its input";
  let description = [{
    The adjoint of `conv2d` in its input (a transposed convolution):
    `grad [N, F, OH, OW]` and `filter [F, C/groups, KH, KW]` give the
    gradient of the input, whose shape the result type states (strided
    convolutions lose the input's remainder rows, so it cannot be inferred).

    ```mlir
    %0 = cleave.conv2d_backward_input %g, %w strides = [1, 1] pads = [1, 1, 1, 1] dilations = [1, 1] groups = 1 : (tensor<2x16x8x8xf32>, tensor<16x3x3x3xf32>) -> tensor<2x3x8x8xf32>
    ```
  }];
  let arguments = (ins Cleave_FloatTensor:$grad, Cleave_FloatTensor:$filter,
                   DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                   DenseI64ArrayAttr:$dilations, I64Attr:$groups);
  let results = (outs Cleave_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `,` $filter `strides` `=` $strides `pads` `=` $pads
    `dilations` `=` $dilations `groups` `=` $groups attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Cleave_Conv2DBackwardFilterOp : Cleave_Op<"conv2d_backward_filter"> {
  let summary = "Gradient of conv2d with respect to its filter";
  let description = [{
    The adjoint of `conv2d` in its filter: `input [N, C, H, W]` and
    `grad [N, F, OH, OW]` give the filter's gradient `[F, C/groups, KH, KW]`.

    ```mlir
    %0 = cleave.conv2d_backward_filter %x, %g strides = [1, 1] pads = [1, 1, 1, 1] dilations = [1, 1] groups = 1 : (tensor<2x3x8x8xf32>, tensor<2x16x8x8xf32>) -> tensor<16x3x3x3xf32>
    ```
  }];
  let arguments = (ins Cleave_FloatTensor:$input, Cleave_FloatTensor:$grad,
                   DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                   DenseI64ArrayAttr:$dilations, I64Attr:$groups);
  let results = (outs Cleave_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $grad `strides` `=` $strides `pads` `=` $pads
    `dilations` `=` $dilations `groups` `=` $groups attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Cleave_MaxPool2DBackwardOp : Cleave_Op<"max_pool2d_backward"> {
  let summary = "Gradient of max_pool2d";
  let description = [{
    Routes each window's gradient to the first position (row-major within
    the window) holding the window's maximum of `input`, as PyTorch does.

    ```mlir
    %0 = cleave.max_pool2d_backward %x, %g kernel = [2, 2] strides = [2, 2] pads = [0, 0, 0, 0] dilations = [1, 1] : (tensor<2x3x8x8xf32>, tensor<2x3x4x4xf32>) -> tensor<2x3x8x8xf32>
    ```
  }];
  let arguments = (ins Cleave_FloatTensor:$input, Cleave_FloatTensor:$grad,
                   DenseI64ArrayAttr:$kernel, DenseI64ArrayAttr:$strides,
                   DenseI64ArrayAttr:$pads, DenseI64ArrayAttr:$dilations);
  let results = (outs Cleave_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $grad `kernel` `=` $kernel `strides` `=` $strides `pads` `=`
    $pads `dilations` `=` $dilations attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Cleave_AvgPool2DBackwardOp : Cleave_Op<"avg_pool2d_backward"> {
  let summary = "Gradient of avg_pool2d";
  let description = [{
    Spreads each window's gradient evenly (with `avg_pool2d`'s divisor) over
    the window's positions inside the input, whose shape is the result type.

    ```mlir
    %0 = cleave.avg_pool2d_backward %g kernel = [2, 2] strides = [2, 2] pads = [0, 0, 0, 0] dilations = [1, 1] : tensor<2x3x4x4xf32> -> tensor<2x3x8x8xf32>
    ```
  }];
  let arguments = (ins Cleave_FloatTensor:$grad, DenseI64ArrayAttr:$kernel,
                   DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                   DenseI64ArrayAttr:$dilations, UnitAttr:$count_include_pad);
  let results = (outs Cleave_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `kernel` `=` $kernel `strides` `=` $strides `pads` `=` $pads
    `dilations` `=` $dilations attr-dict `:` type($grad) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Cleave_IotaOp : Cleave_Op<"iota", [Pure]> {
  let summary = "Each element's index along one dimension";
  let description = [{
    `result[i_0, ..., i_n] = i_dim`. The class ids that cross-entropy
    compares its labels with, over a vocabulary of any size: the IR stays
    the same size whatever the tensor's (a constant would hold one element
    per class).

    ```mlir
    %0 = cleave.iota dim = 2 : tensor<1x1x50257xi64>
    ```
  }];
  let arguments = (ins I64Attr:$dim);
  let results = (outs StaticShapeTensorOf<[I32, I64]>:$result);
  let assemblyFormat = "`dim` `=` $dim attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Cleave_CheckIndexOp : Cleave_Op<"check_index", [SameOperandsAndResultType]> {
  let summary = "Stops the step where an index is out of range";
  let description = [{
    The result is the operand; every element must lie in [0, `bound`) or
    equal `ignore`, else the step stops with an error naming the element's
    position and value. Put where indices are read by a comparison rather
    than a lookup (cross-entropy's labels against the class ids), which
    would otherwise turn a label outside the classes into a loss that
    belongs to no class. Not pure: it is never folded away.

    ```mlir
    %0 = cleave.check_index %labels bound = 8 ignore = -100 : tensor<4x16xi64>
    ```
  }];
  let arguments = (ins StaticShapeTensorOf<[I32, I64]>:$input, I64Attr:$bound,
                   OptionalAttr<I64Attr>:$ignore);
  let results = (outs StaticShapeTensorOf<[I32, I64]>:$result);
  let assemblyFormat = [{
    $input `bound` `=` $bound (`ignore` `=` $ignore^)? attr-dict `:` type($result)
  }];
  let hasVerifier = 1;
}

def Cleave_RandomUniformOp : Cleave_Op<"random_uniform"> {
  let summary = "Counter-based uniform random numbers in [0, 1)";
  let description = [{
    Philox-4x32-10 numbers that are a pure function of `seed`, `stream` (one
    per random site of the model), the training `step` (an i64 scalar) and
    the element's row-major index. A run is reproducible, every step draws
    fresh numbers, and a shard of the tensor can draw exactly its slice.
    Dropout masks are drawn with it.

    ```mlir
    %0 = cleave.random_uniform %step seed = 42 stream = 0 : tensor<i64> -> tensor<8x16xf32>
    ```
  }];
  let arguments = (ins StaticShapeTensorOf<[I64]>:$step, I64Attr:$seed,
                   I64Attr:$stream);
  let results = (outs StaticShapeTensorOf<[F32]>:$result);
  let assemblyFormat = [{
    $step `seed` `=` $seed `stream` `=` $stream attr-dict `:` type($step) `->`
    type($result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Tensor parallelism: collectives and this rank's slice
//===----------------------------------------------------------------------===//

// Every op below works within the group of ranks that differ only in the
// mesh axes `axes` (the module's `cleave.mesh` gives the mesh shape); the
// group's rank order is row-major over those axes.

def Cleave_AllReduceOp : Cleave_Op<"all_reduce", [SameOperandsAndResultType]> {
  let summary = "Sum (or max, min) over the group, every rank getting it";
  let description = [{
    Turns a partial value (each rank holds an addend) into the replicated
    total.

    ```mlir
    %0 = cleave.all_reduce sum %x axes = [0] : tensor<8x16xf32>
    ```
  }];
  let arguments = (ins Cleave_ReduceKindAttr:$kind, Cleave_NumericTensor:$input,
                   DenseI64ArrayAttr:$axes);
  let results = (outs Cleave_NumericTensor:$result);
  let assemblyFormat = "$kind $input `axes` `=` $axes attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Cleave_AllGatherOp : Cleave_Op<"all_gather"> {
  let summary = "Concatenates the group's slices along one dimension";
  let description = [{
    Group member `k`'s operand lands at offset `k * operand.shape[dim]`
    along `dim` of the result, whose `dim` is the group size times larger.

    ```mlir
    %0 = cleave.all_gather %x axes = [0] dim = 1 : tensor<8x4xf32> -> tensor<8x16xf32>
    ```
  }];
  let arguments = (ins Cleave_Tensor:$input, DenseI64ArrayAttr:$axes,
                   I64Attr:$dim, DefaultValuedAttr<I64Attr, "1">:$blocks);
  let results = (outs Cleave_Tensor:$result);
  let assemblyFormat = [{
    $input `axes` `=` $axes `dim` `=` $dim attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Cleave_ReduceScatterOp : Cleave_Op<"reduce_scatter"> {
  let summary = "Sums over the group and keeps this rank's slice";
  let description = [{
    The group sum of the operand, of which group member `k` keeps chunk `k`
    along `dim`: a partial value becomes a split one.

    ```mlir
    %0 = cleave.reduce_scatter %x axes = [0] dim = 0 : tensor<16x8xf32> -> tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Cleave_NumericTensor:$input, DenseI64ArrayAttr:$axes,
                   I64Attr:$dim);
  let results = (outs Cleave_NumericTensor:$result);
  let assemblyFormat = [{
    $input `axes` `=` $axes `dim` `=` $dim attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Cleave_AllToAllOp : Cleave_Op<"all_to_all"> {
  let summary = "Moves a split from one dimension to another";
  let description = [{
    The operand's `split_dim` is cut into one chunk per group member, chunk
    `j` going to member `j`; the chunks received are concatenated along
    `concat_dim` in group order. A value split along `concat_dim` becomes
    split along `split_dim`, each rank sending 1/G of what an all_gather
    and a slice would move: expert parallelism's dispatch and combine (the
    tokens' split becomes the experts', and back).

    ```mlir
    %0 = cleave.all_to_all %x axes = [0] split_dim = 0 concat_dim = 1 : tensor<8x2x16xf32> -> tensor<2x8x16xf32>
    ```
  }];
  let arguments = (ins Cleave_Tensor:$input, DenseI64ArrayAttr:$axes,
                   I64Attr:$split_dim, I64Attr:$concat_dim);
  let results = (outs Cleave_Tensor:$result);
  let assemblyFormat = [{
    $input `axes` `=` $axes `split_dim` `=` $split_dim `concat_dim` `=`
    $concat_dim attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Cleave_ShardSliceOp : Cleave_Op<"shard_slice"> {
  let summary = "This rank's chunk of a replicated value";
  let description = [{
    Group member `k` keeps chunk `k` along `dim`: a replicated value becomes
    a split one without communication.

    ```mlir
    %0 = cleave.shard_slice %x axes = [0] dim = 1 : tensor<8x16xf32> -> tensor<8x4xf32>
    ```

    With `blocks = B` the dimension is B equal blocks (a fused projection's
    q, k and v) and each rank keeps its chunk of every block; `all_gather`
    takes the same attribute and undoes it.
  }];
  let arguments = (ins Cleave_Tensor:$input, DenseI64ArrayAttr:$axes,
                   I64Attr:$dim, DefaultValuedAttr<I64Attr, "1">:$blocks);
  let results = (outs Cleave_Tensor:$result);
  let assemblyFormat = [{
    $input `axes` `=` $axes `dim` `=` $dim attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

#endif // CLEAVE_OPS_TD

//===- Passes.td - Training-step passes --------------------*- tablegen -*-===//
//
// From a forward model to one train-step function: append the loss,
// differentiate, apply the optimizer.
//
//===----------------------------------------------------------------------===//

#ifndef CLEAVE_AUTODIFF_PASSES_TD
#define CLEAVE_AUTODIFF_PASSES_TD

include "mlir/Pass/PassBase.td"

def FuseAttentionPass : Pass<"cleave-fuse-attention", "func::FuncOp"> {
  let summary = "Forms cleave.attention from the exporter's attention ops";
  let description = [{
    Finds `softmax(scale * Q K^T + biases, masks) V` however the exporter
    spelled it and replaces it with one `cleave.attention`, whose kernels
    never store the scores and whose gradient is one
    `cleave.attention_backward`. From the softmax back: adds of biases
    (padding masks, ALiBi, relative positions: summed into the op's one
    bias), multiplications or divisions by a positive scalar constant
    (PyTorch's `/ sqrt(d)`, folded into `scale`, and into the biases they
    scale), selects or adds of a constant lower-triangular mask whose
    masked value is -inf or at most -1e4 (the causal mask however the
    family fills it: `causal`), then the matmul of Q and K^T (transposes
    of K composed away); K and V may have one head for all query heads
    (multi-query attention through the matmul's broadcast). Every value in
    between must have the one use, so nothing the model reads elsewhere
    (returned probabilities, a dropout) is lost; anything else is left as
    it is. A mask value of -1e4 rather than -inf differs by less than
    f32's resolution unless scores reach 1e4.

    Before:
    ```mlir
    %s = cleave.matmul %q, %k {transpose_rhs} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x8xf32>
    %c = cleave.constant dense<2.5e-01> : tensor<1x1x1x1xf32>
    %t = cleave.mul %s, %c : (tensor<2x4x8x8xf32>, tensor<1x1x1x1xf32>) -> tensor<2x4x8x8xf32>
    %u = cleave.add %t, %mask : (tensor<2x4x8x8xf32>, tensor<2x1x1x8xf32>) -> tensor<2x4x8x8xf32>
    %p = cleave.softmax %u axis = 3 : tensor<2x4x8x8xf32>
    %o = cleave.matmul %p, %v : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
    ```
    After:
    ```mlir
    %o, %lse = cleave.attention %q, %k, %v bias %mask scale = 2.500000e-01 : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x1x1x8xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8xf32>)
    ```
  }];
  let statistics = [
    Statistic<"numFused", "fused-attention", "Attention blocks fused">,
  ];
}

def FuseCrossEntropyPass : Pass<"cleave-fuse-cross-entropy", "func::FuncOp"> {
  let summary = "Forms cleave.cross_entropy from the loss's reductions";
  let description = [{
    Cross-entropy as the importer and `--cleave-append-loss` write it (the
    max of the logits over the classes, marked no_grad; the shifted logits;
    the sum of their exponentials; the sum of the shifted logits where the
    label is the class) becomes one `cleave.cross_entropy`, whose kernel
    reads each row of logits once and keeps nothing of their size, and
    whose gradient is one `cleave.cross_entropy_backward`. Both of its
    results are sums over the classes, so the vocab-parallel plan is kept.
    Runs after the loss is appended and before differentiation; other
    spellings are left as they are.

    Before:
    ```mlir
    %m = cleave.reduce max %x dims = [1] {cleave.no_grad, keep_dims} : (tensor<4x8xf32>) -> tensor<4x1xf32>
    %s = cleave.sub %x, %m : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
    %e = cleave.exp %s : tensor<4x8xf32>
    %se = cleave.reduce sum %e dims = [1] {keep_dims} : (tensor<4x8xf32>) -> tensor<4x1xf32>
    %hit = cleave.cmp eq, %labels, %ids : (tensor<4x1xi64>, tensor<1x8xi64>) -> tensor<4x8xi1>
    %p = cleave.select %hit, %s, %zero : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<1x1xf32>) -> tensor<4x8xf32>
    %t = cleave.reduce sum %p dims = [1] {keep_dims} : (tensor<4x8xf32>) -> tensor<4x1xf32>
    ```
    After:
    ```mlir
    %m = cleave.reduce max %x dims = [1] {cleave.no_grad, keep_dims} : (tensor<4x8xf32>) -> tensor<4x1xf32>
    %se, %t = cleave.cross_entropy %x, %labels, %ids, %m axis = 1 : (tensor<4x8xf32>, tensor<4x1xi64>, tensor<1x8xi64>, tensor<4x1xf32>) -> (tensor<4x1xf32>, tensor<4x1xf32>)
    ```
  }];
  let statistics = [
    Statistic<"numFused", "fused-cross-entropy", "Cross-entropy losses fused">,
  ];
}

def AppendLossPass : Pass<"cleave-append-loss", "func::FuncOp"> {
  let summary = "Makes the model's first output a scalar training loss";
  let description = [{
    With `loss=auto` the function's first result must already be a scalar
    (a model that computes its own loss); it is marked `cleave.loss`. With
    `loss=cross_entropy` the first result is taken as logits with the class
    dimension last; an int64 argument `labels` (the logits' shape without
    the class dimension) is added and the mean softmax cross-entropy, with
    PyTorch's `ignore_index` -100, becomes the first result. With `loss=mse`
    a float `labels` argument of the output's shape is added and the mean
    squared error becomes the first result. The model's other results stay.

    Before (`loss=mse`):
    ```mlir
    func.func @main(%x: tensor<4x3xf32> {cleave.input = "x"}) -> (tensor<4x3xf32> {cleave.output = "y"}) {
      %0 = cleave.tanh %x : tensor<4x3xf32>
      return %0 : tensor<4x3xf32>
    }
    ```
    After:
    ```mlir
    func.func @main(%x: tensor<4x3xf32> {cleave.input = "x"}, %labels: tensor<4x3xf32> {cleave.input = "labels"}) -> (tensor<f32> {cleave.loss}, tensor<4x3xf32> {cleave.output = "y"}) {
      %0 = cleave.tanh %x : tensor<4x3xf32>
      %1 = cleave.sub %0, %labels : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
      %2 = cleave.mul %1, %1 : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
      %3 = cleave.reduce mean %2 dims = [0, 1] : (tensor<4x3xf32>) -> tensor<f32>
      return %3, %0 : tensor<f32>, tensor<4x3xf32>
    }
    ```
  }];
  let options = [
    Option<"loss", "loss", "std::string", /*default=*/"\"auto\"",
           "auto | cross_entropy | mse">,
  ];
}

def AutodiffPass : Pass<"cleave-autodiff", "func::FuncOp"> {
  let summary = "Reverse-mode differentiation of the loss by every parameter";
  let description = [{
    Turns a function whose first result is the loss (`cleave.loss`) into one
    that also returns the gradient of the loss with respect to every
    `cleave.parameter` argument (`cleave.gradient = "name"` results, in
    argument order), followed by the updated buffers (`cleave.buffer`
    results). The model's other outputs are dropped: training needs only the
    loss.

    Activity analysis first keeps only ops that both depend on a parameter
    and feed the loss; then each such op, in reverse order, builds its
    vector-Jacobian product through DifferentiableOpInterface, and
    gradients reaching one value from several uses are summed. The backward
    ops read the forward values directly, so nothing is recomputed, and no
    gradient nobody needs is formed (an input's, a constant's, an integer's).
    An op marked `cleave.no_grad` stops gradients. A needed gradient through
    an op without a rule is an error naming the op.

    `micro-batches=N` (gradient accumulation) repeats the differentiated
    body, forward then backward, once per micro-batch, so that one
    micro-batch's activations live at a time: each graph input gains N-1
    copies (`cleave.micro_batch = 1..N-1`), the gradients are summed in
    order, buffers pass from one micro-batch to the next, and the random
    masks of micro-batch j draw on step `(step - 1) N + j + 1`. The loss is
    the whole update's: a loss divided by a count no weight changes
    (cross-entropy's valid tokens) divides each micro-batch's sum by the
    update's count (token-count-correct); another is the micro-batches'
    mean, each backward seeded with 1/N.

    Before:
    ```mlir
    func.func @main(%x: tensor<4xf32> {cleave.input = "x"}, %w: tensor<4xf32> {cleave.parameter = "w"}) -> (tensor<f32> {cleave.loss}) {
      %0 = cleave.mul %x, %w : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
      %1 = cleave.reduce sum %0 dims = [0] : (tensor<4xf32>) -> tensor<f32>
      return %1 : tensor<f32>
    }
    ```
    After:
    ```mlir
    func.func @main(%x: tensor<4xf32> {cleave.input = "x"}, %w: tensor<4xf32> {cleave.parameter = "w"}) -> (tensor<f32> {cleave.loss}, tensor<4xf32> {cleave.gradient = "w"}) {
      %0 = cleave.mul %x, %w : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
      %1 = cleave.reduce sum %0 dims = [0] : (tensor<4xf32>) -> tensor<f32>
      %cst = cleave.constant dense<1.0> : tensor<f32>
      %2 = cleave.reshape %cst : tensor<f32> -> tensor<1xf32>
      %3 = cleave.broadcast %2 : tensor<1xf32> -> tensor<4xf32>
      %4 = cleave.mul %3, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
      return %1, %4 : tensor<f32>, tensor<4xf32>
    }
    ```
  }];
  let options = [
    Option<"lossScale", "loss-scale", "bool", /*default=*/"false",
           "Seed the backward with the dynamic loss scale 2^(16 + s) (s: "
           "the step's cleave.optimizer_state [\"\", \"loss_scale\"], "
           "starting at 0) instead of 1, as GradScaler scales the loss; "
           "cleave-optimizer's loss-scale unscales and steps it">,
    Option<"microBatches", "micro-batches", "int64_t", /*default=*/"1",
           "Micro-batches whose gradients one update sums (gradient "
           "accumulation)">,
  ];
}

def OptimizerPass : Pass<"cleave-optimizer", "func::FuncOp"> {
  let summary = "Appends the optimizer update: the function becomes a train step";
  let description = [{
    Consumes the gradients returned by `--cleave-autodiff` and returns the
    updated parameters (`cleave.parameter` results) and optimizer state
    (`cleave.optimizer_state` arguments and results, `["param", "slot"]`)
    instead; the gradients stay as results for inspection. The step number
    (1-based, i64 `cleave.step` argument) is added if the model has none.

    `sgd` is PyTorch's SGD: `d = g + wd p; buf = momentum buf + d;
    p -= lr buf` (the buffer starts at zero, so the first step uses `d`).
    `adamw` is PyTorch's AdamW with bias correction:
    `p *= 1 - lr wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
    p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)`.

    `lr-input` reads the learning rate from an f32 scalar argument
    (`cleave.hyperparameter = "lr"`) that the runtime feeds each step from
    the run's schedule, so a new rate never recompiles. `clip-grad-value`
    clamps each gradient element to [-v, v] (clip_grad_value_), then
    `max-grad-norm` scales every gradient by `min(1, max / (norm + 1e-6))`,
    norm the L2 norm over all trained parameters' gradients
    (clip_grad_norm_); the norm before clipping is returned as
    `cleave.metric = "grad_norm"`. `guard-nonfinite` keeps every parameter
    and state as it was on a step whose loss or a gradient is inf or NaN
    (the runtime then stops or skips, as the user chose). Clipping comes
    after loss scaling's unscale,
    as GradScaler.unscale_ comes before clipping. The step being global,
    the partitioner makes each split gradient's share of the sum a partial
    sum reduced once, and counts a replicated gradient once.

    Before (`optimizer=sgd lr=0.1 momentum=0`):
    ```mlir
    func.func @main(%w: tensor<4xf32> {cleave.parameter = "w"}) -> (tensor<f32> {cleave.loss}, tensor<4xf32> {cleave.gradient = "w"}) {
      %0 = cleave.reduce sum %w dims = [0] : (tensor<4xf32>) -> tensor<f32>
      %1 = cleave.constant dense<1.0> : tensor<4xf32>
      return %0, %1 : tensor<f32>, tensor<4xf32>
    }
    ```
    After:
    ```mlir
    func.func @main(%w: tensor<4xf32> {cleave.parameter = "w"}, %step: tensor<i64> {cleave.step}) -> (tensor<f32> {cleave.loss}, tensor<4xf32> {cleave.parameter = "w"}, tensor<4xf32> {cleave.gradient = "w"}) {
      %0 = cleave.reduce sum %w dims = [0] : (tensor<4xf32>) -> tensor<f32>
      %1 = cleave.constant dense<1.0> : tensor<4xf32>
      %lr = cleave.constant dense<0.1> : tensor<1xf32>
      %2 = cleave.mul %1, %lr : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xf32>
      %3 = cleave.sub %w, %2 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
      return %0, %3, %1 : tensor<f32>, tensor<4xf32>, tensor<4xf32>
    }
    ```
  }];
  let options = [
    Option<"optimizer", "optimizer", "std::string", /*default=*/"\"sgd\"",
           "sgd | adamw">,
    Option<"lr", "lr", "double", /*default=*/"0.01", "Learning rate">,
    Option<"momentum", "momentum", "double", /*default=*/"0.0",
           "SGD momentum">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"0.0",
           "Weight decay (SGD: L2 added to the gradient; AdamW: decoupled)">,
    Option<"beta1", "beta1", "double", /*default=*/"0.9", "AdamW beta1">,
    Option<"beta2", "beta2", "double", /*default=*/"0.999", "AdamW beta2">,
    Option<"eps", "eps", "double", /*default=*/"1e-8", "AdamW epsilon">,
    Option<"lossScale", "loss-scale", "bool", /*default=*/"false",
           "Dynamic loss scaling (torch.cuda.amp.GradScaler's, after "
           "cleave-autodiff's loss-scale): the gradients are unscaled; a "
           "step with an inf or NaN among them changes no parameter or "
           "state (AdamW's step count included) and halves the scale; 2000 "
           "finite steps in a row double it">,
    Option<"lrInput", "lr-input", "bool", /*default=*/"false",
           "Read the learning rate from a cleave.hyperparameter = \"lr\" "
           "argument (fed by the runtime's schedule) instead of `lr`">,
    Option<"maxGradNorm", "max-grad-norm", "double", /*default=*/"0.0",
           "Clip the gradients' global L2 norm to this (0: no clipping); "
           "the norm is returned as cleave.metric = \"grad_norm\"">,
    Option<"clipGradValue", "clip-grad-value", "double", /*default=*/"0.0",
           "Clamp each gradient element to [-v, v] (0: no clamping)">,
    Option<"guardNonfinite", "guard-nonfinite", "bool", /*default=*/"false",
           "A step whose loss or a gradient is inf or NaN changes no "
           "parameter or state (AdamW's step count included: the step is "
           "counted in [\"\", \"skipped_steps\"]) and returns "
           "cleave.metric = \"nonfinite\" 1 (0 otherwise); loss scaling "
           "has its own">,
  ];
}

def MixedPrecisionPass : Pass<"cleave-mixed-precision", "func::FuncOp"> {
  let summary = "Runs a train step's matmuls and convolutions in bf16 or fp16";
  let description = [{
    The standard mixed-precision recipe on the whole step (forward,
    backward and update, after `--cleave-optimizer`): every `matmul`,
    `conv2d` and convolution adjoint with f32 operands reads bf16 (or f16)
    copies of them, accumulates in f32 and rounds its result once to bf16,
    which is widened back for the f32 ops that read it. So the weights stay
    f32 masters (the update, the optimizer state and every reduction -
    norm statistics, softmax, the loss, gradient sums - run in f32), each
    weight is rounded once per step and its copy shared by forward and
    backward, the activations saved for a matmul's backward are its bf16
    operands, and a partial sum leaving a split contraction is reduced in
    bf16 (half the bytes on the wire). A widened value rounded again is the
    bf16 value itself (the cast folds), so a chain of products rounds once
    per product, as PyTorch's autocast does. Under bf16, `attention` and
    `attention_backward` read bf16 copies of query, key, value and the
    output's gradient (their products, like autocast's bmm, on bf16
    operands) and keep f32 results. The function is marked
    `cleave.precision`.

    Before (`precision=bf16`):
    ```mlir
    func.func @main(%x: tensor<4x8xf32> {cleave.input = "x"}, %w: tensor<8x2xf32> {cleave.parameter = "w"}) -> tensor<4x2xf32> {
      %0 = cleave.matmul %x, %w : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
      return %0 : tensor<4x2xf32>
    }
    ```
    After:
    ```mlir
    func.func @main(%x: tensor<4x8xf32> {cleave.input = "x"}, %w: tensor<8x2xf32> {cleave.parameter = "w"}) -> tensor<4x2xf32> attributes {cleave.precision = "bf16"} {
      %0 = cleave.cast %w : tensor<8x2xf32> -> tensor<8x2xbf16>
      %1 = cleave.cast %x : tensor<4x8xf32> -> tensor<4x8xbf16>
      %2 = cleave.matmul %1, %0 : (tensor<4x8xbf16>, tensor<8x2xbf16>) -> tensor<4x2xbf16>
      %3 = cleave.cast %2 : tensor<4x2xbf16> -> tensor<4x2xf32>
      return %3 : tensor<4x2xf32>
    }
    ```
  }];
  let options = [
    Option<"precision", "precision", "std::string", /*default=*/"\"bf16\"",
           "bf16 | fp16">,
  ];
}

#endif // CLEAVE_AUTODIFF_PASSES_TD

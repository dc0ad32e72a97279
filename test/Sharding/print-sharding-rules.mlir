// The factor rule of every op with one (cleave-print-sharding-rules): one
// letter per factor; per operand and result the factor of each dimension,
// `_` for none; which factors are reductions (a split one leaves a partial
// sum or max) or must stay whole; how partial sums pass through.
// RUN: cleave-opt %s --split-input-file --cleave-print-sharding-rules | FileCheck %s

// CHECK-LABEL: func.func @elementwise
// CHECK: cleave.add{{.*}}cleave.sharding_rule = "({{\[}}i, j], {{\[}}_, j]) -> ({{\[}}i, j]) linear=additive"
// CHECK: cleave.sub{{.*}}cleave.sharding_rule = "({{\[}}i, j], {{\[}}_, j]) -> ({{\[}}i, j]) linear=additive"
// CHECK: cleave.mul{{.*}}cleave.sharding_rule = "({{\[}}i, j], {{\[}}i, j]) -> ({{\[}}i, j]) linear=scaling(0,1)"
// CHECK: cleave.div{{.*}}cleave.sharding_rule = "({{\[}}i, j], {{\[}}_, j]) -> ({{\[}}i, j]) linear=scaling(0)"
// CHECK: cleave.pow{{.*}}cleave.sharding_rule = "({{\[}}i, j], {{\[}}_, j]) -> ({{\[}}i, j])"
// CHECK: cleave.max{{.*}}cleave.sharding_rule = "({{\[}}i, j], {{\[}}i, j]) -> ({{\[}}i, j])"
// CHECK: cleave.min{{.*}}cleave.sharding_rule = "({{\[}}i, j], {{\[}}i, j]) -> ({{\[}}i, j])"
// CHECK: cleave.add{{.*}}cleave.sharding_rule = "({{\[}}i, j], {{\[}}i, j]) -> ({{\[}}i, j]) linear=additive"
// CHECK: cleave.cmp{{.*}}cleave.sharding_rule = "({{\[}}i, j], {{\[}}_, j]) -> ({{\[}}i, j])"
// CHECK: cleave.and{{.*}}cleave.sharding_rule = "({{\[}}i, j], {{\[}}i, j]) -> ({{\[}}i, j])"
// CHECK: cleave.or{{.*}}cleave.sharding_rule = "({{\[}}i, j], {{\[}}i, j]) -> ({{\[}}i, j])"
// CHECK: cleave.xor{{.*}}cleave.sharding_rule = "({{\[}}i, j], {{\[}}i, j]) -> ({{\[}}i, j])"
// CHECK: cleave.not{{.*}}cleave.sharding_rule = "({{\[}}i, j]) -> ({{\[}}i, j])"
// CHECK: cleave.select{{.*}}cleave.sharding_rule = "({{\[}}i, j], {{\[}}i, j], {{\[}}_, j]) -> ({{\[}}i, j])"
func.func @elementwise(%a: tensor<4x8xf32>, %b: tensor<1x8xf32>, %i: tensor<4x1xi64>, %c: tensor<4x8xi1>) -> tensor<4x8xf32> {
  %0 = cleave.add %a, %b : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
  %1 = cleave.sub %0, %b : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
  %2 = cleave.mul %1, %a : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = cleave.div %2, %b : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
  %4 = cleave.pow %3, %b : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
  %5 = cleave.max %4, %a : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %6 = cleave.min %5, %a : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %7 = cleave.add %i, %i : (tensor<4x1xi64>, tensor<4x1xi64>) -> tensor<4x1xi64>
  %8 = cleave.cmp lt, %6, %b : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xi1>
  %9 = cleave.and %8, %c : (tensor<4x8xi1>, tensor<4x8xi1>) -> tensor<4x8xi1>
  %10 = cleave.or %9, %c : (tensor<4x8xi1>, tensor<4x8xi1>) -> tensor<4x8xi1>
  %11 = cleave.xor %10, %c : (tensor<4x8xi1>, tensor<4x8xi1>) -> tensor<4x8xi1>
  %12 = cleave.not %11 : tensor<4x8xi1>
  %13 = cleave.select %12, %6, %b : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
  return %13 : tensor<4x8xf32>
}

// -----

// CHECK-LABEL: func.func @unary
// CHECK: cleave.neg{{.*}}cleave.sharding_rule = "({{\[}}i, j]) -> ({{\[}}i, j]) linear=scaling(0)"
// CHECK: cleave.abs{{.*}}cleave.sharding_rule = "({{\[}}i, j]) -> ({{\[}}i, j])"
// CHECK: cleave.exp{{.*}}cleave.sharding_rule = "({{\[}}i, j]) -> ({{\[}}i, j])"
// CHECK: cleave.log{{.*}}cleave.sharding_rule = "({{\[}}i, j]) -> ({{\[}}i, j])"
// CHECK: cleave.sqrt{{.*}}cleave.sharding_rule = "({{\[}}i, j]) -> ({{\[}}i, j])"
// CHECK: cleave.rsqrt{{.*}}cleave.sharding_rule = "({{\[}}i, j]) -> ({{\[}}i, j])"
// CHECK: cleave.reciprocal{{.*}}cleave.sharding_rule = "({{\[}}i, j]) -> ({{\[}}i, j])"
// CHECK: cleave.tanh{{.*}}cleave.sharding_rule = "({{\[}}i, j]) -> ({{\[}}i, j])"
// CHECK: cleave.sigmoid{{.*}}cleave.sharding_rule = "({{\[}}i, j]) -> ({{\[}}i, j])"
// CHECK: cleave.relu{{.*}}cleave.sharding_rule = "({{\[}}i, j]) -> ({{\[}}i, j])"
// CHECK: cleave.erf{{.*}}cleave.sharding_rule = "({{\[}}i, j]) -> ({{\[}}i, j])"
// CHECK: cleave.sin{{.*}}cleave.sharding_rule = "({{\[}}i, j]) -> ({{\[}}i, j])"
// CHECK: cleave.cos{{.*}}cleave.sharding_rule = "({{\[}}i, j]) -> ({{\[}}i, j])"
// CHECK: cleave.gelu{{.*}}cleave.sharding_rule = "({{\[}}i, j]) -> ({{\[}}i, j])"
// CHECK: cleave.gelu{{.*}}cleave.sharding_rule = "({{\[}}i, j]) -> ({{\[}}i, j])"
// CHECK: cleave.leaky_relu{{.*}}cleave.sharding_rule = "({{\[}}i, j]) -> ({{\[}}i, j])"
func.func @unary(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = cleave.neg %x : tensor<2x3xf32>
  %1 = cleave.abs %0 : tensor<2x3xf32>
  %2 = cleave.exp %1 : tensor<2x3xf32>
  %3 = cleave.log %2 : tensor<2x3xf32>
  %4 = cleave.sqrt %3 : tensor<2x3xf32>
  %5 = cleave.rsqrt %4 : tensor<2x3xf32>
  %6 = cleave.reciprocal %5 : tensor<2x3xf32>
  %7 = cleave.tanh %6 : tensor<2x3xf32>
  %8 = cleave.sigmoid %7 : tensor<2x3xf32>
  %9 = cleave.relu %8 : tensor<2x3xf32>
  %10 = cleave.erf %9 : tensor<2x3xf32>
  %11 = cleave.sin %10 : tensor<2x3xf32>
  %12 = cleave.cos %11 : tensor<2x3xf32>
  %13 = cleave.gelu %12 {approximate} : tensor<2x3xf32>
  %14 = cleave.gelu %13 : tensor<2x3xf32>
  %15 = cleave.leaky_relu %14 {alpha = 0.1 : f32} : tensor<2x3xf32>
  return %15 : tensor<2x3xf32>
}

// -----

// CHECK-LABEL: func.func @casts_and_constants
// CHECK: cleave.cast{{.*}}cleave.sharding_rule = "({{\[}}i]) -> ({{\[}}i])"
func.func @casts_and_constants(%x: tensor<3xi64>) -> (tensor<3xf32>, tensor<2xf32>) {
  %0 = cleave.cast %x : tensor<3xi64> -> tensor<3xf32>
  %1 = cleave.constant dense<[1.0, 2.0]> : tensor<2xf32>
  return %0, %1 : tensor<3xf32>, tensor<2xf32>
}

// -----

// CHECK-LABEL: func.func @contractions
// CHECK: cleave.matmul{{.*}}cleave.sharding_rule = "({{\[}}i, j, l], {{\[}}_, k, l]) -> ({{\[}}i, j, k]) sum={l} linear=scaling(0,1)"
// CHECK: cleave.reduce{{.*}}cleave.sharding_rule = "({{\[}}i, j, k]) -> ({{\[}}i, _, k]) sum={j} linear=scaling(0)"
// CHECK: cleave.softmax{{.*}}cleave.sharding_rule = "({{\[}}i, j, k]) -> ({{\[}}i, j, k]) whole={k}"
// CHECK: cleave.log_softmax{{.*}}cleave.sharding_rule = "({{\[}}i, j, k]) -> ({{\[}}i, j, k]) whole={j}"
// CHECK: cleave.layer_norm{{.*}}cleave.sharding_rule = "({{\[}}i, j, k], {{\[}}k], {{\[}}k]) -> ({{\[}}i, j, k], {{\[}}i, j, _], {{\[}}i, j, _]) whole={k}"
func.func @contractions(%x: tensor<8x16x64xf32>, %w: tensor<1x256x64xf32>, %g: tensor<64xf32>, %b: tensor<64xf32>) -> (tensor<8x16x256xf32>, tensor<8x1x64xf32>, tensor<8x16x64xf32>, tensor<8x16x64xf32>, tensor<8x16x64xf32>) {
  %0 = cleave.matmul %x, %w {transpose_rhs} : (tensor<8x16x64xf32>, tensor<1x256x64xf32>) -> tensor<8x16x256xf32>
  %1 = cleave.reduce sum %x dims = [1] {keep_dims} : (tensor<8x16x64xf32>) -> tensor<8x1x64xf32>
  %2 = cleave.softmax %x axis = 2 : tensor<8x16x64xf32>
  %3 = cleave.log_softmax %x axis = 1 : tensor<8x16x64xf32>
  %4:3 = cleave.layer_norm %x scale %g bias %b axis = 2 eps = 1.0e-05 : (tensor<8x16x64xf32>, tensor<64xf32>, tensor<64xf32>) -> (tensor<8x16x64xf32>, tensor<8x16x1xf32>, tensor<8x16x1xf32>)
  return %0, %1, %2, %3, %4#0 : tensor<8x16x256xf32>, tensor<8x1x64xf32>, tensor<8x16x64xf32>, tensor<8x16x64xf32>, tensor<8x16x64xf32>
}

// -----

// CHECK-LABEL: func.func @layer_norm_without_affine
// CHECK: cleave.layer_norm{{.*}}cleave.sharding_rule = "({{\[}}i, j]) -> ({{\[}}i, j], {{\[}}i, _], {{\[}}i, _]) whole={j}"
func.func @layer_norm_without_affine(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0:3 = cleave.layer_norm %x axis = 1 eps = 1.0e-05 : (tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>, tensor<4x1xf32>)
  return %0#0 : tensor<4x8xf32>
}

// -----

// The rows of a layer_norm's backward are a sum for its scale's and
// bias's gradients (partial where they are split); grad may be partial.
// CHECK-LABEL: func.func @layer_norm_backward
// CHECK: cleave.layer_norm_backward{{.*}}cleave.sharding_rule = "({{\[}}i, j], {{\[}}i, _], {{\[}}i, _], {{\[}}i, j], {{\[}}j]) -> ({{\[}}i, j], {{\[}}j], {{\[}}j]) sum={i} whole={j} linear=scaling(3)"
func.func @layer_norm_backward(%x: tensor<4x8xbf16>, %m: tensor<4x1xf32>, %r: tensor<4x1xf32>, %g: tensor<4x8xf32>, %s: tensor<8xf32>) -> tensor<8xf32> {
  %0:3 = cleave.layer_norm_backward %x, %m, %r, %g scale %s axis = 1 : (tensor<4x8xbf16>, tensor<4x1xf32>, tensor<4x1xf32>, tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  return %0#1 : tensor<8xf32>
}

// -----

// CHECK-LABEL: func.func @batch_norm
// CHECK: cleave.batch_norm{{.*}}cleave.sharding_rule = "({{\[}}i, j, k, l], {{\[}}j], {{\[}}j], {{\[}}j], {{\[}}j]) -> ({{\[}}i, j, k, l])"
func.func @batch_norm(%x: tensor<2x3x4x4xf32>, %s: tensor<3xf32>) -> tensor<2x3x4x4xf32> {
  %0 = cleave.batch_norm %x, %s, %s, %s, %s eps = 1.0e-05 : (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<2x3x4x4xf32>
  return %0 : tensor<2x3x4x4xf32>
}

// -----

// CHECK-LABEL: func.func @data_movement
// CHECK: cleave.transpose{{.*}}cleave.sharding_rule = "({{\[}}i, j, k, l]) -> ({{\[}}i, k, j, l]) linear=scaling(0)"
// CHECK: cleave.slice{{.*}}cleave.sharding_rule = "({{\[}}i, j, k]) -> ({{\[}}i, j, k]) whole={i} linear=scaling(0)"
// CHECK: cleave.gather{{.*}}cleave.sharding_rule = "({{\[}}i, l], {{\[}}j, k]) -> ({{\[}}j, k, l]) sum={i}"
// CHECK: cleave.concat{{.*}}cleave.sharding_rule = "({{\[}}i, j, k], {{\[}}i, j, k]) -> ({{\[}}i, j, k]) whole={j} linear=additive"
// CHECK: cleave.slice{{.*}}cleave.sharding_rule = "({{\[}}i, j, k]) -> ({{\[}}i, j, k]) whole={j} linear=scaling(0)"
// CHECK: cleave.broadcast{{.*}}cleave.sharding_rule = "({{\[}}i, _, k]) -> ({{\[}}i, j, k]) linear=scaling(0)"
func.func @data_movement(%x: tensor<8x16x256xf32>, %t: tensor<100x64xf32>, %ids: tensor<8x16xi64>) -> (tensor<8x4x16x64xf32>, tensor<4x16x256xf32>, tensor<8x16x64xf32>, tensor<8x32x256xf32>, tensor<8x16x256xf32>) {
  %0 = cleave.reshape %x : tensor<8x16x256xf32> -> tensor<8x16x4x64xf32>
  %1 = cleave.transpose %0 perm = [0, 2, 1, 3] : (tensor<8x16x4x64xf32>) -> tensor<8x4x16x64xf32>
  %2 = cleave.slice %x starts = [7, 0, 0] steps = [-2, 1, 1] : tensor<8x16x256xf32> -> tensor<4x16x256xf32>
  %3 = cleave.gather %t, %ids axis = 0 : (tensor<100x64xf32>, tensor<8x16xi64>) -> tensor<8x16x64xf32>
  %4 = cleave.concat %x, %x axis = 1 : (tensor<8x16x256xf32>, tensor<8x16x256xf32>) -> tensor<8x32x256xf32>
  %s = cleave.slice %x starts = [0, 0, 0] steps = [1, 1, 1] : tensor<8x16x256xf32> -> tensor<8x1x256xf32>
  %5 = cleave.broadcast %s : tensor<8x1x256xf32> -> tensor<8x16x256xf32>
  return %1, %2, %3, %4, %5 : tensor<8x4x16x64xf32>, tensor<4x16x256xf32>, tensor<8x16x64xf32>, tensor<8x32x256xf32>, tensor<8x16x256xf32>
}

// -----

// CHECK-LABEL: func.func @conv_and_pool
// CHECK: cleave.conv2d{{.*}}cleave.sharding_rule = "({{\[}}i, k, l, o], {{\[}}j, k, m, p], {{\[}}j]) -> ({{\[}}i, j, n, q]) whole={k, l, m, n, o, p, q}"
// CHECK: cleave.max_pool2d{{.*}}cleave.sharding_rule = "({{\[}}i, j, k, l]) -> ({{\[}}i, j, k, l]) whole={k, l}"
// CHECK: cleave.avg_pool2d{{.*}}cleave.sharding_rule = "({{\[}}i, j, k, l]) -> ({{\[}}i, j, k, l]) whole={k, l}"
func.func @conv_and_pool(%x: tensor<2x3x8x8xf32>, %w: tensor<16x3x3x3xf32>, %b: tensor<16xf32>) -> (tensor<2x16x8x8xf32>, tensor<2x3x4x4xf32>, tensor<2x3x3x3xf32>) {
  %0 = cleave.conv2d %x, %w bias %b strides = [1, 1] pads = [1, 1, 1, 1] dilations = [1, 1] groups = 1 : (tensor<2x3x8x8xf32>, tensor<16x3x3x3xf32>, tensor<16xf32>) -> tensor<2x16x8x8xf32>
  %1 = cleave.max_pool2d %x kernel = [2, 2] strides = [2, 2] pads = [0, 0, 0, 0] dilations = [1, 1] : tensor<2x3x8x8xf32> -> tensor<2x3x4x4xf32>
  // Ceil mode: (8 - 3) / 2 + 1 = 3 rounded up is 4, but floor gives 3.
  %2 = cleave.avg_pool2d %x kernel = [3, 3] strides = [2, 2] pads = [0, 0, 0, 0] dilations = [1, 1] {count_include_pad} : tensor<2x3x8x8xf32> -> tensor<2x3x3x3xf32>
  return %0, %1, %2 : tensor<2x16x8x8xf32>, tensor<2x3x4x4xf32>, tensor<2x3x3x3xf32>
}

// -----

// CHECK-LABEL: func.func @training_ops
// The batch: parallel through the input's adjoint, summed by the filter's.
// CHECK: cleave.conv2d_backward_input{{.*}}cleave.sharding_rule = "({{\[}}i, j, k, l], {{\[}}m, n, o, p]) -> ({{\[}}i, q, r, s]) whole={j, k, l, m, n, o, p, q, r, s}"
// CHECK: cleave.conv2d_backward_filter{{.*}}cleave.sharding_rule = "({{\[}}i, j, k, l], {{\[}}i, m, n, o]) -> ({{\[}}p, q, r, s]) sum={i} whole={j, k, l, m, n, o, p, q, r, s}"
// CHECK: cleave.max_pool2d_backward{{.*}}cleave.sharding_rule = "({{\[}}i, j, k, l], {{\[}}i, j, k, l]) -> ({{\[}}i, j, k, l]) whole={k, l}"
// CHECK: cleave.avg_pool2d_backward{{.*}}cleave.sharding_rule = "({{\[}}i, j, k, l]) -> ({{\[}}i, j, k, l]) whole={k, l}"
// CHECK: cleave.scatter_add{{.*}}cleave.sharding_rule = "({{\[}}j, k, l], {{\[}}j, k]) -> ({{\[}}i, l]) sum={j, k} linear=scaling(0)"
// CHECK: cleave.slice_scatter{{.*}}cleave.sharding_rule = "({{\[}}i, j]) -> ({{\[}}i, j]) whole={j} linear=scaling(0)"
// CHECK: cleave.random_uniform{{.*}}cleave.sharding_rule = "({{\[}}]) -> ({{\[}}i, j]) whole={i, j}"
func.func @training_ops(%x: tensor<2x3x8x8xf32>, %w: tensor<16x3x3x3xf32>, %g: tensor<2x16x8x8xf32>, %p: tensor<2x3x4x4xf32>, %t: tensor<8x16x64xf32>, %ids: tensor<8x16xi64>, %s: tensor<4x3xf32>, %step: tensor<i64>) -> (tensor<2x3x8x8xf32>, tensor<16x3x3x3xf32>, tensor<2x3x8x8xf32>, tensor<2x3x8x8xf32>, tensor<1000x64xf32>, tensor<4x8xf32>, tensor<8x16xf32>) {
  %0 = cleave.conv2d_backward_input %g, %w strides = [1, 1] pads = [1, 1, 1, 1] dilations = [1, 1] groups = 1 : (tensor<2x16x8x8xf32>, tensor<16x3x3x3xf32>) -> tensor<2x3x8x8xf32>
  %1 = cleave.conv2d_backward_filter %x, %g strides = [1, 1] pads = [1, 1, 1, 1] dilations = [1, 1] groups = 1 : (tensor<2x3x8x8xf32>, tensor<2x16x8x8xf32>) -> tensor<16x3x3x3xf32>
  %2 = cleave.max_pool2d_backward %x, %p kernel = [2, 2] strides = [2, 2] pads = [0, 0, 0, 0] dilations = [1, 1] : (tensor<2x3x8x8xf32>, tensor<2x3x4x4xf32>) -> tensor<2x3x8x8xf32>
  %3 = cleave.avg_pool2d_backward %p kernel = [2, 2] strides = [2, 2] pads = [0, 0, 0, 0] dilations = [1, 1] {count_include_pad} : tensor<2x3x4x4xf32> -> tensor<2x3x8x8xf32>
  %4 = cleave.scatter_add %t, %ids axis = 0 : (tensor<8x16x64xf32>, tensor<8x16xi64>) -> tensor<1000x64xf32>
  %5 = cleave.slice_scatter %s starts = [0, 2] steps = [1, 2] : tensor<4x3xf32> -> tensor<4x8xf32>
  %6 = cleave.random_uniform %step seed = 42 stream = 3 : tensor<i64> -> tensor<8x16xf32>
  return %0, %1, %2, %3, %4, %5, %6 : tensor<2x3x8x8xf32>, tensor<16x3x3x3xf32>, tensor<2x3x8x8xf32>, tensor<2x3x8x8xf32>, tensor<1000x64xf32>, tensor<4x8xf32>, tensor<8x16xf32>
}

// -----

// Attention: batch and heads split (each head independent); rows, keys and
// head dims whole; a bias carries the dims it does not broadcast along.
// With grouped key heads (2 for 4) the heads stay whole.
// CHECK-LABEL: func.func @attention
// CHECK: cleave.attention{{.*}}cleave.sharding_rule = "({{\[}}i, j, k, m], {{\[}}i, j, l, m], {{\[}}i, j, l, n], {{\[}}i, _, _, l]) -> ({{\[}}i, j, k, n], {{\[}}i, j, k]) whole={k, l, m, n}"
// CHECK: cleave.attention_backward{{.*}}cleave.sharding_rule = "({{\[}}i, j, k, m], {{\[}}i, j, l, m], {{\[}}i, j, l, n], {{\[}}i, j, k, n], {{\[}}i, j, k], {{\[}}i, j, k, n], {{\[}}i, _, _, l]) -> ({{\[}}i, j, k, m], {{\[}}i, j, l, m], {{\[}}i, j, l, n]) whole={k, l, m, n}"
// CHECK-LABEL: func.func @grouped
// CHECK: cleave.attention{{.*}}cleave.sharding_rule = "({{\[}}i, j, l, n], {{\[}}i, k, m, n], {{\[}}i, k, m, o]) -> ({{\[}}i, j, l, o], {{\[}}i, j, l]) whole={j, k, l, m, n, o}"
func.func @attention(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x6x16xf32>, %v: tensor<2x4x6x8xf32>, %b: tensor<2x1x1x6xf32>, %g: tensor<2x4x8x8xf32>) -> (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) {
  %o, %lse = cleave.attention %q, %k, %v bias %b scale = 2.500000e-01 : (tensor<2x4x8x16xf32>, tensor<2x4x6x16xf32>, tensor<2x4x6x8xf32>, tensor<2x1x1x6xf32>) -> (tensor<2x4x8x8xf32>, tensor<2x4x8xf32>)
  %dq, %dk, %dv = cleave.attention_backward %q, %k, %v, %o, %lse, %g bias %b scale = 2.500000e-01 : (tensor<2x4x8x16xf32>, tensor<2x4x6x16xf32>, tensor<2x4x6x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8x8xf32>, tensor<2x1x1x6xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x6x16xf32>, tensor<2x4x6x8xf32>)
  return %o, %dq : tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>
}
func.func @grouped(%q: tensor<2x4x8x16xf32>, %k: tensor<2x2x8x16xf32>, %v: tensor<2x2x8x16xf32>) -> tensor<2x4x8x16xf32> {
  %o, %lse = cleave.attention %q, %k, %v scale = 2.500000e-01 causal : (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8xf32>)
  return %o : tensor<2x4x8x16xf32>
}

// -----

// Cross-entropy: the class axis a sum over the logits and class ids (split,
// both results partial: the vocab-parallel loss), the rows parallel; its
// backward splits the classes.
// CHECK-LABEL: func.func @cross_entropy
// CHECK: cleave.cross_entropy{{.*}}cleave.sharding_rule = "({{\[}}i, j], {{\[}}i, _], {{\[}}_, j], {{\[}}i, _]) -> ({{\[}}i, _], {{\[}}i, _]) sum={j}"
// CHECK: cleave.cross_entropy_backward{{.*}}cleave.sharding_rule = "({{\[}}i, j], {{\[}}i, _], {{\[}}_, j], {{\[}}i, _], {{\[}}i, _], {{\[}}i, _]) -> ({{\[}}i, j])"
func.func @cross_entropy(%x: tensor<8x512xf32>, %l: tensor<8x1xi64>, %ids: tensor<1x512xi64>, %m: tensor<8x1xf32>) -> (tensor<8x1xf32>, tensor<8x512xf32>) {
  %s, %t = cleave.cross_entropy %x, %l, %ids, %m axis = 1 : (tensor<8x512xf32>, tensor<8x1xi64>, tensor<1x512xi64>, tensor<8x1xf32>) -> (tensor<8x1xf32>, tensor<8x1xf32>)
  %g = cleave.cross_entropy_backward %x, %l, %ids, %m, %s, %t axis = 1 : (tensor<8x512xf32>, tensor<8x1xi64>, tensor<1x512xi64>, tensor<8x1xf32>, tensor<8x1xf32>, tensor<8x1xf32>) -> tensor<8x512xf32>
  return %s, %g : tensor<8x1xf32>, tensor<8x512xf32>
}

// -----

// One K/V head (multi-query): the query heads split alone; every rank reads
// the K/V head whole.
// CHECK-LABEL: func.func @multi_query
// CHECK: cleave.attention{{.*}}cleave.sharding_rule = "({{\[}}i, j, k, m], {{\[}}i, _, l, m], {{\[}}i, _, l, n]) -> ({{\[}}i, j, k, n], {{\[}}i, j, k]) whole={k, l, m, n}"
func.func @multi_query(%q: tensor<2x4x8x16xf32>, %k: tensor<2x1x8x16xf32>, %v: tensor<2x1x8x16xf32>) -> tensor<2x4x8x16xf32> {
  %o, %lse = cleave.attention %q, %k, %v scale = 2.500000e-01 causal : (tensor<2x4x8x16xf32>, tensor<2x1x8x16xf32>, tensor<2x1x8x16xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8xf32>)
  return %o : tensor<2x4x8x16xf32>
}

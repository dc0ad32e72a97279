// Every differentiation rule, checked numerically: cleave-gradcheck turns
// each function's float arguments into parameters, projects its results onto
// a random direction as the loss, and compares every gradient entry it
// samples with a central finite difference on the CPU runtime.
// RUN: cleave-gradcheck %s | FileCheck %s

// CHECK-DAG: PASS @add_broadcast
func.func @add_broadcast(%a: tensor<3x4xf32>, %b: tensor<1x4xf32>) -> tensor<3x4xf32> {
  %0 = cleave.add %a, %b : (tensor<3x4xf32>, tensor<1x4xf32>) -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}
// CHECK-DAG: PASS @sub_broadcast
func.func @sub_broadcast(%a: tensor<3x1xf32>, %b: tensor<1x4xf32>) -> tensor<3x4xf32> {
  %0 = cleave.sub %a, %b : (tensor<3x1xf32>, tensor<1x4xf32>) -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}
// CHECK-DAG: PASS @mul_broadcast
func.func @mul_broadcast(%a: tensor<3x4xf32>, %b: tensor<3x1xf32>) -> tensor<3x4xf32> {
  %0 = cleave.mul %a, %b : (tensor<3x4xf32>, tensor<3x1xf32>) -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}
// CHECK-DAG: PASS @div
func.func @div(%a: tensor<3x4xf32>, %b: tensor<3x4xf32> {gradcheck.range = [0.5, 2.0]}) -> tensor<3x4xf32> {
  %0 = cleave.div %a, %b : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}
// CHECK-DAG: PASS @pow
func.func @pow(%a: tensor<3x4xf32> {gradcheck.range = [0.5, 2.0]}, %b: tensor<1x4xf32>) -> tensor<3x4xf32> {
  %0 = cleave.pow %a, %b : (tensor<3x4xf32>, tensor<1x4xf32>) -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}
// CHECK-DAG: PASS @max
func.func @max(%a: tensor<3x4xf32>, %b: tensor<3x4xf32>) -> tensor<3x4xf32> {
  %0 = cleave.max %a, %b : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}
// CHECK-DAG: PASS @min
func.func @min(%a: tensor<3x4xf32>, %b: tensor<1x4xf32>) -> tensor<3x4xf32> {
  %0 = cleave.min %a, %b : (tensor<3x4xf32>, tensor<1x4xf32>) -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}
// CHECK-DAG: PASS @select
func.func @select(%c: tensor<3x4xi1>, %a: tensor<3x4xf32>, %b: tensor<1x4xf32>) -> tensor<3x4xf32> {
  %0 = cleave.select %c, %a, %b : (tensor<3x4xi1>, tensor<3x4xf32>, tensor<1x4xf32>) -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}
// CHECK-DAG: PASS @unary_smooth
func.func @unary_smooth(%x: tensor<2x5xf32>) -> (tensor<2x5xf32>, tensor<2x5xf32>, tensor<2x5xf32>, tensor<2x5xf32>, tensor<2x5xf32>, tensor<2x5xf32>, tensor<2x5xf32>) {
  %0 = cleave.neg %x : tensor<2x5xf32>
  %1 = cleave.exp %x : tensor<2x5xf32>
  %2 = cleave.tanh %x : tensor<2x5xf32>
  %3 = cleave.sigmoid %x : tensor<2x5xf32>
  %4 = cleave.erf %x : tensor<2x5xf32>
  %5 = cleave.sin %x : tensor<2x5xf32>
  %6 = cleave.cos %x : tensor<2x5xf32>
  return %0, %1, %2, %3, %4, %5, %6 : tensor<2x5xf32>, tensor<2x5xf32>, tensor<2x5xf32>, tensor<2x5xf32>, tensor<2x5xf32>, tensor<2x5xf32>, tensor<2x5xf32>
}
// CHECK-DAG: PASS @unary_positive
func.func @unary_positive(%x: tensor<2x5xf32> {gradcheck.range = [0.5, 2.0]}) -> (tensor<2x5xf32>, tensor<2x5xf32>, tensor<2x5xf32>, tensor<2x5xf32>) {
  %0 = cleave.log %x : tensor<2x5xf32>
  %1 = cleave.sqrt %x : tensor<2x5xf32>
  %2 = cleave.rsqrt %x : tensor<2x5xf32>
  %3 = cleave.reciprocal %x : tensor<2x5xf32>
  return %0, %1, %2, %3 : tensor<2x5xf32>, tensor<2x5xf32>, tensor<2x5xf32>, tensor<2x5xf32>
}
// CHECK-DAG: PASS @unary_kinked
func.func @unary_kinked(%x: tensor<2x5xf32> {gradcheck.min_abs = 0.05 : f64}) -> (tensor<2x5xf32>, tensor<2x5xf32>, tensor<2x5xf32>) {
  %0 = cleave.abs %x : tensor<2x5xf32>
  %1 = cleave.relu %x : tensor<2x5xf32>
  %2 = cleave.leaky_relu %x {alpha = 0.1 : f32} : tensor<2x5xf32>
  return %0, %1, %2 : tensor<2x5xf32>, tensor<2x5xf32>, tensor<2x5xf32>
}
// CHECK-DAG: PASS @gelu
func.func @gelu(%x: tensor<2x5xf32> {gradcheck.range = [-3.0, 3.0]}) -> (tensor<2x5xf32>, tensor<2x5xf32>) {
  %0 = cleave.gelu %x : tensor<2x5xf32>
  %1 = cleave.gelu %x {approximate} : tensor<2x5xf32>
  return %0, %1 : tensor<2x5xf32>, tensor<2x5xf32>
}
// CHECK-DAG: PASS @matmul
func.func @matmul(%a: tensor<3x4xf32>, %b: tensor<4x5xf32>) -> tensor<3x5xf32> {
  %0 = cleave.matmul %a, %b : (tensor<3x4xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>
  return %0 : tensor<3x5xf32>
}
// CHECK-DAG: PASS @matmul_transposed
func.func @matmul_transposed(%a: tensor<4x3xf32>, %b: tensor<5x4xf32>) -> tensor<3x5xf32> {
  %0 = cleave.matmul %a, %b {transpose_lhs, transpose_rhs} : (tensor<4x3xf32>, tensor<5x4xf32>) -> tensor<3x5xf32>
  return %0 : tensor<3x5xf32>
}
// CHECK-DAG: PASS @matmul_batch_broadcast
func.func @matmul_batch_broadcast(%a: tensor<1x3x4xf32>, %b: tensor<2x5x4xf32>) -> tensor<2x3x5xf32> {
  %0 = cleave.matmul %a, %b {transpose_rhs} : (tensor<1x3x4xf32>, tensor<2x5x4xf32>) -> tensor<2x3x5xf32>
  return %0 : tensor<2x3x5xf32>
}
// A weight shared by the batch (the folded-rows path), read transposed or not.
// CHECK-DAG: PASS @matmul_shared_weight
func.func @matmul_shared_weight(%x: tensor<2x3x4xf32>, %w: tensor<1x4x5xf32>, %v: tensor<1x6x5xf32>) -> (tensor<2x3x5xf32>, tensor<2x3x6xf32>) {
  %0 = cleave.matmul %x, %w : (tensor<2x3x4xf32>, tensor<1x4x5xf32>) -> tensor<2x3x5xf32>
  %1 = cleave.matmul %0, %v {transpose_rhs} : (tensor<2x3x5xf32>, tensor<1x6x5xf32>) -> tensor<2x3x6xf32>
  return %0, %1 : tensor<2x3x5xf32>, tensor<2x3x6xf32>
}
// CHECK-DAG: PASS @reduce_sum_mean
func.func @reduce_sum_mean(%x: tensor<2x3x4xf32>) -> (tensor<2x4xf32>, tensor<1x3x1xf32>) {
  %0 = cleave.reduce sum %x dims = [1] : (tensor<2x3x4xf32>) -> tensor<2x4xf32>
  %1 = cleave.reduce mean %x dims = [0, 2] {keep_dims} : (tensor<2x3x4xf32>) -> tensor<1x3x1xf32>
  return %0, %1 : tensor<2x4xf32>, tensor<1x3x1xf32>
}
// CHECK-DAG: PASS @reduce_max_min
func.func @reduce_max_min(%x: tensor<2x3x4xf32>) -> (tensor<2x3xf32>, tensor<3xf32>) {
  %0 = cleave.reduce max %x dims = [2] : (tensor<2x3x4xf32>) -> tensor<2x3xf32>
  %1 = cleave.reduce min %x dims = [0, 2] : (tensor<2x3x4xf32>) -> tensor<3xf32>
  return %0, %1 : tensor<2x3xf32>, tensor<3xf32>
}
// CHECK-DAG: PASS @reduce_prod
func.func @reduce_prod(%x: tensor<2x3xf32> {gradcheck.range = [0.5, 1.5]}) -> tensor<2xf32> {
  %0 = cleave.reduce prod %x dims = [1] : (tensor<2x3xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}
// CHECK-DAG: PASS @softmax
func.func @softmax(%x: tensor<3x5xf32>) -> (tensor<3x5xf32>, tensor<3x5xf32>) {
  %0 = cleave.softmax %x axis = 1 : tensor<3x5xf32>
  %1 = cleave.log_softmax %x axis = 0 : tensor<3x5xf32>
  return %0, %1 : tensor<3x5xf32>, tensor<3x5xf32>
}
// CHECK-DAG: PASS @layer_norm
func.func @layer_norm(%x: tensor<2x3x4xf32>, %g: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<2x3x4xf32> {
  %y, %m, %r = cleave.layer_norm %x scale %g bias %b axis = 2 eps = 1.0e-05 : (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x1xf32>, tensor<2x3x1xf32>)
  return %y : tensor<2x3x4xf32>
}
// The statistics results are differentiable too.
// CHECK-DAG: PASS @layer_norm_statistics
func.func @layer_norm_statistics(%x: tensor<2x6xf32>, %g: tensor<6xf32>) -> (tensor<2x6xf32>, tensor<2x1xf32>, tensor<2x1xf32>) {
  %y, %m, %r = cleave.layer_norm %x scale %g axis = 1 eps = 1.0e-05 : (tensor<2x6xf32>, tensor<6xf32>) -> (tensor<2x6xf32>, tensor<2x1xf32>, tensor<2x1xf32>)
  return %y, %m, %r : tensor<2x6xf32>, tensor<2x1xf32>, tensor<2x1xf32>
}
// CHECK-DAG: PASS @layer_norm_all_dims
func.func @layer_norm_all_dims(%x: tensor<3x4xf32>, %b: tensor<3x4xf32>) -> tensor<3x4xf32> {
  %y, %m, %r = cleave.layer_norm %x bias %b axis = 0 eps = 1.0e-05 : (tensor<3x4xf32>, tensor<3x4xf32>) -> (tensor<3x4xf32>, tensor<1x1xf32>, tensor<1x1xf32>)
  return %y : tensor<3x4xf32>
}
// CHECK-DAG: PASS @batch_norm
func.func @batch_norm(%x: tensor<2x3x2x2xf32>, %g: tensor<3xf32>, %b: tensor<3xf32>, %m: tensor<3xf32>, %v: tensor<3xf32> {gradcheck.range = [0.5, 2.0]}) -> tensor<2x3x2x2xf32> {
  %0 = cleave.batch_norm %x, %g, %b, %m, %v eps = 1.0e-05 : (tensor<2x3x2x2xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<2x3x2x2xf32>
  return %0 : tensor<2x3x2x2xf32>
}
// CHECK-DAG: PASS @data_movement
func.func @data_movement(%x: tensor<2x3x4xf32>, %y: tensor<1x3x1xf32>) -> (tensor<6x4xf32>, tensor<4x2x3xf32>, tensor<2x3x4xf32>) {
  %0 = cleave.reshape %x : tensor<2x3x4xf32> -> tensor<6x4xf32>
  %1 = cleave.transpose %x perm = [2, 0, 1] : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  %2 = cleave.broadcast %y : tensor<1x3x1xf32> -> tensor<2x3x4xf32>
  return %0, %1, %2 : tensor<6x4xf32>, tensor<4x2x3xf32>, tensor<2x3x4xf32>
}
// CHECK-DAG: PASS @concat_slice
func.func @concat_slice(%a: tensor<2x3xf32>, %b: tensor<2x2xf32>) -> (tensor<2x5xf32>, tensor<2x2xf32>) {
  %0 = cleave.concat %a, %b axis = 1 : (tensor<2x3xf32>, tensor<2x2xf32>) -> tensor<2x5xf32>
  %1 = cleave.slice %0 starts = [1, 4] steps = [-1, -2] : tensor<2x5xf32> -> tensor<2x2xf32>
  return %0, %1 : tensor<2x5xf32>, tensor<2x2xf32>
}
// A slice assignment: the update placed into zeros (slice's adjoint), then
// chosen over the data by a mask.
// CHECK-DAG: PASS @slice_scatter
func.func @slice_scatter(%d: tensor<3x5xf32>, %u: tensor<2x2xf32>) -> tensor<3x5xf32> {
  %0 = cleave.slice_scatter %u starts = [2, 4] steps = [-2, -3] : tensor<2x2xf32> -> tensor<3x5xf32>
  %m = cleave.constant dense<[[false, true, false, false, true], [false, false, false, false, false], [false, true, false, false, true]]> : tensor<3x5xi1>
  %1 = cleave.select %m, %0, %d : (tensor<3x5xi1>, tensor<3x5xf32>, tensor<3x5xf32>) -> tensor<3x5xf32>
  return %1 : tensor<3x5xf32>
}
// Repeated and negative indices accumulate into the same rows.
// CHECK-DAG: PASS @gather
func.func @gather(%t: tensor<5x3xf32>, %i: tensor<2x4xi64> {gradcheck.range = [-5, 5]}, %u: tensor<3x5xf32>, %j: tensor<4xi32> {gradcheck.range = [0, 5]}) -> (tensor<2x4x3xf32>, tensor<3x4xf32>) {
  %0 = cleave.gather %t, %i axis = 0 : (tensor<5x3xf32>, tensor<2x4xi64>) -> tensor<2x4x3xf32>
  %1 = cleave.gather %u, %j axis = 1 : (tensor<3x5xf32>, tensor<4xi32>) -> tensor<3x4xf32>
  return %0, %1 : tensor<2x4x3xf32>, tensor<3x4xf32>
}
// CHECK-DAG: PASS @conv2d
func.func @conv2d(%x: tensor<2x4x7x6xf32>, %w: tensor<6x2x3x2xf32>, %b: tensor<6xf32>) -> tensor<2x6x4x3xf32> {
  %0 = cleave.conv2d %x, %w bias %b strides = [2, 2] pads = [1, 0, 1, 1] dilations = [1, 2] groups = 2 : (tensor<2x4x7x6xf32>, tensor<6x2x3x2xf32>, tensor<6xf32>) -> tensor<2x6x4x3xf32>
  return %0 : tensor<2x6x4x3xf32>
}
// CHECK-DAG: PASS @scatter_add
func.func @scatter_add(%u: tensor<2x4x3xf32>, %i: tensor<2x4xi64> {gradcheck.range = [-5, 5]}) -> tensor<5x3xf32> {
  %0 = cleave.scatter_add %u, %i axis = 0 : (tensor<2x4x3xf32>, tensor<2x4xi64>) -> tensor<5x3xf32>
  return %0 : tensor<5x3xf32>
}
// CHECK-DAG: PASS @conv2d_backward_input
func.func @conv2d_backward_input(%g: tensor<2x6x4x3xf32>, %w: tensor<6x2x3x2xf32>) -> tensor<2x4x8x6xf32> {
  %0 = cleave.conv2d_backward_input %g, %w strides = [2, 2] pads = [1, 0, 1, 1] dilations = [1, 2] groups = 2 : (tensor<2x6x4x3xf32>, tensor<6x2x3x2xf32>) -> tensor<2x4x8x6xf32>
  return %0 : tensor<2x4x8x6xf32>
}
// CHECK-DAG: PASS @pools
func.func @pools(%x: tensor<1x2x5x5xf32>) -> (tensor<1x2x3x3xf32>, tensor<1x2x3x3xf32>, tensor<1x2x3x3xf32>) {
  %0 = cleave.max_pool2d %x kernel = [2, 2] strides = [2, 2] pads = [1, 1, 0, 0] dilations = [1, 1] : tensor<1x2x5x5xf32> -> tensor<1x2x3x3xf32>
  %1 = cleave.avg_pool2d %x kernel = [3, 3] strides = [2, 2] pads = [1, 1, 1, 1] dilations = [1, 1] : tensor<1x2x5x5xf32> -> tensor<1x2x3x3xf32>
  %2 = cleave.avg_pool2d %x kernel = [3, 3] strides = [2, 2] pads = [1, 1, 1, 1] dilations = [1, 1] {count_include_pad} : tensor<1x2x5x5xf32> -> tensor<1x2x3x3xf32>
  return %0, %1, %2 : tensor<1x2x3x3xf32>, tensor<1x2x3x3xf32>, tensor<1x2x3x3xf32>
}
// Fused attention: its backward kernel for q, k, v and the decomposed
// gradient of a learned bias, with grouped key heads (4 query heads read 2),
// more keys than queries under the causal mask, and the bias broadcast over
// the batch.
// CHECK-DAG: PASS @attention
func.func @attention(%q: tensor<2x2x5x4xf32>, %k: tensor<2x2x6x4xf32>, %v: tensor<2x2x6x3xf32>) -> tensor<2x2x5x3xf32> {
  %o, %lse = cleave.attention %q, %k, %v scale = 5.000000e-01 : (tensor<2x2x5x4xf32>, tensor<2x2x6x4xf32>, tensor<2x2x6x3xf32>) -> (tensor<2x2x5x3xf32>, tensor<2x2x5xf32>)
  return %o : tensor<2x2x5x3xf32>
}
// CHECK-DAG: PASS @attention_causal_bias_gqa
func.func @attention_causal_bias_gqa(%q: tensor<2x4x5x4xf32>, %k: tensor<2x2x7x4xf32>, %v: tensor<2x2x7x3xf32>, %b: tensor<1x4x5x7xf32>) -> tensor<2x4x5x3xf32> {
  %o, %lse = cleave.attention %q, %k, %v bias %b scale = 7.000000e-01 causal : (tensor<2x4x5x4xf32>, tensor<2x2x7x4xf32>, tensor<2x2x7x3xf32>, tensor<1x4x5x7xf32>) -> (tensor<2x4x5x3xf32>, tensor<2x4x5xf32>)
  return %o : tensor<2x4x5x3xf32>
}
// Fused cross-entropy statistics: the logits' gradient through both sums
// (the shift is a constant here, as the builders' no_grad max is), the
// class axis first and last, labels that hit and miss the classes.
// CHECK-DAG: PASS @cross_entropy
func.func @cross_entropy(%x: tensor<3x5xf32>) -> (tensor<3x1xf32>, tensor<3x1xf32>) {
  %labels = cleave.constant dense<[[1], [4], [7]]> : tensor<3x1xi64>
  %ids = cleave.iota dim = 1 : tensor<1x5xi64>
  %shift = cleave.constant dense<[[0.5], [-0.25], [1.0]]> : tensor<3x1xf32>
  %s, %t = cleave.cross_entropy %x, %labels, %ids, %shift axis = 1 : (tensor<3x5xf32>, tensor<3x1xi64>, tensor<1x5xi64>, tensor<3x1xf32>) -> (tensor<3x1xf32>, tensor<3x1xf32>)
  return %s, %t : tensor<3x1xf32>, tensor<3x1xf32>
}
// CHECK-DAG: PASS @cross_entropy_axis0
func.func @cross_entropy_axis0(%x: tensor<4x2x3xf32>) -> tensor<1x2x3xf32> {
  %labels = cleave.constant dense<[[[0, 3, 2], [1, 1, 0]]]> : tensor<1x2x3xi32>
  %ids = cleave.iota dim = 0 : tensor<4x1x1xi32>
  %shift = cleave.constant dense<0.5> : tensor<1x2x3xf32>
  %s, %t = cleave.cross_entropy %x, %labels, %ids, %shift axis = 0 : (tensor<4x2x3xf32>, tensor<1x2x3xi32>, tensor<4x1x1xi32>, tensor<1x2x3xf32>) -> (tensor<1x2x3xf32>, tensor<1x2x3xf32>)
  %u = cleave.add %s, %t : (tensor<1x2x3xf32>, tensor<1x2x3xf32>) -> tensor<1x2x3xf32>
  return %u : tensor<1x2x3xf32>
}

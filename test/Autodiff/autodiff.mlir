// RUN: cleave-opt %s --split-input-file --cleave-autodiff | FileCheck %s

// Only active values get gradients: the input %x and the integer path get
// none; a value used twice sums its gradients; other outputs are dropped
// and buffers follow the gradients.
// CHECK-LABEL: func.func @activity
// CHECK-SAME: -> (tensor<f32> {cleave.loss}, tensor<4xf32> {cleave.gradient = "w"}, tensor<4xf32> {cleave.gradient = "unused"}, tensor<4xf32> {cleave.buffer = "stat"})
// CHECK: %[[XW:.*]] = cleave.mul %arg0, %arg1
// CHECK: %[[SQ:.*]] = cleave.mul %[[XW]], %[[XW]]
// CHECK: %[[L:.*]] = cleave.reduce sum %[[SQ]]
// CHECK: %[[ONE:.*]] = cleave.constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[G:.*]] = cleave.broadcast
// CHECK: %[[G1:.*]] = cleave.mul %[[G]], %[[XW]]
// CHECK: %[[G2:.*]] = cleave.mul %[[G]], %[[XW]]
// CHECK: %[[GXW:.*]] = cleave.add %[[G1]], %[[G2]]
// CHECK: %[[GW:.*]] = cleave.mul %[[GXW]], %arg0
// CHECK-NOT: cleave.mul %[[GXW]], %arg1
// CHECK: %[[ZERO:.*]] = cleave.constant dense<0.000000e+00> : tensor<4xf32>
// CHECK: return %[[L]], %[[GW]], %[[ZERO]], %{{.*}} : tensor<f32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
func.func @activity(%x: tensor<4xf32> {cleave.input = "x"}, %w: tensor<4xf32> {cleave.parameter = "w"}, %u: tensor<4xf32> {cleave.parameter = "unused"}, %i: tensor<4xi64> {cleave.input = "i"}) -> (tensor<f32> {cleave.loss}, tensor<4xi64> {cleave.output = "ids"}, tensor<4xf32> {cleave.buffer = "stat"}) {
  %0 = cleave.mul %x, %w : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = cleave.mul %0, %0 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %2 = cleave.reduce sum %1 dims = [0] : (tensor<4xf32>) -> tensor<f32>
  %3 = cleave.add %i, %i : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  %4 = cleave.exp %0 : tensor<4xf32>
  return %2, %3, %4 : tensor<f32>, tensor<4xi64>, tensor<4xf32>
}

// -----

// cleave.no_grad stops the gradient: only the direct path reaches %w.
// CHECK-LABEL: func.func @stop
// CHECK: cleave.reduce max %arg0 dims = [0] {cleave.no_grad, keep_dims}
// CHECK-NOT: cleave.cmp
// CHECK: return
func.func @stop(%w: tensor<4xf32> {cleave.parameter = "w"}) -> (tensor<f32> {cleave.loss}) {
  %m = cleave.reduce max %w dims = [0] {keep_dims, cleave.no_grad} : (tensor<4xf32>) -> tensor<1xf32>
  %0 = cleave.sub %w, %m : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xf32>
  %1 = cleave.reduce sum %0 dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}

// -----

// A frozen weight is read but gets no gradient; the trainable one beside it
// does (a LoRA pair on a frozen base: W x + B (A x)).
// CHECK-LABEL: func.func @frozen_base
// CHECK-SAME: -> (tensor<f32> {cleave.loss}, tensor<4xf32> {cleave.gradient = "a"})
// CHECK-NOT: cleave.gradient = "w"
func.func @frozen_base(%x: tensor<4xf32> {cleave.input = "x"}, %w: tensor<4xf32> {cleave.parameter = "w", cleave.frozen}, %a: tensor<4xf32> {cleave.parameter = "a"}) -> (tensor<f32> {cleave.loss}) {
  %0 = cleave.mul %x, %w : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = cleave.mul %x, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %2 = cleave.add %0, %1 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %3 = cleave.reduce sum %2 dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %3 : tensor<f32>
}

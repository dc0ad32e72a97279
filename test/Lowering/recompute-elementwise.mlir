// RUN: cleave-opt %s --split-input-file --cleave-recompute-elementwise | FileCheck %s

// GELU's erf form: the backward reads x, u = x / sqrt(2) and a = 1 +
// erf(u). u and a are recomputed from x right before their first reader
// after the loss: x is the one value kept from the forward.
// CHECK-LABEL: func.func @gelu
// CHECK: %[[U:.*]] = cleave.div %arg0, %[[C:.*]] :
// CHECK: %[[E:.*]] = cleave.erf %[[U]]
// CHECK: %[[A:.*]] = cleave.add %[[E]], %[[ONE:.*]] :
// CHECK: %[[L:.*]] = cleave.reduce sum
// CHECK: %[[A2U:.*]] = cleave.div %arg0, %[[C]] :
// CHECK: %[[A2E:.*]] = cleave.erf %[[A2U]]
// CHECK: %[[A2:.*]] = cleave.add %[[A2E]], %[[ONE]] :
// CHECK: cleave.mul %[[A2]], %arg1
// CHECK: %[[U2:.*]] = cleave.div %arg0, %[[C]] :
// CHECK: cleave.mul %[[U2]], %arg0
// CHECK-NOT: %[[U]]
// CHECK-NOT: %[[A]]
// CHECK: return
func.func @gelu(%x: tensor<8xf32> {cleave.input = "x"}, %d: tensor<8xf32> {cleave.input = "d"}) -> (tensor<f32> {cleave.loss}, tensor<8xf32>, tensor<8xf32>) attributes {cleave.precision = "bf16"} {
  %c = cleave.constant dense<1.41421354> : tensor<1xf32>
  %one = cleave.constant dense<1.0> : tensor<1xf32>
  %u = cleave.div %x, %c : (tensor<8xf32>, tensor<1xf32>) -> tensor<8xf32>
  %e = cleave.erf %u : tensor<8xf32>
  %a = cleave.add %e, %one : (tensor<8xf32>, tensor<1xf32>) -> tensor<8xf32>
  %y = cleave.mul %x, %a : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<8xf32>) -> tensor<f32>
  %g1 = cleave.mul %a, %d : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %g2 = cleave.mul %u, %x : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %l, %g1, %g2 : tensor<f32>, tensor<8xf32>, tensor<8xf32>
}

// -----

// A value a product or a reduction reads in the forward is written there
// anyway: it is kept, not recomputed (t feeds the matmul, s the loss's
// sum; s is also made from the matmul's result, which nothing later
// reads: recomputing s would keep that instead).
// CHECK-LABEL: func.func @kept
// CHECK: %[[T:.*]] = cleave.tanh %arg0
// CHECK: %[[M:.*]] = cleave.matmul %[[T]], %arg1
// CHECK: %[[S:.*]] = cleave.exp %[[M]]
// CHECK: cleave.reduce sum
// CHECK-NOT: cleave.tanh
// CHECK-NOT: cleave.exp
// CHECK: cleave.mul %[[T]], %[[S]]
func.func @kept(%x: tensor<4x4xf32> {cleave.input = "x"}, %w: tensor<4x4xf32> {cleave.parameter = "w"}) -> (tensor<f32> {cleave.loss}, tensor<4x4xf32>) attributes {cleave.precision = "bf16"} {
  %t = cleave.tanh %x : tensor<4x4xf32>
  %m = cleave.matmul %t, %w : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %s = cleave.exp %m : tensor<4x4xf32>
  %l = cleave.reduce sum %s dims = [0, 1] : (tensor<4x4xf32>) -> tensor<f32>
  %g = cleave.mul %t, %s : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %l, %g : tensor<f32>, tensor<4x4xf32>
}

// -----

// An f32 step is left as it is.
// CHECK-LABEL: func.func @f32
// CHECK: %[[U:.*]] = cleave.neg %arg0
// CHECK: cleave.reduce sum
// CHECK-NEXT: cleave.mul %[[U]], %arg0
func.func @f32(%x: tensor<8xf32> {cleave.input = "x"}) -> (tensor<f32> {cleave.loss}, tensor<8xf32>) {
  %u = cleave.neg %x : tensor<8xf32>
  %l = cleave.reduce sum %u dims = [0] : (tensor<8xf32>) -> tensor<f32>
  %g = cleave.mul %u, %x : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %l, %g : tensor<f32>, tensor<8xf32>
}

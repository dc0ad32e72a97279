// RUN: cleave-opt %s --split-input-file --cleave-save-derivatives | FileCheck %s

// GELU's erf form, its backward in the distributed form autodiff writes:
// dx = dy a / 2 + (dy x / 2) exp(-u^2) k / sqrt(2). The factor a / 2 +
// (x / 2) exp(-u^2) k / sqrt(2) is made in the forward, where a, u and x
// are, marked cleave.forward; the backward is one product, and nothing
// after the loss reads a, u or x any more.
// CHECK-LABEL: func.func @gelu
// CHECK: %[[U:.*]] = cleave.div %arg0, %[[C:.*]] :
// CHECK: %[[E:.*]] = cleave.erf %[[U]]
// CHECK: %[[A:.*]] = cleave.add %[[E]], %[[ONE:.*]] :
// The larger operand's ops first, so fewer of the factor's values are
// live at once:
// CHECK: %[[S:.*]] = cleave.mul %[[U]], %[[U]] {cleave.forward}
// CHECK: %[[N:.*]] = cleave.neg %[[S]] {cleave.forward}
// CHECK: %[[X:.*]] = cleave.exp %[[N]] {cleave.forward}
// CHECK: %[[K:.*]] = cleave.mul %[[X]], %[[KC:.*]] {cleave.forward}
// CHECK: %[[HX:.*]] = cleave.mul %[[HALF:.*]], %arg0 {cleave.forward}
// CHECK: %[[P:.*]] = cleave.mul %[[HX]], %[[K]] {cleave.forward}
// CHECK: %[[Q:.*]] = cleave.div %[[P]], %[[C]] {cleave.forward}
// CHECK: %[[H:.*]] = cleave.mul %[[HALF]], %[[A]] {cleave.forward}
// CHECK: %[[F:.*]] = cleave.add %[[H]], %[[Q]] {cleave.forward}
// CHECK: %[[L:.*]] = cleave.reduce sum
// CHECK: %[[DY:.*]] = cleave.matmul
// CHECK-NEXT: %[[DX:.*]] = cleave.mul %[[DY]], %[[F]] : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
// CHECK-NEXT: return %[[L]], %[[DX]]
func.func @gelu(%x: tensor<8x4xf32> {cleave.input = "x"}, %d: tensor<8x2xf32> {cleave.input = "d"}, %w: tensor<2x4xf32> {cleave.parameter = "w"}) -> (tensor<f32> {cleave.loss}, tensor<8x4xf32>) attributes {cleave.precision = "bf16"} {
  %c = cleave.constant dense<1.41421354> : tensor<1x1xf32>
  %one = cleave.constant dense<1.0> : tensor<1x1xf32>
  %half = cleave.constant dense<0.5> : tensor<1x1xf32>
  %k = cleave.constant dense<1.12837923> : tensor<1x1xf32>
  %u = cleave.div %x, %c : (tensor<8x4xf32>, tensor<1x1xf32>) -> tensor<8x4xf32>
  %e = cleave.erf %u : tensor<8x4xf32>
  %a = cleave.add %e, %one : (tensor<8x4xf32>, tensor<1x1xf32>) -> tensor<8x4xf32>
  %y = cleave.mul %x, %a : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<8x4xf32>) -> tensor<f32>
  %dy = cleave.matmul %d, %w : (tensor<8x2xf32>, tensor<2x4xf32>) -> tensor<8x4xf32>
  %h = cleave.mul %dy, %half : (tensor<8x4xf32>, tensor<1x1xf32>) -> tensor<8x4xf32>
  %t1 = cleave.mul %h, %a : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %t2 = cleave.mul %h, %x : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %s = cleave.mul %u, %u : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %n = cleave.neg %s : tensor<8x4xf32>
  %ex = cleave.exp %n : tensor<8x4xf32>
  %kk = cleave.mul %ex, %k : (tensor<8x4xf32>, tensor<1x1xf32>) -> tensor<8x4xf32>
  %t3 = cleave.mul %t2, %kk : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %t4 = cleave.div %t3, %c : (tensor<8x4xf32>, tensor<1x1xf32>) -> tensor<8x4xf32>
  %dx = cleave.add %t1, %t4 : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  return %l, %dx : tensor<f32>, tensor<8x4xf32>
}

// -----

// A constant defined in the backward is made again beside the factor.
// CHECK-LABEL: func.func @late_constant
// CHECK: %[[E:.*]] = cleave.exp %arg0
// CHECK: %[[C:.*]] = cleave.constant dense<3.000000e+00>
// CHECK: %[[F:.*]] = cleave.mul %[[E]], %[[C]] {cleave.forward}
// CHECK: cleave.reduce sum
// CHECK: %[[DY:.*]] = cleave.matmul
// CHECK-NEXT: %[[DX:.*]] = cleave.mul %[[DY]], %[[F]]
func.func @late_constant(%x: tensor<8x4xf32> {cleave.input = "x"}, %d: tensor<8x2xf32> {cleave.input = "d"}, %w: tensor<2x4xf32> {cleave.parameter = "w"}) -> (tensor<f32> {cleave.loss}, tensor<8x4xf32>) attributes {cleave.precision = "bf16"} {
  %e = cleave.exp %x : tensor<8x4xf32>
  %l = cleave.reduce sum %e dims = [0, 1] : (tensor<8x4xf32>) -> tensor<f32>
  %dy = cleave.matmul %d, %w : (tensor<8x2xf32>, tensor<2x4xf32>) -> tensor<8x4xf32>
  %three = cleave.constant dense<3.0> : tensor<1x1xf32>
  %t = cleave.mul %dy, %e : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %dx = cleave.mul %t, %three : (tensor<8x4xf32>, tensor<1x1xf32>) -> tensor<8x4xf32>
  return %l, %dx : tensor<f32>, tensor<8x4xf32>
}

// -----

// A gradient-free op without type inference (a widening cast of a frozen
// bf16 weight) is cloned as it is.
// CHECK-LABEL: func.func @widened_weight
// CHECK: %[[E:.*]] = cleave.exp %arg0
// CHECK: %[[W:.*]] = cleave.cast %arg3 {cleave.forward} : tensor<8x4xbf16> -> tensor<8x4xf32>
// CHECK: %[[F:.*]] = cleave.add %[[W]], %[[E]] {cleave.forward}
// CHECK: %[[DY:.*]] = cleave.matmul
// CHECK-NEXT: cleave.mul %[[DY]], %[[F]]
func.func @widened_weight(%x: tensor<8x4xf32> {cleave.input = "x"}, %d: tensor<8x2xf32> {cleave.input = "d"}, %w: tensor<2x4xf32> {cleave.parameter = "w"}, %wb: tensor<8x4xbf16> {cleave.input = "wb"}) -> (tensor<f32> {cleave.loss}, tensor<8x4xf32>) attributes {cleave.precision = "bf16"} {
  %e = cleave.exp %x : tensor<8x4xf32>
  %l = cleave.reduce sum %e dims = [0, 1] : (tensor<8x4xf32>) -> tensor<f32>
  %dy = cleave.matmul %d, %w : (tensor<8x2xf32>, tensor<2x4xf32>) -> tensor<8x4xf32>
  %ww = cleave.cast %wb : tensor<8x4xbf16> -> tensor<8x4xf32>
  %t1 = cleave.mul %dy, %ww : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %t2 = cleave.mul %dy, %e : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %dx = cleave.add %t1, %t2 : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  return %l, %dx : tensor<f32>, tensor<8x4xf32>
}

// -----

// Not linear in dy (dy squared; dy plus a forward value): left as it is.
// CHECK-LABEL: func.func @affine
// CHECK-NOT: cleave.forward
// CHECK: %[[DY:.*]] = cleave.matmul
// CHECK: cleave.mul %[[DY]], %[[DY]]
// CHECK: cleave.add %[[DY]], %arg0
func.func @affine(%x: tensor<8x4xf32> {cleave.input = "x"}, %d: tensor<8x2xf32> {cleave.input = "d"}, %w: tensor<2x4xf32> {cleave.parameter = "w"}) -> (tensor<f32> {cleave.loss}, tensor<8x4xf32>, tensor<8x4xf32>) attributes {cleave.precision = "bf16"} {
  %e = cleave.exp %x : tensor<8x4xf32>
  %l = cleave.reduce sum %e dims = [0, 1] : (tensor<8x4xf32>) -> tensor<f32>
  %dy = cleave.matmul %d, %w : (tensor<8x2xf32>, tensor<2x4xf32>) -> tensor<8x4xf32>
  %sq = cleave.mul %dy, %dy : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %p = cleave.add %dy, %x : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  return %l, %sq, %p : tensor<f32>, tensor<8x4xf32>, tensor<8x4xf32>
}

// -----

// The forward values the chain reads are read after the loss by a
// product too, so the step keeps them anyway: saving the factor would add
// its bytes. Left as it is; and so is an f32 step (no cleave.precision),
// whose bits a regrouped sum would change.
// CHECK-LABEL: func.func @kept
// CHECK-NOT: cleave.forward
// CHECK: return
// CHECK-LABEL: func.func @f32
// CHECK-NOT: cleave.forward
// CHECK: return
func.func @kept(%x: tensor<8x4xf32> {cleave.input = "x"}, %d: tensor<8x2xf32> {cleave.input = "d"}, %w: tensor<2x4xf32> {cleave.parameter = "w"}, %v: tensor<4x4xf32> {cleave.parameter = "v"}) -> (tensor<f32> {cleave.loss}, tensor<8x4xf32>, tensor<8x4xf32>) attributes {cleave.precision = "bf16"} {
  %e = cleave.exp %x : tensor<8x4xf32>
  %l = cleave.reduce sum %e dims = [0, 1] : (tensor<8x4xf32>) -> tensor<f32>
  %dy = cleave.matmul %d, %w : (tensor<8x2xf32>, tensor<2x4xf32>) -> tensor<8x4xf32>
  %dx = cleave.mul %dy, %e : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %m = cleave.matmul %e, %v : (tensor<8x4xf32>, tensor<4x4xf32>) -> tensor<8x4xf32>
  return %l, %dx, %m : tensor<f32>, tensor<8x4xf32>, tensor<8x4xf32>
}
func.func @f32(%x: tensor<8x4xf32> {cleave.input = "x"}, %d: tensor<8x2xf32> {cleave.input = "d"}, %w: tensor<2x4xf32> {cleave.parameter = "w"}) -> (tensor<f32> {cleave.loss}, tensor<8x4xf32>) {
  %e = cleave.exp %x : tensor<8x4xf32>
  %l = cleave.reduce sum %e dims = [0, 1] : (tensor<8x4xf32>) -> tensor<f32>
  %dy = cleave.matmul %d, %w : (tensor<8x2xf32>, tensor<2x4xf32>) -> tensor<8x4xf32>
  %s = cleave.mul %e, %e : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %dx = cleave.mul %dy, %s : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  return %l, %dx : tensor<f32>, tensor<8x4xf32>
}

// RUN: cleave-opt %s --split-input-file --cleave-narrow-saved | FileCheck %s --enable-var-scope

// A value the forward (what the loss is computed by) makes in f32 and the
// backward reads is held in bf16 across: the forward's readers keep the
// f32 value, the backward's read a widening of the bf16 copy made before
// the first of them. The loss is unchanged.
// CHECK-LABEL: func @saved
// CHECK: %[[Y:.*]] = cleave.gelu %arg0
// CHECK-NEXT: %[[H:.*]] = cleave.cast %[[Y]] : tensor<8xf32> -> tensor<8xbf16>
// CHECK-NEXT: %[[L:.*]] = cleave.reduce sum %[[Y]]
// CHECK-NEXT: %[[W:.*]] = cleave.cast %[[H]] : tensor<8xbf16> -> tensor<8xf32>
// CHECK-NEXT: %[[G:.*]] = cleave.mul %[[W]], %arg1
// CHECK-NEXT: return %[[L]], %[[G]]
func.func @saved(%x: tensor<8xf32>, %d: tensor<8xf32>) -> (tensor<f32> {cleave.loss}, tensor<8xf32>) attributes {cleave.precision = "bf16"} {
  %y = cleave.gelu %x : tensor<8xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<8xf32>) -> tensor<f32>
  %g = cleave.mul %y, %d : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %l, %g : tensor<f32>, tensor<8xf32>
}

// -----

// The bf16 copy a product already reads is the one held.
// CHECK-LABEL: func @reuses_the_products_copy
// CHECK: %[[Y:.*]] = cleave.gelu %arg0
// CHECK-NEXT: %[[H:.*]] = cleave.cast %[[Y]] : tensor<4x8xf32> -> tensor<4x8xbf16>
// CHECK-NEXT: cleave.matmul %[[H]], %arg1
// CHECK-NOT: cleave.cast %[[Y]]
// CHECK: %[[W:.*]] = cleave.cast %[[H]] : tensor<4x8xbf16> -> tensor<4x8xf32>
// CHECK-NEXT: cleave.mul %[[W]], %arg2
func.func @reuses_the_products_copy(%x: tensor<4x8xf32>, %w: tensor<8x2xbf16>, %d: tensor<4x8xf32>) -> (tensor<f32> {cleave.loss}, tensor<4x8xf32>) attributes {cleave.precision = "bf16"} {
  %y = cleave.gelu %x : tensor<4x8xf32>
  %h = cleave.cast %y : tensor<4x8xf32> -> tensor<4x8xbf16>
  %p = cleave.matmul %h, %w : (tensor<4x8xbf16>, tensor<8x2xbf16>) -> tensor<4x2xbf16>
  %pw = cleave.cast %p : tensor<4x2xbf16> -> tensor<4x2xf32>
  %l = cleave.reduce sum %pw dims = [0, 1] : (tensor<4x2xf32>) -> tensor<f32>
  %g = cleave.mul %y, %d : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %l, %g : tensor<f32>, tensor<4x8xf32>
}

// -----

// Left in f32: a statistic (a reduction's result), a value the backward
// compares (a rounding could flip the branch), a value exp reads (its
// error would be an exponent's), a saturating output (tanh's: its
// derivative 1 - y^2 cancels), a returned value, a value only the forward
// reads; and every value of an f32 step.
// CHECK-LABEL: func @left_alone
// CHECK-NOT: cleave.cast
// CHECK: return
// CHECK-LABEL: func @f32_step
// CHECK-NOT: cleave.cast
// CHECK: return
func.func @left_alone(%x: tensor<8xf32>, %d: tensor<8xf32>) -> (tensor<f32> {cleave.loss}, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<f32>, tensor<8xf32>) attributes {cleave.precision = "bf16"} {
  %s = cleave.reduce sum %x dims = [0] : (tensor<8xf32>) -> tensor<f32>
  %y = cleave.gelu %x : tensor<8xf32>
  %z = cleave.gelu %d : tensor<8xf32>
  %r = cleave.neg %x : tensor<8xf32>
  %t = cleave.tanh %x : tensor<8xf32>
  %a = cleave.add %y, %z : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %b = cleave.add %r, %t : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %e = cleave.exp %x : tensor<8xf32>
  %ab = cleave.add %a, %b : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %abe = cleave.mul %ab, %e : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %m = cleave.reduce sum %abe dims = [0] : (tensor<8xf32>) -> tensor<f32>
  %l = cleave.add %m, %s : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %c = cleave.cmp gt, %y, %d : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xi1>
  %sel = cleave.select %c, %d, %x : (tensor<8xi1>, tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %ez = cleave.exp %z : tensor<8xf32>
  %ss = cleave.mul %s, %s : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %tt = cleave.mul %t, %d : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %l, %sel, %ez, %r, %ss, %tt : tensor<f32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<f32>, tensor<8xf32>
}
func.func @f32_step(%x: tensor<8xf32>, %d: tensor<8xf32>) -> (tensor<f32> {cleave.loss}, tensor<8xf32>) {
  %y = cleave.tanh %x : tensor<8xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<8xf32>) -> tensor<f32>
  %g = cleave.mul %y, %d : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %l, %g : tensor<f32>, tensor<8xf32>
}

// -----

// Attention's backward recomputes exp(q k^T - lse) against the forward's
// f32 log-sum-exp: its query stays f32; its value and output, products'
// operands, are held in bf16.
// CHECK-LABEL: func @attention
// CHECK: %[[Q:.*]] = cleave.mul %arg0, %arg0
// CHECK-NOT: cleave.cast %[[Q]]
// CHECK: %[[V:.*]] = cleave.mul %arg2, %arg2
// CHECK-NEXT: %[[H:.*]] = cleave.cast %[[V]] : tensor<1x1x4x8xf32> -> tensor<1x1x4x8xbf16>
// CHECK: %[[W:.*]] = cleave.cast %[[H]] : tensor<1x1x4x8xbf16> -> tensor<1x1x4x8xf32>
// CHECK: cleave.attention_backward %[[Q]], %arg1, %[[W]],
func.func @attention(%q: tensor<1x1x4x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>, %g: tensor<1x1x4x8xf32>) -> (tensor<f32> {cleave.loss}, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) attributes {cleave.precision = "bf16"} {
  %qq = cleave.mul %q, %q : (tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  %vv = cleave.mul %v, %v : (tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  %o, %lse = cleave.attention %qq, %k, %vv scale = 2.500000e-01 : (tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) -> (tensor<1x1x4x8xf32>, tensor<1x1x4xf32>)
  %l = cleave.reduce sum %o dims = [0, 1, 2, 3] : (tensor<1x1x4x8xf32>) -> tensor<f32>
  %dq, %dk, %dv = cleave.attention_backward %qq, %k, %vv, %o, %lse, %g scale = 2.500000e-01 : (tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4xf32>, tensor<1x1x4x8xf32>) -> (tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>)
  return %l, %dq, %dv : tensor<f32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>
}

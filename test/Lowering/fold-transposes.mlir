// RUN: cleave-opt %s --split-input-file --cleave-fold-transposes | FileCheck %s

// nn.Linear as the Python package exports it (torch.onnx without constant
// folding): x W^T through a transpose of W and the reshape that gives it
// the batch dim. The product reads W as it is, transposed.
// CHECK-LABEL: func.func @linear_weight_transposed
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x4xf32>, %[[W:.*]]: tensor<6x4xf32>)
// CHECK-NEXT: %[[R:.*]] = cleave.reshape %[[W]] : tensor<6x4xf32> -> tensor<1x6x4xf32>
// CHECK-NEXT: %[[Y:.*]] = cleave.matmul %[[X]], %[[R]] {transpose_rhs}
// CHECK-NEXT: return %[[Y]]
func.func @linear_weight_transposed(%x: tensor<2x3x4xf32>, %w: tensor<6x4xf32>) -> tensor<2x3x6xf32> {
  %t = cleave.transpose %w perm = [1, 0] : (tensor<6x4xf32>) -> tensor<4x6xf32>
  %r = cleave.reshape %t : tensor<4x6xf32> -> tensor<1x4x6xf32>
  %y = cleave.matmul %x, %r : (tensor<2x3x4xf32>, tensor<1x4x6xf32>) -> tensor<2x3x6xf32>
  return %y : tensor<2x3x6xf32>
}

// -----

// A transposed operand already read transposed: the two cancel. Batched
// operands keep their batch dims; a bf16 copy folds like an f32 one.
// CHECK-LABEL: func.func @transposes_cancel
// CHECK-SAME: (%[[A:.*]]: tensor<5x4x3xbf16>, %[[B:.*]]: tensor<5x4x6xbf16>)
// CHECK-NEXT: %[[Y:.*]] = cleave.matmul %[[A]], %[[B]] {transpose_lhs}
// CHECK-NEXT: return %[[Y]]
func.func @transposes_cancel(%a: tensor<5x4x3xbf16>, %b: tensor<5x4x6xbf16>) -> tensor<5x3x6xbf16> {
  %t = cleave.transpose %b perm = [0, 2, 1] : (tensor<5x4x6xbf16>) -> tensor<5x6x4xbf16>
  %y = cleave.matmul %a, %t {transpose_lhs, transpose_rhs} : (tensor<5x4x3xbf16>, tensor<5x6x4xbf16>) -> tensor<5x3x6xbf16>
  return %y : tensor<5x3x6xbf16>
}

// -----

// Other permutations stay: attention's [b, s, h, d] -> [b, h, d, s] moves a
// batch dim, and a reshape that does more than add unit dims is a new view.
// CHECK-LABEL: func.func @other_transposes_stay
// CHECK-COUNT-3: cleave.transpose
// CHECK-NOT: transpose_
func.func @other_transposes_stay(%q: tensor<2x4x3x8xf32>, %k: tensor<2x4x3x8xf32>, %w: tensor<6x4xf32>, %x: tensor<2x3x12xf32>) -> (tensor<2x3x4x4xf32>, tensor<2x3x2xf32>) {
  %kt = cleave.transpose %k perm = [0, 2, 3, 1] : (tensor<2x4x3x8xf32>) -> tensor<2x3x8x4xf32>
  %q2 = cleave.transpose %q perm = [0, 2, 1, 3] : (tensor<2x4x3x8xf32>) -> tensor<2x3x4x8xf32>
  %s = cleave.matmul %q2, %kt : (tensor<2x3x4x8xf32>, tensor<2x3x8x4xf32>) -> tensor<2x3x4x4xf32>
  %wt = cleave.transpose %w perm = [1, 0] : (tensor<6x4xf32>) -> tensor<4x6xf32>
  %r = cleave.reshape %wt : tensor<4x6xf32> -> tensor<1x12x2xf32>
  %y = cleave.matmul %x, %r : (tensor<2x3x12xf32>, tensor<1x12x2xf32>) -> tensor<2x3x2xf32>
  return %s, %y : tensor<2x3x4x4xf32>, tensor<2x3x2xf32>
}

// -----

// The weight's gradient of x W^T comes out as W^T's, [1, in, out], and is
// transposed back: the product is made as W's instead.
// CHECK-LABEL: func.func @weight_gradient
// CHECK-SAME: (%[[X:.*]]: tensor<1x12x4xbf16>, %[[G:.*]]: tensor<1x12x6xbf16>)
// CHECK-NEXT: %[[P:.*]] = cleave.matmul %[[G]], %[[X]] {transpose_lhs} : (tensor<1x12x6xbf16>, tensor<1x12x4xbf16>) -> tensor<1x6x4xbf16>
// CHECK-NEXT: %[[R:.*]] = cleave.reshape %[[P]] : tensor<1x6x4xbf16> -> tensor<6x4xbf16>
// CHECK-NEXT: return %[[R]]
func.func @weight_gradient(%x: tensor<1x12x4xbf16>, %g: tensor<1x12x6xbf16>) -> tensor<6x4xbf16> {
  %p = cleave.matmul %x, %g {transpose_lhs} : (tensor<1x12x4xbf16>, tensor<1x12x6xbf16>) -> tensor<1x4x6xbf16>
  %r = cleave.reshape %p : tensor<1x4x6xbf16> -> tensor<4x6xbf16>
  %t = cleave.transpose %r perm = [1, 0] : (tensor<4x6xbf16>) -> tensor<6x4xbf16>
  return %t : tensor<6x4xbf16>
}

// -----

// A product read by another op too is kept as it is.
// CHECK-LABEL: func.func @product_read_twice
// CHECK: cleave.transpose
func.func @product_read_twice(%x: tensor<12x4xf32>, %g: tensor<12x6xf32>) -> (tensor<6x4xf32>, tensor<4x6xf32>) {
  %p = cleave.matmul %x, %g {transpose_lhs} : (tensor<12x4xf32>, tensor<12x6xf32>) -> tensor<4x6xf32>
  %t = cleave.transpose %p perm = [1, 0] : (tensor<4x6xf32>) -> tensor<6x4xf32>
  return %t, %p : tensor<6x4xf32>, tensor<4x6xf32>
}

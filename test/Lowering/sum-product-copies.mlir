// RUN: cleave-opt %s --split-input-file --cleave-sum-product-copies | FileCheck %s

// A bias's gradient after the loss sums the bf16 copy the product reads.
// CHECK-LABEL: func.func @bias
// CHECK: %[[C:.*]] = cleave.cast %[[G:.*]] : tensor<4x8xf32> -> tensor<4x8xbf16>
// CHECK: cleave.matmul %[[C]]
// CHECK: %[[W:.*]] = cleave.cast %[[C]] : tensor<4x8xbf16> -> tensor<4x8xf32>
// CHECK: cleave.reduce  sum %[[W]] dims = [0]
// The forward's own sum reads its operand as it is.
// CHECK-LABEL: func.func @forward
// CHECK: %[[FC:.*]] = cleave.cast %arg0 : tensor<4x8xf32> -> tensor<4x8xbf16>
// CHECK: cleave.reduce  sum %arg0 dims = [0, 1]
func.func @bias(%x: tensor<4x8xf32> {cleave.input = "x"}, %w: tensor<8x2xbf16> {cleave.input = "w"}) -> (tensor<f32> {cleave.loss}, tensor<4x2xbf16>, tensor<8xf32>) attributes {cleave.precision = "bf16"} {
  %l = cleave.reduce sum %x dims = [0, 1] : (tensor<4x8xf32>) -> tensor<f32>
  %g = cleave.tanh %x : tensor<4x8xf32>
  %c = cleave.cast %g : tensor<4x8xf32> -> tensor<4x8xbf16>
  %p = cleave.matmul %c, %w : (tensor<4x8xbf16>, tensor<8x2xbf16>) -> tensor<4x2xbf16>
  %b = cleave.reduce sum %g dims = [0] : (tensor<4x8xf32>) -> tensor<8xf32>
  return %l, %p, %b : tensor<f32>, tensor<4x2xbf16>, tensor<8xf32>
}

// -----

func.func @forward(%x: tensor<4x8xf32> {cleave.input = "x"}, %w: tensor<8x2xbf16> {cleave.input = "w"}) -> (tensor<f32> {cleave.loss}, tensor<4x2xbf16>) attributes {cleave.precision = "bf16"} {
  %c = cleave.cast %x : tensor<4x8xf32> -> tensor<4x8xbf16>
  %p = cleave.matmul %c, %w : (tensor<4x8xbf16>, tensor<8x2xbf16>) -> tensor<4x2xbf16>
  %l = cleave.reduce sum %x dims = [0, 1] : (tensor<4x8xf32>) -> tensor<f32>
  return %l, %p : tensor<f32>, tensor<4x2xbf16>
}

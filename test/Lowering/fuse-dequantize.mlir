// RUN: cleave-opt %s --split-input-file --cleave-fuse-dequantize | FileCheck %s --enable-var-scope

// A Linear on an int8 weight with per-row scales, as torch.onnx writes it:
// the forward reads W^T, the input gradient W; both read the int8 bytes,
// and the f32 chain goes.
// CHECK-LABEL: func @linear
// CHECK-SAME: (%[[X:.*]]: tensor<2x16x64xf32>, %[[DY:.*]]: tensor<2x16x32xf32>, %[[Q:.*]]: tensor<32x64xi8>, %[[S:.*]]: tensor<32xf32>)
// CHECK-NOT: cleave.cast
// CHECK-NOT: cleave.mul
// CHECK: %[[Y:.*]] = cleave.matmul_dequant %[[X]], %[[Q]], %[[S]] {transpose_rhs} : (tensor<2x16x64xf32>, tensor<32x64xi8>, tensor<32xf32>) -> tensor<2x16x32xf32>
// CHECK: %[[DX:.*]] = cleave.matmul_dequant %[[DY]], %[[Q]], %[[S]] : (tensor<2x16x32xf32>, tensor<32x64xi8>, tensor<32xf32>) -> tensor<2x16x64xf32>
// CHECK: return %[[Y]], %[[DX]]
func.func @linear(%x: tensor<2x16x64xf32>, %dy: tensor<2x16x32xf32>,
                  %q: tensor<32x64xi8>, %s: tensor<32xf32>)
    -> (tensor<2x16x32xf32>, tensor<2x16x64xf32>) {
  %w = cleave.cast %q : tensor<32x64xi8> -> tensor<32x64xf32>
  %s2 = cleave.reshape %s : tensor<32xf32> -> tensor<32x1xf32>
  %d = cleave.mul %w, %s2 : (tensor<32x64xf32>, tensor<32x1xf32>) -> tensor<32x64xf32>
  %t = cleave.transpose %d perm = [1, 0] : (tensor<32x64xf32>) -> tensor<64x32xf32>
  %r = cleave.reshape %t : tensor<64x32xf32> -> tensor<1x64x32xf32>
  %y = cleave.matmul %x, %r : (tensor<2x16x64xf32>, tensor<1x64x32xf32>) -> tensor<2x16x32xf32>
  %dx = cleave.matmul %dy, %r {transpose_rhs} : (tensor<2x16x32xf32>, tensor<1x64x32xf32>) -> tensor<2x16x64xf32>
  return %y, %dx : tensor<2x16x32xf32>, tensor<2x16x64xf32>
}

// -----

// Per-group scales (GPTQ's groups, as torch.onnx writes them): the weight
// regrouped to [rows, groups, cols / groups], scaled, and flattened back.
// CHECK-LABEL: func @per_group
// CHECK-SAME: (%[[X:.*]]: tensor<8x64xf32>, %[[Q:.*]]: tensor<32x64xi8>, %[[S:.*]]: tensor<32x4xf32>)
// CHECK-NOT: cleave.mul
// CHECK: cleave.matmul_dequant %[[X]], %[[Q]], %[[S]] {transpose_rhs} : (tensor<8x64xf32>, tensor<32x64xi8>, tensor<32x4xf32>) -> tensor<8x32xf32>
func.func @per_group(%x: tensor<8x64xf32>, %q: tensor<32x64xi8>, %s: tensor<32x4xf32>) -> tensor<8x32xf32> {
  %w = cleave.cast %q : tensor<32x64xi8> -> tensor<32x64xf32>
  %g = cleave.reshape %w : tensor<32x64xf32> -> tensor<32x4x16xf32>
  %s3 = cleave.reshape %s : tensor<32x4xf32> -> tensor<32x4x1xf32>
  %d = cleave.mul %g, %s3 : (tensor<32x4x16xf32>, tensor<32x4x1xf32>) -> tensor<32x4x16xf32>
  %f = cleave.reshape %d : tensor<32x4x16xf32> -> tensor<32x64xf32>
  %y = cleave.matmul %x, %f {transpose_rhs} : (tensor<8x64xf32>, tensor<32x64xf32>) -> tensor<8x32xf32>
  return %y : tensor<8x32xf32>
}

// -----

// A frozen bf16 weight widened to f32: the same product, with no scale.
// CHECK-LABEL: func @widened
// CHECK: cleave.matmul_dequant %{{.*}}, %{{.*}} {transpose_rhs} : (tensor<8x64xf32>, tensor<32x64xbf16>) -> tensor<8x32xf32>
// CHECK-NOT: cleave.cast
func.func @widened(%x: tensor<8x64xf32>, %w: tensor<32x64xbf16>) -> tensor<8x32xf32> {
  %f = cleave.cast %w : tensor<32x64xbf16> -> tensor<32x64xf32>
  %y = cleave.matmul %x, %f {transpose_rhs} : (tensor<8x64xf32>, tensor<32x64xf32>) -> tensor<8x32xf32>
  return %y : tensor<8x32xf32>
}

// -----

// A scale per column (not per output channel) and a scaled bf16 weight
// keep their form; a weight whose f32 copy is also returned is still read
// as int8 by its product (the copy stays for the return).
// CHECK-LABEL: func @left_alone
// CHECK: %[[W:.*]] = cleave.cast
// CHECK-COUNT-2: cleave.matmul %
// CHECK: cleave.matmul_dequant %{{.*}}, %{{.*}} {transpose_rhs} : (tensor<8x64xf32>, tensor<32x64xi8>)
// CHECK: return {{.*}}, %[[W]] :
func.func @left_alone(%x: tensor<8x64xf32>, %q: tensor<32x64xi8>,
                      %c: tensor<1x64xf32>, %h: tensor<32x64xbf16>,
                      %r: tensor<32x1xf32>)
    -> (tensor<8x32xf32>, tensor<8x32xf32>, tensor<8x32xf32>, tensor<32x64xf32>) {
  %w = cleave.cast %q : tensor<32x64xi8> -> tensor<32x64xf32>
  %d = cleave.mul %w, %c : (tensor<32x64xf32>, tensor<1x64xf32>) -> tensor<32x64xf32>
  %y = cleave.matmul %x, %d {transpose_rhs} : (tensor<8x64xf32>, tensor<32x64xf32>) -> tensor<8x32xf32>
  %f = cleave.cast %h : tensor<32x64xbf16> -> tensor<32x64xf32>
  %g = cleave.mul %f, %r : (tensor<32x64xf32>, tensor<32x1xf32>) -> tensor<32x64xf32>
  %z = cleave.matmul %x, %g {transpose_rhs} : (tensor<8x64xf32>, tensor<32x64xf32>) -> tensor<8x32xf32>
  %u = cleave.matmul %x, %w {transpose_rhs} : (tensor<8x64xf32>, tensor<32x64xf32>) -> tensor<8x32xf32>
  return %y, %z, %u, %w : tensor<8x32xf32>, tensor<8x32xf32>, tensor<8x32xf32>, tensor<32x64xf32>
}

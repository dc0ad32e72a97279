// RUN: cleave-opt %s --split-input-file --cleave-plan-buffers --cleave-emit-plan -o /dev/null | FileCheck %s

// Every instruction is written through the kernel schema (kernels.def):
// defaults are written out, absent optionals are left out, and an absent
// optional operand is -1.

// CHECK-LABEL: name: "matmul_t"
// CHECK: kernel: "matmul"
// CHECK-NEXT: operands: 0
// CHECK-NEXT: operands: 1
// CHECK-NEXT: results: 2
// CHECK: key: "transpose_a"
// CHECK-NEXT: value {
// CHECK-NEXT: ints: 1
// CHECK: key: "transpose_b"
// CHECK-NEXT: value {
// CHECK-NEXT: ints: 0
func.func @matmul_t(%a: tensor<3x2xf32>, %b: tensor<3x4xf32>) -> tensor<2x4xf32> {
  %0 = cleave.matmul %a, %b {transpose_lhs} : (tensor<3x2xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

// CHECK-LABEL: name: "unary"
// CHECK: kernel: "gelu"
// CHECK: key: "approximate"
// CHECK-NEXT: value {
// CHECK-NEXT: ints: 1
// CHECK: kernel: "leaky_relu"
// CHECK: key: "alpha"
// CHECK-NEXT: value {
// CHECK-NEXT: floats: 0.5
// CHECK: kernel: "cmp_lt"
// CHECK-NOT: attrs
// CHECK: input_bindings
func.func @unary(%x: tensor<2x5xf32>) -> tensor<2x5xi1> {
  %0 = cleave.gelu %x {approximate} : tensor<2x5xf32>
  %1 = cleave.leaky_relu %0 {alpha = 0.5 : f32} : tensor<2x5xf32>
  %2 = cleave.cmp lt, %1, %x : (tensor<2x5xf32>, tensor<2x5xf32>) -> tensor<2x5xi1>
  return %2 : tensor<2x5xi1>
}

// -----

// The reduction's kind picks the kernel; layer_norm's missing bias is -1.
// CHECK-LABEL: name: "norms"
// CHECK: kernel: "reduce_prod"
// CHECK: key: "axes"
// CHECK-NEXT: value {
// CHECK-NEXT: ints: 1
// CHECK-NEXT: }
// CHECK: kernel: "layer_norm"
// CHECK-NEXT: operands: 0
// CHECK-NEXT: operands: 1
// CHECK-NEXT: operands: -1
// CHECK: key: "axis"
// CHECK-NEXT: value {
// CHECK-NEXT: ints: 1
// CHECK: key: "epsilon"
// CHECK-NEXT: value {
// CHECK-NEXT: floats: {{9.99999.*e-06}}
func.func @norms(%x: tensor<4x8xf32>, %g: tensor<8xf32>) -> (tensor<4xf32>, tensor<4x8xf32>) {
  %0 = cleave.reduce prod %x dims = [1] : (tensor<4x8xf32>) -> tensor<4xf32>
  %1:3 = cleave.layer_norm %x scale %g axis = 1 eps = 1.0e-05 : (tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>, tensor<4x1xf32>)
  return %0, %1#0 : tensor<4xf32>, tensor<4x8xf32>
}

// -----

// conv2d without bias: its window and groups; avg_pool2d's divisor rule.
// CHECK-LABEL: name: "windows"
// CHECK: kernel: "conv2d"
// CHECK-NEXT: operands: 0
// CHECK-NEXT: operands: 1
// CHECK-NEXT: operands: -1
// CHECK: key: "dilations"
// CHECK-NEXT: value {
// CHECK-NEXT: ints: 1
// CHECK-NEXT: ints: 2
// CHECK: key: "groups"
// CHECK-NEXT: value {
// CHECK-NEXT: ints: 2
// CHECK: key: "pads"
// CHECK-NEXT: value {
// CHECK-NEXT: ints: 1
// CHECK-NEXT: ints: 0
// CHECK-NEXT: ints: 1
// CHECK-NEXT: ints: 1
// CHECK: key: "strides"
// CHECK: kernel: "avg_pool2d"
// CHECK: key: "count_include_pad"
// CHECK-NEXT: value {
// CHECK-NEXT: ints: 1
// CHECK: key: "kernel"
// CHECK-NEXT: value {
// CHECK-NEXT: ints: 3
// CHECK-NEXT: ints: 3
func.func @windows(%x: tensor<2x4x7x6xf32>, %w: tensor<6x2x3x2xf32>) -> tensor<2x6x2x2xf32> {
  %0 = cleave.conv2d %x, %w strides = [2, 2] pads = [1, 0, 1, 1] dilations = [1, 2] groups = 2 : (tensor<2x4x7x6xf32>, tensor<6x2x3x2xf32>) -> tensor<2x6x4x3xf32>
  %1 = cleave.avg_pool2d %0 kernel = [3, 3] strides = [2, 2] pads = [1, 1, 1, 1] dilations = [1, 1] {count_include_pad} : tensor<2x6x4x3xf32> -> tensor<2x6x2x2xf32>
  return %1 : tensor<2x6x2x2xf32>
}

// -----

// check_index's optional ignore; gather without row sharding has no
// shard_axes; a large splat is a fill, not a stored constant.
// CHECK-LABEL: name: "indices"
// CHECK: kernel: "check_index"
// CHECK: key: "bound"
// CHECK-NEXT: value {
// CHECK-NEXT: ints: 5
// CHECK: key: "ignore"
// CHECK-NEXT: value {
// CHECK-NEXT: ints: -100
// CHECK: kernel: "gather"
// CHECK-NOT: shard_axes
// CHECK: key: "axis"
// CHECK-NOT: shard_axes
// CHECK: kernel: "fill"
// CHECK: key: "value"
// CHECK-NEXT: value {
// CHECK-NEXT: floats: 0.5
func.func @indices(%t: tensor<5x3xf32>, %i: tensor<2x4xi64>) -> (tensor<2x4x3xf32>, tensor<100xf32>) {
  %c = cleave.check_index %i bound = 5 ignore = -100 : tensor<2x4xi64>
  %0 = cleave.gather %t, %c axis = 0 : (tensor<5x3xf32>, tensor<2x4xi64>) -> tensor<2x4x3xf32>
  %1 = cleave.constant dense<0.5> : tensor<100xf32>
  return %0, %1 : tensor<2x4x3xf32>, tensor<100xf32>
}

// -----

// The step's results are made in the caller's tensors: the value returned
// at positions 1 and 2 is OUTPUT storage of output 1 (its first), and the
// arena holds only the exp.
// CHECK-LABEL: name: "outputs"
// CHECK: storage: INPUT
// CHECK: values {
// CHECK-NOT: storage
// CHECK: values {
// CHECK: storage: OUTPUT
// CHECK-NEXT: index: 1
// CHECK: outputs: 0
// CHECK-NEXT: outputs: 2
// CHECK-NEXT: outputs: 2
// CHECK: arena_bytes: 64
func.func @outputs(%x: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) {
  %0 = cleave.exp %x : tensor<2xf32>
  %1 = cleave.tanh %0 : tensor<2xf32>
  return %x, %1, %1 : tensor<2xf32>, tensor<2xf32>, tensor<2xf32>
}

// -----

// A collective's attributes: the mesh axes and the two dimensions an
// all_to_all moves its split between.
// CHECK-LABEL: name: "exchange"
// CHECK: kernel: "all_to_all"
// CHECK: key: "axes"
// CHECK-NEXT: value {
// CHECK-NEXT: ints: 0
// CHECK: key: "concat_dim"
// CHECK-NEXT: value {
// CHECK-NEXT: ints: 1
// CHECK: key: "split_dim"
// CHECK-NEXT: value {
// CHECK-NEXT: ints: 2
module attributes {cleave.mesh = array<i64: 4>} {
  func.func @exchange(%x: tensor<4x160x256xf32>) -> tensor<4x640x64xf32> {
    %0 = cleave.all_to_all %x axes = [0] split_dim = 2 concat_dim = 1 : tensor<4x160x256xf32> -> tensor<4x640x64xf32>
    return %0 : tensor<4x640x64xf32>
  }
}

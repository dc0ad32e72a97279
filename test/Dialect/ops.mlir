// RUN: cleave-opt %s --split-input-file | cleave-opt --split-input-file | FileCheck %s --enable-var-scope

// CHECK-LABEL: func @elementwise
func.func @elementwise(%a: tensor<4x8xf32>, %b: tensor<1x8xf32>, %i: tensor<4x1xi64>, %c: tensor<4x8xi1>) -> tensor<4x8xf32> {
  // CHECK: %[[ADD:.*]] = cleave.add %{{.*}}, %{{.*}} : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
  %0 = cleave.add %a, %b : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
  // CHECK: cleave.sub
  %1 = cleave.sub %0, %b : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
  // CHECK: cleave.mul
  %2 = cleave.mul %1, %a : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: cleave.div
  %3 = cleave.div %2, %b : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
  // CHECK: cleave.pow
  %4 = cleave.pow %3, %b : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
  // CHECK: cleave.max
  %5 = cleave.max %4, %a : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: cleave.min
  %6 = cleave.min %5, %a : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: cleave.add %{{.*}}, %{{.*}} : (tensor<4x1xi64>, tensor<4x1xi64>) -> tensor<4x1xi64>
  %7 = cleave.add %i, %i : (tensor<4x1xi64>, tensor<4x1xi64>) -> tensor<4x1xi64>
  // CHECK: cleave.cmp lt, %{{.*}}, %{{.*}} : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xi1>
  %8 = cleave.cmp lt, %6, %b : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xi1>
  // CHECK: cleave.and
  %9 = cleave.and %8, %c : (tensor<4x8xi1>, tensor<4x8xi1>) -> tensor<4x8xi1>
  // CHECK: cleave.or
  %10 = cleave.or %9, %c : (tensor<4x8xi1>, tensor<4x8xi1>) -> tensor<4x8xi1>
  // CHECK: cleave.xor
  %11 = cleave.xor %10, %c : (tensor<4x8xi1>, tensor<4x8xi1>) -> tensor<4x8xi1>
  // CHECK: cleave.not %{{.*}} : tensor<4x8xi1>
  %12 = cleave.not %11 : tensor<4x8xi1>
  // CHECK: cleave.select %{{.*}}, %{{.*}}, %{{.*}} : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
  %13 = cleave.select %12, %6, %b : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
  return %13 : tensor<4x8xf32>
}

// -----

// CHECK-LABEL: func @unary
func.func @unary(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // CHECK: cleave.neg
  %0 = cleave.neg %x : tensor<2x3xf32>
  // CHECK: cleave.abs
  %1 = cleave.abs %0 : tensor<2x3xf32>
  // CHECK: cleave.exp
  %2 = cleave.exp %1 : tensor<2x3xf32>
  // CHECK: cleave.log
  %3 = cleave.log %2 : tensor<2x3xf32>
  // CHECK: cleave.sqrt
  %4 = cleave.sqrt %3 : tensor<2x3xf32>
  // CHECK: cleave.rsqrt
  %5 = cleave.rsqrt %4 : tensor<2x3xf32>
  // CHECK: cleave.reciprocal
  %6 = cleave.reciprocal %5 : tensor<2x3xf32>
  // CHECK: cleave.tanh
  %7 = cleave.tanh %6 : tensor<2x3xf32>
  // CHECK: cleave.sigmoid
  %8 = cleave.sigmoid %7 : tensor<2x3xf32>
  // CHECK: cleave.relu
  %9 = cleave.relu %8 : tensor<2x3xf32>
  // CHECK: cleave.erf
  %10 = cleave.erf %9 : tensor<2x3xf32>
  // CHECK: cleave.sin
  %11 = cleave.sin %10 : tensor<2x3xf32>
  // CHECK: cleave.cos
  %12 = cleave.cos %11 : tensor<2x3xf32>
  // CHECK: cleave.gelu %{{.*}} {approximate} : tensor<2x3xf32>
  %13 = cleave.gelu %12 {approximate} : tensor<2x3xf32>
  // CHECK: cleave.gelu %{{.*}} : tensor<2x3xf32>
  %14 = cleave.gelu %13 : tensor<2x3xf32>
  // CHECK: cleave.leaky_relu %{{.*}} {alpha = 1.000000e-01 : f32} : tensor<2x3xf32>
  %15 = cleave.leaky_relu %14 {alpha = 0.1 : f32} : tensor<2x3xf32>
  return %15 : tensor<2x3xf32>
}

// -----

// CHECK-LABEL: func @casts_and_constants
func.func @casts_and_constants(%x: tensor<3xi64>) -> (tensor<3xf32>, tensor<2xf32>) {
  // CHECK: cleave.cast %{{.*}} : tensor<3xi64> -> tensor<3xf32>
  %0 = cleave.cast %x : tensor<3xi64> -> tensor<3xf32>
  // CHECK: cleave.constant dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>
  %1 = cleave.constant dense<[1.0, 2.0]> : tensor<2xf32>
  return %0, %1 : tensor<3xf32>, tensor<2xf32>
}

// -----

// CHECK-LABEL: func @contractions
func.func @contractions(%x: tensor<8x16x64xf32>, %w: tensor<1x256x64xf32>, %g: tensor<64xf32>, %b: tensor<64xf32>) -> (tensor<8x16x256xf32>, tensor<8x1x64xf32>, tensor<8x16x64xf32>, tensor<8x16x64xf32>, tensor<8x16x64xf32>) {
  // CHECK: cleave.matmul %{{.*}}, %{{.*}} {transpose_rhs} : (tensor<8x16x64xf32>, tensor<1x256x64xf32>) -> tensor<8x16x256xf32>
  %0 = cleave.matmul %x, %w {transpose_rhs} : (tensor<8x16x64xf32>, tensor<1x256x64xf32>) -> tensor<8x16x256xf32>
  // CHECK: cleave.reduce sum %{{.*}} dims = [1] {keep_dims} : (tensor<8x16x64xf32>) -> tensor<8x1x64xf32>
  %1 = cleave.reduce sum %x dims = [1] {keep_dims} : (tensor<8x16x64xf32>) -> tensor<8x1x64xf32>
  // CHECK: cleave.softmax %{{.*}} axis = 2 : tensor<8x16x64xf32>
  %2 = cleave.softmax %x axis = 2 : tensor<8x16x64xf32>
  // CHECK: cleave.log_softmax %{{.*}} axis = 1 : tensor<8x16x64xf32>
  %3 = cleave.log_softmax %x axis = 1 : tensor<8x16x64xf32>
  // CHECK: cleave.layer_norm %{{.*}} scale %{{.*}} bias %{{.*}} axis = 2 eps = 9.99999974E-6
  %4:3 = cleave.layer_norm %x scale %g bias %b axis = 2 eps = 1.0e-05 : (tensor<8x16x64xf32>, tensor<64xf32>, tensor<64xf32>) -> (tensor<8x16x64xf32>, tensor<8x16x1xf32>, tensor<8x16x1xf32>)
  return %0, %1, %2, %3, %4#0 : tensor<8x16x256xf32>, tensor<8x1x64xf32>, tensor<8x16x64xf32>, tensor<8x16x64xf32>, tensor<8x16x64xf32>
}

// -----

// CHECK-LABEL: func @layer_norm_backward
func.func @layer_norm_backward(%x: tensor<4x8xbf16>, %m: tensor<4x1xf32>, %r: tensor<4x1xf32>, %g: tensor<4x8xf32>, %s: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>) {
  // CHECK: cleave.layer_norm_backward %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} scale %{{.*}} axis = 1
  %0:3 = cleave.layer_norm_backward %x, %m, %r, %g scale %s axis = 1 : (tensor<4x8xbf16>, tensor<4x1xf32>, tensor<4x1xf32>, tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  // CHECK: cleave.layer_norm_backward %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} axis = 1 :
  %1:3 = cleave.layer_norm_backward %x, %m, %r, %g axis = 1 : (tensor<4x8xbf16>, tensor<4x1xf32>, tensor<4x1xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  return %0#0, %1#2 : tensor<4x8xf32>, tensor<8xf32>
}

// -----

// CHECK-LABEL: func @layer_norm_without_affine
func.func @layer_norm_without_affine(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK: cleave.layer_norm %{{.*}} axis = 1 eps
  %0:3 = cleave.layer_norm %x axis = 1 eps = 1.0e-05 : (tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>, tensor<4x1xf32>)
  return %0#0 : tensor<4x8xf32>
}

// -----

// CHECK-LABEL: func @batch_norm
func.func @batch_norm(%x: tensor<2x3x4x4xf32>, %s: tensor<3xf32>) -> tensor<2x3x4x4xf32> {
  // CHECK: cleave.batch_norm %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} eps = 9.99999974E-6
  %0 = cleave.batch_norm %x, %s, %s, %s, %s eps = 1.0e-05 : (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<2x3x4x4xf32>
  return %0 : tensor<2x3x4x4xf32>
}

// -----

// CHECK-LABEL: func @data_movement
func.func @data_movement(%x: tensor<8x16x256xf32>, %t: tensor<100x64xf32>, %ids: tensor<8x16xi64>) -> (tensor<8x4x16x64xf32>, tensor<4x16x256xf32>, tensor<8x16x64xf32>, tensor<8x32x256xf32>, tensor<8x16x256xf32>) {
  // CHECK: cleave.reshape %{{.*}} : tensor<8x16x256xf32> -> tensor<8x16x4x64xf32>
  %0 = cleave.reshape %x : tensor<8x16x256xf32> -> tensor<8x16x4x64xf32>
  // CHECK: cleave.transpose %{{.*}} perm = [0, 2, 1, 3] : (tensor<8x16x4x64xf32>) -> tensor<8x4x16x64xf32>
  %1 = cleave.transpose %0 perm = [0, 2, 1, 3] : (tensor<8x16x4x64xf32>) -> tensor<8x4x16x64xf32>
  // CHECK: cleave.slice %{{.*}} starts = [7, 0, 0] steps = [-2, 1, 1] : tensor<8x16x256xf32> -> tensor<4x16x256xf32>
  %2 = cleave.slice %x starts = [7, 0, 0] steps = [-2, 1, 1] : tensor<8x16x256xf32> -> tensor<4x16x256xf32>
  // CHECK: cleave.gather %{{.*}}, %{{.*}} axis = 0 : (tensor<100x64xf32>, tensor<8x16xi64>) -> tensor<8x16x64xf32>
  %3 = cleave.gather %t, %ids axis = 0 : (tensor<100x64xf32>, tensor<8x16xi64>) -> tensor<8x16x64xf32>
  // CHECK: cleave.concat %{{.*}}, %{{.*}} axis = 1 : (tensor<8x16x256xf32>, tensor<8x16x256xf32>) -> tensor<8x32x256xf32>
  %4 = cleave.concat %x, %x axis = 1 : (tensor<8x16x256xf32>, tensor<8x16x256xf32>) -> tensor<8x32x256xf32>
  %s = cleave.slice %x starts = [0, 0, 0] steps = [1, 1, 1] : tensor<8x16x256xf32> -> tensor<8x1x256xf32>
  // CHECK: cleave.broadcast %{{.*}} : tensor<8x1x256xf32> -> tensor<8x16x256xf32>
  %5 = cleave.broadcast %s : tensor<8x1x256xf32> -> tensor<8x16x256xf32>
  return %1, %2, %3, %4, %5 : tensor<8x4x16x64xf32>, tensor<4x16x256xf32>, tensor<8x16x64xf32>, tensor<8x32x256xf32>, tensor<8x16x256xf32>
}

// -----

// CHECK-LABEL: func @conv_and_pool
func.func @conv_and_pool(%x: tensor<2x3x8x8xf32>, %w: tensor<16x3x3x3xf32>, %b: tensor<16xf32>) -> (tensor<2x16x8x8xf32>, tensor<2x3x4x4xf32>, tensor<2x3x3x3xf32>) {
  // CHECK: cleave.conv2d %{{.*}}, %{{.*}} bias %{{.*}} strides = [1, 1] pads = [1, 1, 1, 1] dilations = [1, 1] groups = 1
  %0 = cleave.conv2d %x, %w bias %b strides = [1, 1] pads = [1, 1, 1, 1] dilations = [1, 1] groups = 1 : (tensor<2x3x8x8xf32>, tensor<16x3x3x3xf32>, tensor<16xf32>) -> tensor<2x16x8x8xf32>
  // CHECK: cleave.max_pool2d %{{.*}} kernel = [2, 2] strides = [2, 2] pads = [0, 0, 0, 0] dilations = [1, 1] : tensor<2x3x8x8xf32> -> tensor<2x3x4x4xf32>
  %1 = cleave.max_pool2d %x kernel = [2, 2] strides = [2, 2] pads = [0, 0, 0, 0] dilations = [1, 1] : tensor<2x3x8x8xf32> -> tensor<2x3x4x4xf32>
  // Ceil mode: (8 - 3) / 2 + 1 = 3 rounded up is 4, but floor gives 3.
  // CHECK: cleave.avg_pool2d %{{.*}} kernel = [3, 3] strides = [2, 2] pads = [0, 0, 0, 0] dilations = [1, 1] {count_include_pad} : tensor<2x3x8x8xf32> -> tensor<2x3x3x3xf32>
  %2 = cleave.avg_pool2d %x kernel = [3, 3] strides = [2, 2] pads = [0, 0, 0, 0] dilations = [1, 1] {count_include_pad} : tensor<2x3x8x8xf32> -> tensor<2x3x3x3xf32>
  return %0, %1, %2 : tensor<2x16x8x8xf32>, tensor<2x3x4x4xf32>, tensor<2x3x3x3xf32>
}

// -----

// CHECK-LABEL: func @training_ops
func.func @training_ops(%x: tensor<2x3x8x8xf32>, %w: tensor<16x3x3x3xf32>, %g: tensor<2x16x8x8xf32>, %p: tensor<2x3x4x4xf32>, %t: tensor<8x16x64xf32>, %ids: tensor<8x16xi64>, %s: tensor<4x3xf32>, %step: tensor<i64>) -> (tensor<2x3x8x8xf32>, tensor<16x3x3x3xf32>, tensor<2x3x8x8xf32>, tensor<2x3x8x8xf32>, tensor<1000x64xf32>, tensor<4x8xf32>, tensor<8x16xf32>) {
  // CHECK: cleave.conv2d_backward_input %{{.*}}, %{{.*}} strides = [1, 1] pads = [1, 1, 1, 1] dilations = [1, 1] groups = 1 : (tensor<2x16x8x8xf32>, tensor<16x3x3x3xf32>) -> tensor<2x3x8x8xf32>
  %0 = cleave.conv2d_backward_input %g, %w strides = [1, 1] pads = [1, 1, 1, 1] dilations = [1, 1] groups = 1 : (tensor<2x16x8x8xf32>, tensor<16x3x3x3xf32>) -> tensor<2x3x8x8xf32>
  // CHECK: cleave.conv2d_backward_filter %{{.*}}, %{{.*}} strides = [1, 1] pads = [1, 1, 1, 1] dilations = [1, 1] groups = 1 : (tensor<2x3x8x8xf32>, tensor<2x16x8x8xf32>) -> tensor<16x3x3x3xf32>
  %1 = cleave.conv2d_backward_filter %x, %g strides = [1, 1] pads = [1, 1, 1, 1] dilations = [1, 1] groups = 1 : (tensor<2x3x8x8xf32>, tensor<2x16x8x8xf32>) -> tensor<16x3x3x3xf32>
  // CHECK: cleave.max_pool2d_backward %{{.*}}, %{{.*}} kernel = [2, 2] strides = [2, 2] pads = [0, 0, 0, 0] dilations = [1, 1] : (tensor<2x3x8x8xf32>, tensor<2x3x4x4xf32>) -> tensor<2x3x8x8xf32>
  %2 = cleave.max_pool2d_backward %x, %p kernel = [2, 2] strides = [2, 2] pads = [0, 0, 0, 0] dilations = [1, 1] : (tensor<2x3x8x8xf32>, tensor<2x3x4x4xf32>) -> tensor<2x3x8x8xf32>
  // CHECK: cleave.avg_pool2d_backward %{{.*}} kernel = [2, 2] strides = [2, 2] pads = [0, 0, 0, 0] dilations = [1, 1] {count_include_pad} : tensor<2x3x4x4xf32> -> tensor<2x3x8x8xf32>
  %3 = cleave.avg_pool2d_backward %p kernel = [2, 2] strides = [2, 2] pads = [0, 0, 0, 0] dilations = [1, 1] {count_include_pad} : tensor<2x3x4x4xf32> -> tensor<2x3x8x8xf32>
  // CHECK: cleave.scatter_add %{{.*}}, %{{.*}} axis = 0 : (tensor<8x16x64xf32>, tensor<8x16xi64>) -> tensor<1000x64xf32>
  %4 = cleave.scatter_add %t, %ids axis = 0 : (tensor<8x16x64xf32>, tensor<8x16xi64>) -> tensor<1000x64xf32>
  // CHECK: cleave.slice_scatter %{{.*}} starts = [0, 2] steps = [1, 2] : tensor<4x3xf32> -> tensor<4x8xf32>
  %5 = cleave.slice_scatter %s starts = [0, 2] steps = [1, 2] : tensor<4x3xf32> -> tensor<4x8xf32>
  // CHECK: cleave.random_uniform %{{.*}} seed = 42 stream = 3 : tensor<i64> -> tensor<8x16xf32>
  %6 = cleave.random_uniform %step seed = 42 stream = 3 : tensor<i64> -> tensor<8x16xf32>
  return %0, %1, %2, %3, %4, %5, %6 : tensor<2x3x8x8xf32>, tensor<16x3x3x3xf32>, tensor<2x3x8x8xf32>, tensor<2x3x8x8xf32>, tensor<1000x64xf32>, tensor<4x8xf32>, tensor<8x16xf32>
}

// -----

// CHECK-LABEL: func.func @attention
func.func @attention(%q: tensor<2x4x8x16xf32>, %k: tensor<2x2x6x16xf32>, %v: tensor<2x2x6x8xf32>, %b: tensor<2x1x1x6xf32>, %g: tensor<2x4x8x8xf32>) -> tensor<2x4x8x16xf32> {
  // CHECK: %[[O:.*]], %[[L:.*]] = cleave.attention %{{.*}}, %{{.*}}, %{{.*}} bias %{{.*}} scale = 2.500000e-01 causal : (tensor<2x4x8x16xf32>, tensor<2x2x6x16xf32>, tensor<2x2x6x8xf32>, tensor<2x1x1x6xf32>) -> (tensor<2x4x8x8xf32>, tensor<2x4x8xf32>)
  %o, %lse = cleave.attention %q, %k, %v bias %b scale = 2.500000e-01 causal : (tensor<2x4x8x16xf32>, tensor<2x2x6x16xf32>, tensor<2x2x6x8xf32>, tensor<2x1x1x6xf32>) -> (tensor<2x4x8x8xf32>, tensor<2x4x8xf32>)
  // CHECK: cleave.attention_backward %{{.*}}, %{{.*}}, %{{.*}}, %[[O]], %[[L]], %{{.*}} scale = 2.500000e-01 :
  %dq, %dk, %dv = cleave.attention_backward %q, %k, %v, %o, %lse, %g scale = 2.500000e-01 : (tensor<2x4x8x16xf32>, tensor<2x2x6x16xf32>, tensor<2x2x6x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8x8xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x2x6x16xf32>, tensor<2x2x6x8xf32>)
  return %dq : tensor<2x4x8x16xf32>
}

// -----

// CHECK-LABEL: func.func @cross_entropy
func.func @cross_entropy(%x: tensor<8x512xf32>, %l: tensor<8x1xi64>, %ids: tensor<1x512xi64>, %m: tensor<8x1xf32>) -> tensor<8x512xf32> {
  // CHECK: %[[S:.*]], %[[T:.*]] = cleave.cross_entropy %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} axis = 1 : (tensor<8x512xf32>, tensor<8x1xi64>, tensor<1x512xi64>, tensor<8x1xf32>) -> (tensor<8x1xf32>, tensor<8x1xf32>)
  %s, %t = cleave.cross_entropy %x, %l, %ids, %m axis = 1 : (tensor<8x512xf32>, tensor<8x1xi64>, tensor<1x512xi64>, tensor<8x1xf32>) -> (tensor<8x1xf32>, tensor<8x1xf32>)
  // CHECK: cleave.cross_entropy_backward %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[S]], %[[T]] axis = 1
  %g = cleave.cross_entropy_backward %x, %l, %ids, %m, %s, %t axis = 1 : (tensor<8x512xf32>, tensor<8x1xi64>, tensor<1x512xi64>, tensor<8x1xf32>, tensor<8x1xf32>, tensor<8x1xf32>) -> tensor<8x512xf32>
  return %g : tensor<8x512xf32>
}

// -----

// CHECK-LABEL: func @all_to_all
module attributes {cleave.mesh = array<i64: 2, 4>} {
  func.func @all_to_all(%x: tensor<8x2x16xf32>) -> tensor<2x8x16xf32> {
    // CHECK: cleave.all_to_all %{{.*}} axes = [1] split_dim = 0 concat_dim = 1 : tensor<8x2x16xf32> -> tensor<2x8x16xf32>
    %0 = cleave.all_to_all %x axes = [1] split_dim = 0 concat_dim = 1 : tensor<8x2x16xf32> -> tensor<2x8x16xf32>
    return %0 : tensor<2x8x16xf32>
  }
}

// RUN: cleave-opt %s --split-input-file --cleave-partition=tp=4 | FileCheck %s

// Expert parallelism's combine. The experts' output h is split by expert
// (w holds whole experts per rank), and the combine contracts the experts
// and their capacity slots (a [g, s, e * c] combine tensor against
// [g, e * c, d]). Contracted where it lies, the result is a partial sum:
// an all-reduce of [4, 512, 256] (2 x 3/4 of its 2 MiB on the wire). An
// all_to_all instead moves h's split to a dimension the combine keeps
// (3/4 of each rank's 640 KiB chunk) and the result, computed split, is
// gathered whole (3/4 of 2 MiB): less, so the partitioner takes it.
// CHECK-LABEL: func.func @combine
// CHECK: %[[H:.*]] = cleave.matmul
// CHECK: %[[X:.*]] = cleave.all_to_all %{{.*}} axes = [0] split_dim = 2 concat_dim = 1
// CHECK-SAME: reads it split along dim 2, not 1
// CHECK-SAME: tensor<4x160x256xf32> -> tensor<4x640x64xf32>
// CHECK: %[[Y:.*]] = cleave.matmul %arg1, %[[X]] : (tensor<4x512x640xf32>, tensor<4x640x64xf32>) -> tensor<4x512x64xf32>
// CHECK: %[[W:.*]] = cleave.all_gather %[[Y]] axes = [0] dim = 2
// CHECK-SAME: is computed split after an all_to_all and gathered whole
// CHECK: cleave.tanh %[[W]] : tensor<4x512x256xf32>
// CHECK-NOT: cleave.all_reduce
// CHECK: return
func.func @combine(%xe: tensor<4x640x256xf32> {cleave.input = "xe"}, %c: tensor<4x512x640xf32> {cleave.input = "c"}, %w: tensor<4x256x256xf32> {cleave.layout = #cleave.layout<dim = 0>, cleave.parameter = "w"}) -> (tensor<f32> {cleave.loss}) attributes {cleave.layouts_for = 4 : i64} {
  %h = cleave.matmul %xe, %w : (tensor<4x640x256xf32>, tensor<4x256x256xf32>) -> tensor<4x640x256xf32>
  %h4 = cleave.reshape %h : tensor<4x640x256xf32> -> tensor<4x4x160x256xf32>
  %t = cleave.transpose %h4 perm = [1, 0, 2, 3] : (tensor<4x4x160x256xf32>) -> tensor<4x4x160x256xf32>
  %g = cleave.reshape %t : tensor<4x4x160x256xf32> -> tensor<4x640x256xf32>
  %y = cleave.matmul %c, %g : (tensor<4x512x640xf32>, tensor<4x640x256xf32>) -> tensor<4x512x256xf32>
  %r = cleave.tanh %y : tensor<4x512x256xf32>
  %l = cleave.reduce sum %r dims = [0, 1, 2] : (tensor<4x512x256xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// The same combine on 64 tokens a group (64 KiB): both collectives'
// latency outweighs the bytes saved, and the partial sum is all-reduced.
// CHECK-LABEL: func.func @small
// CHECK-NOT: cleave.all_to_all
// CHECK: cleave.all_reduce
// CHECK-NOT: cleave.all_to_all
func.func @small(%xe: tensor<4x80x64xf32> {cleave.input = "xe"}, %c: tensor<4x64x80xf32> {cleave.input = "c"}, %w: tensor<4x64x64xf32> {cleave.layout = #cleave.layout<dim = 0>, cleave.parameter = "w"}) -> (tensor<f32> {cleave.loss}) attributes {cleave.layouts_for = 4 : i64} {
  %h = cleave.matmul %xe, %w : (tensor<4x80x64xf32>, tensor<4x64x64xf32>) -> tensor<4x80x64xf32>
  %h4 = cleave.reshape %h : tensor<4x80x64xf32> -> tensor<4x4x20x64xf32>
  %t = cleave.transpose %h4 perm = [1, 0, 2, 3] : (tensor<4x4x20x64xf32>) -> tensor<4x4x20x64xf32>
  %g = cleave.reshape %t : tensor<4x4x20x64xf32> -> tensor<4x80x64xf32>
  %y = cleave.matmul %c, %g : (tensor<4x64x80xf32>, tensor<4x80x64xf32>) -> tensor<4x64x64xf32>
  %r = cleave.tanh %y : tensor<4x64x64xf32>
  %l = cleave.reduce sum %r dims = [0, 1, 2] : (tensor<4x64x64xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// The 2 MiB combine with 6 groups and 250 features: 4 ranks divide no
// factor the combine keeps, an all_to_all cannot split one evenly, and the
// partial sum is all-reduced.
// CHECK-LABEL: func.func @indivisible
// CHECK-NOT: cleave.all_to_all
// CHECK: cleave.all_reduce
// CHECK-NOT: cleave.all_to_all
func.func @indivisible(%xe: tensor<4x960x250xf32> {cleave.input = "xe"}, %c: tensor<6x512x640xf32> {cleave.input = "c"}, %w: tensor<4x250x250xf32> {cleave.layout = #cleave.layout<dim = 0>, cleave.parameter = "w"}) -> (tensor<f32> {cleave.loss}) attributes {cleave.layouts_for = 4 : i64} {
  %h = cleave.matmul %xe, %w : (tensor<4x960x250xf32>, tensor<4x250x250xf32>) -> tensor<4x960x250xf32>
  %h4 = cleave.reshape %h : tensor<4x960x250xf32> -> tensor<4x6x160x250xf32>
  %t = cleave.transpose %h4 perm = [1, 0, 2, 3] : (tensor<4x6x160x250xf32>) -> tensor<6x4x160x250xf32>
  %g = cleave.reshape %t : tensor<6x4x160x250xf32> -> tensor<6x640x250xf32>
  %y = cleave.matmul %c, %g : (tensor<6x512x640xf32>, tensor<6x640x250xf32>) -> tensor<6x512x250xf32>
  %r = cleave.tanh %y : tensor<6x512x250xf32>
  %l = cleave.reduce sum %r dims = [0, 1, 2] : (tensor<6x512x250xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// --cleave-bucket-gradients alone: each bucket of marked all-reduces
// becomes one flat all-reduce after its last member, cut apart for the
// members' users; a bucket of one keeps its all-reduce and loses the mark.
// RUN: cleave-opt %s --split-input-file --verify-diagnostics --cleave-bucket-gradients | FileCheck %s

// CHECK-LABEL: func.func @pair
// CHECK-NEXT: %[[A:.*]] = cleave.reshape %arg0 : tensor<4x4xf32> -> tensor<16xf32>
// CHECK-NEXT: %[[B:.*]] = cleave.reshape %arg1 : tensor<8xf32> -> tensor<8xf32>
// CHECK-NEXT: %[[ALL:.*]] = cleave.concat %[[A]], %[[B]] axis = 0 : (tensor<16xf32>, tensor<8xf32>) -> tensor<24xf32>
// CHECK-NEXT: %[[SUM:.*]] = cleave.all_reduce sum %[[ALL]] axes = [0] {cleave.phase = "backward", cleave.reason = "one bucket"} : tensor<24xf32>
// CHECK-NEXT: %[[P0:.*]] = cleave.slice %[[SUM]] starts = [0] steps = [1] : tensor<24xf32> -> tensor<16xf32>
// CHECK-NEXT: %[[G0:.*]] = cleave.reshape %[[P0]] : tensor<16xf32> -> tensor<4x4xf32>
// CHECK-NEXT: %[[P1:.*]] = cleave.slice %[[SUM]] starts = [16] steps = [1] : tensor<24xf32> -> tensor<8xf32>
// CHECK-NEXT: %[[G1:.*]] = cleave.reshape %[[P1]] : tensor<8xf32> -> tensor<8xf32>
// CHECK-NEXT: %[[ONE:.*]] = cleave.all_reduce sum %arg2 axes = [0] {cleave.phase = "backward", cleave.reason = "alone"} : tensor<2xf32>
// CHECK-NEXT: return %[[G0]], %[[G1]], %[[ONE]]
func.func @pair(%g1: tensor<4x4xf32>, %g2: tensor<8xf32>, %g3: tensor<2xf32>) -> (tensor<4x4xf32>, tensor<8xf32>, tensor<2xf32>) {
  %a = cleave.all_reduce sum %g1 axes = [0] {cleave.bucket = 0 : i64, cleave.phase = "backward", cleave.reason = "one bucket"} : tensor<4x4xf32>
  %b = cleave.all_reduce sum %g2 axes = [0] {cleave.bucket = 0 : i64, cleave.phase = "backward", cleave.reason = "one bucket"} : tensor<8xf32>
  %c = cleave.all_reduce sum %g3 axes = [0] {cleave.bucket = 1 : i64, cleave.phase = "backward", cleave.reason = "alone"} : tensor<2xf32>
  return %a, %b, %c : tensor<4x4xf32>, tensor<8xf32>, tensor<2xf32>
}

// -----

// A bucket's members must be summed alike.
func.func @mixed(%g1: tensor<4xf32>, %g2: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %a = cleave.all_reduce sum %g1 axes = [0] {cleave.bucket = 0 : i64} : tensor<4xf32>
  // expected-error @+1 {{gradient bucket 0 mixes all-reduces}}
  %b = cleave.all_reduce max %g2 axes = [0] {cleave.bucket = 0 : i64} : tensor<4xf32>
  return %a, %b : tensor<4xf32>, tensor<4xf32>
}

// -----

func.func @not_a_sum(%g: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{cleave.bucket marks a gradient's all-reduce, not cleave.relu}}
  %a = cleave.relu %g {cleave.bucket = 0 : i64} : tensor<4xf32>
  return %a : tensor<4xf32>
}

// -----

// A member read before the bucket's last member cannot be summed there.
func.func @read_early(%g1: tensor<4xf32>, %g2: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %a = cleave.all_reduce sum %g1 axes = [0] {cleave.bucket = 0 : i64} : tensor<4xf32>
  // expected-error @+1 {{reads a member of gradient bucket 0 before the bucket's last member}}
  %c = cleave.relu %a : tensor<4xf32>
  %b = cleave.all_reduce sum %g2 axes = [0] {cleave.bucket = 0 : i64} : tensor<4xf32>
  return %c, %b : tensor<4xf32>, tensor<4xf32>
}

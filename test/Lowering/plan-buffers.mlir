// RUN: cleave-opt %s --split-input-file --cleave-plan-buffers | FileCheck %s --enable-var-scope

// A dead value's bytes are reused; a live one's are not; the result is made
// in the caller's tensor, not the arena.
// CHECK-LABEL: func @chain
// CHECK-SAME: cleave.arena_bytes = 128
func.func @chain(%x: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK: cleave.exp %{{.*}} {cleave.offsets = array<i64: 0>}
  %0 = cleave.exp %x : tensor<4xf32>
  // CHECK: cleave.tanh %{{.*}} {cleave.offsets = array<i64: 64>}
  %1 = cleave.tanh %0 : tensor<4xf32>
  // CHECK: cleave.exp %{{.*}} {cleave.offsets = array<i64: 0>}
  %2 = cleave.exp %1 : tensor<4xf32>
  // CHECK: cleave.tanh %{{.*}} {cleave.offsets = array<i64: -1>}
  %3 = cleave.tanh %2 : tensor<4xf32>
  return %3 : tensor<4xf32>
}

// -----

// A view keeps its root alive: %0 may not be overwritten while %v is used.
// CHECK-LABEL: func @view_extends_lifetime
func.func @view_extends_lifetime(%x: tensor<2x2xf32>) -> tensor<4xf32> {
  // CHECK: %[[A:.*]] = cleave.exp %{{.*}} {cleave.offsets = array<i64: 0>}
  %0 = cleave.exp %x : tensor<2x2xf32>
  // CHECK: cleave.reshape %[[A]] {cleave.offsets = array<i64: -1>}
  %v = cleave.reshape %0 : tensor<2x2xf32> -> tensor<4xf32>
  // CHECK: cleave.tanh %{{.*}} {cleave.offsets = array<i64: 64>}
  %1 = cleave.tanh %x : tensor<2x2xf32>
  // CHECK: cleave.exp %{{.*}} {cleave.offsets = array<i64: 128>}
  %2 = cleave.exp %v : tensor<4xf32>
  %3 = cleave.reshape %1 : tensor<2x2xf32> -> tensor<4xf32>
  %4 = cleave.add %2, %3 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %4 : tensor<4xf32>
}

// -----

// Larger values are placed first; constants take no arena space; a result
// returned twice is made once, in the first output's tensor.
// CHECK-LABEL: func @sizes
// CHECK-SAME: cleave.arena_bytes = 4224
func.func @sizes(%x: tensor<1024xf32>, %y: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  // CHECK: cleave.constant
  // CHECK-NOT: cleave.offsets
  %c = cleave.constant dense<1.0> : tensor<4xf32>
  // CHECK: cleave.add %{{.*}} {cleave.offsets = array<i64: 4096>}
  %0 = cleave.add %y, %c : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  // CHECK: cleave.exp %{{.*}} {cleave.offsets = array<i64: 0>}
  %1 = cleave.exp %x : tensor<1024xf32>
  %2 = cleave.slice %1 starts = [0] steps = [1] : tensor<1024xf32> -> tensor<4xf32>
  // CHECK: cleave.mul %{{.*}} {cleave.offsets = array<i64: -1>}
  %3 = cleave.mul %0, %2 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %3, %3 : tensor<4xf32>, tensor<4xf32>
}

// -----

// Multi-result ops get one offset per result.
// CHECK-LABEL: func @multi_result
func.func @multi_result(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>) {
  // CHECK: cleave.layer_norm {{.*}} {cleave.offsets = array<i64: -1, 0, -1>}
  %0:3 = cleave.layer_norm %x axis = 1 eps = 1.0e-05 : (tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>, tensor<4x1xf32>)
  return %0#0, %0#2 : tensor<4x8xf32>, tensor<4x1xf32>
}

// RUN: cleave-opt %s --split-input-file --cleave-sink-widening="near=1" | FileCheck %s --enable-var-scope
// RUN: cleave-opt %s --split-input-file --cleave-sink-widening | FileCheck %s --check-prefix=NEAR

// A widened value read again past `near` ops (here 1) is widened again
// there, so no f32 copy lives long; within 64 ops (the default) the
// readers share the one copy.
// NEAR-LABEL: func @shared
// NEAR-COUNT-1: cleave.cast
// NEAR-NOT: cleave.cast
// CHECK-LABEL: func @shared
// CHECK: %[[W0:.*]] = cleave.cast %arg0 : tensor<8xbf16> -> tensor<8xf32>
// CHECK-NEXT: %[[A:.*]] = cleave.exp %[[W0]]
// CHECK-NEXT: %[[B:.*]] = cleave.tanh %[[A]]
// CHECK-NEXT: %[[W1:.*]] = cleave.cast %arg0 : tensor<8xbf16> -> tensor<8xf32>
// CHECK-NEXT: %[[C:.*]] = cleave.mul %[[W1]], %[[B]]
// CHECK-NEXT: return %[[C]], %[[W1]]
func.func @shared(%h: tensor<8xbf16>) -> (tensor<8xf32>, tensor<8xf32>) {
  %w = cleave.cast %h : tensor<8xbf16> -> tensor<8xf32>
  %a = cleave.exp %w : tensor<8xf32>
  %b = cleave.tanh %a : tensor<8xf32>
  %c = cleave.mul %w, %b : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %c, %w : tensor<8xf32>, tensor<8xf32>
}

// -----

// A rounding (f32 -> bf16) and a widening read once are left as they are.
// CHECK-LABEL: func @left_alone
// NEAR-LABEL: func @left_alone
// CHECK-COUNT-2: cleave.cast
// CHECK-NOT: cleave.cast
func.func @left_alone(%x: tensor<8xf32>, %h: tensor<8xbf16>) -> (tensor<8xbf16>, tensor<8xbf16>, tensor<8xf32>) {
  %r = cleave.cast %x : tensor<8xf32> -> tensor<8xbf16>
  %w = cleave.cast %h : tensor<8xbf16> -> tensor<8xf32>
  %e = cleave.exp %w : tensor<8xf32>
  return %r, %r, %e : tensor<8xbf16>, tensor<8xbf16>, tensor<8xf32>
}

// -----

// A widening made where its source is, with another op between it and its
// reader, is moved next to the reader.
// CHECK-LABEL: func @next_to_reader
// CHECK: cleave.matmul
// CHECK-NEXT: %[[W:.*]] = cleave.cast %arg0 : tensor<4x4xbf16> -> tensor<4x4xf32>
// CHECK-NEXT: cleave.exp %[[W]]
func.func @next_to_reader(%h: tensor<4x4xbf16>, %x: tensor<4x4xbf16>) -> (tensor<4x4xbf16>, tensor<4x4xf32>) {
  %w = cleave.cast %h : tensor<4x4xbf16> -> tensor<4x4xf32>
  %m = cleave.matmul %x, %h : (tensor<4x4xbf16>, tensor<4x4xbf16>) -> tensor<4x4xbf16>
  %e = cleave.exp %w : tensor<4x4xf32>
  return %m, %e : tensor<4x4xbf16>, tensor<4x4xf32>
}

// -----

// layer_norm_backward widens its bf16 input and gradient as it reads them:
// it takes them as they are, and a widening no other op reads is gone; the
// f32 reader of the gradient keeps its copy.
// CHECK-LABEL: func @read_narrow
// NEAR-LABEL: func @read_narrow
// CHECK-NOT: cleave.cast %arg0
// CHECK: %[[G:.*]] = cleave.cast %arg3 : tensor<4x8xbf16> -> tensor<4x8xf32>
// CHECK-NEXT: cleave.exp %[[G]]
// CHECK: cleave.layer_norm_backward %arg0, %arg1, %arg2, %arg3 axis = 1 : (tensor<4x8xbf16>, tensor<4x1xf32>, tensor<4x1xf32>, tensor<4x8xbf16>)
func.func @read_narrow(%x: tensor<4x8xbf16>, %m: tensor<4x1xf32>, %r: tensor<4x1xf32>, %g: tensor<4x8xbf16>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %xw = cleave.cast %x : tensor<4x8xbf16> -> tensor<4x8xf32>
  %gw = cleave.cast %g : tensor<4x8xbf16> -> tensor<4x8xf32>
  %e = cleave.exp %gw : tensor<4x8xf32>
  %0:3 = cleave.layer_norm_backward %xw, %m, %r, %gw axis = 1 : (tensor<4x8xf32>, tensor<4x1xf32>, tensor<4x1xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  return %0#0, %e : tensor<4x8xf32>, tensor<4x8xf32>
}

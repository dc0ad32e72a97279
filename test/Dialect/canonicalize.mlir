// RUN: cleave-opt %s --split-input-file --canonicalize | FileCheck %s

// repeat_interleave(x, 2, dim = 1) as torch.onnx exports it: each unit
// slice along dim 1 unsqueezed, expanded and merged, then concatenated in
// order. It is x repeated in place: one reshape, broadcast and reshape.
// CHECK-LABEL: func.func @repeat_interleave
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x5xf32>)
// CHECK-NEXT: %[[U:.*]] = cleave.reshape %[[X]] : tensor<2x3x5xf32> -> tensor<2x3x1x5xf32>
// CHECK-NEXT: %[[B:.*]] = cleave.broadcast %[[U]] : tensor<2x3x1x5xf32> -> tensor<2x3x2x5xf32>
// CHECK-NEXT: %[[R:.*]] = cleave.reshape %[[B]] : tensor<2x3x2x5xf32> -> tensor<2x6x5xf32>
// CHECK-NEXT: return %[[R]]
func.func @repeat_interleave(%x: tensor<2x3x5xf32>) -> tensor<2x6x5xf32> {
  %s0 = cleave.slice %x starts = [0, 0, 0] steps = [1, 1, 1] : tensor<2x3x5xf32> -> tensor<2x1x5xf32>
  %s1 = cleave.slice %x starts = [0, 1, 0] steps = [1, 1, 1] : tensor<2x3x5xf32> -> tensor<2x1x5xf32>
  %s2 = cleave.slice %x starts = [0, 2, 0] steps = [1, 1, 1] : tensor<2x3x5xf32> -> tensor<2x1x5xf32>
  %u0 = cleave.reshape %s0 : tensor<2x1x5xf32> -> tensor<2x1x1x5xf32>
  %u1 = cleave.reshape %s1 : tensor<2x1x5xf32> -> tensor<2x1x1x5xf32>
  %u2 = cleave.reshape %s2 : tensor<2x1x5xf32> -> tensor<2x1x1x5xf32>
  %b0 = cleave.broadcast %u0 : tensor<2x1x1x5xf32> -> tensor<2x1x2x5xf32>
  %b1 = cleave.broadcast %u1 : tensor<2x1x1x5xf32> -> tensor<2x1x2x5xf32>
  %b2 = cleave.broadcast %u2 : tensor<2x1x1x5xf32> -> tensor<2x1x2x5xf32>
  %r0 = cleave.reshape %b0 : tensor<2x1x2x5xf32> -> tensor<2x2x5xf32>
  %r1 = cleave.reshape %b1 : tensor<2x1x2x5xf32> -> tensor<2x2x5xf32>
  %r2 = cleave.reshape %b2 : tensor<2x1x2x5xf32> -> tensor<2x2x5xf32>
  %c = cleave.concat %r0, %r1, %r2 axis = 1 : (tensor<2x2x5xf32>, tensor<2x2x5xf32>, tensor<2x2x5xf32>) -> tensor<2x6x5xf32>
  return %c : tensor<2x6x5xf32>
}

// -----

// Out of order (or a slice missing) it is a permutation, not a repeat.
// CHECK-LABEL: func.func @out_of_order
// CHECK: cleave.concat
func.func @out_of_order(%x: tensor<2x2x5xf32>) -> tensor<2x4x5xf32> {
  %s0 = cleave.slice %x starts = [0, 0, 0] steps = [1, 1, 1] : tensor<2x2x5xf32> -> tensor<2x1x5xf32>
  %s1 = cleave.slice %x starts = [0, 1, 0] steps = [1, 1, 1] : tensor<2x2x5xf32> -> tensor<2x1x5xf32>
  %u0 = cleave.reshape %s0 : tensor<2x1x5xf32> -> tensor<2x1x1x5xf32>
  %u1 = cleave.reshape %s1 : tensor<2x1x5xf32> -> tensor<2x1x1x5xf32>
  %b0 = cleave.broadcast %u0 : tensor<2x1x1x5xf32> -> tensor<2x1x2x5xf32>
  %b1 = cleave.broadcast %u1 : tensor<2x1x1x5xf32> -> tensor<2x1x2x5xf32>
  %r0 = cleave.reshape %b0 : tensor<2x1x2x5xf32> -> tensor<2x2x5xf32>
  %r1 = cleave.reshape %b1 : tensor<2x1x2x5xf32> -> tensor<2x2x5xf32>
  %c = cleave.concat %r1, %r0 axis = 1 : (tensor<2x2x5xf32>, tensor<2x2x5xf32>) -> tensor<2x4x5xf32>
  return %c : tensor<2x4x5xf32>
}

// -----

// Pieces repeated a different number of times are not one repeat.
// CHECK-LABEL: func.func @uneven
// CHECK: cleave.concat
func.func @uneven(%x: tensor<2x2x5xf32>) -> tensor<2x5x5xf32> {
  %s0 = cleave.slice %x starts = [0, 0, 0] steps = [1, 1, 1] : tensor<2x2x5xf32> -> tensor<2x1x5xf32>
  %s1 = cleave.slice %x starts = [0, 1, 0] steps = [1, 1, 1] : tensor<2x2x5xf32> -> tensor<2x1x5xf32>
  %u0 = cleave.reshape %s0 : tensor<2x1x5xf32> -> tensor<2x1x1x5xf32>
  %u1 = cleave.reshape %s1 : tensor<2x1x5xf32> -> tensor<2x1x1x5xf32>
  %b0 = cleave.broadcast %u0 : tensor<2x1x1x5xf32> -> tensor<2x1x2x5xf32>
  %b1 = cleave.broadcast %u1 : tensor<2x1x1x5xf32> -> tensor<2x1x3x5xf32>
  %r0 = cleave.reshape %b0 : tensor<2x1x2x5xf32> -> tensor<2x2x5xf32>
  %r1 = cleave.reshape %b1 : tensor<2x1x3x5xf32> -> tensor<2x3x5xf32>
  %c = cleave.concat %r0, %r1 axis = 1 : (tensor<2x2x5xf32>, tensor<2x3x5xf32>) -> tensor<2x5x5xf32>
  return %c : tensor<2x5x5xf32>
}

// -----

// Widening a float is exact, so rounding it back is the value itself; the
// other way round (f32 through bf16) loses bits and stays.
// CHECK-LABEL: func.func @cast_round_trips
// CHECK-SAME: (%[[H:.*]]: tensor<4xbf16>, %[[F:.*]]: tensor<4xf32>, %[[G:.*]]: tensor<4xf16>)
// CHECK: %[[N:.*]] = cleave.cast %[[F]] : tensor<4xf32> -> tensor<4xbf16>
// CHECK: %[[W:.*]] = cleave.cast %[[N]] : tensor<4xbf16> -> tensor<4xf32>
// CHECK: %[[G16:.*]] = cleave.cast %[[G]] : tensor<4xf16> -> tensor<4xbf16>
// CHECK: %[[G2:.*]] = cleave.cast %[[G16]] : tensor<4xbf16> -> tensor<4xf16>
// CHECK: return %[[H]], %[[W]], %[[G]], %[[G2]]
func.func @cast_round_trips(%h: tensor<4xbf16>, %f: tensor<4xf32>, %g: tensor<4xf16>) -> (tensor<4xbf16>, tensor<4xf32>, tensor<4xf16>, tensor<4xf16>) {
  %0 = cleave.cast %h : tensor<4xbf16> -> tensor<4xf32>
  %1 = cleave.cast %0 : tensor<4xf32> -> tensor<4xbf16>
  %2 = cleave.cast %f : tensor<4xf32> -> tensor<4xbf16>
  %3 = cleave.cast %2 : tensor<4xbf16> -> tensor<4xf32>
  %4 = cleave.cast %g : tensor<4xf16> -> tensor<4xf64>
  %5 = cleave.cast %4 : tensor<4xf64> -> tensor<4xf16>
  %6 = cleave.cast %g : tensor<4xf16> -> tensor<4xbf16>
  %7 = cleave.cast %6 : tensor<4xbf16> -> tensor<4xf16>
  return %1, %3, %5, %7 : tensor<4xbf16>, tensor<4xf32>, tensor<4xf16>, tensor<4xf16>
}

// -----

// An int8 weight as the importer reads it (i8 -> i32, its compute type)
// and the model's Cast to float: one conversion, i8 -> f32, which
// --cleave-fuse-dequantize then finds. A narrowing in between is kept.
// CHECK-LABEL: func @int8_widened
// CHECK-NEXT: %[[F:.*]] = cleave.cast %arg0 : tensor<4xi8> -> tensor<4xf32>
// CHECK-NEXT: %[[N:.*]] = cleave.cast %arg1 : tensor<4xi32> -> tensor<4xi8>
// CHECK-NEXT: %[[G:.*]] = cleave.cast %[[N]] : tensor<4xi8> -> tensor<4xf32>
// CHECK-NEXT: return %[[F]], %[[G]]
func.func @int8_widened(%q: tensor<4xi8>, %i: tensor<4xi32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %w = cleave.cast %q : tensor<4xi8> -> tensor<4xi32>
  %f = cleave.cast %w : tensor<4xi32> -> tensor<4xf32>
  %n = cleave.cast %i : tensor<4xi32> -> tensor<4xi8>
  %g = cleave.cast %n : tensor<4xi8> -> tensor<4xf32>
  return %f, %g : tensor<4xf32>, tensor<4xf32>
}

// RUN: cleave-opt %s --cleave-mixed-precision | FileCheck %s
// RUN: cleave-opt %s --cleave-mixed-precision --canonicalize | FileCheck %s --check-prefix=CANON
// RUN: cleave-opt %s --cleave-mixed-precision="precision=fp16" | FileCheck %s --check-prefix=FP16
// RUN: not cleave-opt %s --cleave-mixed-precision="precision=fp8" 2>&1 | FileCheck %s --check-prefix=BAD

// One rounded copy of the weight serves the forward product and the
// backward's (the gradient of x reads w again); each product's result is
// rounded once and widened for the f32 ops that read it; a product read by
// another product passes its bf16 value on without a round trip; the f32
// elementwise work is left alone.
// CHECK-LABEL: func.func @mlp
// CHECK-SAME: attributes {cleave.precision = "bf16"}
// CHECK-DAG: %[[W:.*]] = cleave.cast %arg1 : tensor<8x8xf32> -> tensor<8x8xbf16>
// CHECK-DAG: %[[X:.*]] = cleave.cast %arg0 : tensor<4x8xf32> -> tensor<4x8xbf16>
// CHECK: %[[H:.*]] = cleave.matmul %[[X]], %[[W]] : (tensor<4x8xbf16>, tensor<8x8xbf16>) -> tensor<4x8xbf16>
// CHECK: %[[HW:.*]] = cleave.cast %[[H]] : tensor<4x8xbf16> -> tensor<4x8xf32>
// CHECK: %[[Y:.*]] = cleave.matmul %[[H]], %[[W]] : (tensor<4x8xbf16>, tensor<8x8xbf16>) -> tensor<4x8xbf16>
// CHECK: cleave.cast %[[Y]] : tensor<4x8xbf16> -> tensor<4x8xf32>
// CHECK: cleave.exp %[[HW]] : tensor<4x8xf32>
// CHECK-NOT: cleave.cast %arg1
// CANON-LABEL: func.func @mlp
// CANON-COUNT-4: cleave.cast
// CANON-NOT: cleave.cast
func.func @mlp(%x: tensor<4x8xf32> {cleave.input = "x"}, %w: tensor<8x8xf32> {cleave.parameter = "w"}) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %h = cleave.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %y = cleave.matmul %h, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %e = cleave.exp %h : tensor<4x8xf32>
  %s = cleave.add %y, %e : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %s, %y : tensor<4x8xf32>, tensor<4x8xf32>
}

// Convolutions and their adjoints (bias included) run in bf16 too.
// CHECK-LABEL: func.func @conv
// CANON-LABEL: func.func @conv
// CHECK: cleave.conv2d {{.*}} : (tensor<1x2x4x4xbf16>, tensor<3x2x3x3xbf16>, tensor<3xbf16>) -> tensor<1x3x4x4xbf16>
// CHECK: cleave.conv2d_backward_input {{.*}} -> tensor<1x2x4x4xbf16>
// CHECK: cleave.conv2d_backward_filter {{.*}} -> tensor<3x2x3x3xbf16>
func.func @conv(%x: tensor<1x2x4x4xf32>, %w: tensor<3x2x3x3xf32>, %b: tensor<3xf32>, %g: tensor<1x3x4x4xf32>) -> (tensor<1x3x4x4xf32>, tensor<1x2x4x4xf32>, tensor<3x2x3x3xf32>) {
  %y = cleave.conv2d %x, %w bias %b strides = [1, 1] pads = [1, 1, 1, 1] dilations = [1, 1] groups = 1 : (tensor<1x2x4x4xf32>, tensor<3x2x3x3xf32>, tensor<3xf32>) -> tensor<1x3x4x4xf32>
  %dx = cleave.conv2d_backward_input %g, %w strides = [1, 1] pads = [1, 1, 1, 1] dilations = [1, 1] groups = 1 : (tensor<1x3x4x4xf32>, tensor<3x2x3x3xf32>) -> tensor<1x2x4x4xf32>
  %dw = cleave.conv2d_backward_filter %x, %g strides = [1, 1] pads = [1, 1, 1, 1] dilations = [1, 1] groups = 1 : (tensor<1x2x4x4xf32>, tensor<1x3x4x4xf32>) -> tensor<3x2x3x3xf32>
  return %y, %dx, %dw : tensor<1x3x4x4xf32>, tensor<1x2x4x4xf32>, tensor<3x2x3x3xf32>
}

// A gradient made by one product is returned as its bf16 value, moved
// before it is widened (the update reads the widening); one that sums two
// uses of the weight stays f32.
// CHECK-LABEL: func.func @gradients
// CHECK-SAME: -> (tensor<8x4xbf16> {cleave.gradient = "w"}, tensor<4x8xf32> {cleave.gradient = "v"}, tensor<8x4xf32>)
// CHECK: %[[P:.*]] = cleave.matmul {{.*}} -> tensor<4x8xbf16>
// CHECK: %[[T:.*]] = cleave.transpose %[[P]] perm = [1, 0] : (tensor<4x8xbf16>) -> tensor<8x4xbf16>
// CHECK: %[[TW:.*]] = cleave.cast %[[T]] : tensor<8x4xbf16> -> tensor<8x4xf32>
// CHECK: %[[U:.*]] = cleave.sub %arg3, %[[TW]]
// CHECK: return %[[T]], %{{.*}}, %[[U]]
func.func @gradients(%x: tensor<4x4xf32>, %g: tensor<4x8xf32>, %h: tensor<4x8xf32>, %w: tensor<8x4xf32>)
    -> (tensor<8x4xf32> {cleave.gradient = "w"}, tensor<4x8xf32> {cleave.gradient = "v"}, tensor<8x4xf32>) {
  %p = cleave.matmul %x, %g {transpose_lhs} : (tensor<4x4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %t = cleave.transpose %p perm = [1, 0] : (tensor<4x8xf32>) -> tensor<8x4xf32>
  %q = cleave.matmul %x, %h {transpose_lhs} : (tensor<4x4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %sum = cleave.add %p, %q : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %u = cleave.sub %w, %t : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  return %t, %sum, %u : tensor<8x4xf32>, tensor<4x8xf32>, tensor<8x4xf32>
}

// Attention's products read bf16 q, k, v (one copy each, shared by the
// forward and the backward) and the output's gradient; the mask stays f32
// and every result f32.
// CHECK-LABEL: func.func @attention
// CHECK-DAG: %[[Q:.*]] = cleave.cast %arg0 : tensor<1x2x4x8xf32> -> tensor<1x2x4x8xbf16>
// CHECK-DAG: %[[K:.*]] = cleave.cast %arg1 : tensor<1x2x4x8xf32> -> tensor<1x2x4x8xbf16>
// CHECK-DAG: %[[V:.*]] = cleave.cast %arg2 : tensor<1x2x4x8xf32> -> tensor<1x2x4x8xbf16>
// CHECK-DAG: %[[G:.*]] = cleave.cast %arg4 : tensor<1x2x4x8xf32> -> tensor<1x2x4x8xbf16>
// CHECK: %[[O:.*]], %[[L:.*]] = cleave.attention %[[Q]], %[[K]], %[[V]] bias %arg3 {{.*}} -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>)
// CHECK: cleave.attention_backward %[[Q]], %[[K]], %[[V]], %[[O]], %[[L]], %[[G]] bias %arg3 {{.*}} -> (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>)
// FP16-LABEL: func.func @attention
// FP16: cleave.attention %arg0, %arg1, %arg2
func.func @attention(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>, %m: tensor<1x1x1x4xf32>, %g: tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) {
  %o, %lse = cleave.attention %q, %k, %v bias %m scale = 5.000000e-01 : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x1x1x4xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>)
  %dq, %dk, %dv = cleave.attention_backward %q, %k, %v, %o, %lse, %g bias %m scale = 5.000000e-01 : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4xf32>, tensor<1x2x4x8xf32>, tensor<1x1x1x4xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>)
  return %o, %dq : tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>
}

// A slice of a product's result is cut from its bf16 value (no second
// rounding); a slice of another f32 value is rounded alone, not its whole
// source.
// CHECK-LABEL: func.func @slices
// CHECK: %[[P:.*]] = cleave.matmul {{.*}} -> tensor<4x8xbf16>
// CHECK: %[[S:.*]] = cleave.slice %[[P]] starts = [0, 0] steps = [1, 1] : tensor<4x8xbf16> -> tensor<4x4xbf16>
// CHECK: cleave.matmul %[[S]]
// CHECK: %[[E:.*]] = cleave.slice %arg2 starts = [0, 0] steps = [1, 1] : tensor<4x8xf32> -> tensor<4x4xf32>
// CHECK: %[[R:.*]] = cleave.cast %[[E]] : tensor<4x4xf32> -> tensor<4x4xbf16>
// CHECK: cleave.matmul %[[R]]
func.func @slices(%x: tensor<4x4xf32>, %w: tensor<4x8xf32>, %h: tensor<4x8xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>) {
  %p = cleave.matmul %x, %w : (tensor<4x4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %s = cleave.slice %p starts = [0, 0] steps = [1, 1] : tensor<4x8xf32> -> tensor<4x4xf32>
  %q = cleave.matmul %s, %x : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %e = cleave.slice %h starts = [0, 0] steps = [1, 1] : tensor<4x8xf32> -> tensor<4x4xf32>
  %r = cleave.matmul %e, %x : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %q, %r : tensor<4x4xf32>, tensor<4x4xf32>
}

// BAD: precision must be bf16 or fp16, not 'fp8'

// Data parallelism sums each weight's gradient over dp where the backward
// pass finishes it, in buckets of at least gradient-bucket-bytes (by
// default the cost model's: 1.25 MB), so the sums can overlap the rest of
// the backward pass. Here two gradients of 64 bytes (w2's is finished
// first, as backward passes run) and one of 32 (b).
// The partition pass prices the buckets and marks each gradient's
// all-reduce with its bucket; --cleave-bucket-gradients sums each bucket as
// one.
// RUN: cleave-opt %s --cleave-partition-data="dp=2 gradient-bucket-bytes=64" --cleave-bucket-gradients | FileCheck %s --check-prefix=EACH
// RUN: cleave-opt %s --cleave-partition-data="dp=2 gradient-bucket-bytes=100" --cleave-bucket-gradients | FileCheck %s --check-prefix=PAIR
// RUN: cleave-opt %s --cleave-partition-data="dp=2" --cleave-bucket-gradients | FileCheck %s --check-prefix=ONE
// RUN: cleave-opt %s --cleave-partition-data="dp=2" | FileCheck %s --check-prefix=MARKS
// Before a tp pass each gradient is summed alone, where it is finished.
// RUN: cleave-opt %s --cleave-partition-data="dp=2 tp=2" --cleave-partition="tp=2" --cleave-bucket-gradients | FileCheck %s --check-prefix=MESH

// A bucket of 64 bytes is full with each weight's gradient: each summed
// right after it; b's (32 bytes) goes when the last gradient is finished.
// EACH-LABEL: func.func @step
// EACH: %[[G2:.*]] = cleave.matmul %{{.*}}, %{{.*}} {transpose_lhs} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
// EACH-NEXT: cleave.all_reduce sum %[[G2]] axes = [0] {{.*}}cleave.phase = "backward"
// EACH: %[[G1:.*]] = cleave.matmul %{{.*}}, %{{.*}} {transpose_lhs} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
// EACH-NEXT: cleave.all_reduce sum %[[G1]] axes = [0] {{.*}}cleave.phase = "backward"
// EACH: %[[GB:.*]] = cleave.reduce sum %{{.*}} dims = [0] : (tensor<1x8xf32>) -> tensor<8xf32>
// EACH-NEXT: cleave.all_reduce sum %[[GB]] axes = [0] {{.*}}cleave.phase = "backward"{{.*}} : tensor<8xf32>
// EACH: return

// 100 bytes: w2's gradient opens the bucket, w1's fills it; both summed as
// one flat tensor of 32 floats right after w1's.
// PAIR: %[[G2:.*]] = cleave.matmul %{{.*}}, %{{.*}} {transpose_lhs} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
// PAIR-NOT: cleave.all_reduce
// PAIR: %[[G1:.*]] = cleave.matmul %{{.*}}, %{{.*}} {transpose_lhs} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
// PAIR-NEXT: cleave.reshape
// PAIR-NEXT: cleave.reshape
// PAIR-NEXT: cleave.concat
// PAIR-NEXT: cleave.all_reduce sum %{{.*}} axes = [0] {{.*}}one bucket{{.*}} : tensor<32xf32>

// By default the three are one bucket, summed when the last is finished.
// ONE: %[[GB:.*]] = cleave.reduce sum %{{.*}} dims = [0] : (tensor<1x8xf32>) -> tensor<8xf32>
// ONE: cleave.all_reduce sum %{{.*}} axes = [0] {{.*}}one bucket{{.*}} : tensor<40xf32>
// ONE-NOT: cleave.all_reduce sum {{.*}} : tensor<{{4x4|8}}xf32>

// Unmerged, the default's one bucket is three marked all-reduces, where
// the last gradient (b's) is finished, in the bucket's order.
// MARKS: %[[GB:.*]] = cleave.reduce sum %{{.*}} dims = [0] : (tensor<1x8xf32>) -> tensor<8xf32>
// MARKS-NEXT: cleave.all_reduce sum %[[GB]] axes = [0] {cleave.bucket = 0 : i64, {{.*}}one bucket: the gradient of parameter 'b' and those of 'w2', 'w1'{{.*}}for 'b', each dp rank holds it whole{{.*}} : tensor<8xf32>
// MARKS-NEXT: cleave.all_reduce sum %{{.*}} axes = [0] {cleave.bucket = 0 : i64, {{.*}} : tensor<4x4xf32>
// MARKS-NEXT: cleave.all_reduce sum %{{.*}} axes = [0] {cleave.bucket = 0 : i64, {{.*}} : tensor<4x4xf32>

// MESH: %[[G2:.*]] = cleave.matmul %{{.*}}, %{{.*}} {transpose_lhs}
// MESH-NEXT: cleave.all_reduce sum %[[G2]] axes = [0]
func.func @step(%x: tensor<4x4xf32> {cleave.input = "x"}, %w1: tensor<4x4xf32> {cleave.parameter = "w1"}, %w2: tensor<4x4xf32> {cleave.parameter = "w2"}, %b: tensor<8xf32> {cleave.parameter = "b"}) -> (tensor<f32> {cleave.loss}, tensor<4x4xf32> {cleave.gradient = "w1"}, tensor<4x4xf32> {cleave.gradient = "w2"}, tensor<8xf32> {cleave.gradient = "b"}) {
  %h = cleave.matmul %x, %w1 : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %y = cleave.matmul %h, %w2 : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %l = cleave.reduce mean %y dims = [0, 1] : (tensor<4x4xf32>) -> tensor<f32>
  %g2 = cleave.matmul %h, %y {transpose_lhs} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %dh = cleave.matmul %y, %w2 {transpose_rhs} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %g1 = cleave.matmul %x, %dh {transpose_lhs} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %r = cleave.reshape %dh : tensor<4x4xf32> -> tensor<2x8xf32>
  %gb = cleave.reduce sum %r dims = [0] : (tensor<2x8xf32>) -> tensor<8xf32>
  return %l, %g1, %g2, %gb : tensor<f32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<8xf32>
}

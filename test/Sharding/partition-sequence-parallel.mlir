// RUN: cleave-opt %s --cleave-autodiff --cleave-optimizer="optimizer=sgd lr=0.1" --canonicalize --cse --cleave-partition="tp=2 plan=%S/Inputs/sequence-parallel-plan.txt sequence-parallel=true" | FileCheck %s
// RUN: cleave-opt %s --cleave-autodiff --cleave-optimizer="optimizer=sgd lr=0.1" --canonicalize --cse --cleave-partition="tp=2 plan=%S/Inputs/sequence-parallel-plan.txt" | FileCheck %s --check-prefix=PLAIN

// Megatron's sequence parallelism: the row-parallel product's partial sum
// is reduce-scattered over the tokens (dim 0) where the residual add and
// the token-wise tanh read it, which run on each rank's 2 of the 4 tokens;
// the next column-parallel product gathers them. The same bytes as the
// all-reduce, and the activations between the blocks split. The weight's
// gradient reads the gathered value the forward made.
// CHECK-LABEL: func.func @block
// CHECK: %[[P:.*]] = cleave.matmul %{{.*}}, %arg2 {transpose_rhs} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
// CHECK: %[[RS:.*]] = cleave.reduce_scatter %{{.*}} axes = [0] dim = 0 {{{.*}}cleave.phase = "forward", cleave.reason = "sequence parallelism: {{.*}}reads it split along dim 0, so it is reduce-scattered there{{.*}}"} : tensor<4x8xf32> -> tensor<2x8xf32>
// CHECK: %[[T:.*]] = cleave.tanh %[[RS]] : tensor<2x8xf32>
// CHECK: %[[G:.*]] = cleave.all_gather %[[T]] axes = [0] dim = 0 {{.*}} : tensor<2x8xf32> -> tensor<4x8xf32>
// CHECK: cleave.matmul %[[G]], %arg3 {transpose_rhs}
// CHECK: cleave.matmul %{{.*}}, %[[G]] {transpose_lhs}
// CHECK-NOT: cleave.all_reduce sum %{{.*}} {{.*}}cleave.phase = "forward"{{.*}} : tensor<4x8xf32>
// CHECK: return
// Without it, one all-reduce makes the sum whole on every rank.
// PLAIN-LABEL: func.func @block
// PLAIN: cleave.all_reduce sum %{{.*}} axes = [0] {{{.*}}cleave.phase = "forward"{{.*}}} : tensor<4x8xf32>
// PLAIN-NOT: cleave.reduce_scatter
// PLAIN-NOT: cleave.all_gather
func.func @block(%x: tensor<4x8xf32> {cleave.input = "x"}, %w: tensor<16x8xf32> {cleave.parameter = "w"}, %v: tensor<8x16xf32> {cleave.parameter = "v"}, %u: tensor<16x8xf32> {cleave.parameter = "u"}) -> (tensor<f32> {cleave.loss}) {
  %0 = cleave.matmul %x, %w {transpose_rhs} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %1 = cleave.relu %0 : tensor<4x16xf32>
  %2 = cleave.matmul %1, %v {transpose_rhs} : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
  %3 = cleave.add %x, %2 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %4 = cleave.tanh %3 : tensor<4x8xf32>
  %5 = cleave.matmul %4, %u {transpose_rhs} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %6 = cleave.reduce sum %5 dims = [0, 1] : (tensor<4x16xf32>) -> tensor<f32>
  return %6 : tensor<f32>
}

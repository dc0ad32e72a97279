// RUN: cleave-opt %s --cleave-autodiff --cleave-optimizer="optimizer=sgd lr=0.1" --canonicalize --cse --cleave-partition="tp=4 plan=%S/Inputs/reasons-plan.txt" | FileCheck %s

// Every collective says why it is there (cleave inspect shows it); the
// reductions Megatron's own plan has are marked cleave.megatron. Here w is
// column-parallel after a replicated u, and its split output meets three
// uses that need it otherwise:
// - a product of two activations over the split dimension (the scores of a
//   head split inside): summed, but not one of Megatron's reductions;
// CHECK: cleave.all_reduce sum %{{.*}} axes = [0] {cleave.carries = "{{[0-9]+:[0-9]+}}", cleave.origin = "{{[^"]*}}", cleave.phase = "forward", cleave.reason = "sums the partial results of {{.*}}partition-reasons.mlir:26:8 (cleave.matmul), which contracts a split dimension of two activations; {{.*}}:27:8 (cleave.tanh) needs them whole"} : tensor<4x4xf32>
// - a reshape the split cannot survive at tp = 4 ([4, 16] -> [4, 2, 8]);
// CHECK: cleave.all_gather %{{.*}} {cleave.carries = "{{[0-9]+:[0-9]+}}", cleave.origin = "{{[^"]*}}", cleave.phase = "forward", cleave.reason = "{{.*}}:28:8 (cleave.reshape) reshapes [4, 16] to [4, 2, 8]: the split of dimension 1 has no dimension to stay on"}
// - a softmax over the split dimension, with the cost of keeping it split;
// CHECK: cleave.all_gather %{{.*}} {cleave.carries = "{{[0-9]+:[0-9]+}}", cleave.origin = "{{[^"]*}}", cleave.phase = "forward", cleave.reason = "{{.*}}:31:8 (cleave.softmax) takes operand #0 whole: its cheapest layout, every operand whole, costs {{[0-9.]+}} us here; none of its layouts keeps the operand S(1)"}
// A row-parallel use of the split output is Megatron's own reduction.
// CHECK: cleave.all_reduce sum %{{.*}} axes = [0] {cleave.carries = "{{[0-9]+:[0-9]+}}", cleave.megatron, cleave.origin = "{{[^"]*}}", cleave.phase = "forward", cleave.reason = "sums the partial results of {{.*}}:32:8 (cleave.matmul), which contracts a split dimension with a weight; {{.*}}:33:8 (cleave.tanh) needs them whole"}
// The backward of w's column split makes u's output gradient a partial
// sum of every rank's share; it is reduced there, Megatron's input-gradient
// all-reduce, rather than after the replicated u's weight gradient, which
// is bigger ([8, 8] against [4, 8]).
// CHECK: %[[DH:.*]] = cleave.all_reduce sum %{{.*}} axes = [0] {cleave.carries = "{{[0-9]+:[0-9]+}}", cleave.megatron, cleave.origin = "{{[^"]*}}", cleave.phase = "backward", cleave.reason = "sums the partial results of {{.*}}:25:8 (cleave.matmul), which contracts a split dimension with a weight; {{.*}}:24:8 (cleave.matmul) needs them whole"} : tensor<4x8xf32>
// CHECK: cleave.matmul %[[DH]], %arg0 {transpose_lhs} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
// CHECK-NOT: cleave.all_reduce
func.func @reasons(%x: tensor<4x8xf32> {cleave.input = "x"}, %u: tensor<8x8xf32> {cleave.parameter = "u"}, %w: tensor<16x8xf32> {cleave.parameter = "w"}, %v: tensor<8x16xf32> {cleave.parameter = "v"}) -> (tensor<f32> {cleave.loss}) {
  %0 = cleave.matmul %x, %u {transpose_rhs} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %1 = cleave.matmul %0, %w {transpose_rhs} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %2 = cleave.matmul %1, %1 {transpose_rhs} : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x4xf32>
  %3 = cleave.tanh %2 : tensor<4x4xf32>
  %4 = cleave.reshape %1 : tensor<4x16xf32> -> tensor<4x2x8xf32>
  %5 = cleave.tanh %4 : tensor<4x2x8xf32>
  %n = cleave.neg %1 : tensor<4x16xf32>
  %6 = cleave.softmax %n axis = 1 : tensor<4x16xf32>
  %7 = cleave.matmul %1, %v {transpose_rhs} : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
  %8 = cleave.tanh %7 : tensor<4x8xf32>
  %s3 = cleave.reduce sum %3 dims = [0, 1] : (tensor<4x4xf32>) -> tensor<f32>
  %s5 = cleave.reduce sum %5 dims = [0, 1, 2] : (tensor<4x2x8xf32>) -> tensor<f32>
  %s6 = cleave.reduce sum %6 dims = [0, 1] : (tensor<4x16xf32>) -> tensor<f32>
  %s8 = cleave.reduce sum %8 dims = [0, 1] : (tensor<4x8xf32>) -> tensor<f32>
  %a = cleave.add %s3, %s5 : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %b = cleave.add %a, %s6 : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %c = cleave.add %b, %s8 : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %c : tensor<f32>
}

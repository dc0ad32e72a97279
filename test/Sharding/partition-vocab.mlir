// RUN: cleave-opt %s --cleave-autodiff --cleave-optimizer="optimizer=sgd lr=0.1" --canonicalize --cse --cleave-partition="tp=4 plan=%S/Inputs/vocab-plan.txt" | FileCheck %s

// A vocabulary-parallel embedding: the table is split by rows, each rank
// looks up the ids in its range (ids elsewhere read zeros: a partial sum),
// one all-reduce. The gradient is scattered into the rank's rows only (the
// masked scatter): on a tie in communication with scattering the whole
// table and slicing it, a parameter's gradient takes the parameter's
// layout, so no rank builds the whole table's gradient.
// CHECK: tensor<256x64xf32> {cleave.layout = #cleave.layout<dim = 0>, cleave.parameter = "table"}
// CHECK: %[[E:.*]] = cleave.gather %{{.*}}, %{{.*}} axis = 0 {cleave.shard_axes = array<i64: 0>, cleave.shard_size = 1024 : i64} : (tensor<256x64xf32>, tensor<8x16xi64>) -> tensor<8x16x64xf32>
// CHECK: cleave.all_reduce sum %[[E]] axes = [0]
// CHECK: %[[G:.*]] = cleave.scatter_add %{{.*}}, %{{.*}} axis = 0 {cleave.shard_axes = array<i64: 0>, cleave.shard_size = 1024 : i64} : (tensor<8x16x64xf32>, tensor<8x16xi64>) -> tensor<256x64xf32>
// CHECK-NOT: cleave.shard_slice
// CHECK-NOT: cleave.all_reduce
// CHECK: return %{{.*}}, %{{.*}}, %[[G]]
func.func @embedding(%ids: tensor<8x16xi64> {cleave.input = "ids"}, %table: tensor<1024x64xf32> {cleave.parameter = "table"}) -> (tensor<f32> {cleave.loss}) {
  %0 = cleave.gather %table, %ids axis = 0 : (tensor<1024x64xf32>, tensor<8x16xi64>) -> tensor<8x16x64xf32>
  %1 = cleave.tanh %0 : tensor<8x16x64xf32>
  %2 = cleave.reduce sum %1 dims = [0, 1, 2] : (tensor<8x16x64xf32>) -> tensor<f32>
  return %2 : tensor<f32>
}

// Data parallelism (--cleave-partition-data="dp=N"): every data input is split
// along its batch, weights stay replicated; a mean over the batch is each
// rank's share (its mean times its rows over the global rows) summed over
// the ranks, so the loss is the global batch's; a weight's gradient, a
// contraction over the batch, is summed over the ranks.
// RUN: cleave-opt %s --cleave-partition-data="dp=2" | FileCheck %s
// On a dp x tp mesh the dp axis is partitioned first (axis 0), then tp
// (axis 1) in the per-dp-rank program: here w is too small to split.
// RUN: cleave-opt %s --cleave-partition-data="dp=2 tp=2" --cleave-partition="tp=2" | FileCheck %s --check-prefix=MESH
// MESH: module attributes {cleave.mesh = array<i64: 2, 2>, cleave.mesh_axes = "dp,tp"}
// MESH: cleave.all_reduce sum {{.*}} axes = [0]

// CHECK: module attributes {cleave.mesh = array<i64: 2>, cleave.mesh_axes = "dp"}
// CHECK-LABEL: func.func @step
// CHECK-SAME: %[[X:.*]]: tensor<2x8xf32> {cleave.input = "x", cleave.layout = #cleave.layout<dim = 0>}
// CHECK-SAME: %[[W:.*]]: tensor<8x2xf32> {cleave.parameter = "w"}
// CHECK: %[[Y:.*]] = cleave.matmul %[[X]], %[[W]] : (tensor<2x8xf32>, tensor<8x2xf32>) -> tensor<2x2xf32>
// CHECK: %[[M:.*]] = cleave.reduce mean %[[Y]] dims = [0, 1] : (tensor<2x2xf32>) -> tensor<f32>
// CHECK: %[[HALF:.*]] = cleave.constant dense<5.000000e-01> : tensor<f32>
// CHECK: %[[SHARE:.*]] = cleave.mul %[[M]], %[[HALF]]
// CHECK: %[[G:.*]] = cleave.matmul %[[X]], %[[Y]] {transpose_lhs} : (tensor<2x8xf32>, tensor<2x2xf32>) -> tensor<8x2xf32>
// CHECK-NEXT: cleave.all_reduce sum %[[G]] axes = [0]
// CHECK: cleave.all_reduce sum %[[SHARE]] axes = [0]
func.func @step(%x: tensor<4x8xf32> {cleave.input = "x"}, %w: tensor<8x2xf32> {cleave.parameter = "w"}) -> (tensor<f32> {cleave.loss}, tensor<8x2xf32> {cleave.gradient = "w"}) {
  %0 = cleave.matmul %x, %w : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
  %1 = cleave.reduce mean %0 dims = [0, 1] : (tensor<4x2xf32>) -> tensor<f32>
  %2 = cleave.matmul %x, %0 {transpose_lhs} : (tensor<4x8xf32>, tensor<4x2xf32>) -> tensor<8x2xf32>
  return %1, %2 : tensor<f32>, tensor<8x2xf32>
}

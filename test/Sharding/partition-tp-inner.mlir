// RUN: cleave-opt %s --cleave-autodiff --cleave-optimizer="optimizer=sgd lr=0.1" --canonicalize --cse --cleave-partition="tp=4 tp-inner=2" | FileCheck %s
// RUN: not cleave-opt %s --cleave-partition="tp=4 tp-inner=3" 2>&1 | FileCheck %s --check-prefix=BAD

// tp 4 factored into 2 x 2 mesh axes: Megatron's MLP split over both axes
// along one dimension is a plain split of the 4 ranks (the layouts say
// nothing of the axes), and the all-reduce over the outer axis of a value
// the inner pass finds partial too is one all-reduce over both.
// CHECK: module attributes {cleave.mesh = array<i64: 2, 2>, cleave.mesh_axes = "tp,tp_inner"}
// CHECK-LABEL: func.func @mlp
// CHECK-SAME: tensor<32x64xf32> {cleave.layout = #cleave.layout<dim = 0>, cleave.parameter = "w"}
// CHECK-SAME: tensor<64x32xf32> {cleave.layout = #cleave.layout<dim = 1>, cleave.parameter = "v"}
// CHECK-NOT: axes = [0] {
// CHECK-NOT: axes = [1] {
// CHECK: cleave.all_reduce  sum %{{.*}} axes = [0, 1] {{{.*}}cleave.megatron
// CHECK-NOT: cleave.all_reduce
// CHECK: return
// BAD: tp-inner=3 does not divide tp=4
func.func @mlp(%x: tensor<8x64xf32> {cleave.input = "x"}, %w: tensor<128x64xf32> {cleave.parameter = "w"}, %v: tensor<64x128xf32> {cleave.parameter = "v"}) -> (tensor<f32> {cleave.loss}) {
  %0 = cleave.matmul %x, %w {transpose_rhs} : (tensor<8x64xf32>, tensor<128x64xf32>) -> tensor<8x128xf32>
  %1 = cleave.relu %0 : tensor<8x128xf32>
  %2 = cleave.matmul %1, %v {transpose_rhs} : (tensor<8x128xf32>, tensor<64x128xf32>) -> tensor<8x64xf32>
  %3 = cleave.reduce sum %2 dims = [0, 1] : (tensor<8x64xf32>) -> tensor<f32>
  return %3 : tensor<f32>
}

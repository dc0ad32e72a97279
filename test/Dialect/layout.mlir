// RUN: cleave-opt %s | cleave-opt | FileCheck %s --enable-var-scope

// #cleave.layout round-trips, its defaults (dim -1, blocks 1, granule 1,
// dp_dim -1) left out, its fields in any order.
// CHECK-LABEL: func @layouts
// CHECK-SAME: {cleave.layout = #cleave.layout<dim = 0>, cleave.parameter = "w"}
// CHECK-SAME: {cleave.layout = #cleave.layout<dim = 0, blocks = 3, granule = 4>}
// CHECK-SAME: {cleave.layout = #cleave.layout<dim = 1, dp_dim = 0>}
// CHECK-SAME: {cleave.layout = #cleave.layout<dp_dim = 1>}
// CHECK-SAME: -> (tensor<8x8xf32> {cleave.layout = #cleave.layout<dim = 1>})
func.func @layouts(
    %w: tensor<8x8xf32> {cleave.parameter = "w", cleave.layout = #cleave.layout<dim = 0, blocks = 1>},
    %qkv: tensor<24x8xf32> {cleave.layout = #cleave.layout<granule = 4, dim = 0, blocks = 3>},
    %m: tensor<4x8xf32> {cleave.layout = #cleave.layout<dp_dim = 0, dim = 1>},
    %s: tensor<4x8xf32> {cleave.layout = #cleave.layout<dp_dim = 1, dim = -1>})
    -> (tensor<8x8xf32> {cleave.layout = #cleave.layout<dim = 1>}) {
  return %w : tensor<8x8xf32>
}

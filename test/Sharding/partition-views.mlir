// RUN: cleave-opt %s --cleave-partition=tp=4 | FileCheck %s

// A split value that two reshapes cannot keep split (w column-parallel,
// its product read as [4, 2, 8] and as [8, 8]; the plan recorded with
// embedded products, as the layout search chooses to avoid gathers) is
// made whole once: one all-reduce of its embedding, both views reshaped
// from it. Each view embedding and reducing on its own summed the same
// value twice (Qwen3's V gradient, read by the two matmuls of its
// backward). The collective says what it carries (the matmul's result).
// CHECK: %[[W:.*]] = cleave.all_reduce sum %{{.*}} axes = [0] {cleave.carries = "0:2", cleave.megatron, cleave.origin = "{{[^"]*}}partition-views.mlir{{[^"]*}}:15:8{{[^"]*}}", cleave.phase = "forward", cleave.reason = "sums the partial results of {{.*}}:16:8 (cleave.reshape), which cannot keep its operand's split (each rank gives its chunk, zeros elsewhere); {{.*}} needs them whole"} : tensor<4x16xf32>
// CHECK-DAG: cleave.reshape %[[W]] : tensor<4x16xf32> -> tensor<4x2x8xf32>
// CHECK-DAG: cleave.reshape %[[W]] : tensor<4x16xf32> -> tensor<8x8xf32>
// CHECK-NOT: cleave.all_reduce
func.func @views(%x: tensor<4x8xf32> {cleave.input = "x"}, %w: tensor<16x8xf32> {cleave.layout = #cleave.layout<dim = 0>, cleave.parameter = "w"}) -> (tensor<f32> {cleave.loss}) attributes {cleave.layouts_for = 4 : i64, cleave.partition_how = "embed_products"} {
  %h = cleave.matmul %x, %w {transpose_rhs} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %a = cleave.reshape %h : tensor<4x16xf32> -> tensor<4x2x8xf32>
  %b = cleave.reshape %h : tensor<4x16xf32> -> tensor<8x8xf32>
  %ta = cleave.tanh %a : tensor<4x2x8xf32>
  %tb = cleave.tanh %b : tensor<8x8xf32>
  %sa = cleave.reduce sum %ta dims = [0, 1, 2] : (tensor<4x2x8xf32>) -> tensor<f32>
  %sb = cleave.reduce sum %tb dims = [0, 1] : (tensor<8x8xf32>) -> tensor<f32>
  %l = cleave.add %sa, %sb : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %l : tensor<f32>
}

// RUN: cleave-opt %s --split-input-file --cleave-autodiff --cleave-optimizer="optimizer=sgd lr=0.1" --canonicalize --cse --cleave-partition="tp=2 plan=%S/Inputs/mlp-plan.txt" | FileCheck %s --check-prefix=PLAN
// RUN: cleave-opt %s --split-input-file --cleave-autodiff --cleave-optimizer="optimizer=sgd lr=0.1" --canonicalize --cse --cleave-partition="tp=1" | FileCheck %s --check-prefix=ONE

// Megatron's MLP from --plan (w colwise, v rowwise): the first matmul's
// output stays split, the second contracts the split factor into a partial
// sum, and one all-reduce makes it whole. The weight gradients are local.
// PLAN: module attributes {cleave.mesh = array<i64: 2>}
// PLAN-LABEL: func.func @mlp
// PLAN-SAME: %[[W:[a-z0-9]+]]: tensor<8x8xf32> {cleave.layout = #cleave.layout<dim = 0>, cleave.parameter = "w"}
// PLAN-SAME: %[[V:[a-z0-9]+]]: tensor<8x8xf32> {cleave.layout = #cleave.layout<dim = 1>, cleave.parameter = "v"}
// PLAN: %[[H:.*]] = cleave.matmul %arg0, %[[W]] {transpose_rhs} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
// PLAN: %[[R:.*]] = cleave.relu %[[H]] : tensor<4x8xf32>
// PLAN: %[[Y:.*]] = cleave.matmul %[[R]], %[[V]] {transpose_rhs} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
// PLAN: %[[S:.*]] = cleave.all_reduce sum %[[Y]] axes = [0] {cleave.carries = "{{[0-9]+:[0-9]+}}", cleave.megatron, cleave.origin = "{{[^"]*}}", cleave.phase = "forward", cleave.reason = "{{.*}}"} : tensor<4x8xf32>
// PLAN: cleave.tanh %[[S]]
// PLAN-NOT: cleave.all_gather
// PLAN-NOT: cleave.all_reduce
// PLAN: return
// At tp = 1 nothing changes but the mesh.
// ONE: module attributes {cleave.mesh = array<i64: 1>}
// ONE-NOT: cleave.all_reduce
func.func @mlp(%x: tensor<4x8xf32> {cleave.input = "x"}, %w: tensor<16x8xf32> {cleave.parameter = "w"}, %v: tensor<8x16xf32> {cleave.parameter = "v"}) -> (tensor<f32> {cleave.loss}) {
  %0 = cleave.matmul %x, %w {transpose_rhs} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %1 = cleave.relu %0 : tensor<4x16xf32>
  %2 = cleave.matmul %1, %v {transpose_rhs} : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
  %3 = cleave.tanh %2 : tensor<4x8xf32>
  %4 = cleave.reduce sum %3 dims = [0, 1] : (tensor<4x8xf32>) -> tensor<f32>
  return %4 : tensor<f32>
}

// -----

// The same MLP as torch.onnx writes a Linear (Transpose of the [out, in]
// weight, then MatMul): colwise and rowwise see through the transpose.
// PLAN-LABEL: func.func @mlp_transposed
// PLAN-SAME: tensor<8x8xf32> {cleave.layout = #cleave.layout<dim = 0>, cleave.parameter = "w"}
// PLAN-SAME: tensor<8x8xf32> {cleave.layout = #cleave.layout<dim = 1>, cleave.parameter = "v"}
// PLAN: cleave.all_reduce sum
// PLAN-NOT: cleave.all_gather
// PLAN: return
// ONE-LABEL: func.func @mlp_transposed
func.func @mlp_transposed(%x: tensor<4x8xf32> {cleave.input = "x"}, %w: tensor<16x8xf32> {cleave.parameter = "w"}, %v: tensor<8x16xf32> {cleave.parameter = "v"}) -> (tensor<f32> {cleave.loss}) {
  %wt = cleave.transpose %w perm = [1, 0] : (tensor<16x8xf32>) -> tensor<8x16xf32>
  %0 = cleave.matmul %x, %wt : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %1 = cleave.relu %0 : tensor<4x16xf32>
  %vt = cleave.transpose %v perm = [1, 0] : (tensor<8x16xf32>) -> tensor<16x8xf32>
  %2 = cleave.matmul %1, %vt : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  %3 = cleave.tanh %2 : tensor<4x8xf32>
  %4 = cleave.reduce sum %3 dims = [0, 1] : (tensor<4x8xf32>) -> tensor<f32>
  return %4 : tensor<f32>
}

// The search's choice, with no --plan, on small train steps:
// --cleave-choose-layouts alone records it on the parameters (CHOSEN);
// --cleave-partition takes it and rewrites the step, the same as when it
// searches itself.
// RUN: cleave-opt %s --split-input-file --cleave-autodiff --cleave-optimizer="optimizer=adamw lr=0.001" --canonicalize --cse --cleave-choose-layouts=tp=4 | FileCheck %s --check-prefix=CHOSEN
// RUN: cleave-opt %s --split-input-file --cleave-autodiff --cleave-optimizer="optimizer=adamw lr=0.001" --canonicalize --cse --cleave-choose-layouts=tp=4 --cleave-partition=tp=4 | FileCheck %s
// RUN: cleave-opt %s --split-input-file --cleave-autodiff --cleave-optimizer="optimizer=adamw lr=0.001" --canonicalize --cse --cleave-partition=tp=4 | FileCheck %s

// Large enough weights: Megatron's MLP is found (first weight split by its
// output rows, second by its input columns), with one all-reduce forward,
// and none backward (the input needs no gradient).
// CHOSEN-LABEL: func.func @mlp
// CHOSEN-SAME: tensor<512x256xf32> {cleave.layout = #cleave.layout<dim = 0>, cleave.layout_why = "the search keeps it S(0); its cheapest other layout, R, would add {{[0-9.]+}} us per step (communication plus memory charge)", cleave.parameter = "up"}
// CHOSEN-SAME: tensor<256x512xf32> {cleave.layout = #cleave.layout<dim = 1>, cleave.layout_why = "{{[^"]+}}", cleave.parameter = "down"}
// CHOSEN-SAME: attributes {cleave.layouts_for = 4 : i64, cleave.partition_how = "{{[a-z_,]*}}"}
// CHOSEN-NOT: cleave.all_reduce
// CHOSEN: return
// CHECK-LABEL: func.func @mlp
// CHECK-SAME: tensor<128x256xf32> {cleave.layout = #cleave.layout<dim = 0>, cleave.parameter = "up"}
// CHECK-SAME: tensor<256x128xf32> {cleave.layout = #cleave.layout<dim = 1>, cleave.parameter = "down"}
// CHECK-COUNT-1: cleave.all_reduce
// CHECK-NOT: cleave.all_reduce
// CHECK-NOT: cleave.all_gather
// CHECK: return
func.func @mlp(%x: tensor<8x256xf32> {cleave.input = "x"}, %up: tensor<512x256xf32> {cleave.parameter = "up"}, %down: tensor<256x512xf32> {cleave.parameter = "down"}) -> (tensor<f32> {cleave.loss}) {
  %0 = cleave.matmul %x, %up {transpose_rhs} : (tensor<8x256xf32>, tensor<512x256xf32>) -> tensor<8x512xf32>
  %1 = cleave.gelu %0 : tensor<8x512xf32>
  %2 = cleave.matmul %1, %down {transpose_rhs} : (tensor<8x512xf32>, tensor<256x512xf32>) -> tensor<8x256xf32>
  %3 = cleave.tanh %2 : tensor<8x256xf32>
  %4 = cleave.reduce sum %3 dims = [0, 1] : (tensor<8x256xf32>) -> tensor<f32>
  return %4 : tensor<f32>
}

// -----

// Tiny weights do not pay for an all-reduce: everything stays replicated.
// CHOSEN-LABEL: func.func @tiny
// CHOSEN-NOT: cleave.layout =
// CHOSEN: return
// CHECK-LABEL: func.func @tiny
// CHECK-NOT: cleave.layout
// CHECK-NOT: cleave.all_reduce
// CHECK: return
func.func @tiny(%x: tensor<2x4xf32> {cleave.input = "x"}, %w: tensor<4x4xf32> {cleave.parameter = "w"}, %v: tensor<4x4xf32> {cleave.parameter = "v"}) -> (tensor<f32> {cleave.loss}) {
  %0 = cleave.matmul %x, %w {transpose_rhs} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %1 = cleave.relu %0 : tensor<2x4xf32>
  %2 = cleave.matmul %1, %v {transpose_rhs} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %3 = cleave.reduce sum %2 dims = [0, 1] : (tensor<2x4xf32>) -> tensor<f32>
  return %3 : tensor<f32>
}

// -----

// An embedding whose output only feeds elementwise ops and a sum: splitting
// the hidden dimension needs just one scalar all-reduce, cheaper than the
// vocabulary-parallel lookup's all-reduce of the activations.
// CHOSEN-LABEL: func.func @embedding
// CHOSEN-SAME: tensor<1024x64xf32> {cleave.layout = #cleave.layout<dim = 1>, cleave.layout_why = "{{[^"]+}}", cleave.parameter = "table"}
// CHECK-LABEL: func.func @embedding
// CHECK-SAME: tensor<1024x16xf32> {cleave.layout = #cleave.layout<dim = 1>, cleave.parameter = "table"}
// CHECK: cleave.gather %{{.*}}, %{{.*}} axis = 0 : (tensor<1024x16xf32>, tensor<8x16xi64>) -> tensor<8x16x16xf32>
// CHECK: cleave.all_reduce sum %{{.*}} axes = [0] {cleave.carries = "{{[0-9]+:[0-9]+}}", cleave.megatron, cleave.origin = "{{[^"]*}}", cleave.phase = "forward", cleave.reason = "{{.*}}"} : tensor<f32>
func.func @embedding(%ids: tensor<8x16xi64> {cleave.input = "ids"}, %table: tensor<1024x64xf32> {cleave.parameter = "table"}) -> (tensor<f32> {cleave.loss}) {
  %0 = cleave.gather %table, %ids axis = 0 : (tensor<1024x64xf32>, tensor<8x16xi64>) -> tensor<8x16x64xf32>
  %1 = cleave.tanh %0 : tensor<8x16x64xf32>
  %2 = cleave.reduce sum %1 dims = [0, 1, 2] : (tensor<8x16x64xf32>) -> tensor<f32>
  return %2 : tensor<f32>
}

// -----

// A norm's scale and bias feed an op that needs them whole. Storing them
// split would save memory only, for an all-gather of the parameter every
// step (ZeRO's trade): the search keeps them replicated however large.
// CHOSEN-LABEL: func.func @norm_parameters
// CHOSEN-NOT: cleave.layout =
// CHOSEN: return
// CHECK-LABEL: func.func @norm_parameters
// CHECK-NOT: cleave.layout
// CHECK-NOT: cleave.all_gather
// CHECK: return
func.func @norm_parameters(%x: tensor<2x8192xf32> {cleave.input = "x"}, %g: tensor<8192xf32> {cleave.parameter = "scale"}, %b: tensor<8192xf32> {cleave.parameter = "bias"}) -> (tensor<f32> {cleave.loss}) {
  %0:3 = cleave.layer_norm %x scale %g bias %b axis = 1 eps = 1.0e-05 : (tensor<2x8192xf32>, tensor<8192xf32>, tensor<8192xf32>) -> (tensor<2x8192xf32>, tensor<2x1xf32>, tensor<2x1xf32>)
  %1 = cleave.tanh %0#0 : tensor<2x8192xf32>
  %2 = cleave.reduce sum %1 dims = [0, 1] : (tensor<2x8192xf32>) -> tensor<f32>
  return %2 : tensor<f32>
}

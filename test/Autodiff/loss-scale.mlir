// RUN: cleave-opt %s --cleave-autodiff="loss-scale=true" --cleave-optimizer="optimizer=sgd lr=0.5 loss-scale=true" | FileCheck %s
// RUN: not cleave-opt %s --cleave-autodiff --cleave-optimizer="loss-scale=true" 2>&1 | FileCheck %s --check-prefix=UNSEEDED

// GradScaler's recipe in the step: the backward is seeded with 2^(16 + s),
// the gradient unscaled, its finiteness (a sum of g * 0) gates the update,
// and the scale's exponent, the finite run and the skipped count are the
// step's own optimizer state (no parameter's: named "").
// CHECK-LABEL: func.func @scaled
// CHECK-SAME: %[[S:[a-z0-9]+]]: tensor<f32> {cleave.optimizer_state = ["", "loss_scale"]}
// CHECK-SAME: {cleave.optimizer_state = ["", "good_steps"]}
// CHECK-SAME: {cleave.optimizer_state = ["", "skipped_steps"]}
// CHECK-SAME: -> (tensor<f32> {cleave.loss}, tensor<4xf32> {cleave.parameter = "w"}, tensor<f32> {cleave.optimizer_state = ["", "loss_scale"]}, tensor<f32> {cleave.optimizer_state = ["", "good_steps"]}, tensor<f32> {cleave.optimizer_state = ["", "skipped_steps"]}, tensor<4xf32> {cleave.gradient = "w"})
// CHECK: %[[E:.*]] = cleave.add %[[S]], %{{.*}} : (tensor<f32>, tensor<f32>) -> tensor<f32>
// CHECK: cleave.pow %{{.*}}, %[[E]]
// CHECK: %[[FINITE:.*]] = cleave.cmp eq,
// CHECK: cleave.select %{{.*}}, %{{.*}}, %arg0 : (tensor<1xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK: cleave.select %[[FINITE]], %{{.*}}, %{{.*}} : (tensor<i1>, tensor<f32>, tensor<f32>) -> tensor<f32>
func.func @scaled(%w: tensor<4xf32> {cleave.parameter = "w"}, %x: tensor<4xf32> {cleave.input = "x"}) -> (tensor<f32> {cleave.loss}) {
  %0 = cleave.mul %x, %w : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = cleave.reduce sum %0 dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}

// UNSEEDED: has no loss scale; run cleave-autodiff with loss-scale first

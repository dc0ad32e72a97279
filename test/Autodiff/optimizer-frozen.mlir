// RUN: cleave-opt %s --cleave-optimizer="optimizer=adamw lr=0.5" | FileCheck %s

// A frozen weight keeps no optimizer state and returns no new value: only
// the adapter "a" is updated, and the frozen "w" stays an argument.
// CHECK-LABEL: func.func @adapter
// CHECK-SAME: {cleave.frozen, cleave.parameter = "w"}
// CHECK-SAME: {cleave.optimizer_state = ["a", "exp_avg"]}
// CHECK-NOT: cleave.optimizer_state = ["w"
// CHECK-SAME: -> (tensor<f32> {cleave.loss}, tensor<4xf32> {cleave.parameter = "a"}, tensor<4xf32> {cleave.optimizer_state = ["a", "exp_avg"]}, tensor<4xf32> {cleave.optimizer_state = ["a", "exp_avg_sq"]}, tensor<4xf32> {cleave.gradient = "a"})
func.func @adapter(%w: tensor<4xf32> {cleave.parameter = "w", cleave.frozen}, %a: tensor<4xf32> {cleave.parameter = "a"}, %g: tensor<4xf32> {cleave.input = "g"}) -> (tensor<f32> {cleave.loss}, tensor<4xf32> {cleave.gradient = "a"}) {
  %0 = cleave.mul %w, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = cleave.reduce sum %0 dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %1, %g : tensor<f32>, tensor<4xf32>
}

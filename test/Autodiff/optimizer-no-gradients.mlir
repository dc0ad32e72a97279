// RUN: cleave-opt %s --verify-diagnostics --cleave-optimizer

// expected-error @+1 {{returns no gradients; run cleave-autodiff first}}
func.func @step(%w: tensor<4xf32> {cleave.parameter = "w"}) -> (tensor<f32> {cleave.loss}) {
  %0 = cleave.reduce sum %w dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %0 : tensor<f32>
}

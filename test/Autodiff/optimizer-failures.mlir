// RUN: cleave-opt %s --split-input-file --verify-diagnostics --cleave-optimizer="optimizer=lion"
// RUN: cleave-opt %s --split-input-file --verify-diagnostics --cleave-optimizer="optimizer=adamw beta1=1.0"

// expected-error-re @+1 {{{{unknown optimizer 'lion'; expected sgd or adamw|invalid optimizer hyperparameters: lr must be > 0, weight decay and momentum >= 0, betas in \[0, 1\), eps >= 0}}}}
func.func @step(%w: tensor<4xf32> {cleave.parameter = "w"}) -> (tensor<f32> {cleave.loss}, tensor<4xf32> {cleave.gradient = "w"}) {
  %0 = cleave.reduce sum %w dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %0, %w : tensor<f32>, tensor<4xf32>
}

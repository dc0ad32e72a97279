// RUN: cleave-opt %s --split-input-file --verify-diagnostics --cleave-autodiff

// expected-error @+1 {{has no result marked cleave.loss; run cleave-append-loss first}}
func.func @no_loss(%w: tensor<4xf32> {cleave.parameter = "w"}) -> tensor<4xf32> {
  return %w : tensor<4xf32>
}

// -----

// expected-error @+1 {{loss must be a float scalar, got 'tensor<4xf32>'}}
func.func @vector_loss(%w: tensor<4xf32> {cleave.parameter = "w"}) -> (tensor<4xf32> {cleave.loss}) {
  return %w : tensor<4xf32>
}

// -----

// An op without a rule on the gradient path is named.
func.func @no_rule(%x: tensor<1x1x4x4xf32> {cleave.input = "x"}, %w: tensor<1x1x2x2xf32> {cleave.parameter = "w"}) -> (tensor<f32> {cleave.loss}) {
  %0 = cleave.conv2d %x, %w strides = [1, 1] pads = [0, 0, 0, 0] dilations = [1, 1] groups = 1 : (tensor<1x1x4x4xf32>, tensor<1x1x2x2xf32>) -> tensor<1x1x3x3xf32>
  // expected-error @+1 {{'cleave.max_pool2d_backward' op has no differentiation rule, but the loss's gradient must flow through it}}
  %1 = cleave.max_pool2d_backward %x, %0 kernel = [2, 2] strides = [1, 1] pads = [0, 0, 0, 0] dilations = [1, 1] : (tensor<1x1x4x4xf32>, tensor<1x1x3x3xf32>) -> tensor<1x1x4x4xf32>
  %2 = cleave.reduce sum %1 dims = [0, 1, 2, 3] : (tensor<1x1x4x4xf32>) -> tensor<f32>
  return %2 : tensor<f32>
}

// -----

// Nothing trains when every weight is frozen.
// expected-error @+1 {{has no weight that trains: every float32 initializer is frozen}}
func.func @all_frozen(%x: tensor<4xf32> {cleave.input = "x"}, %w: tensor<4xf32> {cleave.parameter = "w", cleave.frozen}) -> (tensor<f32> {cleave.loss}) {
  %0 = cleave.mul %x, %w : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = cleave.reduce sum %0 dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}

// RUN: cleave-opt %s --split-input-file --verify-diagnostics --cleave-append-loss=loss=auto

// expected-error @+1 {{the model's first output 'y' is 'tensor<2x5xf32>', not a scalar loss; choose a loss for it with --loss cross_entropy or --loss mse}}
func.func @logits(%x: tensor<2x5xf32> {cleave.input = "x"}) -> (tensor<2x5xf32> {cleave.output = "y"}) {
  %0 = cleave.tanh %x : tensor<2x5xf32>
  return %0 : tensor<2x5xf32>
}

// -----

// expected-error @+1 {{the model has no output to train on}}
func.func @nothing(%x: tensor<4xf32> {cleave.input = "x"}) {
  return
}

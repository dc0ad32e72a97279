// RUN: cleave-opt %s --split-input-file --verify-diagnostics --cleave-append-loss=loss=cross_entropy

// expected-error @+1 {{the model already has an input named 'labels'; --loss cross_entropy adds one}}
func.func @taken(%x: tensor<2x5xf32> {cleave.input = "x"}, %l: tensor<2xi64> {cleave.input = "labels"}) -> (tensor<2x5xf32> {cleave.output = "y"}) {
  return %x : tensor<2x5xf32>
}

// -----

// expected-error @+1 {{--loss cross_entropy needs the first output 'y' to have a class dimension, got 'tensor<f32>'}}
func.func @scalar(%x: tensor<f32> {cleave.input = "x"}) -> (tensor<f32> {cleave.output = "y"}) {
  return %x : tensor<f32>
}

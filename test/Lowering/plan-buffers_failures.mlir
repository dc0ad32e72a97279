// RUN: cleave-opt %s --split-input-file --cleave-plan-buffers=alignment=3 --verify-diagnostics

// expected-error @+1 {{alignment must be a power of two}}
func.func @bad_alignment(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

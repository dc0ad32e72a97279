// RUN: cleave-opt %s --split-input-file --verify-diagnostics --cleave-emit-plan -o /dev/null

// Emission needs the buffer plan.
// expected-error @below {{has no buffer plan; run cleave-plan-buffers}}
func.func @unplanned(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = cleave.exp %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// An op the runtime has no kernel for.
func.func private @g(tensor<4xf32>) -> tensor<4xf32>
func.func @no_kernel(%x: tensor<4xf32>) -> tensor<4xf32> attributes {cleave.arena_bytes = 64 : i64} {
  // expected-error @below {{has no kernel in the CPU runtime}}
  %0 = func.call @g(%x) {cleave.offsets = array<i64: 0>} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

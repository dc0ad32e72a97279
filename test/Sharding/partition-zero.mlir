// ZeRO over dp (--cleave-partition-data="dp=N zero=S"). Stage 1: the optimizer
// state is split along its first dimension dp divides; each rank updates
// its shard from the all-reduced gradient, sliced, and the new parameter is
// gathered. Stage 2: the gradient is reduce-scattered to that shard right
// where the backward pass finishes it (before the ops that follow it), and
// returned as the shard: no rank holds the whole reduced gradient.
// RUN: cleave-opt %s --cleave-partition-data="dp=2 zero=1" | FileCheck %s --check-prefix=Z1
// RUN: cleave-opt %s --cleave-partition-data="dp=2 zero=2" | FileCheck %s --check-prefix=Z2
// RUN: cleave-opt %s --cleave-partition-data="dp=2 zero=3" | FileCheck %s --check-prefix=Z3
// RUN: not cleave-opt %s --cleave-partition-data="dp=2 zero=4" 2>&1 | FileCheck %s --check-prefix=Z4

// Z1-LABEL: func.func @step
// Z1-SAME: %[[M:[a-z0-9]+]]: tensor<4x2xf32> {cleave.layout = #cleave.layout<dim = 0>, cleave.optimizer_state = ["w", "momentum_buffer"]}
// Z1: %[[G:.*]] = cleave.matmul {{.*}} {transpose_lhs} : (tensor<2x8xf32>, tensor<2x2xf32>) -> tensor<8x2xf32>
// Z1: %[[R:.*]] = cleave.all_reduce sum %[[G]] axes = [0]
// Z1: cleave.shard_slice %[[R]] axes = [0] dim = 0 : tensor<8x2xf32> -> tensor<4x2xf32>
// Z1: cleave.all_gather {{.*}} axes = [0] dim = 0 {{.*}} : tensor<4x2xf32> -> tensor<8x2xf32>
// Z1: return {{.*}} tensor<f32>, tensor<8x2xf32>, tensor<8x2xf32>, tensor<4x2xf32>

// Z2-LABEL: func.func @step
// Z2-SAME: -> (tensor<f32> {cleave.loss}, tensor<4x2xf32> {cleave.gradient = "w", cleave.layout = #cleave.layout<dim = 0>}
// Z2: %[[G:.*]] = cleave.matmul {{.*}} {transpose_lhs} : (tensor<2x8xf32>, tensor<2x2xf32>) -> tensor<8x2xf32>
// Z2-NEXT: %[[S:.*]] = cleave.reduce_scatter %[[G]] axes = [0] dim = 0 {{.*}}cleave.phase = "backward"{{.*}} : tensor<8x2xf32> -> tensor<4x2xf32>
// Z2-NOT: cleave.all_reduce sum %[[G]]
// Z2: %[[MOM:.*]] = cleave.add %{{.*}}, %[[S]] : (tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<4x2xf32>
// Z2: cleave.all_gather {{.*}} axes = [0] dim = 0 {{.*}} : tensor<4x2xf32> -> tensor<8x2xf32>
// Z2: return %{{.*}}, %[[S]], %{{.*}}, %[[MOM]] : tensor<f32>, tensor<4x2xf32>, tensor<8x2xf32>, tensor<4x2xf32>

// Stage 3: w itself is kept split; its use outside the update (the forward
// matmul) gathers it there, the update works on the shards (nothing
// gathered after the gradient's reduce-scatter), and the new w is returned
// split.
// Z3-LABEL: func.func @step
// Z3-SAME: %[[W:[a-z0-9]+]]: tensor<4x2xf32> {cleave.layout = #cleave.layout<dim = 0>, cleave.parameter = "w"}
// Z3: %[[WW:.*]] = cleave.all_gather %[[W]] axes = [0] dim = 0 {{.*}} : tensor<4x2xf32> -> tensor<8x2xf32>
// Z3-NEXT: cleave.matmul %{{.*}}, %[[WW]] : (tensor<2x8xf32>, tensor<8x2xf32>) -> tensor<2x2xf32>
// Z3: cleave.reduce_scatter
// Z3-NOT: cleave.all_gather
// Z3: cleave.sub %[[W]], %{{.*}} : (tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<4x2xf32>
// Z3: return {{.*}} : tensor<f32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>

// Z4: ZeRO stage 4 is not supported (stages are 0 to 3)
func.func @step(%x: tensor<4x8xf32> {cleave.input = "x"}, %w: tensor<8x2xf32> {cleave.parameter = "w"}, %m: tensor<8x2xf32> {cleave.optimizer_state = ["w", "momentum_buffer"]}) -> (tensor<f32> {cleave.loss}, tensor<8x2xf32> {cleave.gradient = "w"}, tensor<8x2xf32> {cleave.parameter = "w"}, tensor<8x2xf32> {cleave.optimizer_state = ["w", "momentum_buffer"]}) {
  %0 = cleave.matmul %x, %w : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
  %1 = cleave.reduce mean %0 dims = [0, 1] : (tensor<4x2xf32>) -> tensor<f32>
  %g = cleave.matmul %x, %0 {transpose_lhs} : (tensor<4x8xf32>, tensor<4x2xf32>) -> tensor<8x2xf32>
  %c = cleave.constant dense<9.000000e-01> : tensor<8x2xf32>
  %lr = cleave.constant dense<1.000000e-01> : tensor<8x2xf32>
  %2 = cleave.mul %m, %c : (tensor<8x2xf32>, tensor<8x2xf32>) -> tensor<8x2xf32>
  %3 = cleave.add %2, %g : (tensor<8x2xf32>, tensor<8x2xf32>) -> tensor<8x2xf32>
  %4 = cleave.mul %3, %lr : (tensor<8x2xf32>, tensor<8x2xf32>) -> tensor<8x2xf32>
  %5 = cleave.sub %w, %4 : (tensor<8x2xf32>, tensor<8x2xf32>) -> tensor<8x2xf32>
  return %1, %g, %5, %3 : tensor<f32>, tensor<8x2xf32>, tensor<8x2xf32>, tensor<8x2xf32>
}

// Stage 3, a parameter read through a reshape (as importers write a conv
// bias): the reshape, like any op outside the update, reads it gathered,
// so its dp split never reaches the batch-split activations.
// Z3-LABEL: func.func @reshaped
// Z3-SAME: %[[B:[a-z0-9]+]]: tensor<4xf32> {cleave.layout = #cleave.layout<dim = 0>, cleave.parameter = "b"}
// Z3: %[[BB:.*]] = cleave.all_gather %[[B]] axes = [0] dim = 0 {{.*}} : tensor<4xf32> -> tensor<8xf32>
// Z3-NEXT: cleave.reshape %[[BB]] : tensor<8xf32> -> tensor<1x8xf32>
// Z3: cleave.add %{{.*}}, %{{.*}} : (tensor<2x8xf32>, tensor<1x8xf32>) -> tensor<2x8xf32>
func.func @reshaped(%x: tensor<4x8xf32> {cleave.input = "x"}, %b: tensor<8xf32> {cleave.parameter = "b"}, %m: tensor<8xf32> {cleave.optimizer_state = ["b", "momentum_buffer"]}) -> (tensor<f32> {cleave.loss}, tensor<8xf32> {cleave.gradient = "b"}, tensor<8xf32> {cleave.parameter = "b"}, tensor<8xf32> {cleave.optimizer_state = ["b", "momentum_buffer"]}) {
  %r = cleave.reshape %b : tensor<8xf32> -> tensor<1x8xf32>
  %y = cleave.add %x, %r : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
  %l = cleave.reduce mean %y dims = [0, 1] : (tensor<4x8xf32>) -> tensor<f32>
  %g = cleave.reduce sum %y dims = [0] : (tensor<4x8xf32>) -> tensor<8xf32>
  %c = cleave.constant dense<9.000000e-01> : tensor<8xf32>
  %0 = cleave.mul %m, %c : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %1 = cleave.add %0, %g : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %2 = cleave.sub %b, %1 : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %l, %g, %2, %1 : tensor<f32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
}

// RUN: cleave-opt %s --split-input-file --cleave-autodiff="micro-batches=2" | FileCheck %s
// RUN: not cleave-opt %s --cleave-autodiff="micro-batches=0" 2>&1 | FileCheck %s --check-prefix=BAD

// BAD: micro-batches must be at least 1, not 0

// A plain mean: every input gains a copy for micro-batch 1, the body runs
// forward then backward for micro-batch 0, then again for micro-batch 1
// (its step (step - 1) * 2 + 2), each backward seeded with 1/2; the
// gradients add in order, the loss is the two means' mean, and the buffer
// passes from the first micro-batch to the second.
// CHECK-LABEL: func.func @mean
// CHECK-SAME: (%[[X0:.*]]: tensor<4xf32> {cleave.input = "x"}, %[[W:.*]]: tensor<4xf32> {cleave.parameter = "w"}, %[[S:.*]]: tensor<i64> {cleave.step}, %[[B:.*]]: tensor<4xf32> {cleave.buffer = "stat"}, %[[X1:.*]]: tensor<4xf32> {cleave.input = "x", cleave.micro_batch = 1 : i64})
// CHECK: %[[N:.*]] = cleave.constant dense<2> : tensor<i64>
// CHECK: %[[SN:.*]] = cleave.mul %[[S]], %[[N]]
// CHECK: %[[S0:.*]] = cleave.add %[[SN]]
// CHECK: %[[S1:.*]] = cleave.add
// CHECK: cleave.mul %[[X0]], %[[W]]
// CHECK: cleave.cast %[[S0]]
// CHECK: %[[L0:.*]] = cleave.reduce mean
// CHECK: %[[B0:.*]] = cleave.add %[[B]], %[[X0]]
// CHECK: %[[HALF:.*]] = cleave.constant dense<5.000000e-01> : tensor<f32>
// CHECK: cleave.mul %{{.*}}, %[[HALF]]
// CHECK: %[[G0:.*]] = cleave.mul %{{.*}}, %[[X0]]
// CHECK: cleave.mul %[[X1]], %[[W]]
// CHECK: cleave.cast %[[S1]]
// CHECK: %[[L1:.*]] = cleave.reduce mean
// CHECK: %[[B1:.*]] = cleave.add %[[B0]], %[[X1]]
// CHECK: %[[G1:.*]] = cleave.mul %{{.*}}, %[[X1]]
// CHECK: %[[LS:.*]] = cleave.add %[[L0]], %[[L1]]
// CHECK: %[[G:.*]] = cleave.add %[[G0]], %[[G1]]
// CHECK: %[[L:.*]] = cleave.mul %[[LS]]
// CHECK: return %[[L]], %[[G]], %[[B1]]
func.func @mean(%x: tensor<4xf32> {cleave.input = "x"}, %w: tensor<4xf32> {cleave.parameter = "w"}, %s: tensor<i64> {cleave.step}, %b: tensor<4xf32> {cleave.buffer = "stat"}) -> (tensor<f32> {cleave.loss}, tensor<4xf32> {cleave.buffer = "stat"}) {
  %0 = cleave.mul %x, %w : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %c = cleave.cast %s : tensor<i64> -> tensor<f32>
  %1 = cleave.reduce mean %0 dims = [0] : (tensor<4xf32>) -> tensor<f32>
  %2 = cleave.add %b, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %1, %2 : tensor<f32>, tensor<4xf32>
}

// -----

// A loss divided by a count no weight changes (the valid labels): the
// update's count, both micro-batches' counted ahead of the first, divides
// each micro-batch's sum, and the loss is the two quotients' sum.
// CHECK-LABEL: func.func @count
// CHECK-SAME: %[[M0:[^:]*]]: tensor<4xf32> {cleave.input = "mask"}
// CHECK-SAME: %[[M1:[^:]*]]: tensor<4xf32> {cleave.input = "mask", cleave.micro_batch = 1 : i64}
// CHECK: %[[C0:.*]] = cleave.reduce sum %[[M0]]
// CHECK: %[[C1:.*]] = cleave.reduce sum %[[M1]]
// CHECK: %[[T:.*]] = cleave.add %[[C0]], %[[C1]]
// CHECK: %[[P0:.*]] = cleave.mul %[[M0]], %[[W:.*]] :
// CHECK: %[[S0:.*]] = cleave.reduce sum %[[P0]]
// CHECK: %[[Q0:.*]] = cleave.div %[[S0]], %[[T]]
// CHECK: %[[P1:.*]] = cleave.mul %[[M1]], %[[W]] :
// CHECK: %[[S1:.*]] = cleave.reduce sum %[[P1]]
// CHECK: %[[Q1:.*]] = cleave.div %[[S1]], %[[T]]
// CHECK: %[[L:.*]] = cleave.add %[[Q0]], %[[Q1]]
// CHECK: return %[[L]]
func.func @count(%m: tensor<4xf32> {cleave.input = "mask"}, %w: tensor<4xf32> {cleave.parameter = "w"}) -> (tensor<f32> {cleave.loss}) {
  %0 = cleave.mul %m, %w : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = cleave.reduce sum %0 dims = [0] : (tensor<4xf32>) -> tensor<f32>
  %2 = cleave.reduce sum %m dims = [0] : (tensor<4xf32>) -> tensor<f32>
  %3 = cleave.div %1, %2 : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %3 : tensor<f32>
}

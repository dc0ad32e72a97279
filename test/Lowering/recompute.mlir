// RUN: cleave-opt %s --split-input-file --cleave-recompute=policy=full | FileCheck %s --check-prefix=FULL
// RUN: cleave-opt %s --split-input-file --cleave-recompute=policy=selective | FileCheck %s --check-prefix=SEL
// RUN: cleave-opt %s --split-input-file --cleave-recompute | FileCheck %s --check-prefix=NONE
// RUN: not cleave-opt %s --split-input-file --cleave-recompute=policy=some 2>&1 | FileCheck %s --check-prefix=BAD

// Three residual layers x' = x + tanh(x W)^2; the backward reads each
// layer's product a and its tanh t (1 KiB each). full cuts the forward
// after the first two residual adds, where one value is live: it keeps x1
// and x2 (2 KiB) and the last layer's values, and makes the first two
// layers' a and t again before their backward, which peaks at 2 KiB of
// them at a time (4.67 KiB in all against 6 KiB kept). selective keeps the
// products and makes the tanh again from them. A policy that does not
// exist is an error.
// FULL-LABEL: func.func @layers
// FULL: %[[A1:.*]] = cleave.matmul %arg0, %arg1
// FULL: %[[T1:.*]] = cleave.tanh %[[A1]]
// FULL: %[[X1:.*]] = cleave.add %arg0
// FULL: %[[A2:.*]] = cleave.matmul %[[X1]], %arg2
// FULL: %[[X2:.*]] = cleave.add %[[X1]]
// FULL: %[[A3:.*]] = cleave.matmul %[[X2]], %arg3
// FULL: %[[T3:.*]] = cleave.tanh %[[A3]]
// FULL: %[[L:.*]] = cleave.reduce sum
// FULL: cleave.mul %arg4, %[[A3]]
// FULL: cleave.mul %arg4, %[[T3]]
// FULL: %[[B2:.*]] = cleave.matmul %[[X1]], %arg2 {cleave.recomputed}
// FULL: %[[U2:.*]] = cleave.tanh %[[B2]] {cleave.recomputed}
// FULL: cleave.mul %arg4, %[[B2]]
// FULL: cleave.mul %arg4, %[[U2]]
// FULL: %[[B1:.*]] = cleave.matmul %arg0, %arg1 {cleave.recomputed}
// FULL: %[[U1:.*]] = cleave.tanh %[[B1]] {cleave.recomputed}
// FULL: cleave.mul %arg4, %[[B1]]
// FULL: cleave.mul %arg4, %[[U1]]
// FULL: return

// SEL-LABEL: func.func @layers
// SEL: %[[L:.*]] = cleave.reduce sum
// SEL: cleave.mul %arg4, %[[A3:[^ ]*]] :
// SEL: %[[U3:.*]] = cleave.tanh %[[A3]] {cleave.recomputed}
// SEL: cleave.mul %arg4, %[[U3]]
// SEL-NOT: cleave.matmul {{.*}}recomputed
// SEL: return

// NONE-LABEL: func.func @layers
// NONE-NOT: cleave.recomputed

// BAD: recompute policy 'some' is not none, selective or full
func.func @layers(%x: tensor<16x16xf32> {cleave.input = "x"}, %w1: tensor<16x16xf32> {cleave.parameter = "w1"}, %w2: tensor<16x16xf32> {cleave.parameter = "w2"}, %w3: tensor<16x16xf32> {cleave.parameter = "w3"}, %d: tensor<16x16xf32> {cleave.input = "d"}) -> (tensor<f32> {cleave.loss}, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>) {
  %a1 = cleave.matmul %x, %w1 : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  %t1 = cleave.tanh %a1 : tensor<16x16xf32>
  %u1 = cleave.mul %t1, %t1 : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  %x1 = cleave.add %x, %u1 : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  %a2 = cleave.matmul %x1, %w2 : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  %t2 = cleave.tanh %a2 : tensor<16x16xf32>
  %u2 = cleave.mul %t2, %t2 : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  %x2 = cleave.add %x1, %u2 : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  %a3 = cleave.matmul %x2, %w3 : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  %t3 = cleave.tanh %a3 : tensor<16x16xf32>
  %u3 = cleave.mul %t3, %t3 : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  %x3 = cleave.add %x2, %u3 : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  %l = cleave.reduce sum %x3 dims = [0, 1] : (tensor<16x16xf32>) -> tensor<f32>
  %g3a = cleave.mul %d, %a3 : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  %g3t = cleave.mul %d, %t3 : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  %g2a = cleave.mul %d, %a2 : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  %g2t = cleave.mul %d, %t2 : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  %g1a = cleave.mul %d, %a1 : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  %g1t = cleave.mul %d, %t1 : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  return %l, %g3a, %g3t, %g2a, %g2t, %g1a, %g1t : tensor<f32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>
}

// -----

// A value some op reads amid the forward (here a gradient-free op placed
// before the loss) is kept: a copy made after the loss comes too late for
// it. The random draw, which the backward's peak (b1, b2 and b3 live at
// once) would hold too, is made again with the same step and stream, so
// its numbers are the forward's.
// FULL-LABEL: func.func @amid
// FULL: %[[R:.*]] = cleave.random_uniform
// FULL: %[[T:.*]] = cleave.tanh %arg0
// FULL: %[[E:.*]] = cleave.exp %[[T]]
// FULL: %[[L:.*]] = cleave.reduce sum
// FULL-NOT: cleave.tanh {{.*}}recomputed
// FULL: return

// SEL-LABEL: func.func @amid
// SEL: %[[L:.*]] = cleave.reduce sum
// SEL: %[[R2:.*]] = cleave.random_uniform %arg1 seed = 7 stream = 3 {cleave.recomputed}
// SEL: cleave.mul %[[R2]], %
// SEL: return
func.func @amid(%x: tensor<8xf32> {cleave.input = "x"}, %step: tensor<i64> {cleave.step}) -> (tensor<f32> {cleave.loss}, tensor<8xf32>, tensor<8xf32>) {
  %r = cleave.random_uniform %step seed = 7 stream = 3 : tensor<i64> -> tensor<8xf32>
  %t = cleave.tanh %x : tensor<8xf32>
  %side = cleave.neg %t : tensor<8xf32>
  %e = cleave.exp %t : tensor<8xf32>
  %m = cleave.mul %e, %r : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %l = cleave.reduce sum %m dims = [0] : (tensor<8xf32>) -> tensor<f32>
  %b1 = cleave.mul %x, %x : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %b2 = cleave.exp %b1 : tensor<8xf32>
  %b3 = cleave.add %b1, %b2 : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %g = cleave.mul %r, %b3 : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %l, %g, %side : tensor<f32>, tensor<8xf32>, tensor<8xf32>
}

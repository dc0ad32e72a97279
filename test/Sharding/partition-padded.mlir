// RUN: cleave-opt %s --cleave-autodiff --cleave-optimizer="optimizer=sgd lr=0.1" --canonicalize --cse --cleave-partition="tp=4 plan=%S/Inputs/w-vocab.txt" | FileCheck %s

// A vocabulary of 10 on 4 ranks: chunks of 3 rows, the last rank's ending
// in 2 rows of padding. The parameter is kept zero-padded, so the logits
// are zero there; each reduction over the vocabulary first puts its
// identity into the padding (-inf for the max, 0 for the sum), from a
// mask of the real indices (an iota compared with the vocabulary's 10, so
// that the IR does not grow with the vocabulary) of which every rank takes
// its chunk. No all-gather.
// CHECK-LABEL: func.func @head
// CHECK-SAME: %[[W:[a-z0-9]+]]: tensor<3x8xf32> {cleave.layout = #cleave.layout<dim = 0>, cleave.parameter = "w"}
// CHECK: %[[L:.*]] = cleave.matmul %{{.*}}, %[[W]] {transpose_rhs} : (tensor<4x8xf32>, tensor<3x8xf32>) -> tensor<4x3xf32>
// CHECK: %[[IDX:.*]] = cleave.iota dim = 2 : tensor<1x1x12xi64>
// CHECK: %[[TEN:.*]] = cleave.constant dense<10> : tensor<1x1x1xi64>
// CHECK: %[[LT:.*]] = cleave.cmp lt, %[[IDX]], %[[TEN]]
// CHECK: %[[REAL:.*]] = cleave.reshape %[[LT]] : tensor<1x1x12xi1> -> tensor<1x12xi1>
// CHECK: %[[MINE:.*]] = cleave.shard_slice %[[REAL]] axes = [0] dim = 1 : tensor<1x12xi1> -> tensor<1x3xi1>
// CHECK: %[[NEGINF:.*]] = cleave.constant dense<0xFF800000> : tensor<1x1xf32>
// CHECK: %[[LM:.*]] = cleave.select %[[MINE]], %[[L]], %[[NEGINF]]
// CHECK: %[[M:.*]] = cleave.reduce  max %[[LM]] dims = [1]
// CHECK: %[[MAX:.*]] = cleave.all_reduce max %[[M]]
// CHECK: %[[E:.*]] = cleave.exp
// CHECK: %[[ZERO:.*]] = cleave.constant dense<0.000000e+00> : tensor<1x1xf32>
// CHECK: %[[EM:.*]] = cleave.select %{{.*}}, %[[E]], %[[ZERO]]
// CHECK: cleave.reduce  sum %[[EM]] dims = [1]
// CHECK-NOT: all_gather
// The logits' gradient holds the unmasked softmax in the padding, so the
// weight gradient is not known zero there (zero times garbage may be NaN):
// the new parameter is masked back to zero before it is returned.
// CHECK: %[[G:.*]] = cleave.matmul %{{.*}}, %{{.*}} {transpose_lhs} : (tensor<4x3xf32>, tensor<4x8xf32>) -> tensor<3x8xf32>
// CHECK: %[[SUB:.*]] = cleave.sub %[[W]], %{{.*}}
// CHECK: %[[ROWS:.*]] = cleave.shard_slice %{{.*}} axes = [0] dim = 0 : tensor<12x1xi1> -> tensor<3x1xi1>
// CHECK: %[[NEW:.*]] = cleave.select %[[ROWS]], %[[SUB]], %{{.*}}
// CHECK: return %{{.*}}, %[[NEW]], %[[G]]
func.func @head(%x: tensor<4x8xf32> {cleave.input = "x"}, %w: tensor<10x8xf32> {cleave.parameter = "w"}) -> (tensor<f32> {cleave.loss}) {
  %0 = cleave.matmul %x, %w {transpose_rhs} : (tensor<4x8xf32>, tensor<10x8xf32>) -> tensor<4x10xf32>
  %1 = cleave.reduce max %0 dims = [1] {keep_dims, cleave.no_grad} : (tensor<4x10xf32>) -> tensor<4x1xf32>
  %2 = cleave.sub %0, %1 : (tensor<4x10xf32>, tensor<4x1xf32>) -> tensor<4x10xf32>
  %3 = cleave.exp %2 : tensor<4x10xf32>
  %4 = cleave.reduce sum %3 dims = [1] {keep_dims} : (tensor<4x10xf32>) -> tensor<4x1xf32>
  %5 = cleave.log %4 : tensor<4x1xf32>
  %6 = cleave.add %5, %1 : (tensor<4x1xf32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  %7 = cleave.reduce sum %6 dims = [0, 1] : (tensor<4x1xf32>) -> tensor<f32>
  return %7 : tensor<f32>
}

// RUN: cleave-opt %s --cleave-autodiff --cleave-optimizer="optimizer=adamw lr=0.001" --canonicalize --cse --cleave-partition=tp=4 | FileCheck %s
// At tp=2 the search scores these with split products kept as partial sums
// (cleave.partition_how = "embed_products"): chosen by its own pass and
// applied as recorded, the step is the one the partitioner's own search
// writes.
// RUN: cleave-opt %s --cleave-autodiff --cleave-optimizer="optimizer=adamw lr=0.001" --canonicalize --cse --cleave-partition=tp=2 > %t.alone
// RUN: cleave-opt %s --cleave-autodiff --cleave-optimizer="optimizer=adamw lr=0.001" --canonicalize --cse --cleave-choose-layouts=tp=2 | FileCheck %s --check-prefix=HOW
// HOW: cleave.partition_how = "embed_products"
// RUN: cleave-opt %s --cleave-autodiff --cleave-optimizer="optimizer=adamw lr=0.001" --canonicalize --cse --cleave-choose-layouts=tp=2 --cleave-partition=tp=2 > %t.composed
// RUN: diff %t.alone %t.composed

// 31 heads of width 4 that 4 ranks do not divide, from one fused q|k|v
// weight: the search splits it by whole heads in each of its 3 blocks
// (8 per rank, the last rank's last one padding) and the output
// projection by the same heads, so attention stays local per head, with
// one all-reduce forward and no all-gather (a plain split, 31 of each
// block's 124 rows per rank, would cut heads and gather q, k and v).
// CHECK-LABEL: func.func @heads
// CHECK-SAME: tensor<96x124xf32> {cleave.layout = #cleave.layout<dim = 0, blocks = 3, granule = 4>, cleave.parameter = "qkv"}
// CHECK-SAME: tensor<124x32xf32> {cleave.layout = #cleave.layout<dim = 1, granule = 4>, cleave.parameter = "o"}
// CHECK-NOT: cleave.all_gather
// CHECK: %[[QKV:.*]] = cleave.matmul %arg0, %arg1 {transpose_rhs} : (tensor<1024x124xf32>, tensor<96x124xf32>) -> tensor<1024x96xf32>
// Each block's local heads are taken whole.
// CHECK: cleave.slice %[[QKV]] starts = [0, 0] steps = [1, 1] : tensor<1024x96xf32> -> tensor<1024x32xf32>
// CHECK: cleave.slice %[[QKV]] starts = [0, 32] steps = [1, 1] : tensor<1024x96xf32> -> tensor<1024x32xf32>
// CHECK: cleave.slice %[[QKV]] starts = [0, 64] steps = [1, 1] : tensor<1024x96xf32> -> tensor<1024x32xf32>
// CHECK: cleave.reshape %{{.*}} : tensor<1024x32xf32> -> tensor<1024x8x4xf32>
// CHECK: cleave.softmax %{{.*}} axis = 2 : tensor<8x1024x1024xf32>
// CHECK: cleave.reshape %{{.*}} : tensor<1024x8x4xf32> -> tensor<1024x32xf32>
// CHECK: cleave.matmul %{{.*}}, %arg2 {transpose_rhs} : (tensor<1024x32xf32>, tensor<124x32xf32>) -> tensor<1024x124xf32>
// CHECK: cleave.all_reduce  sum
// CHECK-SAME: cleave.megatron
// The gradients are zero in the padding heads (products with the
// zero-padded weights), the AdamW moments too; the new parameters are
// masked back to zero there, per block: of each block's 128 padded rows
// (a [3, 128] view of the 384), the first 124 are real.
// CHECK: %[[ROW:.*]] = cleave.iota dim = 1 : tensor<3x128x1xi64>
// CHECK: %[[N:.*]] = cleave.constant dense<124> : tensor<1x1x1xi64>
// CHECK: %[[LT:.*]] = cleave.cmp  lt, %[[ROW]], %[[N]]
// CHECK: %[[REAL:.*]] = cleave.reshape %[[LT]] : tensor<3x128x1xi1> -> tensor<384x1xi1>
// CHECK: %[[MINE:.*]] = cleave.shard_slice %[[REAL]] axes = [0] dim = 0 {blocks = 3 : i64} : tensor<384x1xi1> -> tensor<96x1xi1>
// CHECK: %[[NEW:.*]] = cleave.select %[[MINE]], %{{.*}}, %{{.*}} : (tensor<96x1xi1>, tensor<96x124xf32>, tensor<1x1xf32>) -> tensor<96x124xf32>
// CHECK: return %{{.*}}, %[[NEW]]
func.func @heads(%x: tensor<1024x124xf32> {cleave.input = "x"}, %w: tensor<372x124xf32> {cleave.parameter = "qkv"}, %o: tensor<124x124xf32> {cleave.parameter = "o"}) -> (tensor<f32> {cleave.loss}) {
  %0 = cleave.matmul %x, %w {transpose_rhs} : (tensor<1024x124xf32>, tensor<372x124xf32>) -> tensor<1024x372xf32>
  %q = cleave.slice %0 starts = [0, 0] steps = [1, 1] : tensor<1024x372xf32> -> tensor<1024x124xf32>
  %k = cleave.slice %0 starts = [0, 124] steps = [1, 1] : tensor<1024x372xf32> -> tensor<1024x124xf32>
  %v = cleave.slice %0 starts = [0, 248] steps = [1, 1] : tensor<1024x372xf32> -> tensor<1024x124xf32>
  %q1 = cleave.reshape %q : tensor<1024x124xf32> -> tensor<1024x31x4xf32>
  %q2 = cleave.transpose %q1 perm = [1, 0, 2] : (tensor<1024x31x4xf32>) -> tensor<31x1024x4xf32>
  %k1 = cleave.reshape %k : tensor<1024x124xf32> -> tensor<1024x31x4xf32>
  %k2 = cleave.transpose %k1 perm = [1, 2, 0] : (tensor<1024x31x4xf32>) -> tensor<31x4x1024xf32>
  %v1 = cleave.reshape %v : tensor<1024x124xf32> -> tensor<1024x31x4xf32>
  %v2 = cleave.transpose %v1 perm = [1, 0, 2] : (tensor<1024x31x4xf32>) -> tensor<31x1024x4xf32>
  %s = cleave.matmul %q2, %k2 : (tensor<31x1024x4xf32>, tensor<31x4x1024xf32>) -> tensor<31x1024x1024xf32>
  %p = cleave.softmax %s axis = 2 : tensor<31x1024x1024xf32>
  %a = cleave.matmul %p, %v2 : (tensor<31x1024x1024xf32>, tensor<31x1024x4xf32>) -> tensor<31x1024x4xf32>
  %a1 = cleave.transpose %a perm = [1, 0, 2] : (tensor<31x1024x4xf32>) -> tensor<1024x31x4xf32>
  %a2 = cleave.reshape %a1 : tensor<1024x31x4xf32> -> tensor<1024x124xf32>
  %y = cleave.matmul %a2, %o {transpose_rhs} : (tensor<1024x124xf32>, tensor<124x124xf32>) -> tensor<1024x124xf32>
  %t = cleave.tanh %y : tensor<1024x124xf32>
  %l = cleave.reduce sum %t dims = [0, 1] : (tensor<1024x124xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

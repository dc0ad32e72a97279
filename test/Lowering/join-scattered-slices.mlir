// RUN: cleave-opt %s --split-input-file --cleave-join-scattered-slices | FileCheck %s

// GPT-2's c_attn split into q, k and v, differentiated: the three placed
// gradients, summed, are the three side by side, whatever the sum's order.
// CHECK-LABEL: func.func @qkv_split_backward
// CHECK-SAME: (%[[Q:.*]]: tensor<4x2xf32>, %[[K:.*]]: tensor<4x2xf32>, %[[V:.*]]: tensor<4x2xf32>)
// CHECK-NEXT: %[[G:.*]] = cleave.concat %[[Q]], %[[K]], %[[V]] axis = 1
// CHECK-NEXT: return %[[G]]
func.func @qkv_split_backward(%q: tensor<4x2xf32>, %k: tensor<4x2xf32>, %v: tensor<4x2xf32>) -> tensor<4x6xf32> {
  %c = cleave.slice_scatter %v starts = [0, 4] steps = [1, 1] : tensor<4x2xf32> -> tensor<4x6xf32>
  %a = cleave.slice_scatter %q starts = [0, 0] steps = [1, 1] : tensor<4x2xf32> -> tensor<4x6xf32>
  %b = cleave.slice_scatter %k starts = [0, 2] steps = [1, 1] : tensor<4x2xf32> -> tensor<4x6xf32>
  %s = cleave.add %c, %a : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  %g = cleave.add %s, %b : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  return %g : tensor<4x6xf32>
}

// -----

// Sums that are not a tiling stay: a gap (an element no piece holds),
// strided windows, and an inner sum read outside the tree.
// CHECK-LABEL: func.func @other_sums_stay
// CHECK-NOT: cleave.concat
// CHECK-COUNT-4: cleave.add
func.func @other_sums_stay(%q: tensor<4x2xf32>, %k: tensor<4x2xf32>, %v: tensor<4x3xf32>) -> (tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>) {
  %a = cleave.slice_scatter %q starts = [0, 0] steps = [1, 1] : tensor<4x2xf32> -> tensor<4x6xf32>
  %b = cleave.slice_scatter %k starts = [0, 3] steps = [1, 1] : tensor<4x2xf32> -> tensor<4x6xf32>
  %gap = cleave.add %a, %b : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  %e = cleave.slice_scatter %q starts = [0, 0] steps = [1, 2] : tensor<4x2xf32> -> tensor<4x6xf32>
  %o = cleave.slice_scatter %k starts = [0, 1] steps = [1, 2] : tensor<4x2xf32> -> tensor<4x6xf32>
  %c = cleave.slice_scatter %k starts = [0, 4] steps = [1, 1] : tensor<4x2xf32> -> tensor<4x6xf32>
  %strided = cleave.add %e, %o : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  %b2 = cleave.slice_scatter %k starts = [0, 2] steps = [1, 1] : tensor<4x2xf32> -> tensor<4x6xf32>
  %inner = cleave.add %a, %b2 : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  %shared = cleave.add %inner, %c : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  return %gap, %strided, %inner, %shared : tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>
}

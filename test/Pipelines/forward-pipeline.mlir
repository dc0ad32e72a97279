// RUN: cleave-opt %s --cleave-forward-pipeline | FileCheck %s --enable-var-scope

// Canonicalization folds the reshape chain and the identity transpose, CSE
// merges the duplicate exp, and every remaining result gets an offset (the
// function's result in the caller's tensor: -1).
// CHECK-LABEL: func @main
// CHECK-SAME: cleave.arena_bytes = 64
func.func @main(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // CHECK-NOT: cleave.transpose
  %t = cleave.transpose %x perm = [0, 1] : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: %[[E:.*]] = cleave.exp %{{.*}} {cleave.offsets = array<i64: 0>}
  %0 = cleave.exp %t : tensor<2x3xf32>
  %1 = cleave.exp %t : tensor<2x3xf32>
  // CHECK-NEXT: %[[A:.*]] = cleave.add %[[E]], %[[E]] {cleave.offsets = array<i64: -1>}
  %2 = cleave.add %0, %1 : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK-NEXT: return %[[A]]
  %3 = cleave.reshape %2 : tensor<2x3xf32> -> tensor<6xf32>
  %4 = cleave.reshape %3 : tensor<6xf32> -> tensor<2x3xf32>
  return %4 : tensor<2x3xf32>
}

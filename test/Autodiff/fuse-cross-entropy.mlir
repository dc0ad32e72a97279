// cleave-fuse-cross-entropy on the losses' builder's cross-entropy (as
// --cleave-append-loss writes it): the shifted logits, their exponentials
// and the one-hot pick become one cleave.cross_entropy; the max that
// stabilises stays (marked no_grad) and so does the rest of the loss.
// RUN: cleave-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(cleave-append-loss{loss=cross_entropy},cleave-fuse-cross-entropy,canonicalize))' | FileCheck %s

// CHECK-LABEL: func.func @classifier
// CHECK-SAME: (%[[X:.*]]: tensor<4x10xf32> {{.*}}, %[[L:.*]]: tensor<4xi64> {cleave.input = "labels"})
// CHECK-DAG: %[[M:.*]] = cleave.reduce  max %[[X]] dims = [1] {cleave.no_grad, keep_dims}
// CHECK-DAG: %[[IDS:.*]] = cleave.iota
// CHECK: %[[SE:.*]], %[[T:.*]] = cleave.cross_entropy %[[X]], %{{.*}}, %[[IDS]], %[[M]] axis = 1 : (tensor<4x10xf32>, tensor<4x1xi64>, tensor<1x10xi64>, tensor<4x1xf32>) -> (tensor<4x1xf32>, tensor<4x1xf32>)
// CHECK-NOT: cleave.exp
// CHECK: %[[LOG:.*]] = cleave.log %[[SE]]
// CHECK: cleave.sub %[[LOG]], %[[T]]
func.func @classifier(%x: tensor<4x10xf32> {cleave.input = "x"}) -> (tensor<4x10xf32> {cleave.output = "logits"}) {
  return %x : tensor<4x10xf32>
}

// -----

// Per-position classes ([batch, positions, classes]).
// CHECK-LABEL: func.func @per_position
// CHECK: cleave.cross_entropy %{{.*}} axis = 2 : (tensor<2x3x5xf32>, tensor<2x3x1xi64>, tensor<1x1x5xi64>, tensor<2x3x1xf32>)
func.func @per_position(%x: tensor<2x3x5xf32> {cleave.input = "x"}) -> (tensor<2x3x5xf32> {cleave.output = "logits"}) {
  return %x : tensor<2x3x5xf32>
}

// -----

// Left alone: the shifted logits are read elsewhere too.
// CHECK-LABEL: func.func @shifted_reused
// CHECK-NOT: cleave.cross_entropy
// CHECK: cleave.exp
func.func @shifted_reused(%x: tensor<4x8xf32>, %labels: tensor<4x1xi64>, %ids: tensor<1x8xi64>) -> (tensor<4x1xf32>, tensor<4x1xf32>, tensor<4x8xf32>) {
  %m = cleave.reduce max %x dims = [1] {cleave.no_grad, keep_dims} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %s = cleave.sub %x, %m : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %e = cleave.exp %s : tensor<4x8xf32>
  %se = cleave.reduce sum %e dims = [1] {keep_dims} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %hit = cleave.cmp eq, %labels, %ids : (tensor<4x1xi64>, tensor<1x8xi64>) -> tensor<4x8xi1>
  %zero = cleave.constant dense<0.0> : tensor<1x1xf32>
  %p = cleave.select %hit, %s, %zero : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<1x1xf32>) -> tensor<4x8xf32>
  %t = cleave.reduce sum %p dims = [1] {keep_dims} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  return %se, %t, %s : tensor<4x1xf32>, tensor<4x1xf32>, tensor<4x8xf32>
}

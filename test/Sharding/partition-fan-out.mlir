// RUN: cleave-opt %s --cleave-partition=tp=4 | FileCheck %s

// With the plan's partial fan-out (cleave.partition_how), a partial sum
// stays partial into each user that can take it so, but not where a user
// multiplies it with another partial sum (two partial factors do not make
// a partial product): then it is reduced once, before it fans out, and the
// reduced copy serves every user. p (row-parallel) is read scaled by a
// whole value and multiplied by q (row-parallel too): p is reduced once,
// p * q stays partial (q scaled by a whole p) and is reduced before its
// tanh. Kept partial into the scaling, p was reduced there and again for
// the product (3 all-reduces): a dense mixture of experts reduced each
// expert's output again in its backward, which reads it against the output
// gradient.
// CHECK: %[[P:.*]] = cleave.matmul
// CHECK: %[[Q:.*]] = cleave.matmul
// CHECK: %[[PW:.*]] = cleave.all_reduce sum %[[P]] axes = [0]
// CHECK: cleave.mul %[[PW]], %{{.*}}
// CHECK: %[[B:.*]] = cleave.mul %[[PW]], %[[Q]]
// CHECK: cleave.all_reduce sum %[[B]] axes = [0]
// CHECK-NOT: cleave.all_reduce
func.func @fan(%x: tensor<4x8xf32> {cleave.input = "x"}, %w: tensor<8x8xf32> {cleave.layout = #cleave.layout<dim = 1>, cleave.parameter = "w"}, %v: tensor<8x8xf32> {cleave.layout = #cleave.layout<dim = 1>, cleave.parameter = "v"}) -> (tensor<f32> {cleave.loss}) attributes {cleave.layouts_for = 4 : i64, cleave.partition_how = "partial_fan_out"} {
  %p = cleave.matmul %x, %w {transpose_rhs} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %q = cleave.matmul %x, %v {transpose_rhs} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r = cleave.tanh %x : tensor<4x8xf32>
  %a = cleave.mul %p, %r : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %b = cleave.mul %p, %q : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %ta = cleave.tanh %a : tensor<4x8xf32>
  %tb = cleave.tanh %b : tensor<4x8xf32>
  %sa = cleave.reduce sum %ta dims = [0, 1] : (tensor<4x8xf32>) -> tensor<f32>
  %sb = cleave.reduce sum %tb dims = [0, 1] : (tensor<4x8xf32>) -> tensor<f32>
  %l = cleave.add %sa, %sb : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %l : tensor<f32>
}

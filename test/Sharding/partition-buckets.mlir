// RUN: cleave-opt %s --cleave-autodiff --cleave-optimizer="optimizer=sgd lr=0.1" --canonicalize --cse --cleave-partition=tp=4 --cleave-bucket-gradients | FileCheck %s
// The layouts chosen by their own pass, as the pipeline does: the same
// step, with the search's reasons (not "fixed by --plan").
// RUN: cleave-opt %s --cleave-autodiff --cleave-optimizer="optimizer=sgd lr=0.1" --canonicalize --cse --cleave-choose-layouts=tp=4 --cleave-partition=tp=4 --cleave-bucket-gradients | FileCheck %s

// A parallel block from two norms (GPT-NeoX): each branch's column-parallel
// input gradient is a partial sum, and a LayerNorm backward is linear in
// its incoming gradient, so the search keeps both partial through the
// norms instead of reducing each before its norm. The norms' weight and
// bias gradients are then partial sums too: they are reduced together, in
// one bucket (concatenated, one all-reduce, cut apart), where the
// optimizer first needs one of them. The forward's two row-parallel
// outputs meet in the residual sum and share one all-reduce.
// CHECK-LABEL: func.func @two_norms
// CHECK-SAME: tensor<128x128xf32> {cleave.layout = #cleave.layout<dim = 0>, cleave.parameter = "attn.in"}
// CHECK: cleave.all_reduce  sum %{{.*}} axes = [0] {cleave.carries = "{{[0-9]+:[0-9]+}}", cleave.megatron, cleave.origin = "{{[^"]*}}", cleave.phase = "forward"
// CHECK-NOT: cleave.all_reduce
// CHECK: %[[ALL:.*]] = cleave.concat %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} axis = 0 : (tensor<128xf32>, tensor<128xf32>, tensor<128xf32>, tensor<128xf32>) -> tensor<512xf32>
// CHECK: %[[SUM:.*]] = cleave.all_reduce  sum %[[ALL]] axes = [0] {cleave.carries = "{{[0-9]+:[0-9]+}}", cleave.origin = "{{[^"]*}}", cleave.phase = "optimizer", cleave.reason = "one bucket: the gradient of parameter
// CHECK-SAME: the search keeps it R; every other layout of it gathers
// CHECK: cleave.slice %[[SUM]] starts = [0] steps = [1] : tensor<512xf32> -> tensor<128xf32>
// CHECK: cleave.slice %[[SUM]] starts = [128] steps = [1] : tensor<512xf32> -> tensor<128xf32>
// CHECK: cleave.slice %[[SUM]] starts = [256] steps = [1] : tensor<512xf32> -> tensor<128xf32>
// CHECK: cleave.slice %[[SUM]] starts = [384] steps = [1] : tensor<512xf32> -> tensor<128xf32>
// CHECK-NOT: cleave.all_reduce
// CHECK-NOT: cleave.all_gather
// CHECK: return
func.func @two_norms(%x: tensor<64x128xf32> {cleave.input = "x"}, %g1: tensor<128xf32> {cleave.parameter = "ln1.weight"}, %b1: tensor<128xf32> {cleave.parameter = "ln1.bias"}, %g2: tensor<128xf32> {cleave.parameter = "ln2.weight"}, %b2: tensor<128xf32> {cleave.parameter = "ln2.bias"}, %u1: tensor<512x128xf32> {cleave.parameter = "attn.in"}, %d1: tensor<128x512xf32> {cleave.parameter = "attn.out"}, %u2: tensor<512x128xf32> {cleave.parameter = "mlp.in"}, %d2: tensor<128x512xf32> {cleave.parameter = "mlp.out"}) -> (tensor<f32> {cleave.loss}) {
  %n1, %m1, %s1 = cleave.layer_norm %x scale %g1 bias %b1 axis = 1 eps = 1.0E-5 : (tensor<64x128xf32>, tensor<128xf32>, tensor<128xf32>) -> (tensor<64x128xf32>, tensor<64x1xf32>, tensor<64x1xf32>)
  %n2, %m2, %s2 = cleave.layer_norm %x scale %g2 bias %b2 axis = 1 eps = 1.0E-5 : (tensor<64x128xf32>, tensor<128xf32>, tensor<128xf32>) -> (tensor<64x128xf32>, tensor<64x1xf32>, tensor<64x1xf32>)
  %h1 = cleave.matmul %n1, %u1 {transpose_rhs} : (tensor<64x128xf32>, tensor<512x128xf32>) -> tensor<64x512xf32>
  %t1 = cleave.tanh %h1 : tensor<64x512xf32>
  %a = cleave.matmul %t1, %d1 {transpose_rhs} : (tensor<64x512xf32>, tensor<128x512xf32>) -> tensor<64x128xf32>
  %h2 = cleave.matmul %n2, %u2 {transpose_rhs} : (tensor<64x128xf32>, tensor<512x128xf32>) -> tensor<64x512xf32>
  %t2 = cleave.tanh %h2 : tensor<64x512xf32>
  %m = cleave.matmul %t2, %d2 {transpose_rhs} : (tensor<64x512xf32>, tensor<128x512xf32>) -> tensor<64x128xf32>
  %y0 = cleave.add %x, %a : (tensor<64x128xf32>, tensor<64x128xf32>) -> tensor<64x128xf32>
  %y = cleave.add %y0, %m : (tensor<64x128xf32>, tensor<64x128xf32>) -> tensor<64x128xf32>
  %t = cleave.tanh %y : tensor<64x128xf32>
  %l = cleave.reduce sum %t dims = [0, 1] : (tensor<64x128xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// cleave-fuse-attention on attention as exporters write it: each family's
// scale, mask and bias idiom becomes one cleave.attention; blocks that are
// not exactly attention are left alone.
// RUN: cleave-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(cleave-fuse-attention,canonicalize))' | FileCheck %s

// GPT-2 (torch.onnx): K^T by transpose, / sqrt(d), masked_fill(~tril, -inf).
// CHECK-LABEL: func.func @gpt2
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x8x16xf32>, %[[KT:.*]]: tensor<2x8x4x16xf32>, %[[V:.*]]: tensor<2x4x8x16xf32>)
// CHECK: %[[K:.*]] = cleave.transpose %[[KT]] perm = [0, 2, 1, 3]
// CHECK: %[[O:.*]], %{{.*}} = cleave.attention %[[Q]], %[[K]], %[[V]] scale = 2.500000e-01 causal :
// CHECK-NOT: cleave.softmax
// CHECK: return %[[O]]
func.func @gpt2(%q: tensor<2x4x8x16xf32>, %kt: tensor<2x8x4x16xf32>, %v: tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32> {
  %k = cleave.transpose %kt perm = [0, 2, 3, 1] : (tensor<2x8x4x16xf32>) -> tensor<2x4x16x8xf32>
  %s = cleave.matmul %q, %k : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %c = cleave.constant dense<4.0> : tensor<1x1x1x1xf32>
  %t = cleave.div %s, %c : (tensor<2x4x8x8xf32>, tensor<1x1x1x1xf32>) -> tensor<2x4x8x8xf32>
  %m = cleave.constant dense<[[[[false, true, true, true, true, true, true, true], [false, false, true, true, true, true, true, true], [false, false, false, true, true, true, true, true], [false, false, false, false, true, true, true, true], [false, false, false, false, false, true, true, true], [false, false, false, false, false, false, true, true], [false, false, false, false, false, false, false, true], [false, false, false, false, false, false, false, false]]]]> : tensor<1x1x8x8xi1>
  %inf = cleave.constant dense<0xFF800000> : tensor<1x1x1x1xf32>
  %u = cleave.select %m, %inf, %t : (tensor<1x1x8x8xi1>, tensor<1x1x1x1xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %p = cleave.softmax %u axis = 3 : tensor<2x4x8x8xf32>
  %o = cleave.matmul %p, %v : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}

// -----

// LLaMA: an additive triu(-inf) mask is the causal flag; BERT-style padding
// (an input) stays a bias; the scale sits between the matmul and both adds.
// CHECK-LABEL: func.func @llama_padding
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x4x8xf32>, %[[K:.*]]: tensor<2x4x4x8xf32>, %[[V:.*]]: tensor<2x4x4x8xf32>, %[[PAD:.*]]: tensor<2x1x1x4xf32>)
// CHECK: cleave.attention %[[Q]], %[[K]], %[[V]] bias %[[PAD]] scale = 5.000000e-01 causal :
// CHECK-NOT: cleave.softmax
func.func @llama_padding(%q: tensor<2x4x4x8xf32>, %k: tensor<2x4x4x8xf32>, %v: tensor<2x4x4x8xf32>, %pad: tensor<2x1x1x4xf32>) -> tensor<2x4x4x8xf32> {
  %s = cleave.matmul %q, %k {transpose_rhs} : (tensor<2x4x4x8xf32>, tensor<2x4x4x8xf32>) -> tensor<2x4x4x4xf32>
  %c = cleave.constant dense<0.5> : tensor<1x1x1x1xf32>
  %t = cleave.mul %c, %s : (tensor<1x1x1x1xf32>, tensor<2x4x4x4xf32>) -> tensor<2x4x4x4xf32>
  %m = cleave.constant dense<[[[[0.0, 0xFF800000, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000, 0xFF800000], [0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x4x4xf32>
  %u = cleave.add %t, %m : (tensor<2x4x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<2x4x4x4xf32>
  %w = cleave.add %pad, %u : (tensor<2x1x1x4xf32>, tensor<2x4x4x4xf32>) -> tensor<2x4x4x4xf32>
  %p = cleave.softmax %w axis = 3 : tensor<2x4x4x4xf32>
  %o = cleave.matmul %p, %v : (tensor<2x4x4x4xf32>, tensor<2x4x4x8xf32>) -> tensor<2x4x4x8xf32>
  return %o : tensor<2x4x4x8xf32>
}

// -----

// A bias added before the scale is scaled with the scores (T5-like learned
// bias, here divided by 2); multi-query attention: one K/V head broadcast
// by the matmul.
// CHECK-LABEL: func.func @scaled_bias_mqa
// CHECK-SAME: (%[[Q:.*]]: tensor<1x4x4x8xf32>, %[[K:.*]]: tensor<1x1x4x8xf32>, %[[V:.*]]: tensor<1x1x4x8xf32>, %[[B:.*]]: tensor<1x4x4x4xf32>)
// CHECK: %[[HALF:.*]] = cleave.constant dense<5.000000e-01> : tensor<1x1x1x1xf32>
// CHECK: %[[SB:.*]] = cleave.mul %[[B]], %[[HALF]]
// CHECK: cleave.attention %[[Q]], %[[K]], %[[V]] bias %[[SB]] scale = 5.000000e-01 :
func.func @scaled_bias_mqa(%q: tensor<1x4x4x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>, %b: tensor<1x4x4x4xf32>) -> tensor<1x4x4x8xf32> {
  %s = cleave.matmul %q, %k {transpose_rhs} : (tensor<1x4x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<1x4x4x4xf32>
  %u = cleave.add %s, %b : (tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  %c = cleave.constant dense<2.0> : tensor<1x1x1x1xf32>
  %t = cleave.div %u, %c : (tensor<1x4x4x4xf32>, tensor<1x1x1x1xf32>) -> tensor<1x4x4x4xf32>
  %p = cleave.softmax %t axis = 3 : tensor<1x4x4x4xf32>
  %o = cleave.matmul %p, %v : (tensor<1x4x4x4xf32>, tensor<1x1x4x8xf32>) -> tensor<1x4x4x8xf32>
  return %o : tensor<1x4x4x8xf32>
}

// -----

// Left alone: the probabilities are also returned; a sliding-window mask
// (not causal) by select; a mask value that does not exclude (-1); a
// negative scale.
// CHECK-LABEL: func.func @probs_returned
// CHECK-NOT: cleave.attention
// CHECK: cleave.softmax
func.func @probs_returned(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4x4xf32>) {
  %s = cleave.matmul %q, %k {transpose_rhs} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %p = cleave.softmax %s axis = 3 : tensor<1x2x4x4xf32>
  %o = cleave.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o, %p : tensor<1x2x4x8xf32>, tensor<1x2x4x4xf32>
}

// -----

// CHECK-LABEL: func.func @sliding_window
// CHECK-NOT: cleave.attention
// CHECK: cleave.softmax
func.func @sliding_window(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %s = cleave.matmul %q, %k {transpose_rhs} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %m = cleave.constant dense<[[[[false, true, true, true], [false, false, true, true], [true, false, false, true], [true, true, false, false]]]]> : tensor<1x1x4x4xi1>
  %inf = cleave.constant dense<0xFF800000> : tensor<1x1x1x1xf32>
  %u = cleave.select %m, %inf, %s : (tensor<1x1x4x4xi1>, tensor<1x1x1x1xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = cleave.softmax %u axis = 3 : tensor<1x2x4x4xf32>
  %o = cleave.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// CHECK-LABEL: func.func @weak_mask
// CHECK-NOT: cleave.attention
// CHECK: cleave.softmax
func.func @weak_mask(%q: tensor<1x2x2x8xf32>, %k: tensor<1x2x2x8xf32>, %v: tensor<1x2x2x8xf32>) -> tensor<1x2x2x8xf32> {
  %s = cleave.matmul %q, %k {transpose_rhs} : (tensor<1x2x2x8xf32>, tensor<1x2x2x8xf32>) -> tensor<1x2x2x2xf32>
  %m = cleave.constant dense<[[[[false, true], [false, false]]]]> : tensor<1x1x2x2xi1>
  %fill = cleave.constant dense<-1.0> : tensor<1x1x1x1xf32>
  %u = cleave.select %m, %fill, %s : (tensor<1x1x2x2xi1>, tensor<1x1x1x1xf32>, tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
  %p = cleave.softmax %u axis = 3 : tensor<1x2x2x2xf32>
  %o = cleave.matmul %p, %v : (tensor<1x2x2x2xf32>, tensor<1x2x2x8xf32>) -> tensor<1x2x2x8xf32>
  return %o : tensor<1x2x2x8xf32>
}

// -----

// CHECK-LABEL: func.func @negative_scale
// CHECK-NOT: cleave.attention
// CHECK: cleave.softmax
func.func @negative_scale(%q: tensor<1x2x2x8xf32>, %k: tensor<1x2x2x8xf32>, %v: tensor<1x2x2x8xf32>) -> tensor<1x2x2x8xf32> {
  %s = cleave.matmul %q, %k {transpose_rhs} : (tensor<1x2x2x8xf32>, tensor<1x2x2x8xf32>) -> tensor<1x2x2x2xf32>
  %c = cleave.constant dense<-1.0> : tensor<1x1x1x1xf32>
  %t = cleave.mul %s, %c : (tensor<1x2x2x2xf32>, tensor<1x1x1x1xf32>) -> tensor<1x2x2x2xf32>
  %p = cleave.softmax %t axis = 3 : tensor<1x2x2x2xf32>
  %o = cleave.matmul %p, %v : (tensor<1x2x2x2xf32>, tensor<1x2x2x8xf32>) -> tensor<1x2x2x8xf32>
  return %o : tensor<1x2x2x8xf32>
}

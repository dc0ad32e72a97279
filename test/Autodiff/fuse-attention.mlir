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

// -----

// Masks past 2^16 elements are not folded at import: ONNX's Trilu (and
// torch's tril on aranges) as the importer writes it, iota rows and
// columns, j - i <= 0 kept, is causal and recognised without evaluating it.
// CHECK-LABEL: func.func @trilu_at_run_time
// CHECK: cleave.attention %{{.*}}, %{{.*}}, %{{.*}} scale = 1.000000e+00 causal :
// CHECK-NOT: cleave.softmax
// CHECK-NOT: cleave.iota
func.func @trilu_at_run_time(%q: tensor<1x2x8x4xf32>, %k: tensor<1x2x8x4xf32>, %v: tensor<1x2x8x4xf32>) -> tensor<1x2x8x4xf32> {
  %s = cleave.matmul %q, %k {transpose_rhs} : (tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x8x8xf32>
  %row = cleave.iota dim = 0 : tensor<8x1xi64>
  %col = cleave.iota dim = 1 : tensor<1x8xi64>
  %d = cleave.sub %col, %row : (tensor<1x8xi64>, tensor<8x1xi64>) -> tensor<8x8xi64>
  %z = cleave.constant dense<0> : tensor<1x1xi64>
  %keep = cleave.cmp le, %d, %z : (tensor<8x8xi64>, tensor<1x1xi64>) -> tensor<8x8xi1>
  %t = cleave.constant dense<true> : tensor<8x8xi1>
  %f = cleave.constant dense<false> : tensor<1x1xi1>
  %m = cleave.select %keep, %t, %f : (tensor<8x8xi1>, tensor<8x8xi1>, tensor<1x1xi1>) -> tensor<8x8xi1>
  %m4 = cleave.reshape %m : tensor<8x8xi1> -> tensor<1x1x8x8xi1>
  %inf = cleave.constant dense<0xFF800000> : tensor<1x1x1x1xf32>
  %u = cleave.select %m4, %s, %inf : (tensor<1x1x8x8xi1>, tensor<1x2x8x8xf32>, tensor<1x1x1x1xf32>) -> tensor<1x2x8x8xf32>
  %p = cleave.softmax %u axis = 3 : tensor<1x2x8x8xf32>
  %o = cleave.matmul %p, %v : (tensor<1x2x8x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x8x4xf32>
  return %o : tensor<1x2x8x4xf32>
}

// -----

// Hugging Face's LLaMA mask: triu(full(min), diagonal = 1) from aranges,
// added as a bias; rows are the last 4 of 8 keys (a cache's queries):
// key j is kept for query i where j <= i + 4.
// CHECK-LABEL: func.func @hf_bias_offset
// CHECK: cleave.attention %{{.*}}, %{{.*}}, %{{.*}} scale = 1.000000e+00 causal :
// CHECK-NOT: cleave.softmax
func.func @hf_bias_offset(%q: tensor<1x2x4x4xf32>, %k: tensor<1x2x8x4xf32>, %v: tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32> {
  %s = cleave.matmul %q, %k {transpose_rhs} : (tensor<1x2x4x4xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x8xf32>
  %ar = cleave.constant dense<[4, 5, 6, 7]> : tensor<4xi64>
  %row = cleave.reshape %ar : tensor<4xi64> -> tensor<4x1xi64>
  %col = cleave.iota dim = 1 : tensor<1x8xi64>
  %one = cleave.constant dense<1> : tensor<1x1xi64>
  %r1 = cleave.add %row, %one : (tensor<4x1xi64>, tensor<1x1xi64>) -> tensor<4x1xi64>
  %future = cleave.cmp ge, %col, %r1 : (tensor<1x8xi64>, tensor<4x1xi64>) -> tensor<4x8xi1>
  %min = cleave.constant dense<-3.40282347E+38> : tensor<1x1xf32>
  %zero = cleave.constant dense<0.0> : tensor<1x1xf32>
  %b = cleave.select %future, %min, %zero : (tensor<4x8xi1>, tensor<1x1xf32>, tensor<1x1xf32>) -> tensor<4x8xf32>
  %b4 = cleave.reshape %b : tensor<4x8xf32> -> tensor<1x1x4x8xf32>
  %u = cleave.add %s, %b4 : (tensor<1x2x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<1x2x4x8xf32>
  %p = cleave.softmax %u axis = 3 : tensor<1x2x4x8xf32>
  %o = cleave.matmul %p, %v : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  return %o : tensor<1x2x4x4xf32>
}

// -----

// GPT-2's registered buffer, tril(ones(16, 16)) sliced to the sequence
// (bias[:, :, :T, :T]): a slice of a constant table; and BERT-style
// (1 - mask) * -10000 from a cast of it.
// CHECK-LABEL: func.func @sliced_buffer
// CHECK: cleave.attention %{{.*}}, %{{.*}}, %{{.*}} scale = 1.000000e+00 causal :
// CHECK: cleave.attention %{{.*}}, %{{.*}}, %{{.*}} scale = 1.000000e+00 causal :
// CHECK-NOT: cleave.softmax
func.func @sliced_buffer(%q: tensor<1x2x8x4xf32>, %k: tensor<1x2x8x4xf32>, %v: tensor<1x2x8x4xf32>) -> (tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) {
  %row = cleave.iota dim = 2 : tensor<1x1x16x16xi64>
  %col = cleave.iota dim = 3 : tensor<1x1x16x16xi64>
  %tril = cleave.cmp le, %col, %row : (tensor<1x1x16x16xi64>, tensor<1x1x16x16xi64>) -> tensor<1x1x16x16xi1>
  %m = cleave.slice %tril starts = [0, 0, 0, 0] steps = [1, 1, 1, 1] : tensor<1x1x16x16xi1> -> tensor<1x1x8x8xi1>
  %s = cleave.matmul %q, %k {transpose_rhs} : (tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x8x8xf32>
  %inf = cleave.constant dense<-1.0e9> : tensor<1x1x1x1xf32>
  %u = cleave.select %m, %s, %inf : (tensor<1x1x8x8xi1>, tensor<1x2x8x8xf32>, tensor<1x1x1x1xf32>) -> tensor<1x2x8x8xf32>
  %p = cleave.softmax %u axis = 3 : tensor<1x2x8x8xf32>
  %o = cleave.matmul %p, %v : (tensor<1x2x8x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x8x4xf32>
  %mf = cleave.cast %m : tensor<1x1x8x8xi1> -> tensor<1x1x8x8xf32>
  %one = cleave.constant dense<1.0> : tensor<1x1x1x1xf32>
  %inv = cleave.sub %one, %mf : (tensor<1x1x1x1xf32>, tensor<1x1x8x8xf32>) -> tensor<1x1x8x8xf32>
  %big = cleave.constant dense<-10000.0> : tensor<1x1x1x1xf32>
  %b = cleave.mul %inv, %big : (tensor<1x1x8x8xf32>, tensor<1x1x1x1xf32>) -> tensor<1x1x8x8xf32>
  %s2 = cleave.matmul %q, %k {transpose_rhs} : (tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x8x8xf32>
  %u2 = cleave.add %s2, %b : (tensor<1x2x8x8xf32>, tensor<1x1x8x8xf32>) -> tensor<1x2x8x8xf32>
  %p2 = cleave.softmax %u2 axis = 3 : tensor<1x2x8x8xf32>
  %o2 = cleave.matmul %p2, %v : (tensor<1x2x8x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x8x4xf32>
  return %o, %o2 : tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>
}

// -----

// Built at run time but not causal: the diagonal excluded (j - i < 0), a
// sliding window (i - j < 3), and a mask over a batch dim: all stay unfused.
// CHECK-LABEL: func.func @not_causal_at_run_time
// CHECK-NOT: cleave.attention
// CHECK-COUNT-3: cleave.softmax
func.func @not_causal_at_run_time(%q: tensor<2x2x8x4xf32>, %k: tensor<2x2x8x4xf32>, %v: tensor<2x2x8x4xf32>) -> (tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32>) {
  %row = cleave.iota dim = 2 : tensor<1x1x8x8xi64>
  %col = cleave.iota dim = 3 : tensor<1x1x8x8xi64>
  %strict = cleave.cmp lt, %col, %row : (tensor<1x1x8x8xi64>, tensor<1x1x8x8xi64>) -> tensor<1x1x8x8xi1>
  %back = cleave.sub %row, %col : (tensor<1x1x8x8xi64>, tensor<1x1x8x8xi64>) -> tensor<1x1x8x8xi64>
  %three = cleave.constant dense<3> : tensor<1x1x1x1xi64>
  %window = cleave.cmp lt, %back, %three : (tensor<1x1x8x8xi64>, tensor<1x1x1x1xi64>) -> tensor<1x1x8x8xi1>
  %batch = cleave.iota dim = 0 : tensor<2x1x8x8xi64>
  %bcol = cleave.sub %col, %batch : (tensor<1x1x8x8xi64>, tensor<2x1x8x8xi64>) -> tensor<2x1x8x8xi64>
  %brow = cleave.cmp le, %bcol, %row : (tensor<2x1x8x8xi64>, tensor<1x1x8x8xi64>) -> tensor<2x1x8x8xi1>
  %inf = cleave.constant dense<0xFF800000> : tensor<1x1x1x1xf32>
  %s = cleave.matmul %q, %k {transpose_rhs} : (tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32>) -> tensor<2x2x8x8xf32>
  %u = cleave.select %strict, %s, %inf : (tensor<1x1x8x8xi1>, tensor<2x2x8x8xf32>, tensor<1x1x1x1xf32>) -> tensor<2x2x8x8xf32>
  %p = cleave.softmax %u axis = 3 : tensor<2x2x8x8xf32>
  %o = cleave.matmul %p, %v : (tensor<2x2x8x8xf32>, tensor<2x2x8x4xf32>) -> tensor<2x2x8x4xf32>
  %s2 = cleave.matmul %q, %k {transpose_rhs} : (tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32>) -> tensor<2x2x8x8xf32>
  %u2 = cleave.select %window, %s2, %inf : (tensor<1x1x8x8xi1>, tensor<2x2x8x8xf32>, tensor<1x1x1x1xf32>) -> tensor<2x2x8x8xf32>
  %p2 = cleave.softmax %u2 axis = 3 : tensor<2x2x8x8xf32>
  %o2 = cleave.matmul %p2, %v : (tensor<2x2x8x8xf32>, tensor<2x2x8x4xf32>) -> tensor<2x2x8x4xf32>
  %s3 = cleave.matmul %q, %k {transpose_rhs} : (tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32>) -> tensor<2x2x8x8xf32>
  %u3 = cleave.select %brow, %s3, %inf : (tensor<2x1x8x8xi1>, tensor<2x2x8x8xf32>, tensor<1x1x1x1xf32>) -> tensor<2x2x8x8xf32>
  %p3 = cleave.softmax %u3 axis = 3 : tensor<2x2x8x8xf32>
  %o3 = cleave.matmul %p3, %v : (tensor<2x2x8x8xf32>, tensor<2x2x8x4xf32>) -> tensor<2x2x8x4xf32>
  return %o, %o2, %o3 : tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32>
}

// -----

// A registered buffer too large to fold, sliced to the sequence: a slice of
// a constant table, checked element by element (from row 0 it is causal;
// from row 1 each query would also see the next key).
// CHECK-LABEL: func.func @sliced_table
// CHECK: cleave.attention %{{.*}}, %{{.*}}, %{{.*}} scale = 1.000000e+00 causal :
// CHECK: cleave.softmax
// CHECK-NOT: cleave.attention
func.func @sliced_table(%q: tensor<1x2x4x4xf32>, %k: tensor<1x2x4x4xf32>, %v: tensor<1x2x4x4xf32>) -> (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) {
  %tril = cleave.constant dense<[[[[true, false, false, false, false, false], [true, true, false, false, false, false], [true, true, true, false, false, false], [true, true, true, true, false, false], [true, true, true, true, true, false], [true, true, true, true, true, true]]]]> : tensor<1x1x6x6xi1>
  %m = cleave.slice %tril starts = [0, 0, 0, 0] steps = [1, 1, 1, 1] : tensor<1x1x6x6xi1> -> tensor<1x1x4x4xi1>
  %m1 = cleave.slice %tril starts = [0, 0, 1, 0] steps = [1, 1, 1, 1] : tensor<1x1x6x6xi1> -> tensor<1x1x4x4xi1>
  %inf = cleave.constant dense<0xFF800000> : tensor<1x1x1x1xf32>
  %s = cleave.matmul %q, %k {transpose_rhs} : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %u = cleave.select %m, %s, %inf : (tensor<1x1x4x4xi1>, tensor<1x2x4x4xf32>, tensor<1x1x1x1xf32>) -> tensor<1x2x4x4xf32>
  %p = cleave.softmax %u axis = 3 : tensor<1x2x4x4xf32>
  %o = cleave.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %s1 = cleave.matmul %q, %k {transpose_rhs} : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %u1 = cleave.select %m1, %s1, %inf : (tensor<1x1x4x4xi1>, tensor<1x2x4x4xf32>, tensor<1x1x1x1xf32>) -> tensor<1x2x4x4xf32>
  %p1 = cleave.softmax %u1 axis = 3 : tensor<1x2x4x4xf32>
  %o1 = cleave.matmul %p1, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  return %o, %o1 : tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>
}

// -----

// Values as the IR computes them, not as integers and reals: an iota cast
// to i8 wraps past 127 (key 200 of 300 reads as -56, so row 0 sees it), and
// 1 + 1e8 is 1e8 in f32 (so the comparison holds nowhere): neither mask is
// causal, and neither attention is fused.
// CHECK-LABEL: func.func @wrapped_and_rounded
// CHECK-NOT: cleave.attention
// CHECK-COUNT-2: cleave.softmax
func.func @wrapped_and_rounded(%q: tensor<1x1x300x4xf32>, %k: tensor<1x1x300x4xf32>, %v: tensor<1x1x300x4xf32>) -> (tensor<1x1x300x4xf32>, tensor<1x1x300x4xf32>) {
  %row = cleave.iota dim = 2 : tensor<1x1x300x1xi64>
  %col = cleave.iota dim = 3 : tensor<1x1x1x300xi64>
  %r8 = cleave.cast %row : tensor<1x1x300x1xi64> -> tensor<1x1x300x1xi8>
  %c8 = cleave.cast %col : tensor<1x1x1x300xi64> -> tensor<1x1x1x300xi8>
  %future = cleave.cmp gt, %c8, %r8 : (tensor<1x1x1x300xi8>, tensor<1x1x300x1xi8>) -> tensor<1x1x300x300xi1>
  %inf = cleave.constant dense<0xFF800000> : tensor<1x1x1x1xf32>
  %s = cleave.matmul %q, %k {transpose_rhs} : (tensor<1x1x300x4xf32>, tensor<1x1x300x4xf32>) -> tensor<1x1x300x300xf32>
  %u = cleave.select %future, %inf, %s : (tensor<1x1x300x300xi1>, tensor<1x1x1x1xf32>, tensor<1x1x300x300xf32>) -> tensor<1x1x300x300xf32>
  %p = cleave.softmax %u axis = 3 : tensor<1x1x300x300xf32>
  %o = cleave.matmul %p, %v : (tensor<1x1x300x300xf32>, tensor<1x1x300x4xf32>) -> tensor<1x1x300x4xf32>
  %f64 = cleave.cmp gt, %col, %row : (tensor<1x1x1x300xi64>, tensor<1x1x300x1xi64>) -> tensor<1x1x300x300xi1>
  %ff = cleave.cast %f64 : tensor<1x1x300x300xi1> -> tensor<1x1x300x300xf32>
  %big = cleave.constant dense<1.0e8> : tensor<1x1x1x1xf32>
  %shifted = cleave.add %ff, %big : (tensor<1x1x300x300xf32>, tensor<1x1x1x1xf32>) -> tensor<1x1x300x300xf32>
  %never = cleave.cmp gt, %shifted, %big : (tensor<1x1x300x300xf32>, tensor<1x1x1x1xf32>) -> tensor<1x1x300x300xi1>
  %s2 = cleave.matmul %q, %k {transpose_rhs} : (tensor<1x1x300x4xf32>, tensor<1x1x300x4xf32>) -> tensor<1x1x300x300xf32>
  %u2 = cleave.select %never, %inf, %s2 : (tensor<1x1x300x300xi1>, tensor<1x1x1x1xf32>, tensor<1x1x300x300xf32>) -> tensor<1x1x300x300xf32>
  %p2 = cleave.softmax %u2 axis = 3 : tensor<1x1x300x300xf32>
  %o2 = cleave.matmul %p2, %v : (tensor<1x1x300x300xf32>, tensor<1x1x300x4xf32>) -> tensor<1x1x300x4xf32>
  return %o, %o2 : tensor<1x1x300x4xf32>, tensor<1x1x300x4xf32>
}

// -----

// The control: the same mask in i16, where 300 keys do not wrap, is causal.
// CHECK-LABEL: func.func @not_wrapped
// CHECK: cleave.attention %{{.*}}, %{{.*}}, %{{.*}} scale = 1.000000e+00 causal :
func.func @not_wrapped(%q: tensor<1x1x300x4xf32>, %k: tensor<1x1x300x4xf32>, %v: tensor<1x1x300x4xf32>) -> tensor<1x1x300x4xf32> {
  %row = cleave.iota dim = 2 : tensor<1x1x300x1xi64>
  %col = cleave.iota dim = 3 : tensor<1x1x1x300xi64>
  %r16 = cleave.cast %row : tensor<1x1x300x1xi64> -> tensor<1x1x300x1xi16>
  %c16 = cleave.cast %col : tensor<1x1x1x300xi64> -> tensor<1x1x1x300xi16>
  %future = cleave.cmp gt, %c16, %r16 : (tensor<1x1x1x300xi16>, tensor<1x1x300x1xi16>) -> tensor<1x1x300x300xi1>
  %inf = cleave.constant dense<0xFF800000> : tensor<1x1x1x1xf32>
  %s = cleave.matmul %q, %k {transpose_rhs} : (tensor<1x1x300x4xf32>, tensor<1x1x300x4xf32>) -> tensor<1x1x300x300xf32>
  %u = cleave.select %future, %inf, %s : (tensor<1x1x300x300xi1>, tensor<1x1x1x1xf32>, tensor<1x1x300x300xf32>) -> tensor<1x1x300x300xf32>
  %p = cleave.softmax %u axis = 3 : tensor<1x1x300x300xf32>
  %o = cleave.matmul %p, %v : (tensor<1x1x300x300xf32>, tensor<1x1x300x4xf32>) -> tensor<1x1x300x4xf32>
  return %o : tensor<1x1x300x4xf32>
}

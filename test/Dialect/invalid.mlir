// RUN: cleave-opt %s --split-input-file --verify-diagnostics

func.func @broadcast_mismatch(%a: tensor<4x8xf32>, %b: tensor<3x8xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{operand shapes do not broadcast: dimension sizes 4 and 3}}
  %0 = cleave.add %a, %b : (tensor<4x8xf32>, tensor<3x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @rank_mismatch(%a: tensor<4x8xf32>, %b: tensor<8xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{operands must have the same rank, got 2 and 1}}
  %0 = cleave.mul %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @element_mismatch(%a: tensor<4xf32>, %b: tensor<4xi64>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{operands must have one element type}}
  %0 = cleave.cmp eq, %a, %b : (tensor<4xf32>, tensor<4xi64>) -> tensor<4xi1>
  return
}

// -----

func.func @matmul_contraction(%a: tensor<4x8xf32>, %b: tensor<7x2xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{contracting dimensions differ: 8 and 7}}
  %0 = cleave.matmul %a, %b : (tensor<4x8xf32>, tensor<7x2xf32>) -> tensor<4x2xf32>
  return
}

// -----

func.func @matmul_rank(%a: tensor<2x4x8xf32>, %b: tensor<8x2xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{operands must have one rank >= 2, got 3 and 2}}
  %0 = cleave.matmul %a, %b : (tensor<2x4x8xf32>, tensor<8x2xf32>) -> tensor<2x4x2xf32>
  return
}

// -----

func.func @reduce_dims(%a: tensor<4x8xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{reduced dimension 2 is out of range for rank 2}}
  %0 = cleave.reduce sum %a dims = [2] : (tensor<4x8xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @reduce_unsorted(%a: tensor<4x8xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{reduced dimensions must be sorted and unique}}
  %0 = cleave.reduce max %a dims = [1, 0] : (tensor<4x8xf32>) -> tensor<f32>
  return
}

// -----

func.func @reduce_mean_int(%a: tensor<4xi64>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{mean needs a float element type}}
  %0 = cleave.reduce mean %a dims = [0] : (tensor<4xi64>) -> tensor<i64>
  return
}

// -----

func.func @softmax_axis(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{axis 2 is out of range for rank 2}}
  %0 = cleave.softmax %a axis = 2 : tensor<4x8xf32>
  return
}

// -----

func.func @layer_norm_scale(%a: tensor<4x8xf32>, %g: tensor<1x8xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{scale and bias must have type 'tensor<8xf32>', got 'tensor<1x8xf32>'}}
  %0:3 = cleave.layer_norm %a scale %g axis = 1 eps = 1.0e-05 : (tensor<4x8xf32>, tensor<1x8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>, tensor<4x1xf32>)
  return
}

// -----

func.func @layer_norm_backward_grad(%x: tensor<4x8xf32>, %m: tensor<4x1xf32>, %r: tensor<4x1xf32>, %g: tensor<4x4xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{grad must have the input's shape 4, 8, got 'tensor<4x4xf32>'}}
  %0:3 = cleave.layer_norm_backward %x, %m, %r, %g axis = 1 : (tensor<4x8xf32>, tensor<4x1xf32>, tensor<4x1xf32>, tensor<4x4xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  return
}

// -----

func.func @layer_norm_backward_stats(%x: tensor<4x8xf32>, %m: tensor<4x8xf32>, %r: tensor<4x1xf32>, %g: tensor<4x8xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{mean and inv_std_dev must have type 'tensor<4x1xf32>', got 'tensor<4x8xf32>'}}
  %0:3 = cleave.layer_norm_backward %x, %m, %r, %g axis = 1 : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x1xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  return
}

// -----

func.func @layer_norm_backward_f16(%x: tensor<4x8xf16>, %m: tensor<4x1xf32>, %r: tensor<4x1xf32>, %g: tensor<4x8xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{input and grad must be f32 or bf16, got 'tensor<4x8xf16>'}}
  %0:3 = cleave.layer_norm_backward %x, %m, %r, %g axis = 1 : (tensor<4x8xf16>, tensor<4x1xf32>, tensor<4x1xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  return
}

// -----

func.func @batch_norm_stats(%x: tensor<2x3x4xf32>, %s: tensor<4xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{statistics must have type 'tensor<3xf32>'}}
  %0 = cleave.batch_norm %x, %s, %s, %s, %s eps = 1.0e-05 : (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  return
}

// -----

func.func @reshape_count(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{changes the element count from 32 to 30}}
  %0 = cleave.reshape %a : tensor<4x8xf32> -> tensor<5x6xf32>
  return
}

// -----

func.func @transpose_perm(%a: tensor<4x8xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{invalid permutation}}
  %0 = cleave.transpose %a perm = [0, 0] : (tensor<4x8xf32>) -> tensor<4x4xf32>
  return
}

// -----

func.func @broadcast_dim(%a: tensor<2x8xf32>) {
  // expected-error @+1 {{cannot broadcast dimension of size 2 to 4}}
  %0 = cleave.broadcast %a : tensor<2x8xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @concat_dims(%a: tensor<2x3xf32>, %b: tensor<3x3xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{operands differ in dimension 0 which is not the concatenation axis}}
  %0 = cleave.concat %a, %b axis = 1 : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x6xf32>
  return
}

// -----

func.func @slice_bounds(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{reads out of bounds in dimension 1: indices 6 to 10 of size 8}}
  %0 = cleave.slice %a starts = [0, 6] steps = [1, 2] : tensor<4x8xf32> -> tensor<4x3xf32>
  return
}

// -----

func.func @slice_step(%a: tensor<4xf32>) {
  // expected-error @+1 {{step of dimension 0 is zero}}
  %0 = cleave.slice %a starts = [0] steps = [0] : tensor<4xf32> -> tensor<2xf32>
  return
}

// -----

func.func @gather_axis(%t: tensor<10x4xf32>, %i: tensor<3xi64>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{axis 2 is out of range for rank 2}}
  %0 = cleave.gather %t, %i axis = 2 : (tensor<10x4xf32>, tensor<3xi64>) -> tensor<10x4xf32>
  return
}

// -----

func.func @conv_channels(%x: tensor<1x4x8x8xf32>, %w: tensor<8x3x3x3xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{channels do not match: input has 4, filter expects 3 x 1 groups}}
  %0 = cleave.conv2d %x, %w strides = [1, 1] pads = [0, 0, 0, 0] dilations = [1, 1] groups = 1 : (tensor<1x4x8x8xf32>, tensor<8x3x3x3xf32>) -> tensor<1x8x6x6xf32>
  return
}

// -----

func.func @pool_output(%x: tensor<1x1x8x8xf32>) {
  // expected-error @+1 {{spatial dimension 0 of the result is 5, expected 4}}
  %0 = cleave.max_pool2d %x kernel = [2, 2] strides = [2, 2] pads = [0, 0, 0, 0] dilations = [1, 1] : tensor<1x1x8x8xf32> -> tensor<1x1x5x4xf32>
  return
}

// -----

func.func @cast_shape(%x: tensor<4xf32>) {
  // expected-error @+1 {{changes the shape}}
  %0 = cleave.cast %x : tensor<4xf32> -> tensor<2xi64>
  return
}

// -----

func.func @float_only(%x: tensor<4xi64>) {
  // expected-error @+1 {{must be statically shaped tensor of 32-bit float or 16-bit float or bfloat16 type values}}
  %0 = cleave.exp %x : tensor<4xi64>
  return
}

// -----

func.func @scatter_add_shape(%g: tensor<8x64xf32>, %ids: tensor<8x16xi64>) {
  // expected-error @+1 {{updates must have the gathered shape [8, 16, 64]}}
  %0 = cleave.scatter_add %g, %ids axis = 0 : (tensor<8x64xf32>, tensor<8x16xi64>) -> tensor<1000x64xf32>
  return
}

// -----

func.func @slice_scatter_bounds(%s: tensor<4x3xf32>) {
  // expected-error @+1 {{writes out of bounds in dimension 1: indices 4 to 8 of size 8}}
  %0 = cleave.slice_scatter %s starts = [0, 4] steps = [1, 2] : tensor<4x3xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @conv_adjoint_shape(%g: tensor<2x16x7x8xf32>, %w: tensor<16x3x3x3xf32>) {
  // expected-error @+1 {{gradient shape does not match the convolution: expected [2, 16, 8, 8]}}
  %0 = cleave.conv2d_backward_input %g, %w strides = [1, 1] pads = [1, 1, 1, 1] dilations = [1, 1] groups = 1 : (tensor<2x16x7x8xf32>, tensor<16x3x3x3xf32>) -> tensor<2x3x8x8xf32>
  return
}

// -----

func.func @pool_adjoint_shape(%x: tensor<2x3x8x8xf32>, %g: tensor<2x3x5x4xf32>) {
  // expected-error @+1 {{spatial dimension 0 of the gradient is 5, expected 4}}
  %0 = cleave.max_pool2d_backward %x, %g kernel = [2, 2] strides = [2, 2] pads = [0, 0, 0, 0] dilations = [1, 1] : (tensor<2x3x8x8xf32>, tensor<2x3x5x4xf32>) -> tensor<2x3x8x8xf32>
  return
}

// -----

func.func @random_step(%s: tensor<1xi64>) {
  // expected-error @+1 {{step must be a scalar (rank 0)}}
  %0 = cleave.random_uniform %s seed = 1 stream = 0 : tensor<1xi64> -> tensor<4xf32>
  return
}

// -----

// The discardable cleave.* attributes are the dialect's (CleaveAttrNames.h).
func.func @misspelt_attr(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{has unknown attribute 'cleave.nograd'}}
  %0 = cleave.exp %x {cleave.nograd} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @offsets_of_wrong_kind(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{'cleave.offsets' must be an array<i64>, got 0 : i64}}
  %0 = cleave.exp %x {cleave.offsets = 0 : i64} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// expected-error @below {{argument 0 'cleave.parameter' must be a string}}
func.func @parameter_not_named(%w: tensor<4xf32> {cleave.parameter = 1 : i64}) -> tensor<4xf32> {
  return %w : tensor<4xf32>
}

// -----

// Only a weight can be frozen.
// expected-error @below {{argument 0 has 'cleave.frozen' but no 'cleave.parameter'}}
func.func @frozen_input(%x: tensor<4xf32> {cleave.input = "x", cleave.frozen}) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// expected-error @below {{result 0 has 'cleave.step' where it cannot stand (on a result)}}
func.func @step_as_result(%s: tensor<i64>) -> (tensor<i64> {cleave.step}) {
  return %s : tensor<i64>
}

// -----

// expected-error @below {{argument 0 'cleave.optimizer_state' must be an array of two strings}}
func.func @state_slot_missing(%m: tensor<4xf32> {cleave.optimizer_state = ["w"]}) -> tensor<4xf32> {
  return %m : tensor<4xf32>
}

// -----

func.func @attention_groups(%q: tensor<1x3x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x3x4x8xf32> {
  // expected-error @below {{failed to infer returned types}}
  // expected-error @below {{query heads 3 are not a multiple of key heads 2}}
  %o, %lse = cleave.attention %q, %k, %v scale = 1.0 : (tensor<1x3x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> (tensor<1x3x4x8xf32>, tensor<1x3x4xf32>)
  return %o : tensor<1x3x4x8xf32>
}

// -----

func.func @attention_bias(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x5x8xf32>, %v: tensor<1x2x5x8xf32>, %b: tensor<1x2x4x4xf32>) -> tensor<1x2x4x8xf32> {
  // expected-error @below {{failed to infer returned types}}
  // expected-error @below {{bias dimension 3 (4) does not broadcast to 5}}
  %o, %lse = cleave.attention %q, %k, %v bias %b scale = 1.0 : (tensor<1x2x4x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x4x4xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>)
  return %o : tensor<1x2x4x8xf32>
}

// -----

// Mixed precision's bf16 q, k, v take an f32 bias and a grad of their own
// type (what the CPU kernel reads).
func.func @attention_bf16_bias(%q: tensor<1x2x4x8xbf16>, %b: tensor<1x1x1x4xbf16>) -> tensor<1x2x4x8xf32> {
  // expected-error @below {{failed to infer returned types}}
  // expected-error @below {{bias must be 'f32', not 'bf16'}}
  %o, %lse = cleave.attention %q, %q, %q bias %b scale = 1.0 : (tensor<1x2x4x8xbf16>, tensor<1x2x4x8xbf16>, tensor<1x2x4x8xbf16>, tensor<1x1x1x4xbf16>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>)
  return %o : tensor<1x2x4x8xf32>
}

// -----

func.func @attention_bf16_grad(%q: tensor<1x2x4x8xbf16>, %o: tensor<1x2x4x8xf32>, %lse: tensor<1x2x4xf32>) -> tensor<1x2x4x8xf32> {
  // expected-error @below {{failed to infer returned types}}
  // expected-error @below {{grad must be of the query's type, not 'f32'}}
  %dq, %dk, %dv = cleave.attention_backward %q, %q, %q, %o, %lse, %o scale = 1.0 : (tensor<1x2x4x8xbf16>, tensor<1x2x4x8xbf16>, tensor<1x2x4x8xbf16>, tensor<1x2x4x8xf32>, tensor<1x2x4xf32>, tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>)
  return %dq : tensor<1x2x4x8xf32>
}

// -----

func.func @attention_backward_lse(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>, %o: tensor<1x2x4x8xf32>, %lse: tensor<1x2x8xf32>) -> tensor<1x2x4x8xf32> {
  // expected-error @below {{failed to infer returned types}}
  // expected-error @below {{output, lse and grad must have the forward's result shapes}}
  %dq, %dk, %dv = cleave.attention_backward %q, %k, %v, %o, %lse, %o scale = 1.0 : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x8xf32>, tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>)
  return %dq : tensor<1x2x4x8xf32>
}

// -----

func.func @cross_entropy_ids(%x: tensor<8x16xf32>, %l: tensor<8x1xi64>, %ids: tensor<8x16xi64>, %m: tensor<8x1xf32>) -> tensor<8x1xf32> {
  // expected-error @below {{failed to infer returned types}}
  // expected-error @below {{class ids must be 1 but along the class axis, of its size}}
  %s, %t = cleave.cross_entropy %x, %l, %ids, %m axis = 1 : (tensor<8x16xf32>, tensor<8x1xi64>, tensor<8x16xi64>, tensor<8x1xf32>) -> (tensor<8x1xf32>, tensor<8x1xf32>)
  return %s : tensor<8x1xf32>
}

// -----

func.func @cross_entropy_axis(%x: tensor<8x16xf32>, %l: tensor<8x1xi64>, %ids: tensor<1x16xi64>, %m: tensor<8x1xf32>) -> tensor<8x1xf32> {
  // expected-error @below {{failed to infer returned types}}
  // expected-error @below {{axis 2 is out of range for rank 2}}
  %s, %t = cleave.cross_entropy %x, %l, %ids, %m axis = 2 : (tensor<8x16xf32>, tensor<8x1xi64>, tensor<1x16xi64>, tensor<8x1xf32>) -> (tensor<8x1xf32>, tensor<8x1xf32>)
  return %s : tensor<8x1xf32>
}

// -----

// expected-error @+1 {{#cleave.layout blocks and granule must be at least 1, got blocks = 0, granule = 1}}
func.func @layout_no_blocks(%w: tensor<8xf32> {cleave.layout = #cleave.layout<dim = 0, blocks = 0>}) { return }

// -----

// expected-error @+1 {{#cleave.layout blocks and granule cut the split dimension: they need dim}}
func.func @layout_blocks_without_dim(%w: tensor<8xf32> {cleave.layout = #cleave.layout<blocks = 2, dp_dim = 0>}) { return }

// -----

// expected-error @+1 {{#cleave.layout splits nothing}}
func.func @layout_of_nothing(%w: tensor<8xf32> {cleave.layout = #cleave.layout<granule = 1>}) { return }

// -----

// expected-error @+1 {{#cleave.layout dimensions must be -1 (whole) or a dimension, got dim = -2}}
func.func @layout_negative(%w: tensor<8xf32> {cleave.layout = #cleave.layout<dim = -2>}) { return }

// -----

// expected-error @below {{argument 0 has a #cleave.layout with dim = 2 on a tensor of rank 2}}
func.func @layout_past_rank(%w: tensor<8x8xf32> {cleave.layout = #cleave.layout<dim = 2>}) { return }

// -----

// expected-error @below {{result 0 has a #cleave.layout with dp_dim = 1 on a tensor of rank 1}}
func.func @layout_result_past_rank(%w: tensor<8xf32>) -> (tensor<8xf32> {cleave.layout = #cleave.layout<dp_dim = 1>}) { return %w : tensor<8xf32> }

// -----

// expected-error @below {{argument 0 'cleave.layout' must be a #cleave.layout, got 0 : i64}}
func.func @layout_not_typed(%w: tensor<8xf32> {cleave.layout = 0 : i64}) { return }

// -----

// The four integers it replaced are gone.
// expected-error @below {{argument 0 has unknown attribute 'cleave.split_dim'}}
func.func @split_dim_gone(%w: tensor<8xf32> {cleave.split_dim = 0 : i64}) { return }

// -----

func.func @matmul_dequant_scale_per_column(%x: tensor<8x64xf32>, %q: tensor<32x64xi8>, %s: tensor<64xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{scale must be f32 [32] (one per weight row)}}
  %0 = cleave.matmul_dequant %x, %q, %s {transpose_rhs} : (tensor<8x64xf32>, tensor<32x64xi8>, tensor<64xf32>) -> tensor<8x32xf32>
  return
}

// -----

func.func @matmul_dequant_contraction(%x: tensor<8x64xf32>, %q: tensor<32x64xi8>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{contracting dimensions differ: 64 and 32}}
  %0 = cleave.matmul_dequant %x, %q : (tensor<8x64xf32>, tensor<32x64xi8>) -> tensor<8x64xf32>
  return
}

// -----

func.func @matmul_dequant_weight_type(%x: tensor<8x64xf32>, %q: tensor<32x64xi32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{weight must be i8, bf16 or f16}}
  %0 = cleave.matmul_dequant %x, %q {transpose_rhs} : (tensor<8x64xf32>, tensor<32x64xi32>) -> tensor<8x32xf32>
  return
}

// -----

// An all_to_all moves a split between two distinct dimensions.
module attributes {cleave.mesh = array<i64: 4>} {
  func.func @all_to_all_same_dims(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
    // expected-error @+1 {{split_dim and concat_dim must be two dimensions of the operand}}
    %0 = cleave.all_to_all %x axes = [0] split_dim = 1 concat_dim = 1 : tensor<8x4xf32> -> tensor<8x4xf32>
    return %0 : tensor<8x4xf32>
  }
}

// -----

module attributes {cleave.mesh = array<i64: 4>} {
  func.func @all_to_all_shape(%x: tensor<8x4xf32>) -> tensor<2x8xf32> {
    // expected-error @+1 {{result must be the operand split along split_dim and concatenated along concat_dim over the group}}
    %0 = cleave.all_to_all %x axes = [0] split_dim = 0 concat_dim = 1 : tensor<8x4xf32> -> tensor<2x8xf32>
    return %0 : tensor<2x8xf32>
  }
}

// RUN: cleave-opt %s --split-input-file --cleave-segment-parameters | FileCheck %s

// Falcon's fused q|k|v (torch.onnx: Transpose, a reshape adding a unit
// batch dimension, MatMul, three Slices of 64, 8 and 8 columns): the
// weight's rows become three parameters, each with its own chain.
// CHECK-LABEL: func.func @falcon
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<2x4x64xf32> {cleave.input = "x"}
// CHECK-SAME: %[[Q:[a-z0-9]+]]: tensor<64x64xf32> {cleave.parameter = "qkv[0:64]", cleave.segment = array<i64: 0, 0, 64>, cleave.segment_of = "qkv"}
// CHECK-SAME: %[[K:[a-z0-9]+]]: tensor<8x64xf32> {cleave.parameter = "qkv[64:72]", cleave.segment = array<i64: 0, 64, 8>, cleave.segment_of = "qkv"}
// CHECK-SAME: %[[V:[a-z0-9]+]]: tensor<8x64xf32> {cleave.parameter = "qkv[72:80]", cleave.segment = array<i64: 0, 72, 8>, cleave.segment_of = "qkv"}
// CHECK-SAME: %[[O:[a-z0-9]+]]: tensor<1x64x64xf32> {cleave.parameter = "o"}
// CHECK-DAG: %[[QT:.*]] = cleave.transpose %[[Q]] perm = [1, 0] : (tensor<64x64xf32>) -> tensor<64x64xf32>
// CHECK-DAG: %[[KT:.*]] = cleave.transpose %[[K]] perm = [1, 0] : (tensor<8x64xf32>) -> tensor<64x8xf32>
// CHECK-DAG: %[[QR:.*]] = cleave.reshape %[[QT]] : tensor<64x64xf32> -> tensor<1x64x64xf32>
// CHECK-DAG: %[[KR:.*]] = cleave.reshape %[[KT]] : tensor<64x8xf32> -> tensor<1x64x8xf32>
// CHECK-DAG: cleave.matmul %[[X]], %[[QR]] : (tensor<2x4x64xf32>, tensor<1x64x64xf32>) -> tensor<2x4x64xf32>
// CHECK-DAG: cleave.matmul %[[X]], %[[KR]] : (tensor<2x4x64xf32>, tensor<1x64x8xf32>) -> tensor<2x4x8xf32>
// CHECK-NOT: cleave.slice
// CHECK: return
func.func @falcon(%x: tensor<2x4x64xf32> {cleave.input = "x"}, %w: tensor<80x64xf32> {cleave.parameter = "qkv"}, %o: tensor<1x64x64xf32> {cleave.parameter = "o"}) -> (tensor<2x4x64xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) {
  %0 = cleave.transpose %w perm = [1, 0] : (tensor<80x64xf32>) -> tensor<64x80xf32>
  %1 = cleave.reshape %0 : tensor<64x80xf32> -> tensor<1x64x80xf32>
  %2 = cleave.matmul %x, %1 : (tensor<2x4x64xf32>, tensor<1x64x80xf32>) -> tensor<2x4x80xf32>
  %q = cleave.slice %2 starts = [0, 0, 0] steps = [1, 1, 1] : tensor<2x4x80xf32> -> tensor<2x4x64xf32>
  %k = cleave.slice %2 starts = [0, 0, 64] steps = [1, 1, 1] : tensor<2x4x80xf32> -> tensor<2x4x8xf32>
  %v = cleave.slice %2 starts = [0, 0, 72] steps = [1, 1, 1] : tensor<2x4x80xf32> -> tensor<2x4x8xf32>
  %3 = cleave.matmul %q, %o {transpose_rhs} : (tensor<2x4x64xf32>, tensor<1x64x64xf32>) -> tensor<2x4x64xf32>
  return %3, %k, %v : tensor<2x4x64xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
}

// -----

// A bias added before the split (ChatGLM2) is cut the same way, and then
// segmented in turn: it is used only in those pieces. A segment along the
// columns of a weight read as x W (Conv1D-style) is named so.
// CHECK-LABEL: func.func @bias
// CHECK-SAME: tensor<4x6xf32> {cleave.parameter = "w[:, 0:6]", cleave.segment = array<i64: 1, 0, 6>, cleave.segment_of = "w"}
// CHECK-SAME: tensor<4x2xf32> {cleave.parameter = "w[:, 6:8]", cleave.segment = array<i64: 1, 6, 2>, cleave.segment_of = "w"}
// CHECK-SAME: tensor<6xf32> {cleave.parameter = "b[0:6]", cleave.segment = array<i64: 0, 0, 6>, cleave.segment_of = "b"}
// CHECK-SAME: tensor<2xf32> {cleave.parameter = "b[6:8]", cleave.segment = array<i64: 0, 6, 2>, cleave.segment_of = "b"}
// CHECK-NOT: cleave.slice
// CHECK: return
func.func @bias(%x: tensor<3x4xf32> {cleave.input = "x"}, %w: tensor<4x8xf32> {cleave.parameter = "w"}, %b: tensor<8xf32> {cleave.parameter = "b"}) -> (tensor<3x6xf32>, tensor<3x2xf32>) {
  %0 = cleave.matmul %x, %w : (tensor<3x4xf32>, tensor<4x8xf32>) -> tensor<3x8xf32>
  %1 = cleave.reshape %b : tensor<8xf32> -> tensor<1x8xf32>
  %2 = cleave.add %0, %1 : (tensor<3x8xf32>, tensor<1x8xf32>) -> tensor<3x8xf32>
  %a = cleave.slice %2 starts = [0, 0] steps = [1, 1] : tensor<3x8xf32> -> tensor<3x6xf32>
  %c = cleave.slice %2 starts = [0, 6] steps = [1, 1] : tensor<3x8xf32> -> tensor<3x2xf32>
  return %a, %c : tensor<3x6xf32>, tensor<3x2xf32>
}

// -----

// Left alone: equal pieces (a GPT-2 q|k|v, split in blocks instead),
// pieces that leave a gap, and a weight also used whole.
// CHECK-LABEL: func.func @kept
// CHECK-SAME: {cleave.parameter = "equal"}
// CHECK-SAME: {cleave.parameter = "gap"}
// CHECK-SAME: {cleave.parameter = "shared"}
// CHECK-NOT: cleave.segment
// CHECK: return
func.func @kept(%x: tensor<3x4xf32> {cleave.input = "x"}, %e: tensor<4x6xf32> {cleave.parameter = "equal"}, %g: tensor<4x6xf32> {cleave.parameter = "gap"}, %s: tensor<4x6xf32> {cleave.parameter = "shared"}) -> (tensor<3x3xf32>, tensor<3x3xf32>, tensor<3x4xf32>, tensor<3x2xf32>, tensor<3x4xf32>, tensor<4x6xf32>) {
  %0 = cleave.matmul %x, %e : (tensor<3x4xf32>, tensor<4x6xf32>) -> tensor<3x6xf32>
  %1 = cleave.slice %0 starts = [0, 0] steps = [1, 1] : tensor<3x6xf32> -> tensor<3x3xf32>
  %2 = cleave.slice %0 starts = [0, 3] steps = [1, 1] : tensor<3x6xf32> -> tensor<3x3xf32>
  %3 = cleave.matmul %x, %g : (tensor<3x4xf32>, tensor<4x6xf32>) -> tensor<3x6xf32>
  %4 = cleave.slice %3 starts = [0, 0] steps = [1, 1] : tensor<3x6xf32> -> tensor<3x4xf32>
  %5 = cleave.slice %3 starts = [0, 4] steps = [1, 1] : tensor<3x6xf32> -> tensor<3x1xf32>
  %6 = cleave.matmul %x, %s : (tensor<3x4xf32>, tensor<4x6xf32>) -> tensor<3x6xf32>
  %7 = cleave.slice %6 starts = [0, 0] steps = [1, 1] : tensor<3x6xf32> -> tensor<3x4xf32>
  %8 = cleave.slice %6 starts = [0, 4] steps = [1, 1] : tensor<3x6xf32> -> tensor<3x2xf32>
  return %1, %2, %4, %8, %7, %s : tensor<3x3xf32>, tensor<3x3xf32>, tensor<3x4xf32>, tensor<3x2xf32>, tensor<3x4xf32>, tensor<4x6xf32>
}

// -----

// Any op whose rule keeps the sliced dimension parallel carries the split:
// a GELU and a division by a per-column scale between the fused matmul and
// the slices (the weight's columns and the scale are each cut in two).
// CHECK-LABEL: func.func @through_elementwise
// CHECK-SAME: tensor<4x6xf32> {cleave.parameter = "w[:, 0:6]", cleave.segment = array<i64: 1, 0, 6>, cleave.segment_of = "w"}
// CHECK-SAME: tensor<4x2xf32> {cleave.parameter = "w[:, 6:8]", cleave.segment = array<i64: 1, 6, 2>, cleave.segment_of = "w"}
// CHECK-SAME: tensor<1x6xf32> {cleave.parameter = "s[:, 0:6]", cleave.segment = array<i64: 1, 0, 6>, cleave.segment_of = "s"}
// CHECK-SAME: tensor<1x2xf32> {cleave.parameter = "s[:, 6:8]", cleave.segment = array<i64: 1, 6, 2>, cleave.segment_of = "s"}
// CHECK-DAG: cleave.gelu %{{.*}} : tensor<3x6xf32>
// CHECK-DAG: cleave.gelu %{{.*}} : tensor<3x2xf32>
// CHECK-NOT: cleave.slice
// CHECK: return
func.func @through_elementwise(%x: tensor<3x4xf32> {cleave.input = "x"}, %w: tensor<4x8xf32> {cleave.parameter = "w"}, %s: tensor<1x8xf32> {cleave.parameter = "s"}) -> (tensor<3x6xf32>, tensor<3x2xf32>) {
  %0 = cleave.matmul %x, %w : (tensor<3x4xf32>, tensor<4x8xf32>) -> tensor<3x8xf32>
  %1 = cleave.gelu %0 : tensor<3x8xf32>
  %2 = cleave.div %1, %s : (tensor<3x8xf32>, tensor<1x8xf32>) -> tensor<3x8xf32>
  %a = cleave.slice %2 starts = [0, 0] steps = [1, 1] : tensor<3x8xf32> -> tensor<3x6xf32>
  %c = cleave.slice %2 starts = [0, 6] steps = [1, 1] : tensor<3x8xf32> -> tensor<3x2xf32>
  return %a, %c : tensor<3x6xf32>, tensor<3x2xf32>
}

// -----

// A softmax over the sliced dimension mixes the pieces: the weight stays
// one parameter, and the slices stay.
// CHECK-LABEL: func.func @across_softmax
// CHECK-SAME: tensor<4x8xf32> {cleave.parameter = "w"}
// CHECK-NOT: cleave.segment
// CHECK: cleave.softmax
// CHECK: cleave.slice
// CHECK: cleave.slice
func.func @across_softmax(%x: tensor<3x4xf32> {cleave.input = "x"}, %w: tensor<4x8xf32> {cleave.parameter = "w"}) -> (tensor<3x6xf32>, tensor<3x2xf32>) {
  %0 = cleave.matmul %x, %w : (tensor<3x4xf32>, tensor<4x8xf32>) -> tensor<3x8xf32>
  %1 = cleave.softmax %0 axis = 1 : tensor<3x8xf32>
  %a = cleave.slice %1 starts = [0, 0] steps = [1, 1] : tensor<3x8xf32> -> tensor<3x6xf32>
  %c = cleave.slice %1 starts = [0, 6] steps = [1, 1] : tensor<3x8xf32> -> tensor<3x2xf32>
  return %a, %c : tensor<3x6xf32>, tensor<3x2xf32>
}

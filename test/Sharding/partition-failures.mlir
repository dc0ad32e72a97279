// Every --plan diagnostic of cleave-partition.
// RUN: not cleave-opt %s --cleave-partition="tp=2 plan=%S/Inputs/bad-kind.txt" 2>&1 | FileCheck %s --check-prefix=KIND
// KIND: bad-kind.txt:1: expected 'REGEX KIND' with KIND colwise, rowwise, replicate, vocab, R or S(DIM[,BLOCKS][;GRANULE])
// RUN: not cleave-opt %s --cleave-partition="tp=2 plan=%S/Inputs/no-match.txt" 2>&1 | FileCheck %s --check-prefix=MATCH
// MATCH: no-match.txt:1: 'nothing' matches no parameter
// RUN: not cleave-opt %s --cleave-partition="tp=32 plan=%S/Inputs/w-colwise.txt" 2>&1 | FileCheck %s --check-prefix=DIVIDE
// DIVIDE: w-colwise.txt:1: parameter 'w' of shape [16, 8]: dimension 0 of size 16 is smaller than tp = 32
// RUN: not cleave-opt %s --cleave-partition="tp=2 plan=%S/Inputs/missing.txt" 2>&1 | FileCheck %s --check-prefix=FILE
// FILE: cannot read --plan '{{.*}}missing.txt'
// RUN: not cleave-opt %s --cleave-partition="tp=0" 2>&1 | FileCheck %s --check-prefix=TP
// TP: tp must be at least 1
// RUN: not cleave-opt %s --cleave-partition-data="dp=0" 2>&1 | FileCheck %s --check-prefix=DP
// DP: tp and dp must be at least 1
// A mesh partition-data made for another tp is refused.
// RUN: not cleave-opt %s --cleave-partition-data="dp=2 tp=2" --cleave-partition="tp=4" 2>&1 | FileCheck %s --check-prefix=MESH
// MESH: error: the mesh is 2 x 2 (--cleave-partition-data), not one of tp=4
// RUN: not cleave-opt %s --cleave-partition-data="dp=3" 2>&1 | FileCheck %s --check-prefix=BATCH
// BATCH: input "x" of type 'tensor<4x8xf32>': its batch of 4 rows does not divide over dp = 3 (give a batch that is a multiple of dp)
// Layouts chosen for another tp are refused, not applied.
// RUN: not cleave-opt %s --cleave-choose-layouts=tp=2 --cleave-partition="tp=4" 2>&1 | FileCheck %s --check-prefix=CHOSEN
// CHOSEN: error: the layouts were chosen for tp=2 (--cleave-choose-layouts), not tp=4
// A layout written out (Layout::str()'s spelling) is checked against the
// tensor, and applied as it is.
// RUN: not cleave-opt %s --cleave-partition="tp=2 plan=%S/Inputs/w-exact-bad.txt" 2>&1 | FileCheck %s --check-prefix=EXACTBAD
// EXACTBAD: w-exact-bad.txt:1: parameter 'w' of shape [16, 8] has no layout S(2)
// RUN: cleave-opt %s --cleave-partition="tp=2 plan=%S/Inputs/w-exact.txt" | FileCheck %s --check-prefix=EXACT
// EXACT: %arg1: tensor<16x4xf32> {cleave.layout = #cleave.layout<dim = 1>, cleave.parameter = "w"}, %arg2: tensor<16xf32> {cleave.parameter = "b"}
// EXACT: cleave.all_reduce sum
// A vector parameter has no matmul, so only colwise (split) or replicate.
// RUN: cleave-opt %s --cleave-partition="tp=2 plan=%S/Inputs/bias-rowwise.txt" | FileCheck %s --check-prefix=BIAS
// BIAS: %arg2: tensor<16xf32> {cleave.parameter = "b"}
func.func @f(%x: tensor<4x8xf32> {cleave.input = "x"}, %w: tensor<16x8xf32> {cleave.parameter = "w"}, %b: tensor<16xf32> {cleave.parameter = "b"}) -> (tensor<f32> {cleave.loss}) {
  %0 = cleave.matmul %x, %w {transpose_rhs} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %r = cleave.reshape %b : tensor<16xf32> -> tensor<1x16xf32>
  %1 = cleave.add %0, %r : (tensor<4x16xf32>, tensor<1x16xf32>) -> tensor<4x16xf32>
  %2 = cleave.reduce sum %1 dims = [0, 1] : (tensor<4x16xf32>) -> tensor<f32>
  return %2 : tensor<f32>
}

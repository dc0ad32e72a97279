// The IR each differentiation rule builds: --cleave-autodiff on one op
// whose summed result is the loss, then canonicalization. (Numerical checks
// of the same rules: rules.mlir, with cleave-gradcheck.)
// RUN: cleave-opt %s --cleave-autodiff --canonicalize --cse | FileCheck %s

// CHECK-LABEL: func.func @add(
// CHECK: cleave.reduce sum %{{[0-9]+}} dims = [0] {keep_dims}
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<3x4xf32>, tensor<1x4xf32>
func.func @add(%a: tensor<3x4xf32> {cleave.parameter = "a"}, %b: tensor<1x4xf32> {cleave.parameter = "b"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.add %a, %b : (tensor<3x4xf32>, tensor<1x4xf32>) -> tensor<3x4xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<3x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @sub(
// CHECK: cleave.neg %{{[0-9]+}}
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<3x4xf32>, tensor<3x4xf32>
func.func @sub(%a: tensor<3x4xf32> {cleave.parameter = "a"}, %b: tensor<3x4xf32> {cleave.parameter = "b"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.sub %a, %b : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<3x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @mul(
// CHECK: cleave.mul %{{[0-9]+}}, %arg1
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<3x4xf32>
func.func @mul(%a: tensor<3x4xf32> {cleave.parameter = "a"}, %b: tensor<3x4xf32> {cleave.input = "b"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.mul %a, %b : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<3x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @div(
// CHECK: cleave.div %{{[0-9]+}}, %arg1
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.neg %{{[0-9]+}}
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<3x4xf32>, tensor<3x4xf32>
func.func @div(%a: tensor<3x4xf32> {cleave.parameter = "a"}, %b: tensor<3x4xf32> {cleave.parameter = "b"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.div %a, %b : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<3x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @pow(
// CHECK: cleave.sub %arg1, %{{[0-9]+}}
// CHECK: cleave.pow %arg0, %{{[0-9]+}}
// CHECK: cleave.mul %arg1, %{{[0-9]+}}
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.log %arg0
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<3x4xf32>, tensor<3x4xf32>
func.func @pow(%a: tensor<3x4xf32> {cleave.parameter = "a"}, %b: tensor<3x4xf32> {cleave.parameter = "b"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.pow %a, %b : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<3x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @max(
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.cmp eq, %arg0, %arg1
// CHECK: cleave.select %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.cmp gt, %arg0, %arg1
// CHECK: cleave.select %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.sub %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<3x4xf32>, tensor<3x4xf32>
func.func @max(%a: tensor<3x4xf32> {cleave.parameter = "a"}, %b: tensor<3x4xf32> {cleave.parameter = "b"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.max %a, %b : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<3x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @min(
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.cmp eq, %arg0, %arg1
// CHECK: cleave.select %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.cmp lt, %arg0, %arg1
// CHECK: cleave.select %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.sub %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<3x4xf32>, tensor<3x4xf32>
func.func @min(%a: tensor<3x4xf32> {cleave.parameter = "a"}, %b: tensor<3x4xf32> {cleave.parameter = "b"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.min %a, %b : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<3x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @select(
// CHECK: cleave.select %arg0, %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.select %arg0, %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<3x4xf32>, tensor<3x4xf32>
func.func @select(%c: tensor<3x4xi1> {cleave.input = "c"}, %a: tensor<3x4xf32> {cleave.parameter = "a"}, %b: tensor<3x4xf32> {cleave.parameter = "b"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.select %c, %a, %b : (tensor<3x4xi1>, tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<3x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @neg(
// CHECK: cleave.neg %{{[0-9]+}}
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<4xf32>
func.func @neg(%x: tensor<4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.neg %x : tensor<4xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @abs(
// CHECK: cleave.cmp lt, %arg0, %{{[0-9]+}}
// CHECK: cleave.select %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.cmp gt, %arg0, %{{[0-9]+}}
// CHECK: cleave.select %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<4xf32>
func.func @abs(%x: tensor<4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.abs %x : tensor<4xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @exp(
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<4xf32>
func.func @exp(%x: tensor<4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.exp %x : tensor<4xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @log(
// CHECK: cleave.div %{{[0-9]+}}, %arg0
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<4xf32>
func.func @log(%x: tensor<4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.log %x : tensor<4xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @sqrt(
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.div %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<4xf32>
func.func @sqrt(%x: tensor<4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.sqrt %x : tensor<4xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @rsqrt(
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<4xf32>
func.func @rsqrt(%x: tensor<4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.rsqrt %x : tensor<4xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @reciprocal(
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.neg %{{[0-9]+}}
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<4xf32>
func.func @reciprocal(%x: tensor<4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.reciprocal %x : tensor<4xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @tanh(
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.sub %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<4xf32>
func.func @tanh(%x: tensor<4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.tanh %x : tensor<4xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @sigmoid(
// CHECK: cleave.sub %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<4xf32>
func.func @sigmoid(%x: tensor<4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.sigmoid %x : tensor<4xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @relu(
// CHECK: cleave.cmp gt, %arg0, %{{[0-9]+}}
// CHECK: cleave.select %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<4xf32>
func.func @relu(%x: tensor<4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.relu %x : tensor<4xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @erf(
// CHECK: cleave.mul %arg0, %arg0
// CHECK: cleave.neg %{{[0-9]+}}
// CHECK: cleave.exp %{{[0-9]+}}
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<4xf32>
func.func @erf(%x: tensor<4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.erf %x : tensor<4xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @sin(
// CHECK: cleave.cos %arg0
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<4xf32>
func.func @sin(%x: tensor<4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.sin %x : tensor<4xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @cos(
// CHECK: cleave.sin %arg0
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.neg %{{[0-9]+}}
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<4xf32>
func.func @cos(%x: tensor<4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.cos %x : tensor<4xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @gelu(
// CHECK: cleave.mul %arg0, %{{[0-9]+}}
// CHECK: cleave.erf %{{[0-9]+}}
// CHECK: cleave.add %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.mul %arg0, %arg0
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.exp %{{[0-9]+}}
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.mul %arg0, %{{[0-9]+}}
// CHECK: cleave.add %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<4xf32>
func.func @gelu(%x: tensor<4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.gelu %x : tensor<4xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @gelu_tanh(
// CHECK: cleave.mul %arg0, %arg0
// CHECK: cleave.mul %{{[0-9]+}}, %arg0
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.add %arg0, %{{[0-9]+}}
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.tanh %{{[0-9]+}}
// CHECK: cleave.add %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.add %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.sub %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.mul %arg0, %{{[0-9]+}}
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.add %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<4xf32>
func.func @gelu_tanh(%x: tensor<4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.gelu %x {approximate} : tensor<4xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @leaky_relu(
// CHECK: cleave.cmp gt, %arg0, %{{[0-9]+}}
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.select %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<4xf32>
func.func @leaky_relu(%x: tensor<4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.leaky_relu %x {alpha = 0.1 : f32} : tensor<4xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @matmul(
// CHECK: cleave.matmul %{{[0-9]+}}, %arg1
// CHECK: cleave.matmul %{{[0-9]+}}, %arg0 {transpose_lhs}
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<3x4xf32>, tensor<5x4xf32>
func.func @matmul(%a: tensor<3x4xf32> {cleave.parameter = "a"}, %b: tensor<5x4xf32> {cleave.parameter = "b"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.matmul %a, %b {transpose_rhs} : (tensor<3x4xf32>, tensor<5x4xf32>) -> tensor<3x5xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<3x5xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @matmul_shared_weight(
// CHECK: cleave.reshape %arg0
// CHECK: cleave.matmul %{{[0-9]+}}, %{{[0-9]+}} {transpose_lhs}
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<1x4x5xf32>
func.func @matmul_shared_weight(%x: tensor<2x3x4xf32> {cleave.input = "x"}, %w: tensor<1x4x5xf32> {cleave.parameter = "w"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.matmul %x, %w : (tensor<2x3x4xf32>, tensor<1x4x5xf32>) -> tensor<2x3x5xf32>
  %l = cleave.reduce sum %y dims = [0, 1, 2] : (tensor<2x3x5xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @reduce_mean(
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.broadcast %{{[0-9]+}}
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<2x3xf32>
func.func @reduce_mean(%x: tensor<2x3xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.reduce mean %x dims = [1] : (tensor<2x3xf32>) -> tensor<2xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<2xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @reduce_max(
// CHECK: cleave.reshape %{{[0-9]+}}
// CHECK: cleave.cmp eq, %arg0, %{{[0-9]+}}
// CHECK: cleave.cast %{{[0-9]+}}
// CHECK: cleave.reduce sum %{{[0-9]+}} dims = [1] {keep_dims}
// CHECK: cleave.div %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<2x3xf32>
func.func @reduce_max(%x: tensor<2x3xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.reduce max %x dims = [1] : (tensor<2x3xf32>) -> tensor<2xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<2xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @reduce_prod(
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.div %{{[0-9]+}}, %arg0
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<2x3xf32>
func.func @reduce_prod(%x: tensor<2x3xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.reduce prod %x dims = [1] {keep_dims} : (tensor<2x3xf32>) -> tensor<2x1xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<2x1xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @softmax(
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.reduce sum %{{[0-9]+}} dims = [1] {keep_dims}
// CHECK: cleave.sub %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<2x3xf32>
func.func @softmax(%x: tensor<2x3xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.softmax %x axis = 1 : tensor<2x3xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<2x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @log_softmax(
// CHECK: cleave.exp %{{[0-9]+}}
// CHECK: cleave.reduce sum %{{[0-9]+}} dims = [1] {keep_dims}
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.sub %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<2x3xf32>
func.func @log_softmax(%x: tensor<2x3xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.log_softmax %x axis = 1 : tensor<2x3xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<2x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @layer_norm(
// CHECK: cleave.sub %arg0, %mean
// CHECK: cleave.mul %{{[0-9]+}}, %inv_std_dev
// CHECK: cleave.reduce sum %{{[0-9]+}} dims = [0]
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.reduce sum %{{[0-9]+}} dims = [0]
// CHECK: cleave.reshape %arg1
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.reduce mean %{{[0-9]+}} dims = [1] {keep_dims}
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.reduce mean %{{[0-9]+}} dims = [1] {keep_dims}
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.sub %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.sub %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.mul %inv_std_dev, %{{[0-9]+}}
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<2x3xf32>, tensor<3xf32>, tensor<3xf32>
func.func @layer_norm(%x: tensor<2x3xf32> {cleave.parameter = "x"}, %g: tensor<3xf32> {cleave.parameter = "g"}, %b: tensor<3xf32> {cleave.parameter = "b"}) -> (tensor<f32> {cleave.loss}) {
  %y, %m, %r = cleave.layer_norm %x scale %g bias %b axis = 1 eps = 1.0e-05 : (tensor<2x3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<2x3xf32>, tensor<2x1xf32>, tensor<2x1xf32>)
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<2x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @batch_norm(
// CHECK: cleave.reshape %arg1
// CHECK: cleave.reshape %arg3
// CHECK: cleave.reshape %arg4
// CHECK: cleave.add %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.rsqrt %{{[0-9]+}}
// CHECK: cleave.sub %arg0, %{{[0-9]+}}
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.mul %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: cleave.reduce sum %{{[0-9]+}} dims = [0, 2, 3] {keep_dims}
// CHECK: cleave.reshape %{{[0-9]+}}
// CHECK: cleave.reduce sum %{{[0-9]+}} dims = [0, 2, 3] {keep_dims}
// CHECK: cleave.reshape %{{[0-9]+}}
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<2x3x2x2xf32>, tensor<3xf32>, tensor<3xf32>
func.func @batch_norm(%x: tensor<2x3x2x2xf32> {cleave.parameter = "x"}, %g: tensor<3xf32> {cleave.parameter = "g"}, %b: tensor<3xf32> {cleave.parameter = "b"}, %m: tensor<3xf32> {cleave.input = "m"}, %v: tensor<3xf32> {cleave.input = "v"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.batch_norm %x, %g, %b, %m, %v eps = 1.0e-05 : (tensor<2x3x2x2xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<2x3x2x2xf32>
  %l = cleave.reduce sum %y dims = [0, 1, 2, 3] : (tensor<2x3x2x2xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @reshape(
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<2x3xf32>
func.func @reshape(%x: tensor<2x3xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.reshape %x : tensor<2x3xf32> -> tensor<6xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<6xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @transpose(
// CHECK: cleave.transpose %{{[0-9]+}} perm = [1, 2, 0]
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<2x3x4xf32>
func.func @transpose(%x: tensor<2x3x4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.transpose %x perm = [2, 0, 1] : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  %l = cleave.reduce sum %y dims = [0, 1, 2] : (tensor<4x2x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @broadcast(
// CHECK: cleave.reduce sum %{{[0-9]+}} dims = [0] {keep_dims}
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<1x3xf32>
func.func @broadcast(%x: tensor<1x3xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.broadcast %x : tensor<1x3xf32> -> tensor<2x3xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<2x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @concat(
// CHECK: cleave.slice %{{[0-9]+}} starts = [0, 0] steps = [1, 1]
// CHECK: cleave.slice %{{[0-9]+}} starts = [0, 3] steps = [1, 1]
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<2x3xf32>, tensor<2x2xf32>
func.func @concat(%a: tensor<2x3xf32> {cleave.parameter = "a"}, %b: tensor<2x2xf32> {cleave.parameter = "b"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.concat %a, %b axis = 1 : (tensor<2x3xf32>, tensor<2x2xf32>) -> tensor<2x5xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<2x5xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @slice(
// CHECK: cleave.slice_scatter %{{[0-9]+}} starts = [0, 4] steps = [1, -2]
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<2x5xf32>
func.func @slice(%x: tensor<2x5xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.slice %x starts = [0, 4] steps = [1, -2] : tensor<2x5xf32> -> tensor<2x2xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<2x2xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @gather(
// CHECK: cleave.scatter_add %{{[0-9]+}}, %arg1 axis = 0
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<5x3xf32>
func.func @gather(%t: tensor<5x3xf32> {cleave.parameter = "t"}, %i: tensor<4xi64> {cleave.input = "i"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.gather %t, %i axis = 0 : (tensor<5x3xf32>, tensor<4xi64>) -> tensor<4x3xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<4x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @conv2d(
// CHECK: cleave.conv2d_backward_input %{{[0-9]+}}, %arg1 strides = [1, 1] pads = [1, 1, 1, 1] dilations = [1, 1] groups = 1
// CHECK: cleave.conv2d_backward_filter %arg0, %{{[0-9]+}} strides = [1, 1] pads = [1, 1, 1, 1] dilations = [1, 1] groups = 1
// CHECK: cleave.reduce sum %{{[0-9]+}} dims = [0, 2, 3]
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<1x2x4x4xf32>, tensor<3x2x3x3xf32>, tensor<3xf32>
func.func @conv2d(%x: tensor<1x2x4x4xf32> {cleave.parameter = "x"}, %w: tensor<3x2x3x3xf32> {cleave.parameter = "w"}, %b: tensor<3xf32> {cleave.parameter = "b"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.conv2d %x, %w bias %b strides = [1, 1] pads = [1, 1, 1, 1] dilations = [1, 1] groups = 1 : (tensor<1x2x4x4xf32>, tensor<3x2x3x3xf32>, tensor<3xf32>) -> tensor<1x3x4x4xf32>
  %l = cleave.reduce sum %y dims = [0, 1, 2, 3] : (tensor<1x3x4x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @max_pool2d(
// CHECK: cleave.max_pool2d_backward %arg0, %{{[0-9]+}} kernel = [2, 2] strides = [2, 2] pads = [0, 0, 0, 0] dilations = [1, 1]
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<1x1x4x4xf32>
func.func @max_pool2d(%x: tensor<1x1x4x4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.max_pool2d %x kernel = [2, 2] strides = [2, 2] pads = [0, 0, 0, 0] dilations = [1, 1] : tensor<1x1x4x4xf32> -> tensor<1x1x2x2xf32>
  %l = cleave.reduce sum %y dims = [0, 1, 2, 3] : (tensor<1x1x2x2xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @avg_pool2d(
// CHECK: cleave.avg_pool2d_backward %{{[0-9]+}} kernel = [2, 2] strides = [2, 2] pads = [0, 0, 0, 0] dilations = [1, 1] {count_include_pad}
// CHECK: return %{{[0-9]+}}, %{{[0-9]+}} : tensor<f32>, tensor<1x1x4x4xf32>
func.func @avg_pool2d(%x: tensor<1x1x4x4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.avg_pool2d %x kernel = [2, 2] strides = [2, 2] pads = [0, 0, 0, 0] dilations = [1, 1] {count_include_pad} : tensor<1x1x4x4xf32> -> tensor<1x1x2x2xf32>
  %l = cleave.reduce sum %y dims = [0, 1, 2, 3] : (tensor<1x1x2x2xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

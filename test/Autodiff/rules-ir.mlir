// The IR each differentiation rule builds: --cleave-autodiff on one op
// whose summed result is the loss, then canonicalization (checks in the style
// of mlir/utils/generate-test-checks.py). Numerical checks of the same rules:
// rules.mlir, with cleave-gradcheck.
// RUN: cleave-opt %s --cleave-autodiff --canonicalize --cse | FileCheck %s

// CHECK-LABEL: func.func @add(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<3x4xf32>
// CHECK: %[[V1:.*]] = cleave.add %arg0, %arg1 : (tensor<3x4xf32>, tensor<1x4xf32>) -> tensor<3x4xf32>
// CHECK: %[[V2:.*]] = cleave.reduce sum %[[V1]] dims = [0, 1] : (tensor<3x4xf32>) -> tensor<f32>
// CHECK: %[[V3:.*]] = cleave.reduce sum %[[V0]] dims = [0] {keep_dims} : (tensor<3x4xf32>) -> tensor<1x4xf32>
// CHECK: return %[[V2]], %[[V0]], %[[V3]] : tensor<f32>, tensor<3x4xf32>, tensor<1x4xf32>
func.func @add(%a: tensor<3x4xf32> {cleave.parameter = "a"}, %b: tensor<1x4xf32> {cleave.parameter = "b"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.add %a, %b : (tensor<3x4xf32>, tensor<1x4xf32>) -> tensor<3x4xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<3x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @sub(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<3x4xf32>
// CHECK: %[[V1:.*]] = cleave.sub %arg0, %arg1 : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
// CHECK: %[[V2:.*]] = cleave.reduce sum %[[V1]] dims = [0, 1] : (tensor<3x4xf32>) -> tensor<f32>
// CHECK: %[[V3:.*]] = cleave.neg %[[V0]] : tensor<3x4xf32>
// CHECK: return %[[V2]], %[[V0]], %[[V3]] : tensor<f32>, tensor<3x4xf32>, tensor<3x4xf32>
func.func @sub(%a: tensor<3x4xf32> {cleave.parameter = "a"}, %b: tensor<3x4xf32> {cleave.parameter = "b"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.sub %a, %b : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<3x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @mul(
// CHECK: %[[V0:.*]] = cleave.mul %arg0, %arg1 : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
// CHECK: %[[V1:.*]] = cleave.reduce sum %[[V0]] dims = [0, 1] : (tensor<3x4xf32>) -> tensor<f32>
// CHECK: return %[[V1]], %arg1 : tensor<f32>, tensor<3x4xf32>
func.func @mul(%a: tensor<3x4xf32> {cleave.parameter = "a"}, %b: tensor<3x4xf32> {cleave.input = "b"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.mul %a, %b : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<3x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @div(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<3x4xf32>
// CHECK: %[[V1:.*]] = cleave.div %arg0, %arg1 : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
// CHECK: %[[V2:.*]] = cleave.reduce sum %[[V1]] dims = [0, 1] : (tensor<3x4xf32>) -> tensor<f32>
// CHECK: %[[V3:.*]] = cleave.div %[[V0]], %arg1 : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
// CHECK: %[[V4:.*]] = cleave.mul %[[V3]], %[[V1]] : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
// CHECK: %[[V5:.*]] = cleave.neg %[[V4]] : tensor<3x4xf32>
// CHECK: return %[[V2]], %[[V3]], %[[V5]] : tensor<f32>, tensor<3x4xf32>, tensor<3x4xf32>
func.func @div(%a: tensor<3x4xf32> {cleave.parameter = "a"}, %b: tensor<3x4xf32> {cleave.parameter = "b"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.div %a, %b : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<3x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @pow(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<1x1xf32>
// CHECK: %[[V1:.*]] = cleave.pow %arg0, %arg1 : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
// CHECK: %[[V2:.*]] = cleave.reduce sum %[[V1]] dims = [0, 1] : (tensor<3x4xf32>) -> tensor<f32>
// CHECK: %[[V3:.*]] = cleave.sub %arg1, %[[V0]] : (tensor<3x4xf32>, tensor<1x1xf32>) -> tensor<3x4xf32>
// CHECK: %[[V4:.*]] = cleave.pow %arg0, %[[V3]] : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
// CHECK: %[[V5:.*]] = cleave.mul %arg1, %[[V4]] : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
// CHECK: %[[V6:.*]] = cleave.log %arg0 : tensor<3x4xf32>
// CHECK: %[[V7:.*]] = cleave.mul %[[V1]], %[[V6]] : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
// CHECK: return %[[V2]], %[[V5]], %[[V7]] : tensor<f32>, tensor<3x4xf32>, tensor<3x4xf32>
func.func @pow(%a: tensor<3x4xf32> {cleave.parameter = "a"}, %b: tensor<3x4xf32> {cleave.parameter = "b"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.pow %a, %b : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<3x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @max(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<3x4xf32>
// CHECK: %[[V1:.*]] = cleave.constant dense<5.000000e-01> : tensor<1x1xf32>
// CHECK: %[[V2:.*]] = cleave.constant dense<0.000000e+00> : tensor<1x1xf32>
// CHECK: %[[V3:.*]] = cleave.max %arg0, %arg1 : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
// CHECK: %[[V4:.*]] = cleave.reduce sum %[[V3]] dims = [0, 1] : (tensor<3x4xf32>) -> tensor<f32>
// CHECK: %[[V5:.*]] = cleave.mul %[[V0]], %[[V1]] : (tensor<3x4xf32>, tensor<1x1xf32>) -> tensor<3x4xf32>
// CHECK: %[[V6:.*]] = cleave.cmp eq, %arg0, %arg1 : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xi1>
// CHECK: %[[V7:.*]] = cleave.select %[[V6]], %[[V5]], %[[V2]] : (tensor<3x4xi1>, tensor<3x4xf32>, tensor<1x1xf32>) -> tensor<3x4xf32>
// CHECK: %[[V8:.*]] = cleave.cmp gt, %arg0, %arg1 : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xi1>
// CHECK: %[[V9:.*]] = cleave.select %[[V8]], %[[V0]], %[[V7]] : (tensor<3x4xi1>, tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
// CHECK: %[[V10:.*]] = cleave.sub %[[V0]], %[[V9]] : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
// CHECK: return %[[V4]], %[[V9]], %[[V10]] : tensor<f32>, tensor<3x4xf32>, tensor<3x4xf32>
func.func @max(%a: tensor<3x4xf32> {cleave.parameter = "a"}, %b: tensor<3x4xf32> {cleave.parameter = "b"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.max %a, %b : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<3x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @min(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<3x4xf32>
// CHECK: %[[V1:.*]] = cleave.constant dense<5.000000e-01> : tensor<1x1xf32>
// CHECK: %[[V2:.*]] = cleave.constant dense<0.000000e+00> : tensor<1x1xf32>
// CHECK: %[[V3:.*]] = cleave.min %arg0, %arg1 : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
// CHECK: %[[V4:.*]] = cleave.reduce sum %[[V3]] dims = [0, 1] : (tensor<3x4xf32>) -> tensor<f32>
// CHECK: %[[V5:.*]] = cleave.mul %[[V0]], %[[V1]] : (tensor<3x4xf32>, tensor<1x1xf32>) -> tensor<3x4xf32>
// CHECK: %[[V6:.*]] = cleave.cmp eq, %arg0, %arg1 : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xi1>
// CHECK: %[[V7:.*]] = cleave.select %[[V6]], %[[V5]], %[[V2]] : (tensor<3x4xi1>, tensor<3x4xf32>, tensor<1x1xf32>) -> tensor<3x4xf32>
// CHECK: %[[V8:.*]] = cleave.cmp lt, %arg0, %arg1 : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xi1>
// CHECK: %[[V9:.*]] = cleave.select %[[V8]], %[[V0]], %[[V7]] : (tensor<3x4xi1>, tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
// CHECK: %[[V10:.*]] = cleave.sub %[[V0]], %[[V9]] : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
// CHECK: return %[[V4]], %[[V9]], %[[V10]] : tensor<f32>, tensor<3x4xf32>, tensor<3x4xf32>
func.func @min(%a: tensor<3x4xf32> {cleave.parameter = "a"}, %b: tensor<3x4xf32> {cleave.parameter = "b"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.min %a, %b : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<3x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @select(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<3x4xf32>
// CHECK: %[[V1:.*]] = cleave.constant dense<0.000000e+00> : tensor<1x1xf32>
// CHECK: %[[V2:.*]] = cleave.select %arg0, %arg1, %arg2 : (tensor<3x4xi1>, tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
// CHECK: %[[V3:.*]] = cleave.reduce sum %[[V2]] dims = [0, 1] : (tensor<3x4xf32>) -> tensor<f32>
// CHECK: %[[V4:.*]] = cleave.select %arg0, %[[V0]], %[[V1]] : (tensor<3x4xi1>, tensor<3x4xf32>, tensor<1x1xf32>) -> tensor<3x4xf32>
// CHECK: %[[V5:.*]] = cleave.select %arg0, %[[V1]], %[[V0]] : (tensor<3x4xi1>, tensor<1x1xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
// CHECK: return %[[V3]], %[[V4]], %[[V5]] : tensor<f32>, tensor<3x4xf32>, tensor<3x4xf32>
func.func @select(%c: tensor<3x4xi1> {cleave.input = "c"}, %a: tensor<3x4xf32> {cleave.parameter = "a"}, %b: tensor<3x4xf32> {cleave.parameter = "b"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.select %c, %a, %b : (tensor<3x4xi1>, tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<3x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @neg(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<4xf32>
// CHECK: %[[V1:.*]] = cleave.neg %arg0 : tensor<4xf32>
// CHECK: %[[V2:.*]] = cleave.reduce sum %[[V1]] dims = [0] : (tensor<4xf32>) -> tensor<f32>
// CHECK: %[[V3:.*]] = cleave.neg %[[V0]] : tensor<4xf32>
// CHECK: return %[[V2]], %[[V3]] : tensor<f32>, tensor<4xf32>
func.func @neg(%x: tensor<4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.neg %x : tensor<4xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @abs(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<1xf32>
// CHECK: %[[V1:.*]] = cleave.constant dense<-1.000000e+00> : tensor<1xf32>
// CHECK: %[[V2:.*]] = cleave.constant dense<0.000000e+00> : tensor<1xf32>
// CHECK: %[[V3:.*]] = cleave.abs %arg0 : tensor<4xf32>
// CHECK: %[[V4:.*]] = cleave.reduce sum %[[V3]] dims = [0] : (tensor<4xf32>) -> tensor<f32>
// CHECK: %[[V5:.*]] = cleave.cmp lt, %arg0, %[[V2]] : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xi1>
// CHECK: %[[V6:.*]] = cleave.select %[[V5]], %[[V1]], %[[V2]] : (tensor<4xi1>, tensor<1xf32>, tensor<1xf32>) -> tensor<4xf32>
// CHECK: %[[V7:.*]] = cleave.cmp gt, %arg0, %[[V2]] : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xi1>
// CHECK: %[[V8:.*]] = cleave.select %[[V7]], %[[V0]], %[[V6]] : (tensor<4xi1>, tensor<1xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK: return %[[V4]], %[[V8]] : tensor<f32>, tensor<4xf32>
func.func @abs(%x: tensor<4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.abs %x : tensor<4xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @exp(
// CHECK: %[[V0:.*]] = cleave.exp %arg0 : tensor<4xf32>
// CHECK: %[[V1:.*]] = cleave.reduce sum %[[V0]] dims = [0] : (tensor<4xf32>) -> tensor<f32>
// CHECK: return %[[V1]], %[[V0]] : tensor<f32>, tensor<4xf32>
func.func @exp(%x: tensor<4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.exp %x : tensor<4xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @log(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<4xf32>
// CHECK: %[[V1:.*]] = cleave.log %arg0 : tensor<4xf32>
// CHECK: %[[V2:.*]] = cleave.reduce sum %[[V1]] dims = [0] : (tensor<4xf32>) -> tensor<f32>
// CHECK: %[[V3:.*]] = cleave.div %[[V0]], %arg0 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK: return %[[V2]], %[[V3]] : tensor<f32>, tensor<4xf32>
func.func @log(%x: tensor<4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.log %x : tensor<4xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @sqrt(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<4xf32>
// CHECK: %[[V1:.*]] = cleave.constant dense<2.000000e+00> : tensor<1xf32>
// CHECK: %[[V2:.*]] = cleave.sqrt %arg0 : tensor<4xf32>
// CHECK: %[[V3:.*]] = cleave.reduce sum %[[V2]] dims = [0] : (tensor<4xf32>) -> tensor<f32>
// CHECK: %[[V4:.*]] = cleave.mul %[[V2]], %[[V1]] : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xf32>
// CHECK: %[[V5:.*]] = cleave.div %[[V0]], %[[V4]] : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK: return %[[V3]], %[[V5]] : tensor<f32>, tensor<4xf32>
func.func @sqrt(%x: tensor<4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.sqrt %x : tensor<4xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @rsqrt(
// CHECK: %[[V0:.*]] = cleave.constant dense<-5.000000e-01> : tensor<1xf32>
// CHECK: %[[V1:.*]] = cleave.rsqrt %arg0 : tensor<4xf32>
// CHECK: %[[V2:.*]] = cleave.reduce sum %[[V1]] dims = [0] : (tensor<4xf32>) -> tensor<f32>
// CHECK: %[[V3:.*]] = cleave.mul %[[V1]], %[[V1]] : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK: %[[V4:.*]] = cleave.mul %[[V1]], %[[V3]] : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK: %[[V5:.*]] = cleave.mul %[[V4]], %[[V0]] : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xf32>
// CHECK: return %[[V2]], %[[V5]] : tensor<f32>, tensor<4xf32>
func.func @rsqrt(%x: tensor<4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.rsqrt %x : tensor<4xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @reciprocal(
// CHECK: %[[V0:.*]] = cleave.reciprocal %arg0 : tensor<4xf32>
// CHECK: %[[V1:.*]] = cleave.reduce sum %[[V0]] dims = [0] : (tensor<4xf32>) -> tensor<f32>
// CHECK: %[[V2:.*]] = cleave.mul %[[V0]], %[[V0]] : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK: %[[V3:.*]] = cleave.neg %[[V2]] : tensor<4xf32>
// CHECK: return %[[V1]], %[[V3]] : tensor<f32>, tensor<4xf32>
func.func @reciprocal(%x: tensor<4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.reciprocal %x : tensor<4xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @tanh(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<1xf32>
// CHECK: %[[V1:.*]] = cleave.tanh %arg0 : tensor<4xf32>
// CHECK: %[[V2:.*]] = cleave.reduce sum %[[V1]] dims = [0] : (tensor<4xf32>) -> tensor<f32>
// CHECK: %[[V3:.*]] = cleave.mul %[[V1]], %[[V1]] : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK: %[[V4:.*]] = cleave.sub %[[V0]], %[[V3]] : (tensor<1xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK: return %[[V2]], %[[V4]] : tensor<f32>, tensor<4xf32>
func.func @tanh(%x: tensor<4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.tanh %x : tensor<4xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @sigmoid(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<1xf32>
// CHECK: %[[V1:.*]] = cleave.sigmoid %arg0 : tensor<4xf32>
// CHECK: %[[V2:.*]] = cleave.reduce sum %[[V1]] dims = [0] : (tensor<4xf32>) -> tensor<f32>
// CHECK: %[[V3:.*]] = cleave.sub %[[V0]], %[[V1]] : (tensor<1xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK: %[[V4:.*]] = cleave.mul %[[V1]], %[[V3]] : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK: return %[[V2]], %[[V4]] : tensor<f32>, tensor<4xf32>
func.func @sigmoid(%x: tensor<4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.sigmoid %x : tensor<4xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @relu(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<4xf32>
// CHECK: %[[V1:.*]] = cleave.constant dense<0.000000e+00> : tensor<1xf32>
// CHECK: %[[V2:.*]] = cleave.relu %arg0 : tensor<4xf32>
// CHECK: %[[V3:.*]] = cleave.reduce sum %[[V2]] dims = [0] : (tensor<4xf32>) -> tensor<f32>
// CHECK: %[[V4:.*]] = cleave.cmp gt, %[[V2]], %[[V1]] : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xi1>
// CHECK: %[[V5:.*]] = cleave.select %[[V4]], %[[V0]], %[[V1]] : (tensor<4xi1>, tensor<4xf32>, tensor<1xf32>) -> tensor<4xf32>
// CHECK: return %[[V3]], %[[V5]] : tensor<f32>, tensor<4xf32>
func.func @relu(%x: tensor<4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.relu %x : tensor<4xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @erf(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.12837923> : tensor<1xf32>
// CHECK: %[[V1:.*]] = cleave.erf %arg0 : tensor<4xf32>
// CHECK: %[[V2:.*]] = cleave.reduce sum %[[V1]] dims = [0] : (tensor<4xf32>) -> tensor<f32>
// CHECK: %[[V3:.*]] = cleave.mul %arg0, %arg0 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK: %[[V4:.*]] = cleave.neg %[[V3]] : tensor<4xf32>
// CHECK: %[[V5:.*]] = cleave.exp %[[V4]] : tensor<4xf32>
// CHECK: %[[V6:.*]] = cleave.mul %[[V5]], %[[V0]] : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xf32>
// CHECK: return %[[V2]], %[[V6]] : tensor<f32>, tensor<4xf32>
func.func @erf(%x: tensor<4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.erf %x : tensor<4xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @sin(
// CHECK: %[[V0:.*]] = cleave.sin %arg0 : tensor<4xf32>
// CHECK: %[[V1:.*]] = cleave.reduce sum %[[V0]] dims = [0] : (tensor<4xf32>) -> tensor<f32>
// CHECK: %[[V2:.*]] = cleave.cos %arg0 : tensor<4xf32>
// CHECK: return %[[V1]], %[[V2]] : tensor<f32>, tensor<4xf32>
func.func @sin(%x: tensor<4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.sin %x : tensor<4xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @cos(
// CHECK: %[[V0:.*]] = cleave.cos %arg0 : tensor<4xf32>
// CHECK: %[[V1:.*]] = cleave.reduce sum %[[V0]] dims = [0] : (tensor<4xf32>) -> tensor<f32>
// CHECK: %[[V2:.*]] = cleave.sin %arg0 : tensor<4xf32>
// CHECK: %[[V3:.*]] = cleave.neg %[[V2]] : tensor<4xf32>
// CHECK: return %[[V1]], %[[V3]] : tensor<f32>, tensor<4xf32>
func.func @cos(%x: tensor<4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.cos %x : tensor<4xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @gelu(
// CHECK: %[[V0:.*]] = cleave.constant dense<0.398942292> : tensor<1xf32>
// CHECK: %[[V1:.*]] = cleave.constant dense<-5.000000e-01> : tensor<1xf32>
// CHECK: %[[V2:.*]] = cleave.constant dense<5.000000e-01> : tensor<1xf32>
// CHECK: %[[V3:.*]] = cleave.constant dense<1.000000e+00> : tensor<1xf32>
// CHECK: %[[V4:.*]] = cleave.constant dense<0.707106769> : tensor<1xf32>
// CHECK: %[[V5:.*]] = cleave.gelu %arg0 : tensor<4xf32>
// CHECK: %[[V6:.*]] = cleave.reduce sum %[[V5]] dims = [0] : (tensor<4xf32>) -> tensor<f32>
// CHECK: %[[V7:.*]] = cleave.mul %arg0, %[[V4]] : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xf32>
// CHECK: %[[V8:.*]] = cleave.erf %[[V7]] : tensor<4xf32>
// CHECK: %[[V9:.*]] = cleave.add %[[V3]], %[[V8]] : (tensor<1xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK: %[[V10:.*]] = cleave.mul %[[V9]], %[[V2]] : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xf32>
// CHECK: %[[V11:.*]] = cleave.mul %arg0, %arg0 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK: %[[V12:.*]] = cleave.mul %[[V11]], %[[V1]] : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xf32>
// CHECK: %[[V13:.*]] = cleave.exp %[[V12]] : tensor<4xf32>
// CHECK: %[[V14:.*]] = cleave.mul %[[V13]], %[[V0]] : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xf32>
// CHECK: %[[V15:.*]] = cleave.mul %arg0, %[[V14]] : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK: %[[V16:.*]] = cleave.add %[[V10]], %[[V15]] : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK: return %[[V6]], %[[V16]] : tensor<f32>, tensor<4xf32>
func.func @gelu(%x: tensor<4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.gelu %x : tensor<4xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @gelu_tanh(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.341450e-01> : tensor<1xf32>
// CHECK: %[[V1:.*]] = cleave.constant dense<5.000000e-01> : tensor<1xf32>
// CHECK: %[[V2:.*]] = cleave.constant dense<1.000000e+00> : tensor<1xf32>
// CHECK: %[[V3:.*]] = cleave.constant dense<0.797884583> : tensor<1xf32>
// CHECK: %[[V4:.*]] = cleave.constant dense<4.471500e-02> : tensor<1xf32>
// CHECK: %[[V5:.*]] = cleave.gelu %arg0 {approximate} : tensor<4xf32>
// CHECK: %[[V6:.*]] = cleave.reduce sum %[[V5]] dims = [0] : (tensor<4xf32>) -> tensor<f32>
// CHECK: %[[V7:.*]] = cleave.mul %arg0, %arg0 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK: %[[V8:.*]] = cleave.mul %[[V7]], %arg0 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK: %[[V9:.*]] = cleave.mul %[[V8]], %[[V4]] : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xf32>
// CHECK: %[[V10:.*]] = cleave.add %arg0, %[[V9]] : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK: %[[V11:.*]] = cleave.mul %[[V10]], %[[V3]] : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xf32>
// CHECK: %[[V12:.*]] = cleave.tanh %[[V11]] : tensor<4xf32>
// CHECK: %[[V13:.*]] = cleave.add %[[V2]], %[[V12]] : (tensor<1xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK: %[[V14:.*]] = cleave.mul %[[V13]], %[[V1]] : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xf32>
// CHECK: %[[V15:.*]] = cleave.mul %[[V7]], %[[V0]] : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xf32>
// CHECK: %[[V16:.*]] = cleave.add %[[V2]], %[[V15]] : (tensor<1xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK: %[[V17:.*]] = cleave.mul %[[V16]], %[[V3]] : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xf32>
// CHECK: %[[V18:.*]] = cleave.mul %[[V12]], %[[V12]] : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK: %[[V19:.*]] = cleave.sub %[[V2]], %[[V18]] : (tensor<1xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK: %[[V20:.*]] = cleave.mul %arg0, %[[V1]] : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xf32>
// CHECK: %[[V21:.*]] = cleave.mul %[[V20]], %[[V19]] : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK: %[[V22:.*]] = cleave.mul %[[V21]], %[[V17]] : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK: %[[V23:.*]] = cleave.add %[[V14]], %[[V22]] : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK: return %[[V6]], %[[V23]] : tensor<f32>, tensor<4xf32>
func.func @gelu_tanh(%x: tensor<4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.gelu %x {approximate} : tensor<4xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @leaky_relu(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<4xf32>
// CHECK: %[[V1:.*]] = cleave.constant dense<1.000000e-01> : tensor<1xf32>
// CHECK: %[[V2:.*]] = cleave.constant dense<0.000000e+00> : tensor<1xf32>
// CHECK: %[[V3:.*]] = cleave.leaky_relu %arg0 {alpha = 1.000000e-01 : f32} : tensor<4xf32>
// CHECK: %[[V4:.*]] = cleave.reduce sum %[[V3]] dims = [0] : (tensor<4xf32>) -> tensor<f32>
// CHECK: %[[V5:.*]] = cleave.cmp gt, %arg0, %[[V2]] : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xi1>
// CHECK: %[[V6:.*]] = cleave.mul %[[V0]], %[[V1]] : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xf32>
// CHECK: %[[V7:.*]] = cleave.select %[[V5]], %[[V0]], %[[V6]] : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK: return %[[V4]], %[[V7]] : tensor<f32>, tensor<4xf32>
func.func @leaky_relu(%x: tensor<4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.leaky_relu %x {alpha = 0.1 : f32} : tensor<4xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @matmul(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<3x5xf32>
// CHECK: %[[V1:.*]] = cleave.matmul %arg0, %arg1 {transpose_rhs} : (tensor<3x4xf32>, tensor<5x4xf32>) -> tensor<3x5xf32>
// CHECK: %[[V2:.*]] = cleave.reduce sum %[[V1]] dims = [0, 1] : (tensor<3x5xf32>) -> tensor<f32>
// CHECK: %[[V3:.*]] = cleave.matmul %[[V0]], %arg1 : (tensor<3x5xf32>, tensor<5x4xf32>) -> tensor<3x4xf32>
// CHECK: %[[V4:.*]] = cleave.matmul %[[V0]], %arg0 {transpose_lhs} : (tensor<3x5xf32>, tensor<3x4xf32>) -> tensor<5x4xf32>
// CHECK: return %[[V2]], %[[V3]], %[[V4]] : tensor<f32>, tensor<3x4xf32>, tensor<5x4xf32>
func.func @matmul(%a: tensor<3x4xf32> {cleave.parameter = "a"}, %b: tensor<5x4xf32> {cleave.parameter = "b"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.matmul %a, %b {transpose_rhs} : (tensor<3x4xf32>, tensor<5x4xf32>) -> tensor<3x5xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<3x5xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @matmul_shared_weight(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<1x6x5xf32>
// CHECK: %[[V1:.*]] = cleave.matmul %arg0, %arg1 : (tensor<2x3x4xf32>, tensor<1x4x5xf32>) -> tensor<2x3x5xf32>
// CHECK: %[[V2:.*]] = cleave.reduce sum %[[V1]] dims = [0, 1, 2] : (tensor<2x3x5xf32>) -> tensor<f32>
// CHECK: %[[V3:.*]] = cleave.reshape %arg0 : tensor<2x3x4xf32> -> tensor<1x6x4xf32>
// CHECK: %[[V4:.*]] = cleave.matmul %[[V3]], %[[V0]] {transpose_lhs} : (tensor<1x6x4xf32>, tensor<1x6x5xf32>) -> tensor<1x4x5xf32>
// CHECK: return %[[V2]], %[[V4]] : tensor<f32>, tensor<1x4x5xf32>
func.func @matmul_shared_weight(%x: tensor<2x3x4xf32> {cleave.input = "x"}, %w: tensor<1x4x5xf32> {cleave.parameter = "w"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.matmul %x, %w : (tensor<2x3x4xf32>, tensor<1x4x5xf32>) -> tensor<2x3x5xf32>
  %l = cleave.reduce sum %y dims = [0, 1, 2] : (tensor<2x3x5xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @reduce_mean(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<2x1xf32>
// CHECK: %[[V1:.*]] = cleave.constant dense<0.333333343> : tensor<1x1xf32>
// CHECK: %[[V2:.*]] = cleave.reduce mean %arg0 dims = [1] : (tensor<2x3xf32>) -> tensor<2xf32>
// CHECK: %[[V3:.*]] = cleave.reduce sum %[[V2]] dims = [0] : (tensor<2xf32>) -> tensor<f32>
// CHECK: %[[V4:.*]] = cleave.mul %[[V0]], %[[V1]] : (tensor<2x1xf32>, tensor<1x1xf32>) -> tensor<2x1xf32>
// CHECK: %[[V5:.*]] = cleave.broadcast %[[V4]] : tensor<2x1xf32> -> tensor<2x3xf32>
// CHECK: return %[[V3]], %[[V5]] : tensor<f32>, tensor<2x3xf32>
func.func @reduce_mean(%x: tensor<2x3xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.reduce mean %x dims = [1] : (tensor<2x3xf32>) -> tensor<2xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<2xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @reduce_max(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<2x1xf32>
// CHECK: %[[V1:.*]] = cleave.reduce max %arg0 dims = [1] : (tensor<2x3xf32>) -> tensor<2xf32>
// CHECK: %[[V2:.*]] = cleave.reduce sum %[[V1]] dims = [0] : (tensor<2xf32>) -> tensor<f32>
// CHECK: %[[V3:.*]] = cleave.reshape %[[V1]] : tensor<2xf32> -> tensor<2x1xf32>
// CHECK: %[[V4:.*]] = cleave.cmp eq, %arg0, %[[V3]] : (tensor<2x3xf32>, tensor<2x1xf32>) -> tensor<2x3xi1>
// CHECK: %[[V5:.*]] = cleave.cast %[[V4]] : tensor<2x3xi1> -> tensor<2x3xf32>
// CHECK: %[[V6:.*]] = cleave.reduce sum %[[V5]] dims = [1] {keep_dims} : (tensor<2x3xf32>) -> tensor<2x1xf32>
// CHECK: %[[V7:.*]] = cleave.div %[[V0]], %[[V6]] : (tensor<2x1xf32>, tensor<2x1xf32>) -> tensor<2x1xf32>
// CHECK: %[[V8:.*]] = cleave.mul %[[V5]], %[[V7]] : (tensor<2x3xf32>, tensor<2x1xf32>) -> tensor<2x3xf32>
// CHECK: return %[[V2]], %[[V8]] : tensor<f32>, tensor<2x3xf32>
func.func @reduce_max(%x: tensor<2x3xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.reduce max %x dims = [1] : (tensor<2x3xf32>) -> tensor<2xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<2xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @reduce_prod(
// CHECK: %[[V0:.*]] = cleave.reduce prod %arg0 dims = [1] {keep_dims} : (tensor<2x3xf32>) -> tensor<2x1xf32>
// CHECK: %[[V1:.*]] = cleave.reduce sum %[[V0]] dims = [0, 1] : (tensor<2x1xf32>) -> tensor<f32>
// CHECK: %[[V2:.*]] = cleave.div %[[V0]], %arg0 : (tensor<2x1xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK: return %[[V1]], %[[V2]] : tensor<f32>, tensor<2x3xf32>
func.func @reduce_prod(%x: tensor<2x3xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.reduce prod %x dims = [1] {keep_dims} : (tensor<2x3xf32>) -> tensor<2x1xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<2x1xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @softmax(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<2x3xf32>
// CHECK: %[[V1:.*]] = cleave.softmax %arg0 axis = 1 : tensor<2x3xf32>
// CHECK: %[[V2:.*]] = cleave.reduce sum %[[V1]] dims = [0, 1] : (tensor<2x3xf32>) -> tensor<f32>
// CHECK: %[[V3:.*]] = cleave.reduce sum %[[V1]] dims = [1] {keep_dims} : (tensor<2x3xf32>) -> tensor<2x1xf32>
// CHECK: %[[V4:.*]] = cleave.sub %[[V0]], %[[V3]] : (tensor<2x3xf32>, tensor<2x1xf32>) -> tensor<2x3xf32>
// CHECK: %[[V5:.*]] = cleave.mul %[[V1]], %[[V4]] : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK: return %[[V2]], %[[V5]] : tensor<f32>, tensor<2x3xf32>
func.func @softmax(%x: tensor<2x3xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.softmax %x axis = 1 : tensor<2x3xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<2x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @log_softmax(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<2x3xf32>
// CHECK: %[[V1:.*]] = cleave.log_softmax %arg0 axis = 1 : tensor<2x3xf32>
// CHECK: %[[V2:.*]] = cleave.reduce sum %[[V1]] dims = [0, 1] : (tensor<2x3xf32>) -> tensor<f32>
// CHECK: %[[V3:.*]] = cleave.exp %[[V1]] : tensor<2x3xf32>
// CHECK: %[[V4:.*]] = cleave.reduce sum %[[V0]] dims = [1] {keep_dims} : (tensor<2x3xf32>) -> tensor<2x1xf32>
// CHECK: %[[V5:.*]] = cleave.mul %[[V3]], %[[V4]] : (tensor<2x3xf32>, tensor<2x1xf32>) -> tensor<2x3xf32>
// CHECK: %[[V6:.*]] = cleave.sub %[[V0]], %[[V5]] : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK: return %[[V2]], %[[V6]] : tensor<f32>, tensor<2x3xf32>
func.func @log_softmax(%x: tensor<2x3xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.log_softmax %x axis = 1 : tensor<2x3xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<2x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// One layer_norm_backward makes the three gradients (its kernel runs the
// formulas of the case below in two passes).
// CHECK-LABEL: func.func @layer_norm(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<2x3xf32>
// CHECK: %result, %mean, %inv_std_dev = cleave.layer_norm %arg0 scale %arg1 bias %arg2 axis = 1 eps = 9.99999974E-6 : (tensor<2x3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<2x3xf32>, tensor<2x1xf32>, tensor<2x1xf32>)
// CHECK: %[[V1:.*]] = cleave.reduce sum %result dims = [0, 1] : (tensor<2x3xf32>) -> tensor<f32>
// CHECK: %grad_input, %grad_scale, %grad_bias = cleave.layer_norm_backward %arg0, %mean, %inv_std_dev, %[[V0]] scale %arg1 axis = 1 : (tensor<2x3xf32>, tensor<2x1xf32>, tensor<2x1xf32>, tensor<2x3xf32>, tensor<3xf32>) -> (tensor<2x3xf32>, tensor<3xf32>, tensor<3xf32>)
// CHECK: return %[[V1]], %grad_input, %grad_scale, %grad_bias : tensor<f32>, tensor<2x3xf32>, tensor<3xf32>, tensor<3xf32>
func.func @layer_norm(%x: tensor<2x3xf32> {cleave.parameter = "x"}, %g: tensor<3xf32> {cleave.parameter = "g"}, %b: tensor<3xf32> {cleave.parameter = "b"}) -> (tensor<f32> {cleave.loss}) {
  %y, %m, %r = cleave.layer_norm %x scale %g bias %b axis = 1 eps = 1.0e-05 : (tensor<2x3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<2x3xf32>, tensor<2x1xf32>, tensor<2x1xf32>)
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<2x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// Where the loss also reads the statistics, the gradient is the formulas
// op by op, the statistics' gradients added in.
// CHECK-LABEL: func.func @layer_norm_statistics(
// CHECK-NOT: cleave.layer_norm_backward
// CHECK: cleave.reduce mean %{{.*}} dims = [1] {keep_dims}
// CHECK: cleave.reduce mean %{{.*}} dims = [1] {keep_dims}
// CHECK-NOT: cleave.layer_norm_backward
// CHECK: return
func.func @layer_norm_statistics(%x: tensor<2x3xf32> {cleave.parameter = "x"}, %g: tensor<3xf32> {cleave.parameter = "g"}) -> (tensor<f32> {cleave.loss}) {
  %y, %m, %r = cleave.layer_norm %x scale %g axis = 1 eps = 1.0e-05 : (tensor<2x3xf32>, tensor<3xf32>) -> (tensor<2x3xf32>, tensor<2x1xf32>, tensor<2x1xf32>)
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<2x3xf32>) -> tensor<f32>
  %lm = cleave.reduce sum %m dims = [0, 1] : (tensor<2x1xf32>) -> tensor<f32>
  %t = cleave.add %l, %lm : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %t : tensor<f32>
}

// CHECK-LABEL: func.func @batch_norm(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<2x3x2x2xf32>
// CHECK: %[[V1:.*]] = cleave.constant dense<9.99999974E-6> : tensor<1x1x1x1xf32>
// CHECK: %[[V2:.*]] = cleave.batch_norm %arg0, %arg1, %arg2, %arg3, %arg4 eps = 9.99999974E-6 : (tensor<2x3x2x2xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<2x3x2x2xf32>
// CHECK: %[[V3:.*]] = cleave.reduce sum %[[V2]] dims = [0, 1, 2, 3] : (tensor<2x3x2x2xf32>) -> tensor<f32>
// CHECK: %[[V4:.*]] = cleave.reshape %arg1 : tensor<3xf32> -> tensor<1x3x1x1xf32>
// CHECK: %[[V5:.*]] = cleave.reshape %arg3 : tensor<3xf32> -> tensor<1x3x1x1xf32>
// CHECK: %[[V6:.*]] = cleave.reshape %arg4 : tensor<3xf32> -> tensor<1x3x1x1xf32>
// CHECK: %[[V7:.*]] = cleave.add %[[V6]], %[[V1]] : (tensor<1x3x1x1xf32>, tensor<1x1x1x1xf32>) -> tensor<1x3x1x1xf32>
// CHECK: %[[V8:.*]] = cleave.rsqrt %[[V7]] : tensor<1x3x1x1xf32>
// CHECK: %[[V9:.*]] = cleave.sub %arg0, %[[V5]] : (tensor<2x3x2x2xf32>, tensor<1x3x1x1xf32>) -> tensor<2x3x2x2xf32>
// CHECK: %[[V10:.*]] = cleave.mul %[[V4]], %[[V8]] : (tensor<1x3x1x1xf32>, tensor<1x3x1x1xf32>) -> tensor<1x3x1x1xf32>
// CHECK: %[[V11:.*]] = cleave.mul %[[V0]], %[[V10]] : (tensor<2x3x2x2xf32>, tensor<1x3x1x1xf32>) -> tensor<2x3x2x2xf32>
// CHECK: %[[V12:.*]] = cleave.mul %[[V9]], %[[V8]] : (tensor<2x3x2x2xf32>, tensor<1x3x1x1xf32>) -> tensor<2x3x2x2xf32>
// CHECK: %[[V13:.*]] = cleave.reduce sum %[[V12]] dims = [0, 2, 3] {keep_dims} : (tensor<2x3x2x2xf32>) -> tensor<1x3x1x1xf32>
// CHECK: %[[V14:.*]] = cleave.reshape %[[V13]] : tensor<1x3x1x1xf32> -> tensor<3xf32>
// CHECK: %[[V15:.*]] = cleave.reduce sum %[[V0]] dims = [0, 2, 3] {keep_dims} : (tensor<2x3x2x2xf32>) -> tensor<1x3x1x1xf32>
// CHECK: %[[V16:.*]] = cleave.reshape %[[V15]] : tensor<1x3x1x1xf32> -> tensor<3xf32>
// CHECK: return %[[V3]], %[[V11]], %[[V14]], %[[V16]] : tensor<f32>, tensor<2x3x2x2xf32>, tensor<3xf32>, tensor<3xf32>
func.func @batch_norm(%x: tensor<2x3x2x2xf32> {cleave.parameter = "x"}, %g: tensor<3xf32> {cleave.parameter = "g"}, %b: tensor<3xf32> {cleave.parameter = "b"}, %m: tensor<3xf32> {cleave.input = "m"}, %v: tensor<3xf32> {cleave.input = "v"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.batch_norm %x, %g, %b, %m, %v eps = 1.0e-05 : (tensor<2x3x2x2xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<2x3x2x2xf32>
  %l = cleave.reduce sum %y dims = [0, 1, 2, 3] : (tensor<2x3x2x2xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @reshape(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<2x3xf32>
// CHECK: %[[V1:.*]] = cleave.reshape %arg0 : tensor<2x3xf32> -> tensor<6xf32>
// CHECK: %[[V2:.*]] = cleave.reduce sum %[[V1]] dims = [0] : (tensor<6xf32>) -> tensor<f32>
// CHECK: return %[[V2]], %[[V0]] : tensor<f32>, tensor<2x3xf32>
func.func @reshape(%x: tensor<2x3xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.reshape %x : tensor<2x3xf32> -> tensor<6xf32>
  %l = cleave.reduce sum %y dims = [0] : (tensor<6xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @transpose(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<4x2x3xf32>
// CHECK: %[[V1:.*]] = cleave.transpose %arg0 perm = [2, 0, 1] : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
// CHECK: %[[V2:.*]] = cleave.reduce sum %[[V1]] dims = [0, 1, 2] : (tensor<4x2x3xf32>) -> tensor<f32>
// CHECK: %[[V3:.*]] = cleave.transpose %[[V0]] perm = [1, 2, 0] : (tensor<4x2x3xf32>) -> tensor<2x3x4xf32>
// CHECK: return %[[V2]], %[[V3]] : tensor<f32>, tensor<2x3x4xf32>
func.func @transpose(%x: tensor<2x3x4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.transpose %x perm = [2, 0, 1] : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  %l = cleave.reduce sum %y dims = [0, 1, 2] : (tensor<4x2x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @broadcast(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<2x3xf32>
// CHECK: %[[V1:.*]] = cleave.broadcast %arg0 : tensor<1x3xf32> -> tensor<2x3xf32>
// CHECK: %[[V2:.*]] = cleave.reduce sum %[[V1]] dims = [0, 1] : (tensor<2x3xf32>) -> tensor<f32>
// CHECK: %[[V3:.*]] = cleave.reduce sum %[[V0]] dims = [0] {keep_dims} : (tensor<2x3xf32>) -> tensor<1x3xf32>
// CHECK: return %[[V2]], %[[V3]] : tensor<f32>, tensor<1x3xf32>
func.func @broadcast(%x: tensor<1x3xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.broadcast %x : tensor<1x3xf32> -> tensor<2x3xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<2x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @concat(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<2x5xf32>
// CHECK: %[[V1:.*]] = cleave.concat %arg0, %arg1 axis = 1 : (tensor<2x3xf32>, tensor<2x2xf32>) -> tensor<2x5xf32>
// CHECK: %[[V2:.*]] = cleave.reduce sum %[[V1]] dims = [0, 1] : (tensor<2x5xf32>) -> tensor<f32>
// CHECK: %[[V3:.*]] = cleave.slice %[[V0]] starts = [0, 0] steps = [1, 1] : tensor<2x5xf32> -> tensor<2x3xf32>
// CHECK: %[[V4:.*]] = cleave.slice %[[V0]] starts = [0, 3] steps = [1, 1] : tensor<2x5xf32> -> tensor<2x2xf32>
// CHECK: return %[[V2]], %[[V3]], %[[V4]] : tensor<f32>, tensor<2x3xf32>, tensor<2x2xf32>
func.func @concat(%a: tensor<2x3xf32> {cleave.parameter = "a"}, %b: tensor<2x2xf32> {cleave.parameter = "b"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.concat %a, %b axis = 1 : (tensor<2x3xf32>, tensor<2x2xf32>) -> tensor<2x5xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<2x5xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @slice(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<2x2xf32>
// CHECK: %[[V1:.*]] = cleave.slice %arg0 starts = [0, 4] steps = [1, -2] : tensor<2x5xf32> -> tensor<2x2xf32>
// CHECK: %[[V2:.*]] = cleave.reduce sum %[[V1]] dims = [0, 1] : (tensor<2x2xf32>) -> tensor<f32>
// CHECK: %[[V3:.*]] = cleave.slice_scatter %[[V0]] starts = [0, 4] steps = [1, -2] : tensor<2x2xf32> -> tensor<2x5xf32>
// CHECK: return %[[V2]], %[[V3]] : tensor<f32>, tensor<2x5xf32>
func.func @slice(%x: tensor<2x5xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.slice %x starts = [0, 4] steps = [1, -2] : tensor<2x5xf32> -> tensor<2x2xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<2x2xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @slice_scatter(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<2x5xf32>
// CHECK: %[[V1:.*]] = cleave.slice_scatter %arg0 starts = [0, 4] steps = [1, -2] : tensor<2x2xf32> -> tensor<2x5xf32>
// CHECK: %[[V2:.*]] = cleave.reduce sum %[[V1]] dims = [0, 1] : (tensor<2x5xf32>) -> tensor<f32>
// CHECK: %[[V3:.*]] = cleave.slice %[[V0]] starts = [0, 4] steps = [1, -2] : tensor<2x5xf32> -> tensor<2x2xf32>
// CHECK: return %[[V2]], %[[V3]] : tensor<f32>, tensor<2x2xf32>
func.func @slice_scatter(%x: tensor<2x2xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.slice_scatter %x starts = [0, 4] steps = [1, -2] : tensor<2x2xf32> -> tensor<2x5xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<2x5xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @gather(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<4x3xf32>
// CHECK: %[[V1:.*]] = cleave.gather %arg0, %arg1 axis = 0 : (tensor<5x3xf32>, tensor<4xi64>) -> tensor<4x3xf32>
// CHECK: %[[V2:.*]] = cleave.reduce sum %[[V1]] dims = [0, 1] : (tensor<4x3xf32>) -> tensor<f32>
// CHECK: %[[V3:.*]] = cleave.scatter_add %[[V0]], %arg1 axis = 0 : (tensor<4x3xf32>, tensor<4xi64>) -> tensor<5x3xf32>
// CHECK: return %[[V2]], %[[V3]] : tensor<f32>, tensor<5x3xf32>
func.func @gather(%t: tensor<5x3xf32> {cleave.parameter = "t"}, %i: tensor<4xi64> {cleave.input = "i"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.gather %t, %i axis = 0 : (tensor<5x3xf32>, tensor<4xi64>) -> tensor<4x3xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<4x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @conv2d(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<1x3x4x4xf32>
// CHECK: %[[V1:.*]] = cleave.conv2d %arg0, %arg1 bias %arg2 strides = [1, 1] pads = [1, 1, 1, 1] dilations = [1, 1] groups = 1 : (tensor<1x2x4x4xf32>, tensor<3x2x3x3xf32>, tensor<3xf32>) -> tensor<1x3x4x4xf32>
// CHECK: %[[V2:.*]] = cleave.reduce sum %[[V1]] dims = [0, 1, 2, 3] : (tensor<1x3x4x4xf32>) -> tensor<f32>
// CHECK: %[[V3:.*]] = cleave.conv2d_backward_input %[[V0]], %arg1 strides = [1, 1] pads = [1, 1, 1, 1] dilations = [1, 1] groups = 1 : (tensor<1x3x4x4xf32>, tensor<3x2x3x3xf32>) -> tensor<1x2x4x4xf32>
// CHECK: %[[V4:.*]] = cleave.conv2d_backward_filter %arg0, %[[V0]] strides = [1, 1] pads = [1, 1, 1, 1] dilations = [1, 1] groups = 1 : (tensor<1x2x4x4xf32>, tensor<1x3x4x4xf32>) -> tensor<3x2x3x3xf32>
// CHECK: %[[V5:.*]] = cleave.reduce sum %[[V0]] dims = [0, 2, 3] : (tensor<1x3x4x4xf32>) -> tensor<3xf32>
// CHECK: return %[[V2]], %[[V3]], %[[V4]], %[[V5]] : tensor<f32>, tensor<1x2x4x4xf32>, tensor<3x2x3x3xf32>, tensor<3xf32>
func.func @conv2d(%x: tensor<1x2x4x4xf32> {cleave.parameter = "x"}, %w: tensor<3x2x3x3xf32> {cleave.parameter = "w"}, %b: tensor<3xf32> {cleave.parameter = "b"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.conv2d %x, %w bias %b strides = [1, 1] pads = [1, 1, 1, 1] dilations = [1, 1] groups = 1 : (tensor<1x2x4x4xf32>, tensor<3x2x3x3xf32>, tensor<3xf32>) -> tensor<1x3x4x4xf32>
  %l = cleave.reduce sum %y dims = [0, 1, 2, 3] : (tensor<1x3x4x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @scatter_add(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<5x3xf32>
// CHECK: %[[V1:.*]] = cleave.scatter_add %arg0, %arg1 axis = 0 : (tensor<4x3xf32>, tensor<4xi64>) -> tensor<5x3xf32>
// CHECK: %[[V2:.*]] = cleave.reduce sum %[[V1]] dims = [0, 1] : (tensor<5x3xf32>) -> tensor<f32>
// CHECK: %[[V3:.*]] = cleave.gather %[[V0]], %arg1 axis = 0 : (tensor<5x3xf32>, tensor<4xi64>) -> tensor<4x3xf32>
// CHECK: return %[[V2]], %[[V3]] : tensor<f32>, tensor<4x3xf32>
func.func @scatter_add(%u: tensor<4x3xf32> {cleave.parameter = "u"}, %i: tensor<4xi64> {cleave.input = "i"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.scatter_add %u, %i axis = 0 : (tensor<4x3xf32>, tensor<4xi64>) -> tensor<5x3xf32>
  %l = cleave.reduce sum %y dims = [0, 1] : (tensor<5x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @conv2d_backward_input(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<1x2x6x6xf32>
// CHECK: %[[V1:.*]] = cleave.conv2d_backward_input %arg0, %arg1 strides = [2, 2] pads = [1, 1, 1, 1] dilations = [1, 1] groups = 1 : (tensor<1x3x3x3xf32>, tensor<3x2x3x3xf32>) -> tensor<1x2x6x6xf32>
// CHECK: %[[V2:.*]] = cleave.reduce sum %[[V1]] dims = [0, 1, 2, 3] : (tensor<1x2x6x6xf32>) -> tensor<f32>
// CHECK: %[[V3:.*]] = cleave.conv2d %[[V0]], %arg1 strides = [2, 2] pads = [1, 1, 1, 1] dilations = [1, 1] groups = 1 : (tensor<1x2x6x6xf32>, tensor<3x2x3x3xf32>) -> tensor<1x3x3x3xf32>
// CHECK: %[[V4:.*]] = cleave.conv2d_backward_filter %[[V0]], %arg0 strides = [2, 2] pads = [1, 1, 1, 1] dilations = [1, 1] groups = 1 : (tensor<1x2x6x6xf32>, tensor<1x3x3x3xf32>) -> tensor<3x2x3x3xf32>
// CHECK: return %[[V2]], %[[V3]], %[[V4]] : tensor<f32>, tensor<1x3x3x3xf32>, tensor<3x2x3x3xf32>
func.func @conv2d_backward_input(%x: tensor<1x3x3x3xf32> {cleave.parameter = "x"}, %w: tensor<3x2x3x3xf32> {cleave.parameter = "w"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.conv2d_backward_input %x, %w strides = [2, 2] pads = [1, 1, 1, 1] dilations = [1, 1] groups = 1 : (tensor<1x3x3x3xf32>, tensor<3x2x3x3xf32>) -> tensor<1x2x6x6xf32>
  %l = cleave.reduce sum %y dims = [0, 1, 2, 3] : (tensor<1x2x6x6xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @max_pool2d(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<1x1x2x2xf32>
// CHECK: %[[V1:.*]] = cleave.max_pool2d %arg0 kernel = [2, 2] strides = [2, 2] pads = [0, 0, 0, 0] dilations = [1, 1] : tensor<1x1x4x4xf32> -> tensor<1x1x2x2xf32>
// CHECK: %[[V2:.*]] = cleave.reduce sum %[[V1]] dims = [0, 1, 2, 3] : (tensor<1x1x2x2xf32>) -> tensor<f32>
// CHECK: %[[V3:.*]] = cleave.max_pool2d_backward %arg0, %[[V0]] kernel = [2, 2] strides = [2, 2] pads = [0, 0, 0, 0] dilations = [1, 1] : (tensor<1x1x4x4xf32>, tensor<1x1x2x2xf32>) -> tensor<1x1x4x4xf32>
// CHECK: return %[[V2]], %[[V3]] : tensor<f32>, tensor<1x1x4x4xf32>
func.func @max_pool2d(%x: tensor<1x1x4x4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.max_pool2d %x kernel = [2, 2] strides = [2, 2] pads = [0, 0, 0, 0] dilations = [1, 1] : tensor<1x1x4x4xf32> -> tensor<1x1x2x2xf32>
  %l = cleave.reduce sum %y dims = [0, 1, 2, 3] : (tensor<1x1x2x2xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @avg_pool2d(
// CHECK: %[[V0:.*]] = cleave.constant dense<1.000000e+00> : tensor<1x1x2x2xf32>
// CHECK: %[[V1:.*]] = cleave.avg_pool2d %arg0 kernel = [2, 2] strides = [2, 2] pads = [0, 0, 0, 0] dilations = [1, 1] {count_include_pad} : tensor<1x1x4x4xf32> -> tensor<1x1x2x2xf32>
// CHECK: %[[V2:.*]] = cleave.reduce sum %[[V1]] dims = [0, 1, 2, 3] : (tensor<1x1x2x2xf32>) -> tensor<f32>
// CHECK: %[[V3:.*]] = cleave.avg_pool2d_backward %[[V0]] kernel = [2, 2] strides = [2, 2] pads = [0, 0, 0, 0] dilations = [1, 1] {count_include_pad} : tensor<1x1x2x2xf32> -> tensor<1x1x4x4xf32>
// CHECK: return %[[V2]], %[[V3]] : tensor<f32>, tensor<1x1x4x4xf32>
func.func @avg_pool2d(%x: tensor<1x1x4x4xf32> {cleave.parameter = "x"}) -> (tensor<f32> {cleave.loss}) {
  %y = cleave.avg_pool2d %x kernel = [2, 2] strides = [2, 2] pads = [0, 0, 0, 0] dilations = [1, 1] {count_include_pad} : tensor<1x1x4x4xf32> -> tensor<1x1x2x2xf32>
  %l = cleave.reduce sum %y dims = [0, 1, 2, 3] : (tensor<1x1x2x2xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

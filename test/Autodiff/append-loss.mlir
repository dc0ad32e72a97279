// RUN: cleave-opt %s --split-input-file --cleave-append-loss=loss=cross_entropy | FileCheck %s --check-prefix=CE
// RUN: cleave-opt %s --split-input-file --cleave-append-loss=loss=mse | FileCheck %s --check-prefix=MSE

// Cross-entropy: class dimension last, int64 labels checked against the
// classes where they enter (named for the error), ignore_index -100 left
// out of the mean, the stabilising max a stop-gradient; written as
// reductions over the class axis.
// CE-LABEL: func.func @logits
// CE-SAME: %[[L:[a-z0-9]+]]: tensor<2x4xi64> {cleave.input = "labels"}) -> (tensor<f32> {cleave.loss}, tensor<2x4x5xf32> {cleave.output = "y"})
// CE: %[[Y:.*]] = cleave.tanh
// CE: %[[CL:.*]] = cleave.check_index %[[L]] bound = 5 ignore = -100 : tensor<2x4xi64>
// CE: %[[LK:.*]] = cleave.reshape %[[CL]] : tensor<2x4xi64> -> tensor<2x4x1xi64>
// CE: %[[IOTA:.*]] = cleave.iota dim = 2 : tensor<1x1x5xi64>
// CE: %[[HIT:.*]] = cleave.cmp eq, %[[LK]], %[[IOTA]]
// CE: %[[MAX:.*]] = cleave.reduce max %[[Y]] dims = [2] {cleave.no_grad, keep_dims}
// CE: %[[SH:.*]] = cleave.sub %[[Y]], %[[MAX]]
// CE: %[[E:.*]] = cleave.exp %[[SH]]
// CE: %[[SE:.*]] = cleave.reduce sum %[[E]] dims = [2] {keep_dims}
// CE: %[[T:.*]] = cleave.select %[[HIT]], %[[SH]]
// CE: %[[TS:.*]] = cleave.reduce sum %[[T]] dims = [2] {keep_dims}
// CE: %[[LSE:.*]] = cleave.log %[[SE]]
// CE: %[[ITEM:.*]] = cleave.sub %[[LSE]], %[[TS]]
// CE: %[[IGN:.*]] = cleave.constant dense<-100> : tensor<1x1x1xi64>
// CE: %[[VALID:.*]] = cleave.cmp ne, %[[LK]], %[[IGN]]
// CE: %[[W:.*]] = cleave.cast %[[VALID]] : tensor<2x4x1xi1> -> tensor<2x4x1xf32>
// CE: %[[WI:.*]] = cleave.mul %[[ITEM]], %[[W]]
// CE: %[[DEN:.*]] = cleave.reduce sum %[[W]] dims = [0, 1, 2] : (tensor<2x4x1xf32>) -> tensor<f32>
// CE: %[[NUM:.*]] = cleave.reduce sum %[[WI]] dims = [0, 1, 2] : (tensor<2x4x1xf32>) -> tensor<f32>
// CE: %[[LOSS:.*]] = cleave.div %[[NUM]], %[[DEN]]
// CE: return %[[LOSS]], %[[Y]] : tensor<f32>, tensor<2x4x5xf32>

// MSE-LABEL: func.func @logits
// MSE-SAME: %[[L:[a-z0-9]+]]: tensor<2x4x5xf32> {cleave.input = "labels"}) -> (tensor<f32> {cleave.loss}, tensor<2x4x5xf32> {cleave.output = "y"})
// MSE: %[[Y:.*]] = cleave.tanh
// MSE: %[[D:.*]] = cleave.sub %[[Y]], %[[L]]
// MSE: %[[SQ:.*]] = cleave.mul %[[D]], %[[D]]
// MSE: %[[M:.*]] = cleave.reduce mean %[[SQ]] dims = [0, 1, 2]
// MSE: return %[[M]], %[[Y]]
func.func @logits(%x: tensor<2x4x5xf32> {cleave.input = "x"}) -> (tensor<2x4x5xf32> {cleave.output = "y"}) {
  %0 = cleave.tanh %x : tensor<2x4x5xf32>
  return %0 : tensor<2x4x5xf32>
}

// -----

// A function that already has a loss is left alone.
// CE-LABEL: func.func @trained
// CE-SAME: (%{{.*}}: tensor<4xf32> {cleave.input = "x"}) -> (tensor<f32> {cleave.loss})
// MSE-LABEL: func.func @trained
// MSE-SAME: (%{{.*}}: tensor<4xf32> {cleave.input = "x"}) -> (tensor<f32> {cleave.loss})
func.func @trained(%x: tensor<4xf32> {cleave.input = "x"}) -> (tensor<f32> {cleave.loss}) {
  %0 = cleave.reduce sum %x dims = [0] : (tensor<4xf32>) -> tensor<f32>
  return %0 : tensor<f32>
}

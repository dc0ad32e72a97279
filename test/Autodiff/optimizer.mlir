// RUN: cleave-opt %s --cleave-optimizer="optimizer=sgd lr=0.5 momentum=0.9 weight-decay=0.25" | FileCheck %s --check-prefix=SGD
// RUN: cleave-opt %s --cleave-optimizer="optimizer=adamw lr=0.5 weight-decay=0.25 beta1=0.8 beta2=0.9 eps=0.125" | FileCheck %s --check-prefix=ADAMW
// RUN: cleave-opt %s --cleave-optimizer="optimizer=sgd lr=0.5" | FileCheck %s --check-prefix=PLAIN
// RUN: cleave-opt %s --cleave-optimizer="optimizer=adamw weight-decay=0.25 lr-input=true" | FileCheck %s --check-prefix=LRIN
// RUN: cleave-opt %s --cleave-optimizer="optimizer=sgd lr=0.5 max-grad-norm=2.0 clip-grad-value=0.25" | FileCheck %s --check-prefix=CLIP
// RUN: cleave-opt %s --cleave-optimizer="optimizer=adamw guard-nonfinite=true" | FileCheck %s --check-prefix=GUARD

// SGD (PyTorch): d = g + wd p; buf = momentum buf + d; p - lr buf.
// SGD-LABEL: func.func @step
// SGD-SAME: (%[[W:[a-z0-9]+]]: tensor<2x3xf32> {cleave.parameter = "w"}, %[[G:[a-z0-9]+]]: tensor<2x3xf32> {cleave.input = "g"}, %[[S:[a-z0-9]+]]: tensor<i64> {cleave.step}, %[[BUF:[a-z0-9]+]]: tensor<2x3xf32> {cleave.optimizer_state = ["w", "momentum_buffer"]})
// SGD-SAME: -> (tensor<f32> {cleave.loss}, tensor<2x3xf32> {cleave.parameter = "w"}, tensor<2x3xf32> {cleave.optimizer_state = ["w", "momentum_buffer"]}, tensor<2x3xf32> {cleave.gradient = "w"})
// SGD: %[[WD:.*]] = cleave.constant dense<2.500000e-01>
// SGD: %[[DECAY:.*]] = cleave.mul %[[W]], %[[WD]]
// SGD: %[[D:.*]] = cleave.add %[[G]], %[[DECAY]]
// SGD: %[[MOM:.*]] = cleave.constant dense<0.899999976>
// SGD: %[[B1:.*]] = cleave.mul %[[BUF]], %[[MOM]]
// SGD: %[[B2:.*]] = cleave.add %[[B1]], %[[D]]
// SGD: %[[LR:.*]] = cleave.constant dense<5.000000e-01>
// SGD: %[[U:.*]] = cleave.mul %[[B2]], %[[LR]]
// SGD: %[[NEW:.*]] = cleave.sub %[[W]], %[[U]]
// SGD: return %{{.*}}, %[[NEW]], %[[B2]], %[[G]]

// AdamW (PyTorch): decoupled decay, bias-corrected moments.
// ADAMW-LABEL: func.func @step
// ADAMW-SAME: %[[S:[a-z0-9]+]]: tensor<i64> {cleave.step}, %[[M:[a-z0-9]+]]: tensor<2x3xf32> {cleave.optimizer_state = ["w", "exp_avg"]}, %[[V:[a-z0-9]+]]: tensor<2x3xf32> {cleave.optimizer_state = ["w", "exp_avg_sq"]})
// ADAMW: %[[T:.*]] = cleave.cast %[[S]] : tensor<i64> -> tensor<f32>
// ADAMW: %[[B1:.*]] = cleave.constant dense<8.000000e-01> : tensor<f32>
// ADAMW: %[[P1:.*]] = cleave.pow %[[B1]], %[[T]]
// ADAMW: %[[C1:.*]] = cleave.sub %{{.*}}, %[[P1]]
// ADAMW: %[[STEPSIZE:.*]] = cleave.div %{{.*}}, %[[C1]]
// ADAMW: %[[P2:.*]] = cleave.pow %{{.*}}, %[[T]]
// ADAMW: %[[C2:.*]] = cleave.sub %{{.*}}, %[[P2]]
// ADAMW: %[[C2S:.*]] = cleave.sqrt %[[C2]]
// ADAMW: %[[DECAYED:.*]] = cleave.mul %arg0, %{{.*}} : (tensor<2x3xf32>, tensor<1x1xf32>)
// ADAMW: %[[M2:.*]] = cleave.add
// ADAMW: %[[GG:.*]] = cleave.mul %arg1, %arg1
// ADAMW: %[[V2:.*]] = cleave.add
// ADAMW: %[[SQ:.*]] = cleave.sqrt %[[V2]]
// ADAMW: %[[DEN:.*]] = cleave.div %[[SQ]]
// ADAMW: %[[DEN2:.*]] = cleave.add %[[DEN]]
// ADAMW: %[[R:.*]] = cleave.div %[[M2]], %[[DEN2]]
// ADAMW: %[[UPD:.*]] = cleave.mul %{{.*}}, %[[R]]
// ADAMW: %[[NEW:.*]] = cleave.sub %[[DECAYED]], %[[UPD]]
// ADAMW: return %{{.*}}, %[[NEW]], %[[M2]], %[[V2]], %arg1

// Plain SGD keeps no state.
// PLAIN-LABEL: func.func @step
// PLAIN-NOT: cleave.optimizer_state
// PLAIN: cleave.sub %arg0
// The rate as an input the runtime's schedule feeds: the decay and the step
// size read it, no constant rate remains.
// LRIN-LABEL: func.func @step
// LRIN-SAME: %[[LR:[a-z0-9]+]]: tensor<f32> {cleave.hyperparameter = "lr"},
// LRIN-NOT: dense<1.000000e-02>
// LRIN: %[[STEPSIZE:.*]] = cleave.div %[[LR]], %{{.*}} : (tensor<f32>, tensor<f32>)
// LRIN: %[[LRWD:.*]] = cleave.mul %[[LR]], %{{.*}} : (tensor<f32>, tensor<f32>)
// LRIN: %[[KEEP:.*]] = cleave.sub %{{.*}}, %[[LRWD]]
// LRIN: %[[K2:.*]] = cleave.reshape %[[KEEP]] : tensor<f32> -> tensor<1x1xf32>
// LRIN: cleave.mul %arg0, %[[K2]]

// clip_grad_value_ then clip_grad_norm_: each element clamped, the global
// norm (reported) scales by min(1, max / (norm + 1e-6)).
// CLIP-LABEL: func.func @step
// CLIP-SAME: -> (tensor<f32> {cleave.loss}, tensor<2x3xf32> {cleave.parameter = "w"}, tensor<f32> {cleave.metric = "grad_norm"}, tensor<2x3xf32> {cleave.gradient = "w"})
// CLIP: %[[LO:.*]] = cleave.max %arg1, %{{.*}}
// CLIP: %[[CL:.*]] = cleave.min %[[LO]], %{{.*}}
// CLIP: %[[SQ:.*]] = cleave.mul %[[CL]], %[[CL]]
// CLIP: %[[SUM:.*]] = cleave.reduce sum %[[SQ]] dims = [0, 1]
// CLIP: %[[TOTAL:.*]] = cleave.add %{{.*}}, %[[SUM]]
// CLIP: %[[NORM:.*]] = cleave.sqrt %[[TOTAL]]
// CLIP: %[[EPS:.*]] = cleave.constant dense<9.99999997E-7>
// CLIP: %[[DEN:.*]] = cleave.add %[[NORM]], %[[EPS]]
// CLIP: %[[Q:.*]] = cleave.div %{{.*}}, %[[DEN]]
// CLIP: %[[COEF:.*]] = cleave.min %[[Q]], %{{.*}}
// CLIP: %[[C2:.*]] = cleave.reshape %[[COEF]]
// CLIP: %[[G2:.*]] = cleave.mul %[[CL]], %[[C2]]
// CLIP: %[[U:.*]] = cleave.mul %[[G2]], %{{.*}}
// CLIP: %[[NEW:.*]] = cleave.sub %arg0, %[[U]]
// CLIP: return %{{.*}}, %[[NEW]], %[[NORM]], %arg1

// A step whose loss or gradient is not finite keeps every parameter and
// state (x * 0 is NaN where x is not finite) and counts as skipped, which
// AdamW's bias correction leaves out.
// GUARD-LABEL: func.func @step
// GUARD-SAME: %[[S:[a-z0-9]+]]: tensor<i64> {cleave.step}, %[[SKIP:[a-z0-9]+]]: tensor<f32> {cleave.optimizer_state = ["", "skipped_steps"]}
// GUARD-SAME: tensor<f32> {cleave.optimizer_state = ["", "skipped_steps"]}, tensor<f32> {cleave.metric = "nonfinite"}
// GUARD: %[[LOSS:.*]] = cleave.reduce sum %arg0
// GUARD: %[[T:.*]] = cleave.cast %[[S]]
// GUARD: %[[L0:.*]] = cleave.mul %[[LOSS]], %{{.*}}
// GUARD: %[[G0:.*]] = cleave.mul %arg1, %{{.*}}
// GUARD: %[[GS:.*]] = cleave.reduce sum %[[G0]]
// GUARD: %[[P:.*]] = cleave.add %[[L0]], %[[GS]]
// GUARD: %[[OK:.*]] = cleave.cmp eq, %[[P]], %{{.*}}
// GUARD: %[[COUNTED:.*]] = cleave.sub %[[T]], %[[SKIP]]
// GUARD: cleave.pow %{{.*}}, %[[COUNTED]]
// GUARD: %[[OK1:.*]] = cleave.reshape %[[OK]] : tensor<i1> -> tensor<1x1xi1>
// GUARD: cleave.select %[[OK1]], %{{.*}}, %arg4
// GUARD: %[[OKF:.*]] = cleave.cast %[[OK]] : tensor<i1> -> tensor<f32>
// GUARD: %[[REFUSED:.*]] = cleave.sub %{{.*}}, %[[OKF]]
// GUARD: %[[SKIP2:.*]] = cleave.add %[[SKIP]], %[[REFUSED]]
// GUARD: return %[[LOSS]], %{{.*}}, %{{.*}}, %{{.*}}, %[[SKIP2]], %[[REFUSED]], %arg1

func.func @step(%w: tensor<2x3xf32> {cleave.parameter = "w"}, %g: tensor<2x3xf32> {cleave.input = "g"}) -> (tensor<f32> {cleave.loss}, tensor<2x3xf32> {cleave.gradient = "w"}) {
  %0 = cleave.reduce sum %w dims = [0, 1] : (tensor<2x3xf32>) -> tensor<f32>
  return %0, %g : tensor<f32>, tensor<2x3xf32>
}

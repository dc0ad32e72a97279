"""Issue 16: every classification family of Debian's torchvision (0.14),
built from torchvision's own classes, for make_zoo.py --set vision.

Each family keeps its architecture's code (torchvision's modules: blocks,
squeeze-excitation, channel shuffle, shifted windows, relative position
biases, ceil-mode pools, auxiliary-free heads) at widths and depths a 2-core
machine trains in seconds. Where a class fixes a huge classifier
(AlexNet's and VGG's 4096-wide Linear layers), the classifier keeps its
layer sequence at width 64. Dropout is 0 and stochastic depth 0, so that
PyTorch's step is deterministic; zero-initialised layers (heads, layer
scales) get ordinary values, so that every gradient carries signal.
"""
import collections
from functools import partial

import torch
import torch.nn as nn
import torchvision.models as tvm
from torchvision.models import convnext as tv_convnext
from torchvision.models import efficientnet as tv_eff
from torchvision.models import mobilenetv3 as tv_mb3
from torchvision.models import regnet as tv_regnet
from torchvision.models import resnet as tv_resnet
from torchvision.models import vgg as tv_vgg

CLASSES = 10


def _deterministic(model):
    """Dropout off; zero-initialised weights and near-zero layer scales
    given ordinary values; non-trivial BatchNorm running statistics."""
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, nn.Dropout):
                mod.p = 0.0
            if isinstance(mod, nn.Linear) and not mod.weight.any():
                mod.reset_parameters()
            if isinstance(mod, nn.modules.batchnorm._BatchNorm):
                mod.running_mean.copy_(0.1 * torch.randn(mod.running_mean.shape, generator=g))
                mod.running_var.copy_(1.0 + 0.5 * torch.rand(mod.running_var.shape, generator=g))
        for name, p in model.named_parameters():
            if name.endswith("layer_scale"):
                p.copy_(0.5 + 0.1 * torch.randn(p.shape, generator=g))
    return model


def _small_classifier(width_in):
    return nn.Sequential(nn.Dropout(0.0), nn.Linear(width_in, 64), nn.ReLU(True),
                         nn.Dropout(0.0), nn.Linear(64, 64), nn.ReLU(True),
                         nn.Linear(64, CLASSES))


def alexnet():
    m = tvm.AlexNet(num_classes=CLASSES, dropout=0.0)
    m.classifier = _small_classifier(256 * 6 * 6)
    return m


def vgg():
    cfg = [8, "M", 16, "M", 32, 32, "M"]
    m = tvm.VGG(tv_vgg.make_layers(cfg, batch_norm=True), num_classes=CLASSES,
                dropout=0.0)
    m.classifier = _small_classifier(32 * 7 * 7)
    return m


def resnet():
    return tvm.ResNet(tv_resnet.BasicBlock, [1, 1, 1, 1], num_classes=CLASSES)


def resnext():
    return tvm.ResNet(tv_resnet.Bottleneck, [1, 1, 1, 1], groups=4,
                      width_per_group=4, num_classes=CLASSES)


def wide_resnet():
    return tvm.ResNet(tv_resnet.Bottleneck, [1, 1, 1, 1], width_per_group=16,
                      num_classes=CLASSES)


def densenet():
    return tvm.DenseNet(growth_rate=8, block_config=(2, 2), num_init_features=16,
                        bn_size=2, num_classes=CLASSES)


def googlenet():
    return tvm.GoogLeNet(num_classes=CLASSES, aux_logits=False,
                         transform_input=False, init_weights=True, dropout=0.0)


def inception_v3():
    return tvm.Inception3(num_classes=CLASSES, aux_logits=False,
                          transform_input=False, init_weights=True, dropout=0.0)


def mobilenet_v2():
    setting = [[1, 8, 1, 1], [6, 16, 2, 2], [6, 24, 1, 2]]
    return tvm.MobileNetV2(num_classes=CLASSES, width_mult=1.0,
                           inverted_residual_setting=setting, dropout=0.0)


def mobilenet_v3():
    setting, last = tv_mb3._mobilenet_v3_conf("mobilenet_v3_small", width_mult=0.25)
    return tvm.MobileNetV3(setting[:5], last_channel=64, num_classes=CLASSES,
                           dropout=0.0)


def mnasnet():
    return tvm.MNASNet(alpha=0.25, num_classes=CLASSES, dropout=0.0)


def efficientnet():
    setting, last = tv_eff._efficientnet_conf("efficientnet_b0", width_mult=0.25,
                                              depth_mult=0.25)
    return tvm.EfficientNet(setting[:4], dropout=0.0, stochastic_depth_prob=0.0,
                            num_classes=CLASSES, last_channel=64)


def efficientnet_v2():
    setting = [tv_eff.FusedMBConvConfig(1, 3, 1, 8, 8, 1),
               tv_eff.FusedMBConvConfig(4, 3, 2, 8, 16, 1),
               tv_eff.MBConvConfig(4, 3, 2, 16, 24, 1)]
    return tvm.EfficientNet(setting, dropout=0.0, stochastic_depth_prob=0.0,
                            num_classes=CLASSES, last_channel=64,
                            norm_layer=partial(nn.BatchNorm2d, eps=1e-03))


def regnet():
    params = tv_regnet.BlockParams.from_init_params(depth=3, w_0=8, w_a=8.0,
                                                    w_m=2.0, group_width=8,
                                                    se_ratio=0.25)
    return tvm.RegNet(params, num_classes=CLASSES, stem_width=8)


def shufflenet():
    return tvm.ShuffleNetV2([1, 1, 1], [8, 16, 32, 64, 64], num_classes=CLASSES)


def squeezenet():
    return tvm.SqueezeNet(version="1_1", num_classes=CLASSES, dropout=0.0)


def convnext():
    setting = [tv_convnext.CNBlockConfig(8, 16, 1), tv_convnext.CNBlockConfig(16, None, 1)]
    return tvm.ConvNeXt(setting, stochastic_depth_prob=0.0, num_classes=CLASSES)


def vit():
    m = tvm.VisionTransformer(image_size=16, patch_size=8, num_layers=1, num_heads=2,
                              hidden_dim=16, mlp_dim=32, num_classes=CLASSES,
                              dropout=0.0, attention_dropout=0.0)
    with torch.no_grad():
        m.class_token.normal_(std=0.02)
    return m


def swin():
    return tvm.SwinTransformer(patch_size=[2, 2], embed_dim=8, depths=[2, 1],
                               num_heads=[2, 2], window_size=[2, 2],
                               stochastic_depth_prob=0.0, num_classes=CLASSES)


def maxvit():
    return tvm.MaxVit(input_size=(16, 16), stem_channels=8, partition_size=2,
                      block_channels=[8, 16], block_layers=[1, 1], head_dim=4,
                      stochastic_depth_prob=0.0, num_classes=CLASSES)


# name: (builder, image side)
FAMILIES = collections.OrderedDict([
    ("alexnet", (alexnet, 224)),
    ("vgg", (vgg, 56)),
    ("resnet", (resnet, 64)),
    ("resnext", (resnext, 64)),
    ("wide_resnet", (wide_resnet, 64)),
    ("densenet", (densenet, 64)),
    ("googlenet", (googlenet, 96)),
    ("inception_v3", (inception_v3, 139)),
    ("mobilenet_v2", (mobilenet_v2, 64)),
    ("mobilenet_v3", (mobilenet_v3, 64)),
    ("mnasnet", (mnasnet, 64)),
    ("efficientnet", (efficientnet, 64)),
    ("efficientnet_v2", (efficientnet_v2, 64)),
    ("regnet", (regnet, 64)),
    ("shufflenet", (shufflenet, 64)),
    ("squeezenet", (squeezenet, 67)),
    ("convnext", (convnext, 64)),
    ("vit", (vit, 16)),
    ("swin", (swin, 16)),
    ("maxvit", (maxvit, 16)),
])


def specs(Spec, first_seed=100):
    """The families as make_zoo Specs named tv_FAMILY (cross-entropy over
    10 classes, a batch of 4 images, large enough that the last stage's
    BatchNorms see more than a handful of values)."""
    out = collections.OrderedDict()
    for i, (name, (build, side)) in enumerate(FAMILIES.items()):
        def inputs(gen, side=side):
            x = torch.randn(4, 3, side, side, generator=gen)
            return (collections.OrderedDict(x=x),
                    torch.randint(0, CLASSES, (4,), generator=gen))
        out["tv_" + name] = Spec(lambda build=build: _deterministic(build()), inputs,
                                 "cross_entropy", first_seed + i, ["logits"])
    return out

"""LoRA adapters (Hu et al. 2021) on a frozen base, in the two forms
exporters write them: PEFT's pair of bias-free Linear layers beside the
base (``base(x) + lora_B(lora_A(x)) * alpha / r``) and a plain matmul chain
of parameters with the scale applied between A and B."""

import torch
import torch.nn as nn


class LoraLinear(nn.Module):
    """PEFT's lora.Linear: the frozen base plus lora_B(lora_A(x)) scaled by
    alpha / r."""

    def __init__(self, base: nn.Linear, r: int, alpha: float,
                 dropout: float = 0.0):
        super().__init__()
        self.base_layer = base
        # PEFT's lora_dropout, on the adapter's input only.
        self.lora_dropout = nn.Dropout(dropout) if dropout else nn.Identity()
        self.lora_A = nn.Linear(base.in_features, r, bias=False)
        self.lora_B = nn.Linear(r, base.out_features, bias=False)
        # PEFT starts B at zero; a random B makes A's gradient non-zero from
        # the first step, which is what the test needs to see.
        nn.init.normal_(self.lora_B.weight, std=0.02)
        self.scaling = alpha / r

    def forward(self, x):
        return self.base_layer(x) + \
            self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling


class LoraMatmul(nn.Module):
    """The same adapter as raw parameters, scaled between A and B."""

    def __init__(self, base: nn.Linear, r: int, alpha: float):
        super().__init__()
        self.base_layer = base
        self.A = nn.Parameter(torch.randn(r, base.in_features) * 0.1)
        self.B = nn.Parameter(torch.randn(base.out_features, r) * 0.02)
        self.scaling = alpha / r

    def forward(self, x):
        return self.base_layer(x) + ((x @ self.A.t()) * self.scaling) @ self.B.t()


def apply_lora(module: nn.Module, targets, r=8, alpha=16, form="linear"):
    """Freezes every weight of ``module`` and wraps each Linear whose name
    ends with one of ``targets`` in an adapter; returns the adapters'
    parameter names."""
    module.requires_grad_(False)
    wrap = LoraLinear if form == "linear" else LoraMatmul
    for name, child in list(module.named_modules()):
        for attr, sub in list(child.named_children()):
            if isinstance(sub, nn.Linear) and attr in targets:
                setattr(child, attr, wrap(sub, r, alpha))
    return [n for n, p in module.named_parameters() if p.requires_grad]


class Int8Linear(nn.Module):
    """A weight-only int8 Linear with one scale per output channel (the
    LLM.int8 / GPTQ int8 checkpoint form): int8 weights and float32 scales
    stored, the float weight rebuilt as the product needs it."""

    def __init__(self, base: nn.Linear, group: int = 0):
        super().__init__()
        w = base.weight.detach()
        out, inp = w.shape
        self.group = group or inp
        blocks = w.reshape(out, inp // self.group, self.group)
        scale = blocks.abs().amax(dim=2).clamp(min=1e-8) / 127
        q = torch.round(blocks / scale[:, :, None]).clamp(-127, 127)
        self.register_buffer("weight", q.reshape(out, inp).to(torch.int8))
        self.register_buffer("weight_scale",
                             scale if group else scale.reshape(out))
        self.bias = base.bias

    def dequantized(self):
        w = self.weight.to(torch.float32)
        if self.group == w.shape[1]:
            return w * self.weight_scale.unsqueeze(1)
        out, inp = w.shape
        return (w.reshape(out, -1, self.group) *
                self.weight_scale.unsqueeze(2)).reshape(out, inp)

    def forward(self, x):
        return nn.functional.linear(x, self.dequantized(), self.bias)


def quantize_int8(module: nn.Module, group: int = 0):
    """Every adapter's base Linear as an Int8Linear."""
    for child in list(module.modules()):
        if isinstance(child, (LoraLinear, LoraMatmul)):
            child.base_layer = Int8Linear(child.base_layer, group)
    return module

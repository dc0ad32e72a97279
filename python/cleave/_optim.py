"""The optimizers a compiled train step can apply."""

import math
import numbers
from dataclasses import dataclass
from typing import Tuple

from ._native import ArgumentError, ArgumentTypeError


def _check(name: str, value: float, low: float, high: float = math.inf,
           low_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(f"{name} must be a number, not "
                                f"{value!r}")
    value = float(value)
    if not math.isfinite(value) or value < low or (low_open and value == low) \
            or value >= high:
        bounds = f"{'>' if low_open else '>='} {low:g}"
        if high != math.inf:
            bounds += f" and < {high:g}"
        raise ArgumentError(f"{name} must be {bounds}, not {value!r}")
    return value


@dataclass(frozen=True)
class SGD:
    """Stochastic gradient descent, as ``torch.optim.SGD``.

    ``p -= lr * (g + weight_decay * p)``, with a momentum buffer
    ``b = momentum * b + g`` (the first step's buffer is ``g``) when
    ``momentum`` > 0. Invalid values raise :class:`cleave.Error` here.
    """

    lr: float
    momentum: float = 0.0
    weight_decay: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "lr", _check("lr", self.lr, 0, low_open=True))
        object.__setattr__(self, "momentum",
                           _check("momentum", self.momentum, 0, 1))
        object.__setattr__(self, "weight_decay",
                           _check("weight_decay", self.weight_decay, 0))

    def _options(self, o) -> None:
        o.optimizer = "sgd"
        o.lr = self.lr
        o.momentum = self.momentum
        o.weight_decay = self.weight_decay


@dataclass(frozen=True)
class AdamW:
    """Adam with decoupled weight decay, as ``torch.optim.AdamW``.

    ``p *= 1 - lr * weight_decay``, then Adam's bias-corrected update with
    ``betas`` and ``eps``. Invalid values raise :class:`cleave.Error` here.
    """

    lr: float
    betas: Tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.01

    def __post_init__(self):
        object.__setattr__(self, "lr", _check("lr", self.lr, 0, low_open=True))
        try:
            b1, b2 = self.betas
        except (TypeError, ValueError):
            raise ArgumentTypeError(f"betas must be a pair of numbers, not "
                                    f"{self.betas!r}") from None
        object.__setattr__(self, "betas", (_check("betas[0]", b1, 0, 1),
                                           _check("betas[1]", b2, 0, 1)))
        object.__setattr__(self, "eps",
                           _check("eps", self.eps, 0, low_open=True))
        object.__setattr__(self, "weight_decay",
                           _check("weight_decay", self.weight_decay, 0))

    def _options(self, o) -> None:
        o.optimizer = "adamw"
        o.lr = self.lr
        o.beta1, o.beta2 = self.betas
        o.eps = self.eps
        o.weight_decay = self.weight_decay

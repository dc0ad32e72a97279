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


def _group_value(optimizer, key: str):
    """\\p key of every parameter group of a torch optimizer, which must
    agree (the step applies one set of hyperparameters)."""
    values = []
    for group in optimizer.param_groups:
        value = group.get(key)
        if hasattr(value, "item"):  # a tensor learning rate
            value = value.item()
        values.append(tuple(value) if isinstance(value, (list, tuple))
                      else value)
    if any(v != values[0] for v in values[1:]):
        raise ArgumentError(
            f"the {type(optimizer).__name__}'s parameter groups differ in "
            f"{key} ({values[0]!r} and {next(v for v in values if v != values[0])!r}): "
            "Cleave's step applies one set of hyperparameters to every "
            "parameter (freeze a parameter with requires_grad=False)")
    return values[0]


def from_torch(optimizer):
    """The cleave optimizer that does what the torch.optim \\p optimizer
    does: SGD (no dampening, no Nesterov), AdamW, and Adam without weight
    decay (Adam's is coupled L2, which AdamW's is not). Anything it would
    do otherwise is refused by name, never dropped."""
    name = type(optimizer).__name__
    value = lambda key: _group_value(optimizer, key)  # noqa: E731
    refused = [key for key, off in (("nesterov", False), ("dampening", 0),
                                    ("amsgrad", False), ("maximize", False))
               if value(key) not in (None, off)]
    if name == "Adam" and value("weight_decay"):
        refused.append("weight_decay (Adam's is L2 added to the gradient; "
                       "use torch.optim.AdamW or cleave.AdamW)")
    if refused:
        raise ArgumentError(f"torch.optim.{name} with {refused[0]}: Cleave's "
                            "step does not do it")
    if name == "SGD":
        return SGD(lr=value("lr"), momentum=value("momentum"),
                   weight_decay=value("weight_decay"))
    if name in ("AdamW", "Adam"):
        return AdamW(lr=value("lr"), betas=value("betas"), eps=value("eps"),
                     weight_decay=value("weight_decay"))
    raise ArgumentTypeError(f"optimizer torch.optim.{name} has no Cleave "
                            "step: give torch.optim.SGD, AdamW or Adam, or "
                            "cleave.SGD(...) or cleave.AdamW(...)")


def is_torch_optimizer(value) -> bool:
    return any(c.__module__.startswith("torch.optim") and c.__name__ ==
               "Optimizer" for c in type(value).__mro__)

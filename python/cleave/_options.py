"""cleave.Options: every option of tensor_parallel and compile, typed and
checked in one place."""

import dataclasses
import math
import numbers
import os
from dataclasses import dataclass
from typing import Mapping, Optional, Tuple, Union

from ._native import ArgumentError, ArgumentTypeError, _cleave
from ._optim import SGD, AdamW, _check, from_torch, is_torch_optimizer

PathLike = Union[str, os.PathLike]

_LOSSES = ("auto", "cross_entropy", "mse")
_PLAN_KINDS = ("colwise", "rowwise", "replicate", "vocab")
# transformers' tp_plan styles (integrations/tensor_parallel.py) by the
# weight layout they give, which is all a plan rule fixes: how outputs are
# gathered, kept local or packed is the compiler's to find.
_HF_PLAN_KINDS = {
    "colwise_rep": "colwise", "local_colwise": "colwise",
    "packed_colwise": "colwise", "rowwise_rep": "rowwise",
    "local_rowwise": "rowwise", "local_packed_rowwise": "rowwise",
    "packed_rowwise": "rowwise", "gather": "replicate",
    "sequence_parallel": "replicate",
}
# Styles whose weights are split over experts, not tp: refused by name.
_HF_EXPERT_KINDS = ("local", "isolated", "grouped_gemm", "ep_router")
_PRECISIONS = ("f32", "bf16", "fp16")
_RECOMPUTE = ("auto", "none", "selective", "full")
_BACKENDS = ("cpu", "cuda", "auto")
# Hugging Face's get_scheduler names (the runtime's lr_schedule.cpp).
_SCHEDULES = ("constant", "constant_with_warmup", "linear", "cosine",
              "cosine_with_restarts", "polynomial", "inverse_sqrt")
# torch.onnx exports opset 7 and later; the ceiling is what the installed
# onnx package knows (read when an opset is checked, not at import).
_MIN_OPSET = 7
# Options that act on running a bundle, not on writing one: compile refuses
# them rather than ignore them (cleave compile refuses --backend likewise).
_RUN_FIELDS = ("timeout", "backend")


def _integer(name: str, value, low: int, high: Optional[int] = None,
             optional: bool = False) -> Optional[int]:
    """value as an int in [low, high): a bool, float or string is a
    TypeError (tp=2.0 would hide a bug), a number out of range a
    ValueError."""
    if value is None and optional:
        return None
    what = {0: "a non-negative integer", 1: "a positive integer"}.get(
        low, f"an integer >= {low}")
    if high is not None:
        values = [str(v) for v in range(low, high)]
        what = ", ".join(values[:-1]) + f" or {values[-1]}"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ArgumentTypeError(f"{name} must be {what}, not "
                                f"{value!r}")
    value = int(value)  # numpy's integers too
    if value < low or (high is not None and value >= high):
        raise ArgumentError(f"{name} must be {what}, not {value!r}")
    return value


def _choice(name: str, value, choices: Tuple[str, ...]) -> str:
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{name} must be a string, not "
                                f"{value!r}")
    if value not in choices:
        raise ArgumentError(f"{name} must be " + ", ".join(
            repr(c) for c in choices[:-1]) + f" or {choices[-1]!r}, not "
            f"{value!r}")
    return value


def _path(name: str, value, optional: bool = True) -> Optional[str]:
    if value is None and optional:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise ArgumentTypeError(f"{name} must be a path, not "
                                f"{value!r}")
    value = os.fspath(value)
    if not isinstance(value, str) or not value:
        raise ArgumentError(f"{name} must be a non-empty path, not "
                            f"{value!r}")
    return value


def _plan(value):
    """A file path, or {regex: kind} (transformers' tp_plan) kept as a tuple
    of pairs so that the options stay hashable."""
    if value is None or isinstance(value, (str, os.PathLike)):
        return _path("plan", value)
    if isinstance(value, tuple):
        value = dict(value) if all(isinstance(p, tuple) and len(p) == 2
                                   for p in value) else value
    if not isinstance(value, Mapping):
        raise ArgumentTypeError("plan must be a file path or a dict from "
                                "regular expressions to colwise, rowwise, "
                                f"replicate or vocab, not "
                                f"{type(value).__name__}")
    pairs = []
    for regex, kind in value.items():
        if not isinstance(regex, str) or not regex or any(
                c.isspace() for c in regex):
            raise ArgumentError(f"plan: {regex!r} is not a regular "
                                "expression a plan line can hold (a non-empty"
                                " string without spaces)")
        if kind in _HF_EXPERT_KINDS:
            raise ArgumentError(
                f"plan[{regex!r}]: transformers' {kind!r} places experts on "
                "ranks (expert parallelism), which a plan rule cannot give: "
                "leave these weights to the compiler's search")
        kind = _HF_PLAN_KINDS.get(kind, kind) if isinstance(kind, str) \
            else kind
        pairs.append((regex, _choice(f"plan[{regex!r}]", kind, _PLAN_KINDS)))
    return tuple(pairs)


def _freeze(value) -> Tuple[str, ...]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ArgumentTypeError("freeze must be a list of regular "
                                f"expressions, not {value!r}")
    value = tuple(value)
    for f in value:
        if not isinstance(f, str):
            raise ArgumentTypeError("freeze must be a list of regular "
                                    f"expressions, not one holding {f!r}")
        if not f:
            raise ArgumentError("freeze: an empty regular expression would "
                                "freeze every tensor")
    return value


def _opset(value) -> int:
    value = _integer("opset", value, _MIN_OPSET)
    try:
        import onnx.defs
        highest = onnx.defs.onnx_opset_version()
    except ImportError:
        return value
    if value > highest:
        raise ArgumentError(f"opset must be at most {highest} (the newest "
                            f"this machine's onnx knows), not {value}")
    return value


@dataclass(frozen=True)
class Options:
    """Every option of :func:`cleave.tensor_parallel` and
    :func:`cleave.compile`, checked when made: a value of the wrong type
    raises :class:`cleave.ArgumentTypeError` (a ``TypeError``), a value out
    of range :class:`cleave.ArgumentError` (a ``ValueError``); both are
    :class:`cleave.Error`. Frozen: ``options.replace(tp=4)`` makes a
    changed copy.

    The mesh: ``tp`` (tensor-parallel ranks), ``dp`` (data-parallel ranks:
    each batch split over them), ``zero`` (0-3: ZeRO's stage over the dp
    ranks), or ``devices`` (the compiler chooses dp x tp and ZeRO for that
    many, within ``memory_per_device`` bytes per rank when given).
    ``recompute``: what the forward keeps for the backward (``"none"``,
    ``"selective"``: norms, softmax and elementwise values made again,
    ``"full"``: only the forward's cheapest cuts kept, or ``"auto"``: the
    least that fits ``memory_per_device``, none without it).
    ``sequence_parallel``: Megatron's sequence parallelism (the
    activations between the tensor-parallel blocks split over the tp ranks)
    ``True``, ``False`` or ``"auto"`` (tried where ``memory_per_device``
    is not met without it).

    The train step: ``optimizer`` (:class:`cleave.SGD` or
    :class:`cleave.AdamW`, or a ``torch.optim`` SGD, AdamW or Adam over the
    module's trainable parameters, whose hyperparameters are taken; default
    ``SGD(lr=0.01)``), ``loss`` (``"auto"``:
    the first output; ``"cross_entropy"`` or ``"mse"`` appended by Cleave),
    ``plan`` (layout rules: a file of ``REGEX KIND`` lines or ``{regex:
    "colwise" | "rowwise" | "replicate" | "vocab"}``), ``freeze`` (regular
    expressions of more tensors not to train), ``seed`` (dropout's
    streams), ``opset`` (the ONNX opset a module is exported at),
    ``precision`` (``"f32"``, or mixed precision ``"bf16"`` / ``"fp16"``:
    the matmuls and convolutions read rounded copies and accumulate in
    f32; master weights, optimizer state and reductions stay f32).

    The run of updates: ``lr_scheduler`` (Hugging Face's names:
    ``"constant"``, ``"constant_with_warmup"``, ``"linear"``, ``"cosine"``,
    ``"cosine_with_restarts"``, ``"polynomial"``, ``"inverse_sqrt"``) over
    ``warmup_steps`` and ``total_steps`` updates (the rate is an input of
    the step: ``Model.set_lr`` changes it without a compile);
    ``max_grad_norm`` (clip the gradients' global L2 norm, reported per
    step as ``Model.metrics["grad_norm"]``) and ``clip_grad_value``;
    ``on_nonfinite``: a step whose loss or a gradient is inf or NaN is
    ``"stop"`` (one error naming the step and the value; the update is not
    applied and the model stays usable), ``"skip"`` (no update) or
    ``"ignore"`` (the default for now: applied, as plain PyTorch does; the
    gate costs arena memory until the update is planned in place).
    ``gradient_accumulation_steps``: each update sums the gradients of N
    micro-batches of the compiled shape (``Model.step`` then takes a list
    of N batches), one micro-batch's activations in memory at a time; the
    loss is the update's (a cross-entropy's mean over the valid tokens of
    all N, as Trainer computes it), the dp ranks sum once per update.

    The bundle: ``output`` (its folder; tensor_parallel uses a temporary
    one when None), ``plan_only`` (compile: no weights).

    The run: ``timeout`` (seconds a rank waits for its peers), ``backend``
    (``"cpu"``, ``"cuda"`` or ``"auto"``).
    """

    tp: int = 1
    dp: int = 1
    zero: int = 0
    devices: Optional[int] = None
    memory_per_device: Optional[int] = None
    optimizer: Union[SGD, AdamW, None] = None
    loss: str = "auto"
    plan: Union[PathLike, Mapping[str, str], None] = None
    freeze: Tuple[str, ...] = ()
    seed: int = 0
    opset: int = 17
    output: Optional[PathLike] = None
    plan_only: bool = False
    timeout: float = 60.0
    backend: str = "cpu"
    precision: str = "f32"
    recompute: str = "auto"
    sequence_parallel: Union[bool, str] = "auto"
    lr_scheduler: str = "constant"
    warmup_steps: int = 0
    total_steps: Optional[int] = None
    max_grad_norm: Optional[float] = None
    clip_grad_value: Optional[float] = None
    on_nonfinite: str = "ignore"
    gradient_accumulation_steps: int = 1

    def __post_init__(self):
        def put(name, value):
            object.__setattr__(self, name, value)

        put("tp", _integer("tp", self.tp, 1))
        put("dp", _integer("dp", self.dp, 1))
        put("zero", _integer("zero", self.zero, 0, 4))
        put("devices", _integer("devices", self.devices, 1, optional=True))
        put("memory_per_device", _integer(
            "memory_per_device", self.memory_per_device, 1, optional=True))
        if self.devices is not None and (self.tp, self.dp, self.zero) != \
                (1, 1, 0):
            raise ArgumentError("give either devices=N (the compiler "
                                "chooses the mesh) or tp, dp and zero")
        if is_torch_optimizer(self.optimizer):
            put("optimizer", from_torch(self.optimizer))
        if self.optimizer is not None and \
                not isinstance(self.optimizer, (SGD, AdamW)):
            raise ArgumentTypeError("optimizer must be cleave.SGD(...), "
                                    "cleave.AdamW(...) or a torch.optim "
                                    "SGD, AdamW or Adam, not "
                                    f"{type(self.optimizer).__name__}")
        put("loss", _choice("loss", self.loss, _LOSSES))
        put("plan", _plan(self.plan))
        put("freeze", _freeze(self.freeze))
        put("seed", _integer("seed", self.seed, 0))
        if self.seed >= 2**63:
            raise ArgumentError(f"seed must be below 2**63, not {self.seed}")
        put("opset", _opset(self.opset))
        put("output", _path("output", self.output))
        if not isinstance(self.plan_only, bool):
            raise ArgumentTypeError("plan_only must be True or False, not "
                                    f"{self.plan_only!r}")
        if isinstance(self.timeout, bool) or \
                not isinstance(self.timeout, numbers.Real):
            raise ArgumentTypeError("timeout must be a number of seconds, "
                                    f"not {self.timeout!r}")
        if not (math.isfinite(self.timeout) and self.timeout > 0):
            raise ArgumentError("timeout must be a positive number of "
                                f"seconds, not {self.timeout!r}")
        put("timeout", float(self.timeout))
        put("backend", _choice("backend", self.backend, _BACKENDS))
        put("precision", _choice("precision", self.precision, _PRECISIONS))
        put("recompute", _choice("recompute", self.recompute, _RECOMPUTE))
        if self.sequence_parallel not in (True, False, "auto"):
            raise ArgumentError("sequence_parallel must be True, False or "
                                f"'auto', not {self.sequence_parallel!r}")
        if self.sequence_parallel is True and self.tp == 1 and \
                self.devices is None:
            raise ArgumentError("sequence_parallel=True splits activations "
                                "over the tp ranks: give tp=2 or more (or "
                                "devices=)")
        put("lr_scheduler", _choice("lr_scheduler", self.lr_scheduler,
                                    _SCHEDULES))
        put("warmup_steps", _integer("warmup_steps", self.warmup_steps, 0))
        put("total_steps", _integer("total_steps", self.total_steps, 1,
                                    optional=True))
        if self.total_steps is None and self.lr_scheduler in (
                "linear", "cosine", "cosine_with_restarts", "polynomial"):
            raise ArgumentError(f"lr_scheduler={self.lr_scheduler!r} decays "
                                "over the run: give total_steps (the "
                                "updates it runs over)")
        put("on_nonfinite", _choice("on_nonfinite", self.on_nonfinite,
                                    ("stop", "skip", "ignore")))
        put("gradient_accumulation_steps", _integer(
            "gradient_accumulation_steps", self.gradient_accumulation_steps,
            1))
        for name in ("max_grad_norm", "clip_grad_value"):
            value = getattr(self, name)
            if value is not None:
                put(name, _check(name, value, 0, low_open=True))
        if self.precision != "f32" and self.backend == "cuda":
            raise ArgumentError(f"precision={self.precision!r} runs on the "
                                "CPU backend; the CUDA backend does not run "
                                "mixed-precision bundles yet")

    @classmethod
    def make(cls, given: Optional["Options"], **fields) -> "Options":
        """``given`` (or the defaults) with ``fields`` on top; an unknown
        name is a TypeError naming the known ones."""
        if given is not None and not isinstance(given, Options):
            raise ArgumentTypeError("options must be cleave.Options(...), "
                                    f"not {type(given).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(fields) - known)
        if unknown:
            raise ArgumentTypeError(f"unknown option '{unknown[0]}' "
                                    f"(options: {', '.join(sorted(known))})")
        if given is None:
            return cls(**fields)
        return dataclasses.replace(given, **fields) if fields else given

    @classmethod
    def _of_call(cls, given: Optional["Options"], named: dict,
                 more: dict) -> "Options":
        """A call's options: ``given`` (options=) with the call's named
        arguments ``named`` and keywords ``more`` on top. Beside options=, a
        named argument overrides only where it differs from its default
        (Python cannot tell tp=1 written out from tp left out)."""
        def is_default(name, value):
            default = getattr(cls, name)
            return type(value) is type(default) and value == default
        if given is not None:
            named = {k: v for k, v in named.items() if not is_default(k, v)}
        return cls.make(given, **named, **more)

    def replace(self, **changes) -> "Options":
        """A copy with ``changes``, checked as a new Options is."""
        return Options.make(self, **changes)

    def _run_options_set(self) -> Tuple[str, ...]:
        """The run options that differ from their defaults."""
        return tuple(name for name in _RUN_FIELDS
                     if getattr(self, name) != getattr(Options, name))

    def _native(self, work: str) -> "_cleave.CompileOptions":
        """The driver's CompileOptions; a plan dict becomes a file in
        ``work``."""
        o = _cleave.CompileOptions()
        (self.optimizer or SGD(lr=0.01))._options(o)
        o.loss = self.loss
        o.tp, o.dp, o.zero, o.seed = self.tp, self.dp, self.zero, self.seed
        if self.devices is not None:
            o.devices = self.devices
        o.memory_per_device = self.memory_per_device or 0
        o.recompute = self.recompute
        o.sequence_parallel = {True: "on", False: "off"}.get(
            self.sequence_parallel, "auto")
        o.freeze = list(self.freeze)
        o.plan_only = self.plan_only
        o.precision = self.precision
        o.lr_schedule = self.lr_scheduler
        o.warmup_steps = self.warmup_steps
        o.total_steps = self.total_steps or 0
        o.clip_grad_norm = self.max_grad_norm or 0.0
        o.clip_grad_value = self.clip_grad_value or 0.0
        o.on_nonfinite = self.on_nonfinite
        o.accumulate = self.gradient_accumulation_steps
        if isinstance(self.plan, tuple):
            path = os.path.join(work, "plan.txt")
            with open(path, "w") as f:
                for regex, kind in self.plan:
                    f.write(f"{regex} {kind}\n")
            o.plan = path
        else:
            o.plan = self.plan or ""
        return o

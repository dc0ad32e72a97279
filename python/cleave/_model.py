"""cleave.tensor_parallel and the Model it returns."""

import html
import json
import os
import shutil
import stat
import tempfile
from typing import (Any, Callable, Dict, Iterable, List, Mapping, Optional,
                    Sequence, Tuple, Union)

import numpy as np

from ._export import (LOW_PRECISION, export_module, float32_copy,
                      read_safetensors, to_numpy,
                      write_safetensors)
from ._native import (ArgumentError, ArgumentTypeError, Error, FileError,
                      _cleave, file_error)
from ._optim import SGD, AdamW, _check, is_torch_optimizer
from ._options import Options
from ._progress import progress_bar


def _input_specs(example_inputs) -> Dict[str, str]:
    """--input specs (8x128xi64) fixing a model file's inputs' shapes."""
    kinds = {"float32": "f32", "int64": "i64", "int32": "i32", "bool": "bool",
             "float64": "f64", "float16": "f16", "int8": "i8", "int16": "i16",
             "uint8": "u8", "uint16": "u16", "uint32": "u32"}
    specs = {}
    for name, value in (example_inputs or {}).items():
        a = to_numpy(value, f"example input '{name}'")
        if a.ndim == 0:
            continue
        kind = kinds.get(str(a.dtype))
        if kind is None:
            raise Error(f"example input '{name}' has dtype {a.dtype}")
        specs[name] = "x".join(str(d) for d in a.shape) + "x" + kind
    return specs


def _forward_inputs(module, example_inputs, loss):
    """example_inputs without 'labels' when Cleave appends the loss and the
    forward does not take them (a whole batch may serve as the example)."""
    import inspect as _inspect
    if loss == "auto" or not isinstance(example_inputs, dict) or \
            "labels" not in example_inputs:
        return example_inputs
    try:
        params = _inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return example_inputs
    if "labels" in params:
        return example_inputs
    return {k: v for k, v in example_inputs.items() if k != "labels"}


def _check_loss_output(module, example_inputs, loss):
    """loss='auto' trains the first output, which must be a scalar."""
    if loss != "auto":
        return
    import torch
    with torch.no_grad():
        out = float32_copy(module)[0](**{k: torch.from_numpy(
            to_numpy(v, f"example input '{k}'"))
            for k, v in example_inputs.items()})
    while isinstance(out, (tuple, list)) and out:
        out = out[0]
    if isinstance(out, dict) and out:
        out = next(iter(out.values()))
    if not (isinstance(out, torch.Tensor) and out.numel() == 1 and
            out.is_floating_point()):
        shape = list(out.shape) if isinstance(out, torch.Tensor) else \
            type(out).__name__
        raise Error(f"{type(module).__name__}'s first output is {shape}, not "
                    "a scalar loss; give loss='cross_entropy' (with "
                    "'labels' in each batch) or loss='mse'")


def _input_array(name, value, want):
    """Batch input `name` as a numpy array, in the dtype of `want` ((dtype,
    shape), or None) where it is an integer one: integer data may come as
    any integer dtype (torch's int64, a numpy int32 array), converted when
    every value fits."""
    a = to_numpy(value, f"batch input '{name}'")
    if want and str(a.dtype) != want[0] and a.dtype.kind in "iu" and \
            np.dtype(want[0]).kind in "iu":
        converted = a.astype(want[0])
        if np.array_equal(converted, a):
            a = converted
    return a


def _example_batches(example_inputs) -> list:
    """``example_inputs`` as a list of example batches, one per batch shape
    the bundle is compiled for (a dict is one)."""
    if example_inputs is None or isinstance(example_inputs, dict):
        return [example_inputs]
    if isinstance(example_inputs, (list, tuple)) and example_inputs and \
            all(isinstance(e, dict) for e in example_inputs):
        return list(example_inputs)
    raise ArgumentTypeError(
        "example_inputs must be a dict from the forward's argument names to "
        "tensors, or a list of such dicts (one per batch shape), not "
        f"{type(example_inputs).__name__}")


def _compile_inputs(o, model, example_inputs, loss, work, opset):
    """Fills the native options \\p o with \\p model's inputs: a model file's
    --input and --shape specs, or a torch module exported once per example
    batch (the first export's graph and weights; the others' graphs as
    more batch shapes). The first export, or None for a file."""
    examples = _example_batches(example_inputs)
    if isinstance(model, (str, os.PathLike)):
        o.model = os.fspath(model)
        o.inputs = _input_specs(examples[0])
        for more in examples[1:]:
            o.add_shape("", "", _input_specs(more))
        return None
    first = None
    for k, example in enumerate(examples):
        example = _forward_inputs(model, example or {}, loss)
        directory = work
        if k == 0:
            _check_loss_output(model, example, loss)
        else:
            directory = os.path.join(work, f"shape{k}")
            os.makedirs(directory, exist_ok=True)
        exported = export_module(model, example, directory, opset,
                                 write_weights=k == 0)
        bare = _export_unlabeled(model, example, loss, directory, opset)
        if k == 0:
            first = exported
            o.model = exported.model
            o.weights = exported.weights
            o.frozen_names = exported.frozen
            o.eval_model = exported.eval_model
            o.unlabeled_model, o.unlabeled_eval_model = bare
        else:
            o.add_shape(exported.model, exported.eval_model, {}, *bare)
    return first


def _export_unlabeled(module, example, loss, directory, opset):
    """(model, eval model) of an HF-style module's forward without its
    labels (``forward(input_ids, labels=None)`` computing its own loss
    only when given them), for ``Model(batch)`` on batches without labels;
    ("", "") where the module has no such forward or it does not export
    (a batch without labels is then refused, naming them)."""
    import inspect
    if loss != "auto" or "labels" not in example:
        return "", ""
    try:
        parameter = inspect.signature(module.forward).parameters.get("labels")
    except (TypeError, ValueError):
        return "", ""
    if parameter is None or parameter.default is not None:
        return "", ""
    bare = os.path.join(directory, "unlabeled")
    os.makedirs(bare, exist_ok=True)
    try:
        exported = export_module(
            module, {k: v for k, v in example.items() if k != "labels"}, bare,
            opset, write_weights=False)
    except Error:
        return "", ""
    return exported.model, exported.eval_model


def _check_shape(batch, shapes, what) -> None:
    """Raises unless every input of \\p batch (numpy arrays) has the shape
    one of \\p shapes (each {name: (dtype, shape)}, a batch shape the
    bundle was compiled for) gives it."""
    if any(all(name not in shape or tuple(a.shape) == shape[name][1]
               for name, a in batch.items()) for shape in shapes):
        return
    name = next(n for n, a in batch.items()
                if n in shapes[0] and tuple(a.shape) != shapes[0][n][1])
    compiled = "; ".join(
        "(" + ", ".join(f"{n} {list(s[1])}" for n, s in shape.items()) + ")"
        for shape in shapes)
    raise ArgumentError(
        f"batch input '{name}' is {list(batch[name].shape)}; the {what} was "
        f"compiled for {compiled} (input shapes are fixed at compile): add "
        "this shape (example_inputs as a list of example batches, one "
        "program per shape, the weights shared), pad the batch to a "
        "compiled shape (labels -100 where padded), or drop a last partial "
        "batch (DataLoader's drop_last=True)")


def _groups_of(batches, n):
    """Lists of `n` consecutive batches (a list passes as it is: the
    micro-batches of one update already)."""
    group = []
    for batch in batches:
        if not isinstance(batch, Mapping):
            yield batch
            continue
        group.append(batch)
        if len(group) == n:
            yield group
            group = []


class Model:
    """A module compiled into a sharded train step, with its training state
    on every rank.

    Made by :func:`cleave.tensor_parallel` (or :meth:`Model.resume`).
    ``step(batch)`` trains; ``state_dict()`` gives the module's tensors back
    whole; ``inspect()`` shows how every weight is split.
    """

    def __init__(self, session, bundle: str, sources: Dict[str, tuple],
                 owned: Optional[str] = None,
                 dtypes: Optional[Dict[str, str]] = None):
        self._handle = session
        self._bundle = bundle
        self._sources = sources
        # The module's own dtype of a tensor trained in float32.
        self._dtypes = dict(dtypes or {})
        self._owned = owned  # a temporary directory to remove
        self._trained = dict(session.tensors())
        # Every batch shape the bundle was compiled for (the first: the
        # one `inputs` reports).
        self._shapes = [{n: (d, tuple(sh)) for n, d, sh in one}
                        for one in session.batch_shapes()]
        self._inputs = self._shapes[0]
        self._mesh = json.loads(_cleave.inspect(bundle, True))["mesh"]
        self._losses: List[float] = []
        self._training = True

    def __del__(self):
        owned = getattr(self, "_owned", None)
        if owned:
            shutil.rmtree(owned, ignore_errors=True)

    @property
    def _session(self):
        if self._handle is None:
            raise Error("this Model is closed (Model.close() or the end of "
                        "its with block)")
        return self._handle

    def close(self) -> None:
        """Stops the ranks and frees their memory now, rather than when the
        Model is collected; removes the temporary bundle (a bundle given as
        ``output`` stays). Anything but ``close`` afterwards raises
        :class:`cleave.Error`. Also what ``with`` does at its end::

            with cleave.tensor_parallel(module, batch, tp=2) as model:
                model.fit(batches)
                module.load_state_dict(model.state_dict())
        """
        self._handle = None  # the last reference: the ranks stop here
        owned, self._owned = self._owned, None
        if owned:
            shutil.rmtree(owned, ignore_errors=True)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run."""
        return self._handle is None

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- training -----------------------------------------------------------

    @property
    def tp(self) -> int:
        """Tensor-parallel ranks the weights are split over."""
        return self._session.tp

    @property
    def mesh(self) -> dict:
        """The device mesh: {"tp": T}, {"dp": D} or {"dp": D, "tp": T}."""
        return dict(self._mesh)

    @property
    def steps_done(self) -> int:
        """Training steps made (a resumed model continues the count)."""
        return self._session.steps_done

    @property
    def lr(self) -> float:
        """The base learning rate the schedule scales."""
        return self._session.lr

    def set_lr(self, lr: float) -> None:
        """A new base learning rate from the next step on (no compile; a
        checkpoint keeps it), as setting ``param_group["lr"]`` does."""
        self._session.set_lr(_check("lr", lr, 0, low_open=True))

    @property
    def metrics(self) -> Dict[str, float]:
        """The last step's ``loss``, the ``lr`` it applied and, with
        ``max_grad_norm``, its ``grad_norm`` before clipping (Trainer's
        log keys)."""
        out = dict(self._session.metrics)
        if self._losses:
            out["loss"] = self._losses[-1]
        return out

    @property
    def bundle(self) -> str:
        """The compiled bundle's directory."""
        return self._bundle

    @property
    def inputs(self) -> Dict[str, tuple]:
        """Each input a step takes: name -> (numpy dtype, shape), at the
        first batch shape."""
        return dict(self._inputs)

    @property
    def batch_shapes(self) -> List[Dict[str, tuple]]:
        """Every batch shape the model was compiled for (``example_inputs``
        as a list), each as ``inputs`` gives the first."""
        return [dict(shape) for shape in self._shapes]

    def _batch(self, batch) -> Dict[str, np.ndarray]:
        if not isinstance(batch, dict):
            raise ArgumentTypeError("a batch must be a dict from input names to tensors, "
                        f"not {type(batch).__name__}")
        out = self._batch_arrays(batch)
        _check_shape(out, self._shapes, "step")
        return out

    def step(self, batch: Union[Dict[str, Any], Sequence[Dict[str, Any]]]
             ) -> float:
        """One training step on every rank; returns its loss (computed
        before the update).

        ``batch`` maps every input of the train step (the forward's
        arguments, and ``labels`` for a loss Cleave appends) to a torch
        tensor or numpy array of the shape the model was compiled for;
        anything else raises :class:`cleave.Error` and runs nothing. Under
        ``gradient_accumulation_steps=N`` it is a list of N such batches,
        the micro-batches of one update, and the loss is the update's.
        """
        if isinstance(batch, Mapping):
            arrays = self._batch(batch)
        elif isinstance(batch, (list, tuple)):
            arrays = [self._batch(b) for b in batch]
        else:
            raise ArgumentTypeError(
                "step takes a batch (a dict of tensors) or, under "
                "gradient_accumulation_steps, a list of them; not "
                f"{type(batch).__name__}")
        loss = self._session.step(arrays)
        self._losses.append(loss)
        return loss

    def forward(self, batch: Dict[str, Any]):
        """The module's outputs on ``batch`` (the forward's arguments at
        their compiled shapes; a ``labels`` entry for a loss Cleave appends
        is ignored), computed sharded with the current weights, as the
        train step splits them: no update, no step counted. One output is a
        tensor, several a tuple, as the module returns them. Raises
        :class:`cleave.Error` where the bundle has no forward pass (a dp
        mesh)."""
        import torch
        arrays = self._forward_batch(batch)
        outs = [torch.from_numpy(np.array(a)) for _, a in
                self._session.forward(arrays, not self._training)]
        return outs[0] if len(outs) == 1 else tuple(outs)

    __call__ = forward

    @property
    def training(self) -> bool:
        """Whether ``forward`` runs in training mode (as ``nn.Module``'s
        flag): dropout on, BatchNorm on the batch's statistics."""
        return self._training

    def train(self, mode: bool = True) -> "Model":
        """``forward`` and ``evaluate`` in training mode (``mode`` True) or
        eval mode, as ``nn.Module.train``; ``step`` always trains.
        Returns the Model."""
        if not isinstance(mode, bool):
            raise ArgumentTypeError(f"mode must be True or False, not "
                                    f"{mode!r}")
        self._training = mode
        return self

    def eval(self) -> "Model":
        """``forward`` and ``evaluate`` in eval mode (dropout off,
        BatchNorm on its running statistics), as ``nn.Module.eval``."""
        return self.train(False)

    def evaluate(self, batches: Iterable[Dict[str, Any]]) -> float:
        """The mean loss over ``batches`` (each as ``step`` takes one),
        with no update: the module's first output where it computes its
        loss, else the loss Cleave appends (cross-entropy over the last
        axis ignoring labels -100, or mean squared error) of its first
        output. Each batch's loss counts once, as Trainer's eval_loss over
        batches of one size."""
        import torch
        import torch.nn.functional as F
        kind = self._session.loss_kind
        losses = []
        for batch in batches:
            if not isinstance(batch, Mapping):
                raise ArgumentTypeError("evaluate takes batches (dicts of "
                                        "tensors), not "
                                        f"{type(batch).__name__}")
            out = self.forward(batch)
            first = out[0] if isinstance(out, tuple) else out
            if kind in ("cross_entropy", "mse"):
                if "labels" not in batch:
                    raise ArgumentError("evaluate needs each batch's "
                                        "'labels' (the loss is appended)")
                labels = torch.as_tensor(np.array(to_numpy(
                    batch["labels"], "batch input 'labels'")))
                first = F.cross_entropy(
                    first.reshape(-1, first.shape[-1]), labels.reshape(-1)) \
                    if kind == "cross_entropy" else F.mse_loss(first, labels)
            if first.numel() != 1:
                raise ArgumentError(
                    f"the module's first output on this batch is "
                    f"{list(first.shape)}, not its loss: evaluate needs the "
                    "batches as step takes them (their labels too)")
            losses.append(float(first.reshape(())))
        if not losses:
            raise ArgumentError("evaluate needs at least one batch")
        return float(np.mean(losses))

    def _forward_batch(self, batch) -> Dict[str, np.ndarray]:
        if not isinstance(batch, Mapping):
            raise ArgumentTypeError("a batch must be a dict from input "
                                    "names to tensors, not "
                                    f"{type(batch).__name__}")
        # One pass per shape and set of arguments (with labels, and an
        # HF-style forward without them).
        variants = [{n: (d, tuple(sh)) for n, d, sh in one}
                    for one in self._session.batch_shapes(True)]
        wanted = {}
        for variant in variants:
            for name, want in variant.items():
                wanted.setdefault(name, want)
        appended = self._session.loss_kind in ("cross_entropy", "mse")
        out = {}
        for name, value in batch.items():
            if name == "labels" and appended and name not in wanted:
                continue
            want = wanted.get(name)
            if wanted and not want:
                raise ArgumentError(
                    f"the batch has '{name}', which is not an input of the "
                    f"forward pass (its inputs: {', '.join(sorted(wanted))})")
            out[name] = _input_array(name, value, want)
        if not variants:
            return out  # the session says why it has no forward pass
        named = [v for v in variants if set(v) == set(out)]
        if not named:
            closest = min(variants, key=lambda v: len(set(v) ^ set(out)))
            missing = sorted(set(closest) - set(out)) or \
                sorted(set(out) - set(closest))
            raise ArgumentError(
                f"the batch has {'no ' if set(closest) - set(out) else ''}"
                f"'{missing[0]}' (the forward pass's inputs: "
                f"{', '.join(sorted(closest))})")
        _check_shape(out, named, "forward pass")
        return out

    def fit(self, batches: Iterable[Dict[str, Any]], steps: Optional[int] = None,
            callback: Optional[Callable[[int, float], Any]] = None,
            progress: bool = True, drop_last: bool = False,
            pad_last: bool = False) -> List[float]:
        """Trains on each batch of ``batches`` in turn (at most ``steps``),
        with a live progress bar; ``callback(step, loss)`` after each step
        (return False to stop). Returns the losses. Under
        ``gradient_accumulation_steps=N`` each N batches in turn are one
        update's micro-batches (a last incomplete group is left out: the
        step is compiled for N).

        A last batch of fewer rows than any compiled shape (a dataset that
        does not divide by the batch size) is an error, unless
        ``drop_last`` (DataLoader's: it is left out) or ``pad_last``: its
        rows are padded to the smallest compiled batch that holds them,
        the padded labels -100 (which cross-entropy ignores: PyTorch's and
        Hugging Face's ignore_index) and every other input 0 (an attention
        mask's padding), so the step's loss and update are the partial
        batch's. Where rows meet inside the model (BatchNorm's batch
        statistics) padding would change them: compile the last batch's
        shape instead (example_inputs as a list)."""
        if not isinstance(drop_last, bool) or not isinstance(pad_last, bool):
            raise ArgumentTypeError("drop_last and pad_last must be True or "
                                    "False")
        if drop_last and pad_last:
            raise ArgumentError("give drop_last or pad_last, not both")
        losses = []
        total = steps
        n = self._session.micro_batches
        if total is None and hasattr(batches, "__len__"):
            total = len(batches) // n
        if drop_last or pad_last:
            batches = self._last_batch_fitted(batches, pad_last)
        if n > 1:
            batches = _groups_of(batches, n)
        with progress_bar(total, progress) as bar:
            for batch in batches:
                if steps is not None and len(losses) >= steps:
                    break
                loss = self.step(batch)
                losses.append(loss)
                bar.update(loss)
                if callback is not None and callback(self.steps_done, loss) \
                        is False:
                    break
        return losses

    def _last_batch_fitted(self, batches, pad):
        """``batches`` with the last one dropped, or its rows padded to a
        compiled batch (``pad``), where it has no compiled shape."""
        it = iter(batches)
        try:
            last = next(it)
        except StopIteration:
            return
        for following in it:
            yield last
            last = following
        if not isinstance(last, Mapping):
            yield last
            return
        arrays = self._batch_arrays(last)
        if any(all(name in shape and tuple(a.shape) == shape[name][1]
                   for name, a in arrays.items()) for shape in self._shapes):
            yield last
        elif pad:
            yield self._padded(arrays)
        elif not self._fewer_rows(arrays):
            yield last  # not a partial batch: step names its shape

    def _batch_arrays(self, batch) -> Dict[str, np.ndarray]:
        return {name: _input_array(name, value, self._inputs.get(name))
                for name, value in batch.items()}

    def _fewer_rows(self, arrays):
        """The compiled shapes \\p arrays fits but for fewer rows (a last
        partial batch), fewest rows first."""
        rows = {a.shape[0] if a.ndim else None for a in arrays.values()}
        fits = [shape for shape in self._shapes
                if set(shape) == set(arrays) and len(rows) == 1 and
                all(a.ndim and tuple(a.shape[1:]) == shape[n][1][1:] and
                    a.shape[0] <= shape[n][1][0] for n, a in arrays.items())]
        return sorted(fits, key=lambda shape: next(iter(shape.values()))[1][0])

    def _padded(self, arrays):
        """\\p arrays' rows padded to the fewest-row compiled shape whose
        other dims they have: labels -100, every other input 0."""
        labels = arrays.get("labels")
        if self._session.loss_kind == "mse" or labels is None or \
                labels.dtype.kind not in "iu":
            raise ArgumentError(
                "pad_last masks the padded rows by labels -100, which needs "
                "integer labels and a loss that ignores them "
                "(cross-entropy); use drop_last, or compile the last "
                "batch's shape (example_inputs as a list)")
        fits = self._fewer_rows(arrays)
        if not fits:
            _check_shape(arrays, self._shapes, "step")  # names the shapes
            raise ArgumentError("the last batch's inputs are not those of "
                                "a compiled shape with fewer rows")
        target = fits[0]
        out = {}
        for name, a in arrays.items():
            padded = np.full(target[name][1], -100 if name == "labels" else 0,
                             dtype=a.dtype)
            padded[:a.shape[0]] = a
            out[name] = padded
        return out

    def profile(self, batch: Dict[str, Any], steps: int = 5,
                trace: Optional[str] = None) -> str:
        """Trains ``steps`` steps on ``batch`` (real steps, as ``step()``
        makes) timing every kernel, and returns where the steps after the
        first spent their time: by phase, kernel kind, model block and
        source op, with FLOP/s and bytes/s against this machine's measured
        sgemm and copy rates, every rank's step and collective time (the
        report of ``cleave run --profile``). With ``trace``, every rank's
        kernels and collectives also go there as Chrome-trace JSON (open it
        in ui.perfetto.dev)."""
        if not isinstance(steps, int) or steps < 2:
            raise ArgumentError("profile needs at least 2 steps: the first one is "
                        "traced, not counted")
        arrays = self._batch(batch)
        self._session.start_profile(trace is not None)
        try:
            for _ in range(steps):
                self._losses.append(self._session.step(arrays))
        except BaseException:
            try:  # stop timing; the step's error is the one to see
                self._session.profile_report("")
            except Error:
                pass
            raise
        return self._session.profile_report(trace or "")

    # -- state --------------------------------------------------------------

    def state_dict(self, trainable_only: bool = False) -> Dict[str, Any]:
        """The module's parameters and buffers, whole and unsharded, under
        the module's own names: ``module.load_state_dict(model.state_dict())``
        gives PyTorch the trained model. ``trainable_only``: only the tensors
        that train (PEFT's adapter-only save; load it with ``strict=False``)."""
        import torch
        if not isinstance(trainable_only, bool):
            raise ArgumentTypeError("trainable_only must be True or False")
        out = {}
        for key, (kind, value) in self._sources.items():
            if trainable_only and not (kind == "bundle" and
                                       self._trained.get(value, False)):
                continue
            if kind == "bundle":
                out[key] = torch.from_numpy(self._session.read(value))
                if key in self._dtypes:
                    out[key] = out[key].to(getattr(torch, self._dtypes[key]))
            elif kind == "counter":
                out[key] = value + self.steps_done
            else:
                out[key] = value.clone()
        return out

    def load_state_dict(self, state_dict: Dict[str, Any],
                        strict: bool = True) -> None:
        """Replaces the weights (not the optimizer state) with
        ``state_dict``'s, split over the ranks as the bundle splits them."""
        if strict:
            missing = [k for k, (kind, _) in self._sources.items()
                       if kind == "bundle" and k not in state_dict]
            unknown = [k for k in state_dict if k not in self._sources]
            if missing or unknown:
                raise Error("state_dict does not match the model: " +
                            (f"missing '{missing[0]}'" if missing else
                             f"unexpected '{unknown[0]}'"))
        # Every tensor is checked before any is written: a refusal leaves
        # the model as it was.
        writes, done = [], set()
        for key, value in state_dict.items():
            kind, target = self._sources.get(key, ("", None))
            if kind != "bundle" or target in done:
                continue
            a = to_numpy(value, f"'{key}'")
            if a.dtype != np.float32:
                a = a.astype(np.float32)
            try:
                self._session.check_write(target, a)
            except Error as e:
                raise ArgumentError(f"state_dict['{key}']: {e}") from None
            writes.append((target, a))
            done.add(target)
        for target, a in writes:
            self._session.write(target, a)

    def export(self, path: str, trainable_only: bool = False,
               merge_adapters: bool = False) -> None:
        """Writes the trained weights as the original ONNX model (path ending
        .onnx) or a safetensors file of them (.safetensors), as
        ``cleave export`` does; ``trainable_only``: only the tensors that
        train, as safetensors (``cleave export --trainable-only``);
        ``merge_adapters``: every low-rank adapter folded into its base
        weight, W + s A B, and removed (PEFT's merge_and_unload), the
        adapters found from the graph; other weights that train stay."""
        for name, flag in (("trainable_only", trainable_only),
                           ("merge_adapters", merge_adapters)):
            if not isinstance(flag, bool):
                raise ArgumentTypeError(f"{name} must be True or False")
        if trainable_only and merge_adapters:
            raise ArgumentError("trainable_only and merge_adapters exclude "
                                "each other: merged adapters are gone")
        path = os.fspath(path)
        with tempfile.TemporaryDirectory(prefix="cleave-export-") as d:
            written = self._session.save_checkpoint(d)
            if not merge_adapters:
                _cleave.export(written, path, trainable_only)
                return
            whole = os.path.join(d, "model.onnx")
            _cleave.export(written, whole, False)
            _write_merged(whole, path, set(self._trained),
                          {n for n, trains in self._trained.items() if trains})

    def save_checkpoint(self, directory: str) -> str:
        """Writes a checkpoint that :meth:`Model.resume` continues from:
        ``directory`` gets the bundle, the step directory and the module's
        name map (module.json, and module.safetensors for the tensors that
        are not in the bundle: no pickle). ``directory`` may be missing, an
        empty folder or an earlier checkpoint, which is replaced whole once
        the new one is complete; a folder of other files is refused. A
        failure (a full disk) leaves what was there and no temporary behind,
        and the model usable. Under ``distributed=True`` every rank calls
        it (the ranks write their shards; rank 0 the rest). Returns the step
        directory."""
        directory = os.fspath(directory)
        # A link to a folder: the folder it names is the one replaced.
        target = os.path.realpath(directory) if os.path.islink(directory) \
            else directory
        _check_checkpoint_target(target)
        sources, tensors = self._module_files()  # before anything is written
        work, swap = _checkpoint_workspace(target, self.steps_done)
        leader = self._session.rank == 0
        what = f"cannot save a checkpoint in '{directory}'"
        try:
            if leader:
                shutil.rmtree(work, ignore_errors=True)  # a crashed save's
            # Collective: every rank writes its shard (rank 0 makes work/).
            written = self._session.save_checkpoint(
                os.path.join(work, "checkpoints"))
            if leader:
                _copy_bundle(self._bundle, os.path.join(work, "bundle"))
                _write_module_files(work, sources, tensors)
                swap()
        except (OSError, shutil.Error) as e:
            raise file_error(what, e) from None
        except FileError:
            raise
        except Error as e:  # the ranks' writes (a full disk, say)
            raise FileError(str(e)) from None
        finally:
            if leader:
                shutil.rmtree(work, ignore_errors=True)
        return os.path.join(directory, "checkpoints",
                            os.path.basename(written))

    def _module_files(self):
        """module.json's map and module.safetensors' tensors (bfloat16 kept
        as its bits, which numpy cannot hold as floats)."""
        import torch
        sources, tensors = {}, {}
        for key, (kind, value) in self._sources.items():
            if kind == "bundle":
                sources[key] = {"kind": "bundle", "name": value}
                if key in self._dtypes:
                    sources[key]["dtype"] = self._dtypes[key]
                continue
            sources[key] = {"kind": kind, "tensor": key}
            if isinstance(value, torch.Tensor) and \
                    value.dtype == torch.bfloat16:
                sources[key]["dtype"] = "bfloat16"
                value = value.detach().cpu().view(torch.int16)
            a = to_numpy(value, f"'{key}'")
            if str(a.dtype) not in _STORABLE:
                raise Error(f"cannot checkpoint '{key}': its dtype {a.dtype} "
                            "has no safetensors form Cleave writes")
            tensors[key] = a
        return sources, tensors

    @classmethod
    def resume(cls, directory: str, *, distributed: bool = False,
               timeout: float = 60.0, backend: str = "cpu") -> "Model":
        """The model a :meth:`save_checkpoint` directory holds, at its newest
        step, ready to train on. Nothing in the folder is run as code: the
        name map is JSON, its tensors safetensors (a checkpoint of an older
        Cleave, module.pt, is read with torch.load(weights_only=True))."""
        directory = os.fspath(directory)
        sources, dtypes = _read_module_files(directory)
        session = _open_session(os.path.join(directory, "bundle"),
                                distributed, timeout, backend,
                                resume=os.path.join(directory, "checkpoints"))
        names = {name for name, _ in session.tensors()}
        for key, (kind, value) in sources.items():
            if kind == "bundle" and value not in names:
                raise Error(f"checkpoint '{directory}': {_MODULE_JSON} maps "
                            f"'{key}' to '{value}', which the bundle does "
                            "not hold")
        return cls(session, os.path.join(directory, "bundle"), sources,
                   dtypes=dtypes)

    # -- what it is ---------------------------------------------------------

    def inspect(self) -> dict:
        """The bundle's mesh, each weight's split, the collectives of a step
        and the memory per rank: ``cleave inspect --json``'s document."""
        self._session  # noqa: B018 (raises once closed: the bundle may be gone)
        return json.loads(_cleave.inspect(self._bundle, True))

    def __repr__(self) -> str:
        if self.closed:
            return f"cleave.Model(closed, bundle={self._bundle!r})"
        return (f"cleave.Model(tp={self.tp}, steps_done={self.steps_done}, "
                f"bundle={self._bundle!r})\n" +
                _cleave.inspect(self._bundle, False))

    def _repr_html_(self) -> str:
        if self.closed:
            return html.escape(repr(self))
        info = self.inspect()
        rows = "".join(
            "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td>"
            "</tr>".format(html.escape(p["name"]), p["shape"],
                           html.escape(p["sharding"]), p["local_shape"])
            for p in info["parameters"] + [
                dict(b, name=b["name"] + " (does not train)")
                for b in info.get("buffers", [])])
        coll = {}
        for c in info["collectives"]:
            key = (c["phase"], c["kind"])
            coll[key] = coll.get(key, 0) + 1
        summary = ", ".join(f"{n} {k} ({p})" for (p, k), n in
                            sorted(coll.items())) or "none"
        return ("<div><b>cleave.Model</b>: tp = {}, {} steps done<br>"
                "collectives per step: {}<table><tr><th>parameter</th>"
                "<th>shape</th><th>sharding</th><th>per rank</th></tr>{}"
                "</table></div>").format(self.tp, self.steps_done,
                                         html.escape(summary), rows)


_MODULE_JSON = "module.json"
_MODULE_TENSORS = "module.safetensors"
_MODULE_FORMAT = "cleave.module/1"
# What a save_checkpoint folder holds; anything else is the user's.
_CHECKPOINT_ENTRIES = {"bundle", "checkpoints", _MODULE_JSON, _MODULE_TENSORS,
                       "module.pt"}


def _is_checkpoint(directory: str) -> bool:
    """Whether directory is one that save_checkpoint wrote."""
    try:
        entries = set(os.listdir(directory))
    except OSError:
        return False
    # A save cut short inside a mount point leaves its work folder.
    entries = {e for e in entries if not e.startswith(".cleave-")}
    return entries <= _CHECKPOINT_ENTRIES and \
        (_MODULE_JSON in entries or "module.pt" in entries) and \
        os.path.isfile(os.path.join(directory, "bundle", "plan.pb"))


def _check_checkpoint_target(directory: str) -> None:
    """save_checkpoint replaces only a missing or empty folder or an
    earlier checkpoint, as ``cleave compile -o`` does."""
    if not os.path.lexists(directory):
        return
    if not os.path.isdir(directory) or os.path.islink(directory):
        raise FileError(f"cannot save a checkpoint in '{directory}': it is "
                        "not a folder")
    try:
        entries = os.listdir(directory)
    except OSError as e:
        raise file_error(f"cannot save a checkpoint in '{directory}'",
                         e) from None
    # A mount point's own lost+found is the file system's, not the user's.
    entries = [e for e in entries if not (e == "lost+found" and
                                          os.path.ismount(directory))]
    if entries and not _is_checkpoint(directory):
        raise FileError(f"cannot save a checkpoint in '{directory}': it "
                        "holds files that are not a Cleave checkpoint "
                        f"('{sorted(entries)[0]}'); save_checkpoint replaces "
                        "only its own earlier checkpoint or an empty folder")


_STORABLE = {"float32", "float64", "float16", "int64", "int32", "int16",
             "int8", "uint8", "bool"}


def _checkpoint_workspace(target: str, step: int):
    """Where save_checkpoint builds the new checkpoint, and how it swaps it
    in: beside the target, renamed over it whole; or, for a mount point or
    under a parent Cleave cannot write, inside it, entry by entry. The name
    is the same on every rank (they write their shards into it)."""
    target = os.path.abspath(target)
    parent, base = os.path.split(target)
    if os.path.ismount(target) or (os.path.isdir(parent) and
                                   not os.access(parent, os.W_OK)):
        work = os.path.join(target, f".cleave-new-{step}")
        return work, lambda: _replace_entries(work, target, step)
    work = os.path.join(parent, f".{base}.tmp-{step}")

    def swap():
        os.makedirs(parent, exist_ok=True)
        umask = os.umask(0o022)
        os.umask(umask)
        os.chmod(work, 0o777 & ~umask)
        _replace_folder(work, target)
    return work, swap


def _replace_entries(work: str, target: str, step: int) -> None:
    """Moves the checkpoint's entries of work into target, the earlier
    ones aside first (a mount point cannot itself be renamed)."""
    old = os.path.join(target, f".cleave-old-{step}")
    shutil.rmtree(old, ignore_errors=True)
    os.makedirs(old)
    for name in sorted(_CHECKPOINT_ENTRIES):
        if os.path.lexists(os.path.join(target, name)):
            os.rename(os.path.join(target, name), os.path.join(old, name))
    for name in os.listdir(work):
        os.rename(os.path.join(work, name), os.path.join(target, name))
    shutil.rmtree(old, ignore_errors=True)


def _copy_bundle(source: str, target: str) -> None:
    """The bundle's folders and regular files, links not followed: a bundle
    from someone else may hold a link to any file of the user's, which a
    checkpoint must not carry away."""
    for root, dirs, files in os.walk(source, followlinks=False):
        rel = os.path.relpath(root, source)
        os.makedirs(os.path.join(target, rel), exist_ok=True)
        for name in files:
            path = os.path.join(root, name)
            if stat.S_ISREG(os.lstat(path).st_mode):
                shutil.copy2(path, os.path.join(target, rel, name),
                             follow_symlinks=False)


def _write_module_files(directory: str, sources: dict, tensors: dict) -> None:
    write_safetensors(os.path.join(directory, _MODULE_TENSORS), tensors)
    with open(os.path.join(directory, _MODULE_JSON), "w") as f:
        json.dump({"format": _MODULE_FORMAT, "sources": sources}, f, indent=1)
        f.flush()
        os.fsync(f.fileno())


def _replace_folder(new: str, target: str) -> None:
    """Renames new into target's place; an earlier target moves
    aside first and goes once the new one is in."""
    try:
        os.rename(new, target)  # missing or empty: one rename
        return
    except OSError:
        if not os.path.isdir(target):
            raise
    old = tempfile.mkdtemp(prefix="." + os.path.basename(
        os.path.abspath(target)) + ".old-", dir=os.path.dirname(
            os.path.abspath(target)))
    os.rmdir(old)
    os.rename(target, old)
    try:
        os.rename(new, target)
    except OSError:
        os.rename(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _read_module_files(directory: str) -> Tuple[Dict[str, tuple],
                                                 Dict[str, str]]:
    """The name map save_checkpoint wrote (module.json and
    module.safetensors, or an older Cleave's module.pt read without
    running any of its pickle's code), and the module's own dtypes of the
    tensors the bundle holds in float32."""
    import torch
    meta = os.path.join(directory, _MODULE_JSON)
    legacy = os.path.join(directory, "module.pt")
    where = f"checkpoint '{directory}'"
    if os.path.lexists(meta):
        try:
            if not stat.S_ISREG(os.stat(meta).st_mode):  # a FIFO would block
                raise Error(f"{where}: {_MODULE_JSON} is not a regular file")
            with open(meta) as f:
                doc = json.load(f)
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
            raise Error(f"{where}: cannot read {_MODULE_JSON}: {e}") from None
        if not isinstance(doc, dict) or doc.get("format") != _MODULE_FORMAT \
                or not isinstance(doc.get("sources"), dict):
            raise Error(f"{where}: {_MODULE_JSON} is not a Cleave name map "
                        f"(format {_MODULE_FORMAT})")
        tensors = read_safetensors(os.path.join(directory, _MODULE_TENSORS))
        sources, dtypes = {}, {}
        for key, entry in doc["sources"].items():
            sources[key] = _module_source(where, key, entry, tensors)
            if sources[key][0] == "bundle" and "dtype" in entry:
                if entry["dtype"] not in LOW_PRECISION:
                    raise Error(f"{where}: {_MODULE_JSON} gives '{key}' the "
                                f"dtype {entry['dtype']!r}, which Cleave does "
                                "not give back")
                dtypes[key] = entry["dtype"]
        return sources, dtypes
    if not os.path.exists(legacy):
        raise Error(f"'{directory}' is not a checkpoint written by "
                    f"Model.save_checkpoint (it has no {_MODULE_JSON})")
    try:
        doc = torch.load(legacy, weights_only=True)
    except Exception as e:  # the restricted unpickler raises many types
        raise Error(f"{where}: module.pt holds more than tensors and names "
                    f"(refused unread: {type(e).__name__})") from None
    sources = doc.get("sources") if isinstance(doc, dict) else None
    if not isinstance(sources, dict) or not all(
            isinstance(k, str) and isinstance(v, tuple) and len(v) == 2 and
            ((v[0] == "bundle" and isinstance(v[1], str)) or
             (v[0] in ("counter", "module") and
              isinstance(v[1], torch.Tensor)))
            for k, v in sources.items()):
        raise Error(f"{where}: module.pt is not a Cleave name map")
    return dict(sources), {}


def _module_source(where: str, key: str, entry, tensors: dict) -> tuple:
    """One entry of module.json as (kind, value)."""
    import torch
    kind = entry.get("kind") if isinstance(entry, dict) else None
    if kind == "bundle" and isinstance(entry.get("name"), str):
        return ("bundle", entry["name"])
    name = entry.get("tensor") if isinstance(entry, dict) else None
    if kind in ("counter", "module") and isinstance(name, str) and \
            name in tensors:
        value = torch.from_numpy(tensors[name])
        if entry.get("dtype") == "bfloat16" and value.dtype == torch.int16:
            value = value.view(torch.bfloat16)
        elif entry.get("dtype") is not None:
            raise Error(f"{where}: {_MODULE_JSON} gives '{key}' the dtype "
                        f"{entry.get('dtype')!r}, which its tensor cannot have")
        return (kind, value)
    raise Error(f"{where}: {_MODULE_JSON} has an entry for '{key}' that "
                "Cleave cannot read")


def _open_session(bundle: str, distributed: bool, timeout: float,
                  backend: str, resume: str = "", steps: Optional[int] = None,
                  data: Optional[dict] = None, precision: str = "f32"):
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
            or not timeout > 0:
        raise ArgumentError("timeout must be a positive number of seconds, "
                            f"not {timeout!r}")
    if not isinstance(backend, str):
        raise ArgumentTypeError(f"backend must be a string, not {backend!r}")
    o = _cleave.SessionOptions()
    o.bundle = bundle
    o.resume = resume
    o.ranks = "mpi" if distributed else "threads"
    o.timeout = float(timeout)
    o.backend = backend
    o.precision = precision
    if steps is not None:
        o.steps = int(steps)
    if data is None:
        o.fed_by_caller = True
    else:
        for k, v in data.items():
            setattr(o, k, v)
    if distributed:
        _finalize_at_exit()
    return _cleave.Session(o)


_finalizer_registered = False


def _finalize_at_exit():
    global _finalizer_registered
    if not _finalizer_registered:
        import atexit
        atexit.register(_cleave.finalize_mpi)
        _finalizer_registered = True


def tensor_parallel(module, example_inputs: Union[Dict[str, Any],
                                                  List[Dict[str, Any]]], *,
                    tp: int = 1,
                    optimizer: Union[SGD, AdamW, None] = None,
                    loss: str = "auto", plan=None, distributed: bool = False,
                    seed: int = 0, options: Optional[Options] = None,
                    **compile_options) -> Model:
    """Compiles ``module``'s training step, split over ``tp`` ranks, in one
    line.

    Parameters
    ----------
    module
        A ``torch.nn.Module`` (exported in memory through torch.onnx), or
        the path of an ``.onnx`` or TorchScript ``.pt`` file.
    example_inputs
        ``{argument name: tensor}`` for the forward's inputs; their shapes
        and dtypes are the ones every batch must have. A list of such
        dicts compiles a step (and forward pass) per batch shape, the
        weights shared: ``step`` and ``Model(batch)`` run the one of the
        batch's shape (a longer sequence, a last partial batch).
    tp
        Ranks the weights are split over (tensor parallelism). Cleave picks
        every weight's split itself (Megatron's pattern where it applies).
    optimizer
        ``cleave.SGD(lr, ...)`` or ``cleave.AdamW(lr, ...)``; default
        ``SGD(lr=0.01)``.
    loss
        ``"auto"``: the first output is the loss (a scalar). ``"cross_entropy"``
        or ``"mse"``: Cleave appends it, and every batch carries ``labels``.
    plan
        Optional layout rules: a file, or ``{regex: "colwise" | "rowwise" |
        "replicate" | "vocab"}``, as transformers' ``tp_plan``.
    distributed
        False: every rank is a thread of this process (a notebook, a plain
        script). True: this process is one rank of a job started by
        ``cleave launch -n N``, ``mpirun`` or ``srun``; every rank runs the
        same script, and ``step`` is collective.
    seed
        Seed of the random streams (dropout).
    options
        A :class:`cleave.Options` holding any of the options (the named
        ones above too); the keywords given here go on top of it.
    compile_options
        Any other field of :class:`cleave.Options`: ``output=DIR`` keeps
        the bundle there; ``dp``, ``zero``, ``devices``,
        ``memory_per_device`` (the mesh), ``freeze``, ``opset``,
        ``timeout``, ``backend``, ``precision``. Every value is checked
        before anything runs.

    What trains is what PyTorch trains: parameters with ``requires_grad``;
    buffers never (BatchNorm's statistics update as in PyTorch).

    Returns a :class:`cleave.Model`. Errors raise :class:`cleave.Error`.
    """
    _check_devices_call(example_inputs, tp)
    _check_optimizer_parameters(module, optimizer)
    opts = Options._of_call(options, {"tp": tp, "optimizer": optimizer,
                                      "loss": loss, "plan": plan,
                                      "seed": seed}, compile_options)
    if opts.plan_only:
        raise ArgumentError("plan_only writes a bundle without weights, "
                            "which tensor_parallel cannot train: use "
                            "cleave.compile")
    _example_batches(example_inputs)
    if not isinstance(distributed, bool):
        raise ArgumentTypeError("distributed must be True or False, not "
                                f"{distributed!r}")
    work = tempfile.mkdtemp(prefix="cleave-")
    try:
        bundle = opts.output or os.path.join(work, "bundle")
        o = opts._native(work)
        o.output = bundle
        sources, dtypes = {}, {}
        if isinstance(module, (str, os.PathLike)):
            _file_keeps_its_opset(opts)
        else:
            import torch
            if not isinstance(module, torch.nn.Module):
                raise ArgumentTypeError("module must be a torch.nn.Module or a model "
                            f"file's path, not {type(module).__name__}")
        exported = _compile_inputs(o, module, example_inputs, opts.loss, work,
                                   opts.opset)
        if exported is not None:
            sources = exported.sources
            dtypes = exported.dtypes
        _cleave.compile(o)
        session = _open_session(bundle, distributed, opts.timeout,
                                opts.backend)
        if not sources:
            sources = {name: ("bundle", name) for name, _ in session.tensors()}
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return Model(session, bundle, sources, owned=work, dtypes=dtypes)


def _check_devices_call(example_inputs, tp) -> None:
    """The tensor_parallel library's call, ``tensor_parallel(model,
    ["cuda:0", "cuda:1"])``, refused with the call Cleave takes."""
    if isinstance(example_inputs, (list, tuple)) and all(
            isinstance(d, str) or type(d).__name__ == "device"
            for d in example_inputs):
        n = len(example_inputs)
        raise ArgumentTypeError(
            f"tensor_parallel(module, {list(map(str, example_inputs))!r}) is "
            "the tensor_parallel library's call; Cleave compiles the step "
            "ahead of time for the batch's shapes, so it takes example "
            f"inputs and a rank count: cleave.tensor_parallel(module, "
            f"{{'input_ids': ids, ...}}, tp={n if n else tp})")


def _check_optimizer_parameters(module, optimizer) -> None:
    """A torch optimizer must hold exactly the module's trainable
    parameters: what it leaves out would train in Cleave's step."""
    if not is_torch_optimizer(optimizer) or \
            not hasattr(module, "named_parameters"):
        return
    held = {id(p) for g in optimizer.param_groups for p in g["params"]}
    for name, p in module.named_parameters():
        if p.requires_grad and id(p) not in held:
            raise ArgumentError(
                f"the {type(optimizer).__name__} does not hold parameter "
                f"'{name}', which requires grad: Cleave trains every such "
                "parameter (set requires_grad=False to freeze it)")
    if held - {id(p) for p in module.parameters() if p.requires_grad}:
        raise ArgumentError(
            f"the {type(optimizer).__name__} holds parameters that are not "
            "the module's trainable ones")


def _file_keeps_its_opset(opts: Options) -> None:
    if opts.opset != Options.opset:
        raise ArgumentError("opset applies to exporting a torch.nn.Module; "
                            "a model file keeps its own opset")


def _write_merged(model_path: str, path: str, tensors: set,
                  adapters: set) -> None:
    """The exported model at ``model_path`` with its adapters folded into
    their bases, written to ``path`` atomically: the model (.onnx) or the
    bundle's ``tensors`` but the adapters (.safetensors)."""
    import onnx
    from ._merge import merge_adapters
    if not path.endswith((".onnx", ".safetensors")):
        raise Error(f"cannot tell the format of '{path}': name it .onnx or "
                    ".safetensors")
    model, _ = merge_adapters(onnx.load(model_path), adapters)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        if path.endswith(".onnx"):
            # Beyond 1 GiB of weights, ONNX's external data (protobuf
            # messages stop at 2 GiB), as cleave export writes it.
            size = sum(len(t.raw_data) for t in model.graph.initializer)
            external = size > (1 << 30)
            onnx.save_model(model, tmp, save_as_external_data=external,
                            all_tensors_to_one_file=True,
                            location=os.path.basename(path) + ".data")
        else:
            import onnx.numpy_helper as nh
            write_safetensors(tmp, {t.name: nh.to_array(t)
                                    for t in model.graph.initializer
                                    if t.name in tensors})
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)

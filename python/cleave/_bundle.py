"""The offline path: cleave.compile writes a bundle, cleave.load opens one,
Bundle.train runs it."""

import json
import os
import tempfile
from typing import Any, Dict, Iterable, List, Optional, Union

from ._model import (_compile_inputs, _example_batches, _file_keeps_its_opset,
                     _open_session)
from ._options import Options
from ._native import ArgumentError, ArgumentTypeError, Error, _cleave
from ._optim import SGD, AdamW
from ._progress import progress_bar


class Bundle:
    """A compiled bundle directory: one SPMD train-step plan and each rank's
    weights (``cleave compile``'s output)."""

    def __init__(self, directory: str):
        self.directory = os.fspath(directory)
        # Reads and checks plan.pb now: a bad folder fails here.
        self._summary = json.loads(_cleave.inspect(self.directory, True))

    @property
    def mesh(self) -> dict:
        """The device mesh: {"tp": T}, {"dp": D} or {"dp": D, "tp": T}, and
        "tp_inner" where the tp ranks are factored into two axes (T x the
        inner axis's size)."""
        return dict(self._summary["mesh"])

    @property
    def tp(self) -> int:
        """Tensor-parallel ranks the bundle is compiled for (both tp axes
        where they are factored)."""
        return int(self.mesh.get("tp", 1)) * int(self.mesh.get("tp_inner", 1))

    @property
    def ranks(self) -> int:
        """Ranks a run of the bundle takes: the product of the mesh."""
        n = 1
        for size in self.mesh.values():
            n *= int(size)
        return n

    def inspect(self) -> dict:
        """``cleave inspect --json``'s document: mesh, each weight's split,
        collectives per step, memory per rank."""
        return json.loads(_cleave.inspect(self.directory, True))

    def __repr__(self) -> str:
        return f"cleave.Bundle({self.directory!r})\n" + \
            _cleave.inspect(self.directory, False)

    def train(self, steps: int, *, text: Optional[str] = None,
              inputs: Union[str, Iterable[Dict[str, Any]], None] = None,
              ranks: Optional[int] = None, checkpoint: Optional[str] = None,
              progress: bool = True, shuffle: bool = False, seed: int = 0,
              resume: Optional[str] = None, distributed: bool = False,
              timeout: float = 60.0, backend: str = "cpu",
              precision: str = "f32") -> List[float]:
        """Trains ``steps`` steps, as ``cleave run`` does, and returns the
        losses.

        Data: ``text`` (a file: a byte-level language model's ids and
        next-byte labels), or ``inputs`` (a directory of NAME.npy files, as
        ``cleave run --inputs``, or an iterable of batch dicts). ``ranks``
        must be the bundle's tp if given (they run as threads of this
        process unless ``distributed``). ``checkpoint``: a directory that
        gets a checkpoint after the last step; ``resume`` continues one.
        ``timeout`` and ``backend`` are :class:`cleave.Options`' (checked
        as it checks them); ``precision="bf16"`` rounds an f32 bundle's
        matmul operands on the CUDA backend (``cleave run --precision``; a
        bundle's own mixed precision is compiled in).
        """
        run = Options(timeout=timeout, backend=backend)
        if not isinstance(precision, str):
            raise ArgumentTypeError("precision must be a string, not "
                                    f"{precision!r}")
        if precision not in ("f32", "bf16"):
            raise ArgumentError("precision must be 'f32' or 'bf16', not "
                                f"{precision!r}")
        if precision == "bf16" and backend == "cpu":
            raise ArgumentError("precision='bf16' needs backend='cuda' (the "
                                "CPU backend trains an f32 bundle in f32)")
        if ranks is not None and ranks != self.ranks:
            mesh = ", ".join(f"{k} = {v}" for k, v in self.mesh.items())
            raise Error(f"bundle '{self.directory}' is compiled for {mesh} "
                        f"({self.ranks} ranks); ranks={ranks} does not match "
                        "(compile it again for that mesh)")
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ArgumentError(f"steps must be a positive integer, not "
                                f"{steps!r}")
        if not isinstance(seed, int) or isinstance(seed, bool) or \
                not 0 <= seed < 2**64:
            raise ArgumentError(f"seed must be a non-negative integer, not "
                                f"{seed!r}")
        batches = None
        data = {"text": os.fspath(text) if text else "", "shuffle": shuffle,
                "seed": int(seed)}
        if isinstance(inputs, (str, os.PathLike)):
            data["inputs"] = os.fspath(inputs)
        elif inputs is not None:
            batches, data = iter(inputs), None
        session = _open_session(self.directory, distributed, run.timeout,
                                run.backend,
                                resume=os.fspath(resume) if resume else "",
                                steps=steps, data=data,
                                precision=precision)
        from ._model import Model
        model = Model(session, self.directory, {})
        losses = []
        with progress_bar(steps, progress) as bar:
            for _ in range(steps):
                if batches is not None:
                    try:
                        loss = model.step(next(batches))
                    except StopIteration:
                        break
                else:
                    loss = session.step(None)
                losses.append(loss)
                bar.update(loss)
        if checkpoint:
            session.save_checkpoint(os.fspath(checkpoint))
        return losses


def compile(model, example_inputs: Union[Dict[str, Any],
                                         List[Dict[str, Any]], None] = None, *,
            output: Optional[str] = None, tp: int = 1,
            optimizer: Union[SGD, AdamW, None] = None, loss: str = "auto",
            plan=None, seed: int = 0, plan_only: bool = False, dp: int = 1,
            devices: Optional[int] = None,
            memory_per_device: Optional[int] = None,
            options: Optional[Options] = None, **more_options) -> Bundle:
    """Compiles a model's training step into a bundle directory ``output``,
    as ``cleave compile`` does, and returns it.

    ``model`` is an ``.onnx`` / ``.pt`` path (``example_inputs`` then fix
    its inputs' shapes, like ``--input``) or a ``torch.nn.Module`` (exported
    with ``example_inputs``); a list of example batches compiles a step per
    batch shape, the weights shared (``--shape``). The options are :class:`cleave.Options`'
    fields, as :func:`cleave.tensor_parallel` takes them (``options=`` an
    Options, the keywords on top); ``dp`` splits every batch over that
    many data-parallel ranks (a dp x tp mesh with ``tp``); ``devices``
    lets the compiler choose the mesh instead (``cleave compile
    --devices``), within ``memory_per_device`` bytes per rank when given;
    ``Bundle.inspect()["mesh_choice"]`` lists what it tried. The run
    options (``timeout``, ``backend``, ``precision``) are refused here:
    :meth:`Bundle.train` or ``cleave run`` takes them.
    """
    named = {"output": output, "tp": tp, "optimizer": optimizer,
             "loss": loss, "plan": plan, "seed": seed, "plan_only": plan_only,
             "dp": dp, "devices": devices,
             "memory_per_device": memory_per_device}
    opts = Options._of_call(options, named, more_options)
    if opts.output is None:
        raise ArgumentError("compile needs output=DIR, the bundle's folder")
    run = opts._run_options_set()
    if run:
        raise ArgumentError(f"{run[0]} applies to running a bundle, not to "
                            "compiling one: give it to Bundle.train or "
                            "cleave run")
    _example_batches(example_inputs)
    with tempfile.TemporaryDirectory(prefix="cleave-") as work:
        o = opts._native(work)
        o.output = opts.output
        if isinstance(model, (str, os.PathLike)):
            _file_keeps_its_opset(opts)
        _compile_inputs(o, model, example_inputs, opts.loss, work, opts.opset)
        _cleave.compile(o)
    return Bundle(o.output)


def load(directory: str) -> Bundle:
    """The bundle in ``directory`` (checked now)."""
    return Bundle(directory)

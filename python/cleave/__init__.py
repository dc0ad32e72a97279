"""Cleave: tensor-parallel training compiled from a PyTorch module.

One line splits a model over ``tp`` ranks and trains it::

    import cleave
    model = cleave.tensor_parallel(module, {"input_ids": ids, "labels": y},
                                   tp=2, optimizer=cleave.AdamW(3e-4))
    for batch in batches:
        loss = model.step(batch)
    module.load_state_dict(model.state_dict())

Cleave imports the module (through torch.onnx), derives the whole training
step (loss, backward pass, optimizer update), decides how every weight is
split over the ranks with no hand-written plan, inserts the collectives that
keep the math exact, and runs the ranks as threads of this process
(``distributed=False``) or as the processes of an MPI job
(``distributed=True`` under ``cleave launch -n N script.py``).

The offline path: :func:`cleave.compile` writes a bundle directory,
:func:`cleave.load` opens one, :meth:`Bundle.train` runs it. Every failure
raises :class:`cleave.Error` with the message the ``cleave`` CLI prints.
"""

from ._native import ArgumentError, ArgumentTypeError, Error, FileError
from ._optim import SGD, AdamW
from ._options import Options
from ._model import Model, tensor_parallel
from ._bundle import Bundle, compile, load

__all__ = ["Error", "ArgumentError", "ArgumentTypeError", "FileError", "SGD",
           "AdamW", "Options", "Model", "tensor_parallel", "Bundle", "compile",
           "load"]

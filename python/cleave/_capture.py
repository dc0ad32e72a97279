"""Capture that cannot be silently wrong.

torch.onnx captures a module by tracing its forward on the example inputs.
Where the forward reads a tensor's value into Python (``if x.sum() > 0``,
``int(mask.max())``, ``loss.item()``), the trace keeps what that value was
for the example batch: a branch taken, a number fixed. PyTorch says so with
a TracerWarning, which an export can only ignore, and the step then trains
silently wrong on every batch that would have gone the other way.

So while Cleave exports, reading a tensor's value into Python is checked:
a value that depends on the inputs, the parameters or the buffers (the
trace's graph inputs), or on a random draw, is refused with a cleave.Error naming the module's
source line. Values computed from shapes alone (``int(x.shape[1])``,
``torch.tensor(d).sqrt().item()``) are fixed for the compiled shapes anyway
and pass: the walk up the trace stops at ops that read only a tensor's
shape. Control flow is not kept (the dialect has none, docs/design.md):
the refusal names the remedy instead, tensor ops such as torch.where.
"""

import contextlib
import linecache
import os
import sys

from ._native import Error

# Tensor methods that hand a tensor's value to Python, and what doing so
# means for the trace.
_READS = {
    "__bool__": "branches on a tensor's value",
    "__int__": "takes a Python int from a tensor",
    "__float__": "takes a Python float from a tensor",
    "__index__": "uses a tensor's value as a Python index",
    "item": "takes a Python number from a tensor",
    "tolist": "reads a tensor's values into a Python list",
    "numpy": "reads a tensor's values into numpy",
}

# Ops of the trace whose result depends on an operand's shape, dtype or
# device only, never on its values.
_SHAPE_ONLY = {
    "aten::size", "aten::dim", "aten::numel", "prim::shape", "aten::len",
    "aten::ones_like", "aten::zeros_like", "aten::empty_like",
    "aten::full_like", "aten::new_ones", "aten::new_zeros",
    "aten::new_empty", "aten::new_full", "aten::new_tensor",
}

# Ops that draw anew each call: a value read from one varies from step to
# step as data does (stochastic depth's `if torch.rand(1) < p`), and a trace
# would freeze its first draw.
_RANDOM = {
    "aten::rand", "aten::randn", "aten::randint", "aten::rand_like",
    "aten::randn_like", "aten::randint_like", "aten::randperm",
    "aten::bernoulli", "aten::multinomial", "aten::normal",
    "aten::uniform", "aten::uniform_", "aten::normal_", "aten::dropout",
    "aten::feature_dropout",
}


class _ValueRead(Exception):
    """Raised inside the trace; export_module makes it a cleave.Error."""


def _depends_on_inputs(torch, tensor) -> bool:
    """Whether the traced \\p tensor's value depends on a graph input or
    on a random draw."""
    if torch._C._get_tracing_state() is None:
        return False
    try:
        value = torch._C._get_value_trace(tensor)
    except RuntimeError:  # never traced: a constant made in the forward
        return False
    seen, stack = {value.unique()}, [value]
    while stack:
        node = stack.pop().node()
        if node.kind() == "prim::Param" or node.kind() in _RANDOM:
            return True
        if node.kind() in _SHAPE_ONLY:
            continue
        for operand in node.inputs():
            if operand.unique() not in seen:
                seen.add(operand.unique())
                stack.append(operand)
    return False


def _user_frame(torch):
    """The innermost frame outside torch and this package: the model's."""
    skip = (os.path.dirname(torch.__file__), os.path.dirname(__file__))
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(skip):
        frame = frame.f_back
    return frame


def _refusal(torch, module, what: str) -> str:
    frame = _user_frame(torch)
    where = "its forward"
    if frame is not None:
        path, line = frame.f_code.co_filename, frame.f_lineno
        source = linecache.getline(path, line).strip()
        where = f"{os.path.basename(path)}:{line}" + \
            (f" (`{source}`)" if source else "")
    return (f"{type(module).__name__}.forward {what} at {where}: a trace "
            "keeps what that value was for the example batch, and the step "
            "would be silently wrong for batches that differ; compute it "
            "with tensor ops (torch.where, a mask) or from shapes")


@contextlib.contextmanager
def refuse_value_reads(module):
    """Within it, a traced tensor's value read into Python raises _ValueRead
    when the value depends on the inputs, parameters or buffers."""
    import torch

    originals = {name: getattr(torch.Tensor, name) for name in _READS}

    def guard(name, original):
        def read(self, *args, **kwargs):
            if _depends_on_inputs(torch, self):
                raise _ValueRead(_refusal(torch, module, _READS[name]))
            return original(self, *args, **kwargs)
        return read

    for name, original in originals.items():
        setattr(torch.Tensor, name, guard(name, original))
    try:
        yield
    except _ValueRead as e:
        raise Error(str(e)) from None
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)

"""Loads the native extension and points it at the plugins it dlopens."""

import os

_here = os.path.dirname(os.path.abspath(__file__))


def _plugin(name):
    """The plugin beside the package (installed), else in the build tree's
    lib/ (build/python/cleave -> build/lib)."""
    for candidate in (os.path.join(_here, name),
                      os.path.join(_here, "..", "..", "lib", name)):
        if os.path.exists(candidate):
            return os.path.abspath(candidate)
    return None


# The extension runs inside the Python interpreter, so the plugins cannot be
# found from the running binary as the cleave tools find theirs.
for _var, _name in (("CLEAVE_TORCHSCRIPT_PLUGIN", "libcleave_torchscript.so"),
                    ("CLEAVE_CUDA_PLUGIN", "libcleave_cuda.so")):
    _path = _plugin(_name)
    if _path and not os.environ.get(_var):
        os.environ[_var] = _path

from . import _cleave  # noqa: E402  (after the environment is set)

Error = _cleave.Error
Error.__doc__ = """A failure Cleave reports: an unsupported op, a shape that does
not divide, a bad file, a batch of the wrong shape, a rank that died.

``str(error)`` is the message ``cleave`` prints after ``cleave: error:``."""
Error.__module__ = "cleave"

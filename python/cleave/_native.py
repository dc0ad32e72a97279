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


class ArgumentError(Error, ValueError):
    """A value Cleave cannot use (``zero="one"``, ``seed="abc"``, a tensor
    of the wrong shape): a :class:`cleave.Error` that is also a
    ``ValueError``."""


class ArgumentTypeError(Error, TypeError):
    """An argument of the wrong type (example_inputs as a list): a
    :class:`cleave.Error` that is also a ``TypeError``."""


class FileError(Error, OSError):
    """A file or folder Cleave cannot read or write (a full disk, a folder
    of the user's own files): a :class:`cleave.Error` that is also an
    ``OSError``."""


for _cls in (ArgumentError, ArgumentTypeError, FileError):
    _cls.__module__ = "cleave"


def file_error(what: str, e: BaseException) -> "FileError":
    """e (an OSError or shutil.Error) as one FileError naming what."""
    import shutil
    if isinstance(e, shutil.Error) and e.args and isinstance(e.args[0], list) \
            and e.args[0] and len(e.args[0][0]) == 3:
        # copytree's list of (source, target, why): the first failure.
        why = str(e.args[0][0][2])
        if why.startswith("[Errno") and "] " in why:
            why = why[why.index("] ") + 2:]
        return FileError(f"{what}: {why}")
    detail = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
    if isinstance(e, OSError) and e.filename:
        detail = f"{detail}: '{e.filename}'"
    return FileError(f"{what}: {detail}")

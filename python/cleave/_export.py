"""A torch.nn.Module as an ONNX model Cleave compiles, and the map from the
module's state_dict names to the model's tensors.

The module is exported with torch.onnx (opset 17, constant folding off, so
initializers keep their state_dict names) from a copy: tracing runs the
forward pass, which in training mode would move BatchNorm's running
statistics. The weights the bundle starts from are the module's own,
written to a safetensors file the compiler reads (``--weights``).
"""

import copy
import inspect
import io
import json
import os
import stat
import struct
import warnings
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

import numpy as np

from ._capture import refuse_value_reads
from ._native import Error

_NUMPY_DTYPES = {
    "float32": "F32", "float64": "F64", "float16": "F16", "int64": "I64",
    "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8",
    "bool": "BOOL",
}


def to_numpy(value, what: str) -> np.ndarray:
    """A torch tensor or array-like as a C-contiguous numpy array."""
    try:
        import torch
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu()
            if value.dtype == torch.bfloat16:
                # numpy has no bfloat16; float32 holds every value exactly.
                value = value.float()
            return np.require(value.numpy(), requirements="C")
    except ImportError:
        pass
    if isinstance(value, np.ndarray):
        # np.require, not ascontiguousarray, which makes 0-d arrays 1-d.
        return np.require(value, requirements="C")
    raise Error(f"{what} must be a torch tensor or a numpy array, not "
                f"{type(value).__name__}")


@dataclass
class Bfloat16:
    """A bfloat16 tensor's bits (numpy has no bfloat16), written as BF16."""
    bits: np.ndarray  # uint16


def write_safetensors(path: str, tensors: Dict[str, np.ndarray]) -> None:
    """The safetensors format: a little-endian u64 header length, the JSON
    header (dtype, shape, byte offsets), the raw data."""
    header, offset, blobs = {}, 0, []
    for name, array in tensors.items():
        if isinstance(array, Bfloat16):
            array, dtype = np.require(array.bits, requirements="C"), "BF16"
        else:
            array = np.require(array, requirements="C")
            dtype = _NUMPY_DTYPES.get(str(array.dtype))
        if dtype is None:
            raise Error(f"tensor '{name}' has dtype {array.dtype}, which "
                        "Cleave cannot store")
        data = array.tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
        f.flush()
        os.fsync(f.fileno())


def read_safetensors(path: str) -> Dict[str, np.ndarray]:
    """The tensors of a safetensors file, each checked against the file
    (a header that fits, known dtypes, byte ranges inside the data that
    match their shapes): the file may come from someone else, and nothing
    in it is code."""
    kinds = {v: k for k, v in _NUMPY_DTYPES.items()}
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would block
            raise Error(f"cannot read '{path}': it is not a regular file")
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise Error(f"cannot read '{path}': {e.strerror or e}") from None

    def bad(why):
        return Error(f"'{path}' is not a valid safetensors file: {why}")
    if len(data) < 8:
        raise bad("it is shorter than its header's length")
    (length,) = struct.unpack("<Q", data[:8])
    if length > len(data) - 8:
        raise bad(f"its header claims {length} bytes")
    try:
        header = json.loads(data[8:8 + length].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise bad("its header is not JSON") from None
    if not isinstance(header, dict):
        raise bad("its header is not a table")
    body = memoryview(data)[8 + length:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = np.dtype(kinds[info["dtype"]])
            shape = [int(d) for d in info["shape"]]
            begin, end = (int(o) for o in info["data_offsets"])
        except (KeyError, TypeError, ValueError, OverflowError):
            raise bad(f"tensor '{name}' has no dtype, shape and offsets "
                      "Cleave reads") from None
        count = 1
        for d in shape:
            if d < 0:
                raise bad(f"tensor '{name}' has a negative dimension")
            count *= d
        if not 0 <= begin <= end <= len(body) or \
                end - begin != count * dtype.itemsize:
            raise bad(f"tensor '{name}' has bytes {begin}..{end}, not the "
                      f"{count * dtype.itemsize} its shape needs in the file")
        try:
            out[name] = np.frombuffer(body[begin:end], dtype=dtype).reshape(
                shape).copy()
        except ValueError as e:  # numpy's limits (at most 64 dimensions)
            raise bad(f"tensor '{name}': {e}") from None
    return out


@dataclass
class Exported:
    """What the export produced and how the module's names map onto it."""
    model: str                      # the .onnx file
    weights: str                    # the safetensors file of its initializers
    inputs: List[str]               # graph inputs, in forward's order
    frozen: List[str]               # initializers that must not train
    scalars: List[str] = field(default_factory=list)  # 0-d parameters
    # state_dict key -> the module's own dtype ("bfloat16", "float16") of a
    # tensor the bundle holds in float32 (the master weights)
    dtypes: Dict[str, str] = field(default_factory=dict)
    # the module's graph in eval mode (dropout off, BatchNorm on its running
    # statistics) where it differs from the training one; "" otherwise
    eval_model: str = ""
    # state_dict key -> ("bundle", initializer) | ("module", tensor) |
    # ("counter", tensor): BatchNorm's num_batches_tracked, + steps
    sources: Dict[str, Tuple[str, object]] = field(default_factory=dict)


def _ordered_arguments(module, example_inputs) -> Tuple[tuple, List[str]]:
    """forward's arguments in its signature's order: a positional prefix,
    then a dict of the rest (torch.onnx's convention for keyword args)."""
    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params
             if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD,
                           p.KEYWORD_ONLY)]
    takes_kwargs = any(p.kind == p.VAR_KEYWORD for p in params)
    for key in example_inputs:
        if key not in names and not takes_kwargs:
            raise Error(f"example_inputs has '{key}', which is not an "
                        f"argument of {type(module).__name__}.forward (its "
                        f"arguments: {', '.join(names) or 'none'})")
    order = [n for n in names if n in example_inputs]
    order += [k for k in example_inputs if k not in order]
    positional = []
    for n in names:
        if n not in example_inputs:
            break
        positional.append(n)
    rest = {k: example_inputs[k] for k in order if k not in positional}
    args = tuple(example_inputs[n] for n in positional)
    if rest:
        args = args + (rest,)
    return args, order


def _counters(module) -> Dict[str, object]:
    """BatchNorm layers in training mode count their batches."""
    import torch
    out = {}
    for name, m in module.named_modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and \
                m.training and m.track_running_stats and \
                m.num_batches_tracked is not None:
            out[(name + "." if name else "") + "num_batches_tracked"] = \
                m.num_batches_tracked.detach().clone()
    return out


LOW_PRECISION = ("bfloat16", "float16")


def _graph_of(proto):
    """What a graph computes, without its names' spelling elsewhere."""
    return [(n.op_type, n.domain, list(n.input), list(n.output),
             [a.SerializeToString() for a in n.attribute])
            for n in proto.graph.node]


def _reads_training_mode(module) -> bool:
    """Whether some class of `module`'s submodules reads ``.training``
    (nn.Dropout, BatchNorm, a forward branching on self.training): only
    then can the eval-mode graph differ. A class whose source cannot be
    read counts as one that does."""
    import torch
    for m in module.modules():
        for cls in type(m).__mro__:
            if cls is torch.nn.Module or cls is object:
                break
            try:
                source = inspect.getsource(cls)
            except (OSError, TypeError):
                return True
            if ".training" in source:  # code, not a docstring's word
                return True
    return False


def _export_eval_graph(module, args, order, opset, train_proto, path) -> str:
    """Exports `module` in eval mode to `path` where that graph differs
    from the training one (dropout, BatchNorm, or forward code reading
    self.training); returns the path, or "" where the two are one."""
    import torch
    import onnx

    module.eval()
    try:
        data = _to_onnx(module, module, args, order, opset,
                        torch.onnx.TrainingMode.EVAL, " in eval mode")
    finally:
        module.train()
    if _graph_of(onnx.load_from_string(data)) == _graph_of(train_proto):
        return ""
    with open(path, "wb") as f:
        f.write(data)
    return path


def _to_onnx(module, watched, args, order, opset, mode, what="") -> bytes:
    """torch.onnx's export of `module` (refusing what the trace of
    `watched` would freeze), or one cleave.Error."""
    import torch

    buffer = io.BytesIO()
    try:
        # The tracer's notes are about tracing in general (the shapes are
        # fixed here anyway); a value read from a tensor into Python, which
        # the trace would freeze, is refused instead (_capture.py).
        with warnings.catch_warnings(), refuse_value_reads(watched):
            warnings.simplefilter("ignore")
            torch.onnx.export(module, args, buffer, input_names=order,
                              opset_version=opset, do_constant_folding=False,
                              training=mode)
    except Error:
        raise
    except Exception as e:  # the exporter raises many types
        first = str(e).strip().splitlines()[0] if str(e) else repr(e)
        raise Error(f"torch.onnx could not export {type(watched).__name__}"
                    f"{what}: {first}") from e
    return buffer.getvalue()


def float32_copy(module):
    """A copy of ``module`` whose bfloat16 and float16 tensors are float32
    (the master weights Cleave trains), and those tensors' dtypes by
    state_dict key."""
    import torch
    low = {k: str(v.dtype).replace("torch.", "")
           for k, v in module.state_dict().items()
           if v.dtype in (torch.bfloat16, torch.float16)}
    out = copy.deepcopy(module)
    for t in list(out.parameters()) + list(out.buffers()):
        if t.dtype in (torch.bfloat16, torch.float16):
            t.data = t.data.float()
    return out, low


def _quantized_initializers(proto) -> set:
    """The compiler's rule for int8 weights: int8 initializers of rank >= 2
    whose every reader is a Cast to a float type."""
    import onnx
    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
              onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE}
    found = {t.name for t in proto.graph.initializer
             if t.data_type == onnx.TensorProto.INT8 and len(t.dims) >= 2}
    widened = set()
    for node in proto.graph.node:
        for name in node.input:
            if name not in found:
                continue
            to = next((a.i for a in node.attribute if a.name == "to"), None)
            if node.op_type == "Cast" and node.domain in ("", "ai.onnx") \
                    and to in floats:
                widened.add(name)
            else:
                found.discard(name)
    return found & widened


def _held(value):
    """A frozen bfloat16 / float16 tensor as the checkpoint holds it: the
    compiler keeps such a weight in its own dtype (no master to train)."""
    import torch
    if value.dtype == torch.bfloat16:
        return Bfloat16(value.contiguous().view(torch.int16).numpy().view(
            np.uint16))
    return value.numpy()


def export_module(module, example_inputs: dict, directory: str,
                  opset: int = 17, write_weights: bool = True) -> Exported:
    """Exports \\p module into \\p directory; see the module docstring.
    Without \\p write_weights only the graph is written (another batch
    shape's export: the first export's weights serve every shape)."""
    import torch
    import onnx

    if not isinstance(example_inputs, dict) or not example_inputs:
        raise Error("example_inputs must be a dict from the forward's "
                    "argument names to tensors")
    tensors = {}
    for k, v in example_inputs.items():
        tensors[k] = torch.from_numpy(to_numpy(v, f"example input '{k}'"))
    args, order = _ordered_arguments(module, tensors)
    state = module.state_dict(keep_vars=True)
    original = {k: v.detach().clone() for k, v in state.items()}
    # A bfloat16 or float16 module trains on float32 master weights and gets
    # its own dtype back (Model.state_dict).
    to_export, low = float32_copy(module)
    trainable = {k for k, v in state.items()
                 if isinstance(v, torch.nn.Parameter) and v.requires_grad}
    counters = _counters(module)

    path = os.path.join(directory, "model.onnx")
    mode = (torch.onnx.TrainingMode.TRAINING if module.training
            else torch.onnx.TrainingMode.EVAL)
    data = _to_onnx(to_export, module, args, order, opset, mode)
    proto = onnx.load_from_string(data)
    with open(path, "wb") as f:
        f.write(data)
    eval_model = _export_eval_graph(
        to_export, args, order, opset, proto,
        os.path.join(directory, "model-eval.onnx")) \
        if module.training and _reads_training_mode(module) else ""

    import onnx.numpy_helper
    initializers = {t.name for t in proto.graph.initializer}
    # Scalar initializers are the graph's literals, unless the module says
    # one is a parameter (a learned temperature).
    scalar_params = {k for k in trainable if state[k].dim() == 0}
    float_inits = {t.name for t in proto.graph.initializer
                   if t.data_type == onnx.TensorProto.FLOAT and
                   (t.dims or t.name in scalar_params)}
    # int8 matrices read through a Cast to float: weight-only quantized
    # weights, which the compiler holds as frozen int8 weights (its
    # importer's rule; OnnxImporter.cpp markQuantized).
    float_inits |= _quantized_initializers(proto)
    graph_inputs = [i.name for i in proto.graph.input
                    if i.name not in initializers]
    missing = [n for n in order if n not in graph_inputs]
    if missing:
        raise Error(f"example input '{missing[0]}' is not used by "
                    f"{type(module).__name__}.forward (torch.onnx dropped "
                    "it); leave it out of example_inputs")

    exported = Exported(path, os.path.join(directory, "weights.safetensors"),
                        graph_inputs, [], scalars=sorted(
                            scalar_params & float_inits),
                        eval_model=eval_model)
    # Tied tensors are one object under several names; the exporter keeps
    # the first name.
    by_identity = {}
    for key, value in state.items():
        if key in float_inits:
            by_identity.setdefault(id(value), key)
    weights = {}
    for key, value in state.items():
        init = key if key in float_inits else by_identity.get(id(value))
        if key in counters:
            exported.sources[key] = ("counter", counters[key])
        elif init is not None:
            exported.sources[key] = ("bundle", init)
            if key not in low:
                weights[init] = original[key].numpy()
            elif key in trainable:  # its float32 master
                weights[init] = original[key].float().numpy()
            else:
                weights[init] = _held(original[key])
            if key in low:
                exported.dtypes[key] = low[key]
        else:
            exported.sources[key] = ("module", original[key])
    # Whatever is not a trainable parameter stays as it is (buffers; tables
    # the exporter turned into initializers).
    named = {init for src, init in exported.sources.values() if src == "bundle"}
    trained_inits = {exported.sources[k][1] for k in trainable
                     if exported.sources.get(k, ("", ""))[0] == "bundle"}
    exported.frozen = sorted((float_inits - trained_inits))
    for t in proto.graph.initializer:
        if t.name in float_inits and t.name not in named:
            weights[t.name] = onnx.numpy_helper.to_array(t)
    if write_weights:
        write_safetensors(exported.weights, weights)
    return exported

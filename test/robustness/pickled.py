"""The catalogue's sweep of issue 33's promise that no file Cleave reads
runs code: every file a command or the Python package reads is replaced, in
turn, by a pickle that would create a marker file when unpickled. Each
case must refuse the file in one line, and the catalogue's snapshot shows
that no marker appeared (no code ran).
"""
import io
import os
import pickle
import zipfile


class RunsCode:
    """Pickles to a call of os.system that makes a marker file."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, ("touch '%s'" % self.marker,))


def payload(marker, protocol=pickle.DEFAULT_PROTOCOL):
    return pickle.dumps({"weights": RunsCode(marker)}, protocol=protocol)


def torchscript_with_pickle(source, path, marker):
    """A TorchScript archive (torch.jit.save's zip) whose data.pkl, the
    record libtorch unpickles first, calls os.system."""
    with zipfile.ZipFile(source) as z:
        records = [(i, z.read(i.filename)) for i in z.infolist()]
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as z:
        for info, data in records:
            if info.filename.endswith("/data.pkl"):
                data = payload(marker, protocol=2)  # the one libtorch reads
            z.writestr(info.filename, data)
    with open(path, "wb") as f:
        f.write(out.getvalue())


def cases(F, U, W, add, copy_of, write, py, env):
    """Each file Cleave reads, as a pickle. py(name): the argv of a Python
    package scenario (None without the package)."""
    c = [F.cleave]
    pk = lambda: payload(W("PWNED"))  # noqa: E731
    trains = ["--steps", "1", "--inputs", F.inputs]
    say = "a pickle in place of %s runs nothing"
    add("run", say % "plan.pb", c + ["run", W("b")] + trains,
        r"bundle plan '.*plan\.pb' is corrupt or truncated",
        prepare=lambda: (copy_of(F.bundle, W("b")), write(W("b", "plan.pb"), pk())))
    add("run", say % "a weights file", c + ["run", W("b")] + trains,
        r"rank-0\.safetensors",
        prepare=lambda: (copy_of(F.bundle, W("b")), write(
            W("b", "weights", "rank-0.safetensors"), pk())))
    add("checkpoint", say % "checkpoint.pb", c + ["run", F.bundle] + trains + [
        "--resume", W("ck")], r"checkpoint index '.*checkpoint\.pb' is corrupt",
        prepare=lambda: (copy_of(F.step, W("ck")), write(W("ck", "checkpoint.pb"), pk())))
    add("checkpoint", say % "a checkpoint's file", c + ["run", F.bundle] + trains + [
        "--resume", W("ck")], r"rank-0\.safetensors",
        prepare=lambda: (copy_of(F.step, W("ck")), write(
            W("ck", "rank-0.safetensors"), pk())))
    add("export", say % "an exported model copy", c + ["export", W("b"), "-o",
        W("o.onnx")], r"model\.onnx",
        prepare=lambda: (copy_of(F.bundle, W("b")), write(W("b", "model.onnx"), pk())))
    add("import", say % "model.onnx", c + ["import", W("m.onnx"), "--input", "x=5x4"],
        r"m\.onnx", prepare=lambda: write(W("m.onnx"), pk()))
    add("import", say % "a TorchScript file", c + ["import", W("m.pt"), "--input",
        "x=5x4"], r"m\.pt' is not a TorchScript module",
        prepare=lambda: write(W("m.pt"), pk()))
    add("import", say % "a TorchScript archive's data.pkl", c + [
        "import", W("m.pt"), "--input", "x=2x4"], r"m\.pt",
        prepare=lambda: torchscript_with_pickle(
            os.path.join(F.ts, "tiny.pt"), W("m.pt"), W("PWNED")))
    add("run", say % "an input .npy", c + ["run", F.bundle, "--steps", "1", "--inputs",
        W("in")], r"x\.npy",
        prepare=lambda: (copy_of(F.inputs, W("in")), write(W("in", "x.npy"), pk())))
    add("run", say % "an object array .npy", c + ["run", F.bundle, "--steps", "1",
        "--inputs", W("in")], r"x\.npy",
        prepare=lambda: (copy_of(F.inputs, W("in")), object_npy(
            W("in", "x.npy"), W("PWNED"))))
    if py is None:
        return
    for name in ("module.json", "module.safetensors", "bundle/plan.pb"):
        def prepare(name=name):
            copy_of(os.path.join(U.py_fx, "ckpt"), W("ckpt"))
            write(W("ckpt", *name.split("/")), pk())
        add("python", "Model.resume: " + say % name, py("resume"),
            r"ckpt", env=env, prepare=prepare)


def object_npy(path, marker):
    import numpy as np
    a = np.empty(5, dtype=object)
    a[0] = RunsCode(marker)
    np.save(path, a, allow_pickle=True)

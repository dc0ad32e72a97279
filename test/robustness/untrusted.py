"""The catalogue's cases of issue 33: bundles, checkpoints and Python state
as untrusted input, small files that try to make the compiler explode, and
writes that must not lose the user's files (catalogue.py runs them with
the rest; the fixtures they share are made by UntrustedFixtures).

Paths stored inside plans and checkpoint indexes are edited through the
protobuf schema itself (protoc compiles runtime/plan/plan.proto for
Python), so a case sets exactly the field it means to.
"""
import contextlib
import os
import pickle
import shutil
import subprocess
import sys

import pickled as pickle_sweep

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
PY = sys.executable


def sh(cmd, **kw):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, **kw)
    if r.returncode:
        sys.exit("catalogue: fixture command failed: %s\n%s" % (" ".join(cmd),
                                                                r.stdout))
    return r.stdout


class UntrustedFixtures:
    """Made once under FX: the hostile models, plan_pb2, the Python
    package's checkpoint, and whether tmpfs can be mounted here (the full
    and read-only disk cases need it; without it they are left out and
    said so)."""

    def __init__(self, cleave, fx):
        self.dir = os.path.join(fx, "u")
        sh([PY, os.path.join(HERE, "Inputs", "untrusted_models.py"), self.dir])
        self.pb = os.path.join(fx, "pb")
        os.makedirs(self.pb)
        sh(["protoc", "--python_out=" + self.pb, "--proto_path=" +
            os.path.join(ROOT, "runtime", "plan"),
            os.path.join(ROOT, "runtime", "plan", "plan.proto")])
        sys.path.insert(0, self.pb)
        self.python = python_path(cleave)
        self.py_fx = os.path.join(fx, "py")
        if self.python:
            os.makedirs(self.py_fx)
            sh([PY, os.path.join(HERE, "Inputs", "py_case.py"), self.py_fx, "-",
                "make"], env=python_env(self.python))
        self.tmpfs = can_mount_tmpfs(fx)

    def model(self, name):
        return os.path.join(self.dir, name)


def python_path(cleave):
    """build/python beside build/bin/cleave, if the package was built."""
    d = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(cleave))),
                     "python")
    return d if os.path.isfile(os.path.join(d, "cleave", "__init__.py")) else ""


def python_env(path):
    return dict(os.environ, PYTHONPATH=path, PYTHONDONTWRITEBYTECODE="1",
                OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")


def can_mount_tmpfs(fx):
    probe = os.path.join(fx, "tmpfs-probe")
    os.makedirs(probe)
    ok = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", probe],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    if ok:
        subprocess.run(["umount", probe])
    os.rmdir(probe)
    return ok


MOUNTS = []


def mount(path, size, read_only=False, fill=False):
    """A tmpfs of `size` at `path` for one case, which unmount_all
    removes after it: full (`fill`: a page left, enough to create files,
    not to finish writing one) or read-only (refusing every write, root's
    too)."""
    os.makedirs(path, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s" % size, "tmpfs", path],
                   check=True)
    MOUNTS.append(path)
    if fill:
        fill_up(path)
    if read_only:
        subprocess.run(["mount", "-o", "remount,ro", path], check=True)


def fill_up(path):
    """Fills the disk at `path` but for a page."""
    filler = os.path.join(path, ".filler")
    with open(filler, "wb", buffering=0) as f:
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 4096)
    os.truncate(filler, os.path.getsize(filler) - 4096)


def unmount_all():
    while MOUNTS:
        subprocess.run(["umount", "-l", MOUNTS.pop()])


def edit(path, kind, change):
    """Rewrites the plan or checkpoint index at \\p path with \\p change."""
    import plan_pb2
    msg = getattr(plan_pb2, kind)()
    with open(path, "rb") as f:
        msg.ParseFromString(f.read())
    change(msg)
    with open(path, "wb") as f:
        f.write(msg.SerializeToString())


def rename_file(msg, old, new):
    """Every mention of stored file \\p old in \\p msg becomes \\p new."""
    for d in msg.files:
        if d.path == old:
            d.path = new
    for t in msg.tensors:
        for s in t.slices:
            if s.file == old:
                s.file = new
    if msg.model_file == old:
        msg.model_file = new


def cases(F, U, W, add, copy_of, write):
    """The cases; F: the catalogue's fixtures, U: UntrustedFixtures."""
    c = [F.cleave]
    run = c + ["run"]
    rk = "weights/rank-0.safetensors"
    ck0 = "rank-0.safetensors"

    def bundle_with(name, **links):
        """A copy of the MLP bundle whose plan names its weights \\p name;
        the outside file it would read holds real weights, so a run that
        read it would train and exit 0."""
        def prepare():
            copy_of(F.bundle, W("b"))
            os.makedirs(W("outside"))
            shutil.copy(W("b", rk), W("outside", "rank-0.safetensors"))
            edit(W("b", "plan.pb"), "Plan",
                 lambda p: rename_file(p, rk, name(W) if callable(name) else name))
        return prepare

    def ckpt_with(name):
        def prepare():
            copy_of(F.step, W("ck"))
            shutil.copy(W("ck", ck0), W("outside.safetensors"))
            edit(W("ck", "checkpoint.pb"), "Checkpoint",
                 lambda p: rename_file(p, ck0, name(W) if callable(name) else name))
        return prepare

    trains = [F.bundle, "--steps", "1", "--inputs", F.inputs]

    # --- paths stored inside a bundle's plan ---------------------------------
    out = r"names the file '%s', which leads out of its folder"
    add("bundle", "weights at ../outside", run + [W("b")] + trains[1:],
        out % r"\.\./outside/rank-0\.safetensors", prepare=bundle_with(
            "../outside/rank-0.safetensors"))
    add("bundle", "weights at weights/../../outside", run + [W("b")] + trains[1:],
        out % r"weights/\.\./\.\./outside/rank-0\.safetensors", prepare=bundle_with(
            "weights/../../outside/rank-0.safetensors"))
    add("bundle", "weights at an absolute path", run + [W("b")] + trains[1:],
        r"names the file '/.*outside/rank-0\.safetensors', an absolute path",
        prepare=bundle_with(lambda W: W("outside", "rank-0.safetensors")))
    add("bundle", "weights at ~/", run + [W("b")] + trains[1:],
        r"names the file '~/rank-0\.safetensors', an absolute path",
        prepare=bundle_with("~/rank-0.safetensors"))
    add("bundle", "weights named by an empty string", run + [W("b")] + trains[1:],
        r"names the file '', which is empty", prepare=bundle_with(""))
    add("bundle", "weights named '.', the bundle itself", run + [W("b")] + trains[1:],
        r"names the file '\.', which is its folder, not a file", prepare=bundle_with("."))

    def link_out():
        copy_of(F.bundle, W("b"))
        os.makedirs(W("outside"))
        shutil.move(W("b", rk), W("outside", "rank-0.safetensors"))
        os.symlink(W("outside", "rank-0.safetensors"), W("b", rk))
    add("bundle", "weights a symbolic link out of the bundle", run + [W("b")] + trains[1:],
        r"names the file 'weights/rank-0\.safetensors', which a symbolic link leads out",
        prepare=link_out)
    add("bundle", "inspect a bundle whose weights lead out", c + ["inspect", W("b")],
        out % r"\.\./outside/rank-0\.safetensors", prepare=bundle_with(
            "../outside/rank-0.safetensors"))
    add("bundle", "export a bundle whose weights lead out", c + ["export", W("b"), "-o",
        W("o.safetensors")], out % r"\.\./outside/rank-0\.safetensors",
        prepare=bundle_with("../outside/rank-0.safetensors"))

    def model_file(name, link=False):
        def prepare():
            copy_of(F.bundle, W("b"))
            shutil.copy(F.gpt, W("other.onnx"))
            if link:
                os.remove(W("b", "model.onnx"))
                os.symlink(W("other.onnx"), W("b", "model.onnx"))
            else:
                edit(W("b", "plan.pb"), "Plan",
                     lambda p: rename_file(p, "model.onnx", name))
        return prepare
    add("export", "a bundle whose model copy is ../other.onnx", c + ["export", W("b"), "-o",
        W("o.onnx")], r"names the model copy '\.\./other\.onnx', which leads out",
        prepare=model_file("../other.onnx"))
    add("export", "a bundle whose model copy is absolute", c + ["export", W("b"), "-o",
        W("o.onnx")], r"names the model copy '/etc/passwd', an absolute path",
        prepare=model_file("/etc/passwd"))
    add("export", "a bundle whose model copy links out", c + ["export", W("b"), "-o",
        W("o.onnx")], r"names the model copy 'model\.onnx', which a symbolic link leads out",
        prepare=model_file("", link=True))
    add("run", "a bundle whose model copy is ../other.onnx", run + [W("b")] + trains[1:],
        r"names the model copy '\.\./other\.onnx', which leads out",
        prepare=model_file("../other.onnx"))
    add("run", "a checkpoint copies no model from outside the bundle", run + [W("b")] +
        trains[1:] + ["--checkpoint", W("ck")],
        r"names the model copy 'model\.onnx', which a symbolic link leads out",
        prepare=lambda: (model_file("", link=True)(), os.makedirs(W("ck"))))

    # --- paths stored inside a checkpoint index ------------------------------
    rck = run + trains
    add("checkpoint", "--resume an index naming ../outside", rck + ["--resume", W("ck")],
        out % r"\.\./outside\.safetensors", prepare=ckpt_with("../outside.safetensors"))
    add("checkpoint", "--resume an index naming ../../outside", rck + ["--resume", W("ck")],
        out % r"\.\./\.\./outside\.safetensors",
        prepare=ckpt_with("../../outside.safetensors"))
    add("checkpoint", "--resume an index naming an absolute path", rck + ["--resume",
        W("ck")], r"names the file '/.*outside\.safetensors', an absolute path",
        prepare=ckpt_with(lambda W: W("outside.safetensors")))
    add("checkpoint", "--resume an index naming a file through a link out", rck + [
        "--resume", W("ck")], r"names the file 'rank-0\.safetensors', which a symbolic "
        r"link leads out", prepare=lambda: (
            copy_of(F.step, W("ck")), shutil.move(W("ck", ck0), W("outside.safetensors")),
            os.symlink(W("outside.safetensors"), W("ck", ck0))))
    add("checkpoint", "--resume an index with step -5", rck + ["--resume", W("ck")],
        r"checkpoint index '.*checkpoint\.pb' has step -5, which is negative",
        prepare=lambda: (copy_of(F.step, W("ck")), edit(
            W("ck", "checkpoint.pb"), "Checkpoint", lambda p: setattr(p, "step", -5))))
    add("checkpoint", "--resume an index whose model copy is ../x", rck + ["--resume",
        W("ck")], r"names the model copy '\.\./model\.onnx', which leads out",
        prepare=lambda: (copy_of(F.step, W("ck")), edit(
            W("ck", "checkpoint.pb"), "Checkpoint",
            lambda p: setattr(p, "model_file", "../model.onnx"))))
    add("export", "a checkpoint naming ../outside", c + ["export", W("ck"), "-o",
        W("o.safetensors")], out % r"\.\./outside\.safetensors",
        prepare=ckpt_with("../outside.safetensors"))
    add("export", "a checkpoint whose model copy links out", c + ["export", W("ck"), "-o",
        W("o.onnx")], r"names the model copy 'model\.onnx', which a symbolic link leads out",
        prepare=lambda: (copy_of(F.step, W("ck")), shutil.copy(F.gpt, W("other.onnx")),
                         os.remove(W("ck", "model.onnx")),
                         os.symlink(W("other.onnx"), W("ck", "model.onnx"))))

    # --- command line ----------------------------------------------------------
    x, ce = ["--input", "x=5x4"], ["--loss", "cross_entropy"]
    comp = c + ["compile", F.mlp, *x, *ce, "-o", W("b")]
    add("compile", "--mesh tp=2,tp=4", comp + ["--mesh", "tp=2,tp=4"],
        r"--mesh 'tp=2,tp=4' gives the axis tp twice$")
    add("compile", "--mesh dp=1,tp=2,dp=1", comp + ["--mesh", "dp=1,tp=2,dp=1"],
        r"gives the axis dp twice$")
    add("compile", "--tp past the widest weight", comp + ["--tp", "100000"],
        r"--tp 100000 is more ranks than the widest weight dimension of '.*mlp\.onnx' "
        r"\(\d+\) can be split over")
    add("compile", "--devices a million for an MLP", comp + ["--devices", "1000000"],
        r"no mesh of 1000000 devices can train this model")
    add("import", "--max-archive-bytes not a number", c + ["import", F.mlp, *x,
        "--max-archive-bytes", "lots"], r"--max-archive-bytes 'lots' must be a positive")
    add("compile", "--max-archive-bytes 0", comp + ["--max-archive-bytes", "0"],
        r"--max-archive-bytes '0' must be a positive")

    # --- small files that describe huge work ---------------------------------
    u = U.model
    imp = lambda name, *flags: c + ["import", u(name), *flags]  # noqa: E731
    add("import", "a float64 constant of 1e-300", imp("f64_tiny.onnx"),
        r"initializer 'c' holds float64 values beyond float32's range")
    add("compile", "a float64 constant of 1e-300", c + ["compile", u("f64_tiny.onnx"),
        "--loss", "mse", "-o", W("b")], r"beyond float32's range")
    add("import", "Range(INT64_MIN, INT64_MAX, 1)", imp("range_int64_full.onnx"),
        r"\(Range, opset 17\): has more elements than fit in memory")
    add("import", "Range(0, 1, 1e-30)", imp("range_float_tiny_step.onnx"),
        r"\(Range, opset 17\): has 1\.0+e\+30 elements")
    add("import", "Range to NaN", imp("range_nan.onnx"),
        r"start, limit and delta must be finite")
    add("import", "Range(0, 1e12, 1) stays small", imp("range_huge.onnx", "-o", W("r.mlir")),
        "", ok=True)
    add("import", "Range(0, -1e30, 1e-10) is empty", imp("range_far_below.onnx", "-o",
        W("r.mlir")), "", ok=True)
    add("import", "a convolution dilation of 2^62", imp("conv_dilation_huge.onnx"),
        r"\(Conv, opset 17\): the window of spatial dimension 0 \(kernel 3, dilation "
        r"4611686018427387904\) spans more than any input can hold")
    add("import", "a MaxPool kernel of 2^62", imp("maxpool_kernel_huge.onnx"),
        r"\(MaxPool, opset 17\): the window of spatial dimension 0 \(kernel "
        r"4611686018427387904")
    add("import", "a MaxPool window wider than its input",
        imp("maxpool_kernel_wider_than_input.onnx"),
        r"spans 9 \(kernel 9, dilation 1\), more than the padded input's 8")
    add("import", "three nested Loops of 1,000", imp("nested_loops.onnx"),
        r"\(Loop, opset 17\): unrolls its subgraphs past 524288 nodes in all")
    add("import", "30,000 unused initializers", imp("initializers_30k.onnx", "-o",
        W("i.mlir")), "", ok=True)
    add("import", "OneHot of depth NaN", imp("onehot_depth_nan.onnx"),
        r"\(OneHot, opset 17\): depth is NaN$")
    # Initializers a node reads as compile-time values are the graph's
    # constants (and do not train).
    add("import", "Resize with roi and scales as initializers",
        imp("resize_roi_and_scales.onnx", "-o", W("resize.mlir")), "", ok=True)
    add("import", "a TorchScript archive inflating past 1 GiB", imp("inflates_1280mb.pt"),
        r"inflates_1280mb\.pt' is a malformed TorchScript archive: it inflates to more "
        r"than 1073741824 bytes in all")
    add("import", "a TorchScript archive past --max-archive-bytes",
        imp("inflates_64mb.pt", "--max-archive-bytes", "1000000"),
        r"inflates to more than 1000000 bytes in all")

    # --- writes that keep the user's files -------------------------------------
    add("import", "-o a folder", c + ["import", F.mlp, *x, "-o", F.mine],
        r"cannot write the imported IR to '.*mine': it is a directory")
    add("import", "-o /dev/null writes into the device", c + ["import", F.mlp, *x, "-o",
        os.devnull], "", ok=True)
    add("import", "-o in a missing folder", c + ["import", F.mlp, *x, "-o",
        W("nowhere", "out.mlir")], r"cannot write the imported IR to '.*nowhere/out\.mlir'")
    if U.tmpfs:
        def full(size="1m", **kw):
            return lambda: mount(W("disk"), size, **kw)
        add("import", "-o onto a full disk keeps the old file", c + [
            "import", u("initializers_30k.onnx"), "-o", W("disk", "out.mlir")],
            r"cannot write the imported IR to '.*out\.mlir': No space left on device",
            prepare=lambda: (full("1m")(), write(W("disk", "out.mlir"), b"old IR\n")))
        add("compile", "-o onto a full disk", comp[:-1] + [W("disk", "b")],
            r"No space left on device", prepare=full("1m", fill=True))
        add("export", "-o onto a full disk keeps the old export", c + [
            "export", F.gpt_bundle, "-o", W("disk", "o.safetensors")],
            r"No space left on device", prepare=lambda: (
                mount(W("disk"), "64k"), write(W("disk", "o.safetensors"),
                                               b"old export"),
                fill_up(W("disk"))))
        add("run", "--checkpoint onto a full disk leaves no temporary", run + trains + [
            "--checkpoint", W("disk")], r"No space left on device",
            prepare=full("1m", fill=True), steps=True)
        add("run", "--dump onto a read-only disk, before any step", run + trains + [
            "--dump", W("disk", "dump")], r"--dump '.*dump' cannot be written: "
            r"Read-only file system", prepare=full("64k", read_only=True))
        add("run", "--checkpoint onto a read-only disk", run + trains + [
            "--checkpoint", W("disk")], r"(--checkpoint|checkpoint directory).*"
            r"Read-only file system", prepare=full("64k", read_only=True))

    # --- the Python package ------------------------------------------------------
    if U.python:
        py = lambda name: [PY, os.path.join(HERE, "Inputs", "py_case.py"),  # noqa: E731
                           U.py_fx, W(), name]
        env = python_env(U.python)

        def ckpt(change=None):
            def prepare():
                copy_of(os.path.join(U.py_fx, "ckpt"), W("ckpt"))
                if change:
                    change(W("ckpt"))
            return prepare

        def pickled(d):
            # A pickle that runs a command when it is loaded: W/PWNED would
            # be a file left behind, which the catalogue sees.
            os.remove(os.path.join(d, "module.json"))
            write(os.path.join(d, "module.pt"), pickle.dumps(
                {"sources": RunsCode(W("PWNED"))}))

        def json_text(text):
            return lambda d: write(os.path.join(d, "module.json"), text.encode())

        def renamed(d):
            p = os.path.join(d, "module.json")
            write(p, open(p).read().replace('"name": "0.weight"',
                                            '"name": "no.such.weight"').encode())

        def user_folder():
            os.makedirs(W("user", "bundle"))
            write(W("user", "bundle", "notes.txt"), b"precious\n")
            write(W("user", "module.pt"), b"the user's own file\n")

        resume = [
            ("a pickle in module.pt runs nothing", pickled,
             r"module\.pt holds more than tensors and names \(refused unread"),
            ("module.json not JSON", json_text("{not json"), r"cannot read module\.json"),
            ("module.json of another format", json_text(
                '{"format": "other/9", "sources": {}}'),
             r"module\.json is not a Cleave name map"),
            ("module.json a list", json_text("[1, 2]"), r"is not a Cleave name map"),
            ("module.safetensors cut", lambda d: cut_file(
                os.path.join(d, "module.safetensors"), 4),
             r"module\.safetensors' is not a valid safetensors"),
            ("module.safetensors missing", lambda d: os.remove(
                os.path.join(d, "module.safetensors")), r"module\.safetensors"),
            ("module.json names no bundle tensor", renamed,
             r"maps '0\.weight' to 'no\.such\.weight', which the bundle does not hold"),
            ("no module files", lambda d: os.remove(os.path.join(d, "module.json")),
             r"is not a checkpoint written by Model\.save_checkpoint"),
            ("bundle weights at ../outside", lambda d: edit(
                os.path.join(d, "bundle", "plan.pb"), "Plan", lambda p: rename_file(
                    p, "weights/rank-0.safetensors", "../../rank-0.safetensors")),
             r"names the file '\.\./\.\./rank-0\.safetensors', which leads out"),
        ]
        for name, change, expect in resume:
            add("python", "Model.resume: " + name, py("resume"), expect, env=env,
                prepare=ckpt(change))
        for name, prepare, expect in (
                ("save_over_user_folder", user_folder,
                 r"holds files that are not a Cleave checkpoint"),
                ("save_onto_file", lambda: write(W("notes.txt"), b"precious\n"),
                 r"it is not a folder"),
                ("load_state_dict_wrong_shape", None,
                 r"state_dict\['0\.weight'\]: '0\.weight' is f32 \[3, 3\]; the model "
                 r"has f32 \[8, 4\]"),
                ("load_state_dict_second_bad", None, r"state_dict\['2\.weight'\]"),
                ("load_state_dict_unexpected", None, r"unexpected 'extra'"),
                ("step_wrong_shape", None, r"input"),
                ("example_inputs_list", None, r"example_inputs must be a dict"),
                ("zero_word", None, r"zero must be 0, 1, 2 or 3, not 'one'"),
                ("seed_word", None, r"seed must be a non-negative integer, not 'abc'"),
                ("timeout_negative", None, r"timeout must be a positive number"),
                ("freeze_string", None, r"freeze must be a list")):
            add("python", name, py(name), expect, env=env, prepare=prepare)
        if U.tmpfs:
            def earlier_on_full_disk():
                mount(W("disk"), "1m")
                copy_of(os.path.join(U.py_fx, "ckpt"), W("disk", "ckpt"))
                fill_up(W("disk"))
            add("python", "save_on_full_disk", py("save_on_full_disk"),
                r"(cannot save a checkpoint in|cannot write) '.*disk/.*': No space left "
                r"on device",
                env=env, prepare=earlier_on_full_disk)

    # No file Cleave reads runs code: each one, in turn, a pickle.
    py_argv = None
    if U.python:
        def py_argv(name):
            return [PY, os.path.join(HERE, "Inputs", "py_case.py"), U.py_fx, W(), name]
    pickle_sweep.cases(F, U, W, add, copy_of, write, py_argv,
                       python_env(U.python) if U.python else None)


class RunsCode:
    """Pickles to a call of os.system."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, ("touch '%s'" % self.marker,))


def cut_file(path, n):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - n)

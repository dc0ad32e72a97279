#!/usr/bin/python3
"""Checks Cleave's training step against the zoo's PyTorch references.

Usage:
  /usr/bin/python3 zoo/check_zoo.py --cleave build/bin/cleave --zoo DIR
      [--models gpt2,mlp|gpt2-opset14] [--opsets 14,17] [--optimizers sgd,adamw]
      [--formats onnx,traced,scripted] [--rtol 1e-4] [--keep DIR] [--dry-run]

For each DIR/M-opsetO (made by make_zoo.py) and each optimizer it runs

  cleave compile DIR/M-opsetO/model.onnx -o TMP/bundle --loss LOSS \\
      --optimizer sgd --lr LR --momentum MOMENTUM --weight-decay WD
  (adamw: --optimizer adamw --lr LR --beta1 B1 --beta2 B2 --eps EPS --weight-decay WD)
  cleave run TMP/bundle --steps 1 --inputs DIR/M-opsetO/inputs --dump TMP/dump

with the hyperparameters of manifest.json, and compares
  TMP/dump/loss.npy            with ref/loss.npy (one value per step)
  TMP/dump/NAME.grad.npy       with ref/grad/NAME.grad.npy, every parameter
  TMP/dump/NAME.npy            with ref/OPTIMIZER/NAME.npy, every parameter and buffer

With --tp N the run starts its N ranks as threads (--threads);
--launcher mpi starts them through mpirun instead.

--formats (default onnx) picks the model file of each case: onnx model.onnx,
traced model.traced.pt, scripted model.scripted.pt (make_zoo.py --torchscript
writes these into each model's highest-opset directory; a case without the file
prints a SKIP line, which is not a failure). A TorchScript module records no
input shapes, so its compile command also gets

  --input NAME=D0xD1x...xTYPE     (TYPE f32 | i64 | i32 | bool)

for every model input (manifest.json's "inputs"; the shape and type of
inputs/NAME.npy). The lines of a .pt case name the format:
"PASS gpt2-opset17 traced sgd: ...". --dry-run prints the commands and runs nothing.

A tensor passes when its shape is the reference's and
max|a - b| <= rtol * max(max|b|, tiny). Where the case has ref64/ (the step
in float64, make_zoo.py --ref64), each tensor is measured against it instead:
within max(rtol, 10 x the largest relative error of PyTorch's float32 step run
three ways: its default, channels_last and its reference convolutions, the
spread a correct float32 computation shows; ref64/spread.json), or, for a tensor
that is zero in exact arithmetic (max|ref64| <= 1e-9 x the largest gradient),
within 1e-5 of that largest gradient; and each parameter after the step
within rtol of the optimizer's first step applied in float64 to Cleave's
own (so judged) gradient. --strict64 drops the allowance for PyTorch's spread:
within --rtol of float64 alone. One line per model and optimizer gives
the worst relative error and its tensor; every failing tensor is listed. The
exit status is 1 if anything failed or was missing, 2 on a usage error.

  --dump-dir DUMP --case DIR/M-opsetO --optimizer sgd [--cpu-dump CPUDUMP]
compares an existing dump without running cleave (with PyTorch's reference,
or with the CPU backend's dump CPUDUMP).

  --backend cuda [--precision bf16] --against-cpu
runs the step on that backend (cleave run --backend/--precision) and, with
--against-cpu, compares it with the same step on the CPU backend instead of
PyTorch: every tensor of the CPU dump, within --rtol (the GPU tests use 1e-4
for f32 and 2e-2 for bf16). With --precision bf16, where the case has
ref/bf16_spread.json (make_zoo.py --bf16-spread), a tensor may instead be
as far as 2 x PyTorch's own bf16 autocast step is from its float32 step:
bf16 is judged by PyTorch's bf16, not by a fixed tolerance.
"""
import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

import numpy as np

OPTIMIZERS = ("sgd", "adamw")
# Format -> the model file in a case directory.
FORMATS = {"onnx": "model.onnx", "traced": "model.traced.pt", "scripted": "model.scripted.pt"}
NPY_TYPES = {"float32": "f32", "int64": "i64", "int32": "i32", "bool": "bool"}


def file_name(name):
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def num(x):
    return repr(float(x))


def compile_args(manifest, opt):
    args = ["--loss", manifest["loss"], "--optimizer", opt]
    h = manifest[opt]
    if opt == "sgd":
        args += ["--lr", num(h["lr"]), "--momentum", num(h["momentum"]),
                 "--weight-decay", num(h["weight_decay"])]
    else:
        args += ["--lr", num(h["lr"]), "--beta1", num(h["beta1"]), "--beta2", num(h["beta2"]),
                 "--eps", num(h["eps"]), "--weight-decay", num(h["weight_decay"])]
    return args


def input_args(case_dir, manifest):
    """--input NAME=D0x...xTYPE for every model input. The names are manifest.json's
    "inputs" (the forward's arguments, in order; gpt2's "labels" is one of them, while
    an appended loss's labels.npy is not); without that key, every inputs/*.npy but
    labels.npy. Shape and type are those of inputs/NAME.npy."""
    inputs_dir = os.path.join(case_dir, "inputs")
    if manifest.get("inputs") is not None:
        names = list(manifest["inputs"])
    else:
        names = sorted(f[:-4] for f in os.listdir(inputs_dir)
                       if f.endswith(".npy") and f != "labels.npy")
    args = []
    for name in names:
        arr = np.load(os.path.join(inputs_dir, file_name(name) + ".npy"), mmap_mode="r")
        ty = NPY_TYPES.get(arr.dtype.name)
        if ty is None:
            raise ValueError(f"input {name}: no --input type for dtype {arr.dtype}")
        dims = "x".join([str(d) for d in arr.shape] + [ty])
        args += ["--input", f"{name}={dims}"]
    return args


class Result:
    def __init__(self, label):
        self.label = label
        self.failures = []  # (tensor, message)
        self.worst = (-1.0, None)
        self.compared = 0
        self.notes = []

    def fail(self, tensor, message):
        self.failures.append((tensor, message))

    @property
    def ok(self):
        return not self.failures and self.compared > 0


def rel_error(got, ref, tiny):
    """(relative error, max|a-b|, max|b|); NaN or Inf in got gives inf."""
    a = got.astype(np.float64)
    b = ref.astype(np.float64)
    if a.size == 0:
        return 0.0, 0.0, 0.0
    if not np.isfinite(a).all():
        return float("inf"), float("inf"), float(np.abs(b).max())
    diff = float(np.abs(a - b).max())
    scale = max(float(np.abs(b).max()), tiny)
    return diff / scale, diff, float(np.abs(b).max())


BF16_SLACK = 2.0  # a bf16 step may land this many times as far as PyTorch's


def bf16_allowances(case_dir, rtol):
    """Per tensor key (loss, grad/NAME, sgd/NAME, adamw/NAME), the tolerance
    of a bf16 step against the float32 one; {} where the zoo has no spread."""
    path = os.path.join(case_dir, "ref", "bf16_spread.json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return {k: max(rtol, BF16_SLACK * v) for k, v in json.load(f).items()}


def compare_tensor(res, tensor, got_path, ref_path, rtol, tiny, loss=False):
    if not os.path.exists(ref_path):
        res.fail(tensor, f"reference {ref_path} missing (zoo incomplete?)")
        return
    ref = np.load(ref_path)
    if not os.path.exists(got_path):
        res.fail(tensor, f"missing from the dump ({os.path.basename(got_path)})")
        return
    try:
        got = np.load(got_path)
    except Exception as e:  # a malformed .npy is a failure of the tool under test
        res.fail(tensor, f"unreadable {os.path.basename(got_path)}: {e}")
        return
    if loss:
        # One value per step: ref/loss.npy has shape [1] (or []), the dump [steps].
        ref = ref.reshape(-1)
        if got.ndim == 0:
            got = got.reshape(1)
    if got.shape != ref.shape:
        res.fail(tensor, f"shape {list(got.shape)}, want {list(ref.shape)}")
        return
    if got.dtype != ref.dtype:
        res.notes.append(f"{tensor}: dtype {got.dtype}, want {ref.dtype}")
        if got.dtype.kind not in "fiu":
            res.fail(tensor, f"dtype {got.dtype}, want {ref.dtype}")
            return
    err, diff, scale = rel_error(got, ref, tiny)
    res.compared += 1
    if not err <= rtol:  # also catches NaN
        res.fail(tensor, f"rel err {err:.3e} > {rtol:g} (max|a-b| {diff:.3e}, "
                         f"max|ref| {scale:.3e})")
    if err > res.worst[0] or res.worst[1] is None:
        res.worst = (err, tensor)


# With a float64 reference (ref64/), a tensor is judged by how far PyTorch's
# own float32 step is from it: a gradient that is zero in exact arithmetic
# (a conv bias before a BatchNorm) or ill-conditioned (BatchNorm over a few
# elements) is rounding noise on both sides, and a fixed tolerance against
# float32 PyTorch would test the noise.
ZERO = 1e-9     # |exact| below ZERO x the largest gradient: exactly zero
NOISE = 1e-5    # what float32 may leave of such a zero, same scale
SLACK = 10.0    # Cleave may be this many times as far from float64 as PyTorch
STRICT64 = False  # --strict64: within --rtol of float64, whatever PyTorch's spread


def compare_tensor64(res, tensor, got_path, ref32_path, ref64_path, rtol, scale, spread):
    if not os.path.exists(got_path):
        res.fail(tensor, f"missing from the dump ({os.path.basename(got_path)})")
        return
    got = np.load(got_path).astype(np.float64).reshape(-1)
    r32 = np.load(ref32_path).astype(np.float64).reshape(-1)
    r64 = np.load(ref64_path).astype(np.float64).reshape(-1)
    if got.shape != r64.shape:
        res.fail(tensor, f"shape {list(got.shape)}, want {list(r64.shape)}")
        return
    res.compared += 1
    if not np.isfinite(got).all():
        res.fail(tensor, "not finite")
        return
    exact = float(np.abs(r64).max()) if r64.size else 0.0
    diff = float(np.abs(got - r64).max()) if got.size else 0.0
    if exact <= ZERO * scale:
        err, allowed = diff / max(scale, 1e-30), NOISE
        what = "an exact zero"
    else:
        err = diff / exact
        allowed = rtol if STRICT64 else max(
            rtol, SLACK * max(float(np.abs(r32 - r64).max()) / exact, spread))
        what = "float64"
    if not err <= allowed:
        res.fail(tensor, f"rel err {err:.3e} from {what} > {allowed:.3g} "
                         f"(max|a-b| {diff:.3e}, max|ref64| {exact:.3e})")
    if err > res.worst[0] or res.worst[1] is None:
        res.worst = (err, tensor)


def compare_dump64(case_dir, manifest, opt, dump_dir, rtol, label):
    res = Result(label)
    r32, r64 = os.path.join(case_dir, "ref"), os.path.join(case_dir, "ref64")
    spread = {}
    if os.path.exists(os.path.join(r64, "spread.json")):
        with open(os.path.join(r64, "spread.json")) as f:
            spread = json.load(f)
    grad_scale = 0.0
    for p in manifest["parameters"]:
        f = file_name(p) + ".grad.npy"
        grad_scale = max(grad_scale, float(np.abs(np.load(os.path.join(r64, "grad", f))).max()))
    compare_tensor64(res, "loss", os.path.join(dump_dir, "loss.npy"),
                     os.path.join(r32, "loss.npy"), os.path.join(r64, "loss.npy"), rtol, 1.0,
                     spread.get("loss", 0.0))
    for p in manifest["parameters"]:
        f = file_name(p) + ".grad.npy"
        compare_tensor64(res, p + ".grad", os.path.join(dump_dir, f),
                         os.path.join(r32, "grad", f), os.path.join(r64, "grad", f), rtol,
                         grad_scale, spread.get("grad/" + p, 0.0))
    for p in manifest["parameters"]:
        compare_update(res, p, dump_dir, os.path.join(r32, "init"), manifest, opt, rtol)
    for p in manifest["buffers"]:
        f = file_name(p) + ".npy"
        compare_tensor64(res, p, os.path.join(dump_dir, f), os.path.join(r32, opt, f),
                         os.path.join(r64, opt, f), rtol, 1.0, spread.get(opt + "/" + p, 0.0))
    return res


def compare_update(res, p, dump_dir, init_dir, manifest, opt, rtol):
    """The parameter after the step against the optimizer's first step
    applied, in float64, to Cleave's own gradient (judged above): the update
    is then tested exactly, and an ill-conditioned gradient entry near 0
    (which AdamW turns into +-lr) is not held against it twice."""
    f = file_name(p) + ".npy"
    got_path = os.path.join(dump_dir, f)
    grad_path = os.path.join(dump_dir, file_name(p) + ".grad.npy")
    if not os.path.exists(got_path) or not os.path.exists(grad_path):
        res.fail(p, "missing from the dump")
        return
    got = np.load(got_path).astype(np.float64)
    g = np.load(grad_path).astype(np.float64)
    w = np.load(os.path.join(init_dir, f)).astype(np.float64)
    h = manifest[opt]
    if opt == "sgd":  # first step: the momentum buffer is the gradient itself
        want = w - h["lr"] * (g + h["weight_decay"] * w)
    else:
        want = w * (1 - h["lr"] * h["weight_decay"])
        m = (1 - h["beta1"]) * g / (1 - h["beta1"])
        v = np.sqrt((1 - h["beta2"]) * g * g / (1 - h["beta2"]))
        want = want - h["lr"] * m / (v + h["eps"])
    if got.shape != want.shape:
        res.fail(p, f"shape {list(got.shape)}, want {list(want.shape)}")
        return
    res.compared += 1
    scale = max(float(np.abs(want).max()) if want.size else 0.0, 1e-30)
    err = float(np.abs(got - want).max()) / scale if got.size else 0.0
    if not err <= rtol:
        res.fail(p, f"rel err {err:.3e} > {rtol:g} from the {opt} step of its own gradient")
    if err > res.worst[0] or res.worst[1] is None:
        res.worst = (err, p)


def compare_dump(case_dir, manifest, opt, dump_dir, rtol, tiny, label=None, cpu_dump=None,
                 allow=None):
    """Compares with the PyTorch reference, or with cpu_dump (a dump of
    the same step on the CPU backend) when given. allow: per tensor key a
    tolerance replacing rtol (bf16_allowances)."""
    allow = allow or {}
    if cpu_dump is None and os.path.isdir(os.path.join(case_dir, "ref64")):
        return compare_dump64(case_dir, manifest, opt, dump_dir, rtol,
                              label or f"{os.path.basename(case_dir)} {opt}")
    res = Result(label or f"{os.path.basename(case_dir)} {opt}")
    ref = os.path.join(case_dir, "ref")
    loss_ref = os.path.join(cpu_dump, "loss.npy") if cpu_dump else os.path.join(ref, "loss.npy")
    grad_dir = cpu_dump or os.path.join(ref, "grad")
    state_dir = cpu_dump or os.path.join(ref, opt)
    compare_tensor(res, "loss", os.path.join(dump_dir, "loss.npy"), loss_ref,
                   allow.get("loss", rtol), tiny, loss=True)
    expected = {"loss.npy"}
    for p in manifest["parameters"]:
        f = file_name(p) + ".grad.npy"
        expected.add(f)
        compare_tensor(res, p + ".grad", os.path.join(dump_dir, f),
                       os.path.join(grad_dir, f), allow.get("grad/" + p, rtol), tiny)
    for p in manifest["parameters"] + manifest["buffers"]:
        f = file_name(p) + ".npy"
        expected.add(f)
        compare_tensor(res, p, os.path.join(dump_dir, f), os.path.join(state_dir, f),
                       allow.get(opt + "/" + p, rtol), tiny)
    if os.path.isdir(dump_dir):
        extra = sorted(f for f in os.listdir(dump_dir) if f.endswith(".npy") and f not in expected)
        if extra:
            res.notes.append(f"{len(extra)} other files in the dump, not compared: "
                             + " ".join(extra[:8]) + (" ..." if len(extra) > 8 else ""))
    return res


def run_cmd(cmd, timeout):
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout}s"
    except OSError as e:
        return None, str(e)
    out = p.stdout.decode(errors="replace")
    return p.returncode, out


def case_label(case_dir, fmt, opt):
    """The case's name in output lines: gpt2-opset17 sgd for ONNX (as before
    --formats), gpt2-opset17 traced sgd for TorchScript."""
    base = os.path.basename(case_dir)
    return f"{base} {opt}" if fmt == "onnx" else f"{base} {fmt} {opt}"


# Tensor-parallel ranks of every compile (--tp); 1: one process.
TP = 1
# cleave run --backend/--precision of the checked run; AGAINST_CPU: compare
# it with the CPU backend's dump of the same step instead of PyTorch.
BACKEND = "cpu"
PRECISION = "f32"
AGAINST_CPU = False
# How a run of --tp ranks starts them: threads (cleave run --threads, the
# in-process communicator) or mpi (mpirun, cleave run's default). These
# checks test the step's math; the launchers have focused tests of their own.
LAUNCHER = "threads"


def case_commands(cleave, case_dir, manifest, opt, work, fmt="onnx"):
    bundle = os.path.join(work, "bundle")
    dump = os.path.join(work, "dump")
    backend = []
    if BACKEND != "cpu" or PRECISION != "f32":
        backend = ["--backend", BACKEND, "--precision", PRECISION]
    compile_cmd = ([cleave, "compile", os.path.join(case_dir, FORMATS[fmt]), "-o", bundle]
                   + compile_args(manifest, opt))
    if fmt != "onnx":
        compile_cmd += input_args(case_dir, manifest)
    if TP > 1:
        compile_cmd += ["--tp", str(TP)]
    run = [cleave, "run", bundle, "--steps", "1", "--inputs", os.path.join(case_dir, "inputs")]
    if TP > 1 and LAUNCHER == "threads":
        run.append("--threads")
    cmds = [compile_cmd, run + ["--dump", dump] + backend]
    if AGAINST_CPU:
        cmds.append(run + ["--dump", os.path.join(work, "dump-cpu")])
    return cmds


def check_case(cleave, case_dir, manifest, opt, rtol, tiny, work, timeout, verbose,
               fmt="onnx"):
    label = case_label(case_dir, fmt, opt)
    bundle = os.path.join(work, "bundle")
    dump = os.path.join(work, "dump")
    cpu_dump = os.path.join(work, "dump-cpu")
    for d in (bundle, dump, cpu_dump):
        if os.path.isdir(d):
            shutil.rmtree(d)
        elif os.path.exists(d):
            os.remove(d)
    try:
        cmds = case_commands(cleave, case_dir, manifest, opt, work, fmt)
    except (OSError, ValueError) as e:  # an inputs/NAME.npy missing or of an odd type
        res = Result(label)
        res.fail("--input", str(e))
        return res
    for cmd in cmds:
        if verbose:
            print("  $ " + shlex.join(cmd))
        rc, out = run_cmd(cmd, timeout)
        if rc != 0:
            res = Result(label)
            if rc is None:
                why = out
            else:
                tail = out.strip().splitlines()[-5:]
                why = "\n      ".join([f"exit status {rc}"] + tail)
            res.fail(f"cleave {cmd[1]}", why)
            return res
        if verbose and out.strip():
            print("    " + out.strip().replace("\n", "\n    "))
    allow = bf16_allowances(case_dir, rtol) if PRECISION == "bf16" and AGAINST_CPU else None
    return compare_dump(case_dir, manifest, opt, dump, rtol, tiny, label,
                        cpu_dump if AGAINST_CPU else None, allow)


def report(res):
    status = "PASS" if res.ok else "FAIL"
    if res.worst[1] is not None:
        detail = f"worst rel err {res.worst[0]:.2e} ({res.worst[1]}), {res.compared} tensors"
    else:
        detail = "nothing compared"
    print(f"{status} {res.label}: {detail}")
    for tensor, msg in res.failures:
        print(f"    FAIL {tensor}: {msg}")
    for n in res.notes:
        print(f"    note: {n}")
    sys.stdout.flush()


def find_cases(zoo, models, opsets):
    cases = []
    for d in sorted(os.listdir(zoo)):
        m = re.fullmatch(r"(.+)-opset(\d+)", d)
        path = os.path.join(zoo, d)
        if not m or not os.path.isfile(os.path.join(path, "manifest.json")):
            continue
        if models and m.group(1) not in models and d not in models:
            continue
        if opsets and int(m.group(2)) not in opsets:
            continue
        cases.append(path)
    return cases


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cleave", help="path of the cleave binary")
    ap.add_argument("--zoo", help="directory written by make_zoo.py")
    ap.add_argument("--models", default="", help="comma-separated: gpt2 or gpt2-opset14")
    ap.add_argument("--opsets", default="")
    ap.add_argument("--optimizers", default=",".join(OPTIMIZERS))
    ap.add_argument("--formats", default="onnx",
                    help="comma-separated: onnx (model.onnx), traced (model.traced.pt), "
                         "scripted (model.scripted.pt); default onnx")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the cleave commands of every case; run and compare nothing")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--backend", choices=["cpu", "cuda", "auto"], default="cpu",
                    help="cleave run --backend of the checked run")
    ap.add_argument("--precision", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--against-cpu", action="store_true",
                    help="compare with the CPU backend's step, not PyTorch's")
    ap.add_argument("--tp", type=int, default=1,
                    help="compile for this many tensor-parallel ranks (the run "
                         "starts them); the references are the same")
    ap.add_argument("--launcher", choices=["threads", "mpi"], default="threads",
                    help="how a --tp run starts its ranks: threads (cleave run "
                         "--threads; default) or mpi (mpirun)")
    ap.add_argument("--tiny", type=float, default=1e-12,
                    help="floor of max|ref| in the relative error (default 1e-12)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per cleave command")
    ap.add_argument("--keep", help="keep bundles and dumps under this directory")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--dump-dir", help="compare this existing dump (with --case, --optimizer)")
    ap.add_argument("--case", help="a model directory DIR/M-opsetO, with --dump-dir")
    ap.add_argument("--cpu-dump", help="with --dump-dir: compare with this dump of the "
                    "CPU backend instead of PyTorch's reference")
    ap.add_argument("--optimizer", choices=OPTIMIZERS, help="with --dump-dir")
    ap.add_argument("--strict64", action="store_true",
                    help="with a float64 reference: every tensor that is not zero in "
                         "exact arithmetic within --rtol of it, with no allowance for "
                         "PyTorch's own float32 spread")
    args = ap.parse_args()
    global TP, BACKEND, PRECISION, AGAINST_CPU, STRICT64, LAUNCHER
    TP = args.tp
    LAUNCHER = args.launcher
    STRICT64 = args.strict64
    BACKEND, PRECISION, AGAINST_CPU = args.backend, args.precision, args.against_cpu

    if args.dump_dir:
        if not args.case or not args.optimizer:
            ap.error("--dump-dir needs --case and --optimizer")
        with open(os.path.join(args.case, "manifest.json")) as f:
            manifest = json.load(f)
        allow = bf16_allowances(args.case, args.rtol) if PRECISION == "bf16" else None
        res = compare_dump(args.case, manifest, args.optimizer, args.dump_dir, args.rtol,
                           args.tiny, cpu_dump=args.cpu_dump, allow=allow)
        report(res)
        return 0 if res.ok else 1

    if not args.cleave or not args.zoo:
        ap.error("--cleave and --zoo are required")
    opts = [o for o in args.optimizers.split(",") if o]
    bad = [o for o in opts if o not in OPTIMIZERS]
    if bad:
        ap.error(f"unknown optimizers {bad}")
    formats = [f for f in args.formats.split(",") if f]
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        ap.error(f"unknown formats {bad}; have {', '.join(FORMATS)}")
    models = {m for m in args.models.split(",") if m}
    opsets = {int(o) for o in args.opsets.split(",") if o}
    cases = find_cases(args.zoo, models, opsets)
    if not cases:
        print(f"check_zoo: no model directories in {args.zoo} match", file=sys.stderr)
        return 1
    if models:
        found = {re.fullmatch(r"(.+)-opset\d+", os.path.basename(c)).group(1) for c in cases}
        found |= {os.path.basename(c) for c in cases}
        missing = sorted(models - found)
        if missing:
            print(f"check_zoo: not in the zoo: {', '.join(missing)}", file=sys.stderr)
            return 1
    cleave = os.path.abspath(args.cleave) if os.path.sep in args.cleave else args.cleave
    if shutil.which(cleave) is None and not args.dry_run:
        print(f"check_zoo: {args.cleave} is not an executable", file=sys.stderr)
        return 2

    if args.dry_run:
        work_root = args.keep or os.path.join(tempfile.gettempdir(), "check_zoo.DRYRUN")
    else:
        work_root = args.keep or tempfile.mkdtemp(prefix="check_zoo.")
    failed = 0
    total = 0
    skipped = 0
    try:
        for case in cases:
            with open(os.path.join(case, "manifest.json")) as f:
                manifest = json.load(f)
            for fmt in formats:
                if not os.path.isfile(os.path.join(case, FORMATS[fmt])):
                    why = ""
                    ts = manifest.get("torchscript")
                    if fmt == "scripted" and ts and ts.get("scripted_error"):
                        why = f" (torch.jit.script failed: {ts['scripted_error']})"
                    elif fmt != "onnx" and not ts:
                        why = " (no TorchScript here: make_zoo.py --torchscript writes it " \
                              "into the highest opset)"
                    for opt in opts:
                        print(f"SKIP {case_label(case, fmt, opt)}: no {FORMATS[fmt]}{why}")
                        skipped += 1
                    continue
                for opt in opts:
                    sub = opt if fmt == "onnx" else f"{fmt}-{opt}"
                    work = os.path.join(work_root, os.path.basename(case), sub)
                    if args.dry_run:
                        print(f"{case_label(case, fmt, opt)}:")
                        try:
                            for cmd in case_commands(cleave, case, manifest, opt, work, fmt):
                                print("  $ " + shlex.join(cmd))
                        except (OSError, ValueError) as e:
                            print(f"    FAIL --input: {e}")
                        continue
                    os.makedirs(work, exist_ok=True)
                    res = check_case(cleave, case, manifest, opt, args.rtol, args.tiny, work,
                                     args.timeout, args.verbose, fmt)
                    report(res)
                    total += 1
                    failed += 0 if res.ok else 1
    finally:
        if not args.keep and not args.dry_run:
            shutil.rmtree(work_root, ignore_errors=True)
    if args.dry_run:
        return 0
    print(f"{total - failed} passed, {failed} failed"
          + (f", {skipped} skipped" if skipped else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

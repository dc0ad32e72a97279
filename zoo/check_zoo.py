#!/usr/bin/python3
"""Checks Cleave's training step against the zoo's PyTorch references.

Usage:
  /usr/bin/python3 zoo/check_zoo.py --cleave build/bin/cleave --zoo DIR
      [--models gpt2,mlp|gpt2-opset14] [--opsets 14,17] [--optimizers sgd,adamw]
      [--rtol 1e-4] [--keep DIR]

For each DIR/M-opsetO (made by make_zoo.py) and each optimizer it runs

  cleave compile DIR/M-opsetO/model.onnx -o TMP/bundle --loss LOSS \\
      --optimizer sgd --lr LR --momentum MOMENTUM --weight-decay WD
  (adamw: --optimizer adamw --lr LR --beta1 B1 --beta2 B2 --eps EPS --weight-decay WD)
  cleave run TMP/bundle --steps 1 --inputs DIR/M-opsetO/inputs --dump TMP/dump

with the hyperparameters of manifest.json, and compares
  TMP/dump/loss.npy            with ref/loss.npy (one value per step)
  TMP/dump/NAME.grad.npy       with ref/grad/NAME.grad.npy, every parameter
  TMP/dump/NAME.npy            with ref/OPTIMIZER/NAME.npy, every parameter and buffer

A tensor passes when its shape is the reference's and
max|a - b| <= rtol * max(max|b|, tiny). One line per model and optimizer gives
the worst relative error and its tensor; every failing tensor is listed. The
exit status is 1 if anything failed or was missing, 2 on a usage error.

  --dump-dir DUMP --case DIR/M-opsetO --optimizer sgd
compares an existing dump without running cleave.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

OPTIMIZERS = ("sgd", "adamw")


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
        res.fail(tensor, f"rel err {err:.3e} > {rtol:g} (max|a-b| {diff:.3e}, max|ref| {scale:.3e})")
    if err > res.worst[0] or res.worst[1] is None:
        res.worst = (err, tensor)


def compare_dump(case_dir, manifest, opt, dump_dir, rtol, tiny, label=None):
    res = Result(label or f"{os.path.basename(case_dir)} {opt}")
    ref = os.path.join(case_dir, "ref")
    compare_tensor(res, "loss", os.path.join(dump_dir, "loss.npy"),
                   os.path.join(ref, "loss.npy"), rtol, tiny, loss=True)
    expected = {"loss.npy"}
    for p in manifest["parameters"]:
        f = file_name(p) + ".grad.npy"
        expected.add(f)
        compare_tensor(res, p + ".grad", os.path.join(dump_dir, f),
                       os.path.join(ref, "grad", f), rtol, tiny)
    for p in manifest["parameters"] + manifest["buffers"]:
        f = file_name(p) + ".npy"
        expected.add(f)
        compare_tensor(res, p, os.path.join(dump_dir, f), os.path.join(ref, opt, f), rtol, tiny)
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


def check_case(cleave, case_dir, manifest, opt, rtol, tiny, work, timeout, verbose):
    label = f"{os.path.basename(case_dir)} {opt}"
    bundle = os.path.join(work, "bundle")
    dump = os.path.join(work, "dump")
    for d in (bundle, dump):
        if os.path.isdir(d):
            shutil.rmtree(d)
        elif os.path.exists(d):
            os.remove(d)
    cmds = [
        [cleave, "compile", os.path.join(case_dir, "model.onnx"), "-o", bundle]
        + compile_args(manifest, opt),
        [cleave, "run", bundle, "--steps", "1", "--inputs", os.path.join(case_dir, "inputs"),
         "--dump", dump],
    ]
    for cmd in cmds:
        if verbose:
            print("  $ " + " ".join(cmd))
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
    return compare_dump(case_dir, manifest, opt, dump, rtol, tiny, label)


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
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--tiny", type=float, default=1e-12,
                    help="floor of max|ref| in the relative error (default 1e-12)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per cleave command")
    ap.add_argument("--keep", help="keep bundles and dumps under this directory")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--dump-dir", help="compare this existing dump (with --case, --optimizer)")
    ap.add_argument("--case", help="a model directory DIR/M-opsetO, with --dump-dir")
    ap.add_argument("--optimizer", choices=OPTIMIZERS, help="with --dump-dir")
    args = ap.parse_args()

    if args.dump_dir:
        if not args.case or not args.optimizer:
            ap.error("--dump-dir needs --case and --optimizer")
        with open(os.path.join(args.case, "manifest.json")) as f:
            manifest = json.load(f)
        res = compare_dump(args.case, manifest, args.optimizer, args.dump_dir, args.rtol,
                           args.tiny)
        report(res)
        return 0 if res.ok else 1

    if not args.cleave or not args.zoo:
        ap.error("--cleave and --zoo are required")
    opts = [o for o in args.optimizers.split(",") if o]
    bad = [o for o in opts if o not in OPTIMIZERS]
    if bad:
        ap.error(f"unknown optimizers {bad}")
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
    if shutil.which(cleave) is None:
        print(f"check_zoo: {args.cleave} is not an executable", file=sys.stderr)
        return 2

    work_root = args.keep or tempfile.mkdtemp(prefix="check_zoo.")
    failed = 0
    total = 0
    try:
        for case in cases:
            with open(os.path.join(case, "manifest.json")) as f:
                manifest = json.load(f)
            for opt in opts:
                work = os.path.join(work_root, os.path.basename(case), opt)
                os.makedirs(work, exist_ok=True)
                res = check_case(cleave, case, manifest, opt, args.rtol, args.tiny, work,
                                 args.timeout, args.verbose)
                report(res)
                total += 1
                failed += 0 if res.ok else 1
    finally:
        if not args.keep:
            shutil.rmtree(work_root, ignore_errors=True)
    print(f"{total - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""End-to-end runs of the sanitized runtime (build-san's cleave-run, ASan +
UBSan), on bundles the regular build's compiler makes from the zoo.

Usage: sanitized_e2e.py --cleave BUILD/bin/cleave --cleave-run BUILD_SAN/bin/cleave-run
           --zoo DIR --work DIR

Each run's losses must equal the regular build's run of the same bundle
(the two binaries run the same kernels: within 1e-5), and each bad input
must end in one `cleave: error:` line, not a sanitizer report:

  tp 1, AdamW, 3 steps          mlp (cross-entropy appended)
  tp 2 over MPI, SGD, 2 steps   gpt2 (its own loss), llama
  checkpoint, then resume       mlp at tp 1, gpt2 at tp 2
  bad input                     a cut weights file, labels out of range,
                                a plan cut short
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "zoo"))
import check_zoo  # noqa: E402

failures = []


def run(cmd, expect_ok=True):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if expect_ok and r.returncode:
        failures.append("%s: exit %d\n%s%s" % (" ".join(cmd), r.returncode, r.stdout, r.stderr))
    return r


def losses(dump):
    return np.load(os.path.join(dump, "loss.npy"))


def compare(name, cmd_ref, cmd_san, dump_ref, dump_san):
    run(cmd_ref)
    run(cmd_san)
    if not (os.path.exists(os.path.join(dump_ref, "loss.npy"))
            and os.path.exists(os.path.join(dump_san, "loss.npy"))):
        failures.append("%s: no loss dumped" % name)
        return
    a, b = losses(dump_ref), losses(dump_san)
    ok = a.shape == b.shape and np.allclose(a, b, rtol=1e-5, atol=1e-6)
    print("%-28s loss %s (regular build %s) %s" % (name, b.ravel()[-1], a.ravel()[-1],
                                                   "ok" if ok else "DIFFERENT"))
    if not ok:
        failures.append("%s: losses %s vs %s" % (name, a, b))


def bad(name, cmd, needle):
    r = run(cmd, expect_ok=False)
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    ok = (0 < r.returncode < 128 and len(lines) >= 1 and lines[-1].startswith("cleave: error:")
          and needle in lines[-1] and "Sanitizer" not in r.stderr
          and "runtime error" not in r.stderr)
    print("%-28s %s" % (name, "ok" if ok else "FAILED"))
    if not ok:
        failures.append("%s: exit %d\n%s" % (name, r.returncode, r.stderr))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cleave", required=True)
    ap.add_argument("--cleave-run", required=True)
    ap.add_argument("--zoo", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    W = lambda *p: os.path.join(a.work, *p)  # noqa: E731

    def bundle_of(model, opt, tp):
        case = os.path.join(a.zoo, model + "-opset17")
        with open(os.path.join(case, "manifest.json")) as f:
            manifest = json.load(f)
        out = W("%s-%s-tp%d" % (model, opt, tp))
        run([a.cleave, "compile", os.path.join(case, "model.onnx"), "-o", out, "--tp", str(tp)]
            + check_zoo.compile_args(manifest, opt))
        return out, os.path.join(case, "inputs")

    for model, opt, tp, steps in (("mlp", "adamw", 1, 3), ("gpt2", "sgd", 2, 2),
                                  ("llama", "adamw", 2, 2)):
        bundle, inputs = bundle_of(model, opt, tp)
        common = [bundle, "--steps", str(steps), "--inputs", inputs]
        if tp > 1:
            common += ["--ranks", str(tp)]
        name = "%s tp %d %s" % (model, tp, opt)
        compare(name, [a.cleave, "run"] + common + ["--dump", W(name + " ref")],
                [a.cleave_run] + common + ["--dump", W(name + " san")],
                W(name + " ref"), W(name + " san"))
        if model in ("mlp", "gpt2"):
            ck = W(name + " ckpt")
            run([a.cleave_run] + common + ["--checkpoint", ck, "--save-every", "1"])
            resumed = [a.cleave_run, bundle, "--steps", "1", "--inputs", inputs, "--resume", ck,
                       "--dump", W(name + " resumed")] + (["--ranks", str(tp)] if tp > 1 else [])
            r = run(resumed)
            print("%-28s %s" % (name + " resume", "ok" if r.returncode == 0 else "FAILED"))

    mlp, inputs = bundle_of("mlp", "sgd", 1)
    cut = W("cut-weights")
    shutil.copytree(mlp, cut)
    w = os.path.join(cut, "weights", "rank-0.safetensors")
    with open(w, "r+b") as f:
        f.truncate(os.path.getsize(w) // 2)
    bad("weights cut short", [a.cleave_run, cut, "--inputs", inputs], "rank-0.safetensors")
    labels_dir = W("bad-labels")
    shutil.copytree(inputs, labels_dir)
    lab = np.load(os.path.join(labels_dir, "labels.npy"))
    lab.ravel()[-1] = 10 ** 6
    np.save(os.path.join(labels_dir, "labels.npy"), lab)
    bad("labels out of range", [a.cleave_run, mlp, "--inputs", labels_dir], "labels")
    cut_plan = W("cut-plan")
    shutil.copytree(mlp, cut_plan)
    p = os.path.join(cut_plan, "plan.pb")
    with open(p, "r+b") as f:
        f.truncate(os.path.getsize(p) - 7)
    bad("plan cut short", [a.cleave_run, cut_plan, "--inputs", inputs], "plan")

    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("sanitized end-to-end runs: all as expected")


if __name__ == "__main__":
    main()

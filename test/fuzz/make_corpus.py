#!/usr/bin/python3
"""Seed corpora for the libFuzzer harnesses, from the test models.

Usage: make_corpus.py --cleave BUILD/bin/cleave --out DIR [--zoo DIR]

Writes DIR/seeds/HARNESS/ (one file per seed, named by its SHA-1) and
DIR/assets/ (a small bundle, its inputs and a checkpoint of it: the
checkpoint harness resumes from it). The seeds are real files of each
format, made the way users make them:

  onnx-import   every model of the ONNX backend test data, the zoo's exports
                (opset 17) and the hostile models of test/robustness
  torchscript   the zoo's traced and scripted modules
  plan          plan.pb of the zoo's models compiled at tp 1 (--plan-only)
  safetensors   a bundle's weights, a checkpoint's file, an exported model
  checkpoint    the assets' checkpoint index
  npy           the zoo's inputs and references, and NumPy's format 1.0,
                2.0 and 3.0 headers for every dtype Cleave reads
  data-feed     the harness's header (mode, shapes, flags) on text and on
                pairs of arrays
"""
import argparse
import glob
import hashlib
import io
import os
import shutil
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
BACKEND_DATA = "/usr/share/libonnx-testdata/data"
ZOO_MODELS = "mlp,mlp_mse,gpt2,llama,resnet"


def put(seeds, harness, data):
    d = os.path.join(seeds, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)


def put_file(seeds, harness, path):
    with open(path, "rb") as f:
        put(seeds, harness, f.read())


def run(cmd, **kw):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if r.returncode:
        sys.exit("make_corpus: %s failed:\n%s" % (" ".join(cmd), r.stdout))
    return r.stdout


STORED_NAMES = ("../rank-0.safetensors", "/etc/passwd", "~/x", "",
                "a/../../b", "./rank-0.safetensors", "..", "weights/..")


def stored_path_seeds(seeds, work, plan, indexes):
    """Plans and checkpoint indexes whose stored file names are each of
    STORED_NAMES (schema-edited, so only that field differs)."""
    pb = os.path.join(work, "pb")
    os.makedirs(pb, exist_ok=True)
    run(["protoc", "--python_out=" + pb, "--proto_path=" +
         os.path.join(ROOT, "runtime", "plan"),
         os.path.join(ROOT, "runtime", "plan", "plan.proto")])
    sys.path.insert(0, pb)
    import plan_pb2
    for kind, harness, paths in (("Plan", "plan", [plan]),
                                 ("Checkpoint", "checkpoint", indexes)):
        for path in paths:
            for name in STORED_NAMES:
                msg = getattr(plan_pb2, kind)()
                with open(path, "rb") as f:
                    msg.ParseFromString(f.read())
                if msg.files:
                    msg.files[0].path = name
                for t in msg.tensors[:1]:
                    for sl in t.slices[:1]:
                        sl.file = name
                put(seeds, harness, msg.SerializeToString())
                msg.model_file = name
                put(seeds, harness, msg.SerializeToString())


def npy_bytes(arr, version):
    buf = io.BytesIO()
    header = np.lib.format.header_data_from_array_1_0(arr)
    np.lib.format._write_array_header(buf, header, version)
    buf.write(np.ascontiguousarray(arr).tobytes())
    return buf.getvalue()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cleave", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--zoo", help="an existing zoo (make_zoo.py --torchscript) to reuse")
    a = ap.parse_args()
    seeds = os.path.join(a.out, "seeds")
    work = os.path.join(a.out, "work")
    shutil.rmtree(seeds, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)

    zoo = a.zoo
    if not zoo:
        zoo = os.path.join(work, "zoo")
        run(["nice", sys.executable, os.path.join(ROOT, "zoo", "make_zoo.py"), "--out", zoo,
             "--models", ZOO_MODELS, "--opsets", "17", "--torchscript"])
    cases = sorted(glob.glob(os.path.join(zoo, "*-opset17")))

    # ONNX: the backend test data, the zoo, the hostile models.
    for m in sorted(glob.glob(os.path.join(BACKEND_DATA, "*", "*", "model.onnx"))):
        put_file(seeds, "onnx-import", m)
    hostile = os.path.join(work, "hostile")
    run([sys.executable, os.path.join(ROOT, "test", "robustness", "Inputs", "hostile_models.py"),
         hostile])
    for m in sorted(glob.glob(os.path.join(hostile, "**", "*.onnx"), recursive=True)):
        put_file(seeds, "onnx-import", m)

    sys.path.insert(0, os.path.join(ROOT, "zoo"))
    import check_zoo
    for case in cases:
        put_file(seeds, "onnx-import", os.path.join(case, "model.onnx"))
        for pt in glob.glob(os.path.join(case, "*.pt")):
            put_file(seeds, "torchscript", pt)
        for f in sorted(glob.glob(os.path.join(case, "**", "*.npy"), recursive=True))[:40]:
            put_file(seeds, "npy", f)
        import json
        with open(os.path.join(case, "manifest.json")) as f:
            manifest = json.load(f)
        for opt in ("sgd", "adamw"):
            bundle = os.path.join(work, "plan-%s-%s" % (os.path.basename(case), opt))
            run([a.cleave, "compile", os.path.join(case, "model.onnx"), "-o", bundle,
                 "--plan-only"] + check_zoo.compile_args(manifest, opt))
            put_file(seeds, "plan", os.path.join(bundle, "plan.pb"))

    # A trained bundle, a checkpoint and an export: safetensors and the
    # checkpoint harness's assets.
    mlp = next(c for c in cases if os.path.basename(c).startswith("mlp-"))
    with open(os.path.join(mlp, "manifest.json")) as f:
        import json
        manifest = json.load(f)
    assets = os.path.join(a.out, "assets")
    shutil.rmtree(assets, ignore_errors=True)
    os.makedirs(assets)
    bundle = os.path.join(assets, "bundle")
    run([a.cleave, "compile", os.path.join(mlp, "model.onnx"), "-o", bundle]
        + check_zoo.compile_args(manifest, "adamw"))
    shutil.copytree(os.path.join(mlp, "inputs"), os.path.join(assets, "inputs"))
    ckpt = os.path.join(assets, "checkpoint")
    run([a.cleave, "run", bundle, "--steps", "1", "--inputs", os.path.join(assets, "inputs"),
         "--checkpoint", ckpt])
    put_file(seeds, "plan", os.path.join(bundle, "plan.pb"))
    for f in glob.glob(os.path.join(bundle, "weights", "*.safetensors")):
        put_file(seeds, "safetensors", f)
    for f in glob.glob(os.path.join(ckpt, "step-*", "*.safetensors")):
        put_file(seeds, "safetensors", f)
    for f in glob.glob(os.path.join(ckpt, "step-*", "checkpoint.pb")):
        put_file(seeds, "checkpoint", f)
    # Stored paths at the folder's edge: the plan and checkpoint harnesses
    # hold every accepted one inside its folder, and mutations start here.
    stored_path_seeds(seeds, work, os.path.join(bundle, "plan.pb"), glob.glob(
        os.path.join(ckpt, "step-*", "checkpoint.pb")))
    exported = os.path.join(work, "exported.safetensors")
    run([a.cleave, "export", ckpt, "-o", exported])
    put_file(seeds, "safetensors", exported)

    # .npy: every dtype and header version.
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((2, 3)).astype(np.float32),
              np.arange(6, dtype=np.int64).reshape(3, 2), np.arange(4, dtype=np.int32),
              np.array([True, False, True]), np.array([1, 0], dtype=np.uint8),
              np.zeros((0, 4), np.float32), np.float32(3.5).reshape(())]
    for arr in arrays:
        for version in ((1, 0), (2, 0), (3, 0)):
            put(seeds, "npy", npy_bytes(arr, version))

    # Data feeds: [mode, flags, rows, width, split hi, split lo] + body.
    text = open(os.path.join(ROOT, "README.md"), "rb").read()[:2000]
    put(seeds, "data-feed", bytes([0, 0, 1, 7, 0, 0]) + text)
    put(seeds, "data-feed", bytes([0, 3, 3, 15, 0, 0]) + text)
    x = npy_bytes(rng.standard_normal((6, 4)).astype(np.float32), (1, 0))
    y = npy_bytes(np.arange(6, dtype=np.int64), (1, 0))
    y32 = npy_bytes(np.arange(6, dtype=np.int32), (1, 0))
    for mode, flags, rows, yy in ((1, 0, 2, y), (1, 5, 1, y), (1, 2, 2, y32), (2, 0, 6, y)):
        n = len(x)
        put(seeds, "data-feed", bytes([mode, flags, rows - 1, 3, n >> 8, n & 255]) + x + yy)
    for h in sorted(os.listdir(seeds)):
        print("%-12s %5d seeds" % (h, len(os.listdir(os.path.join(seeds, h)))))


if __name__ == "__main__":
    main()

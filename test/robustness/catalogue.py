#!/usr/bin/python3
"""The bad-input catalogue (issue 14): careless and hostile input across
import, compile, run, inspect, export and checkpoints.

Usage: catalogue.py --cleave CLEAVE --work DIR [--only SUBSTRING] [-v]

Every case runs one cleave command on input that is wrong in one way, and
must give

  * exactly one line on stderr, `cleave: error: ...`, matching the case's
    pattern (which names the cause: the file, node, flag, input or tensor),
    and nothing on stdout;
  * an exit status in 1..127 (2 for a command line cleave cannot read);
  * no stack dump, no uncaught exception, no sanitizer report;
  * every file that existed before exactly as it was (contents and mode),
    and no file left behind.

A few cases are the good twin of a bad one (the same model with its data
where it belongs) and must succeed. The fixtures (models, bundles, inputs,
checkpoints) are made once; each case that breaks something breaks a copy.
"""
import argparse
import hashlib
import os
import re
import resource
import shutil
import stat
import subprocess
import sys

import numpy as np

import untrusted

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
PY = sys.executable
CRASH_SIGNS = ("Stack dump", "PLEASE submit", "terminate called", "Sanitizer",
               "runtime error:", "Segmentation fault", "Aborted", "core dumped",
               "ORTE_ERROR_LOG")


class Case:
    def __init__(self, area, name, argv, expect, code=None, prepare=None, ok=False,
                 creates=False, env=None, steps=False):
        self.area, self.name, self.argv, self.expect = area, name, argv, expect
        self.code, self.prepare, self.ok, self.creates = code, prepare, ok, creates
        # steps: the failure comes after training steps, whose progress
        # lines stdout may show (a checkpoint onto a disk that fills).
        self.env, self.steps = env, steps


def snapshot(root):
    """path -> (kind, mode, digest) of everything under root."""
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    digest = hashlib.sha1(f.read()).hexdigest()
                out[p] = ("file", st.st_mode, digest)
            elif stat.S_ISLNK(st.st_mode):
                out[p] = ("link", 0, os.readlink(p))
            else:
                out[p] = ("dir" if stat.S_ISDIR(st.st_mode) else "other", st.st_mode, "")
    return out


def sh(cmd, **kw):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if r.returncode:
        sys.exit("catalogue: fixture command failed: %s\n%s" % (" ".join(cmd), r.stdout))
    return r.stdout


def npy(path, arr):
    np.save(path, arr)


class Fixtures:
    """Everything the cases read, made once under W/fx."""

    def __init__(self, cleave, work):
        self.cleave = cleave
        fx = self.fx = os.path.join(work, "fx")
        os.makedirs(fx)
        sh([PY, os.path.join(HERE, "Inputs", "hostile_models.py"), os.path.join(fx, "m")])
        self.ts = os.path.join(fx, "ts")
        sh([PY, os.path.join(HERE, "Inputs", "hostile_torchscript.py"), self.ts])
        self.mlp = os.path.join(fx, "mlp.onnx")
        sh([PY, os.path.join(ROOT, "test", "Import", "Onnx", "Inputs", "make_model.py"), "mlp",
            self.mlp])
        self.gpt = os.path.join(fx, "gpt.onnx")
        sh([PY, os.path.join(ROOT, "examples", "make_gpt.py"), self.gpt, "--layers", "1",
            "--d", "16", "--heads", "2", "--seq", "8", "--batch", "2"])
        # The MLP trained with cross-entropy (x [5, 4], labels [5] over 3
        # classes), at tp 1 and 2; a --plan-only bundle; the GPT.
        self.bundle = os.path.join(fx, "mlp-bundle")
        sh([cleave, "compile", self.mlp, "--input", "x=5x4", "--loss", "cross_entropy",
            "-o", self.bundle])
        self.bundle2 = os.path.join(fx, "mlp-bundle-tp2")
        sh([cleave, "compile", self.mlp, "--input", "x=5x4", "--loss", "cross_entropy",
            "--tp", "2", "-o", self.bundle2])
        self.plan_only = os.path.join(fx, "mlp-plan-only")
        sh([cleave, "compile", self.mlp, "--input", "x=5x4", "--loss", "cross_entropy",
            "--plan-only", "-o", self.plan_only])
        self.gpt_bundle = os.path.join(fx, "gpt-bundle")
        sh([cleave, "compile", self.gpt, "-o", self.gpt_bundle])
        self.inputs = os.path.join(fx, "in")
        os.makedirs(self.inputs)
        npy(os.path.join(self.inputs, "x.npy"), np.ones((5, 4), np.float32))
        npy(os.path.join(self.inputs, "labels.npy"), np.array([0, 1, 2, 0, 1], np.int64))
        self.text = os.path.join(fx, "text.txt")
        with open(self.text, "wb") as f:
            f.write(open(os.path.join(ROOT, "README.md"), "rb").read()[:4000])
        self.ckpt = os.path.join(fx, "ckpt")
        sh([cleave, "run", self.bundle, "--steps", "2", "--inputs", self.inputs,
            "--checkpoint", self.ckpt])
        self.step = os.path.join(self.ckpt, sorted(os.listdir(self.ckpt))[-1])
        self.gpt_ckpt = os.path.join(fx, "gpt-ckpt")
        sh([cleave, "run", self.gpt_bundle, "--steps", "1", "--text", self.text,
            "--checkpoint", self.gpt_ckpt])
        self.secret = os.path.join(fx, "m", "secret")
        self.fifo = os.path.join(fx, "fifo")
        os.mkfifo(self.fifo)
        self.file = os.path.join(fx, "notes.txt")
        with open(self.file, "w") as f:
            f.write("precious\n")
        self.mine = os.path.join(fx, "mine")
        os.makedirs(self.mine)
        with open(os.path.join(self.mine, "notes.txt"), "w") as f:
            f.write("precious\n")
        self.untrusted = untrusted.UntrustedFixtures(cleave, fx)


def copy_of(src, dst):
    if os.path.isdir(src):
        shutil.copytree(src, dst, symlinks=True)
    else:
        shutil.copy(src, dst)
    return dst


def cut(path, keep):
    with open(path, "r+b") as f:
        f.truncate(keep if keep >= 0 else os.path.getsize(path) + keep)


def flip(path, at):
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x5A]))


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def write_safetensors(path, tensors):
    """A safetensors file of float32 arrays (the format's header by hand:
    Debian has no safetensors package)."""
    import json
    header, offset, blobs = {}, 0, []
    for name, a in tensors.items():
        blob = np.ascontiguousarray(a, np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header).encode()
    write(path, len(text).to_bytes(8, "little") + text + b"".join(blobs))


def cases(F, W):
    """The catalogue. W(...) names a scratch path of the case's own."""
    m = lambda case: os.path.join(F.fx, "m", case, "model.onnx")  # noqa: E731
    c = [F.cleave]
    x = ["--input", "x=5x4"]
    ce = ["--loss", "cross_entropy"]
    L = []

    def add(area, name, argv, expect, **kw):
        L.append(Case(area, name, argv, expect, **kw))

    # --- import: external data held to the model's folder -------------------
    ext = "initializer 'fc.weight' has external data"
    add("import", "external data at ../secret", c + ["import", m("dotdot"), *x],
        ext + r" at '\.\./secret', which leads out of the model's folder")
    add("compile", "external data at ../secret", c + ["compile", m("dotdot"), *x, "--loss",
        "mse", "-o", W("b")], ext + r" at '\.\./secret', which leads out")
    add("import", "external data at an absolute path", c + ["import", m("absolute"), *x],
        ext + r" at the absolute path '.*secret': external data must lie in the model's folder")
    add("import", "external data at ~/", c + ["import", m("home"), *x],
        ext + r" at the absolute path '~/secret'")
    add("import", "external data through a symbolic link out", c + ["import", m("symlink"), *x],
        ext + r" at 'w.bin', which a symbolic link leads out of the model's folder")
    add("import", "external data file is a folder", c + ["import", m("folder"), *x],
        ext + r" file '.*w.bin' which is not a regular file")
    add("import", "external data file missing", c + ["import", m("missing"), *x],
        ext + r" file '.*nothing.bin' which cannot be opened: No such file or directory")
    add("import", "external data offset not a number", c + ["import", m("offset_text"), *x],
        ext + r" offset 'abc', which is not a size")
    add("import", "external data offset negative", c + ["import", m("offset_negative"), *x],
        ext + r" offset '-8', which is not a size")
    add("import", "external data truncated", c + ["import", m("truncated"), *x],
        ext + r" file 'w.bin' that is truncated \(20 bytes; the tensor needs 48 from offset 0\)")
    add("import", "external data past the end", c + ["import", m("past_end"), *x],
        ext + r" file 'w.bin' that is truncated \(48 bytes; the tensor needs 48 from offset 40\)")
    add("import", "external data of the wrong length", c + ["import", m("wrong_length"), *x],
        ext + r" of length 12, its shape needs 48")
    add("import", "raw data short", c + ["import", m("raw_short"), *x],
        r"initializer 'fc.weight' holds 44 bytes of raw data, its shape needs 48")
    add("import", "initializer dims overflow", c + ["import", m("dims_overflow"), *x],
        r"initializer 'fc.weight' has more elements than fit in memory")
    add("import", "external data in place", c + ["import", m("external_ok"), *x, "-o",
        os.devnull], "", ok=True)

    # --- import: the file itself --------------------------------------------
    add("import", "model missing", c + ["import", W("none.onnx")], r"none\.onnx")
    add("import", "model is a folder", c + ["import", F.fx], r"fx.*(directory|folder)")
    add("import", "model is a FIFO", c + ["import", F.fifo], r"fifo.*not a regular file")
    add("import", "model empty", c + ["import", W("empty.onnx"), *x], r"empty\.onnx",
        prepare=lambda: write(W("empty.onnx"), b""))
    add("import", "model is random bytes", c + ["import", W("noise.onnx"), *x],
        r"noise\.onnx", prepare=lambda: write(W("noise.onnx"), os.urandom(3000)))
    add("import", "model cut in half", c + ["import", W("half.onnx"), *x], r"half\.onnx",
        prepare=lambda: (copy_of(F.mlp, W("half.onnx")), cut(W("half.onnx"),
                                                              os.path.getsize(F.mlp) // 2)))
    add("import", "TorchScript file of random bytes", c + ["import", W("noise.pt"), *x],
        r"noise\.pt' is not a TorchScript module", prepare=lambda: write(W("noise.pt"),
                                                                        os.urandom(3000)))
    add("import", "ONNX file named .pt", c + ["import", W("mlp.pt"), *x],
        r"mlp\.pt' is not a TorchScript module .*an ONNX model must be named \.onnx",
        prepare=lambda: copy_of(F.mlp, W("mlp.pt")))
    add("import", "TorchScript zip cut short", c + ["import", W("cut.pt"), *x],
        r"cut\.pt' is a malformed TorchScript archive: it has no zip directory$",
        prepare=lambda: write(
            W("cut.pt"), b"PK\x03\x04" + os.urandom(100)))
    ts = lambda name: os.path.join(F.ts, name)
    add("import", "TorchScript class constant without Final[type]",
        c + ["import", ts("constant-untyped.pt"), "--input", "x=2x4"],
        r"constant-untyped\.pt': Expected subscripted type for class constant$")
    add("import", "TorchScript class constant of the wrong type",
        c + ["import", ts("constant-mistyped.pt"), "--input", "x=2x4"],
        r"constant-mistyped\.pt': Return value was annotated as having type")
    add("import", "TorchScript code cut mid-expression",
        c + ["import", ts("code-cut.pt"), "--input", "x=2x4"],
        r"code-cut\.pt': expected \) but found 'eof'")
    # A fuzzer's finding: a record claiming 3.7 GB in a 3 KB file (libtorch
    # allocates what the zip directory declares before reading).
    add("import", "TorchScript record claiming 3.7 GB",
        c + ["import", ts("record-3gb.pt"), "--input", "x=2x4"],
        r"record-3gb\.pt' is a malformed TorchScript archive: it has a record "
        r"'tiny/data/0' that claims 3732275456 bytes \(48 stored\) in a file of \d+$")
    add("import", "TorchScript records compressed with bzip2",
        c + ["import", ts("bzip2.pt"), "--input", "x=2x4"],
        r"bzip2\.pt' is a malformed TorchScript archive: it compresses record "
        r"'tiny/data/0' with zip method 12, which libtorch cannot read$")
    add("import", "TorchScript buffer of stride 0 expanding 4 bytes to 800 MB",
        c + ["import", ts("expanded.pt"), "--input", "x=2x4"],
        r"expanded\.pt': tensor 'big' is a view of 800000000 bytes over a storage of 4 "
        r"\(a stride-0 expansion\)")
    # A fuzzer's finding: libtorch's unpickler asks for 28 GB (ASan aborts
    # there; plain builds get bad_alloc, or an OOM kill, in the child process
    # that reads archives).
    add("import", "TorchScript pickle with a 28 GB length",
        c + ["import", os.path.join(HERE, "Inputs", "torchscript-unpickler-28gb.pt")],
        r"(cannot load TorchScript module|libtorch crashed reading) "
        r"'.*torchscript-unpickler-28gb\.pt'")

    # --- import: the graph ---------------------------------------------------
    add("import", "opset newer than Cleave knows", c + ["import", m("opset99"), *x],
        r"the model declares opset 99 of the default domain; Cleave knows opsets up to 21")
    add("compile", "opset newer than Cleave knows", c + ["compile", m("opset99"), *x, "--loss",
        "mse", "-o", W("b")], r"declares opset 99")
    add("import", "IR version newer than Cleave knows", c + ["import", m("ir_version_future"),
        *x], r"IR version 1000")
    add("import", "two nodes write one value", c + ["import", m("two_writers"), *x],
        r"node 'again' writes 'h', which node 'fc' already defines")
    add("import", "a node overwrites a graph input", c + ["import", m("writes_input"), *x],
        r"node 'overwrite' writes 'x', which a graph input or initializer already defines")
    add("import", "op of an unknown domain", c + ["import", m("custom_domain"), *x],
        r"node 'relu': unsupported op 'com\.example\.FancyRelu'")
    add("import", "input never defined", c + ["import", m("undefined_input"), *x],
        r"node 'relu' .*input 'nowhere' is not defined")
    add("import", "graph output never made", c + ["import", m("output_not_made"), *x],
        r"graph output 'never_made' is not produced")
    add("import", "a cycle", c + ["import", m("cycle"), *x], r"node 'relu' .*input 'y'")
    add("import", "graph without nodes", c + ["import", m("no_nodes"), *x],
        r"graph output 'y' is not produced")
    add("import", "MatMul of mismatched shapes", c + ["import", m("matmul_mismatch"), *x],
        r"node 'fc' \(MatMul.*contracting dimensions differ: 4 and 3")
    add("import", "Reshape to another element count", c + ["import", m("reshape_mismatch"),
        *x], r"node 'reshape' \(Reshape.*element counts differ")
    add("import", "string tensors", c + ["import", m("string_tensor"), *x],
        r"initializer 'names' has unsupported element type STRING")
    add("import", "graph input shadows an initializer", c + ["import",
        m("input_shadows_initializer"), *x], r"graph input 'fc.weight'")

    # --- import and compile: flags ---------------------------------------------
    add("import", "symbolic batch without --input", c + ["import", F.mlp], r"'x'.*--input")
    add("import", "--input for no such input", c + ["import", F.mlp, "--input", "z=5x4"],
        r"--input names 'z', which is not a graph input")
    add("import", "--input with a bad type", c + ["import", F.mlp, "--input", "x=5x4xf99"],
        r"--input x")
    add("import", "--input with a negative dimension", c + ["import", F.mlp, "--input",
        "x=-5x4"], r"--input x")
    add("compile", "--input dims overflow", c + ["compile", F.mlp, "--input",
        "x=4611686018427387904x4", "--loss", "mse", "-o", W("b")],
        r"graph input 'x' of shape \[4611686018427387904, 4\] holds more bytes than fit")
    add("compile", "--input dims overflow (product)", c + ["compile", F.mlp, "--input",
        "x=3037000500x3037000500", "--loss", "mse", "-o", W("b")],
        r"graph input 'x' of shape \[3037000500, 3037000500\] holds more bytes")
    add("compile", "--lr inf", c + ["compile", F.mlp, *x, "--loss", "mse", "-o", W("b"),
        "--lr", "inf"], r"--lr must be a finite number, not inf")
    add("compile", "--eps nan", c + ["compile", F.mlp, *x, "--loss", "mse", "-o", W("b"),
        "--optimizer", "adamw", "--eps", "nan"], r"--eps must be a finite number, not nan")
    add("compile", "--tp 0", c + ["compile", F.mlp, *x, *ce, "--tp", "0", "-o", W("b")],
        r"--tp")
    add("compile", "--tp -2", c + ["compile", F.mlp, *x, *ce, "--tp", "-2", "-o", W("b")],
        r"--tp")
    dev = lambda *flags: c + ["compile", F.mlp, *x, *ce, "-o", W("b"), *flags]
    add("compile", "--devices 0", dev("--devices", "0"),
        r"--devices must be between 1 and 1048576$")
    add("compile", "--devices a trillion", dev("--devices", "1000000000000"),
        r"--devices must be between 1 and 1048576$")
    add("compile", "--memory-per-device under a byte", dev("--devices", "2",
        "--memory-per-device", "0.4"), r"--memory-per-device '0.4' must be a positive size")
    add("compile", "--devices with --tp", dev("--devices", "4", "--tp", "2"),
        r"give either --devices \(the compiler chooses the mesh\) or --tp, --mesh and "
        r"--zero, not both$")
    add("compile", "--memory-per-device nothing fits", dev("--memory-per-device", "100"),
        r"the step does not fit 100 B per device with any recomputation or "
        r"sequence parallelism: "
        r"dp=1,tp=1: needs \d+ B per device, over 100 B(; dp=1,tp=1,recompute=.*)?$")
    add("compile", "--recompute unknown", dev("--recompute", "some"),
        r"--recompute must be none, selective, full or auto, not 'some'$")
    add("compile", "--sequence-parallel unknown", dev("--sequence-parallel", "yes"),
        r"--sequence-parallel must be on, off or auto, not 'yes'$")
    add("compile", "--sequence-parallel on at tp 1", dev("--sequence-parallel", "on"),
        r"--sequence-parallel on splits activations over the tp ranks: give --tp 2 "
        r"or more \(or --devices\)$")
    add("compile", "--lr-schedule unknown", dev("--lr-schedule", "warmup"),
        r"--lr-schedule: unknown learning-rate schedule 'warmup' \(constant, "
        r"constant_with_warmup, linear, cosine, cosine_with_restarts, polynomial, "
        r"inverse_sqrt\)$")
    add("compile", "--lr-schedule linear without a total", dev("--lr-schedule", "linear"),
        r"--lr-schedule: the 'linear' learning-rate schedule decays over the run: "
        r"give its total steps \(--total-steps, total_steps=\)$")
    add("compile", "--warmup-steps negative", dev("--warmup-steps", "-3"),
        r"--lr-schedule: the warmup and total steps of a learning-rate schedule "
        r"must be >= 0$")
    add("compile", "--clip-grad-norm nan", dev("--clip-grad-norm", "nan"),
        r"--clip-grad-norm must be a finite number >= 0 \(0: no clipping\), not nan$")
    add("compile", "--clip-grad-value negative", dev("--clip-grad-value", "-1"),
        r"--clip-grad-value must be a finite number >= 0 \(0: no clipping\), "
        r"not -1.000000$")
    add("compile", "--on-nonfinite unknown", dev("--on-nonfinite", "raise"),
        r"--on-nonfinite must be stop, skip or ignore, not 'raise'$")
    add("compile", "--accumulate zero", dev("--accumulate", "0"),
        r"--accumulate must be at least 1 \(micro-batches per update\), "
        r"not 0$")
    add("compile", "--accumulate not a number", dev("--accumulate", "four"),
        r"accumulate")
    add("compile", "--shape without dims", dev("--shape", "x"),
        r"--shape 'x' must look like NAME=4x32\[xi64\]\[,NAME=DIMS...\], each "
        r"input once$")
    add("compile", "--shape of an unknown input", dev("--shape", "nope=4x8"),
        r"batch shape 1 did not compile: --input names 'nope', which is not a "
        r"graph input of the model$")
    add("compile", "--shape repeating the first", dev("--shape", "x=5x4"),
        r"batch shape 1 \(x f32 \[5, 4\], labels i64 \[5\]\) repeats batch "
        r"shape 0$")
    add("compile", "--link without --devices", dev("--link", "intra=400"),
        r"--link is for --devices N \(the compiler's choice of the mesh\)$")
    add("compile", "--memory-per-device not a size", dev("--devices", "2",
        "--memory-per-device", "lots"), r"--memory-per-device 'lots' must be a positive size")
    add("compile", "--memory-per-device negative", dev("--devices", "2",
        "--memory-per-device", "-5GB"), r"--memory-per-device '-5GB' must be a positive size")
    add("compile", "--link malformed", dev("--devices", "2", "--link", "intra=fast"),
        r"--link 'intra=fast' must look like intra=450,inter=50")
    add("compile", "--link of zero", dev("--devices", "2", "--link", "inter=0"),
        r"--link 'inter=0' must look like")
    add("compile", "--node-size 0", dev("--devices", "2", "--node-size", "0"),
        r"--node-size must be at least 1$")
    add("compile", "--device-tflops nan", dev("--devices", "2", "--device-tflops", "nan"),
        r"--device-tflops must be a positive number$")
    add("compile", "--devices and no mesh fits the budget", dev("--devices", "2",
        "--memory-per-device", "100B"), r"no mesh of 2 devices can train this model: "
        r"dp=2,tp=1: input \"x\" .* its batch of 5 rows does not divide over dp = 2 .*; "
        r"dp=1,tp=2: needs \d+ B per device, over 100 B(; dp=1,tp=2,recompute=.*)?$")
    add("compile", "unknown --loss", c + ["compile", F.mlp, *x, "--loss", "hinge", "-o",
        W("b")], r"hinge")
    add("compile", "unknown --optimizer", c + ["compile", F.mlp, *x, *ce, "--optimizer",
        "lion", "-o", W("b")], r"lion")
    add("compile", "--freeze not a regular expression", c + ["compile", F.mlp, *x, *ce,
        "--freeze", "fc.(", "-o", W("b")], r"--freeze 'fc\.\(' is not a valid regular")
    add("compile", "--freeze matching nothing", c + ["compile", F.mlp, *x, *ce, "--freeze",
        "^nothing$", "-o", W("b")], r"--freeze '\^nothing\$' matches no initializer")
    add("compile", "--weights file missing", c + ["compile", F.mlp, *x, *ce, "--weights",
        W("none.safetensors"), "-o", W("b")], r"none\.safetensors")
    add("compile", "--weights file of random bytes", c + ["compile", F.mlp, *x, *ce,
        "--weights", W("w.safetensors"), "-o", W("b")], r"w\.safetensors",
        prepare=lambda: write(W("w.safetensors"), os.urandom(500)))
    add("compile", "--plan file missing", c + ["compile", F.mlp, *x, *ce, "--plan",
        W("none.txt"), "-o", W("b")], r"none\.txt")
    add("compile", "--plan rule of no kind", c + ["compile", F.mlp, *x, *ce, "--plan",
        W("rules.txt"), "-o", W("b")], r"rules\.txt",
        prepare=lambda: write(W("rules.txt"), b"fc\\.weight diagonal\n"))

    # --- compile: -o never costs the user a file ---------------------------------
    add("compile", "-o a folder of the user's files", c + ["compile", F.mlp, *x, "--loss",
        "mse", "-o", F.mine], r"'.*mine' is a folder that is not a bundle and not empty: it is "
        r"left as it is")
    add("compile", "-o a file of the user's", c + ["compile", F.mlp, *x, "--loss", "mse", "-o",
        F.file], r"'.*notes\.txt' exists and is not a bundle directory")
    add("compile", "-o an empty folder", c + ["compile", F.mlp, *x, *ce, "-o", W("empty")], "",
        ok=True, prepare=lambda: os.makedirs(W("empty")), creates=True)
    add("compile", "-o a previous bundle", c + ["compile", F.mlp, *x, *ce, "-o", W("b")], "",
        ok=True, prepare=lambda: copy_of(F.bundle, W("b")), creates=True)
    add("import", "external data through a linked model folder", c + [
        "import", W("linked", "external_ok", "model.onnx"), *x, "-o", os.devnull], "", ok=True,
        prepare=lambda: os.symlink(os.path.join(F.fx, "m"), W("linked")))
    add("compile", "-o the model's own folder", c + ["compile", m("external_ok"), *x,
        "--loss", "mse", "-o", os.path.join(F.fx, "m", "external_ok")],
        r"is a folder that is not a bundle and not empty")

    # --- the command line ----------------------------------------------------------
    hint = r".*; see cleave --help$"
    add("cli", "unknown command", c + ["frobnicate", F.mlp],
        r"unknown command 'frobnicate'; the commands are import, compile, run, inspect, "
        r"export and launch \(see cleave --help\)", code=2)
    add("cli", "launch without -n", c + ["launch", F.mlp],
        r"give the number of ranks with -n N \(at least 1\)")
    add("cli", "unknown flag", c + ["compile", F.mlp, "--frobnicate", "-o", W("b")],
        r"unknown command line argument '--frobnicate'" + hint, code=2)
    add("cli", "--lr abc", c + ["compile", F.mlp, "--lr", "abc", "-o", W("b")],
        r"for the --lr option: 'abc' value invalid for floating point argument" + hint, code=2)
    add("cli", "--tp 2x", c + ["compile", F.mlp, "--tp", "2x", "-o", W("b")],
        r"for the --tp option: '2x' value invalid" + hint, code=2)
    add("cli", "-o without its value", c + ["compile", F.mlp, "-o"], r"-o" + hint, code=2)
    add("cli", "two models", c + ["compile", F.mlp, F.mlp, "-o", W("b")],
        r"too many positional arguments" + hint, code=2)
    add("cli", "no command", c + [F.mlp], r"", code=None)
    add("cli", "--steps not a number", c + ["run", F.bundle, "--steps", "many"],
        r"--steps" + hint, code=2)

    # --- run: bundles ----------------------------------------------------------------
    run = c + ["run"]
    add("run", "bundle missing", run + [W("nothing"), "--steps", "1"], r"nothing")
    add("run", "bundle is a file", run + [F.file, "--steps", "1"],
        r"'.*notes\.txt' is not a bundle; compile one with cleave compile")
    add("run", "plan is a folder", run + [W("fake"), "--steps", "1"],
        r"cannot read bundle plan '.*plan\.pb': it is a directory",
        prepare=lambda: os.makedirs(W("fake", "plan.pb")))
    add("run", "plan of random bytes", run + [W("b"), "--inputs", F.inputs],
        r"bundle plan '.*plan\.pb' is corrupt or truncated",
        prepare=lambda: (copy_of(F.bundle, W("b")), write(W("b", "plan.pb"), os.urandom(999))))
    add("run", "plan empty", run + [W("b"), "--inputs", F.inputs], r"plan\.pb' is empty",
        prepare=lambda: (copy_of(F.bundle, W("b")), write(W("b", "plan.pb"), b"")))
    add("run", "plan cut short", run + [W("b"), "--inputs", F.inputs],
        r"bundle plan '.*plan\.pb' is corrupt or truncated",
        prepare=lambda: (copy_of(F.bundle, W("b")), cut(W("b", "plan.pb"), -9)))
    add("run", "plan of another format version", run + [W("b"), "--inputs", F.inputs],
        r"has format version 9; this cleave reads version",
        prepare=lambda: (copy_of(F.bundle, W("b")), set_plan_version(W("b", "plan.pb"), 9)))
    add("run", "weights missing", run + [W("b"), "--inputs", F.inputs], r"rank-0\.safetensors",
        prepare=lambda: (copy_of(F.bundle, W("b")), os.remove(W("b", "weights",
                                                                  "rank-0.safetensors"))))
    add("run", "weights cut short", run + [W("b"), "--inputs", F.inputs],
        r"rank-0\.safetensors", prepare=lambda: (copy_of(F.bundle, W("b")), cut(
            W("b", "weights", "rank-0.safetensors"), -10)))
    add("run", "weights with one byte changed", run + [W("b"), "--inputs", F.inputs],
        r"rank-0\.safetensors", prepare=lambda: (copy_of(F.bundle, W("b")), flip(
            W("b", "weights", "rank-0.safetensors"), os.path.getsize(
                W("b", "weights", "rank-0.safetensors")) - 3)))
    add("run", "weights file that is a FIFO", run + [W("b"), "--inputs", F.inputs],
        r"cannot read safetensors file '.*rank-0\.safetensors': it is not a regular file",
        prepare=lambda: (copy_of(F.bundle, W("b")), os.remove(W(
            "b", "weights", "rank-0.safetensors")), os.mkfifo(W("b", "weights",
                                                                 "rank-0.safetensors"))))
    add("run", "a --plan-only bundle", run + [F.plan_only, "--inputs", F.inputs],
        r"holds no weights \(it was compiled with --plan-only\)")
    add("run", "a tp 2 bundle on one rank", run + [F.bundle2, "--inputs", F.inputs, "--ranks",
        "1"], r"tp = 2")
    add("run", "cross-entropy over 2.5e11 classes", run + [W("huge"), "--steps", "1",
        "--inputs", W("huge-in")], r"cannot allocate an arena of 4000000000\d{3} bytes",
        prepare=lambda: huge_classes(F, W))

    # --- run: data ------------------------------------------------------------------
    def inputs_with(name, value):
        def f():
            copy_of(F.inputs, W("in"))
            if isinstance(value, bytes):
                write(W("in", name), value)
            elif value is None:
                os.remove(W("in", name))
            elif isinstance(value, str) and value == "dir":
                os.remove(W("in", name))
                os.makedirs(W("in", name))
            elif isinstance(value, str) and value == "fifo":
                os.remove(W("in", name))
                os.mkfifo(W("in", name))
            else:
                np.save(W("in", name), value)
        return f
    rin = run + [F.bundle, "--steps", "1", "--inputs", W("in")]
    add("run", "label equal to the class count", rin, r"step 0: instruction [0-9]+ "
        r"\('check_index' at loc\(\"input 'labels'\"\)\): value 3 at \[3\] is out of range "
        r"\[0, 3\) \(and not the ignored -100\)",
        prepare=inputs_with("labels.npy", np.array([0, 1, 2, 3, 1], np.int64)))
    add("run", "label far out of range", rin, r"value 1000 at \[1\] is out of range \[0, 3\)",
        prepare=inputs_with("labels.npy", np.array([0, 1000, 2, 0, 1], np.int64)))
    add("run", "label negative", rin, r"value -5 at \[4\] is out of range \[0, 3\)",
        prepare=inputs_with("labels.npy", np.array([0, 1, 2, 0, -5], np.int64)))
    add("run", "label -100 is ignored", rin, "", ok=True,
        prepare=inputs_with("labels.npy", np.array([0, 1, 2, -100, 1], np.int64)))
    # With ranks: every rank meets the same bad input; the user reads it once.
    add("run", "label out of range at tp 2", run + [F.bundle2, "--steps", "1", "--inputs",
        W("in")], r"rank [01]: step 0: .*value 7 at \[3\] is out of range \[0, 3\)",
        prepare=inputs_with("labels.npy", np.array([0, 1, 2, 7, 1], np.int64)))
    add("run", "an input missing at tp 2", run + [F.bundle2, "--steps", "1", "--inputs",
        W("in")], r"rank [01]: missing input file '.*x\.npy'", prepare=inputs_with("x.npy", None))
    add("run", "an input missing", rin, r"x\.npy", prepare=inputs_with("x.npy", None))
    add("run", "an input of the wrong dtype", rin, r"x", prepare=inputs_with(
        "x.npy", np.ones((5, 4), np.float64)))
    add("run", "an input of the wrong shape", rin, r"x", prepare=inputs_with(
        "x.npy", np.ones((4, 5), np.float32)))
    add("run", "an input in Fortran order", rin, r"x\.npy", prepare=inputs_with(
        "x.npy", np.asfortranarray(np.ones((5, 4), np.float32))))
    add("run", "an input cut short", rin, r"x\.npy", prepare=lambda: (
        inputs_with("x.npy", np.ones((5, 4), np.float32))(), cut(W("in", "x.npy"), -5)))
    add("run", "an input of random bytes", rin, r"x\.npy",
        prepare=inputs_with("x.npy", os.urandom(200)))
    add("run", "an input that is a folder", rin,
        r"cannot read \.npy file '.*x\.npy': it is a directory", prepare=inputs_with("x.npy",
                                                                                    "dir"))
    add("run", "an input that is a FIFO", rin,
        r"cannot read \.npy file '.*x\.npy': it is not a regular file",
        prepare=inputs_with("x.npy", "fifo"))
    add("run", "--inputs folder missing", run + [F.bundle, "--inputs", W("nothing")],
        r"nothing")
    add("run", "no data at all", run + [F.bundle], r"--inputs")
    add("run", "--text is a folder", run + [F.gpt_bundle, "--text", F.fx, "--steps", "1"],
        r"cannot read --text file '.*': it is a directory")
    add("run", "--text is a FIFO", run + [F.gpt_bundle, "--text", F.fifo, "--steps", "1"],
        r"cannot read --text file '.*fifo': it is not a regular file")
    add("run", "--text missing", run + [F.gpt_bundle, "--text", W("none.txt"), "--steps", "1"],
        r"cannot read --text file '.*none\.txt': no such file")
    add("run", "--text too short", run + [F.gpt_bundle, "--text", W("short.txt")],
        r"short\.txt' has 5 bytes", prepare=lambda: write(W("short.txt"), b"hello"))
    add("run", "--text for a model that is no language model", run + [F.bundle, "--text",
        F.text], r"--text feeds a byte-level language model")
    add("run", "--text and --inputs", run + [F.bundle, "--text", F.text, "--inputs", F.inputs],
        r"give either --text or --inputs, not both")
    add("run", "--shuffle with a folder of batches", run + [F.bundle, "--inputs", F.inputs,
        "--shuffle"], r"--shuffle needs --batch-from-arrays or --text")
    add("run", "--steps -1", run + [F.bundle, "--inputs", F.inputs, "--steps", "-1"],
        r"--steps must be at least 1")
    add("run", "--backend cuda without a GPU", run + [F.bundle, "--inputs", F.inputs,
        "--backend", "cuda"], r"cuda|CUDA|GPU")
    add("run", "--backend of no kind", run + [F.bundle, "--inputs", F.inputs, "--backend",
        "tpu"], r"tpu")
    add("run", "--precision bf16 on the CPU", run + [F.bundle, "--inputs", F.inputs,
        "--precision", "bf16"], r"bf16")
    add("run", "--dump into a file", run + [F.bundle, "--inputs", F.inputs, "--dump", F.file],
        r"notes\.txt")
    add("run", "--metrics into a folder", run + [F.bundle, "--inputs", F.inputs, "--metrics",
        F.fx], r"--metrics file .*: it is a directory")
    add("run", "--timeout not positive", run + [F.bundle2, "--inputs", F.inputs, "--timeout",
        "-1"], r"--timeout")

    # --- checkpoints ---------------------------------------------------------------
    rck = run + [F.bundle, "--steps", "1", "--inputs", F.inputs]
    add("checkpoint", "--resume a folder that is missing", rck + ["--resume", W("none")],
        r"none")
    add("checkpoint", "--resume a folder without checkpoints", rck + ["--resume", F.mine],
        r"holds no complete checkpoint")
    add("checkpoint", "--resume a corrupt index", rck + ["--resume", W("ck")],
        r"checkpoint index '.*checkpoint\.pb' is corrupt or truncated",
        prepare=lambda: (copy_of(F.step, W("ck")), write(W("ck", "checkpoint.pb"),
                                                         os.urandom(300))))
    add("checkpoint", "--resume an index that is a folder", rck + ["--resume", W("ck")],
        r"checkpoint\.pb.*directory", prepare=lambda: (
            copy_of(F.step, W("ck")), os.remove(W("ck", "checkpoint.pb")),
            os.makedirs(W("ck", "checkpoint.pb"))))
    add("checkpoint", "--resume a checkpoint file cut short", rck + ["--resume", W("ck")],
        r"safetensors", prepare=lambda: (copy_of(F.step, W("ck")), cut_first_safetensors(
            W("ck"))))
    add("checkpoint", "--resume a checkpoint file missing", rck + ["--resume", W("ck")],
        r"safetensors", prepare=lambda: (copy_of(F.step, W("ck")), remove_first_safetensors(
            W("ck"))))
    add("checkpoint", "--resume a checkpoint file that is a FIFO", rck + ["--resume", W("ck")],
        r"it is not a regular file", prepare=lambda: (copy_of(F.step, W("ck")), fifo_for_first(
            W("ck"))))
    add("compile", "--weights with a NaN in a weight that trains",
        c + ["compile", F.mlp, *x, *ce, "--weights", W("nan.safetensors"), "-o", W("b")],
        r"weight 'fc\.weight' holds a value that is not finite \(inf or NaN\), so it "
        r"cannot train: --freeze it if it is a mask or constant, else fix the weights$",
        prepare=lambda: write_safetensors(W("nan.safetensors"), {
            "fc.weight": np.where(np.arange(12) == 5, np.nan, 0.5).astype(np.float32)
            .reshape(3, 4), "fc.bias": np.zeros(3, np.float32)}))
    add("compile", "--weights file that is a FIFO", c + ["compile", F.mlp, *x, *ce, "--weights",
        F.fifo, "-o", W("b")], r"cannot read --weights file '.*fifo': it is not a regular file")
    add("checkpoint", "--resume another model's checkpoint", rck + ["--resume", F.gpt_ckpt],
        r"checkpoint")
    add("checkpoint", "--resume fed otherwise", run + [F.bundle, "--steps", "1", "--inputs",
        F.inputs, "--batch-from-arrays", "--resume", F.ckpt],
        r"the checkpoint was written by a run fed .*resume with the same data flags")
    add("checkpoint", "--checkpoint into a file", rck + ["--checkpoint", F.file],
        r"notes\.txt")
    add("checkpoint", "--save-every -1", rck + ["--checkpoint", W("ck"), "--save-every", "-1"],
        r"--save-every")
    add("checkpoint", "--keep-checkpoints -1", rck + ["--checkpoint", W("ck"),
        "--keep-checkpoints", "-1"], r"--keep-checkpoints")
    add("checkpoint", "--steps 0 without --resume", run + [F.bundle, "--inputs", F.inputs,
        "--steps", "0"], r"--steps must be at least 1 \(0 only with --resume")

    # --- inspect ------------------------------------------------------------------------
    add("inspect", "bundle missing", c + ["inspect", W("nothing")], r"nothing")
    add("inspect", "a file", c + ["inspect", F.file], r"notes\.txt")
    add("inspect", "plan of random bytes", c + ["inspect", W("b")], r"plan\.pb",
        prepare=lambda: (copy_of(F.bundle, W("b")), write(W("b", "plan.pb"), os.urandom(999))))
    add("inspect", "plan of another format version", c + ["inspect", W("b")],
        r"format version 9", prepare=lambda: (copy_of(F.bundle, W("b")), set_plan_version(
            W("b", "plan.pb"), 9)))
    add("inspect", "no bundle named", c + ["inspect"], r"", code=None)

    # --- export -------------------------------------------------------------------------
    ex = c + ["export"]
    add("export", "source missing", ex + [W("nothing"), "-o", W("out.onnx")], r"nothing")
    add("export", "no -o", ex + [F.bundle], r"-o")
    add("export", "-o of no known format", ex + [F.bundle, "-o", W("out.txt")], r"out\.txt")
    add("export", "-o a folder", ex + [F.bundle, "-o", F.mine], r"mine")
    add("export", "a --plan-only bundle", ex + [F.plan_only, "-o", W("out.onnx")],
        r"plan-only|no weights")
    add("export", "a bundle whose model copy is missing", ex + [W("b"), "-o", W("out.onnx")],
        r"model\.onnx", prepare=lambda: (copy_of(F.bundle, W("b")), os.remove(W("b",
                                                                                 "model.onnx"))))
    add("export", "a checkpoint with a corrupt index", ex + [W("ck"), "-o", W("out.onnx")],
        r"checkpoint\.pb", prepare=lambda: (copy_of(F.step, W("ck")), write(
            W("ck", "checkpoint.pb"), os.urandom(300))))
    add("export", "a checkpoint file cut short", ex + [W("ck"), "-o", W("out.safetensors")],
        r"safetensors", prepare=lambda: (copy_of(F.step, W("ck")), cut_first_safetensors(
            W("ck"))))
    add("export", "weights with one byte changed", ex + [W("b"), "-o", W("out.onnx")],
        r"rank-0\.safetensors", prepare=lambda: (copy_of(F.bundle, W("b")), flip(
            W("b", "weights", "rank-0.safetensors"), os.path.getsize(
                W("b", "weights", "rank-0.safetensors")) - 3)))
    add("export", "onto the user's file, whole or not at all", ex + [W("b"), "-o", W("o.onnx")],
        r"rank-0\.safetensors", prepare=lambda: (copy_of(F.bundle, W("b")), write(
            W("o.onnx"), b"the user's previous export"), cut(W("b", "weights",
                                                                "rank-0.safetensors"), -10)))
    untrusted.cases(F, F.untrusted, W, add, copy_of, write)
    return L


def set_plan_version(path, version):
    # format_version is field 1, a varint: the plan begins 08 NN.
    data = bytearray(open(path, "rb").read())
    assert data[0] == 0x08, "plan does not begin with format_version"
    data[1] = version
    write(path, bytes(data))


def safetensors_in(d):
    return sorted(os.path.join(d, n) for n in os.listdir(d) if n.endswith(".safetensors"))


def cut_first_safetensors(d):
    cut(safetensors_in(d)[0], -16)


def remove_first_safetensors(d):
    os.remove(safetensors_in(d)[0])


def fifo_for_first(d):
    f = safetensors_in(d)[0]
    os.remove(f)
    os.mkfifo(f)


def huge_classes(F, W):
    sh([F.cleave, "compile", os.path.join(F.fx, "m", "huge_classes", "model.onnx"), "--loss",
        "cross_entropy", "-o", W("huge")])
    os.makedirs(W("huge-in"))
    npy(W("huge-in", "x.npy"), np.zeros((1, 1), np.float32))
    npy(W("huge-in", "labels.npy"), np.zeros(1, np.int64))


# Every case finishes within a minute and 4 GiB (issue 33: a small file
# must not make the compiler explode); the address space is the bound the
# kernel enforces.
LIMIT_SECONDS = 60
LIMIT_BYTES = 4 << 30


def limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_BYTES, LIMIT_BYTES))


def check(case, r, before, after, own):
    """Why the outcome breaks a promise, or None."""
    err = r.stderr.decode("utf-8", "replace")
    out = r.stdout.decode("utf-8", "replace")
    for sign in CRASH_SIGNS:
        if sign in err or sign in out:
            return "a crash sign (%r)" % sign
    if case.ok:
        if r.returncode != 0:
            return "exit %d (it should succeed)\n%s" % (r.returncode, err)
    else:
        lines = [l for l in err.splitlines() if l.strip()]
        if not 1 <= r.returncode <= 127:
            return "exit status %d, not in 1..127" % r.returncode
        if case.code is not None and r.returncode != case.code:
            return "exit status %d, not %d" % (r.returncode, case.code)
        if len(lines) != 1:
            return "%d lines on stderr, not one:\n%s" % (len(lines), err)
        if not lines[0].startswith("cleave: error: "):
            return "the line is not `cleave: error: ...`: %s" % lines[0]
        if case.expect and not re.search(case.expect, lines[0]):
            return "the line does not say /%s/: %s" % (case.expect, lines[0])
        if out.strip() and not (case.steps and all(
                l.startswith("step ") for l in out.strip().splitlines())):
            return "output on stdout: %s" % out[:300]
    changed = sorted(p for p in before if after.get(p) != before[p])
    added = sorted(p for p in after if p not in before)
    if case.creates:  # a good case that replaces what it prepared
        changed = [p for p in changed if not p.startswith(own + os.sep)]
    if changed:
        return "files changed or lost: %s" % ", ".join(changed[:5])
    if added and not case.ok:
        return "files left behind: %s" % ", ".join(added[:5])
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cleave", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--only", default="")
    ap.add_argument("-v", action="store_true")
    a = ap.parse_args()
    cleave = shutil.which(a.cleave) or a.cleave
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    F = Fixtures(cleave, a.work)
    failures, counts = [], {}
    scratch_root = os.path.join(a.work, "cases")
    all_cases = cases(F, lambda *p: os.path.join(scratch_root, *p))
    for i in range(len(all_cases)):
        own = os.path.join(scratch_root, "%03d" % i)
        W = lambda *p, own=own: os.path.join(own, *p)  # noqa: E731
        case = cases(F, W)[i]
        if a.only and a.only not in case.name:
            continue
        counts[case.area] = counts.get(case.area, 0) + 1
        os.makedirs(own)
        if case.prepare:
            case.prepare()
        before = snapshot(a.work)
        try:
            r = subprocess.run(case.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, timeout=LIMIT_SECONDS,
                               env=case.env, preexec_fn=limit_memory)
        except subprocess.TimeoutExpired:
            untrusted.unmount_all()
            failures.append("%s / %s: a hang (no exit in %d s)" % (case.area, case.name,
                                                                  LIMIT_SECONDS))
            continue
        why = check(case, r, before, snapshot(a.work), own)
        untrusted.unmount_all()
        if not why and not stat.S_ISCHR(os.stat(os.devnull).st_mode):
            # An output written by renaming a temporary onto its path would
            # put a regular file where the device was (-o /dev/null).
            why = "%s is no longer a character device" % os.devnull
        if why:
            failures.append("%s / %s: %s" % (case.area, case.name, why))
        elif a.v:
            print("ok  %-10s %s: %s" % (case.area, case.name,
                                         r.stderr.decode().strip() or "(succeeds)"))
    total = sum(counts.values())
    print("catalogue: %d cases (%s)" % (total, ", ".join(
        "%s %d" % kv for kv in sorted(counts.items()))))
    for f in failures:
        print("FAIL " + f)
    if failures:
        sys.exit(1)
    if not a.only and total < 80 + 60:
        sys.exit("catalogue: only %d cases; issues 14 and 33 ask for at least 140" %
                 total)
    print("catalogue: every case as promised")


if __name__ == "__main__":
    main()

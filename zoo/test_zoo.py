#!/usr/bin/python3
"""Tests of make_zoo.py, check_zoo.py and fashion_mnist.py that need no Cleave:
a fake `cleave` (this file, run as `fake-cleave`) parses the compile/run command
lines of check_zoo's contract and writes the reference as its dump, perturbed
where FAKE_CLEAVE_MODE says.

  /usr/bin/python3 zoo/test_zoo.py          (about 10 s; torch, onnx, numpy)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable


def fake_cleave(argv):
    """compile MODEL -o BUNDLE --loss L --optimizer O --lr ... ; run BUNDLE --steps 1
    --inputs DIR --dump DIR"""
    import argparse
    mode = os.environ.get("FAKE_CLEAVE_MODE", "exact")
    ap = argparse.ArgumentParser(prog="fake-cleave")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compile")
    c.add_argument("model")
    c.add_argument("-o", required=True)
    c.add_argument("--loss", required=True, choices=["auto", "cross_entropy", "mse"])
    c.add_argument("--optimizer", required=True, choices=["sgd", "adamw"])
    for f in ("--lr", "--momentum", "--weight-decay", "--beta1", "--beta2", "--eps"):
        c.add_argument(f, type=float)
    r = sub.add_parser("run")
    r.add_argument("bundle")
    r.add_argument("--steps", type=int, required=True)
    r.add_argument("--inputs", required=True)
    r.add_argument("--dump", required=True)
    a = ap.parse_args(argv)
    if a.cmd == "compile":
        case = os.path.dirname(os.path.abspath(a.model))
        with open(os.path.join(case, "manifest.json")) as f:
            man = json.load(f)
        assert a.loss == man["loss"], (a.loss, man["loss"])
        h = man[a.optimizer]
        assert a.lr == h["lr"] and a.weight_decay == h["weight_decay"]
        if a.optimizer == "sgd":
            assert a.momentum == h["momentum"] and a.beta1 is None
        else:
            assert (a.beta1, a.beta2, a.eps) == (h["beta1"], h["beta2"], h["eps"])
        if mode == "compile-error":
            print("cleave: error: unsupported operator Foo")
            return 1
        os.makedirs(a.o, exist_ok=True)
        with open(os.path.join(a.o, "bundle.json"), "w") as f:
            json.dump({"case": case, "optimizer": a.optimizer}, f)
        return 0
    with open(os.path.join(a.bundle, "bundle.json")) as f:
        b = json.load(f)
    assert a.steps == 1 and os.path.samefile(a.inputs, os.path.join(b["case"], "inputs"))
    ref = os.path.join(b["case"], "ref")
    os.makedirs(a.dump, exist_ok=True)
    files = [(os.path.join(ref, "loss.npy"), "loss.npy")]
    files += [(os.path.join(ref, "grad", f), f) for f in os.listdir(os.path.join(ref, "grad"))]
    files += [(os.path.join(ref, b["optimizer"], f), f)
              for f in os.listdir(os.path.join(ref, b["optimizer"]))]
    for i, (src, name) in enumerate(sorted(files)):
        x = np.load(src)
        if mode == "noise":  # well inside 1e-4
            x = (x * (1 + 1e-6 * np.cos(np.arange(x.size)).reshape(x.shape))).astype(x.dtype)
        if mode == "bad" and i == 1:
            x = x * np.float32(1.01)
        if mode == "bad" and i == 2:
            continue  # missing
        if mode == "bad" and i == 3:
            x = x.reshape(-1, 1) if x.ndim else x.reshape(1, 1)
        if mode == "bad" and i == 4:
            x = np.full_like(x, np.nan)
        np.save(os.path.join(a.dump, name), x)
    np.save(os.path.join(a.dump, "logits.npy"), np.zeros(3, np.float32))  # an extra output
    return 0


class ZooTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="test_zoo.")
        cls.zoo = os.path.join(cls.tmp, "zoo")
        subprocess.run([PY, os.path.join(HERE, "make_zoo.py"), "--out", cls.zoo,
                        "--models", "mlp_mse,resnet", "--opsets", "17"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cls.fake = os.path.join(cls.tmp, "fake-cleave")
        with open(cls.fake, "w") as f:
            f.write(f"#!/bin/sh\nexec {PY} {os.path.abspath(__file__)} --fake-cleave \"$@\"\n")
        os.chmod(cls.fake, 0o755)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def check(self, mode, *extra):
        env = dict(os.environ, FAKE_CLEAVE_MODE=mode)
        p = subprocess.run([PY, os.path.join(HERE, "check_zoo.py"), "--cleave", self.fake,
                            "--zoo", self.zoo, *extra], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
        return p.returncode, p.stdout.decode()

    def test_layout(self):
        d = os.path.join(self.zoo, "resnet-opset17")
        with open(os.path.join(d, "manifest.json")) as f:
            man = json.load(f)
        self.assertEqual(man["loss"], "cross_entropy")
        self.assertIn("bn1.running_var", man["buffers"])
        self.assertNotIn("bn1.num_batches_tracked", man["buffers"])
        self.assertEqual(np.load(os.path.join(d, "inputs", "labels.npy")).dtype, np.int64)
        self.assertEqual(np.load(os.path.join(d, "ref", "loss.npy")).shape, (1,))
        for p in man["parameters"]:
            g = np.load(os.path.join(d, "ref", "grad", p + ".grad.npy"))
            s = np.load(os.path.join(d, "ref", "sgd", p + ".npy"))
            self.assertEqual(g.shape, s.shape)
            self.assertEqual(g.dtype, np.float32)
        # BatchNorm running statistics change during the forward, and the ONNX
        # initializer is the value before it.
        import onnx
        from onnx import numpy_helper
        m = onnx.load(os.path.join(d, "model.onnx"))
        init = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
        after = np.load(os.path.join(d, "ref", "sgd", "bn1.running_mean.npy"))
        self.assertFalse(np.allclose(init["bn1.running_mean"], after))
        np.testing.assert_array_equal(
            init["bn1.running_mean"],
            np.load(os.path.join(d, "ref", "init", "bn1.running_mean.npy")))

    def test_exact_passes(self):
        rc, out = self.check("exact")
        self.assertEqual(rc, 0, out)
        self.assertIn("PASS mlp_mse-opset17 sgd", out)
        self.assertIn("PASS resnet-opset17 adamw", out)
        self.assertIn("4 passed, 0 failed", out)

    def test_noise_passes(self):
        rc, out = self.check("noise", "--models", "mlp_mse")
        self.assertEqual(rc, 0, out)
        rc, out = self.check("noise", "--models", "mlp_mse", "--rtol", "1e-8")
        self.assertEqual(rc, 1, out)

    def test_bad_fails(self):
        rc, out = self.check("bad", "--models", "mlp_mse", "--optimizers", "sgd")
        self.assertEqual(rc, 1, out)
        self.assertIn("FAIL mlp_mse-opset17 sgd", out)
        self.assertIn("missing from the dump", out)
        self.assertIn("shape [", out)
        self.assertIn("rel err inf", out)
        self.assertIn("rel err 1.0", out)

    def test_compile_error(self):
        rc, out = self.check("compile-error", "--models", "mlp_mse-opset17")
        self.assertEqual(rc, 1, out)
        self.assertIn("FAIL cleave compile", out)
        self.assertIn("unsupported operator Foo", out)

    def test_unknown_model(self):
        rc, out = self.check("exact", "--models", "nonesuch")
        self.assertEqual(rc, 1, out)

    def test_fashion_mnist(self):
        out = os.path.join(self.tmp, "fm")
        subprocess.run([PY, os.path.join(HERE, "fashion_mnist.py"), "--out", out, "--steps", "3",
                        "--batch", "5", "--seed", "1"], check=True, stdout=subprocess.DEVNULL)
        xs = [np.load(os.path.join(out, f"step-{k}", "x.npy")) for k in range(3)]
        ys = [np.load(os.path.join(out, f"step-{k}", "labels.npy")) for k in range(3)]
        self.assertEqual(xs[0].shape, (5, 784))
        self.assertEqual(xs[0].dtype, np.float32)
        self.assertEqual(ys[0].dtype, np.int64)
        self.assertTrue(0.0 <= xs[0].min() and xs[0].max() <= 1.0 and xs[0].max() > 0.5)
        self.assertTrue(all(0 <= y.min() and y.max() <= 9 for y in ys))
        self.assertFalse(np.array_equal(xs[0], xs[1]))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--fake-cleave":
        sys.exit(fake_cleave(sys.argv[2:]))
    import torch  # noqa: F401  (fail early with a clear message if absent)
    unittest.main(verbosity=2)

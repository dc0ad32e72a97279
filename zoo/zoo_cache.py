"""A cache of generated zoos, shared by the tests of one build folder.

Several lit tests start from the same zoo (make_zoo.py --opsets 17 in five,
torchvision's families in three), and generating torchvision's takes PyTorch
minutes on two cores. make_zoo.py --cache DIR keeps each zoo it writes under
DIR, keyed by everything that decides its content: the generator's own
sources (every zoo/*.py), its arguments but --out, and the versions of
PyTorch, torchvision, ONNX and NumPy. A later call with the same key links
the files into --out and prints the first call's output again, so a test
that checks the log sees the same lines.

Files are hard links (a copy where the folder is on another file system):
a test must not write into a zoo it did not copy. Concurrent callers of one
key wait on a lock while the first generates; an entry is published by a
rename only when its generation succeeded. An entry unused for a day is
removed when a new one is made.
"""
import contextlib
import fcntl
import glob
import hashlib
import io
import os
import shutil
import sys
import time

STALE_SECONDS = 24 * 3600


def _versions():
    out = []
    for name in ("torch", "torchvision", "onnx", "numpy"):
        mod = sys.modules.get(name)
        if mod is None:
            try:
                mod = __import__(name)
            except ImportError:
                out.append(f"{name}=none")
                continue
        out.append(f"{name}={getattr(mod, '__version__', '?')}")
    return out


def key(args):
    """sha256 of the zoo's sources, args and the library versions."""
    h = hashlib.sha256()
    here = os.path.dirname(os.path.abspath(__file__))
    for path in sorted(glob.glob(os.path.join(here, "*.py"))):
        h.update(os.path.basename(path).encode() + b"\0")
        with open(path, "rb") as f:
            h.update(f.read())
    for part in list(args) + _versions():
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:32]


def _link_tree(src, dst):
    os.makedirs(dst, exist_ok=True)
    for root, dirs, files in os.walk(src):
        rel = os.path.relpath(root, src)
        target = os.path.normpath(os.path.join(dst, rel))
        for d in dirs:
            os.makedirs(os.path.join(target, d), exist_ok=True)
        for f in files:
            to = os.path.join(target, f)
            if os.path.lexists(to):
                os.remove(to)
            try:
                os.link(os.path.join(root, f), to)
            except OSError:
                shutil.copy2(os.path.join(root, f), to)


class _Tee(io.TextIOBase):
    def __init__(self, stream):
        self.stream, self.text = stream, io.StringIO()

    def write(self, s):
        self.text.write(s)
        return self.stream.write(s)

    def flush(self):
        self.stream.flush()


def _prune(cache):
    now = time.time()
    for done in glob.glob(os.path.join(cache, "*", "complete")):
        try:
            if now - os.path.getmtime(done) > STALE_SECONDS:
                shutil.rmtree(os.path.dirname(done), ignore_errors=True)
        except OSError:
            pass


def cached(cache, args, out, generate):
    """Fills out as generate(out) would, through the cache folder cache.
    generate returns an exit status; only a status of 0 is kept."""
    os.makedirs(cache, exist_ok=True)
    entry = os.path.join(cache, key(args))
    with open(entry + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = os.path.join(entry, "complete")
        if not os.path.exists(done):
            work = entry + ".tmp"
            shutil.rmtree(work, ignore_errors=True)
            os.makedirs(work)
            tee = _Tee(sys.stdout)
            with contextlib.redirect_stdout(tee):
                status = generate(os.path.join(work, "zoo"))
            if status:
                shutil.rmtree(work, ignore_errors=True)
                return status
            with open(os.path.join(work, "stdout.txt"), "w") as f:
                f.write(tee.text.getvalue())
            with open(os.path.join(work, "complete"), "w"):
                pass
            shutil.rmtree(entry, ignore_errors=True)
            os.rename(work, entry)
            _prune(cache)
        else:
            print(f"zoo_cache: {out} linked from {entry}", file=sys.stderr)
            with open(os.path.join(entry, "stdout.txt")) as f:
                sys.stdout.write(f.read())
            sys.stdout.flush()
        os.utime(done)
        _link_tree(os.path.join(entry, "zoo"), out)
    return 0

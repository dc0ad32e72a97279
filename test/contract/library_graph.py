#!/usr/bin/python3
"""Issue 15: the library graph is the pipeline.

Reads CMake's --graphviz output for the build tree and fails on any link
from a library to one that comes later in the pipeline:

  compiler  CleaveDialect -> Import -> Autodiff -> Sharding -> Lowering
            -> Evaluate / Pipelines -> Driver (which alone may link the
            runtime's trainer)
  runtime   cleave_plan, core -> cpu, dist -> train; cuda (the plugin) links
            core alone

and on a runtime source that includes a private header of a layer it may
not use ("cpu/...", "train/..."), or a compiler source that includes any
("core/...": the compiler sees plan/ and cleave/runtime/ only), or a
source of the Python package (python/) that includes a header of tools/
(the package sees the driver through include/cleave/Driver). With
--inject EDGE (FROM:TO) it adds that link before checking, which must then
fail: proof the check can.

usage: library_graph.py SRC BUILD [--inject FROM:TO]
       library_graph.py SRC --includes-only
"""
import glob
import os
import re
import subprocess
import sys
import tempfile

# Rank in the pipeline; a library may link only libraries of a lower rank,
# or of its own group (the two importers).
COMPILER = {
    "CleaveDialect": (0, "dialect"),
    "CleaveImportOnnx": (1, "import"),
    "CleaveImportTorch": (1, "import"),
    "CleaveAutodiff": (2, "autodiff"),
    "CleaveSharding": (3, "sharding"),
    "CleaveLowering": (4, "lowering"),
    "CleaveEvaluate": (5, "evaluate"),
    "CleavePipelines": (5, "pipelines"),
    "CleaveDriver": (6, "driver"),
}
RUNTIME = {
    "cleave_plan": (0, "plan"),
    "cleave_runtime_core": (0, "core"),
    "cleave_runtime_plan_reader": (1, "core"),
    "cleave_runtime_cpu": (2, "cpu"),
    "cleave_runtime_dist": (2, "dist"),
    "cleave_runtime_train": (3, "train"),
    "cleave_cuda": (3, "cuda"),
}
# The compiler may use the plan's contract and, to evaluate constants, the
# CPU backend; nothing in the runtime links the compiler.
COMPILER_MAY_LINK = {"cleave_plan", "cleave_runtime_core",
                     "cleave_runtime_plan_reader", "cleave_runtime_cpu"}
# The driver runs what it compiles (export, the mesh's choice): the trainer.
DRIVER_MAY_LINK = COMPILER_MAY_LINK | {"cleave_runtime_train",
                                       "cleave_runtime_dist"}
# Private headers a runtime layer may include ("layer/x.h").
INCLUDES = {
    "core": {"core"},
    "cpu": {"core", "cpu"},
    "dist": {"core", "dist"},
    "cuda": {"core", "cuda"},
    "train": {"core", "cpu", "dist", "train"},
}
CUDA_MAY_LINK = {"cleave_runtime_core"}


def graph(build):
    """Edges (from, to) between the project's targets, from cmake --graphviz."""
    with tempfile.TemporaryDirectory() as tmp:
        dot = os.path.join(tmp, "deps.dot")
        subprocess.run(["cmake", "--graphviz=" + dot, "."], cwd=build,
                       check=True, stdout=subprocess.DEVNULL)
        text = open(dot).read()
    names = dict(re.findall(r'"(node\d+)" \[ label = "([^"]+)"', text))
    edges = set()
    for a, b in re.findall(r'"(node\d+)" -> "(node\d+)"', text):
        edges.add((names[a], names[b]))
    return set(names.values()), edges


def check_links(targets, edges):
    failures = []
    for lib in list(COMPILER) + list(RUNTIME):
        if lib not in targets and lib != "cleave_cuda":
            failures.append("%s: not a target of the build" % lib)
    for a, b in sorted(edges):
        if a in COMPILER and b in COMPILER:
            (ra, ga), (rb, gb) = COMPILER[a], COMPILER[b]
            if rb >= ra and ga != gb:
                failures.append("%s links %s, a later stage" % (a, b))
        elif a in COMPILER and b in RUNTIME and b not in (
                DRIVER_MAY_LINK if a == "CleaveDriver" else COMPILER_MAY_LINK):
            failures.append("%s links the runtime's %s" % (a, b))
        elif a in RUNTIME and b in COMPILER:
            failures.append("%s (runtime) links the compiler's %s" % (a, b))
        elif a == "cleave_cuda" and b in RUNTIME and b not in CUDA_MAY_LINK:
            failures.append("the CUDA plugin links %s" % b)
        elif a in RUNTIME and b in RUNTIME:
            (ra, ga), (rb, gb) = RUNTIME[a], RUNTIME[b]
            if rb >= ra and ga != gb:
                failures.append("%s links %s, a later layer" % (a, b))
    return failures


def family_layer(name):
    """The layer of a file of a kernel family's folder (runtime/kernels/F/):
    cpu* is the CPU backend's, cuda* and *.cu the plugin's, the rest (shape
    rules, shared math and geometry headers) the core's."""
    if name.startswith("cpu"):
        return "cpu"
    if name.startswith("cuda") or name.endswith((".cu", ".cuh")):
        return "cuda"
    return "core"


def included_layer(line):
    """The layer of a runtime private header that `line` includes."""
    m = re.match(r'\s*#\s*include\s+"(\w+)/([^"]+)"', line)
    if not m:
        return None
    if m.group(1) == "kernels":
        return family_layer(os.path.basename(m.group(2)))
    return m.group(1) if m.group(1) in INCLUDES else None


def check_includes(src):
    failures = []
    runtime = os.path.join(src, "runtime")
    files = [(layer, path) for layer in INCLUDES
             for path in sorted(glob.glob(os.path.join(runtime, layer, "*")))]
    files += [(family_layer(os.path.basename(path)), path) for path in
              sorted(glob.glob(os.path.join(runtime, "kernels", "*", "*")))]
    for layer, path in files:
        for n, line in enumerate(open(path, errors="replace"), 1):
            inc = included_layer(line)
            if inc and inc not in INCLUDES[layer]:
                failures.append("%s:%d: the %s layer includes %s" % (
                    os.path.relpath(path, src), n, layer, line.strip()))
    return failures


def check_compiler_includes(src):
    """The compiler sees of runtime/ only the plan's contract (plan/) and
    the public headers (cleave/runtime/), never a layer's private ones."""
    failures = []
    for top in ["dialects", "lib", "include", "tools"]:
        for dp, _, files in os.walk(os.path.join(src, top)):
            for f in sorted(files):
                if not f.endswith((".cpp", ".h", ".td")):
                    continue
                path = os.path.join(dp, f)
                for n, line in enumerate(open(path, errors="replace"), 1):
                    if included_layer(line):
                        failures.append("%s:%d: the compiler includes %s" % (
                            os.path.relpath(path, src), n, line.strip()))
    return failures


def check_python_includes(src):
    """The Python extension includes public headers only: nothing that
    lives under tools/ (a binary's folder), by path or by name."""
    tools = os.path.join(src, "tools")
    private = set()
    for dp, _, files in os.walk(tools):
        private.update(f for f in files if f.endswith(".h"))
    failures = []
    for dp, _, files in os.walk(os.path.join(src, "python")):
        for f in sorted(files):
            if not f.endswith((".cpp", ".h")):
                continue
            path = os.path.join(dp, f)
            for n, line in enumerate(open(path, errors="replace"), 1):
                m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                if m and (m.group(1).startswith("tools/") or
                          m.group(1) in private):
                    failures.append("%s:%d: the Python package includes "
                                    "%s, a header of tools/" % (
                                        os.path.relpath(path, src), n,
                                        m.group(1)))
    return failures


def main():
    src = sys.argv[1]
    if "--includes-only" in sys.argv:
        failures = check_python_includes(src)
        print("includes: the Python package's checked")
        for f in failures:
            print("FAIL: " + f)
        return 1 if failures else 0
    build = sys.argv[2]
    targets, edges = graph(build)
    if "--inject" in sys.argv:
        a, b = sys.argv[sys.argv.index("--inject") + 1].split(":")
        edges.add((a, b))
    failures = (check_links(targets, edges) + check_includes(src) +
                check_compiler_includes(src) + check_python_includes(src))
    known = [e for e in edges if e[0] in COMPILER or e[0] in RUNTIME]
    print("library graph: %d links between the project's libraries" %
          len(known))
    for f in failures:
        print("FAIL: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""Every kernel of kernels.def lives in exactly one family's folder.

Usage: kernel_families.py SOURCE_ROOT

A kernel family (runtime/kernels/F/) holds, for each of its kernels, the
shape rule check_K (shape.cpp, the core layer's), the CPU prepare function
(cpu*.cpp) and the CUDA one (cuda*.cu, cuda*.cpp). This check reads each
file's definitions, written out (`Status check_add(const KernelInfo &...`)
or through a macro whose first argument is the kernel (`BINARY(add, Add)`),
and fails on a kernel whose rule or either prepare function is missing,
defined in two families, or split between families, and on a prepare
function of a kernels.def kernel left in runtime/cpu/ or runtime/cuda/.
Prints the number of kernels and families.
"""
import os
import re
import sys

import kernel_schema  # beside this script

ROLES = [("shape rule", "check_", ("shape.cpp",)),
         ("CPU kernel", "prepare_", ("cpu",)),
         ("CUDA kernel", "prepare_", ("cuda",))]


def kernels(root):
    """The kernels of kernels.def, as kernel_schema.py reads them."""
    return kernel_schema.schema(root)[1]


def defined(path, prefix, names):
    """Kernels of `names` that `path` defines a `prefix` function for."""
    text = open(path, errors="replace").read()
    found = set(re.findall(r"^Status %s(\w+)\(const KernelInfo" % prefix,
                           text, re.M))
    for m in re.finditer(r"^[A-Z_]+\((\w+)(?:,\s*\w+)*\)\s*$", text, re.M):
        found.add(m.group(1))
    return found & names


def main():
    root = sys.argv[1]
    names = kernels(root)
    where = {}  # (role, kernel) -> {family}
    families = os.path.join(root, "runtime", "kernels")
    folders = sorted(f for f in os.listdir(families)
                     if os.path.isdir(os.path.join(families, f)))
    failures = []
    for family in folders:
        folder = os.path.join(families, family)
        files = sorted(os.listdir(folder))
        if "shape.cpp" not in files:
            failures.append("runtime/kernels/%s has no shape.cpp" % family)
        for role, prefix, starts in ROLES:
            for f in files:
                if f.startswith(starts) and f.endswith((".cpp", ".cu")):
                    for k in defined(os.path.join(folder, f), prefix, names):
                        where.setdefault((role, k), set()).add(family)
    for k in sorted(names):
        homes = set()
        for role, _, _ in ROLES:
            found = where.get((role, k), set())
            if not found:
                failures.append("%s: no %s in any family" % (k, role))
            elif len(found) > 1:
                failures.append("%s: %s in %s" % (
                    k, role, " and ".join(sorted(found))))
            homes |= found
        if len(homes) > 1:
            failures.append("%s is split between families %s" % (
                k, ", ".join(sorted(homes))))
    for layer in ("cpu", "cuda"):
        for dp, _, files in os.walk(os.path.join(root, "runtime", layer)):
            for f in sorted(files):
                if f.endswith((".cpp", ".cu")):
                    for k in sorted(defined(os.path.join(dp, f), "prepare_",
                                            names)):
                        failures.append(
                            "%s: prepare_%s outside its family's folder" % (
                                os.path.relpath(os.path.join(dp, f), root),
                                k))
    print("kernel families: %d kernels of kernels.def in %d families" % (
        len(names), len(folders)))
    for f in failures:
        print("FAIL: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

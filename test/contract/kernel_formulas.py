"""No kernel formula is written in both backends.

Usage: kernel_formulas.py SOURCE_ROOT

A formula the CPU and CUDA kernels both compute belongs in runtime/core
(fused_ops.h, kernel_math.h: host and device functions), so that the CUDA
side, which no GPU-free test runs, computes what the CPU side is tested to
compute. This check finds a formula written twice by its lines: every line
of runtime/cpu/ and runtime/cuda/ (and of the kernel families' cpu* and
cuda* files, runtime/kernels/F/) that computes (an arithmetic operator
with a math function or a floating-point literal, 24 characters or more
once normalised) is normalised (comments, spaces and `std::` dropped,
`expf` read as `exp`, `1.0f` as `1.0`), and a line that stands in both
backends fails. Prints the number of formula lines it compared.
"""
import os
import re
import sys

MATH = r"(exp|log|log1p|sqrt|rsqrt|tanh|erf|fabs|pow|sin|cos|fmax|fmin|floor|ceil)"
SUFFIXES = (".cpp", ".h", ".cu", ".cuh")


def normalise(line):
    line = re.sub(r"//.*", "", line)
    line = re.sub(r"\bstd::", "", line).replace("::", "")
    line = re.sub(r"\b" + MATH + r"f\(", r"\1(", line)
    line = re.sub(r"(\d)\.?(\d*)f\b", r"\1.\2", line)
    return re.sub(r"\s+", "", line)


def is_formula(line):
    return (len(line) >= 24 and re.search(r"[-+*/]", line) and
            (re.search(MATH + r"\(", line) or re.search(r"\d\.\d", line)))


def backend_files(root, backend):
    """The sources of `backend` ("cpu" or "cuda"): its layer's folder and
    its files in every kernel family's folder (runtime/kernels/F/cpu*,
    cuda*)."""
    paths = []
    for dp, _, files in os.walk(os.path.join(root, "runtime", backend)):
        paths += [os.path.join(dp, f) for f in sorted(files)]
    families = os.path.join(root, "runtime", "kernels")
    if os.path.isdir(families):
        for family in sorted(os.listdir(families)):
            folder = os.path.join(families, family)
            if os.path.isdir(folder):
                paths += [os.path.join(folder, f)
                          for f in sorted(os.listdir(folder))
                          if f.startswith(backend)]
    return [p for p in paths if p.endswith(SUFFIXES)]


def formulas(root, backend):
    """normalised formula line -> where it first stands."""
    found = {}
    for path in backend_files(root, backend):
        text = open(path, errors="replace").read()
        # Block comments blanked, their newlines kept.
        text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"),
                      text, flags=re.S)
        for n, line in enumerate(text.split("\n"), 1):
            line = normalise(line)
            if is_formula(line):
                found.setdefault(line, "%s:%d" % (
                    os.path.relpath(path, root), n))
    return found


def main():
    root = sys.argv[1]
    cpu, cuda = formulas(root, "cpu"), formulas(root, "cuda")
    print("kernel formulas: %d CPU and %d CUDA formula lines compared" %
          (len(cpu), len(cuda)))
    twice = sorted(set(cpu) & set(cuda))
    for line in twice:
        print("FAIL: %s and %s compute the same formula (%s): move it to "
              "runtime/core/kernel_math.h" % (cpu[line], cuda[line], line))
    return 1 if twice else 0


if __name__ == "__main__":
    sys.exit(main())

"""The kernel schema is the plan's only spelling of kernel attributes.

Usage: kernel_schema.py SOURCE_ROOT

Reads runtime/plan/kernels.def and fails (exit 1, one
line per offence) when
  * a kernel attribute's name appears as a string literal in the code that
    speaks the plan (runtime/, lib/Lowering/) outside the schema:
    writers and readers must go through plan_writer.h and Params (the
    table of cleave run's flags, which speaks no plan, is exempt).
That every kernel has its shape rule and both backends' prepare functions,
in one family's folder, is kernel_families.py's check.
Prints the counts it checked, for FileCheck.
"""
import os
import re
import sys

PLAN_CODE = ["runtime", os.path.join("lib", "Lowering")]
# Files of the runtime that never speak the plan, whose string literals are
# something else: the table of cleave run's flags (--steps, --seed).
NOT_PLAN_CODE = {os.path.join("runtime", "train", "run_flags.cpp")}
SOURCES = (".cpp", ".h", ".cu", ".cuh")


def schema(root):
    text = open(os.path.join(root, "runtime", "plan", "kernels.def")).read()
    attrs = set(re.findall(r"^CLEAVE_ATTR\(\w+,\s*(\w+),", text, re.M))
    # Attributes declared inside the file's shorthand macros.
    attrs |= set(re.findall(r"CLEAVE_ATTR\(K,\s*(\w+),", text))
    kernels = set(re.findall(
        r"^CLEAVE_(?:KERNEL_BEGIN|UNARY|BINARY|REDUCE)\((\w+)", text, re.M))
    return attrs, kernels


def sources(root, folder):
    for dp, _, files in os.walk(os.path.join(root, folder)):
        for f in sorted(files):
            if f.endswith(SOURCES):
                yield os.path.join(dp, f)


def main():
    root = sys.argv[1]
    attrs, kernels = schema(root)
    offences = []
    files = 0
    for folder in PLAN_CODE:
        for path in sources(root, folder):
            if os.path.relpath(path, root) in NOT_PLAN_CODE:
                continue
            files += 1
            for n, line in enumerate(open(path, errors="replace"), 1):
                for a in attrs:
                    if '"%s"' % a in line:
                        offences.append("%s:%d: kernel attribute \"%s\" spelled "
                                        "outside kernels.def" %
                                        (os.path.relpath(path, root), n, a))
    print("kernel schema: %d kernels, %d attributes, %d files" %
          (len(kernels), len(attrs), files))
    for o in offences:
        print("FAIL: " + o)
    return 1 if offences else 0


if __name__ == "__main__":
    sys.exit(main())

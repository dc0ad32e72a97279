"""The IR's cleave.* attribute names are declared in the dialect only.

Usage: ir_attributes.py SOURCE_ROOT

Fails on a "cleave.NAME" string literal in lib/, include/ or tools/: the
names live in dialects/Cleave/CleaveAttrNames.h, whose table the dialect
verifies. ONNX metadata keys of Cleave's own (not IR attributes) are
listed below. Also fails when a name of CleaveAttrNames.h is missing from
the verifier's table in CleaveDialect.cpp.
"""
import os
import re
import sys

METADATA_KEYS = {"cleave.frozen"}  # onnx ModelProto.metadata_props
FOLDERS = ["lib", "include", "tools"]


def main():
    root = sys.argv[1]
    header = open(os.path.join(root, "dialects", "Cleave",
                               "CleaveAttrNames.h")).read()
    declared = dict(re.findall(r'(k\w+Attr) = "(cleave\.\w+)"', header))
    table = open(os.path.join(root, "dialects", "Cleave",
                              "CleaveDialect.cpp")).read()
    failures = []
    for constant, name in sorted(declared.items()):
        if "{%s," % constant not in table:
            failures.append("%s (%s) is not in the dialect's verifier table" %
                            (constant, name))
    files = 0
    for folder in FOLDERS:
        for dp, _, names in os.walk(os.path.join(root, folder)):
            for f in sorted(names):
                if not f.endswith((".cpp", ".h", ".td")):
                    continue
                files += 1
                path = os.path.join(dp, f)
                for n, line in enumerate(open(path, errors="replace"), 1):
                    for name in re.findall(r'"(cleave\.[a-z_]+)"', line):
                        if name not in METADATA_KEYS:
                            failures.append("%s:%d: \"%s\" spelled outside "
                                            "the dialect" %
                                            (os.path.relpath(path, root), n,
                                             name))
    print("ir attributes: %d declared, %d files" % (len(declared), files))
    for f in failures:
        print("FAIL: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

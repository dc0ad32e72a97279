"""Every source the build compiles or copies is listed by name.

Usage: listed_sources.py SOURCE_ROOT

A globbed source list (file(GLOB ...)) builds whatever happens to lie in a
folder: a stray file is compiled, a deleted one goes unnoticed until the
next configure. Fails on any file(GLOB or GLOB_RECURSE) in a CMakeLists.txt
or .cmake file, and on a file of python/cleave/ that python/CMakeLists.txt's
CLEAVE_PY_FILES does not name (or a name there with no file).
"""
import os
import re
import sys

SKIP = {"build", "build-sanitized", ".git", "node_modules"}


def cmake_files(root):
    for dp, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP]
        for f in files:
            if f == "CMakeLists.txt" or f.endswith(".cmake"):
                yield os.path.join(dp, f)


def main():
    root = sys.argv[1]
    failures = []
    for path in cmake_files(root):
        text = re.sub(r"#[^\n]*", "", open(path).read())
        for m in re.finditer(r"file\s*\(\s*GLOB(_RECURSE)?\b", text, re.I):
            line = text.count("\n", 0, m.start()) + 1
            failures.append("%s:%d: a globbed source list" %
                            (os.path.relpath(path, root), line))
    listed = set()
    cmake = os.path.join(root, "python", "CMakeLists.txt")
    if os.path.exists(cmake):
        m = re.search(r"set\(CLEAVE_PY_FILES\s+([^)]*)\)", open(cmake).read())
        listed = set(m.group(1).split()) if m else set()
        folder = os.path.join(root, "python", "cleave")
        present = {f for f in os.listdir(folder)
                   if f.endswith(".py") or f == "py.typed"}
        for f in sorted(present - listed):
            failures.append("python/cleave/%s: not in CLEAVE_PY_FILES" % f)
        for f in sorted(listed - present):
            failures.append("python/CMakeLists.txt: CLEAVE_PY_FILES names "
                            "%s, which python/cleave/ lacks" % f)
    print("listed sources: %d Python files listed" % len(listed))
    for f in failures:
        print("FAIL: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

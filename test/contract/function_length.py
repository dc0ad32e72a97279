"""No function of the compiler, runtime or tools is longer than 150 lines.

Usage: function_length.py SOURCE_ROOT [LIMIT]

Scans dialects/, lib/, runtime/ and tools/ (C++ and CUDA sources). A
function is a brace block opened after a parameter list (not an if, for,
while, switch or catch, nor a lambda, which counts as part of its
function); its length runs from the line of its opening brace to that of
its closing one, comments included. Comments and string literals are
blanked first so their braces do not count. Prints the number of
functions checked and one FAIL line per function over LIMIT (150).
"""
import os
import re
import sys

FOLDERS = ["dialects", "lib", "runtime", "tools"]
SUFFIXES = (".cpp", ".h", ".cu", ".cuh")
CONTROL = re.compile(r"\b(if|for|while|switch|catch)\s*\(.*\)\s*$")
PARAMS = re.compile(
    r"\)\s*(const|override|final|noexcept|mutable|->\s*[\w:<>,\s\*&]+)*\s*$")
LAMBDA = re.compile(r"\]\s*(\([^()]*\))?\s*(mutable)?\s*(->\s*[\w:<>]+)?\s*$")


def blank(src):
    """src with comments and literals replaced, newlines kept."""
    keep = lambda m: "\n" * m.group(0).count("\n")
    src = re.sub(r"//[^\n]*", "", src)
    src = re.sub(r"/\*.*?\*/", keep, src, flags=re.S)
    src = re.sub(r'R"(\w*)\((.*?)\)\1"', lambda m: '""' + keep(m), src,
                 flags=re.S)
    src = re.sub(r'"(\\.|[^"\\\n])*"', '""', src)
    return re.sub(r"'(\\.|[^'\\\n])*'", "''", src)


def functions(path):
    """(first line, line count) of every function in path."""
    lines = blank(open(path, errors="replace").read()).split("\n")
    stack, head, found = [], "", []
    for number, line in enumerate(lines):
        for col, ch in enumerate(line):
            if ch == "{":
                text = (head + line[:col]).rstrip()[-300:]
                last = text.split("\n")[-1] if text else ""
                is_fn = bool(PARAMS.search(text)) and not CONTROL.search(last) \
                    and not LAMBDA.search(text)
                inside = any(kind == "fn" for kind, _ in stack)
                stack.append(("fn" if is_fn and not inside else "block",
                              number))
                head = ""
            elif ch == "}":
                if stack:
                    kind, start = stack.pop()
                    if kind == "fn":
                        found.append((start + 1, number - start + 1))
                head = ""
            elif ch == ";":
                head = ""
        cut = max(line.rfind("{"), line.rfind("}"), line.rfind(";"))
        head += line[cut + 1:] + "\n"
    return found


def main():
    root = sys.argv[1]
    limit = int(sys.argv[2]) if len(sys.argv) > 2 else 150
    count, failures = 0, []
    for folder in FOLDERS:
        for dp, _, files in os.walk(os.path.join(root, folder)):
            for f in sorted(files):
                if not f.endswith(SUFFIXES):
                    continue
                path = os.path.join(dp, f)
                for start, length in functions(path):
                    count += 1
                    if length > limit:
                        failures.append("%s:%d: a function of %d lines" %
                                        (os.path.relpath(path, root), start,
                                         length))
    print("function length: %d functions, limit %d lines" % (count, limit))
    for f in failures:
        print("FAIL: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

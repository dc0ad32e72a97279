"""No function of the compiler, runtime, tools or Python package is longer
than 150 lines.

Usage: function_length.py SOURCE_ROOT [LIMIT]

Scans dialects/, lib/, runtime/ and tools/ (C++ and CUDA sources), and the
Python of python/, scripts/, bench/ and examples/ (through Python's own
parser: a function runs from its def to its last line, nested functions
inside it). zoo/ and test/ are left out: their long functions are tables
of models and cases. In C++ a
function is a brace block opened after a parameter list (not an if, for,
while, switch or catch, nor a lambda, which counts as part of its
function); its length runs from the line of its opening brace to that of
its closing one, comments included. Comments and string literals are
blanked first so their braces do not count. Prints the number of
functions checked and one FAIL line per function over LIMIT (150).
"""
import ast
import os
import re
import sys

FOLDERS = ["dialects", "lib", "runtime", "tools"]
PY_FOLDERS = ["python", "scripts", "bench", "examples"]
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


def python_functions(path):
    """(first line, line count) of every outermost Python function (a
    method counts alone; a function nested in one counts with it)."""
    tree = ast.parse(open(path, errors="replace").read(), path)
    found = []

    def visit(node):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((child.lineno,
                              child.end_lineno - child.lineno + 1))
            elif isinstance(child, ast.ClassDef):
                visit(child)

    visit(tree)
    return found


def sources(root):
    """(path, functions of it) for every file checked."""
    for folders, suffixes, scan in ((FOLDERS, SUFFIXES, functions),
                                    (PY_FOLDERS, (".py",), python_functions)):
        for folder in folders:
            for dp, _, files in os.walk(os.path.join(root, folder)):
                for f in sorted(files):
                    if f.endswith(suffixes):
                        path = os.path.join(dp, f)
                        yield path, scan(path)


def main():
    root = sys.argv[1]
    limit = int(sys.argv[2]) if len(sys.argv) > 2 else 150
    count, failures = 0, []
    for path, found in sources(root):
        for start, length in found:
            count += 1
            if length > limit:
                failures.append("%s:%d: a function of %d lines" %
                                (os.path.relpath(path, root), start, length))
    print("function length: %d functions, limit %d lines" % (count, limit))
    for f in failures:
        print("FAIL: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""One name everywhere for every pass: TableGen def, file, flag, lit test.

Usage: pass_names.py SOURCE_ROOT

For each `def XPass : Pass<"cleave-x", ...>` of include/cleave/STAGE/
Passes.td: X is the flag's words in CamelCase (cleave-choose-layouts:
ChooseLayouts), lib/STAGE/X.cpp defines it (GEN_PASS_DEF_XPASS), the lit
test test/STAGE/x.mlir exists, and its description shows the IR before and
after (a "Before" paragraph with an ```mlir block, an "After" one, or
"Printed" for a pass that prints, with a fenced block). One
FAIL line per broken rule; prints how many passes it read.
"""
import os
import re
import sys

PASS = re.compile(r'^def (\w+)Pass\s*:\s*Pass<"cleave-([a-z0-9-]+)"', re.M)


def camel(words):
    return "".join(w[:1].upper() + w[1:] for w in words.split("-"))


def main():
    root = sys.argv[1]
    include = os.path.join(root, "include", "cleave")
    failures, count = [], 0
    for stage in sorted(os.listdir(include)):
        td = os.path.join(include, stage, "Passes.td")
        if not os.path.isfile(td):
            continue
        text = open(td).read()
        defs = list(PASS.finditer(text))
        for k, m in enumerate(defs):
            count += 1
            name, flag = m.group(1), m.group(2)
            where = f"cleave-{flag} ({stage}/Passes.td)"
            end = defs[k + 1].start() if k + 1 < len(defs) else len(text)
            body = text[m.end():end]
            if camel(flag) != name:
                failures.append(
                    f"FAIL: {where}: its def is {name}Pass, not {camel(flag)}Pass")
            src = os.path.join(root, "lib", stage, name + ".cpp")
            macro = f"GEN_PASS_DEF_{name.upper()}PASS"
            if not os.path.isfile(src) or macro not in open(src).read():
                failures.append(
                    f"FAIL: {where}: lib/{stage}/{name}.cpp does not define it ({macro})")
            if not os.path.isfile(os.path.join(root, "test", stage, flag + ".mlir")):
                failures.append(f"FAIL: {where}: no lit test test/{stage}/{flag}.mlir")
            # After: IR, or what the pass prints (emit-plan's Program).
            shown = [re.search(r"Before[^\n]*(\n[^\n]*)?\n\s*```mlir", body),
                     re.search(r"(After|Printed)[^\n]*(\n[^\n]*)?\n\s*```", body)]
            if not all(shown):
                failures.append(f"FAIL: {where}: its description has no before/after IR example")
    print(f"pass names: {count} passes read")
    for f in failures:
        print(f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""What `make test` cost: its total wall time and the ten slowest entries
(each lit test on its own, the other ctest entries of both build folders),
read from the JUnit files ctest and lit write. Printed at the end of every
`make test`, so that each change sees what it adds (docs/testing.md).

Usage: test_times.py --start EPOCH_SECONDS RESULTS.xml...

Missing or unreadable files are skipped: the summary never fails the run.
"""
import argparse
import os
import sys
import time
import xml.etree.ElementTree as ET


def entries(path):
    """(seconds, name) of every test case in a JUnit file."""
    label = "sanitized " if "build-san" in path else ""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return []
    out = []
    for case in root.iter("testcase"):
        try:
            seconds = float(case.get("time", "0"))
        except ValueError:
            continue
        name = case.get("name", "?")
        suite = case.get("classname", "")
        # lit's classname is "CLEAVE.e2e", its name "tp-zoo.test".
        if suite.startswith("CLEAVE"):
            name = "lit " + suite[len("CLEAVE"):].lstrip(".").replace(".", "/") + \
                "/" + name
        out.append((seconds, label + name))
    return out


def clock(seconds):
    m, s = divmod(int(round(seconds)), 60)
    return "%dm%02ds" % (m, s) if m else "%ds" % s


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--start", type=float, required=True)
    ap.add_argument("results", nargs="*")
    a = ap.parse_args()
    rows = []
    for path in a.results:
        if os.path.exists(path):
            rows += entries(path)
    # The lit entry of ctest is the sum of the lit tests listed one by one.
    has_lit_cases = any(n.startswith("lit ") for _, n in rows)
    rows = [(t, n) for t, n in rows if not (has_lit_cases and n == "lit")]
    rows.sort(reverse=True)
    print("make test: %s in all (setup, both builds and every test)" %
          clock(time.time() - a.start))
    if rows:
        print("make test: the ten slowest entries:")
        for seconds, name in rows[:10]:
            print("  %8.1f s  %s" % (seconds, name))


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # a summary must not fail the run
        print("make test: no timing summary (%s)" % e, file=sys.stderr)

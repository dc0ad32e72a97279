"""Checks a `cleave run --trace` file against the Chrome trace event format
(the JSON object form that chrome://tracing and Perfetto's importer read):
metadata naming one process per rank, complete ("X") events with numeric
microsecond timestamps, kernels nested inside their step on every rank's lane,
and the collectives of a tensor-parallel step present on every rank.

usage: check_trace.py TRACE RANKS STEPS
"""
import json
import sys

path, ranks, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(path) as f:
    doc = json.load(f)

assert isinstance(doc, dict), "the trace is a JSON object"
events = doc["traceEvents"]
assert isinstance(events, list) and events, "traceEvents is a non-empty list"
assert doc.get("displayTimeUnit") in ("ms", "ns"), doc.get("displayTimeUnit")

names = {}
by_pid = {}
for e in events:
    ph = e["ph"]
    assert ph in ("X", "M"), e
    assert isinstance(e["pid"], int), e
    if ph == "M":
        assert e["name"] in ("process_name", "process_sort_index",
                             "thread_name"), e
        if e["name"] == "process_name":
            names[e["pid"]] = e["args"]["name"]
        continue
    for key in ("name", "cat"):
        assert isinstance(e[key], str) and e[key], (key, e)
    for key in ("ts", "dur"):
        assert isinstance(e[key], (int, float)), (key, e)
    assert e["dur"] >= 0 and e["ts"] >= 0, e
    assert isinstance(e["tid"], int), e
    assert e["cat"] in ("step", "kernel", "collective", "host"), e
    by_pid.setdefault(e["pid"], []).append(e)

assert sorted(names) == list(range(ranks)), names
assert all(names[r] == "rank %d" % r for r in range(ranks)), names
assert sorted(by_pid) == list(range(ranks)), sorted(by_pid)

# Timestamps are microseconds with nanosecond resolution; a slack of one
# nanosecond covers their rounding.
eps = 1e-3
for pid, evs in by_pid.items():
    stepevs = sorted((e for e in evs if e["cat"] == "step"),
                     key=lambda e: e["ts"])
    assert [e["args"]["step"] for e in stepevs] == list(range(1, steps + 1)), \
        (pid, [e["args"] for e in stepevs])
    for a, b in zip(stepevs, stepevs[1:]):
        assert a["ts"] + a["dur"] <= b["ts"] + eps, "steps overlap"
    inner = [e for e in evs if e["cat"] != "step"]
    kernels = [e for e in inner if e["cat"] == "kernel"]
    collectives = [e for e in inner if e["cat"] == "collective"]
    assert kernels, pid
    if ranks > 1:
        assert collectives, "rank %d traced no collective" % pid
    for e in inner:
        step = stepevs[e["args"]["step"] - 1]
        assert step["ts"] - eps <= e["ts"] and \
            e["ts"] + e["dur"] <= step["ts"] + step["dur"] + eps, \
            ("not inside its step", e, step)
        assert "op" in e["args"] and "bytes" in e["args"], e
    # Kernels of one lane run one after another.
    inner.sort(key=lambda e: e["ts"])
    for a, b in zip(inner, inner[1:]):
        assert a["ts"] + a["dur"] <= b["ts"] + eps, ("overlap", a, b)
    matmuls = [e for e in kernels if e["name"] == "matmul"]
    assert matmuls and all(e["args"]["flops"] > 0 for e in matmuls), pid
    per_step = len(inner) / steps
    print("rank %d: %d steps, %d events per step, %d collectives" %
          (pid, steps, per_step, len(collectives)))
print("trace: ok")

"""Checks `cleave run --profile` output (stdin): a report for the steps after
the first, every rank's step time, and a by-kernel-kind table whose shares
account for most of the step and never more than all of it (times are
measured, so bounds, not values).

usage: check_profile.py RANKS STEPS < output
"""
import re
import sys

ranks, steps = int(sys.argv[1]), int(sys.argv[2])
text = sys.stdin.read()
m = re.search(r"profile: rank 0, (\d+) steps? after the first, ([0-9.]+) ms "
              r"per step", text)
assert m, text
assert int(m.group(1)) == steps - 1, m.group(0)
step_ms = float(m.group(2))
assert step_ms > 0
assert re.search(r"machine: sgemm [0-9.]+ GFLOP/s, copy [0-9.]+ GB/s", text)
for r in range(ranks):
    rm = re.search(r"rank %d: ([0-9.]+) ms per step, ([0-9.]+) ms in "
                   r"collectives" % r, text)
    assert rm, "no line for rank %d" % r
    if ranks > 1:
        assert float(rm.group(2)) > 0, rm.group(0)


def table(title):
    body = text.split(title, 1)[1].split("\n")[2:]
    rows = []
    for line in body:
        if not line.startswith("  "):
            break
        cols = line.split()
        share = [c for c in cols if c.endswith("%")]
        rows.append((cols[0], float(share[0][:-1]), cols))
    return rows


kinds = table("by kernel kind:")
total = sum(share for _, share, _ in kinds)
assert 50.0 <= total <= 100.5, ("kernel shares sum to %.1f%%" % total, kinds)
matmul = [cols for name, _, cols in kinds if name == "matmul"]
assert matmul, kinds
# calls, ms, share, GFLOP/s: a matmul does work.
assert float(matmul[0][4]) > 0, matmul
blocks = table("by block (source op's scope):")
assert 50.0 <= sum(s for _, s, _ in blocks) <= 100.5, blocks
ops = table("by source op:")
assert len(ops) > 5, ops
print("profile: %d kinds, %.1f%% of the step in kernels" % (len(kinds), total))

"""Checks `cleave compile --devices N` against its own record and the plan.

Usage: check_mesh_choice.py --cleave C --model M.onnx --devices N --work DIR
           [--loss L] [--optimizer O] [--node-size K]

1. Without a budget: every dp x tp factorization of N is a candidate; the
   chosen one is usable, no usable one is estimated faster, and the bundle's
   mesh is the chosen one. Its communication time is recomputed here from
   the bundle's collectives (bytes and mesh axes from `cleave inspect
   --json`) with the ring formulas and the node rule of docs/design.md, and
   must agree: the cost is the plan's, not a guess.
2. A budget one byte under the chosen mesh's memory: that mesh is refused
   for its memory and a different one (or a ZeRO stage of one, tried only
   where stage 0 is over the budget), within the budget, is chosen; or,
   when none fits, one error line.
3. A budget under every candidate (100 bytes): one error line naming each,
   non-zero exit, nothing written.
Prints one PASS/FAIL line per check and exits non-zero on a failure.
"""
import argparse
import json
import os
import subprocess
import sys


def compile_(args, out, extra):
    cmd = [args.cleave, "compile", args.model, "-o", out, "--devices", str(args.devices),
           "--loss", args.loss, "--optimizer", args.optimizer,
           "--node-size", str(args.node_size)] + extra
    return subprocess.run(cmd, capture_output=True, text=True)


def inspect(args, bundle):
    return json.loads(subprocess.run([args.cleave, "inspect", bundle, "--json"],
                                     check=True, capture_output=True,
                                     text=True).stdout)


def communication(report):
    """Seconds of the bundle's collectives by the documented model."""
    choice = report["mesh_choice"]
    mesh = list(report["mesh"].items())  # outermost first
    names = [a for a, _ in mesh]
    total = 0.0
    for c in report["collectives"]:
        idx = [names.index(a) for a in c["axes"]]
        n = 1
        for i in idx:
            n *= mesh[i][1]
        if n <= 1:
            continue
        span = 1
        for _, size in mesh[min(idx):]:
            span *= size
        node = choice["node_size"]
        devices = choice["devices"]
        # No run of `span` consecutive ranks (runs start at multiples of
        # it) crosses a node boundary.
        on_node = all(first // node == (first + span - 1) // node
                      for first in range(0, devices, span))
        bw = (choice["intra_node_gbps"] if on_node else choice["inter_node_gbps"]) * 1e9
        alpha = (choice["intra_node_latency_us"] if on_node
                 else choice["inter_node_latency_us"]) * 1e-6
        phases = 2 if c["kind"] == "all_reduce" else 1
        total += phases * ((n - 1) / n * c["bytes"] / bw + (n - 1) * alpha)
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cleave", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--devices", type=int, required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--loss", default="auto")
    ap.add_argument("--optimizer", default="adamw")
    ap.add_argument("--node-size", type=int, default=8)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    failures = []

    def check(name, ok, detail=""):
        print(f"{'PASS' if ok else 'FAIL'} {name}" + (f": {detail}" if detail else ""))
        if not ok:
            failures.append(name)

    a = os.path.join(args.work, "free")
    r = compile_(args, a, [])
    if r.returncode:
        print("FAIL compile:", r.stderr.strip())
        sys.exit(1)
    rep = inspect(args, a)
    cands = rep["mesh_choice"]["candidates"]
    chosen = cands[0]
    factors = {(d, args.devices // d) for d in range(1, args.devices + 1)
               if args.devices % d == 0}
    check("every factorization tried",
          {(c["dp"], c["tp"]) for c in cands} == factors,
          str(sorted({(c["dp"], c["tp"]) for c in cands})))
    check("chosen is usable and marked", chosen["chosen"] and "refused" not in chosen)
    usable = [c for c in cands if "refused" not in c]
    check("no usable mesh is estimated faster",
          all(c["step_seconds"] >= chosen["step_seconds"] for c in usable))
    want = {k: v for k, v in (("dp", chosen["dp"]), ("tp", chosen["tp"]))
            if v > 1 or (k == "tp" and chosen["dp"] == 1)}
    check("the bundle's mesh is the chosen one", rep["mesh"] == want,
          f"{rep['mesh']} vs {want}")
    mem = rep["memory_per_rank"]
    check("inspect's total is the memory the choice counted",
          mem["total"] == chosen["memory_bytes"],
          f"{mem['total']} B in inspect, {chosen['memory_bytes']} B in the choice")
    check("the arena holds its busiest moment, named by its instruction",
          0 < mem["arena_live_at_peak"] <= mem["arena"] and
          mem["peak_instruction"]["kernel"] != "",
          f"{mem['arena_live_at_peak']} live of {mem['arena']} "
          f"at {mem['peak_instruction']}")
    mine = communication(rep)
    theirs = chosen["communication_seconds"]
    check("communication recomputed from the plan's collectives",
          abs(mine - theirs) <= 1e-9 * max(1.0, abs(theirs)) + 1e-12,
          f"{mine:.6e} s here, {theirs:.6e} s recorded")
    check("communication by axis adds up",
          abs(sum(chosen["communication_by_axis"].values()) - theirs) <= 1e-12 + 1e-9 * theirs)

    b = os.path.join(args.work, "tight")
    budget = chosen["memory_bytes"] - 1
    r = compile_(args, b, ["--memory-per-device", str(budget)])
    if r.returncode == 0:
        # Another mesh, a ZeRO stage of one or a recomputation on one (each
        # tried where the plain plan is over the budget), within it; the
        # first choice refused for memory.
        cands2 = inspect(args, b)["mesh_choice"]["candidates"]
        c2 = cands2[0]
        key = lambda c: (c["dp"], c["tp"], c["zero"], c["recompute"],
                         c["sequence_parallel"])
        first = next((c for c in cands2 if key(c) == key(chosen)), {})

        def brought_in(c):
            # A ZeRO stage, sequence parallelism or a recomputation is tried
            # only where the plan without it is over the budget.
            dp, tp, zero, recompute, sp = key(c)
            if recompute != "none":
                parent = (dp, tp, zero, "none", sp)
            elif sp:
                parent = (dp, tp, zero, "none", False)
            elif zero:
                parent = (dp, tp, 0, "none", False)
            else:
                return True
            return any(key(d) == parent and "over" in d.get("refused", "")
                       for d in cands2)
        check("a budget under the chosen mesh moves the choice within it",
              c2["memory_bytes"] <= budget and "refused" not in c2 and
              key(c2) != key(chosen) and "over" in first.get("refused", "") and
              all(brought_in(c) for c in cands2),
              f"chose dp={c2['dp']} tp={c2['tp']} zero={c2['zero']} "
              f"recompute={c2['recompute']} sp={c2['sequence_parallel']} "
              f"({c2['memory_bytes']} B <= {budget} B); "
              f"before: {first.get('refused', '?')}")
    else:
        check("a budget no mesh fits is one error",
              r.stderr.startswith("cleave: error: no mesh of") and
              r.stderr.count("\n") == 1, r.stderr.strip())

    c = os.path.join(args.work, "none")
    r = compile_(args, c, ["--memory-per-device", "100"])
    check("a budget under every mesh is one error naming them",
          r.returncode != 0 and r.stderr.count("\n") == 1 and
          r.stderr.startswith(f"cleave: error: no mesh of {args.devices} devices can "
                              "train this model:") and
          r.stderr.count("per device, over 100 B") >= len(usable) and
          not os.path.exists(c), r.stderr.strip())
    print(f"{len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

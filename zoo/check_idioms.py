#!/usr/bin/python3
"""Checks Cleave's automatic tensor parallelism on the idiom models of
zoo/idioms.py (issue 13).

Usage:
  /usr/bin/python3 zoo/check_idioms.py --cleave CLEAVE --models DIR --work DIR
      [--only a,b] [--tp 2,4] [--optimizers adamw] [--steps 10] [--rtol 1e-5]
      [--megatron-tp 2,4] [--explain-tp 4] [--stores]
      [--against-unfused [--fused-models a,b]]

For each model and optimizer it compiles the train step with no --plan at
tp=1 and at each tp, trains --steps steps and compares the losses, the last
step's gradients and every final parameter (gathered to the model's own
shape by --dump) with the tp=1 run: max|a - b| <= rtol * max|b| per tensor.
The dumps must have the model's shapes.

At each --megatron-tp (with AdamW) it reads `cleave inspect --json` and checks
Megatron's optimum: no all-gather at all, and the bytes each rank sends per
step (inspect's wire_bytes) at most 1.05 x those of the optimum's
all-reduces, computed from the model's shapes (manifest.json):
2 + 2 activation all-reduces per sequential layer (1 + 1 per parallel
block), one for the vocab-parallel embedding forward and one for the LM
head's input gradient, three [batch*seq] floats for the vocab-parallel loss,
and the per-layer reduction a replicated K/V projection's gradient needs.
Outside Megatron's pattern only those K/V reductions and the norm
parameters' gradients of a parallel block from two norms (norm_reduce_bytes)
may appear; their bytes count in the total. A model marked expert_parallel
(the capacity form) must show expert parallelism instead of its MoE
all-reduces: per layer an all_to_all and an all-gather of the combine,
forward and backward; elsewhere an all_to_all is a failure.

Both there and at each --explain-tp every collective must carry a reason
that names the op needing it (or the parameter whose gradient it reduces),
and no all-gather may be marked as one of Megatron's; at --megatron-tp the
ones outside Megatron's pattern may only be the K/V projections' reductions.

--stores also checkpoints the tp run, checks that the checkpoint, a
resume at tp=1 from it, and an export keep the model's shapes and values.

--tp-inner N compiles each tp run above N with the tp ranks factored into
groups of N (two mesh axes, tp and tp_inner). Its optimum is then
Megatron's all-reduces over all tp ranks plus, per layer, the K/V
gradients of one group's heads summed within the group (the cheaper of the
K and V activations' gradients and the K/V weights'), as a training step
over vLLM's layout (each group of ranks holding the K/V heads its query
heads read) needs; every collective must run over all tp ranks except those
K/V reductions, which run over tp_inner only, two per layer.
"""
import argparse
import collections
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_tp  # noqa: E402
from check_tp import run, run_once  # noqa: E402


def compile_flags(man, opt):
    f = ["--loss", man["loss"], "--optimizer", opt]
    for k, v in man[opt].items():
        f += ["--" + k.replace("_", "-"), str(v)]
    if man["freeze"]:
        f += ["--freeze", "|".join(man["freeze"])]
    return f


def train(cleave, case, man, opt, tp, steps, work, extra=()):
    """Trains --steps steps (dump: losses, final state) and, for the
    gradients, one step (dump1: before 10 steps of drift amplify summation
    order into them)."""
    tag = f"tp{tp}-{opt}" + "".join(extra).replace("-", "")
    bundle = os.path.join(work, f"bundle-{tag}")
    dump = os.path.join(work, f"dump-{tag}")
    ranks = check_tp.rank_flags(tp)
    run_once(work, tag, [
        [cleave, "compile", os.path.join(case, "model.onnx"), "-o", bundle,
         "--tp", str(tp)] + compile_flags(man, opt) + list(extra),
        [cleave, "run", bundle, "--steps", str(steps), "--inputs",
         os.path.join(case, "inputs"), "--dump", dump] + ranks,
        [cleave, "run", bundle, "--steps", "1", "--inputs",
         os.path.join(case, "inputs"), "--dump", dump + "-1"] + ranks])
    return bundle, dump


def compare(ref, got, rtol, grads=False):
    """max|a - b| <= rtol * max|a| per tensor of ref (equal entries, -inf
    masks included, count as no error): the state, or the gradients."""
    worst, failures = (0.0, ""), []
    for name in sorted(os.listdir(ref)):
        if name.endswith(".grad.npy") != grads:
            continue
        path = os.path.join(got, name)
        if not os.path.exists(path):
            failures.append(f"{name}: missing")
            continue
        a, b = np.load(os.path.join(ref, name)), np.load(path)
        if a.shape != b.shape:
            failures.append(f"{name}: shape {b.shape}, want {a.shape}")
            continue
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        with np.errstate(invalid="ignore"):
            diff = np.where(same, 0.0, np.abs(a.astype(np.float64) - b))
        scale = np.abs(np.where(np.isfinite(a), a, 0)).max(initial=0.0)
        err = float(diff.max(initial=0.0) / max(float(scale), 1e-30))
        worst = max(worst, (err, name))
        if not err <= rtol:
            failures.append(f"{name}: relative error {err:.2e}")
    return worst, failures


def compare_all(ref, got, rtol, state_rtol=None):
    """The losses and state after the run (within state_rtol, rtol unless
    given), and the first step's gradients (within rtol)."""
    worst, failures = compare(ref, got, rtol if state_rtol is None else state_rtol)
    worst1, failures1 = compare(ref + "-1", got + "-1", rtol, grads=True)
    return max(worst, worst1), failures + failures1


def optimum_bytes(cfg):
    """Megatron's collective bytes per step for the model's shapes (or as
    the model states it, for shapes this does not describe)."""
    if "optimum" in cfg:
        return cfg["optimum"]
    act = cfg["batch"] * cfg["seq"] * cfg["d"] * 4
    per_layer = 1 if cfg["parallel"] else 2
    fwd = per_layer * cfg["layers"] * act + act + 3 * cfg["batch"] * cfg["seq"] * 4
    bwd = per_layer * cfg["layers"] * act + act
    return fwd + bwd + cfg["layers"] * cfg.get("kv_reduce_bytes", 0)


def explain(coll):
    """Every collective carries the partitioner's reason, naming the op that
    needed it or the parameter whose gradient it reduces; an all-gather is
    never one of Megatron's. Returns those outside Megatron's pattern."""
    problems = []
    for c in coll:
        reason = c.get("reason", "")
        if "(cleave." not in reason and "gradient of parameter" not in reason:
            problems.append(f"{c['kind']} at {c['source']}: reason {reason!r} names no op")
        if c["kind"] != "all_reduce" and c.get("megatron"):
            problems.append(f"{c['kind']} at {c['source']} counted as Megatron's")
    return [c for c in coll if not c.get("megatron")], problems


def grouped(info, cfg):
    """The plan on tp factored into tp x tp_inner. For a model whose K/V
    heads the config gives: Megatron's all-reduces over all tp ranks, the
    K/V gradients within each group of tp_inner ranks only (two per layer),
    whatever else the one-axis optimum reduces per layer (norms shared by
    the heads), and at most the bytes of that optimum. Otherwise at most
    1.05x the one-axis optimum's bytes."""
    problems = []
    mesh = info["mesh"]
    n, g = mesh["tp"] * mesh["tp_inner"], mesh["tp_inner"]
    coll = info["collectives"]
    within = [c for c in coll if c["axes"] == ["tp_inner"]]
    axes = [["tp", "tp_inner"], ["tp_inner"], ["tp"]]
    others = [c for c in coll if c["axes"] not in axes]
    if others:
        problems.append(f"{len(others)} collectives over {others[0]['axes']}, e.g. "
                        f"{others[0]['reason']}")
    if any(c["kind"] != "all_reduce" for c in coll):
        problems.append("collectives other than all-reduces")
    total = sum(c["wire_bytes"] for c in coll)
    pattern = optimum_bytes(dict(cfg, kv_reduce_bytes=0)) * 2 * (n - 1) // n
    limit = 1.05
    want = optimum_bytes(cfg) * 2 * (n - 1) // n
    if "kv_heads" in cfg:
        limit = 1.0
        if len(within) != 2 * cfg["layers"]:
            problems.append(f"{len(within)} reductions within the groups, want K and "
                            f"V's per layer ({2 * cfg['layers']})")
        heads = cfg["kv_heads"] * g // n  # K/V heads a group holds
        tokens = cfg["batch"] * cfg["seq"]
        group = 2 * heads * cfg["head_dim"] * 4 * min(tokens, cfg["d"])
        kv_weights = 2 * cfg["kv_heads"] * cfg["head_dim"] * cfg["d"] * 4
        rest = max(cfg.get("kv_reduce_bytes", 0) - kv_weights, 0)
        want = (pattern + cfg["layers"] * group * 2 * (g - 1) // g
                + cfg["layers"] * rest * 2 * (n - 1) // n)
    if total > limit * want:
        problems.append(f"{total} collective bytes per step, {total / want:.4f}x the "
                        f"optimum's {want}")
    return (f"{len(coll)} collectives, {len(within)} within groups of {g}, {total} bytes = "
            f"{total / want:.3f}x optimum ({total / pattern:.3f}x Megatron's all-reduces "
            f"alone)", problems)


def megatron(cleave, bundle, cfg):
    info = json.loads(run([cleave, "inspect", bundle, "--json"]))
    if "tp_inner" in info["mesh"]:
        return grouped(info, cfg)
    coll = info["collectives"]
    outside, problems = explain(coll)
    # Expert parallelism (the capacity form): per MoE layer the combine's
    # all_to_all and the all-gather of its result, forward and backward,
    # in place of the layer's all-reduce of the experts' partial sum.
    expert = [c for c in outside if c["kind"] == "all_to_all"
              or (c["kind"] == "all_gather" and "after an all_to_all" in c["reason"])]
    if cfg.get("expert_parallel"):
        outside = [c for c in outside if c not in expert]
        for layer in range(cfg["layers"]):
            name = f"layers.{layer}"
            got = collections.Counter(c["kind"] for c in expert if c["layer"] == name)
            if got != {"all_to_all": 2, "all_gather": 2}:
                problems.append(f"{name}: expert parallelism's collectives {dict(got)}, "
                                "want an all_to_all and an all-gather forward and backward")
    elif expert:
        problems.append(f"{expert[0]['kind']} of expert parallelism at {expert[0]['source']}")
    # Beyond Megatron's reductions only the replicated K/V projections' and,
    # where a parallel block's two norms keep the gradient partial, the
    # norms' parameter gradients (counted in the total, not the optimum).
    extra = sum(c["bytes"] for c in outside)
    if extra > (cfg["layers"] * cfg.get("kv_reduce_bytes", 0)
                + cfg.get("norm_reduce_bytes", 0)):
        problems.append(f"{len(outside)} collectives ({extra} bytes) outside "
                        f"Megatron's pattern, e.g. {outside[0]['reason']}")
    # The same value is never summed or gathered twice (the compiler names
    # what each collective carries, through reshapes and transposes).
    seen = {}
    for c in coll:
        k = (c["kind"], c.get("carries", ""))
        if k[1] and k in seen:
            problems.append(f"two {c['kind']}s carry value {k[1]}: "
                            f"{seen[k]!r} and {c['reason']!r}")
        seen[k] = c["reason"]
    # Per layer (inspect --json's summary, by where each carried value is
    # made), Megatron's count: an all-reduce after attention and one after
    # the MLP, forward and backward (one each for a parallel block), plus
    # one for the replicated K/V projections' or latents' gradients and one
    # for their norms' or K/V's second piece where the model has them.
    per_layer = (2 if cfg["parallel"] else 4) + (2 if cfg.get("kv_reduce_bytes") else 0)
    named = [layer for layer in info["layers"] if layer["layer"]]
    if len(named) < cfg["layers"]:
        problems.append(f"inspect names {len(named)} layers, the model has {cfg['layers']}")
    for layer in named:
        if layer["megatron"] > per_layer:
            problems.append(f"layer {layer['layer']}: {layer['megatron']} of Megatron's "
                            f"collectives, want at most {per_layer}")
    # Bytes each rank sends (inspect's wire_bytes: 2(n-1)/n of an
    # all-reduce's payload, (n-1)/n of the others'), against Megatron's
    # all-reduces of the optimum's payload.
    n = info["mesh"]["tp"]
    total = sum(c["wire_bytes"] for c in coll)
    want = optimum_bytes(cfg) * 2 * (n - 1) // n
    gathers = [c for c in coll if c["kind"] != "all_reduce"
               and not (cfg.get("expert_parallel") and c in expert)]
    if gathers:
        problems.append(f"{len(gathers)} {gathers[0]['kind']}s, e.g. of "
                        f"{gathers[0]['bytes']} bytes at {gathers[0]['source']}")
    if total > 1.05 * want:
        problems.append(f"{total} collective bytes per step, {total / want:.2f}x "
                        f"Megatron's {want}")
    emb = [p for p in info["parameters"] if p["name"] in cfg.get("vocab_parallel", [])]
    for p in emb:
        if p["sharding"] != "split(0)":
            problems.append(f"{p['name']} is {p['sharding']}, not vocab-parallel")
    return f"{len(coll)} collectives, {total} bytes = {total / want:.3f}x optimum", problems


def explained(cleave, bundle):
    """For plans that are not yet Megatron's: every collective explained."""
    coll = json.loads(run([cleave, "inspect", bundle, "--json"]))["collectives"]
    outside, problems = explain(coll)
    gathers = sum(c["kind"] == "all_gather" for c in outside)
    return f"{len(outside)} outside Megatron's pattern ({gathers} all-gathers)", problems


def check_stores(cleave, case, man, tp, work, steps, bundle):
    """Checkpoint at tp, resume at tp=1 and export: the model's shapes."""
    problems = []
    opt = "adamw"
    ckpt = os.path.join(work, f"ckpt-tp{tp}")
    run([cleave, "run", bundle, "--steps", str(steps // 2), "--inputs",
         os.path.join(case, "inputs"), "--checkpoint", ckpt, "--save-every",
         str(steps // 2)] + check_tp.rank_flags(tp))
    one = os.path.join(work, f"bundle-tp1-{opt}")
    resumed = os.path.join(work, "dump-resumed")
    run([cleave, "run", one, "--steps", str(steps - steps // 2), "--inputs",
         os.path.join(case, "inputs"), "--resume", ckpt, "--dump", resumed])
    # The resumed run's losses are its own steps only: compare the state.
    np.save(os.path.join(resumed, "loss.npy"),
            np.load(os.path.join(work, f"dump-tp1-{opt}", "loss.npy")))
    worst, failures = compare(os.path.join(work, f"dump-tp1-{opt}"), resumed, 1e-5)
    problems += [f"resumed at tp=1 from a tp={tp} checkpoint: {f}" for f in failures]
    out = os.path.join(work, "exported.safetensors")
    run([cleave, "export", ckpt, "-o", out])
    with open(out, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    import onnx
    model = onnx.load(os.path.join(case, "model.onnx"))
    shapes = {t.name: list(t.dims) for t in model.graph.initializer}
    for name in man["parameters"]:
        if header.get(name, {}).get("shape") != shapes.get(name):
            problems.append(f"export: {name} is {header.get(name, {}).get('shape')}, "
                            f"the model's is {shapes.get(name)}")
    return f"resume worst {worst[0]:.1e}", problems


def fused_against_unfused(args, name, case, man, opt, work):
    """The fused attention at tp 1 and each --tp against the unfused form
    (--no-fusion) at tp 1: state, losses and first-step gradients. Prints
    how many attention blocks each fused plan holds (the fused kernels are
    required where --fused-models names the model). Returns failures."""
    _, ref = train(args.cleave, case, man, opt, 1, args.steps, work,
                   extra=("--no-fusion",))
    failed = 0
    tps = sorted({1, *[int(t) for t in args.tp.split(",")]})
    for tp in tps:
        bundle, got = train(args.cleave, case, man, opt, tp, args.steps, work)
        kernels = json.loads(run([args.cleave, "inspect", bundle, "--json"]))["kernels"]
        worst, failures = compare_all(ref, got, args.rtol)
        fwd, bwd = kernels.get("attention", 0), kernels.get("attention_backward", 0)
        ce = kernels.get("cross_entropy", 0)
        if name in args.fused_models.split(",") and (fwd == 0 or bwd == 0):
            failures.append(f"{fwd} attention and {bwd} attention_backward kernels")
        if ce != kernels.get("cross_entropy_backward", 0):
            failures.append(f"{ce} cross_entropy, not one backward each")
        print(f"{'FAIL' if failures else 'PASS'} {name} fused tp={tp} {opt}: "
              f"{fwd} attention, {bwd} backward, {ce} cross_entropy; worst "
              f"{worst[0]:.2e} ({worst[1]}) against unfused tp=1")
        for f in failures:
            print("    " + f)
        failed += bool(failures)
    return failed


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cleave", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--only", default="")
    ap.add_argument("--tp", default="2,4")
    ap.add_argument("--optimizers", default="adamw")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--megatron-tp", default="4",
                    help="the tps (comma-separated) at which the plan is checked, or none")
    ap.add_argument("--explain-tp", default="",
                    help="tps (comma-separated) at which every collective must be explained")
    ap.add_argument("--stores", action="store_true")
    ap.add_argument("--tp-inner", type=int, default=1,
                    help="factor each tp above N into groups of N ranks")
    ap.add_argument("--against-unfused", action="store_true",
                    help="compare the fused attention at tp 1 and each --tp "
                         "with the unfused form (--no-fusion) at tp 1 instead")
    ap.add_argument("--fused-models", default="",
                    help="with --against-unfused: models whose plans must "
                         "hold the fused kernels")
    check_tp.add_launcher_flag(ap)
    args = ap.parse_args()
    check_tp.LAUNCHER = args.launcher
    megatron_tps = [int(t) for t in args.megatron_tp.split(",") if t != "none"]
    explain_tps = [int(t) for t in args.explain_tp.split(",") if t]
    names = args.only.split(",") if args.only else sorted(os.listdir(args.models))
    failed = 0
    for name in names:
        case = os.path.join(args.models, name)
        man = json.load(open(os.path.join(case, "manifest.json")))
        work = os.path.join(args.work, name)
        os.makedirs(work, exist_ok=True)
        for opt in args.optimizers.split(","):
            try:
                if args.against_unfused:
                    failed += fused_against_unfused(args, name, case, man, opt, work)
                    continue
                _, ref = train(args.cleave, case, man, opt, 1, args.steps, work)
                for tp in [int(t) for t in args.tp.split(",")]:
                    extra = (("--tp-inner", str(args.tp_inner))
                             if 1 < args.tp_inner < tp else ())
                    bundle, got = train(args.cleave, case, man, opt, tp, args.steps, work,
                                        extra)
                    # AdamW's first update is lr * g / (|g| + eps): where |g|
                    # is near eps its gain on a gradient's rounding is up to
                    # lr / eps (10 here). A model whose gradients sit there
                    # (CLIP's) is held to rtol on its gradients and on SGD's
                    # trajectory, and to that gain times rtol on AdamW's.
                    state_rtol = args.rtol
                    if opt == "adamw" and man["config"].get("adamw_noise_gain"):
                        state_rtol *= man["adamw"]["lr"] / man["adamw"]["eps"]
                    worst, failures = compare_all(ref, got, args.rtol, state_rtol)
                    print(f"{'FAIL' if failures else 'PASS'} {name} tp={tp} {opt}: "
                          f"worst {worst[0]:.2e} ({worst[1]})")
                    checks = [("", failures)]
                    if tp in explain_tps and opt == "adamw":
                        summary, problems = explained(args.cleave, bundle)
                        print(f"{'FAIL' if problems else 'PASS'} {name} tp={tp} explained: "
                              f"{summary}")
                        checks.append(("", problems))
                    if tp in megatron_tps and opt == "adamw":
                        summary, problems = megatron(args.cleave, bundle, man["config"])
                        print(f"{'FAIL' if problems else 'PASS'} {name} "
                              f"tp={tp} megatron: {summary}")
                        checks.append(("", problems))
                        if args.stores and tp == max(megatron_tps):
                            summary, problems = check_stores(args.cleave, case, man, tp,
                                                             work, args.steps, bundle)
                            print(f"{'FAIL' if problems else 'PASS'} {name} tp={tp} "
                                  f"stores: {summary}")
                            checks.append(("", problems))
                    for _, probs in checks:
                        for p in probs:
                            print("    " + p)
                        failed += bool(probs)
            except RuntimeError as e:
                print(f"FAIL {name} {opt}: {e}")
                failed += 1
    print(f"{failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Checks Cleave's tensor parallelism on the zoo.

Usage:
  /usr/bin/python3 zoo/check_tp.py --cleave CLEAVE --zoo DIR --work DIR
      [--models gpt2,llama] [--tp 2,4] [--optimizers sgd,adamw] [--steps 10]
      [--rtol 1e-5] [--megatron gpt2,llama,bert] [--against-unfused]

With --against-unfused the reference is instead the tp=1 step compiled
with --no-fusion (attention and cross-entropy as the exporter and the loss
builder wrote them), and the default, fused compile at tp 1 and at each tp
is compared with it; each fused plan must hold fused kernels (attention,
cross_entropy), each with its backward, and prints how many.

Runs of more than one rank start them as threads (--threads); --launcher
mpi starts them through mpirun. A bundle and run some earlier invocation
made in the same --work folder with the same commands is reused (the tp=1
references of a test's several invocations).

For each model (opset 17) and optimizer it compiles the train step at tp=1
and at each tp, runs --steps steps on the model's reference inputs and
compares the losses and every final parameter and buffer (gathered to full
shape by --dump) with the tp=1 run: max|a - b| <= rtol * max|b| per tensor.

For the --megatron models (and --parallel-blocks ones, GPT-J's block,
with 1 + 1 all-reduces per layer) it also reads `cleave inspect --json` at
--megatron-tp (4) and asserts Megatron's optimum: per transformer layer exactly 2
forward and 2 backward all-reduces of activations (plus one for the
vocab-parallel embedding forward and one for the LM head backward when the
head is split), a vocab-parallel embedding, only small all-reduces for the
loss (never an all-gather of logits; no all-gather at all), and per-rank
parameter memory within 2% of sharded bytes / tp + replicated bytes.
"""
import argparse
import json
import os
import re
import subprocess
import sys

import numpy as np


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"{' '.join(cmd)}\n{r.stdout}{r.stderr}")
    return r.stdout


# How a run of more than one rank starts them: "threads" (cleave run
# --threads, the in-process communicator; the default, as these checks test
# the plan and its math, not the launcher) or "mpi" (one process per rank
# through mpirun, cleave run's default).
LAUNCHER = "threads"


def rank_flags(ranks):
    return ["--threads"] if ranks > 1 and LAUNCHER == "threads" else []


def run_once(work, tag, cmds):
    """Runs cmds (lists) unless an earlier call in the same work folder ran
    exactly these commands to the end: the tp=1 references several
    invocations of one test compare against are computed once. The stamp is
    written last, so a failed or interrupted run is redone."""
    stamp = os.path.join(work, f".done-{tag}")
    want = json.dumps(cmds)
    if os.path.exists(stamp):
        with open(stamp) as f:
            if f.read() == want:
                return
    for cmd in cmds:
        run(cmd)
    with open(stamp, "w") as f:
        f.write(want)


def add_launcher_flag(ap):
    ap.add_argument("--launcher", choices=["threads", "mpi"], default="threads",
                    help="how a run of more than one rank starts them: threads "
                         "(cleave run --threads; default) or mpi (mpirun)")


def flags(case, opt):
    man = json.load(open(os.path.join(case, "manifest.json")))
    hp = man[opt]
    return man, ["--loss", man["loss"], "--optimizer", opt] + sum(
        (["--" + k.replace("_", "-"), str(v)] for k, v in hp.items()), [])


def train(cleave, case, opt, tp, steps, work, mesh=None, extra=()):
    """tp: an int (--tp), or mesh: "dp=2,tp=2" (--mesh, ranks as threads),
    "dp=2,zero=3" (--mesh and --zero) or "devices=4" (--devices: the
    compiler's choice)."""
    man, f = flags(case, opt)
    tag = f"tp{tp}" if mesh is None else mesh.replace("=", "").replace(",", "-")
    tag += "".join(extra).replace("-", "")
    bundle = os.path.join(work, f"bundle-{tag}-{opt}")
    dump = os.path.join(work, f"dump-{tag}-{opt}")
    if mesh is None:
        layout = ["--tp", str(tp)]
    elif mesh.startswith("devices="):
        # The compiler chooses the mesh: "devices=4" is --devices 4.
        layout = ["--devices", mesh.split("=", 1)[1]]
    else:
        # "dp=2,zero=3": the mesh, and the ZeRO stage as --zero.
        axes = [a for a in mesh.split(",") if not a.startswith("zero=")]
        zero = [a.split("=")[1] for a in mesh.split(",") if a.startswith("zero=")]
        layout = ["--mesh", ",".join(axes)] + (["--zero", zero[0]] if zero else [])
    ranks = ["--threads"] if mesh is not None else rank_flags(tp)
    run_once(work, f"{tag}-{opt}", [
        [cleave, "compile", os.path.join(case, "model.onnx"), "-o", bundle] +
        layout + f + list(extra),
        [cleave, "run", bundle, "--steps", str(steps), "--inputs",
         os.path.join(case, "inputs"), "--dump", dump] + ranks])
    return man, bundle, dump


def compare(ref, got, rtol):
    worst, failures = (0.0, ""), []
    for name in sorted(os.listdir(ref)):
        if name.endswith(".grad.npy"):
            continue  # gradients of a converged step are cancellation noise
        a = np.load(os.path.join(ref, name))
        path = os.path.join(got, name)
        if not os.path.exists(path):
            failures.append(f"{name}: missing")
            continue
        b = np.load(path)
        if a.shape != b.shape:
            failures.append(f"{name}: shape {b.shape}, want {a.shape}")
            continue
        err = float(np.abs(a - b).max() / max(float(np.abs(a).max()), 1e-30))
        worst = max(worst, (err, name))
        if not err <= rtol:
            failures.append(f"{name}: relative error {err:.2e}")
    return worst, failures


def megatron(cleave, bundle, man, tp, per_layer=2):
    info = json.loads(run([cleave, "inspect", bundle, "--json"]))
    params = info["parameters"]
    layers = {m.group(1) for p in params
              for m in [re.match(r"(?:h|layers)\.(\d+)\.", p["name"])] if m}
    n = len(layers)
    # The largest all-reduce is an activation [batch, seq, hidden].
    ar = [c for c in info["collectives"] if c["kind"] == "all_reduce"]
    act = max(c["bytes"] for c in ar)
    fwd = sum(1 for c in ar if c["phase"] == "forward" and c["bytes"] == act)
    bwd = sum(1 for c in ar if c["phase"] == "backward" and c["bytes"] == act)
    small = [c for c in ar if c["bytes"] < act // 8]
    gathers = [c for c in info["collectives"] if c["kind"] != "all_reduce"]
    # The zoo's token embeddings (GPT-2's wte, LLaMA's embed_tokens, BERT's
    # word_embeddings).
    emb = [p for p in params if re.search(r"wte|embed_tokens|word_embeddings", p["name"])]
    split = sum(np.prod(p["shape"]) * 4 for p in params
                if p["sharding"] != "replicated")
    repl = sum(np.prod(p["shape"]) * 4 for p in params
               if p["sharding"] == "replicated")
    want_mem = split / tp + repl
    mem = info["memory_per_rank"]["parameters"]
    problems = []
    k = per_layer
    if fwd != k * n + 1:
        problems.append(f"{fwd} forward activation all-reduces, want {k} x {n} "
                        "layers + 1 (embedding)")
    if bwd not in (k * n, k * n + 1):
        problems.append(f"{bwd} backward activation all-reduces, want {k} x {n} "
                        "layers (+1 LM head)")
    if gathers:
        problems.append(f"{len(gathers)} all-gathers, e.g. {gathers[0]['source']}")
    if not emb or not all(p["sharding"] == "split(0)" for p in emb):
        problems.append("the embedding is not vocab-parallel")
    if abs(mem - want_mem) > 0.02 * want_mem:
        problems.append(f"parameter memory {mem}, want {want_mem:.0f} +- 2%")
    return f"{n} layers, {fwd} fwd / {bwd} bwd activation all-reduces, {len(small)} small", problems


FUSED_KERNELS = ["attention", "attention_backward", "cross_entropy",
                 "cross_entropy_backward"]


def fused_against_unfused(args, model, case, opt, tps, work):
    """The fused attention and cross-entropy (the default) at tp 1 and each
    of tps against the unfused form (--no-fusion) at tp 1; the fused plans
    must hold fused kernels, each with its backward. Returns the number of
    failures."""
    _, _, ref = train(args.cleave, case, opt, 1, args.steps, work,
                      extra=("--no-fusion",))
    failed = 0
    for tp in sorted({1, *tps}):
        _, bundle, got = train(args.cleave, case, opt, tp, args.steps, work)
        kernels = json.loads(run([args.cleave, "inspect", bundle, "--json"]))["kernels"]
        worst, failures = compare(ref, got, args.rtol)
        counts = {k: kernels.get(k, 0) for k in FUSED_KERNELS}
        if not any(counts.values()):
            failures.append("no fused kernel in the plan")
        for k in FUSED_KERNELS[::2]:
            if counts[k] != counts[k + "_backward"]:
                failures.append(f"{counts[k]} {k} but {counts[k + '_backward']} backward")
        failed += report(f"{model} fused tp={tp} {opt}: {counts['attention']} "
                         f"attention, {counts['cross_entropy']} cross_entropy; worst "
                         f"{worst[0]:.2e} ({worst[1]}) against unfused tp=1",
                         failures)
    return failed


def report(line, failures):
    """Prints PASS or FAIL, the line and each failure; 1 if any."""
    print(f"{'FAIL' if failures else 'PASS'} {line}")
    for f in failures:
        print("    " + f)
    return int(bool(failures))


def inspect_json(cleave, bundle):
    return json.loads(run([cleave, "inspect", bundle, "--json"]))


def check_recompute(args, model, case, opt, tp, work, ref, plain):
    """--recompute's policies and --squeeze at one tp, against the plain
    tp=1 run; returns the failures."""
    failed = 0
    policies = [p for p in args.recompute.split(",") if p]
    runs = [(f"recompute {p}", ("--recompute", p)) for p in policies]
    if args.sequence_parallel:
        sp = ("--sequence-parallel", "on")
        runs += [("sequence-parallel", sp)] + [
            (f"sequence-parallel recompute {p}", sp + ("--recompute", p))
            for p in policies]
    if not runs and not args.squeeze:
        return 0
    peak = inspect_json(args.cleave, plain)["memory_per_rank"]["activations_peak"]
    if args.squeeze:
        # The plain plan's need as the compiler counts it (a budget no plan
        # exceeds records it), then a byte less.
        roomy = os.path.join(work, f"bundle-roomy-tp{tp}-{opt}")
        run([args.cleave, "compile", os.path.join(case, "model.onnx"), "-o",
             roomy, "--tp", str(tp), "--memory-per-device", "1000TB",
             "--plan-only"] + flags(case, opt)[1])
        need = inspect_json(args.cleave, roomy)["mesh_choice"]["candidates"][0]
        runs.append(("squeezed", ("--memory-per-device",
                                  str(need["memory_bytes"] - 1))))
    for name, extra in runs:
        _, bundle, got = train(args.cleave, case, opt, tp, args.steps, work,
                               extra=extra)
        worst, failures = compare(ref, got, args.rtol)
        info = inspect_json(args.cleave, bundle)
        made = info["recompute"]
        # Copies are kept only where they lower the step's peak (a small
        # batch's activations may not be it): never above the plain plan,
        # below it whenever something is made again.
        got_peak = info["memory_per_rank"]["activations_peak"]
        if name.startswith("sequence-parallel"):
            # Split between the blocks: regions from reduce-scatters (the
            # peak may be elsewhere in a small model).
            if not info["sequence_parallel"]["regions"]:
                failures.append("sequence parallelism asked for, no region")
        elif got_peak > peak or (made["ops"] and got_peak >= peak):
            failures.append(f"activation peak {got_peak} bytes with "
                            f"{made['ops']} ops made again, the plain plan's {peak}")
        if name == "squeezed":
            chosen = info["mesh_choice"]["candidates"][0]
            name += f" chose {chosen['recompute']}" + (
                " sequence-parallel" if chosen["sequence_parallel"] else "")
            if chosen.get("refused") or (chosen["recompute"] == "none" and
                                         not chosen["sequence_parallel"]):
                failures.append(f"chose {chosen}")
        failed += report(f"{model} tp={tp} {name} {opt}: worst "
                         f"{worst[0]:.2e} ({worst[1]}); {made['ops']} ops made again, "
                         f"{made['flops'] / max(made['step_flops'], 1):.0%} of the "
                         f"step's product FLOPs; peak {got_peak} of {peak} bytes",
                         failures)
    return failed


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cleave", required=True)
    ap.add_argument("--zoo", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--models", default="gpt2,llama,gptj,bert,mlp,resnet,vit,mlp_mse")
    ap.add_argument("--tp", default="2,4")
    ap.add_argument("--meshes", default="",
                    help="';'-separated --mesh values (dp=2;dp=2,tp=2) run "
                         "as threads and compared with tp=1 as --tp is")
    ap.add_argument("--optimizers", default="sgd,adamw")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--megatron", default="")
    ap.add_argument("--megatron-tp", type=int, default=4,
                    help="the tp at which Megatron's plan is checked")
    ap.add_argument("--against-unfused", action="store_true",
                    help="compare the fused attention at tp 1 and each --tp "
                         "with the unfused form (--no-fusion) at tp 1 "
                         "instead, and require the fused kernels")
    ap.add_argument("--parallel-blocks", default="",
                    help="models whose attention and MLP share one input: "
                         "1 + 1 all-reduces per layer")
    ap.add_argument("--recompute", default="",
                    help="recomputation policies (selective,full) trained "
                         "at each --tp and compared with the plain tp=1 "
                         "run; each plan peaks at most at the plain plan's "
                         "peak at that tp, and below it where it makes ops "
                         "again")
    ap.add_argument("--sequence-parallel", action="store_true",
                    help="also train at each --tp with --sequence-parallel on, "
                         "alone and with each --recompute policy, compared "
                         "with the plain tp=1 run")
    ap.add_argument("--squeeze", action="store_true",
                    help="also compile at each --tp with --memory-per-device "
                         "a byte under the plain plan's need: the compiler "
                         "must choose sequence parallelism or a "
                         "recomputation that fits, trained as exactly")
    add_launcher_flag(ap)
    args = ap.parse_args()
    global LAUNCHER
    LAUNCHER = args.launcher
    failed = 0
    tps = [int(t) for t in args.tp.split(",") if t]
    meshes = [m for m in args.meshes.split(";") if m]
    for model in args.models.split(","):
        case = os.path.join(args.zoo, f"{model}-opset17")
        for opt in args.optimizers.split(","):
            work = os.path.join(args.work, model)
            os.makedirs(work, exist_ok=True)
            try:
                if args.against_unfused:
                    failed += fused_against_unfused(args, model, case, opt, tps, work)
                    continue
                _, _, ref = train(args.cleave, case, opt, 1, args.steps, work)
                for tp in tps:
                    man, bundle, got = train(args.cleave, case, opt, tp, args.steps, work)
                    worst, failures = compare(ref, got, args.rtol)
                    status = "FAIL" if failures else "PASS"
                    print(f"{status} {model} tp={tp} {opt}: worst {worst[0]:.2e} ({worst[1]})")
                    for f in failures:
                        print("    " + f)
                    failed += bool(failures)
                    failed += check_recompute(args, model, case, opt, tp, work,
                                              ref, bundle)
                    parallel = model in args.parallel_blocks.split(",")
                    if ((model in args.megatron.split(",") or parallel) and
                            tp == args.megatron_tp and opt == "adamw"):
                        summary, problems = megatron(args.cleave, bundle, man, tp,
                                                     1 if parallel else 2)
                        status = "FAIL" if problems else "PASS"
                        print(f"{status} {model} tp={tp} megatron: {summary}")
                        for p in problems:
                            print("    " + p)
                        failed += bool(problems)
                for mesh in meshes:
                    _, bundle, got = train(args.cleave, case, opt, 0, args.steps,
                                           work, mesh)
                    worst, failures = compare(ref, got, args.rtol)
                    status = "FAIL" if failures else "PASS"
                    if mesh.startswith("devices="):
                        shape = json.loads(subprocess.run(
                            [args.cleave, "inspect", bundle, "--json"], check=True,
                            capture_output=True, text=True).stdout)["mesh"]
                        mesh += " chose " + ",".join(f"{a}={n}" for a, n in shape.items())
                    print(f"{status} {model} mesh {mesh} {opt}: worst "
                          f"{worst[0]:.2e} ({worst[1]})")
                    for f in failures:
                        print("    " + f)
                    failed += bool(failures)
            except RuntimeError as e:
                print(f"FAIL {model} {opt}: {e}")
                failed += 1
    print(f"{failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

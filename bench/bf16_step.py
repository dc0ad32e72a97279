#!/usr/bin/python3
"""bf16 mixed precision on the CPU: Cleave's step against its f32 step and
against PyTorch's (eager f32, and eager under torch.autocast(bfloat16)).

Usage: /usr/bin/python3 bench/bf16_step.py [--steps 10] [--warmup 3]
           [--rounds 3] [--pairs N] [--threads N] [--json OUT]
           [--cleave build/bin/cleave]

The model (issue 36): a GPT of 4 pre-LayerNorm blocks (bench/gpu/torch_gpt.py's,
llm.c's layout), d 512, 8 heads, MLP 2048, vocab 2048, tied LM head;
sequence 256, batch 8; cross-entropy; AdamW.

Method: bench/cpu_step.py's. Each measurement runs in its own process, one
after another, with the same OMP_NUM_THREADS (default: every core) and the
same module (seed 0); rounds alternate the four (torch f32, torch bf16,
cleave f32, cleave bf16) so a noisy neighbour slows all of them. Step time:
the median of the steps after --warmup, per process; reported: the median
of the rounds' medians. PyTorch bf16 is its standard recipe (f32 weights,
autocast around forward and loss, backward outside). Cleave's bundles are
compiled once (precision="f32" and precision="bf16") and run with `cleave
run --inputs`, the same batch every step. The first and last losses are
printed so that a run that trains nothing is seen.

--pairs N: the same four steps interleaved in one process, round after
round (in a new order each round), so that each round's steps see the
machine in the same state; this machine's speed drifts by 10-40% within
minutes, which separate processes see at different moments. A second,
identical PyTorch autocast model runs beside the first as a control: its
ratio to the first is the method's own bias and noise. Cleave's bundles
are made by cleave.tensor_parallel (tp 1, the ranks on the calling thread,
so both share one OpenMP pool). Reported: each participant's median step
and, per round, the ratios of Cleave bf16 to each PyTorch autocast step,
of the control to the first, and of Cleave bf16 to Cleave f32.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from cpu_step import gpt, run_measured, timing_arguments  # noqa: E402

D, HEADS, MLP, VOCAB, SEQ, LAYERS, BATCH = 512, 8, 2048, 2048, 256, 4, 8


def gpt_module():
    import torch
    module = gpt(D, HEADS, MLP, VOCAB, SEQ, LAYERS)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    labels = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    return module, ids, labels


def worker_torch(steps, bf16):
    module, ids, labels = gpt_module()
    step = torch_stepper(module, ids, labels, bf16)
    times, losses = [], []
    for _ in range(steps):
        start = time.perf_counter()
        losses.append(step())
        times.append(time.perf_counter() - start)
    return {"seconds": times, "losses": losses}


def torch_stepper(module, ids, labels, bf16):
    """One PyTorch training step of the module per call; returns the loss."""
    import torch
    import torch.nn.functional as F
    optim = torch.optim.AdamW(module.parameters(), lr=3e-4, weight_decay=0.01)

    def step():
        optim.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = module(ids)
            loss = F.cross_entropy(out.reshape(-1, VOCAB).float(),
                                   labels.reshape(-1))
        loss.backward()
        optim.step()
        return float(loss)
    return step


PAIRED = ["torch bf16", "torch bf16 again", "cleave bf16", "cleave f32"]


def worker_pairs(rounds, warmup, threads):
    """The four steps interleaved in this process (--pairs)."""
    import copy
    import torch
    sys.path.insert(0, os.path.join(ROOT, "build", "python"))
    import cleave
    torch.set_num_threads(threads)
    module, ids, labels = gpt_module()
    batch = {"input_ids": ids, "labels": labels}
    steps = {}
    for name in PAIRED[:2]:
        steps[name] = torch_stepper(copy.deepcopy(module), ids, labels, True)
    for name in PAIRED[2:]:
        model = cleave.tensor_parallel(
            copy.deepcopy(module), batch, tp=1, loss="cross_entropy",
            optimizer=cleave.AdamW(3e-4, weight_decay=0.01),
            precision=name.split()[1])
        steps[name] = (lambda m: lambda: m.step(batch))(model)
    seconds = {n: [] for n in PAIRED}
    losses = {n: [] for n in PAIRED}
    # A new order each round (seeded): a step runs after each of the others
    # as often, so one that leaves the caches cold (Cleave f32's) slows no
    # participant more than the rest.
    order = random.Random(0)
    for r in range(warmup + rounds):
        for name in order.sample(PAIRED, len(PAIRED)):
            start = time.perf_counter()
            loss = steps[name]()
            if r >= warmup:
                seconds[name].append(time.perf_counter() - start)
            losses[name].append(loss)
    return {"seconds": seconds, "losses": losses}


def report_pairs(args):
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    r = run_measured([sys.executable, os.path.abspath(__file__), "--worker",
                      "pairs", "--steps", str(args.pairs), "--warmup",
                      str(args.warmup), "--threads", str(args.threads)],
                     parse_json=True)
    sec, losses = r["seconds"], r["losses"]
    rows = {}
    for n in PAIRED:
        rows[n] = {"ms_per_step": 1e3 * statistics.median(sec[n]),
                   "ms_per_round": [1e3 * s for s in sec[n]],
                   "loss_first": losses[n][0], "loss_last": losses[n][-1]}
        print("%-17s %7.1f ms/step  loss %.4f -> %.4f (%d steps)" %
              (n, rows[n]["ms_per_step"], losses[n][0], losses[n][-1],
               len(losses[n])))
    ratios = {}
    for a, b in (("cleave bf16", "torch bf16"),
                 ("cleave bf16", "torch bf16 again"),
                 ("torch bf16 again", "torch bf16"),
                 ("cleave bf16", "cleave f32")):
        each = [x / y for x, y in zip(sec[a], sec[b])]
        key = "%s / %s" % (a, b)
        ratios[key] = {"median": statistics.median(each),
                       "below_1": sum(x < 1 for x in each),
                       "rounds": each}
        print("%-34s median %.3f  (below 1 in %d of %d rounds; %.2f-%.2f)" %
              (key, ratios[key]["median"], ratios[key]["below_1"], len(each),
               min(each), max(each)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": args.threads, "pairs": args.pairs,
                       "warmup": args.warmup, "rows": rows,
                       "ratios": ratios}, f, indent=1)


def worker_compile(bundle, data, precision):
    sys.path.insert(0, os.path.join(ROOT, "build", "python"))
    import numpy as np
    import cleave
    module, ids, labels = gpt_module()
    example = {"input_ids": ids, "labels": labels}
    cleave.compile(module, example, output=bundle, loss="cross_entropy",
                   optimizer=cleave.AdamW(3e-4, weight_decay=0.01),
                   precision=precision)
    os.makedirs(data, exist_ok=True)
    for name, value in example.items():
        np.save(os.path.join(data, name + ".npy"), value.numpy())
    return {}


def run_cleave(args, bundle, data):
    metrics = bundle + ".metrics"
    run_measured([args.cleave, "run", bundle, "--inputs", data, "--steps",
                  str(args.steps), "--metrics", metrics, "--progress",
                  "lines"])
    with open(metrics) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    return {"seconds": [line["seconds"] for line in lines],
            "losses": [line["loss"] for line in lines]}


def main():
    ap = timing_arguments(__doc__, 10)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--bundle", help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--precision", help=argparse.SUPPRESS)
    ap.add_argument("--pairs", type=int, default=0,
                    help="rounds of the four steps interleaved in one "
                    "process (see above)")
    args = ap.parse_args()
    if args.worker == "pairs":
        print(json.dumps(worker_pairs(args.steps, args.warmup,
                                      args.threads)))
        return
    if args.worker == "torch":
        print(json.dumps(worker_torch(args.steps, args.precision == "bf16")))
        return
    if args.worker == "compile":
        print(json.dumps(worker_compile(args.bundle, args.data,
                                        args.precision)))
        return

    if args.pairs:
        report_pairs(args)
        return
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    me = [sys.executable, os.path.abspath(__file__)]
    names = ["torch f32", "torch bf16", "cleave f32", "cleave bf16"]
    runs = {n: [] for n in names}
    with tempfile.TemporaryDirectory(prefix="cleave-bf16-") as work:
        bundles = {}
        for p in ("f32", "bf16"):
            bundle = os.path.join(work, p)
            run_measured(me + ["--worker", "compile", "--bundle", bundle,
                               "--data", bundle + ".data", "--precision", p],
                         parse_json=True)
            bundles[p] = bundle
        for _ in range(args.rounds):
            for n in names:
                kind, p = n.split()
                if kind == "torch":
                    r = run_measured(me + ["--worker", "torch", "--steps",
                                           str(args.steps), "--precision", p],
                                     parse_json=True)
                else:
                    r = run_cleave(args, bundles[p], bundles[p] + ".data")
                runs[n].append(r)
        inspect = {p: json.loads(subprocess.check_output(
            [args.cleave, "inspect", b, "--json"]))["memory_per_rank"]
            for p, b in bundles.items()}
    report = {"threads": args.threads, "steps": args.steps,
              "warmup": args.warmup, "rows": {}, "inspect": inspect}
    for n in names:
        medians = [1e3 * statistics.median(r["seconds"][args.warmup:])
                   for r in runs[n]]
        row = {"ms_per_step": statistics.median(medians),
               "ms_per_round": medians,
               "loss_first": runs[n][0]["losses"][0],
               "loss_last": runs[n][0]["losses"][-1]}
        report["rows"][n] = row
        print("%-12s %8.1f ms/step  (rounds %s)  loss %.4f -> %.4f" %
              (n, row["ms_per_step"], ", ".join("%.1f" % m for m in medians),
               row["loss_first"], row["loss_last"]), flush=True)
    for p in ("f32", "bf16"):
        print("cleave %-4s activations peak %.1f MB" %
              (p, inspect[p]["activations_peak"] / 2**20))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()

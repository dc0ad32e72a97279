#!/usr/bin/python3
"""Cleave's CPU training step against PyTorch eager's, side by side.

Usage: /usr/bin/python3 bench/cpu_step.py [--model gpt|resnet18|all]
           [--steps 12] [--warmup 3] [--rounds 3] [--threads N]
           [--json OUT]
           [--cleave build/bin/cleave] [--profile]

Models (issue 19):
  gpt       4 pre-LayerNorm decoder blocks (bench/gpu/torch_gpt.py's), d
            256, 8 heads, MLP 1024, vocab 512, fused QKV with bias, causal
            softmax attention (spelled out on torch 1.13, which has no
            scaled_dot_product_attention), erf GELU, tied LM head; batch 8 x
            128 tokens; cross-entropy; AdamW.
  resnet18  torchvision's resnet18 (10 classes) on 64 x 64 images, batch
            16, BatchNorm in training mode; cross-entropy; SGD with
            momentum 0.9 and weight decay 5e-4.

Method. Each measurement runs in its own process, one after another, with
the same OMP_NUM_THREADS (default: every core) and the same module (seed 0):
  torch   the eager loop (zero_grad, forward, loss, backward, step);
  cleave  `cleave run BUNDLE --inputs DIR --metrics FILE`, the bundle
          compiled beforehand by cleave.compile from the same module, the
          batch in DIR (the same batch every step, as in the torch loop).
Step time: the median of the steps after --warmup (torch: perf_counter
around one step; cleave: the metrics file's per-step seconds), per process;
--rounds rounds alternate the two (torch, cleave, torch, cleave, ...) so
that a noisy neighbour slows both, and the reported time is the median of
the rounds' medians. Memory: the
process's peak RSS (wait4's ru_maxrss); activation memory two ways:
  measured  the peak RSS at twice the batch minus the peak at the batch,
            which cancels the libraries, the weights, the gradients and the
            optimizer state (none grow with the batch); noisy where the
            activations are small next to the allocators' slack (ResNet);
  counted   PyTorch: the distinct storages autograd saves for the backward
            pass (saved_tensors_hooks), a lower bound of its step's memory;
            Cleave: the planned arena (`cleave inspect`'s activations peak),
            every value of the step, backward and optimizer included.
Prints a table and, with --json, writes every number.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def gpt(d, heads, mlp, vocab, seq, layers):
    """A GPT of the GPU check's blocks (llm.c's layout, so the benchmarks
    time one model) with a tied LM head, seeded 0."""
    import torch
    import torch.nn as nn
    sys.path.insert(0, os.path.join(HERE, "gpu"))
    from torch_gpt import Block

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocab, d)
            self.wpe = nn.Embedding(seq, d)
            self.h = nn.ModuleList(Block(d, heads, mlp) for _ in range(layers))
            self.ln_f = nn.LayerNorm(d)
            self.lm_head = nn.Linear(d, vocab, bias=False)
            self.lm_head.weight = self.wte.weight

        def forward(self, input_ids):
            pos = torch.arange(input_ids.shape[1])
            x = self.wte(input_ids) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            return self.lm_head(self.ln_f(x))

    torch.manual_seed(0)
    return GPT()


def gpt_module(batch):
    import torch
    vocab, seq = 512, 128
    module = gpt(256, 8, 1024, vocab, seq, 4)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (batch, seq), generator=g)
    labels = torch.randint(0, vocab, (batch, seq), generator=g)
    return module, {"input_ids": ids}, labels, "adamw"


def resnet_module(batch):
    import torch
    import torchvision

    torch.manual_seed(0)
    module = torchvision.models.resnet18(num_classes=10)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, 3, 64, 64, generator=g)
    labels = torch.randint(0, 10, (batch,), generator=g)
    return module, {"x": x}, labels, "sgd"


MODELS = {"gpt": (gpt_module, 8), "resnet18": (resnet_module, 16)}


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def worker_torch(model, batch, steps):
    import torch
    import torch.nn.functional as F
    module, inputs, labels, opt = MODELS[model][0](batch)
    module.train()
    if opt == "adamw":
        optim = torch.optim.AdamW(module.parameters(), lr=3e-4,
                                  weight_decay=0.01)
    else:
        optim = torch.optim.SGD(module.parameters(), lr=0.01, momentum=0.9,
                                weight_decay=5e-4)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        optim.zero_grad(set_to_none=True)
        out = module(**inputs)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]),
                               labels.reshape(-1))
        loss.backward()
        optim.step()
        times.append(time.perf_counter() - start)
    # What autograd keeps for the backward pass (distinct storages saved by
    # the forward): PyTorch's activation memory, counted exactly.
    storages = {}

    def pack(t):
        s = t.storage()
        storages[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = module(**inputs)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]),
                               labels.reshape(-1))
    return {"seconds": times, "loss": float(loss),
            "saved_mb": sum(storages.values()) / 2**20}


def worker_compile(model, batch, bundle, data):
    sys.path.insert(0, os.path.join(ROOT, "build", "python"))
    import numpy as np
    import cleave
    module, inputs, labels, opt = MODELS[model][0](batch)
    optimizer = (cleave.AdamW(3e-4, weight_decay=0.01) if opt == "adamw" else
                 cleave.SGD(0.01, momentum=0.9, weight_decay=5e-4))
    example = dict(inputs, labels=labels)
    cleave.compile(module, example, output=bundle, optimizer=optimizer,
                   loss="cross_entropy")
    os.makedirs(data, exist_ok=True)
    for name, value in example.items():
        np.save(os.path.join(data, name + ".npy"), value.numpy())
    return {}


def run_worker(args, kind, model, batch, extra=()):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", kind,
           "--model", model, "--batch", str(batch),
           "--steps", str(args.steps)] + list(extra)
    return run_measured(cmd, parse_json=True)


def run_measured(cmd, parse_json=False, env=None):
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        sys.exit("bench: %s failed (status %d)" % (" ".join(cmd), status))
    result = json.loads(out.decode().strip().splitlines()[-1]) \
        if parse_json else {"stdout": out.decode()}
    result["peak_rss_mb"] = usage.ru_maxrss / 1024.0
    return result


def run_cleave(args, model, batch, work):
    bundle = os.path.join(work, "%s-b%d" % (model, batch))
    data = bundle + ".data"
    if not os.path.exists(bundle):
        run_worker(args, "compile", model, batch, ["--bundle", bundle,
                                                   "--data", data])
    metrics = bundle + ".metrics"
    cmd = [args.cleave, "run", bundle, "--inputs", data, "--steps",
           str(args.steps), "--metrics", metrics, "--progress", "lines"]
    if args.profile and batch == MODELS[model][1]:
        cmd.append("--profile")
    result = run_measured(cmd)
    if args.profile and batch == MODELS[model][1]:
        print(result["stdout"])
    # The step's planned arena: every value the step computes, backward and
    # optimizer included, at its peak (Cleave's activation memory, exactly).
    inspect = json.loads(subprocess.check_output(
        [args.cleave, "inspect", bundle, "--json"]))
    result["saved_mb"] = \
        inspect["memory_per_rank"]["activations_peak"] / 2**20
    with open(metrics) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    result["seconds"] = [line["seconds"] for line in lines]
    result["loss"] = lines[-1]["loss"]
    return result


def median_ms(result, warmup):
    return 1e3 * statistics.median(result["seconds"][warmup:])


def timing_arguments(doc, steps):
    """The step-timing flags this benchmark and bench/bf16_step.py share."""
    ap = argparse.ArgumentParser(description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--json")
    ap.add_argument("--cleave", default=os.path.join(ROOT, "build", "bin",
                                                     "cleave"))
    return ap


def main():
    ap = timing_arguments(__doc__, 12)
    ap.add_argument("--model", default="all",
                    choices=["all"] + sorted(MODELS))
    ap.add_argument("--profile", action="store_true",
                    help="print cleave run --profile's report too")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--bundle", help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker == "torch":
        print(json.dumps(worker_torch(args.model, args.batch, args.steps)))
        return
    if args.worker == "compile":
        print(json.dumps(worker_compile(args.model, args.batch, args.bundle,
                                        args.data)))
        return

    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    models = sorted(MODELS) if args.model == "all" else [args.model]
    report = {"threads": args.threads, "steps": args.steps,
              "warmup": args.warmup, "models": {}}
    with tempfile.TemporaryDirectory(prefix="cleave-bench-") as work:
        for model in models:
            batch = MODELS[model][1]
            row = {}
            runs = {"torch": {}, "cleave": {}}
            for b in (batch, 2 * batch):
                for r in range(args.rounds if b == batch else 1):
                    for name in ("torch", "cleave"):
                        runs[name].setdefault(b, []).append(
                            run_worker(args, "torch", model, b)
                            if name == "torch" else
                            run_cleave(args, model, b, work))
            for name in ("torch", "cleave"):
                one, two = runs[name][batch], runs[name][2 * batch]
                row[name] = {
                    "ms_per_step": statistics.median(
                        median_ms(r, args.warmup) for r in one),
                    "ms_per_round": [median_ms(r, args.warmup) for r in one],
                    "peak_rss_mb": one[0]["peak_rss_mb"],
                    "activation_mb": two[0]["peak_rss_mb"] -
                    one[0]["peak_rss_mb"],
                    "loss_last": one[0]["loss"],
                    "planned_mb": one[0]["saved_mb"],
                    "seconds": [r["seconds"] for r in one],
                }
            row["time_ratio"] = (row["cleave"]["ms_per_step"] /
                                 row["torch"]["ms_per_step"])
            row["activation_ratio"] = (row["cleave"]["activation_mb"] /
                                       max(row["torch"]["activation_mb"], 1e-9))
            report["models"][model] = row
            print("%-9s torch %7.1f ms  cleave %7.1f ms  ratio %.2f | "
                  "activations (peak RSS at 2B - at B) torch %6.1f MB  "
                  "cleave %6.1f MB | torch saves %6.1f MB for backward, "
                  "cleave's whole step arena %6.1f MB" %
                  (model, row["torch"]["ms_per_step"],
                   row["cleave"]["ms_per_step"], row["time_ratio"],
                   row["torch"]["activation_mb"],
                   row["cleave"]["activation_mb"],
                   row["torch"]["planned_mb"], row["cleave"]["planned_mb"]),
                  flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()

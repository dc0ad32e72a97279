#!/usr/bin/python3
"""Loads a TinyLlama-shaped bf16 checkpoint in Hugging Face's sharded form at
tp 2 and measures the memory it takes (issue 36).

Usage: /usr/bin/python3 bench/sharded_checkpoint.py --cleave build/bin/cleave
           [--work /tmp/cleave-sharded] [--layers 22] [--d 2048] [--heads 32]
           [--kv-heads 4] [--mlp 5632] [--vocab 32000] [--seq 128]
           [--shard-gb 1.0] [--steps 2]

1. bench/gpt_onnx.py writes LLaMA's training graph at these shapes (its
   weights declared as sparse external data, never read here).
2. This script writes every float initializer as random bf16 values in
   shard files of about --shard-gb each, with model.safetensors.index.json,
   one tensor at a time (Hugging Face's layout).
3. `cleave compile --weights INDEX --tp 2 --optimizer sgd` under
   /usr/bin/time: the compile's peak RSS against the largest tensor (the
   compiler reads one tensor at a time).
4. Loading alone: `cleave launch -n 2` of this script's --load-worker, on
   each rank the Python package's session opened on the bundle (each rank
   reads its own weights) and nothing run; each rank's peak RSS less the
   interpreter's own before the load.
5. `cleave launch -n 2 /usr/bin/time cleave run BUNDLE --steps 1`, then
   --steps N: each rank's peak RSS (its weights, their gradients and
   the activations).
Prints one line per measurement and a table for docs/benchmarks.md.
"""
import argparse
import json
import os
import re
import struct
import subprocess
import sys
import time

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))


def peak_rss_mb(stderr: str):
    """The 'Maximum resident set size' lines /usr/bin/time -v printed, MB."""
    return [int(k) / 1024 for k in
            re.findall(r"Maximum resident set size \(kbytes\): (\d+)", stderr)]


def to_bf16_bits(a: np.ndarray) -> np.ndarray:
    """float32 to bfloat16 bits, rounding to nearest even."""
    u = a.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write_checkpoint(model_path, out_dir, shard_bytes, seed=0):
    """Random bf16 values for every float initializer of the model, in
    shards with an index; returns (total bytes, largest tensor's f32
    bytes)."""
    model = onnx.load(model_path, load_external_data=False)
    tensors = [(t.name, list(t.dims)) for t in model.graph.initializer
               if t.data_type == onnx.TensorProto.FLOAT]
    shards, current, size = [], [], 0
    for name, dims in tensors:
        n = 2 * int(np.prod(dims))
        if current and size + n > shard_bytes:
            shards.append(current)
            current, size = [], 0
        current.append((name, dims, n))
        size += n
    shards.append(current)
    rng = np.random.default_rng(seed)
    weight_map, total = {}, 0
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        header, offset = {}, 0
        for name, dims, n in shard:
            header[name] = {"dtype": "BF16", "shape": dims,
                            "data_offsets": [offset, offset + n]}
            offset += n
            weight_map[name] = fname
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        with open(os.path.join(out_dir, fname), "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text)
            for name, dims, n in shard:
                # Small values, as an initialised network's weights.
                values = rng.standard_normal(int(np.prod(dims)),
                                             dtype=np.float32) * 0.02
                f.write(to_bf16_bits(values).tobytes())
        total += offset
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total},
                   "weight_map": weight_map}, f)
    largest = max(4 * int(np.prod(d)) for _, d in tensors)
    return total, largest, len(shards)


def timed(cmd, **kw):
    start = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stdout[-2000:]}\n"
                 f"{r.stderr[-3000:]}")
    return r, time.time() - start


def load_worker(bundle):
    """One rank (under cleave launch): its peak RSS before and after the
    session has loaded its weights, MB."""
    import resource
    root = os.path.dirname(HERE)
    sys.path.insert(0, os.path.join(root, "build", "python"))
    from cleave._model import _open_session
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    session = _open_session(bundle, True, 600.0, "cpu")
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"before": before, "after": after}), flush=True)
    del session


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--load-worker":
        return load_worker(sys.argv[2])
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cleave", required=True)
    ap.add_argument("--work", default="/tmp/cleave-sharded")
    ap.add_argument("--layers", type=int, default=22)
    ap.add_argument("--d", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--mlp", type=int, default=5632)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--shard-gb", type=float, default=1.0)
    ap.add_argument("--steps", type=int, default=2)
    args = ap.parse_args()
    cleave = os.path.abspath(args.cleave)
    work = args.work
    ckpt = os.path.join(work, "checkpoint")
    os.makedirs(ckpt, exist_ok=True)
    model = os.path.join(work, "model.onnx")
    subprocess.run([sys.executable, os.path.join(HERE, "gpt_onnx.py"), model,
                    "--arch", "llama", "--layers", str(args.layers),
                    "--d", str(args.d), "--heads", str(args.heads),
                    "--kv-heads", str(args.kv_heads), "--mlp", str(args.mlp),
                    "--vocab", str(args.vocab), "--seq", str(args.seq),
                    "--batch", "1"], check=True, capture_output=True)
    start = time.time()
    total, largest, n_shards = write_checkpoint(
        model, ckpt, int(args.shard_gb * 2**30))
    print(f"checkpoint: {total / 2**30:.2f} GiB bf16 in {n_shards} shards "
          f"({time.time() - start:.0f} s); largest tensor "
          f"{largest / 2**20:.0f} MiB as f32")

    bundle = os.path.join(work, "bundle")
    index = os.path.join(ckpt, "model.safetensors.index.json")
    r, secs = timed(["/usr/bin/time", "-v", cleave, "compile", model,
                     "--weights", index, "--tp", "2", "--optimizer", "sgd",
                     "--freeze", "rotary", "-o", bundle])
    compile_rss = peak_rss_mb(r.stderr)[0]
    print(f"compile: {secs:.0f} s, peak RSS {compile_rss:.0f} MB")
    info = json.loads(subprocess.run([cleave, "inspect", "--json", bundle],
                                     capture_output=True, text=True,
                                     check=True).stdout)
    m = info["memory_per_rank"]
    share = m["parameters"] + m["buffers"]
    print(f"each rank's share: {share / 2**20:.0f} MiB of weights")

    inputs = os.path.join(work, "inputs")
    os.makedirs(inputs, exist_ok=True)
    rng = np.random.default_rng(1)
    ids = rng.integers(0, args.vocab, (1, args.seq), dtype=np.int64)
    graph = onnx.load(model, load_external_data=False).graph
    inits = {t.name for t in graph.initializer}
    for name in [i.name for i in graph.input if i.name not in inits]:
        np.save(os.path.join(inputs, name + ".npy"), ids)
    r, secs = timed([cleave, "launch", "-n", "2", sys.executable,
                     os.path.abspath(__file__), "--load-worker", bundle])
    loads = [json.loads(line) for line in r.stdout.splitlines()
             if line.startswith("{")]
    for k, x in enumerate(loads):
        print(f"rank load: peak RSS {x['after']:.0f} MB, "
              f"{x['after'] - x['before']:.0f} MB over the interpreter's "
              f"{x['before']:.0f} MB")
    rows = []
    for steps in (1, args.steps):
        r, secs = timed([cleave, "launch", "-n", "2", "/usr/bin/time", "-v",
                         cleave, "run", bundle, "--inputs", inputs,
                         "--steps", str(steps)])
        rss = peak_rss_mb(r.stderr)
        losses = re.findall(r"loss ([0-9.]+)", r.stdout)
        print(f"run --steps {steps}: {secs:.0f} s, per-rank peak RSS "
              f"{', '.join(f'{x:.0f}' for x in rss)} MB; losses {losses}")
        rows.append((steps, rss, secs))
    print()
    print("| measured | MB |")
    print("| --- | ---: |")
    print(f"| compile peak RSS (largest tensor {largest / 2**20:.0f} MiB f32) "
          f"| {compile_rss:.0f} |")
    print(f"| each rank's weights (inspect) | {share / 2**20:.0f} |")
    print("| rank peak RSS, loading only (over the interpreter's) | " +
          " / ".join(f"{x['after']:.0f} ({x['after'] - x['before']:.0f})"
                     for x in loads) + " |")
    for steps, rss, secs in rows:
        print(f"| rank peak RSS, --steps {steps} ({secs:.0f} s) | "
              f"{' / '.join(f'{x:.0f}' for x in rss)} |")


if __name__ == "__main__":
    main()

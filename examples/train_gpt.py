#!/usr/bin/python3
"""Trains the repo's GPT example from Python, split over 2 tensor-parallel
ranks with one line, on a text file's bytes, and saves a state_dict that
PyTorch loads back into the same module.

Usage: PYTHONPATH=build/python /usr/bin/python3 examples/train_gpt.py
           [--text FILE] [--steps 200] [--tp 2] [--out gpt_state.pt]

The ranks are threads of this process (no launcher needed). Under
`build/bin/cleave launch -n 2 examples/train_gpt.py --distributed` each rank
is a process of an MPI job instead.
"""
import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "zoo"))
from make_zoo import GPT2  # noqa: E402

import cleave  # noqa: E402


def batches(data, batch, seq, steps, seed):
    """Random windows of the text: input ids and next-byte labels."""
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        starts = rng.integers(0, len(data) - seq - 1, size=batch)
        window = np.stack([data[s:s + seq + 1] for s in starts]).astype(np.int64)
        yield {"input_ids": torch.from_numpy(window[:, :-1]),
               "labels": torch.from_numpy(window[:, 1:].copy())}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--out", default="gpt_state.pt")
    ap.add_argument("--distributed", action="store_true")
    args = ap.parse_args()

    torch.manual_seed(0)
    module = GPT2(vocab=256, ctx=args.seq, d=64, heads=4, layers=2)
    data = np.frombuffer(open(args.text, "rb").read(), dtype=np.uint8)
    example = next(batches(data, args.batch, args.seq, 1, seed=0))

    # The one line: the module's forward returns its loss (loss="auto").
    model = cleave.tensor_parallel(module, example, tp=args.tp,
                                   optimizer=cleave.AdamW(1e-3, eps=1e-6),
                                   distributed=args.distributed)
    print(model)
    losses = model.fit(batches(data, args.batch, args.seq, args.steps, seed=1),
                       steps=args.steps)
    print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f} over {len(losses)} steps")

    # Back into PyTorch: the trained weights, whole, under the module's names.
    state = model.state_dict()
    module.load_state_dict(state)
    with torch.no_grad():
        check = next(batches(data, args.batch, args.seq, 1, seed=2))
        torch_loss = module(**check).item()
    print(f"PyTorch's loss with the trained weights: {torch_loss:.4f}")
    if not args.distributed or int(os.environ.get("OMPI_COMM_WORLD_RANK", "0")) == 0:
        torch.save(state, args.out)
        print(f"saved {args.out} (torch.load it into GPT2(vocab=256, ctx={args.seq}))")


if __name__ == "__main__":
    main()

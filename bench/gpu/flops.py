"""Model FLOPs of a GPT training step and accelerator peaks, for MFU.

The count is PaLM's (appendix B), as nanoGPT and llm.c use it: 6 FLOPs per
parameter per token (forward 2, backward 4) plus the attention products,
12 * layers * d * seq per token. Peaks are dense bf16/fp32 tensor-core
figures from the vendor's data sheets.
"""

PEAKS = {  # (name fragment, bf16, fp32) in FLOP/s
    "H200": (989.4e12, 494.7e12),
    "H100": (989.4e12, 494.7e12),
    "A100": (312e12, 156e12),
}


def flops_per_step(layers, d, heads, seq, batch, params):
    del heads  # the attention term depends on d = heads * head_dim only
    per_token = 6 * params + 12 * layers * d * seq
    return per_token * batch * seq


def peak_flops(device_name, precision="bf16"):
    for fragment, (bf16, fp32) in PEAKS.items():
        if fragment in device_name:
            return bf16 if precision == "bf16" else fp32
    return None

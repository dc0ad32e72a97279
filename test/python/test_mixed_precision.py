"""precision="bf16" (cleave compile --precision bf16) against PyTorch's own
bf16 autocast.

bf16 rounds, so no run equals the float32 one: the oracle is PyTorch's own
distance. PyTorch trains each model 20 AdamW steps in float32 and again under
torch.autocast(bfloat16); Cleave's bf16 run, at tp 1, 2 and 4, must stay
within twice PyTorch's bf16-vs-f32 divergence of PyTorch's float32 losses,
and must differ from float32 (the precision is not silently ignored).
"""

import copy

import pytest
import torch

import cleave
import models

STEPS = 20


def adamw(module):
    return torch.optim.AdamW([p for p in module.parameters()
                              if p.requires_grad], lr=3e-3)


def torch_losses(module, batches, loss, bf16):
    module = copy.deepcopy(module)
    opt = adamw(module)
    out = []
    for batch in batches:
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            value = models.torch_loss(module, batch, loss)
        value.float().backward()
        opt.step()
        out.append(value.item())
    return out


def example_of(batch):
    return {k: v for k, v in batch.items() if k != "labels"}


@pytest.mark.parametrize("name,tps", [("decoder", [1, 2, 4]),
                                      ("convnet", [1, 2, 4])])
def test_bf16_stays_within_pytorch_autocasts_distance(name, tps):
    module, batch_fn, loss = models.build(name)
    gen = torch.Generator().manual_seed(5)
    batches = [batch_fn(gen) for _ in range(STEPS)]
    f32 = torch_losses(module, batches, loss, bf16=False)
    bf16 = torch_losses(module, batches, loss, bf16=True)
    theirs = max(abs(a - b) for a, b in zip(bf16, f32))
    assert theirs > 1e-4, "autocast changed nothing: the oracle is void"
    for tp in tps:
        model = cleave.tensor_parallel(
            copy.deepcopy(module), example_of(batches[0]), tp=tp, loss=loss,
            optimizer=cleave.AdamW(lr=3e-3), precision="bf16")
        assert model.inspect()["precision"] == "bf16"
        ours = [model.step(b) for b in batches]
        distance = max(abs(a - b) for a, b in zip(ours, f32))
        assert distance > 1e-5, f"tp {tp}: bf16 run equals f32"
        assert distance <= 2 * theirs, (
            f"tp {tp}: Cleave bf16 is {distance:.3g} from f32, PyTorch "
            f"autocast {theirs:.3g}")


def test_fp16_without_loss_scaling_is_refused():
    module, batch_fn, loss = models.build("decoder")
    batch = batch_fn(torch.Generator().manual_seed(1))
    with pytest.raises(cleave.Error, match="fp16 needs dynamic loss scaling"):
        cleave.tensor_parallel(module, example_of(batch), loss=loss,
                               precision="fp16")

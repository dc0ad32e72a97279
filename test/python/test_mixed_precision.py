"""precision="bf16" (cleave compile --precision bf16) against PyTorch's own
bf16 autocast.

bf16 rounds, so no run equals the float32 one: the oracle is PyTorch's own
distance. PyTorch trains each model (the GQA decoder, the zoo's GPT-2 and
LLaMA, a ConvNet, torchvision's ResNet-18) 20 AdamW steps in float32 and
again under torch.autocast(bfloat16); Cleave's bf16 run, at tp 1, 2 and 4,
must stay within twice PyTorch's bf16-vs-f32 divergence of PyTorch's
float32 losses, and must differ from float32 (the precision is not silently
ignored).
"""

import copy

import pytest
import torch

import cleave
import models

STEPS = 20


def adamw(module, lr=3e-3):
    return torch.optim.AdamW([p for p in module.parameters()
                              if p.requires_grad], lr=lr)


def torch_losses(module, batches, loss, bf16, lr=3e-3):
    module = copy.deepcopy(module)
    opt = adamw(module, lr)
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


def build(name):
    """(module, batch function, loss): a test model, a zoo transformer or
    torchvision's ResNet-18."""
    if name == "resnet18":
        import torchvision
        torch.manual_seed(0)
        module = torchvision.models.resnet18(num_classes=10)

        def batch(gen):
            return {"x": torch.randn(8, 3, 32, 32, generator=gen),
                    "labels": torch.randint(0, 10, (8,), generator=gen)}
        return module, batch, "cross_entropy"
    from test_tensor_parallel import build as zoo_or_test_model
    return zoo_or_test_model(name)


@pytest.mark.parametrize("name", ["decoder", "zoo_gpt2", "zoo_llama_gqa",
                                  "convnet", "resnet18"])
def test_bf16_stays_within_pytorch_autocasts_distance(name):
    from test_tensor_parallel import example_of as forward_inputs
    module, batch_fn, loss = build(name)
    # A ResNet at AdamW's 3e-3 on random data is chaotic (its f32 and bf16
    # runs end 2.1 apart, an oracle that checks nothing); at 1e-4 they end
    # 0.16 apart.
    lr = 1e-4 if name == "resnet18" else 3e-3
    gen = torch.Generator().manual_seed(5)
    batches = [batch_fn(gen) for _ in range(STEPS)]
    f32 = torch_losses(module, batches, loss, bf16=False, lr=lr)
    bf16 = torch_losses(module, batches, loss, bf16=True, lr=lr)
    theirs = max(abs(a - b) for a, b in zip(bf16, f32))
    assert theirs > 1e-4, "autocast changed nothing: the oracle is void"
    for tp in [1, 2, 4]:
        model = cleave.tensor_parallel(
            copy.deepcopy(module), forward_inputs(batches[0], loss), tp=tp,
            loss=loss, optimizer=cleave.AdamW(lr=lr), precision="bf16")
        assert model.inspect()["precision"] == "bf16"
        ours = [model.step(b) for b in batches]
        distance = max(abs(a - b) for a, b in zip(ours, f32))
        assert distance > 1e-5, f"tp {tp}: bf16 run equals f32"
        assert distance <= 2 * theirs, (
            f"tp {tp}: Cleave bf16 is {distance:.3g} from f32, PyTorch "
            f"autocast {theirs:.3g}")


@pytest.mark.parametrize("dp,tp,zero", [(2, 1, 0), (2, 2, 1), (2, 2, 2),
                                         (2, 1, 3)])
def test_bf16_on_data_parallel_meshes(dp, tp, zero):
    """bf16 on dp x tp meshes under ZeRO 0-3 (the gradients the step
    returns are bf16, summed and scattered over dp ranks as such): within
    twice autocast's distance from PyTorch's f32 run, the returned
    gradients at half their f32 bytes where a single product makes them,
    and on dp alone the gradients summed in buckets as f32's are (one more:
    a bucket holds one dtype)."""
    from test_tensor_parallel import example_of as forward_inputs
    module, batch_fn, loss = build("decoder")
    gen = torch.Generator().manual_seed(5)
    batches = [batch_fn(gen) for _ in range(10)]
    f32 = torch_losses(module, batches, loss, bf16=False)
    bf16 = torch_losses(module, batches, loss, bf16=True)
    theirs = max(abs(a - b) for a, b in zip(bf16, f32))
    sizes, sums = {}, {}
    for precision in ("f32", "bf16"):
        model = cleave.tensor_parallel(
            copy.deepcopy(module), forward_inputs(batches[0], loss), tp=tp,
            dp=dp, zero=zero, loss=loss, optimizer=cleave.AdamW(lr=3e-3),
            precision=precision)
        info = model.inspect()
        sizes[precision] = info["memory_per_rank"]["gradients"]
        sums[precision] = len(info["collectives"])
        if precision == "bf16":
            ours = [model.step(b) for b in batches]
    distance = max(abs(a - b) for a, b in zip(ours, f32))
    assert 1e-5 < distance <= 2 * theirs, (distance, theirs)
    assert sizes["bf16"] < 0.6 * sizes["f32"], sizes
    if tp == 1 and zero == 0:
        assert sums["bf16"] <= sums["f32"] + 1, sums


def test_fp16_loss_scaling_skips_overflowing_steps():
    """precision="fp16" scales the loss as GradScaler does (2^16 at first):
    a step whose fp16 gradients overflow changes nothing (parameters, AdamW's
    moments and its step count) and halves the scale, until the steps are
    finite; from there the run is PyTorch's f32 AdamW started at that batch,
    within twice autocast-bf16's distance from it (fp16 rounds finer)."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(),
                                 torch.nn.Linear(64, 8))
    gen = torch.Generator().manual_seed(1)
    # Inputs of magnitude ~50: 2^16 times their weight gradients overflow.
    batches = [{"input": 50 * torch.randn(32, 16, generator=gen),
                "labels": torch.randint(0, 8, (32,), generator=gen)}
               for _ in range(24)]
    model = cleave.tensor_parallel(
        copy.deepcopy(module), example_of(batches[0]), tp=2,
        loss="cross_entropy", optimizer=cleave.AdamW(lr=3e-3),
        precision="fp16")
    losses, skipped = [], []
    for batch in batches:
        before = model.state_dict()
        losses.append(model.step(batch))
        after = model.state_dict()
        skipped.append(all(torch.equal(before[k], after[k]) for k in before))
    k = skipped.index(False)
    assert k >= 1, "the first step should overflow at 2^16"
    assert not any(skipped[k:]), skipped

    def torch_run(bf16):
        m = copy.deepcopy(module)
        opt = adamw(m)
        out = []
        for batch in batches[k:]:
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                value = models.torch_loss(m, batch, "cross_entropy")
            value.float().backward()
            opt.step()
            out.append(value.item())
        return out
    f32, bf16 = torch_run(False), torch_run(True)
    theirs = max(abs(a - b) for a, b in zip(bf16, f32))
    ours = max(abs(a - b) for a, b in zip(losses[k:], f32))
    print("fp16: skipped", k, "distance", ours, "autocast bf16", theirs)
    assert ours <= 2 * theirs, (ours, theirs, k)


def test_frozen_base_is_held_in_bf16():
    """LoRA on a frozen Llama base under precision="bf16" at tp 2: every
    frozen weight a product reads is held in bf16 (no f32 master: the
    bundle, each rank's share and the weight files at half the bytes), the
    base comes back unchanged as its bf16 values, and the losses stay
    within twice PyTorch autocast's distance from float32 (both on the
    bf16-rounded base)."""
    from test_frozen import ADAMW, lora_llama, torch_steps, weight_file_bytes
    module, adapters, batch_fn = lora_llama("linear")
    # The base as a bf16 checkpoint holds it: what both sides start from.
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name not in adapters:
                p.copy_(p.to(torch.bfloat16).float())
    gen = torch.Generator().manual_seed(3)
    batches = [batch_fn(gen) for _ in range(10)]
    f32_losses, _ = torch_steps(copy.deepcopy(module), batches)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        bf16_losses, _ = torch_steps(copy.deepcopy(module), batches)
    theirs = max(abs(a - b) for a, b in zip(bf16_losses, f32_losses))
    assert theirs > 1e-5, "autocast changed nothing: the oracle is void"

    base = dict(module.named_parameters())
    model = cleave.tensor_parallel(copy.deepcopy(module), batches[0], tp=2,
                                   loss="auto", optimizer=cleave.AdamW(**ADAMW),
                                   precision="bf16")
    info = model.inspect()
    held = {b["name"]: b["dtype"] for b in info["buffers"]}
    products = [n for n in held if n.endswith("_proj.base_layer.weight")]
    assert len(products) == 7 * 2 and all(held[n] == "bf16" for n in products)
    # Norm scales are read by no product: f32. Adapters train: f32 masters.
    assert all(held[n] == "f32" for n in held if "norm" in n)
    assert all(p["dtype"] == "f32" for p in info["parameters"])
    size = {"f32": 4, "bf16": 2}
    rank_bytes = sum(size[r["dtype"]] * torch.Size(r["local_shape"]).numel()
                     for r in info["buffers"] + info["parameters"])
    assert weight_file_bytes(model.bundle) == [rank_bytes] * 2
    memory = info["memory_per_rank"]
    assert memory["buffers"] + sum(
        4 * torch.Size(p["local_shape"]).numel()
        for p in info["parameters"]) == rank_bytes

    ours = [model.step(b) for b in batches]
    distance = max(abs(a - b) for a, b in zip(ours, f32_losses))
    assert distance <= 2 * theirs, (distance, theirs)
    sd = model.state_dict()
    for name in products:
        assert torch.equal(sd[name], base[name].detach()), name

"""Data parallelism (issue 18, first part): dp ranks split the batch (the
weights whole, or split over tp on a dp x tp mesh), and one step equals
PyTorch's step on the global batch
(the loss's mean over the global batch, BatchNorm statistics over it as
SyncBatchNorm computes them, gradients summed over the ranks): loss and
every tensor of state_dict() after one SGD and one AdamW step within 1e-4,
and 5-step losses equal the one-process run's within 1e-5."""

import copy
import functools

import numpy as np
import pytest
import torch

import cleave
import models
from test_tensor_parallel import (OPTIMIZERS, build, compare_state,
                                  example_of, torch_step)

# Batches every dp below divides: 4 or 8 rows (the zoo's LMs take 2).
BATCHES = {"decoder": functools.partial(models.decoder_batch, b=4),
           "convnet": functools.partial(models.conv_batch, b=8),
           "frozen_mlp": functools.partial(models.mlp_batch, b=8),
           "encoder": functools.partial(models.encoder_batch, b=4)}
# (dp, tp) meshes.
CASES = [(n, mesh) for n in BATCHES for mesh in ((2, 1), (4, 1), (2, 2))] + \
    [(n, mesh) for n in ("zoo_gpt2", "zoo_llama_gqa")
     for mesh in ((2, 1), (2, 2))]


def prepare(name):
    module, batch_fn, loss = build(name)
    return module, BATCHES.get(name, batch_fn), loss


def step_like_pytorch(model, module, reference, batch, loss, optimizer):
    """One step of `model` against torch.optim's on `reference` (a copy of
    `module`); its loss."""
    theirs = OPTIMIZERS[optimizer][1]
    got = model.step(batch)
    want, state, grads = torch_step(reference, batch, loss, theirs)
    assert got == pytest.approx(want, rel=1e-4, abs=1e-5)
    if optimizer == "adamw":
        b64 = {k: (v.double() if v.is_floating_point() else v)
               for k, v in batch.items()}
        _, _, grads = torch_step(copy.deepcopy(module).double(), b64, loss,
                                 theirs)
    compare_state(model, state, grads, optimizer)
    return got


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
@pytest.mark.parametrize("name,mesh", CASES)
def test_one_step_on_the_global_batch(name, mesh, optimizer):
    dp, tp = mesh
    module, batch_fn, loss = prepare(name)
    batch = batch_fn(torch.Generator().manual_seed(21))
    ours = OPTIMIZERS[optimizer][0]
    reference = copy.deepcopy(module)
    model = cleave.tensor_parallel(module, example_of(batch, loss), dp=dp,
                                   tp=tp, loss=loss, optimizer=ours)
    assert model.inspect()["mesh"] == ({"dp": dp, "tp": tp} if tp > 1
                                       else {"dp": dp})
    step_like_pytorch(model, module, reference, batch, loss, optimizer)


# (model, dp, tp): dp alone, and the 2x2 mesh. (The frozen MLP's head has
# 5 classes: on 2x2 its weight's only dimension dp divides is tp's, so its
# state cannot be split over dp as well; UNEVEN below.)
ZERO_CASES = [(n, dp, 1) for n in BATCHES for dp in (2, 4)] + \
    [("zoo_gpt2", 2, 1), ("zoo_llama_gqa", 2, 1)] + \
    [(n, 2, 2) for n in list(BATCHES) + ["zoo_gpt2", "zoo_llama_gqa"]]
UNEVEN = {("frozen_mlp", 2)}


@pytest.mark.parametrize("zero", [1, 2, 3])
@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
@pytest.mark.parametrize("name,dp,tp", ZERO_CASES)
def test_zero_splits_the_optimizer_state(name, dp, tp, optimizer, zero):
    tolerance = 0.4 if (name, tp) in UNEVEN else 0.1
    """ZeRO stage 1: the same step as PyTorch's, with each rank holding
    1/dp of the optimizer state; stage 2: and 1/dp of the gradients; stage
    3: and 1/dp of the parameters."""
    module, batch_fn, loss = prepare(name)
    batch = batch_fn(torch.Generator().manual_seed(26))
    ours = OPTIMIZERS[optimizer][0]
    reference = copy.deepcopy(module)
    plain = cleave.tensor_parallel(copy.deepcopy(module),
                                   example_of(batch, loss), dp=dp, tp=tp,
                                   loss=loss, optimizer=ours)
    model = cleave.tensor_parallel(module, example_of(batch, loss), dp=dp,
                                   tp=tp, zero=zero, loss=loss, optimizer=ours)
    before = plain.inspect()["memory_per_rank"]
    after = model.inspect()["memory_per_rank"]
    whole, split = before["optimizer_state"], after["optimizer_state"]
    assert abs(split * dp - whole) <= tolerance * whole, (split, whole)
    whole, split = before["parameters"], after["parameters"]
    if zero == 3:
        assert abs(split * dp - whole) <= tolerance * whole, (split, whole)
    else:
        assert split == whole
    whole, split = before["gradients"], after["gradients"]
    if zero >= 2:
        assert abs(split * dp - whole) <= tolerance * whole, (split, whole)
        # Reduce-scattered, not all-reduced (a tensor no dimension of which
        # dp divides stays whole, and is all-reduced).
        scattered = sum(c["bytes"] for c in model.inspect()["collectives"]
                        if c["kind"] == "reduce_scatter")
        assert scattered >= (1 - tolerance) * whole, (scattered, whole)
    else:
        assert split == whole
    got = step_like_pytorch(model, module, reference, batch, loss, optimizer)
    # And the steps after it, where the split state is read back: as the
    # run with the state whole.
    assert plain.step(batch) == pytest.approx(got, rel=1e-6)
    for _ in range(3):
        assert model.step(batch) == pytest.approx(plain.step(batch), rel=1e-5)


@pytest.mark.parametrize("name", ["decoder", "convnet"])
def test_five_steps_equal_one_process(name):
    runs = []
    for dp, tp in ((1, 1), (2, 1), (4, 1), (2, 2), (1, 4)):
        module, batch_fn, loss = prepare(name)
        gen = torch.Generator().manual_seed(22)
        batches = [batch_fn(gen) for _ in range(5)]
        model = cleave.tensor_parallel(module, example_of(batches[0], loss),
                                       dp=dp, tp=tp, loss=loss,
                                       optimizer=cleave.AdamW(lr=3e-3))
        runs.append([model.step(b) for b in batches])
    for run in runs[1:]:
        np.testing.assert_allclose(run, runs[0], rtol=1e-5, atol=1e-5)


def test_gradients_are_summed_once_per_step():
    """GPT-2 at dp = 2: the only large collective is the gradients' sum."""
    module, batch_fn, loss = build("zoo_gpt2")
    batch = batch_fn(torch.Generator().manual_seed(23))
    model = cleave.tensor_parallel(module, example_of(batch, loss), dp=2,
                                   loss=loss)
    collectives = model.inspect()["collectives"]
    assert all(c["kind"] == "all_reduce" for c in collectives)
    params = sum(p.numel() for p in module.parameters()) * 4
    big = [c for c in collectives if c["bytes"] > 1024]
    assert sum(c["bytes"] for c in big) == params


def test_the_offline_path_on_a_mesh(tmp_path):
    module, batch_fn, loss = prepare("frozen_mlp")
    gen = torch.Generator().manual_seed(25)
    batches = [batch_fn(gen) for _ in range(3)]
    bundle = cleave.compile(module, batches[0], output=str(tmp_path / "b"),
                            loss=loss, optimizer=cleave.SGD(lr=0.1), dp=2,
                            tp=2)
    assert (bundle.mesh, bundle.ranks, bundle.tp) == ({"dp": 2, "tp": 2}, 4, 2)
    losses = bundle.train(3, inputs=batches, progress=False, ranks=4)
    model = cleave.tensor_parallel(module, batches[0], loss=loss,
                                   optimizer=cleave.SGD(lr=0.1))
    np.testing.assert_allclose(losses, [model.step(b) for b in batches],
                               rtol=1e-5)


class SharedPositions(torch.nn.Module):
    """position_ids [1, T] broadcast over the batch, as HF models take them:
    an input that is not split (its first dimension is not the batch's)."""

    def __init__(self):
        super().__init__()
        self.tok = torch.nn.Embedding(29, 16)
        self.pos = torch.nn.Embedding(6, 16)
        self.head = torch.nn.Linear(16, 29)

    def forward(self, input_ids, position_ids):
        return self.head(torch.tanh(self.tok(input_ids) +
                                    self.pos(position_ids)))


@pytest.mark.parametrize("dp", [2, 4])
def test_inputs_without_the_batch_stay_whole(dp):
    torch.manual_seed(5)
    module = SharedPositions()
    gen = torch.Generator().manual_seed(27)
    batch = {"input_ids": torch.randint(0, 29, (4, 6), generator=gen),
             "position_ids": torch.arange(6).unsqueeze(0),
             "labels": torch.randint(0, 29, (4, 6), generator=gen)}
    reference = copy.deepcopy(module)
    model = cleave.tensor_parallel(module, batch, dp=dp, loss="cross_entropy",
                                   optimizer=OPTIMIZERS["sgd"][0])
    step_like_pytorch(model, module, reference, batch, "cross_entropy", "sgd")


def test_a_batch_dp_does_not_divide_is_an_error():
    module, batch_fn, loss = models.build("frozen_mlp")
    batch = batch_fn(torch.Generator().manual_seed(24))  # 7 rows
    with pytest.raises(cleave.Error, match="batch of 7 rows does not divide "
                                           "over dp = 2"):
        cleave.tensor_parallel(module, example_of(batch, loss), dp=2,
                               loss=loss)


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
@pytest.mark.parametrize("name", list(BATCHES) + ["zoo_llama_gqa"])
def test_the_compiler_chooses_the_mesh(name, optimizer):
    """devices=4: whichever mesh the compiler picks, the step is PyTorch's,
    and the mesh is the first candidate of its record."""
    module, batch_fn, loss = prepare(name)
    batch = batch_fn(torch.Generator().manual_seed(31))
    reference = copy.deepcopy(module)
    model = cleave.tensor_parallel(module, example_of(batch, loss), devices=4,
                                   loss=loss,
                                   optimizer=OPTIMIZERS[optimizer][0])
    report = model.inspect()
    chosen = report["mesh_choice"]["candidates"][0]
    assert chosen["chosen"] and "refused" not in chosen
    assert chosen["dp"] * chosen["tp"] == 4
    assert model.mesh == {k: v for k, v in (("dp", chosen["dp"]),
                                            ("tp", chosen["tp"]))
                          if v > 1 or (k == "tp" and chosen["dp"] == 1)}
    step_like_pytorch(model, module, reference, batch, loss, optimizer)


def test_a_memory_budget_moves_the_choice(tmp_path):
    # The decoder with AdamW: dp 4 is fastest and needs the most memory.
    module, batch_fn, loss = prepare("decoder")
    example = example_of(batch_fn(torch.Generator().manual_seed(32)), loss)
    adamw = OPTIMIZERS["adamw"][0]
    free = cleave.compile(module, example, output=tmp_path / "free", loss=loss,
                          devices=4, plan_only=True, optimizer=adamw)
    first = free.inspect()["mesh_choice"]["candidates"][0]
    budget = first["memory_bytes"] - 1
    assert any(c["memory_bytes"] <= budget and "refused" not in c
               for c in free.inspect()["mesh_choice"]["candidates"])
    tight = cleave.compile(module, example, output=tmp_path / "tight",
                           loss=loss, devices=4, memory_per_device=budget,
                           plan_only=True, optimizer=adamw)
    now = tight.inspect()["mesh_choice"]["candidates"][0]
    # Another mesh, ZeRO stage or recomputation.
    assert (now["dp"], now["tp"], now["zero"], now["recompute"]) != \
        (first["dp"], first["tp"], first["zero"], first["recompute"])
    assert now["memory_bytes"] <= budget
    with pytest.raises(cleave.Error, match="no mesh of 4 devices can train "
                                           "this model: dp=.*per device, over"):
        cleave.compile(module, example, output=tmp_path / "none", loss=loss,
                       devices=4, memory_per_device=100, plan_only=True,
                       optimizer=adamw)


@pytest.mark.parametrize("options,message", [
    ({"devices": 0}, "devices must be a positive integer, not 0"),
    ({"devices": 4, "tp": 2}, "give either devices"),
    ({"devices": 2, "memory_per_device": "lots"},
     "memory_per_device must be a positive integer"),
])
def test_mesh_choice_errors(options, message):
    module, batch_fn, loss = prepare("frozen_mlp")
    example = example_of(batch_fn(torch.Generator().manual_seed(33)), loss)
    with pytest.raises(cleave.Error, match=message):
        cleave.tensor_parallel(module, example, loss=loss, **options)

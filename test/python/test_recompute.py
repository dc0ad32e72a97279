"""Recomputation chosen by the compiler (issue 38): `recompute=` and a
memory budget for the mesh given (`memory_per_device=` without
`devices=`). What the step keeps changes, not what it computes: one SGD and
one AdamW step equal PyTorch's."""

import copy

import pytest
import torch

import cleave
from test_data_parallel import prepare, step_like_pytorch
from test_tensor_parallel import OPTIMIZERS, example_of


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
@pytest.mark.parametrize("policy", ["selective", "full"])
def test_a_policy_trains_as_pytorch(policy, optimizer):
    module, batch_fn, loss = prepare("zoo_gpt2")
    batch = batch_fn(torch.Generator().manual_seed(41))
    reference = copy.deepcopy(module)
    model = cleave.tensor_parallel(module, example_of(batch, loss), tp=2,
                                   loss=loss, recompute=policy,
                                   optimizer=OPTIMIZERS[optimizer][0])
    made = model.inspect()["recompute"]
    assert made["policy"] == policy and made["ops"] > 0
    step_like_pytorch(model, module, reference, batch, loss, optimizer)


def test_a_budget_under_the_plain_step_recomputes(tmp_path):
    module, batch_fn, loss = prepare("zoo_gpt2")
    batch = batch_fn(torch.Generator().manual_seed(42))
    example = example_of(batch, loss)
    adamw = OPTIMIZERS["adamw"][0]
    roomy = cleave.compile(module, example, output=tmp_path / "roomy", tp=2,
                           loss=loss, memory_per_device=10**15,
                           plan_only=True, optimizer=adamw)
    need = roomy.inspect()["mesh_choice"]["candidates"][0]
    assert need["recompute"] == "none"
    reference = copy.deepcopy(module)
    model = cleave.tensor_parallel(module, example, tp=2, loss=loss,
                                   memory_per_device=need["memory_bytes"] - 1,
                                   optimizer=adamw)
    report = model.inspect()
    chosen = report["mesh_choice"]["candidates"][0]
    assert chosen["recompute"] in ("selective", "full")
    assert chosen["memory_bytes"] < need["memory_bytes"]
    assert report["recompute"]["policy"] == chosen["recompute"]
    assert report["memory_per_rank"]["total"] == chosen["memory_bytes"]
    step_like_pytorch(model, module, reference, batch, loss, "adamw")
    with pytest.raises(cleave.Error, match="does not fit 100 B per device "
                                           "with any recomputation"):
        cleave.compile(module, example, output=tmp_path / "none", tp=2,
                       loss=loss, memory_per_device=100, plan_only=True,
                       optimizer=adamw)

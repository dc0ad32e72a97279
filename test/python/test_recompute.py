"""Recomputation and sequence parallelism chosen by the compiler (issue
38): `recompute=`, `sequence_parallel=` and a memory budget for the mesh
given (`memory_per_device=` without `devices=`). What the step keeps
changes, not what it computes: one SGD and one AdamW step equal
PyTorch's."""

import copy

import pytest
import torch

import cleave
from test_data_parallel import prepare, step_like_pytorch
from test_tensor_parallel import OPTIMIZERS, example_of


def one_step_at_tp2(name, seed, optimizer, **options):
    """One step of `name` at tp 2 with `options` against PyTorch's; the
    Model's inspect()."""
    module, batch_fn, loss = prepare(name)
    batch = batch_fn(torch.Generator().manual_seed(seed))
    reference = copy.deepcopy(module)
    model = cleave.tensor_parallel(module, example_of(batch, loss), tp=2,
                                   loss=loss, optimizer=OPTIMIZERS[optimizer][0],
                                   **options)
    step_like_pytorch(model, module, reference, batch, loss, optimizer)
    return model.inspect()


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
@pytest.mark.parametrize("policy", ["selective", "full"])
def test_a_policy_trains_as_pytorch(policy, optimizer):
    made = one_step_at_tp2("zoo_gpt2", 41, optimizer, recompute=policy)["recompute"]
    assert made["policy"] == policy and made["ops"] > 0


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
    assert chosen["recompute"] in ("selective", "full") or \
        chosen["sequence_parallel"]
    assert chosen["memory_bytes"] < need["memory_bytes"]
    assert report["recompute"]["policy"] == chosen["recompute"]
    assert report["memory_per_rank"]["total"] == chosen["memory_bytes"]
    step_like_pytorch(model, module, reference, batch, loss, "adamw")
    with pytest.raises(cleave.Error, match="does not fit 100 B per device "
                                           "with any recomputation"):
        cleave.compile(module, example, output=tmp_path / "none", tp=2,
                       loss=loss, memory_per_device=100, plan_only=True,
                       optimizer=adamw)


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_sequence_parallel_trains_as_pytorch(optimizer):
    regions = one_step_at_tp2("zoo_llama_gqa", 43, optimizer,
                              sequence_parallel=True)["sequence_parallel"]
    assert regions["on"] and regions["regions"]


def test_sequence_parallel_values():
    module, batch_fn, loss = prepare("zoo_gpt2")
    example = example_of(batch_fn(torch.Generator().manual_seed(44)), loss)
    with pytest.raises(cleave.Error, match="sequence_parallel must be True, "
                                           "False or 'auto', not 'yes'"):
        cleave.tensor_parallel(module, example, tp=2, loss=loss,
                               sequence_parallel="yes")
    with pytest.raises(cleave.Error, match="give tp=2 or more"):
        cleave.tensor_parallel(module, example, tp=1, loss=loss,
                               sequence_parallel=True)

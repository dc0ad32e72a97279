"""The training run users launch (issue 39): a run that survives a bad batch,
and capture that cannot be silently wrong."""

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import cleave
import models
from test_data_parallel import step_like_pytorch
from test_tensor_parallel import OPTIMIZERS, example_of


class ReadsValues(nn.Module):
    """A forward that reads tensor values into Python, in one of the ways
    real forwards do."""

    def __init__(self, read):
        super().__init__()
        self.read = read
        self.l1 = nn.Linear(8, 16)
        self.l2 = nn.Linear(16, 5)

    def forward(self, x, labels):
        h = self.l1(x)
        if self.read == "branch":
            if h.sum() > 0:
                h = h * 2
        elif self.read == "parameter":
            h = h * float(self.l1.bias.abs().max())
        elif self.read == "loop":
            for _ in range(int(labels.max())):
                h = h + 1
        else:  # values fixed by the compiled shapes: nothing to freeze
            h = h / torch.tensor(int(x.shape[1])).float().sqrt().item()
            if torch.ones_like(h).sum() > 0:
                h = h + 1
        return F.cross_entropy(self.l2(torch.relu(h)), labels)


def reads_batch(seed=4):
    gen = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(6, 8, generator=gen),
            "labels": torch.randint(0, 5, (6,), generator=gen)}


@pytest.mark.parametrize("read,what", [
    ("branch", r"branches on a tensor's value at test_training_run.py:\d+ "
               r"\(`if h.sum\(\) > 0:`\)"),
    ("parameter", r"takes a Python float from a tensor at "
                  r"test_training_run.py:\d+ \(`h = h \* float"),
    ("loop", r"takes a Python int from a tensor at test_training_run.py")])
def test_a_value_the_trace_would_freeze_is_refused(read, what):
    # The case: PyTorch trained 6.926092 on a batch that took the
    # other branch, the frozen trace 6.957781.
    with pytest.raises(cleave.Error, match=r"ReadsValues.forward " + what):
        cleave.tensor_parallel(ReadsValues(read), reads_batch(), tp=2)
    # The patched tensor methods are put back.
    assert bool(torch.ones(1)) and torch.tensor(3).item() == 3


def test_values_fixed_by_the_shapes_train_as_pytorch():
    torch.manual_seed(7)
    module = ReadsValues("shape")
    reference = copy.deepcopy(module)
    batch = reads_batch()
    model = cleave.tensor_parallel(module, dict(batch), tp=2,
                                   optimizer=OPTIMIZERS["sgd"][0])
    step_like_pytorch(model, module, reference, batch, "auto", "sgd")


@pytest.mark.parametrize("mesh", [{"tp": 2}, {"dp": 2}])
def test_a_refused_batch_leaves_the_model_as_it_was(mesh):
    """A label past the vocabulary is refused by the loss's kernel on some
    rank mid-step; the weights and the momentum stay as they were, and the
    run goes on as PyTorch's, which never saw that batch."""
    module, batch_fn, loss = models.build("decoder")
    reference = copy.deepcopy(module)
    batch = batch_fn(torch.Generator().manual_seed(3))
    model = cleave.tensor_parallel(module, example_of(batch, loss), loss=loss,
                                   optimizer=OPTIMIZERS["sgd"][0], **mesh)
    opt = OPTIMIZERS["sgd"][1](reference)
    want = []
    for _ in range(2):
        opt.zero_grad()
        value = models.torch_loss(reference, batch, loss)
        value.backward()
        opt.step()
        want.append(value.item())

    got = [model.step(batch)]
    before = {k: np.array(v) for k, v in model.state_dict().items()}
    bad = dict(batch, labels=batch["labels"].clone())
    bad["labels"][1, 3] = 61  # one past the vocabulary
    with pytest.raises(cleave.Error, match="61"):
        model.step(bad)
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(np.array(value), before[name], name)
    assert model.steps_done == 1
    got.append(model.step(batch))
    assert got == pytest.approx(want, rel=1e-4, abs=1e-5)
    state = model.state_dict()
    for name, value in reference.state_dict().items():
        np.testing.assert_allclose(np.array(state[name]), value.numpy(),
                                   rtol=1e-4, atol=1e-5, err_msg=name)


def test_a_torch_optimizer_is_taken_with_its_hyperparameters():
    module, batch_fn, loss = models.build("decoder")
    reference = copy.deepcopy(module)
    batch = batch_fn(torch.Generator().manual_seed(5))
    theirs = torch.optim.AdamW(module.parameters(), lr=1e-3, betas=(0.9, 0.99),
                               weight_decay=0.1)  # OPTIMIZERS["adamw"]'s
    model = cleave.tensor_parallel(module, example_of(batch, loss), tp=2,
                                   loss=loss, optimizer=theirs)
    step_like_pytorch(model, module, reference, batch, loss, "adamw")


@pytest.mark.parametrize("make,match", [
    (lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9,
                               nesterov=True), "SGD with nesterov"),
    (lambda m: torch.optim.Adam(m.parameters(), weight_decay=0.01),
     "Adam with weight_decay"),
    (lambda m: torch.optim.AdamW([
        {"params": [p for n, p in m.named_parameters() if "bias" in n],
         "weight_decay": 0.0},
        {"params": [p for n, p in m.named_parameters() if "bias" not in n]}]),
     "groups differ in weight_decay"),
    (lambda m: torch.optim.SGD(list(m.parameters())[1:], lr=0.1),
     "does not hold parameter"),
    (lambda m: torch.optim.RMSprop(m.parameters()), "RMSprop has no Cleave"),
])
def test_what_a_torch_optimizer_would_do_otherwise_is_refused(make, match):
    module, batch_fn, loss = models.build("decoder")
    batch = batch_fn(torch.Generator().manual_seed(5))
    with pytest.raises(cleave.Error, match=match):
        cleave.tensor_parallel(module, example_of(batch, loss), tp=2,
                               loss=loss, optimizer=make(module))


def test_calls_of_other_libraries_get_the_call_cleave_takes():
    module, batch_fn, loss = models.build("decoder")
    with pytest.raises(cleave.ArgumentTypeError,
                       match=r"tensor_parallel library's call.*tp=2"):
        cleave.tensor_parallel(module, ["cuda:0", "cuda:1"])
    batch = batch_fn(torch.Generator().manual_seed(5))
    model = cleave.tensor_parallel(module, example_of(batch, loss), loss=loss)
    longer = batch_fn(torch.Generator().manual_seed(5), t=16)
    with pytest.raises(cleave.ArgumentError,
                       match=r"compiled for \[2, 8\].*drop_last"):
        model.step(longer)
    assert model.steps_done == 0

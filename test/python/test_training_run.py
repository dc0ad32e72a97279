"""The training run users launch (issue 39): a run that survives a bad batch,
and capture that cannot be silently wrong."""

import copy
import math

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
        elif self.read == "random":  # stochastic depth, as timm writes it
            if torch.rand(1).item() < 0.5:
                h = h * 0
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
    ("loop", r"takes a Python int from a tensor at test_training_run.py"),
    ("random", r"takes a Python number from a tensor at "
               r"test_training_run.py:\d+ \(`if torch.rand")])
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
                       match=r"compiled for \(input_ids \[2, 8\].*"
                       r"example_inputs as a list.*drop_last"):
        model.step(longer)
    assert model.steps_done == 0


# -- learning-rate schedules and gradient clipping ---------------------------

def hf_factor(name, warmup, total, lr_init):
    """transformers.get_scheduler's lambda (optimization.py, as published),
    for LambdaLR: the factor of the base rate at update k."""
    def factor(k):
        if name == "constant":
            return 1.0
        if k < warmup:
            return k / max(1, warmup)
        if name == "constant_with_warmup":
            return 1.0
        progress = (k - warmup) / max(1, total - warmup)
        if name == "linear":
            return max(0.0, (total - k) / max(1, total - warmup))
        if name == "cosine":
            return max(0.0, 0.5 * (1.0 + math.cos(math.pi * 0.5 * 2.0 *
                                                  progress)))
        if name == "cosine_with_restarts":
            if progress >= 1.0:
                return 0.0
            return max(0.0, 0.5 * (1.0 + math.cos(math.pi * (progress %
                                                             1.0))))
        if name == "polynomial":
            lr_end = 1e-7
            if k > total:
                return lr_end / lr_init
            remaining = 1 - (k - warmup) / (total - warmup)
            return ((lr_init - lr_end) * remaining + lr_end) / lr_init
        if name == "inverse_sqrt":
            timescale = warmup or 10_000
            return 1.0 / math.sqrt((k + timescale - warmup) / timescale)
        raise KeyError(name)
    return factor


def train_like_pytorch(model, reference, batches, loss, clip=None,
                       schedule=None, set_lr=None, optimizer="sgd"):
    """Steps `model` on `batches` beside OPTIMIZERS' torch `optimizer` on
    `reference`, with LambdaLR `schedule` and clip_grad_norm_ /
    clip_grad_value_ (`clip`); `set_lr` = (step, lr) changes the base rate
    before that step. Checks each step's loss, rate and gradient norm."""
    opt = OPTIMIZERS[optimizer][1](reference)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule) \
        if schedule else None
    params = [p for p in reference.parameters() if p.requires_grad]
    for k, batch in enumerate(batches):
        if set_lr and k == set_lr[0]:
            model.set_lr(set_lr[1])
            sched.base_lrs = [set_lr[1]]
            for group in opt.param_groups:  # what LambdaLR's next step sets
                group["lr"] = set_lr[1] * schedule(k)
        opt.zero_grad()
        value = models.torch_loss(reference, batch, loss)
        value.backward()
        norm = None
        if clip and clip[0] == "value":
            torch.nn.utils.clip_grad_value_(params, clip[1])
        elif clip:
            norm = torch.nn.utils.clip_grad_norm_(params, clip[1]).item()
        rate = opt.param_groups[0]["lr"]
        opt.step()
        if sched:
            sched.step()
        got = model.step(batch)
        assert got == pytest.approx(value.item(), rel=1e-4, abs=1e-5), k
        assert model.metrics["lr"] == pytest.approx(rate, rel=1e-6), k
        if norm is not None:
            assert norm > clip[1]  # the clipping acts
            assert model.metrics["grad_norm"] == pytest.approx(norm,
                                                               rel=1e-4), k
    state = model.state_dict()
    for name, value in reference.state_dict().items():
        np.testing.assert_allclose(np.array(state[name]), value.numpy(),
                                   rtol=1e-4, atol=1e-5, err_msg=name)


def decoder_batches(n, seed=11):
    gen = torch.Generator().manual_seed(seed)
    return [models.decoder_batch(gen) for _ in range(n)]


@pytest.mark.parametrize("name", ["constant", "constant_with_warmup",
                                  "linear", "cosine", "cosine_with_restarts",
                                  "polynomial", "inverse_sqrt"])
def test_a_schedule_is_hugging_faces(name):
    """Warmup 2 and 5 total updates, run for 6: past the end, where
    polynomial holds its end rate and the restarts' cosine is 0."""
    module, _, loss = models.build("decoder")
    reference = copy.deepcopy(module)
    batches = decoder_batches(6)
    model = cleave.tensor_parallel(
        module, example_of(batches[0], loss), tp=2, loss=loss,
        optimizer=OPTIMIZERS["sgd"][0], lr_scheduler=name, warmup_steps=2,
        total_steps=5)
    train_like_pytorch(model, reference, batches, loss,
                       schedule=hf_factor(name, 2, 5, 0.1))


@pytest.mark.parametrize("mesh", [{"tp": 2}, {"dp": 2, "zero": 2},
                                  {"dp": 2, "tp": 2}])
def test_the_global_norm_is_one_devices(mesh):
    """Each shard's squares counted once, replicated gradients not twice:
    the norm and the clipped step are PyTorch's on every mesh."""
    module, _, loss = models.build("decoder")
    reference = copy.deepcopy(module)
    batches = decoder_batches(3)
    model = cleave.tensor_parallel(
        module, example_of(batches[0], loss), loss=loss,
        optimizer=OPTIMIZERS["sgd"][0], max_grad_norm=0.5, **mesh)
    train_like_pytorch(model, reference, batches, loss, clip=("norm", 0.5))


def test_clipping_by_value():
    module, _, loss = models.build("decoder")
    reference = copy.deepcopy(module)
    batches = decoder_batches(2)
    model = cleave.tensor_parallel(
        module, example_of(batches[0], loss), tp=2, loss=loss,
        optimizer=OPTIMIZERS["sgd"][0], clip_grad_value=0.01)
    train_like_pytorch(model, reference, batches, loss, clip=("value", 0.01))


def test_a_new_rate_needs_no_compile_and_resumes_exactly(tmp_path):
    module, _, loss = models.build("decoder")
    reference = copy.deepcopy(module)
    batches = decoder_batches(4)
    schedule = hf_factor("linear", 1, 4, 0.1)
    model = cleave.tensor_parallel(
        module, example_of(batches[0], loss), tp=2, loss=loss,
        optimizer=OPTIMIZERS["sgd"][0], lr_scheduler="linear",
        warmup_steps=1, total_steps=4)
    train_like_pytorch(model, reference, batches[:2], loss, schedule=schedule,
                       set_lr=(1, 0.05))
    assert model.lr == pytest.approx(0.05)
    model.save_checkpoint(str(tmp_path / "ckpt"))
    rest = [model.step(b) for b in batches[2:]]
    resumed = cleave.Model.resume(str(tmp_path / "ckpt"))
    assert resumed.lr == pytest.approx(0.05)
    assert [resumed.step(b) for b in batches[2:]] == rest
    with pytest.raises(cleave.Error, match="lr must be > 0"):
        model.set_lr(-1.0)


@pytest.mark.parametrize("options,match", [
    ({"lr_scheduler": "warmup_cosine"}, "lr_scheduler must be"),
    ({"lr_scheduler": "linear"}, "give total_steps"),
    ({"lr_scheduler": "polynomial", "warmup_steps": 5, "total_steps": 5},
     "more total steps than warmup"),
    ({"warmup_steps": -1}, "warmup_steps must be"),
    ({"max_grad_norm": 0.0}, "max_grad_norm must be > 0"),
    ({"clip_grad_value": float("nan")}, "clip_grad_value must be"),
])
def test_bad_schedule_and_clipping_options_are_refused(options, match):
    module, _, loss = models.build("decoder")
    batch = decoder_batches(1)[0]
    with pytest.raises(cleave.Error, match=match):
        cleave.tensor_parallel(module, example_of(batch, loss), loss=loss,
                               **options)


# -- non-finite steps ---------------------------------------------------------

class Rooted(nn.Module):
    """A loss that is finite while a gradient is not: d sqrt(w x) / dw =
    x / (2 sqrt(w x)) is 0 / 0 where x is 0."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.full((4, 6), 0.5))
        self.head = nn.Linear(6, 3)

    def forward(self, x, labels):
        h = (x[:, :, None] * self.w).sqrt().sum(1)
        return F.cross_entropy(self.head(h), labels)


def rooted_batches():
    gen = torch.Generator().manual_seed(2)
    good = {"x": torch.rand(5, 4, generator=gen) + 0.1,
            "labels": torch.randint(0, 3, (5,), generator=gen)}
    zero = dict(good, x=good["x"].clone())
    zero["x"][2, 1] = 0.0  # a NaN gradient of w, a finite loss
    inf = dict(good, x=good["x"].clone())
    inf["x"][0, 0] = float("inf")  # an infinite loss
    return good, zero, inf


@pytest.mark.parametrize("tp", [1, 2])
def test_a_nonfinite_step_stops_and_changes_nothing(tp):
    good, zero, inf = rooted_batches()
    torch.manual_seed(3)
    module = Rooted()
    reference = copy.deepcopy(module)
    model = cleave.tensor_parallel(module, dict(good), tp=tp,
                                   optimizer=OPTIMIZERS["adamw"][0],
                                   on_nonfinite="stop")
    before = {k: np.array(v) for k, v in model.state_dict().items()}
    with pytest.raises(cleave.Error,
                       match=r"step 0: the gradient of 'w' holds NaN; the "
                             r"update was not applied"):
        model.step(zero)
    with pytest.raises(cleave.Error, match=r"step 1: the loss is (inf|NaN)"):
        model.step(inf)
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(np.array(value), before[name], name)
    # AdamW's step count skips them: the next update is PyTorch's first.
    step_like_pytorch(model, module, reference, good, "auto", "adamw")


def test_skip_goes_on_and_ignore_applies():
    good, zero, _ = rooted_batches()
    torch.manual_seed(3)
    module = Rooted()
    reference = copy.deepcopy(module)
    skip = cleave.tensor_parallel(module, dict(good), tp=2,
                                  on_nonfinite="skip",
                                  optimizer=OPTIMIZERS["adamw"][0])
    before = {k: np.array(v) for k, v in skip.state_dict().items()}
    assert np.isfinite(skip.step(zero))
    assert skip.metrics["nonfinite"] == 1
    for name, value in skip.state_dict().items():
        np.testing.assert_array_equal(np.array(value), before[name], name)
    # The next step is that of a run that never saw the batch.
    step_like_pytorch(skip, module, reference, good, "auto", "adamw")
    assert skip.metrics["nonfinite"] == 0
    ignore = cleave.tensor_parallel(module, dict(good), on_nonfinite="ignore",
                                    optimizer=OPTIMIZERS["sgd"][0])
    ignore.step(zero)  # as plain PyTorch: the NaN reaches the weights
    assert np.isnan(np.array(ignore.state_dict()["w"])).any()
    with pytest.raises(cleave.Error, match="on_nonfinite must be"):
        cleave.tensor_parallel(module, dict(good), on_nonfinite="raise")


# -- gradient accumulation ----------------------------------------------------

def gpt_updates(updates, n, seed=21):
    """`updates` lists of `n` zoo GPT micro-batches, their labels padded
    (-100) as a collator pads them: a different count of valid tokens in
    each micro-batch, so that only the update's token count gives
    Trainer's loss."""
    from test_tensor_parallel import _zoo_gpt2_batch
    gen = torch.Generator().manual_seed(seed)
    out = []
    for k in range(updates):
        micro = [_zoo_gpt2_batch(gen) for _ in range(n)]
        for j, batch in enumerate(micro):
            pad = (k + 3 * j) % 7
            if pad:
                batch["labels"][j % 2, -pad:] = -100
        out.append(micro)
    return out


def accumulate_like_trainer(module, updates, total, warmup, max_norm):
    """Trainer's loop (transformers >= 4.46): each micro-batch's summed
    loss over the update's count of valid tokens, backward per
    micro-batch, clip_grad_norm_, AdamW, the cosine schedule. Returns each
    update's (loss, lr, grad_norm)."""
    opt = OPTIMIZERS["adamw"][1](module)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, hf_factor("cosine", warmup, total, 1e-3))
    params = [p for p in module.parameters() if p.requires_grad]
    seen = []
    for micro in updates:
        count = sum(int((b["labels"] != -100).sum()) for b in micro)
        opt.zero_grad()
        loss = 0.0
        for batch in micro:
            valid = int((batch["labels"] != -100).sum())
            part = module(**batch) * valid / count  # its summed loss / count
            part.backward()
            loss += part.item()
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm).item()
        seen.append((loss, opt.param_groups[0]["lr"], norm))
        opt.step()
        sched.step()
    return seen


@pytest.mark.parametrize("mesh", [{"tp": 2}, {"dp": 2, "tp": 2}])
def test_an_accumulated_fine_tune_is_trainers(mesh, tmp_path):
    """200 updates of 4 micro-batches of the zoo GPT, cosine with warmup,
    max_grad_norm 1.0, AdamW: every update's loss, rate and gradient norm
    and the final weights are PyTorch's; resumed at update 100 it goes on
    bit for bit."""
    from test_tensor_parallel import build
    module, _, _ = build("zoo_gpt2")
    with torch.no_grad():  # larger logits: early norms past 1, clipped
        module.wte.weight.mul_(3)
    reference = copy.deepcopy(module)
    updates = gpt_updates(200, 4)
    model = cleave.tensor_parallel(
        module, dict(updates[0][0]), optimizer=OPTIMIZERS["adamw"][0],
        lr_scheduler="cosine", warmup_steps=20, total_steps=200,
        max_grad_norm=1.0, gradient_accumulation_steps=4, **mesh)
    want = accumulate_like_trainer(reference, updates, 200, 20, 1.0)
    got = []
    for k, micro in enumerate(updates):
        if k == 100:
            model.save_checkpoint(str(tmp_path / "ckpt"))
        got.append((model.step(micro), model.metrics["lr"],
                    model.metrics["grad_norm"]))
    for k, (g, w) in enumerate(zip(got, want)):
        assert g == pytest.approx(w, rel=1e-4, abs=1e-6), k
    assert sum(w[2] > 1.0 for w in want) > 10  # the clipping acts
    state = model.state_dict()
    for name, value in reference.state_dict().items():
        mine, value = np.array(state[name]), value.numpy()
        if name.endswith("c_attn.bias"):
            # The key bias: softmax ignores a score added to every key, so
            # its gradient is 0 in exact arithmetic and rounding noise on
            # both sides, which AdamW scales up to whole steps.
            mine, value = np.delete(mine, np.s_[64:128]), \
                np.delete(value, np.s_[64:128])
        np.testing.assert_allclose(mine, value, rtol=1e-4, atol=1e-5,
                                   err_msg=name)
    resumed = cleave.Model.resume(str(tmp_path / "ckpt"))
    assert [resumed.step(micro) for micro in updates[100:]] == \
        [g[0] for g in got[100:]]
    for name, value in resumed.state_dict().items():
        np.testing.assert_array_equal(np.array(value), np.array(state[name]),
                                      name)


def test_accumulation_holds_one_micro_batch_at_a_time():
    """The arena of 4 accumulated micro-batches is one micro-batch's plus
    the gradients' running sum (PyTorch's .grad), far below the arena of
    the one batch of 4 times the rows; the dp ranks' gradient reductions
    are those of one step, not one per micro-batch."""
    from test_tensor_parallel import build
    micro = gpt_updates(1, 1)[0][0]
    whole = {k: torch.cat([v] * 4) for k, v in micro.items()}
    seen = {}
    for name, example, n, mesh in [
            ("one", micro, 1, {"tp": 2}), ("acc", micro, 4, {"tp": 2}),
            ("whole", whole, 1, {"tp": 2}),
            ("dp", whole, 1, {"dp": 2}), ("dp_acc", whole, 4, {"dp": 2})]:
        module, _, _ = build("zoo_gpt2")
        seen[name] = cleave.tensor_parallel(
            module, dict(example), gradient_accumulation_steps=n,
            optimizer=OPTIMIZERS["adamw"][0], **mesh).inspect()
    arena = {k: v["memory_per_rank"]["arena"] for k, v in seen.items()}
    grads = seen["acc"]["memory_per_rank"]["gradients"]
    assert arena["acc"] <= arena["one"] + 1.1 * grads, arena
    assert arena["acc"] < 0.6 * arena["whole"], arena

    def gradient_sums(report):
        return sorted((c["kind"], c["axes"], c["bytes"])
                      for c in report["collectives"]
                      if c["phase"] == "backward")
    assert gradient_sums(seen["dp_acc"]) == gradient_sums(seen["dp"])
    assert gradient_sums(seen["dp"])


def test_accumulation_takes_its_micro_batches():
    from test_tensor_parallel import build
    module, _, _ = build("zoo_gpt2")
    micro = gpt_updates(1, 2)[0]
    model = cleave.tensor_parallel(module, dict(micro[0]),
                                   gradient_accumulation_steps=2)
    with pytest.raises(cleave.Error, match="sums the gradients of 2 "
                       "micro-batches.*given 1"):
        model.step(micro[0])
    with pytest.raises(cleave.Error, match="given 3"):
        model.step(micro + micro[:1])
    assert model.steps_done == 0
    first = model.step(micro)
    # fit groups its batches two by two; a last single one is left out.
    again = cleave.tensor_parallel(copy.deepcopy(module), dict(micro[0]),
                                   gradient_accumulation_steps=2)
    assert again.fit(micro + micro[:1], progress=False) == [first]
    assert again.steps_done == 1
    with pytest.raises(cleave.Error,
                       match="gradient_accumulation_steps must be"):
        cleave.tensor_parallel(module, dict(micro[0]),
                               gradient_accumulation_steps=0)


# -- evaluation and inference -------------------------------------------------

@pytest.mark.parametrize("name", ["decoder", "zoo_gpt2"])
def test_calling_the_model_gives_the_modules_outputs(name):
    """Model(batch) is the module's forward, computed sharded on the
    current weights: the decoder's logits (its loss appended) and the zoo
    GPT's own loss, at tp 1, 2 and 4, and again after an update."""
    from test_tensor_parallel import build
    for tp in (1, 2, 4):
        module, batch_fn, loss = build(name)
        reference = copy.deepcopy(module)
        gen = torch.Generator().manual_seed(3)
        batch, other = batch_fn(gen), batch_fn(gen)
        model = cleave.tensor_parallel(module, example_of(batch, loss),
                                       tp=tp, loss=loss,
                                       optimizer=OPTIMIZERS["sgd"][0])
        with torch.no_grad():
            want = reference(**example_of(other, loss))
        np.testing.assert_allclose(model(other).numpy(), want.numpy(),
                                   rtol=1e-5, atol=1e-5, err_msg=str(tp))
        assert model.steps_done == 0
    step_like_pytorch(model, module, reference, batch, loss, "sgd")
    with torch.no_grad():
        want = reference(**example_of(other, loss))
    np.testing.assert_allclose(model.forward(other).numpy(), want.numpy(),
                               rtol=1e-5, atol=1e-5)


def test_evaluate_is_pytorchs_mean_loss_and_updates_nothing():
    module, _, loss = models.build("decoder")
    batches = decoder_batches(3, seed=5)
    model = cleave.tensor_parallel(module, example_of(batches[0], loss),
                                   tp=2, loss=loss)
    before = {k: np.array(v) for k, v in model.state_dict().items()}
    with torch.no_grad():
        want = np.mean([models.torch_loss(module, b, loss).item()
                        for b in batches])
    assert model.evaluate(batches) == pytest.approx(want, rel=1e-5)
    assert model.steps_done == 0
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(np.array(value), before[name], name)
    with pytest.raises(cleave.Error, match="needs each batch's 'labels'"):
        model.evaluate([example_of(batches[0], loss)])


class DropoutBatchNorm(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.l1 = nn.Linear(8, 16)
        self.bn = nn.BatchNorm1d(16)
        self.drop = nn.Dropout(p)
        self.l2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.l2(self.drop(torch.relu(self.bn(self.l1(x)))))


@pytest.mark.parametrize("p", [0.0, 0.5])
def test_eval_mode_switches_dropout_and_batchnorm(p):
    """eval(): BatchNorm on its running statistics and no dropout, as
    PyTorch's eval(); train(): the batch's statistics (and dropout's
    masks, which PyTorch draws from another stream)."""
    torch.manual_seed(0)
    module = DropoutBatchNorm(p)
    with torch.no_grad():
        module.bn.running_mean.uniform_(-1, 1)
        module.bn.running_var.uniform_(0.5, 2)
    training, evaluating = copy.deepcopy(module), copy.deepcopy(module).eval()
    gen = torch.Generator().manual_seed(1)
    batch = {"x": torch.randn(6, 8, generator=gen),
             "labels": torch.randint(0, 4, (6,), generator=gen)}
    model = cleave.tensor_parallel(module, {"x": batch["x"]}, tp=2,
                                   loss="cross_entropy")
    assert model.training
    trained = model(batch)
    assert model.eval() is model and not model.training
    with torch.no_grad():
        np.testing.assert_allclose(model(batch).numpy(),
                                   evaluating(batch["x"]).numpy(),
                                   rtol=1e-5, atol=1e-6)
        if p == 0.0:
            np.testing.assert_allclose(trained.numpy(),
                                       training(batch["x"]).numpy(),
                                       rtol=1e-5, atol=1e-6)
        want = F.cross_entropy(evaluating(batch["x"]), batch["labels"])
    assert model.evaluate([batch]) == pytest.approx(want.item(), rel=1e-5)
    assert not np.allclose(model.train()(batch).numpy(),
                           model.eval()(batch).numpy(), atol=1e-3)


def test_a_forward_batch_is_checked_before_it_runs():
    module, _, loss = models.build("decoder")
    batch = decoder_batches(1)[0]
    model = cleave.tensor_parallel(module, example_of(batch, loss), tp=2,
                                   loss=loss)
    with pytest.raises(cleave.Error, match="'ids', which is not an input of "
                       "the forward pass"):
        model({"ids": batch["input_ids"]})
    with pytest.raises(cleave.Error, match="the batch has no 'input_ids'"):
        model({})
    with pytest.raises(cleave.Error, match=r"compiled for \(input_ids \[2, 8\]\)"):
        model({"input_ids": batch["input_ids"][:, :4]})
    assert model(batch).shape == (2, 8, 61)  # labels of an appended loss


def forward_then_step(model, module, batches):
    """For each batch: Model(batch) equals `module`'s outputs with the
    model's current weights, then a step on it."""
    with torch.no_grad():
        for batch in batches:
            module.load_state_dict({k: torch.from_numpy(np.array(v))
                                    for k, v in model.state_dict().items()})
            np.testing.assert_allclose(model(batch),
                                       module(batch["input_ids"]).numpy(),
                                       rtol=1e-5, atol=1e-5)
            model.step(batch)


@pytest.mark.parametrize("mesh", [{"dp": 2}, {"dp": 2, "tp": 2},
                                  {"dp": 2, "zero": 3},
                                  {"dp": 2, "tp": 2, "zero": 3}])
def test_a_dp_mesh_runs_the_forward_split_as_its_step(mesh):
    """Each dp rank its rows, the weights as the step holds them (ZeRO 3's
    dp shards gathered as the step gathers them): the module's outputs,
    whole, before and after an update."""
    module, _, loss = models.build("decoder")
    batches = decoder_batches(2)
    model = cleave.tensor_parallel(module, example_of(batches[0], loss),
                                   loss=loss, optimizer=OPTIMIZERS["adamw"][0],
                                   **mesh)
    forward_then_step(model, module, batches)
    with pytest.raises(cleave.Error, match=r"compiled for \(input_ids "
                       r"\[2, 8\]\)"):
        model({"input_ids": batches[0]["input_ids"][:1]})


# -- several batch shapes ------------------------------------------------------

@pytest.mark.parametrize("mesh", [{"tp": 2}, {"dp": 2, "tp": 2}])
def test_a_model_compiled_for_two_shapes_trains_on_both(mesh):
    """A shorter sequence in a larger batch beside the first shape: a step
    per shape, one set of weights and AdamW state moved between them; every
    loss, rate and gradient norm and the final state are PyTorch's."""
    module, batch_fn, loss = models.build("decoder")
    reference = copy.deepcopy(module)
    gen = torch.Generator().manual_seed(3)
    full = [batch_fn(gen) for _ in range(3)]
    short = [batch_fn(gen, b=4, t=5) for _ in range(2)]
    model = cleave.tensor_parallel(
        module, [example_of(full[0], loss), example_of(short[0], loss)],
        loss=loss, optimizer=OPTIMIZERS["adamw"][0], max_grad_norm=0.5,
        **mesh)
    shapes = model.inspect()["batch_shapes"]
    assert [s["inputs"] for s in shapes] == [
        "input_ids i64 [2, 8], labels i64 [2, 8]",
        "input_ids i64 [4, 5], labels i64 [4, 5]"]
    assert [s["input_ids"] for s in model.batch_shapes] == [
        ("int64", (2, 8)), ("int64", (4, 5))]
    train_like_pytorch(model, reference,
                       [full[0], short[0], short[1], full[1], full[2]], loss,
                       clip=("norm", 0.5), optimizer="adamw")
    with pytest.raises(cleave.ArgumentError,
                       match=r"'input_ids' is \[2, 6\]; the step was compiled "
                       r"for \(input_ids \[2, 8\], labels \[2, 8\]\); "
                       r"\(input_ids \[4, 5\], labels \[4, 5\]\)"):
        model.step(batch_fn(gen, t=6))
    assert model.steps_done == 5


def two_shape_decoder(seed, rows):
    """The decoder compiled at tp 2 (AdamW, appended cross-entropy) for a
    [2, 8] batch and a [rows, 5] one: (model, module, the two batches)."""
    module, batch_fn, loss = models.build("decoder")
    gen = torch.Generator().manual_seed(seed)
    full, short = batch_fn(gen), batch_fn(gen, b=rows, t=5)
    model = cleave.tensor_parallel(
        module, [example_of(full, loss), example_of(short, loss)], tp=2,
        loss=loss, optimizer=OPTIMIZERS["adamw"][0])
    return model, module, full, short


def test_each_shape_has_its_forward_pass():
    model, module, full, short = two_shape_decoder(4, rows=3)
    model.step(short)
    model.step(full)
    forward_then_step(model, module, (full, short, full))
    # A refused batch of the other shape leaves the state where it was.
    before = model.state_dict()
    bad = dict(short, labels=torch.full_like(short["labels"], 99))
    with pytest.raises(cleave.Error, match="99"):
        model.step(bad)
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(np.array(value), np.array(before[name]))
    model.step(full)


class CausalLM(nn.Module):
    """Hugging Face's calling convention: forward(input_ids, labels=None)
    returns the logits, and (loss, logits) given labels, shifted inside as
    LlamaForCausalLM does."""

    def __init__(self, vocab=37, d=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.proj = nn.Linear(d, 2 * d)
        self.drop = nn.Dropout(0.25)
        self.lm_head = nn.Linear(2 * d, vocab, bias=False)

    def forward(self, input_ids, labels=None):
        logits = self.lm_head(self.drop(torch.tanh(
            self.proj(self.embed(input_ids)))))
        if labels is None:
            return logits
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                               labels[:, 1:].reshape(-1))
        return loss, logits


def test_a_forward_without_labels_gives_the_logits():
    """Model(batch) without labels runs the forward as written for those
    arguments (the logits), in training and eval mode and at each shape;
    with labels, (loss, logits); evaluate takes the model's own loss."""
    torch.manual_seed(0)
    module = CausalLM()
    gen = torch.Generator().manual_seed(6)
    batches = [{"input_ids": torch.randint(0, 37, (b, t), generator=gen),
                "labels": torch.randint(0, 37, (b, t), generator=gen)}
               for b, t in ((2, 8), (3, 5))]
    model = cleave.tensor_parallel(module, batches, tp=2,
                                   optimizer=OPTIMIZERS["sgd"][0])
    model.step(batches[0])
    module.load_state_dict({k: torch.from_numpy(np.array(v))
                            for k, v in model.state_dict().items()})
    module.eval()
    model.eval()
    with torch.no_grad():
        for batch in batches:
            ids = batch["input_ids"]
            np.testing.assert_allclose(model({"input_ids": ids}),
                                       module(ids).numpy(), rtol=1e-5,
                                       atol=1e-5)
            loss, logits = model(batch)
            want_loss, want_logits = module(**batch)
            assert float(loss) == pytest.approx(want_loss.item(), rel=1e-5)
            np.testing.assert_allclose(logits, want_logits.numpy(),
                                       rtol=1e-5, atol=1e-5)
        assert model.evaluate(batches) == pytest.approx(
            np.mean([module(**b)[0].item() for b in batches]), rel=1e-5)
        model.train()
        dropped = model({"input_ids": batches[0]["input_ids"]})
        assert dropped.shape == (2, 8, 37)
        assert not np.allclose(dropped, module(batches[0]["input_ids"]))
    with pytest.raises(cleave.Error, match="the batch has no 'input_ids'"):
        model({"labels": batches[0]["labels"]})
    with pytest.raises(cleave.ArgumentError, match=r"first output on this "
                       r"batch is \[2, 8, 37\], not its loss"):
        model.evaluate([{"input_ids": batches[0]["input_ids"]}])


@pytest.mark.parametrize("mesh", [{"tp": 2}, {"dp": 2}])
def test_a_last_partial_batch_is_padded_or_dropped_by_choice(mesh):
    """A dataset of 2-row batches and a last batch of 1 row: an error by
    default; pad_last pads it (labels -100) and the run equals PyTorch's
    on the partial batch; drop_last leaves it out."""
    module, batch_fn, loss = models.build("decoder")
    gen = torch.Generator().manual_seed(8)
    batches = [batch_fn(gen) for _ in range(3)] + [batch_fn(gen, b=1)]
    runs = {}
    for how in ("pad_last", "drop_last"):
        reference = copy.deepcopy(module)
        opt = OPTIMIZERS["adamw"][1](reference)
        model = cleave.tensor_parallel(
            copy.deepcopy(module), example_of(batches[0], loss), loss=loss,
            optimizer=OPTIMIZERS["adamw"][0], **mesh)
        if how == "pad_last":
            with pytest.raises(cleave.ArgumentError, match=r"\[1, 8\]; the "
                               r"step was compiled for \(input_ids \[2, 8\]"):
                model.fit(batches, progress=False)
            assert model.steps_done == 3
            model = cleave.tensor_parallel(
                copy.deepcopy(module), example_of(batches[0], loss),
                loss=loss, optimizer=OPTIMIZERS["adamw"][0], **mesh)
        losses = model.fit(batches, progress=False, **{how: True})
        kept = batches if how == "pad_last" else batches[:3]
        want = []
        for batch in kept:
            opt.zero_grad()
            value = models.torch_loss(reference, batch, loss)
            value.backward()
            opt.step()
            want.append(value.item())
        np.testing.assert_allclose(losses, want, rtol=1e-4, atol=1e-5)
        state = model.state_dict()
        for name, value in reference.state_dict().items():
            np.testing.assert_allclose(np.array(state[name]), value.numpy(),
                                       rtol=1e-4, atol=1e-5, err_msg=name)
        runs[how] = losses
    assert len(runs["pad_last"]) == 4 and len(runs["drop_last"]) == 3


def test_padding_needs_labels_it_can_mask():
    module, batch_fn, loss = models.build("frozen_mlp")  # mse: no masking
    gen = torch.Generator().manual_seed(8)
    batches = [batch_fn(gen), batch_fn(gen, b=3)]
    model = cleave.tensor_parallel(module, example_of(batches[0], loss),
                                   loss=loss, tp=2)
    with pytest.raises(cleave.ArgumentError, match="pad_last masks the "
                       "padded rows by labels -100"):
        model.fit(batches, pad_last=True, progress=False)
    with pytest.raises(cleave.ArgumentError, match="not both"):
        model.fit(batches, pad_last=True, drop_last=True)
    assert model.fit(batches, drop_last=True, progress=False)


class MaskedMeanLM(nn.Module):
    """A loss written by hand, as many training scripts write it: the mean
    of the per-token losses over a mask's tokens."""

    def __init__(self, vocab=29, d=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.mix = nn.Linear(d, d)
        self.head = nn.Linear(d, vocab)

    def forward(self, input_ids, labels, loss_mask):
        logits = self.head(torch.tanh(self.mix(self.embed(input_ids))))
        each = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                               labels.reshape(-1), reduction="none")
        mask = loss_mask.reshape(-1).to(each.dtype)
        return (each * mask).sum() / mask.sum()


@pytest.mark.parametrize("mesh", [{"tp": 2}, {"dp": 2}])
def test_a_hand_written_masked_mean_accumulates_token_count_correct(mesh):
    """Three micro-batches whose masks keep 3, 11 and 16 tokens: each
    update is the one large batch's (its loss the mean over all 30 kept
    tokens), not the mean of the three micro-batch means."""
    torch.manual_seed(1)
    module = MaskedMeanLM()
    reference = copy.deepcopy(module)
    gen = torch.Generator().manual_seed(2)

    def micro(kept):
        mask = torch.zeros(2, 8, dtype=torch.long)
        mask.view(-1)[torch.randperm(16, generator=gen)[:kept]] = 1
        return {"input_ids": torch.randint(0, 29, (2, 8), generator=gen),
                "labels": torch.randint(0, 29, (2, 8), generator=gen),
                "loss_mask": mask}

    updates = [[micro(k) for k in (3, 11, 16)] for _ in range(3)]
    model = cleave.tensor_parallel(module, updates[0][0],
                                   optimizer=OPTIMIZERS["sgd"][0],
                                   gradient_accumulation_steps=3, **mesh)
    opt = OPTIMIZERS["sgd"][1](reference)
    for batches in updates:
        whole = {k: torch.cat([b[k] for b in batches]) for k in batches[0]}
        with torch.no_grad():
            means = np.mean([reference(**b).item() for b in batches])
        opt.zero_grad()
        loss = reference(**whole)
        loss.backward()
        opt.step()
        got = model.step(batches)
        assert got == pytest.approx(loss.item(), rel=1e-5)
        assert abs(got - means) > 1e-3  # the two rules differ here
    state = model.state_dict()
    for name, value in reference.state_dict().items():
        np.testing.assert_allclose(np.array(state[name]), value.numpy(),
                                   rtol=1e-4, atol=1e-6, err_msg=name)


def test_a_run_of_two_shapes_resumes_bit_for_bit(tmp_path):
    """A checkpoint written while the second shape's step holds the state
    resumes into both shapes' steps, to the bit."""
    model, _, full, short = two_shape_decoder(3, rows=4)
    model.step(full)
    model.step(short)
    model.save_checkpoint(str(tmp_path / "ckpt"))
    went_on = [model.step(short), model.step(full)]
    resumed = cleave.Model.resume(str(tmp_path / "ckpt"))
    assert [resumed.step(short), resumed.step(full)] == went_on
    assert len(resumed.inspect()["batch_shapes"]) == 2


def test_profiling_times_every_shapes_step():
    """A profile started with one shape's runner made times the other's
    steps too, and once it is reported no runner keeps the profiler."""
    model, _, full, short = two_shape_decoder(5, rows=4)
    model.step(full)
    report = model.profile(short, steps=3)
    assert "matmul" in report
    model.step(full)
    model.step(short)
    assert model.steps_done == 6

"""A module in bfloat16 or float16 (issue 36): Cleave trains float32 master
weights of its values and gives the module's dtype back; bf16 state_dicts
load; checkpoints keep the dtype."""

import copy

import pytest
import torch

import cleave
import models


def prepare(dtype):
    module, batch_fn, loss = models.build("decoder")
    batch = batch_fn(torch.Generator().manual_seed(4))
    return module.to(dtype), batch, loss


def torch_sgd_steps(module, batches, loss, lr):
    opt = torch.optim.SGD(module.parameters(), lr=lr)
    out = []
    for batch in batches:
        opt.zero_grad()
        value = models.torch_loss(module, batch, loss)
        value.backward()
        opt.step()
        out.append(value.item())
    return out, module.state_dict()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_module_trains_float32_masters(dtype):
    module, batch, loss = prepare(dtype)
    # The reference: PyTorch in float32 from the same (rounded) values.
    reference = copy.deepcopy(module).float()
    model = cleave.tensor_parallel(module, batch, tp=2, loss=loss,
                                   optimizer=cleave.SGD(lr=0.05))
    got = [model.step(batch) for _ in range(3)]
    want, state = torch_sgd_steps(reference, [batch] * 3, loss, 0.05)
    assert got == pytest.approx(want, rel=1e-4)
    sd = model.state_dict()
    for key, value in module.state_dict().items():
        assert sd[key].dtype == value.dtype, key
        if value.is_floating_point():
            # The float32 master rounded once to the module's dtype.
            torch.testing.assert_close(sd[key], state[key].to(dtype),
                                       rtol=1e-2, atol=1e-3, msg=key)
    # A bfloat16 state_dict loads (the weights widen exactly) and comes back
    # in the module's dtype.
    halved = {k: (v.to(torch.bfloat16) if v.is_floating_point() else v)
              for k, v in state.items()}
    model.load_state_dict(halved)
    for key, value in model.state_dict().items():
        if value.is_floating_point():
            assert torch.equal(value, halved[key].to(dtype)), key


def test_checkpoint_keeps_the_module_dtype(tmp_path):
    module, batch, loss = prepare(torch.bfloat16)
    model = cleave.tensor_parallel(module, batch, tp=2, loss=loss)
    model.step(batch)
    before = model.state_dict()
    model.save_checkpoint(tmp_path / "ckpt")
    resumed = cleave.Model.resume(tmp_path / "ckpt")
    after = resumed.state_dict()
    for key, value in before.items():
        assert after[key].dtype == value.dtype, key
        assert torch.equal(after[key], value), key

"""cleave.Options: every bad value is refused before anything runs, as a
cleave.Error that is also a ValueError or TypeError, the same way through
Options, tensor_parallel and compile; Model.close and its with block."""

import os

import numpy as np
import pytest
import torch

import cleave
import models

# (options, the exception's other base, a regex of its message)
BAD = [
    ({"tp": 0}, ValueError, "tp must be a positive integer, not 0"),
    ({"tp": "2"}, TypeError, "tp must be a positive integer, not '2'"),
    ({"tp": 2.0}, TypeError, "tp must be a positive integer, not 2.0"),
    ({"tp": True}, TypeError, "tp must be a positive integer, not True"),
    ({"dp": -1}, ValueError, "dp must be a positive integer"),
    ({"zero": 4}, ValueError, "zero must be 0, 1, 2 or 3, not 4"),
    ({"zero": "one"}, TypeError, "zero must be"),
    ({"devices": 0}, ValueError, "devices must be a positive integer"),
    ({"devices": 4, "tp": 2}, ValueError, "give either devices"),
    ({"recompute": "some"}, ValueError, "recompute must be 'auto', 'none', "
     "'selective' or 'full', not 'some'"),
    ({"devices": 2, "memory_per_device": "lots"}, TypeError,
     "memory_per_device must be a positive integer"),
    ({"optimizer": "adam"}, TypeError, "optimizer must be cleave.SGD"),
    ({"loss": "l1"}, ValueError, "loss must be 'auto', 'cross_entropy' or "
     "'mse', not 'l1'"),
    ({"plan": 3}, TypeError, "plan must be a file path or a dict"),
    ({"plan": {"fc1": "sideways"}}, ValueError,
     r"plan\['fc1'\] must be 'colwise'"),
    ({"plan": {"fc 1": "colwise"}}, ValueError, "not a regular expression"),
    ({"plan": {"experts": "grouped_gemm"}}, ValueError,
     r"plan\['experts'\]: transformers' 'grouped_gemm' places experts"),
    ({"freeze": "fc1"}, TypeError, "freeze must be a list"),
    ({"freeze": ["fc1", 2]}, TypeError, "freeze must be a list"),
    ({"freeze": [""]}, ValueError, "would freeze every tensor"),
    ({"seed": -1}, ValueError, "seed must be a non-negative integer"),
    ({"seed": 2**63}, ValueError, "seed must be below 2\\*\\*63"),
    ({"opset": 3}, ValueError, "opset must be an integer >= 7"),
    ({"opset": 10**6}, ValueError, "opset must be at most"),
    ({"opset": "17"}, TypeError, "opset must be"),
    ({"output": 3}, TypeError, "output must be a path"),
    ({"output": ""}, ValueError, "output must be a non-empty path"),
    ({"plan_only": 1}, TypeError, "plan_only must be True or False"),
    ({"timeout": 0}, ValueError, "timeout must be a positive number"),
    ({"timeout": float("inf")}, ValueError, "timeout must be a positive"),
    ({"timeout": "60"}, TypeError, "timeout must be a number of seconds"),
    ({"backend": "gpu"}, ValueError, "backend must be 'cpu', 'cuda' or "
     "'auto', not 'gpu'"),
    ({"precision": "fp8"}, ValueError, "precision must be 'f32', 'bf16' or "
     "'fp16', not 'fp8'"),
    ({"precision": "bf16", "backend": "cuda"}, ValueError,
     "precision='bf16' runs on the CPU backend"),
    ({"ranks": 2}, TypeError, "unknown option 'ranks'"),
    ({"flavour": 1}, TypeError, "unknown option 'flavour'"),
]
IDS = [",".join(f"{k}={v!r}" for k, v in o.items()) for o, _, _ in BAD]


@pytest.fixture(scope="module")
def mlp():
    module, _, loss = models.build("frozen_mlp")
    batch = models.mlp_batch(torch.Generator().manual_seed(5), b=8)
    return module, batch, loss


def _raises(kind, message, call):
    with pytest.raises(cleave.Error, match=message) as info:
        call()
    assert isinstance(info.value, kind), type(info.value).__mro__
    # One line, as the CLI prints it.
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("options,kind,message", BAD, ids=IDS)
def test_bad_value_refused_everywhere(options, kind, message, mlp, tmp_path):
    module, batch, loss = mlp
    options = {"loss": loss, **options}
    _raises(kind, message, lambda: cleave.Options.make(None, **options))
    _raises(kind, message, lambda: cleave.tensor_parallel(
        module, batch, **options))
    # compile refuses the same value, before it exports anything.
    if "output" not in options:
        options = {"output": tmp_path / "b", **options}
    _raises(kind, message, lambda: cleave.compile(module, batch, **options))
    assert not os.path.exists(tmp_path / "b")


def test_options_are_frozen_typed_and_normalised(tmp_path):
    o = cleave.Options(tp=np.int64(2), freeze=["fc1.*"],
                       plan={"fc1": "colwise"}, output=tmp_path)
    assert (o.tp, type(o.tp)) == (2, int)
    assert o.freeze == ("fc1.*",) and o.output == os.fspath(tmp_path)
    assert o.plan == (("fc1", "colwise"),)
    # transformers' tp_plan styles, by the weight layout each gives.
    hf = cleave.Options(plan={"q": "colwise_rep", "o": "local_rowwise",
                              "up": "packed_colwise", "norm":
                              "sequence_parallel", "head": "gather"})
    assert dict(hf.plan) == {"q": "colwise", "o": "rowwise", "up": "colwise",
                             "norm": "replicate", "head": "replicate"}
    hash(o)  # hashable: a dict plan is kept as pairs
    with pytest.raises(AttributeError):
        o.tp = 4
    assert o.replace(dp=2).dp == 2 and o.dp == 1
    _raises(ValueError, "zero must be", lambda: o.replace(zero=9))
    assert cleave.Options(timeout=5).timeout == 5.0
    _raises(TypeError, "options must be cleave.Options",
            lambda: cleave.Options.make({"tp": 2}))


def test_run_and_compile_only_options_are_refused_not_ignored(mlp, tmp_path):
    module, batch, loss = mlp
    for run in ({"timeout": 5}, {"backend": "auto"}):
        _raises(ValueError, f"{next(iter(run))} applies to running a bundle",
                lambda: cleave.compile(module, batch, loss=loss,
                                       output=tmp_path / "b", **run))
    _raises(ValueError, "plan_only writes a bundle without weights",
            lambda: cleave.tensor_parallel(module, batch, loss=loss,
                                           plan_only=True))
    _raises(ValueError, "compile needs output=DIR",
            lambda: cleave.compile(module, batch, loss=loss))
    _raises(ValueError, "opset applies to exporting a torch.nn.Module",
            lambda: cleave.compile(tmp_path / "m.onnx", batch, loss=loss,
                                   opset=13, output=tmp_path / "b"))
    _raises(TypeError, "distributed must be True or False",
            lambda: cleave.tensor_parallel(module, batch, loss=loss,
                                           distributed="yes"))
    _raises(TypeError, "precision must be a string", lambda: cleave.Bundle
            .train(object.__new__(cleave.Bundle), 1, precision=3))
    _raises(ValueError, "lr must be", lambda: cleave.SGD(lr=-1))
    _raises(TypeError, "lr must be a number", lambda: cleave.SGD(lr="0.1"))


def test_options_object_and_keywords_agree(mlp, tmp_path):
    """options= and the same keywords compile the same bundle; a keyword
    given beside options= goes on top."""
    module, batch, loss = mlp
    opts = cleave.Options(tp=2, loss=loss, optimizer=cleave.AdamW(1e-3),
                          freeze=["fc2.*"], plan_only=True)
    a = cleave.compile(module, batch, options=opts.replace(
        output=tmp_path / "a"))
    b = cleave.compile(module, batch, tp=2, loss=loss,
                       optimizer=cleave.AdamW(1e-3), freeze=["fc2.*"],
                       plan_only=True, output=tmp_path / "b")
    c = cleave.compile(module, batch, options=opts, tp=1,
                       output=tmp_path / "c")
    assert a.inspect()["parameters"] == b.inspect()["parameters"]
    assert a.mesh == b.mesh == {"tp": 2}
    # tp=1 is tensor_parallel's default: beside options= it cannot be told
    # from tp left out, so the options' tp stands.
    assert c.mesh == {"tp": 2}
    d = cleave.compile(module, batch, options=opts, dp=2,
                       output=tmp_path / "d")
    assert d.mesh == {"dp": 2, "tp": 2}
    # freeze acts (compile took no freeze before the options were shared).

    def trained(bundle):
        return {p["name"] for p in bundle.inspect()["parameters"]}
    e = cleave.compile(module, batch, options=opts.replace(
        freeze=(), output=tmp_path / "e"))
    assert "fc2.weight" in trained(e) and "fc2.weight" not in trained(a)


def test_close_and_with_block(mlp, tmp_path):
    module, batch, loss = mlp
    with cleave.tensor_parallel(module, batch, loss=loss, tp=2) as model:
        first = model.step(batch)
        owned = model._owned
        assert os.path.isdir(owned)
    assert model.closed and not os.path.exists(owned)
    assert "closed" in repr(model)
    for call in (lambda: model.step(batch), model.state_dict, model.inspect,
                 lambda: model.steps_done):
        with pytest.raises(cleave.Error, match="this Model is closed"):
            call()
    model.close()  # twice is fine
    # A bundle given as output stays, and opens again.
    kept = tmp_path / "kept"
    model = cleave.tensor_parallel(module, batch, loss=loss, tp=2,
                                   output=kept)
    assert model.step(batch) == pytest.approx(first, rel=1e-6)
    model.close()
    assert cleave.load(kept).mesh == {"tp": 2}

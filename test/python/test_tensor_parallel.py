"""cleave.tensor_parallel against PyTorch's own training step.

Each model is trained one step by PyTorch (torch.optim) and by Cleave at
tp = 1, 2 and 4; the loss and every tensor of state_dict() after the step must
agree to 1e-4. AdamW's first step moves each weight by about lr * sign(g),
so entries whose gradient is rounding noise (zero in exact arithmetic) may
move either way in any float32 implementation: those are checked against a
float64 reference only to be within the step size.
"""

import copy
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import cleave
import models

HERE = os.path.dirname(os.path.abspath(__file__))
ZOO = os.path.join(HERE, "..", "..", "zoo")
sys.path.insert(0, ZOO)

MODELS = ["decoder", "convnet", "frozen_mlp", "encoder", "zoo_gpt2",
          "zoo_llama_gqa", "zoo_clip"]


def build(name):
    """(module, batch function, loss) for a test or zoo model."""
    if name == "zoo_gpt2":
        from make_zoo import GPT2
        torch.manual_seed(1)
        return GPT2(), lambda g: _zoo_gpt2_batch(g), "auto"
    if name == "zoo_llama_gqa":
        from idioms import llama_model
        torch.manual_seed(2)
        spec = llama_model(2)
        return spec.build(), lambda g: dict(spec.inputs(g)), "auto"
    if name == "zoo_clip":  # two towers, a learned 0-d temperature
        from idioms import clip_model
        torch.manual_seed(3)
        spec = clip_model()
        return spec.build(), lambda g: dict(spec.inputs(g)), "auto"
    return models.build(name)


def example_of(batch, loss):
    """The forward's inputs: labels too when the module computes its loss."""
    return dict(batch) if loss == "auto" else \
        {k: v for k, v in batch.items() if k != "labels"}


def _zoo_gpt2_batch(gen):
    from make_zoo import gpt2_inputs
    return dict(gpt2_inputs(gen)[0])


def torch_step(module, batch, loss, optimizer):
    """PyTorch's loss and state_dict after one step of \\p optimizer."""
    opt = optimizer(module)
    opt.zero_grad()
    value = models.torch_loss(module, batch, loss)
    value.backward()
    grads = {n: p.grad.detach().clone() for n, p in module.named_parameters()
             if p.grad is not None}
    opt.step()
    return value.item(), module.state_dict(), grads


OPTIMIZERS = {
    "sgd": (cleave.SGD(lr=0.1, momentum=0.9, weight_decay=0.01),
            lambda m: torch.optim.SGD([p for p in m.parameters()
                                       if p.requires_grad], lr=0.1,
                                      momentum=0.9, weight_decay=0.01)),
    "adamw": (cleave.AdamW(lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1),
              lambda m: torch.optim.AdamW([p for p in m.parameters()
                                           if p.requires_grad], lr=1e-3,
                                          betas=(0.9, 0.99),
                                          weight_decay=0.1)),
}


@pytest.mark.parametrize("tp", [1, 2, 4])
@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
@pytest.mark.parametrize("name", MODELS)
def test_one_step_matches_pytorch(name, optimizer, tp):
    module, batch_fn, loss = build(name)
    batch = batch_fn(torch.Generator().manual_seed(7))
    ours, theirs = OPTIMIZERS[optimizer]
    reference = copy.deepcopy(module)
    example = example_of(batch, loss)
    model = cleave.tensor_parallel(module, example, tp=tp, optimizer=ours,
                                   loss=loss)
    got = model.step(batch)
    want, state, grads = torch_step(reference, batch, loss, theirs)
    assert got == pytest.approx(want, rel=1e-4, abs=1e-5)
    if optimizer == "adamw":
        ref64 = copy.deepcopy(module).double()
        b64 = {k: (v.double() if v.is_floating_point() else v)
               for k, v in batch.items()}
        _, _, grads = torch_step(ref64, b64, loss, theirs)
    assert set(model.state_dict()) == set(state)
    compare_state(model, state, grads, optimizer)


def compare_state(model, state, grads, optimizer):
    """model.state_dict() against PyTorch's `state` after the step (1e-4);
    AdamW entries whose float64 gradient is rounding noise only within the
    step size."""
    sd = model.state_dict()
    for key, value in state.items():
        mine = sd[key]
        assert mine.shape == value.shape, key
        if not value.is_floating_point():
            assert torch.equal(mine, value), key
            continue
        err = torch.where(mine == value, torch.zeros((), dtype=torch.double),
                          (mine.double() - value.double()).abs())
        tol = 1e-4 * (1 + value.double().abs())
        if optimizer == "adamw" and key in grads:
            g = grads[key].abs()
            noise = (g <= 1e-4 * g.max()) | (g < 1e-6)
            tol = torch.where(noise, torch.full_like(tol, 2.2e-3), tol)
        assert bool((err <= tol).all()), \
            f"{key}: max error {err.max().item():.3g}"


def test_module_decides_what_trains():
    module, batch_fn, loss = models.build("frozen_mlp")
    before = {k: v.clone() for k, v in module.state_dict().items()}
    model = cleave.tensor_parallel(
        module, {"x": torch.zeros(7, 12)}, tp=2, loss=loss,
        optimizer=cleave.SGD(lr=0.5))
    model.step(batch_fn(torch.Generator().manual_seed(3)))
    after = model.state_dict()
    for frozen in ("embed.weight", "embed.bias", "scale"):
        assert torch.equal(after[frozen], before[frozen]), frozen
    assert not torch.equal(after["fc1.weight"], before["fc1.weight"])


def test_batchnorm_statistics_update_as_in_pytorch():
    module, batch_fn, loss = models.build("convnet")
    reference = copy.deepcopy(module)
    batch = batch_fn(torch.Generator().manual_seed(4))
    model = cleave.tensor_parallel(
        module, {"pixel_values": batch["pixel_values"]}, tp=2, loss=loss)
    for _ in range(2):
        model.step(batch)
        torch_step(reference, batch, loss,
                   lambda m: torch.optim.SGD(m.parameters(), lr=0.01))
    sd = model.state_dict()
    for key in ("features.1.running_mean", "features.1.running_var",
                "features.5.running_var"):
        assert torch.allclose(sd[key], reference.state_dict()[key],
                              atol=1e-5), key
    assert sd["features.1.num_batches_tracked"].item() == 2


@pytest.mark.parametrize("name", ["decoder", "zoo_gpt2"])
def test_tp_1_2_4_give_the_same_losses(name):
    runs = []
    for tp in (1, 2, 4):
        module, batch_fn, loss = build(name)
        gen = torch.Generator().manual_seed(11)
        batches = [batch_fn(gen) for _ in range(5)]
        example = example_of(batches[0], loss)
        model = cleave.tensor_parallel(module, example, tp=tp, loss=loss,
                                       optimizer=cleave.AdamW(lr=3e-3))
        runs.append([model.step(b) for b in batches])
        if tp == 4:
            # The weights really are split.
            split = [p for p in model.inspect()["parameters"]
                     if p["sharding"] != "replicated"]
            assert split, "tp = 4 split no weight"
    np.testing.assert_allclose(runs[1], runs[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(runs[2], runs[0], rtol=1e-5, atol=1e-5)


def test_state_dict_round_trip_into_the_module():
    module, batch_fn, loss = models.build("decoder")
    gen = torch.Generator().manual_seed(5)
    batches = [batch_fn(gen) for _ in range(4)]
    model = cleave.tensor_parallel(
        module, {"input_ids": batches[0]["input_ids"]}, tp=2, loss=loss,
        optimizer=cleave.SGD(lr=0.2))
    for b in batches[:3]:
        model.step(b)
    trained = copy.deepcopy(module)
    trained.load_state_dict(model.state_dict())
    with torch.no_grad():
        want = models.torch_loss(trained, batches[3], loss).item()
    assert model.step(batches[3]) == pytest.approx(want, rel=1e-5)
    # And back: loading the untrained weights restores the first loss.
    fresh, _, _ = models.build("decoder")
    first = models.torch_loss(fresh, batches[0], loss).item()
    model.load_state_dict(fresh.state_dict())
    assert model.step(batches[0]) == pytest.approx(first, rel=1e-5)


def test_inspect_shows_the_mesh_and_the_split_weights():
    module, _, loss = models.build("decoder")
    model = cleave.tensor_parallel(
        module, {"input_ids": torch.zeros(2, 8, dtype=torch.long)}, tp=2,
        loss=loss)
    info = model.inspect()
    assert info["mesh"] == {"tp": 2}
    by_name = {p["name"]: p for p in info["parameters"]}
    q = by_name["layers.0.self_attn.q_proj.weight"]
    assert q["sharding"] != "replicated"
    assert q["local_shape"] != q["shape"]
    assert "layers.0.self_attn.q_proj.weight" in repr(model)
    assert "<table>" in model._repr_html_()


def test_profile_reports_the_steps_and_traces_every_rank(tmp_path):
    module, batch_fn, loss = models.build("decoder")
    gen = torch.Generator().manual_seed(3)
    batch = batch_fn(gen)
    model = cleave.tensor_parallel(module, example_of(batch, loss), tp=2,
                                   loss=loss, optimizer=cleave.AdamW(lr=1e-3))
    model.step(batch)
    trace = tmp_path / "trace.json"
    text = model.profile(batch, steps=3, trace=str(trace))
    # Real steps: they count, and their losses keep going down the run.
    assert model.steps_done == 4
    for heading in ("by phase", "by kernel kind", "by block"):
        assert heading in text, text
    # The fused attention is timed as its own kernel, forward and backward.
    assert "attention_backward" in text, text
    events = json.load(open(trace))["traceEvents"]
    lanes = {e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    assert lanes == {"rank 0", "rank 1"}
    # Profiling stops: a second profile starts afresh, and too few steps
    # is an error that leaves the model usable.
    assert "by kernel kind" in model.profile(batch, steps=2)
    with pytest.raises(cleave.Error, match="at least 2 steps"):
        model.profile(batch, steps=1)
    model.step(batch)


def test_export_writes_the_trained_weights(tmp_path):
    import onnx
    import onnx.numpy_helper
    module, batch_fn, loss = models.build("encoder")
    batch = batch_fn(torch.Generator().manual_seed(6))
    example = {k: v for k, v in batch.items() if k != "labels"}
    model = cleave.tensor_parallel(module, example, tp=2, loss=loss,
                                   optimizer=cleave.SGD(lr=0.5))
    model.step(batch)
    sd = model.state_dict()
    model.export(str(tmp_path / "trained.onnx"))
    proto = onnx.load(str(tmp_path / "trained.onnx"))
    inits = {t.name: onnx.numpy_helper.to_array(t)
             for t in proto.graph.initializer}
    assert not np.array_equal(inits["query.weight"],
                              module.state_dict()["query.weight"].numpy())
    for key in ("query.weight", "decoder.bias", "ln2.weight"):
        np.testing.assert_array_equal(inits[key], sd[key].numpy())
    model.export(str(tmp_path / "trained.safetensors"))
    assert (tmp_path / "trained.safetensors").stat().st_size > 0


def test_a_batch_of_the_wrong_shape_raises_and_runs_nothing():
    module, batch_fn, loss = models.build("decoder")
    gen = torch.Generator().manual_seed(8)
    batch = batch_fn(gen)
    model = cleave.tensor_parallel(module, {"input_ids": batch["input_ids"]},
                                   tp=2, loss=loss)
    before = model.state_dict()["lm_head.weight"]
    bad = dict(batch, input_ids=batch["input_ids"][:, :4])
    with pytest.raises(cleave.Error, match="input_ids.*\\[2, 8\\]"):
        model.step(bad)
    with pytest.raises(cleave.Error, match="no 'labels'"):
        model.step({"input_ids": batch["input_ids"]})
    with pytest.raises(cleave.Error, match="'oops'"):
        model.step(dict(batch, oops=batch["labels"]))
    with pytest.raises(cleave.Error, match="given 2"):
        model.step([batch, batch])  # two micro-batches; it takes one
    with pytest.raises(cleave.Error, match="not str"):
        model.step("batch")
    assert model.steps_done == 0
    assert torch.equal(model.state_dict()["lm_head.weight"], before)
    model.step(batch)  # still usable
    assert model.steps_done == 1


def test_errors_raise_cleave_error():
    with pytest.raises(cleave.Error, match="lr"):
        cleave.SGD(lr=-1)
    with pytest.raises(cleave.Error, match="betas"):
        cleave.AdamW(lr=1e-3, betas=(0.9, 1.5))
    with pytest.raises(cleave.Error, match="momentum"):
        cleave.SGD(lr=0.1, momentum=float("nan"))
    module, _, _ = models.build("frozen_mlp")
    x = {"x": torch.zeros(7, 12)}
    with pytest.raises(cleave.Error, match="not a scalar loss"):
        cleave.tensor_parallel(module, x)
    with pytest.raises(cleave.Error, match="unknown option"):
        cleave.tensor_parallel(module, x, loss="mse", flavour=1)
    with pytest.raises(cleave.Error, match="not an argument"):
        cleave.tensor_parallel(module, {"y": torch.zeros(7, 12)}, loss="mse")
    with pytest.raises(cleave.Error, match="tp must be"):
        cleave.tensor_parallel(module, x, loss="mse", tp=0)
    with pytest.raises(cleave.Error, match="cannot read model"):
        cleave.tensor_parallel("/nonexistent.onnx", x)
    with pytest.raises(cleave.Error, match="not a bundle"):
        cleave.load("/nonexistent")
    assert issubclass(cleave.Error, Exception)


def test_save_checkpoint_and_resume_continue_the_run(tmp_path):
    module, batch_fn, loss = models.build("decoder")
    gen = torch.Generator().manual_seed(9)
    batches = [batch_fn(gen) for _ in range(4)]
    example = {"input_ids": batches[0]["input_ids"]}
    straight = cleave.tensor_parallel(copy.deepcopy(module), example, tp=2,
                                      loss=loss,
                                      optimizer=cleave.AdamW(lr=1e-2))
    want = [straight.step(b) for b in batches]
    first = cleave.tensor_parallel(module, example, tp=2, loss=loss,
                                   optimizer=cleave.AdamW(lr=1e-2))
    got = [first.step(b) for b in batches[:2]]
    first.save_checkpoint(str(tmp_path / "ckpt"))
    del first
    resumed = cleave.Model.resume(str(tmp_path / "ckpt"))
    assert resumed.steps_done == 2
    got += [resumed.step(b) for b in batches[2:]]
    assert got == want


def test_checkpoints_keep_buffers_and_replace_only_their_own(tmp_path):
    """BatchNorm's statistics and counter live in module.safetensors (no
    pickle); a second save replaces the first whole; an older Cleave's
    module.pt is still read, with torch.load(weights_only=True)."""
    module, batch_fn, loss = models.build("convnet")
    gen = torch.Generator().manual_seed(11)
    batches = [batch_fn(gen) for _ in range(3)]
    example = {k: v for k, v in batches[0].items() if k != "labels"}
    model = cleave.tensor_parallel(module, example, tp=2, loss=loss)
    model.step(batches[0])
    ckpt = str(tmp_path / "ckpt")
    model.save_checkpoint(ckpt)
    model.step(batches[1])
    model.save_checkpoint(ckpt)  # over its own earlier checkpoint
    assert sorted(os.listdir(ckpt)) == ["bundle", "checkpoints", "module.json",
                                        "module.safetensors"]
    assert not [n for n in os.listdir(tmp_path) if n != "ckpt"]
    want = model.state_dict()
    resumed = cleave.Model.resume(ckpt)
    got = resumed.state_dict()
    assert set(got) == set(want)
    for k in want:
        assert torch.equal(got[k], want[k]), k
    counters = [k for k in want if k.endswith("num_batches_tracked")]
    assert counters and all(int(got[k]) == int(want[k]) for k in counters)
    # The format of earlier sessions: the name map pickled with torch.save.
    legacy = {k: (kind, v) for k, (kind, v) in resumed._sources.items()}
    os.remove(os.path.join(ckpt, "module.json"))
    os.remove(os.path.join(ckpt, "module.safetensors"))
    torch.save({"sources": legacy}, os.path.join(ckpt, "module.pt"))
    again = cleave.Model.resume(ckpt)
    for k, v in again.state_dict().items():
        assert torch.equal(v, want[k]), k
    # A link in a bundle from someone else is not carried into a new
    # checkpoint: only the bundle's own files are copied.
    secret = tmp_path / "secret.txt"
    secret.write_text("the user's private key")
    os.symlink(secret, os.path.join(ckpt, "bundle", "notes.txt"))
    os.symlink(tmp_path, os.path.join(ckpt, "bundle", "home"))
    again.save_checkpoint(str(tmp_path / "copy"))
    for root, dirs, files in os.walk(tmp_path / "copy"):
        for name in files + dirs:
            path = os.path.join(root, name)
            assert not os.path.islink(path), path
            if os.path.isfile(path):
                assert b"private key" not in open(path, "rb").read(), path
    assert cleave.Model.resume(str(tmp_path / "copy")).steps_done == 2


def test_the_offline_path(tmp_path):
    module, batch_fn, loss = models.build("frozen_mlp")
    gen = torch.Generator().manual_seed(10)
    batches = [batch_fn(gen) for _ in range(3)]
    bundle = cleave.compile(module, {"x": batches[0]["x"]},
                            output=str(tmp_path / "bundle"), tp=2, loss=loss,
                            optimizer=cleave.SGD(lr=0.1))
    assert cleave.load(str(tmp_path / "bundle")).tp == 2
    assert bundle.inspect()["mesh"]["tp"] == 2
    losses = bundle.train(3, inputs=batches, progress=False,
                          checkpoint=str(tmp_path / "ckpt"))
    model = cleave.tensor_parallel(module, {"x": batches[0]["x"]}, tp=2,
                                   loss=loss, optimizer=cleave.SGD(lr=0.1))
    assert losses == [model.step(b) for b in batches]
    assert any(p.name.startswith("step-") for p in (tmp_path / "ckpt").iterdir())
    with pytest.raises(cleave.Error, match="tp = 2 \\(2 ranks\\)"):
        bundle.train(1, inputs=batches, ranks=4)


def test_bundle_train_on_text_is_cleave_run(tmp_path):
    from make_zoo import GPT2
    torch.manual_seed(3)
    module = GPT2(vocab=256, ctx=16, d=32, heads=4, layers=1)
    ids = torch.zeros(4, 16, dtype=torch.long)
    bundle = cleave.compile(module, {"input_ids": ids, "labels": ids},
                            output=str(tmp_path / "gpt"), tp=2,
                            optimizer=cleave.AdamW(1e-3))
    text = os.path.join(HERE, "..", "..", "README.md")
    losses = bundle.train(4, text=text, progress=False, shuffle=True, seed=5)
    cli = os.path.join(HERE, "..", "..", "build", "bin", "cleave")
    if not os.path.exists(cli):
        pytest.skip("build/bin/cleave is not built")
    run = subprocess.run([cli, "run", str(tmp_path / "gpt"), "--text", text,
                          "--steps", "4", "--shuffle", "--seed", "5",
                          "--threads", "--dump", str(tmp_path / "dump")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    np.testing.assert_array_equal(np.float32(losses),
                                  np.load(tmp_path / "dump" / "loss.npy"))


def test_example_inputs_may_be_the_whole_batch():
    module, batch_fn, loss = models.build("frozen_mlp")
    batch = batch_fn(torch.Generator().manual_seed(14))
    model = cleave.tensor_parallel(module, batch, loss=loss)
    assert set(model.inputs) == {"x", "labels"}
    model.step(batch)


def test_a_model_file_path(tmp_path):
    module, batch_fn, loss = models.build("frozen_mlp")
    batch = batch_fn(torch.Generator().manual_seed(12))
    path = str(tmp_path / "mlp.onnx")
    torch.onnx.export(module, (batch["x"],), path, input_names=["x"],
                      opset_version=17, do_constant_folding=False)
    model = cleave.tensor_parallel(path, {"x": batch["x"]}, tp=2, loss=loss,
                                   optimizer=cleave.SGD(lr=0.1),
                                   freeze=["^embed\\."])
    reference = copy.deepcopy(module)
    want, state, _ = torch_step(
        reference, batch, loss,
        lambda m: torch.optim.SGD([p for p in m.parameters()
                                   if p.requires_grad], lr=0.1))
    assert model.step(batch) == pytest.approx(want, rel=1e-4)
    sd = model.state_dict()
    for key in ("fc1.weight", "fc2.bias", "embed.weight"):
        torch.testing.assert_close(sd[key], state[key], rtol=1e-4, atol=1e-5)


MPI_SCRIPT = r"""
import sys
sys.path.insert(0, {here!r})
import torch, cleave, models
module, batch_fn, loss = models.build("decoder")
gen = torch.Generator().manual_seed(13)
batches = [batch_fn(gen) for _ in range(3)]
model = cleave.tensor_parallel(module, {{"input_ids": batches[0]["input_ids"]}},
                               tp=2, loss=loss, distributed=True,
                               optimizer=cleave.AdamW(lr=1e-2))
losses = [model.step(b) for b in batches]
w = model.state_dict()["layers.1.down_proj.weight"]
import os
# Every rank saves (its shard; rank 0 the bundle and the name map).
model.save_checkpoint(os.path.join({out!r}, "ckpt"))
# One file per rank: mpirun interleaves the ranks' stdout mid-line.
rank = os.environ.get("OMPI_COMM_WORLD_RANK", "0")
with open(os.path.join({out!r}, "rank-" + rank + ".txt"), "w") as f:
    f.write("RESULT {{}} {{}}".format([float(x).hex() for x in losses],
                                    float(w.double().sum()).hex()))
"""


def mpirun():
    import shutil
    exe = shutil.which("mpirun")
    if not exe:
        pytest.skip("mpirun is not installed")
    args = [exe, "--oversubscribe", "--bind-to", "none"]
    if os.geteuid() == 0:
        args.append("--allow-run-as-root")
    return args


def test_threads_and_mpi_ranks_give_identical_results(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(MPI_SCRIPT.format(here=HERE, out=str(tmp_path)))
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    run = subprocess.run(mpirun() + ["-np", "2", sys.executable, str(script)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    lines = [(tmp_path / f"rank-{r}.txt").read_text() for r in (0, 1)]
    assert lines[0] == lines[1]
    module, batch_fn, loss = models.build("decoder")
    gen = torch.Generator().manual_seed(13)
    batches = [batch_fn(gen) for _ in range(3)]
    model = cleave.tensor_parallel(module, {"input_ids":
                                            batches[0]["input_ids"]},
                                   tp=2, loss=loss,
                                   optimizer=cleave.AdamW(lr=1e-2))
    losses = [model.step(b) for b in batches]
    w = model.state_dict()["layers.1.down_proj.weight"]
    want = "RESULT {} {}".format([float(x).hex() for x in losses],
                                 float(w.double().sum()).hex())
    assert lines[0] == want
    # The ranks' checkpoint resumes in one process, at its step and state.
    assert sorted(os.listdir(tmp_path / "ckpt")) == [
        "bundle", "checkpoints", "module.json", "module.safetensors"]
    resumed = cleave.Model.resume(str(tmp_path / "ckpt"))
    assert resumed.steps_done == 3
    assert torch.equal(resumed.state_dict()["layers.1.down_proj.weight"], w)

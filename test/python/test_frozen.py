"""Frozen weights are split like any other (issue 36): LoRA on a frozen
Llama-style base at tp 2 and 4 against PyTorch's own AdamW steps.

Each rank holds 1/tp of the base (inspect and the weight files agree), the
searched plan's collectives are those of Megatron's base layouts with
PEFT's adapter layouts (written out as a plan) and at most one [tokens, r]
reduction per adapter, and the losses and adapters after 5 steps equal
PyTorch's."""

import copy
import json
import os
import struct
import sys

import pytest
import torch

import cleave
from lora import apply_lora

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "zoo"))

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
           "down_proj")
R, STEPS = 8, 5
ADAMW = dict(lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)


def lora_llama(form, **dims):
    from idioms import Llama, lm_inputs
    torch.manual_seed(5)
    # 4 K/V heads: every projection splits by head at tp 4 as well.
    module = Llama(kv_heads=4, **dims)
    adapters = apply_lora(module, TARGETS, r=R, form=form)
    return module, adapters, lambda g: dict(lm_inputs(96, g))


def megatron_peft_plan(form):
    """Megatron's layouts of the base and PEFT's of the adapters beside
    them, as layout rules: what the search must find by itself."""
    a, b = ("lora_A\\.weight", "lora_B\\.weight") if form == "linear" \
        else ("A", "B")
    return {
        # (An int8 base's per-output-channel scales, base_layer.weight_scale,
        # match too: 1-D, split with a column-parallel weight's rows and
        # whole beside a row-parallel one.)
        r"(q|k|v|gate|up)_proj\.base_layer\.weight": "colwise",
        r"(o|down)_proj\.base_layer\.weight": "rowwise",
        r"(q|k|v|gate|up)_proj\." + b + "$": "colwise",
        r"(o|down)_proj\." + a + "$": "rowwise",
        r"_proj\.(" + a + "|" + b + ")$": "replicate",
        r"embed_tokens|lm_head": "vocab",
    }


def torch_steps(module, batches):
    opt = torch.optim.AdamW([p for p in module.parameters() if p.requires_grad],
                            **ADAMW)
    losses = []
    for batch in batches:
        opt.zero_grad()
        loss = module(**batch)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, module.state_dict()


def same_steps(model, reference, batches, adapters):
    """STEPS steps of both; the losses and adapters agree (1e-4). Returns
    both state_dicts."""
    losses = [model.step(b) for b in batches]
    want_losses, state = torch_steps(reference, batches)
    assert losses == pytest.approx(want_losses, rel=1e-4)
    sd = model.state_dict()
    for name in adapters:
        torch.testing.assert_close(sd[name], state[name], rtol=1e-4,
                                   atol=1e-5, msg=name)
    return sd, state


def weight_file_bytes(bundle):
    """Tensor bytes in each rank's weight file (safetensors)."""
    root = os.path.join(bundle, "weights")
    sizes = []
    for name in sorted(os.listdir(root)):
        with open(os.path.join(root, name), "rb") as f:
            header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
        sizes.append(sum(v["data_offsets"][1] - v["data_offsets"][0]
                         for k, v in header.items() if k != "__metadata__"))
    return sizes


def collectives(info):
    return sorted((c["phase"], c["kind"], c["bytes"])
                  for c in info["collectives"])


@pytest.mark.parametrize("tp", [2, 4])
@pytest.mark.parametrize("form", ["linear", "matmul"])
def test_lora_on_a_frozen_base(form, tp):
    module, adapters, batch_fn = lora_llama(form)
    reference = copy.deepcopy(module)
    gen = torch.Generator().manual_seed(11)
    batches = [batch_fn(gen) for _ in range(STEPS)]
    model = cleave.tensor_parallel(module, batches[0], tp=tp, loss="auto",
                                   optimizer=cleave.AdamW(**ADAMW))
    info = model.inspect()

    # What trains is the adapters; the base is frozen state, 1/tp per rank
    # (the norm vectors stay whole: under 1% of it).
    assert sorted(p["name"] for p in info["parameters"]) == sorted(adapters)
    assert info["buffers"] and not any(b["trainable"] for b in info["buffers"])
    base = [b for b in info["buffers"] if b["name"].endswith(".weight")]
    whole = sum(4 * torch.Size(b["shape"]).numel() for b in base)
    local = sum(4 * torch.Size(b["local_shape"]).numel() for b in base)
    assert abs(local - whole / tp) <= 0.05 * whole / tp, (local, whole, tp)
    # Each rank's weight file holds what inspect says the rank holds.
    memory = info["memory_per_rank"]
    assert weight_file_bytes(model.bundle) == \
        [memory["parameters"] + memory["buffers"]] * tp

    # The collectives of Megatron's and PEFT's layouts, found unaided: the
    # base's, plus one [tokens, r] sum per adapter at most.
    tokens = batches[0]["input_ids"].numel()
    got = collectives(info)
    want = collectives(cleave.tensor_parallel(
        copy.deepcopy(reference), batches[0], tp=tp, loss="auto",
        optimizer=cleave.AdamW(**ADAMW),
        plan=megatron_peft_plan(form)).inspect())
    assert got == want
    assert all(kind == "all_reduce" for _, kind, _ in got)
    assert sum(b == tokens * R * 4 for _, _, b in got) <= len(adapters) // 2

    sd, state = same_steps(model, reference, batches, adapters)
    for name, value in state.items():
        if name not in adapters:
            assert torch.equal(sd[name], value), name


def test_adapter_only_checkpoints(tmp_path):
    """PEFT's adapter-only save: state_dict(trainable_only=True) and
    export(..., trainable_only=True) hold the adapters and nothing else."""
    from cleave._export import read_safetensors
    module, adapters, batch_fn = lora_llama("linear")
    batch = batch_fn(torch.Generator().manual_seed(3))
    model = cleave.tensor_parallel(module, batch, tp=2, loss="auto",
                                   optimizer=cleave.AdamW(**ADAMW))
    model.step(batch)
    full = model.state_dict()
    only = model.state_dict(trainable_only=True)
    assert sorted(only) == sorted(adapters)
    for name, value in only.items():
        assert torch.equal(value, full[name]), name
    model.export(tmp_path / "adapters.safetensors", trainable_only=True)
    saved = read_safetensors(str(tmp_path / "adapters.safetensors"))
    assert sorted(saved) == sorted(adapters)
    for name, value in saved.items():
        assert (value == full[name].numpy()).all(), name
    with pytest.raises(cleave.Error, match="name the output .safetensors"):
        model.export(tmp_path / "adapters.onnx", trainable_only=True)
    with pytest.raises(cleave.ArgumentTypeError):
        model.state_dict(trainable_only="yes")
    # PyTorch takes them back on top of its own frozen base.
    fresh, _, _ = lora_llama("linear")
    fresh.load_state_dict(only, strict=False)
    assert torch.equal(fresh.layers[1].q_proj.lora_B.weight,
                       full["layers.1.q_proj.lora_B.weight"])


@pytest.mark.parametrize("form", ["linear", "matmul"])
def test_merge_adapters(form, tmp_path):
    """export(..., merge_adapters=True): W + (alpha / r) B A in every base,
    the adapters gone (PEFT's merge_and_unload), found from the graph; the
    merged model's loss is the adapted model's."""
    import onnx
    import onnx.numpy_helper as nh
    from cleave._export import read_safetensors
    import lora
    module, adapters, batch_fn = lora_llama(form)
    gen = torch.Generator().manual_seed(8)
    batches = [batch_fn(gen) for _ in range(3)]
    model = cleave.tensor_parallel(module, batches[0], tp=2, loss="auto",
                                   optimizer=cleave.AdamW(**ADAMW))
    for b in batches[:2]:
        model.step(b)
    trained = copy.deepcopy(module)
    trained.load_state_dict(model.state_dict())
    want = {}
    for name, m in trained.named_modules():
        if isinstance(m, (lora.LoraLinear, lora.LoraMatmul)):
            a, b = (m.lora_A.weight, m.lora_B.weight) \
                if isinstance(m, lora.LoraLinear) else (m.A, m.B)
            want[name + ".base_layer.weight"] = (
                m.base_layer.weight.double() +
                m.scaling * b.double() @ a.double())
    assert len(want) == 14

    path = str(tmp_path / "merged.onnx")
    model.export(path, merge_adapters=True)
    merged = onnx.load(path)
    inits = {t.name: nh.to_array(t) for t in merged.graph.initializer}
    assert not set(adapters) & set(inits)
    for name, value in want.items():
        np_value = torch.tensor(inits[name], dtype=torch.float64)
        torch.testing.assert_close(np_value, value, rtol=1e-5, atol=1e-6,
                                   msg=name)
    # The merged model computes the adapted one's loss.
    with torch.no_grad():
        expected = trained(**batches[2]).item()
    check = cleave.tensor_parallel(path, batches[2], tp=2, loss="auto",
                                   optimizer=cleave.SGD(lr=1e-9))
    assert check.step(batches[2]) == pytest.approx(expected, rel=1e-4)

    model.export(tmp_path / "merged.safetensors", merge_adapters=True)
    saved = read_safetensors(str(tmp_path / "merged.safetensors"))
    assert set(saved) == set(model.state_dict()) - set(adapters)
    for name in want:
        assert (saved[name] == inits[name]).all(), name


def test_merge_refuses_what_is_not_an_adapter(tmp_path):
    import models
    module, batch_fn, loss = models.build("frozen_mlp")
    batch = batch_fn(torch.Generator().manual_seed(2))
    model = cleave.tensor_parallel(module, {"x": batch["x"]}, loss=loss)
    with pytest.raises(cleave.Error, match="has no low-rank adapter"):
        model.export(tmp_path / "m.onnx", merge_adapters=True)
    assert not os.path.exists(tmp_path / "m.onnx")
    with pytest.raises(cleave.ArgumentError):
        model.export(tmp_path / "m.safetensors", merge_adapters=True,
                     trainable_only=True)


def test_mesh_chooser_counts_the_split_frozen_base():
    """The mesh chooser prices a candidate with the memory inspect reports
    (the frozen base split under tp), so a budget that only tp's split base
    fits makes it choose tp."""
    module, _, batch_fn = lora_llama("linear")
    batch = batch_fn(torch.Generator().manual_seed(11))
    free = cleave.tensor_parallel(copy.deepcopy(module), batch, devices=2,
                                  loss="auto", optimizer=cleave.AdamW(**ADAMW))
    info = free.inspect()
    m = info["memory_per_rank"]
    chosen = [c for c in info["mesh_choice"]["candidates"] if c["chosen"]][0]
    # The rank's share of the batch, AdamW's step number (an i64) and the
    # learning rate (an f32 the schedule feeds).
    inputs = sum(v.numel() * v.element_size() for v in batch.values()) \
        // chosen["dp"] + 8 + 4
    # The new adapters and their moments, and the loss: made beside the
    # inputs, outside the arena.
    assert m["results"] == m["parameters"] + m["optimizer_state"] + 4, m
    assert chosen["memory_bytes"] == \
        m["parameters"] + m["buffers"] + m["optimizer_state"] + \
        m["activations_peak"] + m["results"] + inputs
    by_mesh = {(c["dp"], c["tp"]): c["memory_bytes"]
               for c in info["mesh_choice"]["candidates"]}
    # Just over what tp needs: below every dp candidate, ZeRO's included
    # (the chooser tries those under a budget).
    budget = int(by_mesh[(1, 2)] * 1.02)
    assert budget < by_mesh[(2, 1)]
    tight = cleave.tensor_parallel(module, batch, devices=2, loss="auto",
                                   memory_per_device=budget,
                                   optimizer=cleave.AdamW(**ADAMW))
    assert tight.inspect()["mesh"] == {"tp": 2}
    dp = [c for c in tight.inspect()["mesh_choice"]["candidates"]
          if c["tp"] == 1]
    assert dp and all("refused" in c and c["memory_bytes"] > budget
                      for c in dp), dp


def test_merge_a_biased_linear_with_dropout(tmp_path):
    """A Linear with bias on a 2-D input (torch.onnx writes Gemm(X, W, b))
    and PEFT's lora_dropout on the adapter's input: merged all the same; a
    head trained whole (PEFT's modules_to_save) stays as it is."""
    import onnx
    import onnx.numpy_helper as nh
    from lora import LoraLinear
    torch.manual_seed(3)
    base = torch.nn.Linear(16, 12)
    module = torch.nn.Sequential(LoraLinear(base, 4, 8, dropout=0.1),
                                 torch.nn.ReLU(), torch.nn.Linear(12, 3))
    module[0].base_layer.requires_grad_(False)
    x = torch.randn(6, 16)
    model = cleave.tensor_parallel(module, {"input": x}, loss="mse",
                                   optimizer=cleave.SGD(lr=0.1))
    model.step({"input": x, "labels": torch.randn(6, 3)})
    sd = model.state_dict()
    path = str(tmp_path / "merged.onnx")
    model.export(path, merge_adapters=True)
    merged = onnx.load(path)
    inits = {t.name: nh.to_array(t) for t in merged.graph.initializer}
    want = sd["0.base_layer.weight"].double() + \
        2.0 * sd["0.lora_B.weight"].double() @ sd["0.lora_A.weight"].double()
    torch.testing.assert_close(
        torch.tensor(inits["0.base_layer.weight"], dtype=torch.float64), want,
        rtol=1e-5, atol=1e-6)
    assert "0.lora_A.weight" not in inits and \
        not any(n.op_type == "Dropout" for n in merged.graph.node)
    for name in ("0.base_layer.bias", "2.weight", "2.bias"):
        assert torch.equal(torch.from_numpy(inits[name].copy()), sd[name])


def compiled(module, batch_fn, tp):
    """STEPS batches, and the module compiled at tp and inspected."""
    gen = torch.Generator().manual_seed(11)
    batches = [batch_fn(gen) for _ in range(STEPS)]
    model = cleave.tensor_parallel(module, batches[0], tp=tp, loss="auto",
                                   optimizer=cleave.AdamW(**ADAMW))
    return batches, model, model.inspect()


@pytest.mark.parametrize("tp", [2, 4])
@pytest.mark.parametrize("group", [0, 16])
def test_lora_on_an_int8_base(tp, group):
    """The same LoRA on a weight-only int8 base (lora.Int8Linear: scales per
    output channel, or per group of 16 inputs as GPTQ's): each rank holds
    1/tp of the int8 bytes, the plan multiplies them without an f32 copy
    (matmul_dequant, forward and backward), the collectives are the float
    base's (Megatron's), and the losses and adapters after 5 steps equal
    PyTorch's running the same dequantized matmul."""
    from lora import quantize_int8
    module, adapters, batch_fn = lora_llama("linear")
    float_base = copy.deepcopy(module)
    quantize_int8(module, group)
    reference = copy.deepcopy(module)
    batches, model, info = compiled(module, batch_fn, tp)

    held = {b["name"]: b for b in info["buffers"]}
    quantized = [n for n in held if n.endswith("_proj.base_layer.weight")]
    assert len(quantized) == 7 * 2
    assert all(held[n]["dtype"] == "i8" for n in quantized)
    base = quantized + [n + "_scale" for n in quantized]
    whole = sum(torch.Size(held[n]["shape"]).numel() for n in quantized)
    local = sum(torch.Size(held[n]["local_shape"]).numel() for n in quantized)
    assert abs(local - whole / tp) <= 0.05 * whole / tp, (local, whole, tp)
    # A scale (one f32 per output channel or group, 1/64 or 1/16 of its
    # weight's bytes here) is split with its weight or kept whole: the
    # search weighs the few bytes against nothing else.
    for n in quantized:
        scale, weight = held[n + "_scale"], held[n]
        per_group = [weight["local_shape"][0],
                     weight["local_shape"][1] // group] if group else \
            weight["local_shape"][:1]
        assert scale["local_shape"] in (per_group, scale["shape"]), n
    memory = info["memory_per_rank"]
    assert weight_file_bytes(model.bundle) == \
        [memory["parameters"] + memory["buffers"]] * tp
    # Every base product (forward, and input gradient where one is needed)
    # reads the int8 bytes: the products of the float base's plan, with no
    # cast left to make an f32 copy.
    kernels = info["kernels"]
    float_info = cleave.tensor_parallel(
        float_base, batches[0], tp=tp, loss="auto",
        optimizer=cleave.AdamW(**ADAMW)).inspect()
    floats = float_info["kernels"]
    assert kernels["matmul_dequant"] >= len(quantized)
    assert kernels["matmul"] + kernels["matmul_dequant"] == floats["matmul"]
    assert kernels.get("cast", 0) == floats.get("cast", 0)

    # The float base's collectives, which test_lora_on_a_frozen_base shows
    # are Megatron's and PEFT's.
    assert collectives(info) == collectives(float_info)

    sd, state = same_steps(model, reference, batches, adapters)
    for name in base:
        assert sd[name].dtype == state[name].dtype, name
        assert torch.equal(sd[name], state[name]), name


@pytest.mark.parametrize("tp", [2, 4])
def test_lora_on_a_bf16_base(tp, tmp_path):
    """The LoRA model in bfloat16 (module.to(torch.bfloat16), as a PEFT
    model on a bf16 checkpoint) trains in float32 (no precision= given):
    the adapters on f32 masters, the frozen base held as its bf16 bytes,
    1/tp per rank, and multiplied without an f32 copy. The losses and
    adapters after 5 steps equal PyTorch's float32 steps on the same bf16
    values (the same dequantized matmul), and state_dict gives bf16
    back."""
    module, adapters, batch_fn = lora_llama("linear")
    module.to(torch.bfloat16)
    reference = copy.deepcopy(module).float()
    batches, model, info = compiled(module, batch_fn, tp)
    held = {b["name"]: b for b in info["buffers"]}
    assert held and all(b["dtype"] == "bf16" for b in held.values()
                        if b["name"].endswith(".weight"))
    assert all(p["dtype"] == "f32" for p in info["parameters"])
    base = [n for n in held if n.endswith("_proj.base_layer.weight")]
    whole = sum(torch.Size(held[n]["shape"]).numel() for n in base)
    local = sum(torch.Size(held[n]["local_shape"]).numel() for n in base)
    assert abs(local - whole / tp) <= 0.05 * whole / tp, (local, whole, tp)
    memory = info["memory_per_rank"]
    assert weight_file_bytes(model.bundle) == \
        [memory["parameters"] + memory["buffers"]] * tp
    assert info["kernels"]["matmul_dequant"] >= len(base)

    losses = [model.step(b) for b in batches]
    want_losses, state = torch_steps(reference, batches)
    assert losses == pytest.approx(want_losses, rel=1e-4)
    sd = model.state_dict()
    for name in adapters:
        assert sd[name].dtype == torch.bfloat16, name
        # Both f32 masters rounded once to bf16: at most one step apart.
        torch.testing.assert_close(sd[name].float(), state[name], rtol=8e-3,
                                   atol=1e-5, msg=name)
    for name in base:
        assert sd[name].dtype == torch.bfloat16, name
        assert torch.equal(sd[name].float(), state[name]), name
    # Exported as the graph's float32: the bf16 values, exactly.
    from cleave._export import read_safetensors
    model.export(str(tmp_path / "out.safetensors"))
    out = read_safetensors(str(tmp_path / "out.safetensors"))
    for name in base:
        assert torch.equal(torch.from_numpy(out[name]), state[name]), name

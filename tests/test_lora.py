"""Adapters round-trip between a PEFT model, a flat dict, a flat vector and a PEFT folder on disk."""

import json

import pytest
import torch

from pubswap.lora import (
    adapter_from_model,
    flatten,
    load_into_model,
    peft_lora_config,
    read_adapter,
    save_adapter,
    squared_distance,
    unflatten,
)


@pytest.fixture(scope="module")
def peft_model(tiny_model_dir):
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    model = get_peft_model(base, peft_lora_config(r=8, alpha=16, target_modules=["all-linear"]))
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)  # B starts at zero; make the adapter change the output
    return model


def test_all_linear_targets_every_projection_but_not_lm_head(peft_model):
    names = adapter_from_model(peft_model)
    targets = {k.split(".")[-3] for k in names}
    assert targets == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert len(names) == 2 * 7 * 2  # A and B, 7 modules, 2 layers


def test_adapter_folder_loads_with_peft_and_reproduces_logits(peft_model, tiny_model_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    adapter = adapter_from_model(peft_model)
    out = save_adapter(tmp_path / "adapter", adapter, peft_model.peft_config["default"])
    assert (out / "adapter_model.safetensors").is_file()
    assert json.loads((out / "adapter_config.json").read_text())["r"] == 8

    ids = torch.tensor([[5, 17, 42, 99, 3]])
    fresh = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), out)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        want = peft_model(ids).logits
        got = fresh(ids).logits
        plain = base(ids).logits
    assert torch.allclose(want, got, atol=1e-6)
    assert not torch.allclose(want, plain, atol=1e-3)  # the adapter really changes the model
    assert all(torch.equal(read_adapter(out)[k], adapter[k]) for k in adapter)


def test_save_overwrites_atomically(peft_model, tmp_path):
    adapter = adapter_from_model(peft_model)
    path = tmp_path / "a"
    save_adapter(path, adapter, peft_model.peft_config["default"])
    doubled = {k: 2 * v for k, v in adapter.items()}
    save_adapter(path, doubled, peft_model.peft_config["default"])
    assert all(torch.equal(read_adapter(path)[k], doubled[k]) for k in adapter)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]  # no temp folders left behind


def test_load_into_model_checks_keys_and_sets_weights(peft_model):
    adapter = adapter_from_model(peft_model)
    zeroed = {k: torch.zeros_like(v) for k, v in adapter.items()}
    load_into_model(peft_model, zeroed)
    assert squared_distance(adapter_from_model(peft_model), zeroed).item() == 0.0
    load_into_model(peft_model, adapter)
    assert squared_distance(adapter_from_model(peft_model), adapter).item() == 0.0
    with pytest.raises(ValueError, match="do not match"):
        load_into_model(peft_model, dict(list(adapter.items())[:-1]))


def test_flatten_unflatten_roundtrip():
    a = {"b": torch.arange(6.0).reshape(2, 3), "a": torch.tensor([[7.0]]).bfloat16()}
    flat, spec = flatten(a)
    assert flat.tolist() == [7.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0]  # sorted by name
    back = unflatten(flat, spec)
    assert back["a"].dtype == torch.bfloat16 and torch.equal(back["b"], a["b"])
    with pytest.raises(ValueError, match="elements"):
        unflatten(flat[:-1], spec)

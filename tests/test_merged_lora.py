"""The merged-adapter path's pure parts: PEFT names -> (A, B) per module, and the rpc packing."""

import pytest
import torch

from actors.merged_lora import lora_deltas, pack_deltas, unpack_deltas


def test_deltas_from_peft_names_and_packing_round_trip():
    gen = torch.Generator().manual_seed(0)
    adapter = {
        "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": torch.randn(4, 8, generator=gen),
        "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight": torch.randn(8, 4, generator=gen),
        "base_model.model.model.layers.1.mlp.down_proj.lora_A.weight": torch.randn(4, 16, generator=gen).bfloat16(),
        "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight": torch.randn(8, 4, generator=gen),
    }
    deltas = lora_deltas(adapter)
    assert sorted(deltas) == ["model.layers.0.self_attn.q_proj", "model.layers.1.mlp.down_proj"]
    a, b = deltas["model.layers.1.mlp.down_proj"]
    assert a.dtype == torch.float32 and a.shape == (4, 16) and b.shape == (8, 4)
    back = unpack_deltas(pack_deltas(deltas))
    for m, (a, b) in deltas.items():
        assert torch.equal(back[m][0], a) and torch.equal(back[m][1], b)
    assert unpack_deltas(pack_deltas(None)) == {}


def test_a_without_b_is_refused():
    with pytest.raises(ValueError, match="without B"):
        lora_deltas({"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": torch.zeros(2, 2)})

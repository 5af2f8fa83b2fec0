"""A saved adapter folder is served by vLLM: its log-probs match PEFT's for the same adapter."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pubswap.lora import adapter_from_model, peft_lora_config, save_adapter

pytest.importorskip("vllm")


def test_vllm_serves_saved_adapter_with_peft_logprobs(tiny_model_dir, tmp_path):
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                           peft_lora_config(r=8, alpha=16, target_modules=["all-linear"]))
    torch.manual_seed(2)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3)
    adapter_dir = save_adapter(tmp_path / "adapter", adapter_from_model(model), model.peft_config["default"])

    ids = [7, 23, 51, 88, 120, 14, 3, 200, 64, 9]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits.float()
        peft_lp = torch.log_softmax(logits[0, :-1], -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
        with model.disable_adapter():
            base_lp = torch.log_softmax(model(torch.tensor([ids])).logits[0, :-1].float(), -1)
        base_lp = base_lp.gather(1, torch.tensor(ids[1:])[:, None])[:, 0]

    out = tmp_path / "lp.json"
    helper = Path(__file__).with_name("vllm_prompt_logprobs.py")
    proc = subprocess.run([sys.executable, str(helper), str(tiny_model_dir), str(adapter_dir), json.dumps(ids),
                           str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    vllm_lp = torch.tensor(json.loads(out.read_text()))
    assert torch.allclose(vllm_lp, peft_lp, atol=2e-3), (vllm_lp, peft_lp)
    assert not torch.allclose(vllm_lp, base_lp, atol=2e-2)  # the adapter is really active

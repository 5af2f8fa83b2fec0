"""A merged engine (the CPU default) rebuilds its weights for each client's adapter; vLLM's prefix cache
keys KV blocks by tokens only, so without a reset a client's long prompt would reuse KV computed under
another client's weights."""

import pytest
import torch

from pubswap.config import GRPOConfig, LoraConfig
from pubswap.learner.trainer import GRPOTrainer

pytest.importorskip("vllm")


def test_a_long_prompt_is_not_served_kv_of_another_adapter(tiny_model_dir):
    from actors.rollout import VLLMEngine

    t = GRPOTrainer.load(str(tiny_model_dir), LoraConfig(r=8, alpha=16), GRPOConfig(), dtype="float32", device="cpu")
    gens = [torch.Generator().manual_seed(s) for s in (1, 2)]
    adapters = [{k: torch.randn(v.shape, generator=g) * 0.3 for k, v in t.adapter().items()} for g in gens]
    engine = VLLMEngine(str(tiny_model_dir), 8, 320, "float32", 0, merged=True, lora_scale=2.0)
    prompt = [5 + (i * 7) % 300 for i in range(260)]  # two full 128-token blocks: cacheable
    for key, a in enumerate(adapters):
        engine.set_adapter(None, key=key, tensors=a)

    def answer(key):
        (out,) = engine.generate([prompt], n=1, temperature=1.0, max_tokens=4, seeds=[7], keys=[key], logprobs=True)
        return out[0].logprobs

    try:
        answer(0)  # fills the prefix cache with the prompt's KV under adapter 0
        after_other = answer(1)
        engine.llm.reset_prefix_cache()
        fresh = answer(1)
    finally:
        engine.llm.llm_engine.engine_core.shutdown()  # not at interpreter exit, when logging is gone
    assert torch.allclose(torch.tensor(after_other), torch.tensor(fresh), atol=1e-4), (after_other, fresh)

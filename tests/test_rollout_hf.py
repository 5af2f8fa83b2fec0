"""The transformers rollout engine: seeded, and its sampling log-probs are the trainer's at the rollout
temperature (the behaviour policy of truncated IS when the HF backend is used)."""

import torch

from actors.rollout import HFEngine
from pubswap.config import GRPOConfig, LoraConfig
from pubswap.learner.trainer import GRPOTrainer, Sample


def test_hf_engine_sampling_logprobs_match_the_trainer(tiny_model_dir, tmp_path):
    trainer = GRPOTrainer.load(str(tiny_model_dir), LoraConfig(r=4, alpha=8), GRPOConfig())
    tok = trainer.tokenizer
    engine = HFEngine(str(tiny_model_dir), "float32", 0, tok.eos_token_id, tok.pad_token_id)
    prompt = tuple(tok("Calculate 2 + 3.")["input_ids"])
    (first,) = engine.generate([prompt], n=3, temperature=0.7, max_tokens=8, seeds=[11], logprobs=True)
    (again,) = engine.generate([prompt], n=3, temperature=0.7, max_tokens=8, seeds=[11])
    assert [c.token_ids for c in first] == [c.token_ids for c in again]  # seeded; logprobs change nothing
    assert all(c.logprobs == () for c in again)
    for c in first:
        assert len(c.logprobs) == len(c.token_ids) > 0
        want = trainer.response_logprobs([Sample(prompt, c.token_ids, 0.0)], temperature=0.7, use_adapter=False)[0]
        torch.testing.assert_close(torch.tensor(c.logprobs), want, atol=1e-4, rtol=0)

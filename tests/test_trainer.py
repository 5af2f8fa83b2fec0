"""The PEFT GRPO learner moves log-probs in the direction of the advantages."""

import pytest
import torch

from pubswap.algorithms.aggregation import FedProx
from pubswap.config import GRPOConfig, LoraConfig
from pubswap.learner.trainer import GRPOTrainer, Sample, pad_batch


def test_pad_batch_masks_exactly_the_response_tokens():
    ids, attn, mask = pad_batch([Sample((1, 2), (3, 4, 5), 1.0), Sample((6,), (7,), -1.0)], pad_id=0)
    assert ids.tolist() == [[1, 2, 3, 4, 5], [6, 7, 0, 0, 0]]
    assert attn.tolist() == [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
    # position t scores token t+1: responses are tokens 2..4 of row 0, token 1 of row 1
    assert mask.tolist() == [[0, 1, 1, 1], [1, 0, 0, 0]]


@pytest.fixture(scope="module")
def trainer(tiny_model_dir):
    grpo = GRPOConfig(lr=5e-3, grad_epochs=2, kl_coef=1e-4)
    return GRPOTrainer.load(
        str(tiny_model_dir), LoraConfig(r=8, alpha=16), grpo, dtype="float32", strategy=FedProx(mu=0.1)
    )


def test_step_raises_positive_and_lowers_negative_advantage_responses(trainer):
    good = Sample((5, 6, 7), (20, 21, 22, 23), advantage=1.0)
    bad = Sample((5, 6, 7), (30, 31, 32, 33), advantage=-1.0)
    before = [lp.sum().item() for lp in trainer.response_logprobs([good, bad])]
    anchor = trainer.adapter()
    trainer.set_adapter(anchor)
    metrics = {}
    for _ in range(3):
        metrics = trainer.step([good, bad])
    after = [lp.sum().item() for lp in trainer.response_logprobs([good, bad])]
    assert after[0] > before[0] and after[1] < before[1]
    assert metrics["penalty"] > 0  # FedProx pulls toward the round-start adapter once it has moved
    assert metrics["kl"] > 0
    # the base model (adapter disabled) is untouched: it is the KL reference
    base = trainer.response_logprobs([good], use_adapter=False)[0].sum().item()
    assert base == pytest.approx(before[0], abs=1e-4)  # B starts at zero: initial adapter == base


def test_set_adapter_restores_weights_and_anchor(trainer):
    snapshot = trainer.adapter()
    trainer.step([Sample((1, 2), (3, 4), 1.0), Sample((1, 2), (5, 6), -1.0)])
    assert any(not torch.equal(snapshot[k], v) for k, v in trainer.adapter().items())
    trainer.set_adapter(snapshot)
    assert all(torch.equal(snapshot[k], v) for k, v in trainer.adapter().items())
    assert trainer._lora_params_by_adapter_key().keys() == snapshot.keys()


def test_zero_advantages_change_nothing_without_kl_or_prox(tiny_model_dir):
    t = GRPOTrainer.load(
        str(tiny_model_dir),
        LoraConfig(r=8, alpha=16),
        GRPOConfig(lr=1e-2, kl_coef=0.0, weight_decay=0.0),
        dtype="float32",
    )
    before = t.adapter()
    t.step([Sample((1, 2), (3, 4), 0.0), Sample((1, 2), (5, 6), 0.0)])
    assert all(torch.equal(before[k], v) for k, v in t.adapter().items())


def test_ffa_lora_trains_b_only_and_a_lower_rank_client_only_its_components(tiny_model_dir):
    from pubswap.algorithms.aggregation import FFALoRA, FlexLoRA
    from pubswap.lora import truncate_rank

    batch = [Sample((5, 6, 7), (20, 21), 1.0), Sample((5, 6, 7), (30, 31), -1.0)]
    ffa = GRPOTrainer.load(
        str(tiny_model_dir), LoraConfig(r=8, alpha=16), GRPOConfig(lr=1e-2), dtype="float32", strategy=FFALoRA()
    )
    before = ffa.adapter()
    ffa.step(batch)
    ffa.step(batch)
    after = ffa.adapter()
    assert all(torch.equal(before[k], after[k]) for k in before if "lora_A" in k)  # A: its seeded init
    assert any(not torch.equal(before[k], after[k]) for k in before if "lora_B" in k)

    # under FedProx the penalty would pull the zero components toward the full-rank global: the trainer
    # must zero their gradients (plain LoRA leaves a zeroed component at zero by itself)
    flex = GRPOTrainer.load(
        str(tiny_model_dir),
        LoraConfig(r=8, alpha=16),
        GRPOConfig(lr=1e-2),
        dtype="float32",
        strategy=FedProx(mu=1.0, inner=FlexLoRA()),
    )
    gen = torch.Generator().manual_seed(0)
    full = {k: v + 0.1 * torch.randn(v.shape, generator=gen) for k, v in flex.adapter().items()}
    flex.set_adapter(full)  # the round-start global, the penalty's anchor
    flex.activate(truncate_rank(full, 3), flex.new_optimizer())
    flex.rank = 3  # a client of rank 3 among rank-8 adapters
    flex.step(batch)
    flex.step(batch)
    got = flex.adapter()
    for k, v in got.items():
        beyond = v[3:] if "lora_A" in k else v[:, 3:]
        assert not beyond.any(), k  # components 3.. stay zero
    assert any(not torch.equal(v, truncate_rank(flex.anchor, 3)[k]) for k, v in got.items() if "lora_B" in k)

"""The GRPO learner with its full-parameter policy (dsgd, chocosgd) and SeedFlood's zeroth-order step."""

import pytest
import torch

from pubswap.algorithms.gossip import SeedMessage, apply_messages, flood_period
from pubswap.algorithms.topology import make_topology
from pubswap.config import GRPOConfig, LoraConfig
from pubswap.learner.trainer import GRPOTrainer, Sample
from pubswap.methods.seedflood import zo_step

GOOD = Sample((5, 6, 7), (20, 21, 22, 23), advantage=1.0)
BAD = Sample((5, 6, 7), (30, 31, 32, 33), advantage=-1.0)


def test_full_parameter_step_trains_every_weight_against_a_frozen_base(tiny_model_dir):
    t = GRPOTrainer.load(
        str(tiny_model_dir), LoraConfig(), GRPOConfig(lr=1e-3, kl_coef=1e-2), dtype="float32", policy="full"
    )
    start = t.adapter()
    base_good = t.response_logprobs([GOOD])[0].sum().item()
    for _ in range(3):
        metrics = t.step([GOOD, BAD])
    after = t.adapter()
    assert set(after) == {n for n, _ in t.model.named_parameters()}  # every weight, no LoRA tensor
    assert all(
        not torch.equal(start[k], after[k])
        for k in ("model.embed_tokens.weight", "model.layers.0.mlp.down_proj.weight")
    )
    good, bad = (lp.sum().item() for lp in t.response_logprobs([GOOD, BAD]))
    assert good > base_good
    assert metrics["kl"] > 0
    # the KL reference is a frozen copy of the base model: it did not move with the trained weights
    assert t.response_logprobs([GOOD], use_adapter=False)[0].sum().item() == pytest.approx(base_good, abs=1e-5)
    # weights round-trip exactly through the dict every gossip rule works on
    t.set_adapter(start)
    assert all(torch.equal(start[k], v) for k, v in t.adapter().items())


@pytest.mark.parametrize("policy", ["lora", "full"])
def test_zeroth_order_step_is_its_message_and_descends(tiny_model_dir, policy):
    t = GRPOTrainer.load(
        str(tiny_model_dir), LoraConfig(r=8, alpha=16), GRPOConfig(kl_coef=0.0), dtype="float32", policy=policy
    )
    if policy == "lora":  # B = 0 leaves the loss flat in A: start from a nonzero adapter
        gen = torch.Generator().manual_seed(0)
        t.set_adapter({k: torch.randn(v.shape, generator=gen) * 0.1 for k, v in t.adapter().items()})
    x = t.adapter()

    def objective() -> float:  # the advantage-weighted log-likelihood the GRPO loss descends on
        good, bad = t.response_logprobs([GOOD, BAD])
        return (good.sum() - bad.sum()).item()

    before = objective()
    # a small step: z spans every trained weight, and along it the curvature soon outweighs the slope
    scalar, metrics = zo_step(t, [GOOD, BAD], seed=11, eps=1e-3, lr=1e-5)
    assert scalar != 0.0 and metrics["zo_scalar"] == scalar
    assert scalar == pytest.approx(1e-5 * metrics["projected_grad"], rel=1e-6)
    # the step is exactly what its 20-byte message rebuilds anywhere
    moved = t.adapter()
    assert all(torch.equal(moved[k], v) for k, v in apply_messages(x, [SeedMessage(1, 0, 11, scalar)]).items())
    # to first order the loss falls by lr * g^2 along the direction: good responses gain on bad ones
    assert objective() > before


@pytest.mark.parametrize("kind,n", [("ring", 16), ("meshgrid", 16), ("ring", 7)])
def test_a_flood_delivers_after_the_diameter_and_forwards_every_message_once(kind, n):
    g = make_topology(kind, n)
    new = [[SeedMessage(1, i, i, 0.5)] for i in range(n)]
    hops, sent, received = flood_period(g, new)
    assert hops == g.diameter()
    # every client forwards each of the n messages once, to each neighbour
    assert sent == [n * SeedMessage.NBYTES * len(nb) for nb in g.neighbours]
    assert sum(received) == sum(sent)
    assert received == [sum(n * SeedMessage.NBYTES for _ in nb) for nb in g.neighbours]

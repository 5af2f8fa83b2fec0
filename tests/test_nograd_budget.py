"""The no-grad passes (old policy, reference) run in larger micro-batches than the training passes,
sized from the model's shape to fit the training micro-batch's activation memory; their log-probs are
cut back into the training plan's micro-batches, so the step is the one with equal budgets."""

from dataclasses import replace

import pytest
import torch
from test_shared_prefix import make, ragged_groups
from transformers import AutoConfig

from pubswap.learner.gpu_budget import NOGRAD_FACTOR_CAP, nograd_micro_batch_tokens


def test_the_budget_follows_the_activations_a_pass_keeps():
    qwen = AutoConfig.from_pretrained("configs/models/qwen3-1.7b.json")
    plain = nograd_micro_batch_tokens(qwen, 2, False, 16384)
    ckpt = nograd_micro_batch_tokens(qwen, 2, True, 16384)
    # without checkpointing training keeps 28 layers' activations: capped; with it, each layer's input
    assert plain == NOGRAD_FACTOR_CAP * 16384
    assert 16384 < ckpt < plain
    one_layer = qwen.to_dict() | {"num_hidden_layers": 1}
    one_layer.pop("layer_types", None)
    assert nograd_micro_batch_tokens(type(qwen).from_dict(one_layer), 2, True, 16384) == 16384  # never below


def count_old_passes(t) -> list[int]:
    """The sizes (micro-batches) of `t`'s old-policy passes, appended as they run."""
    seen: list[int] = []
    run = t.old_logprobs_and_entropy

    def counted(mbs):
        seen.append(len(mbs))
        return run(mbs)

    t.old_logprobs_and_entropy = counted
    return seen


@pytest.mark.parametrize(
    "shared,extra",
    [
        (True, {}),  # KL reference and truncated IS over swapped responses
        (False, {"kl_coef": 0.0, "mini_batch_size": 2, "b": 4}),  # padded rows, mini-batches, inert rows cut out
    ],
)
def test_a_step_with_larger_nograd_micro_batches_is_the_same_step(tiny_model_dir, shared, extra):
    samples = ragged_groups(2)
    if extra.get("kl_coef") == 0.0:  # a group of equal rewards: its rows are not trained
        samples = [replace(s, advantage=0.0) if s.prompt_ids == samples[-1].prompt_ids else s for s in samples]
    results, passes = [], []
    budget = 24 if shared else 40  # a padded micro-batch holds one or two rows
    for nograd in (budget, budget * 6):
        t = make(tiny_model_dir, shared=shared, budget=budget, nograd_micro_batch_tokens=nograd, **extra)
        assert t.nograd_tokens == nograd
        seen = count_old_passes(t)
        metrics = t.step(samples, owner=0)
        results.append((metrics, t.adapter()))
        passes.append(sum(seen))
    assert passes[1] < passes[0]  # fewer, larger forwards
    (m0, a0), (m1, a1) = results
    assert m1["micro_batches"] == m0["micro_batches"]  # the training plan is the same
    for k in ("loss", "pg_loss", "kl", "clip_frac", "entropy", "grad_norm", "nll_own", "nll_swapped"):
        assert m1[k] == pytest.approx(m0[k], rel=1e-4, abs=1e-6), k
    for k in a0:
        torch.testing.assert_close(a1[k], a0[k], rtol=1e-4, atol=2e-5)


def test_the_default_is_derived_from_the_model(tiny_model_dir):
    t = make(tiny_model_dir, shared=True, budget=64)  # nograd_micro_batch_tokens 0: derived
    assert t.nograd_tokens == nograd_micro_batch_tokens(t.causal().config, 4, False, 64) > 64

"""Hand-computed checks of the GRPO objective, including the sign of its gradients."""

import math

import pytest
import torch

from pubswap.algorithms.grpo import (
    clipped_surrogate,
    group_advantages,
    grpo_loss,
    kl_k3,
    token_mean,
    truncated_is_weights,
    zero_advantage_fraction,
)


def test_group_advantages_hand_computed():
    # r = [1,0,0,0]: mean 0.25, unbiased std sqrt((0.75^2 + 3 * 0.25^2) / 3) = 0.5
    adv = group_advantages(torch.tensor([[1.0, 0.0, 0.0, 0.0]]), eps=0.0)
    assert torch.allclose(adv, torch.tensor([[1.5, -0.5, -0.5, -0.5]]))
    adv = group_advantages(torch.tensor([[1.0, 0.0, 0.0, 0.0]]), eps=1e-6)
    assert adv[0, 0].item() == pytest.approx(0.75 / (0.5 + 1e-6), rel=1e-7)


def test_group_advantages_are_per_prompt():
    adv = group_advantages(torch.tensor([[1.0, 0.0], [3.0, 1.0]]), eps=0.0)
    # each row: mean, std = sqrt(2) * 0.5 * |a-b| / 1 ... for two values std = |a-b| / sqrt(2)
    assert torch.allclose(adv, torch.tensor([[1 / math.sqrt(2), -1 / math.sqrt(2)]] * 2))


def test_zero_variance_groups_have_exactly_zero_advantage():
    adv = group_advantages(torch.tensor([[1.0] * 8, [0.0] * 8, [1.0, 0.0] * 4]))
    assert torch.equal(adv[0], torch.zeros(8)) and torch.equal(adv[1], torch.zeros(8))
    assert adv[2].abs().sum() > 0
    assert zero_advantage_fraction(torch.tensor([[1.0] * 8, [0.0] * 8, [1.0, 0.0] * 4])) == pytest.approx(2 / 3)


def test_group_advantages_reject_groups_of_one():
    with pytest.raises(ValueError, match="K >= 2"):
        group_advantages(torch.tensor([[1.0], [0.0]]))


def test_token_mean_counts_only_masked_tokens_over_the_whole_batch():
    v = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    m = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert token_mean(v, m).item() == pytest.approx(7 / 3)


@pytest.mark.parametrize(
    "adv, ratio, expected_loss, expected_grad, clipped",
    [
        (1.0, 1.5, -1.25, 0.0, 1.0),  # positive advantage, ratio above 1 + eps_high: clipped, no gradient
        (1.0, 1.2, -1.2, -1.2, 0.0),  # inside the trust region (clip-higher lets 1.2 through)
        (1.0, 0.5, -0.5, -0.5, 0.0),  # positive advantage, low ratio: unclipped (pessimistic bound)
        (-1.0, 1.5, 1.5, 1.5, 0.0),  # negative advantage, high ratio: unclipped
        (-1.0, 0.7, 0.8, 0.0, 1.0),  # negative advantage, ratio below 1 - eps_low: clipped
    ],
)
def test_clipped_surrogate_values_and_gradient_sign(adv, ratio, expected_loss, expected_grad, clipped):
    old = torch.tensor([[math.log(0.4)]])
    logp = (old + math.log(ratio)).clone().requires_grad_(True)
    loss, was_clipped = clipped_surrogate(logp, old, torch.tensor([adv]), clip_low=0.2, clip_high=0.25)
    loss.sum().backward()
    assert loss.item() == pytest.approx(expected_loss, rel=1e-5)
    # d loss / d logp = -A * ratio when unclipped: descent raises logp for A > 0, lowers it for A < 0
    assert logp.grad.item() == pytest.approx(expected_grad, abs=1e-6)
    assert was_clipped.item() == clipped


def test_clip_higher_is_asymmetric():
    old = torch.zeros(1, 2)
    logp = torch.log(torch.tensor([[1.22, 0.78]]))
    loss_pos, _ = clipped_surrogate(logp, old, torch.tensor([1.0]), 0.2, 0.25)
    loss_neg, _ = clipped_surrogate(logp, old, torch.tensor([-1.0]), 0.2, 0.25)
    assert loss_pos[0, 0].item() == pytest.approx(-1.22, rel=1e-5)  # 1.22 < 1.25: not clipped
    assert loss_neg[0, 1].item() == pytest.approx(0.8, rel=1e-5)  # 0.78 < 0.8: clipped


def test_log_ratio_clamp_keeps_loss_finite():
    old = torch.tensor([[-60.0]])
    logp = torch.tensor([[0.0]])
    loss, _ = clipped_surrogate(logp, old, torch.tensor([-1.0]), log_ratio_clamp=20.0, clip_ratio_c=None)
    assert torch.isfinite(loss).all() and loss.item() == pytest.approx(math.exp(20.0), rel=1e-5)


@pytest.mark.parametrize(
    "adv, ratio, expected_loss, expected_grad",
    [
        (-2.0, 5.0, 6.0, 0.0),  # A < 0, ratio 5 > clip_ratio_c: the loss is capped at -A * 3, no gradient
        (-2.0, 2.0, 4.0, 4.0),  # A < 0, ratio 2 < 3: the ordinary clipped loss -A * ratio
        (2.0, 5.0, -2.5, 0.0),  # A > 0: dual-clip does not apply (the clip-higher bound 1.25 does)
    ],
)
def test_dual_clip_bounds_negative_advantage_loss(adv, ratio, expected_loss, expected_grad):
    old = torch.tensor([[math.log(0.1)]])
    logp = (old + math.log(ratio)).clone().requires_grad_(True)
    loss, _ = clipped_surrogate(logp, old, torch.tensor([adv]), 0.2, 0.25, clip_ratio_c=3.0)
    loss.sum().backward()
    assert loss.item() == pytest.approx(expected_loss, rel=1e-5)
    assert logp.grad.item() == pytest.approx(expected_grad, abs=1e-5)
    # without dual-clip the A < 0, ratio 5 token would cost -A * 5 = 10
    unbounded, _ = clipped_surrogate(logp.detach(), old, torch.tensor([adv]), 0.2, 0.25, clip_ratio_c=None)
    assert unbounded.item() == pytest.approx(-adv * ratio if adv < 0 else expected_loss, rel=1e-5)


def test_kl_k3_is_clamped_as_verl_does():
    # VERL: d = clamp(ref - logp, -20, 20); kl = clamp(exp(d) - d - 1, -10, 10)
    logp = torch.tensor([[0.0, 0.0, 0.0]])
    ref = torch.tensor([[-10.5, -30.0, 15.0]])
    kl = kl_k3(logp, ref)
    assert kl[0, 0].item() == pytest.approx(
        math.exp(-10.5) + 10.5 - 1, rel=1e-6
    )  # 9.50003 (a [-10, 10] d-clamp gave 9.00005)
    assert kl[0, 1].item() == pytest.approx(10.0)
    assert kl[0, 2].item() == pytest.approx(10.0)


def test_truncated_is_weights():
    old = torch.log(torch.tensor([0.5, 0.2, 0.9]))
    behaviour = torch.log(torch.tensor([0.5, 0.4, 0.1]))
    w = truncated_is_weights(old, behaviour, cap=2.0)
    assert w.tolist() == pytest.approx([1.0, 0.5, 2.0], rel=1e-6)  # 0.9 / 0.1 = 9 is truncated at 2
    logp = torch.zeros(1, 3, requires_grad=True)
    out = grpo_loss(
        logp, torch.zeros(1, 3), None, torch.tensor([1.0]), torch.ones(1, 3), kl_coef=0.0, is_weights=w[None]
    )
    out.loss.backward()
    assert logp.grad[0].tolist() == pytest.approx((-w / 3).tolist(), rel=1e-6)  # each token's gradient is weighted


def test_kl_k3_hand_computed_and_nonnegative():
    logp = torch.log(torch.tensor([[0.5, 0.3]]))
    ref = torch.log(torch.tensor([[0.25, 0.3]]))
    kl = kl_k3(logp, ref)
    assert kl[0, 0].item() == pytest.approx(0.5 - math.log(0.5) - 1, rel=1e-6)  # 0.19315
    assert kl[0, 1].item() == pytest.approx(0.0, abs=1e-7)
    logp = torch.log(torch.tensor([[0.5]])).requires_grad_(True)
    kl_k3(logp, torch.log(torch.tensor([[0.25]]))).sum().backward()
    assert logp.grad.item() > 0  # minimising KL pushes logp back toward the reference


def test_grpo_loss_combines_terms():
    torch.manual_seed(0)
    logp = torch.randn(4, 5) * 0.1 - 2
    old = logp + torch.randn(4, 5) * 0.05
    ref = logp + torch.randn(4, 5) * 0.05
    adv = torch.tensor([1.0, -1.0, 0.5, 0.0])
    mask = torch.ones(4, 5)
    mask[:, 3:] = 0
    out = grpo_loss(logp, old, ref, adv, mask, kl_coef=0.1)
    pg, _ = clipped_surrogate(logp, old, adv)
    expected = token_mean(pg, mask) + 0.1 * token_mean(kl_k3(logp, ref), mask)
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert out.kl.item() > 0
    with pytest.raises(ValueError, match="ref_logp"):
        grpo_loss(logp, old, None, adv, mask, kl_coef=0.1)
    assert grpo_loss(logp, old, None, adv, mask, kl_coef=0.0).kl.item() == 0.0


def test_zero_advantage_gives_zero_policy_gradient():
    logp = torch.randn(2, 3).requires_grad_(True)
    grpo_loss(logp, logp.detach(), None, torch.zeros(2), torch.ones(2, 3), kl_coef=0.0).loss.backward()
    assert torch.equal(logp.grad, torch.zeros(2, 3))

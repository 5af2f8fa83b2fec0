"""GRPO objective (paper 3.1, 4.1; VERL conventions).

Shapes: rewards [P, K] (P prompts, K responses each); per-token tensors [B, T] with a response mask
[B, T] (1 on response tokens, 0 on prompt and padding), B = P*K flattened prompt-major.

    A_k        = (r_k - mean(r)) / (std(r) + eps)                         group advantage, per prompt
    ratio      = exp(clamp(logp - old_logp, -c, c))                       importance ratio per token
    L_clip     = max(-A * ratio, -A * clip(ratio, 1 - eps_low, 1 + eps_high))   clip-higher (DAPO)
    L_pg       = min(L_clip, -A * clip_ratio_c) if A < 0 else L_clip      dual-clip (VERL, clip_ratio_c=3)
    L_pg      *= w                                                        optional truncated IS weight
    d          = clamp(ref - logp, -20, 20)
    L_kl       = clamp(exp(d) - d - 1, -10, 10)                           k3 estimator of KL(pi || ref)
    loss       = token_mean(L_pg) + kl_coef * token_mean(L_kl) - entropy_coef * token_mean(H)

The clamps are VERL's (core_algos.kl_penalty "low_var_kl", compute_policy_loss): they bound a token's
contribution when the policy and the reference (or the behaviour policy) disagree wildly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

KL_LOG_RATIO_CLAMP = 20.0  # VERL clamps ref - logp to [-20, 20] before the exponential ...
KL_K3_CLAMP = 10.0  # ... and the k3 estimate to [-10, 10]


def group_advantages(rewards: Tensor, eps: float = 1e-6) -> Tensor:
    """(r - mean) / (std + eps) over each row of `rewards` [P, K]; std is unbiased (torch.std, as VERL).

    A group whose rewards are all equal gets exactly zero advantage (its numerator is zero).
    """
    if rewards.dim() != 2 or rewards.shape[1] < 2:
        raise ValueError(f"rewards must be [P, K] with K >= 2, got shape {tuple(rewards.shape)}")
    rewards = rewards.to(torch.float32)
    mean = rewards.mean(dim=1, keepdim=True)
    std = rewards.std(dim=1, keepdim=True)
    return (rewards - mean) / (std + eps)


def zero_advantage_fraction(rewards: Tensor) -> float:
    """Fraction of prompt groups whose rewards are all equal (they contribute no policy gradient)."""
    return (rewards.max(dim=1).values == rewards.min(dim=1).values).float().mean().item()


def token_mean(values: Tensor, mask: Tensor, denominator: float | None = None) -> Tensor:
    """Mean over all response tokens of the batch (VERL's 'token-mean' loss aggregation).

    `denominator`: the response-token count of the whole batch when `values` is one micro-batch of it,
    so that the micro-batches' terms add up to the full batch's mean. Default: this mask's count.
    """
    mask = mask.to(values.dtype)
    if denominator is None:
        return (values * mask).sum() / mask.sum().clamp_min(1.0)
    return (values * mask).sum() / max(float(denominator), 1.0)


def clipped_surrogate(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.25,
    log_ratio_clamp: float = 20.0,
    clip_ratio_c: float | None = 3.0,
) -> tuple[Tensor, Tensor]:
    """Per-token clip-higher policy loss with dual-clip, and a per-token "was clipped" indicator.

    Dual-clip (Ye et al. 2020; VERL's clip_ratio_c): for A < 0 the loss is at most -A * clip_ratio_c, so a
    token whose ratio has grown far above 1 under a negative advantage cannot dominate the update.
    `advantages` is per sequence ([B] for [B, T] log-probs) or per token (the log-probs' shape).
    """
    if advantages.dim() == logp.dim() - 1:
        advantages = advantages[:, None]
    log_ratio = torch.clamp(logp - old_logp, -log_ratio_clamp, log_ratio_clamp)
    ratio = torch.exp(log_ratio)
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(loss_unclipped, loss_clipped)
    clipped = (loss_clipped > loss_unclipped).float()
    if clip_ratio_c is not None:
        loss = torch.where(advantages < 0, torch.minimum(loss, -advantages * clip_ratio_c), loss)
    return loss, clipped


def kl_k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Low-variance (k3) per-token estimate of KL(pi || ref): exp(ref - logp) - (ref - logp) - 1 >= 0."""
    delta = torch.clamp(ref_logp - logp, -KL_LOG_RATIO_CLAMP, KL_LOG_RATIO_CLAMP)
    return torch.clamp(torch.exp(delta) - delta - 1.0, -KL_K3_CLAMP, KL_K3_CLAMP)


@dataclass
class GRPOLoss:
    loss: Tensor
    pg_loss: Tensor
    kl: Tensor
    clip_frac: Tensor
    entropy: Tensor


def grpo_loss(
    logp: Tensor,
    old_logp: Tensor,
    ref_logp: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.25,
    log_ratio_clamp: float = 20.0,
    clip_ratio_c: float | None = 3.0,
    kl_coef: float = 1e-4,
    entropy: Tensor | None = None,
    entropy_coef: float = 0.0,
    is_weights: Tensor | None = None,
    denominator: float | None = None,
) -> GRPOLoss:
    """The full token-mean GRPO loss to minimise. `ref_logp` may be None when kl_coef == 0.

    `is_weights`: per-token importance weights (detached) multiplying the policy loss, e.g. truncated
    IS for off-policy responses; None = 1. With `denominator` (the whole batch's response-token count),
    the terms are a micro-batch's share of the full-batch loss: summed over micro-batches they equal it.
    """
    pg, clipped = clipped_surrogate(logp, old_logp, advantages, clip_low, clip_high, log_ratio_clamp, clip_ratio_c)
    if is_weights is not None:
        pg = pg * is_weights.detach()
    pg_loss = token_mean(pg, mask, denominator)
    loss = pg_loss
    kl = torch.zeros((), dtype=logp.dtype, device=logp.device)
    if kl_coef > 0:
        if ref_logp is None:
            raise ValueError("ref_logp is required when kl_coef > 0")
        kl = token_mean(kl_k3(logp, ref_logp), mask, denominator)
        loss = loss + kl_coef * kl
    ent = torch.zeros((), dtype=logp.dtype, device=logp.device)
    if entropy is not None:
        ent = token_mean(entropy, mask, denominator)
    if entropy_coef > 0:
        if entropy is None:
            raise ValueError("entropy is required when entropy_coef > 0")
        loss = loss - entropy_coef * ent
    return GRPOLoss(
        loss=loss,
        pg_loss=pg_loss.detach(),
        kl=kl.detach(),
        clip_frac=token_mean(clipped, mask, denominator),
        entropy=ent.detach(),
    )


def truncated_is_weights(old_logp: Tensor, behaviour_logp: Tensor, cap: float) -> Tensor:
    """Per-token min(pi_old / pi_behaviour, cap), detached: the truncated importance weight of tokens
    sampled by another policy (VERL's token-level rollout correction). The exponent is clamped as the
    ratio's is, so a token the local model finds impossible cannot overflow."""
    return torch.exp(torch.clamp(old_logp - behaviour_logp, -20.0, 20.0)).clamp(max=cap).detach()


def off_policy(samples, owner: int | None) -> set[int]:
    """Indices of the samples (each with an `origin` client id; -1: none) that another client than
    `owner` generated: PubSwap's swapped-in responses. None owner: all on-policy."""
    return {i for i, s in enumerate(samples) if owner is not None and s.origin not in (owner, -1)}

"""Micro-batches for one GRPO step: a token budget per forward pass, little compute on padding.

A step's sequences (b prompts x K responses, 1024 + 2048 tokens at the paper's shape) do not fit one
forward pass on any GPU. They are cut into micro-batches whose padded size (rows x longest row) stays
within `token_budget`, as VERL's dynamic batch size (`ppo_max_token_len_per_gpu`) does:

  * sequences are sorted by length, longest first, so rows of one micro-batch have similar lengths
    and the padding between them is small even when lengths differ a lot;
  * consecutive sorted sequences fill a micro-batch until one more would exceed the budget;
  * a sequence longer than the budget gets a micro-batch of its own (sequences are never split).

The plan is a pure function of the lengths, so a redone step cuts exactly the same micro-batches.
"""

from __future__ import annotations

from collections.abc import Sequence


def plan_micro_batches(lengths: Sequence[int], token_budget: int) -> list[list[int]]:
    """Indices of `lengths` grouped into micro-batches with len(group) * max(length) <= token_budget
    (or a single over-long sequence). Longest first; ties keep their input order."""
    if token_budget < 1:
        raise ValueError(f"token_budget must be >= 1, got {token_budget}")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    plan: list[list[int]] = []
    for i in order:
        # the group's first row is its longest: adding row i costs (rows + 1) x that length
        if plan and (len(plan[-1]) + 1) * lengths[plan[-1][0]] <= token_budget:
            plan[-1].append(i)
        else:
            plan.append([i])
    return plan


def padded_tokens(lengths: Sequence[int], plan: Sequence[Sequence[int]]) -> int:
    """Tokens actually computed (rows x longest row, summed over micro-batches)."""
    return sum(len(group) * max(lengths[i] for i in group) for group in plan)

"""Shared-prefix GRPO passes: each group's prompt runs once, its responses attend to its keys and values.

A GRPO group is one prompt with K responses. Computed row by row, the prompt's tokens are repeated K
times (at the default CPU shape ~85% of the tokens trained are prompt copies). Here a micro-batch is
one packed row without padding, group after group:

    [prompt_1 | response_1,1 | ... | response_1,K1 | prompt_2 | response_2,1 | ... ]

with position ids that restart at each prompt and continue from the prompt's end in every response
(each response sees the positions it would have in its own row). The attention of one group is

    prompt queries     -> the prompt's keys, causally
    response k queries -> the prompt's keys, then response k's own keys causally (never another response's)

so every token's hidden state is that of the unshared row, and so are the log-probs, the loss and the
gradients: a prompt position's keys and values feed K responses, and autograd sums their gradients
there, as the K separate rows' prompt copies would have summed into the shared weights. Only the
order of floating-point sums differs. The cost is prompt + responses tokens per group instead of
K x (prompt + response), and P^2 + sum_k R_k (P + R_k) attention scores instead of sum_k (P + R_k)^2
(never a packed row's full (P + sum_k R_k)^2).

How: an attention function registered with transformers' AttentionInterface under ATTENTION. Given
the `prefix_layout` keyword (passed through the decoder's forward to every attention module, and
kept by gradient checkpointing's recomputation), it computes the attention above; without it, it is
transformers' SDPA attention, unchanged, so every other forward of the model (evaluation, the
unshared path) is what it was. Models whose attention does not go through AttentionInterface, or
that use another attention than SDPA, or a sliding window, keep the unshared path (`supported`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

ATTENTION = "pubswap_shared_prefix"


@dataclass(frozen=True)
class Group:
    """One group in a packed row: the prompt at `offset`, then its responses, one after another."""

    offset: int
    prompt_len: int
    response_lens: tuple[int, ...]

    @property
    def length(self) -> int:
        return self.prompt_len + sum(self.response_lens)


@dataclass(frozen=True)
class PackedRow:
    """A micro-batch as one row: ids, position ids and, per scored token (the response tokens, row
    after row in `rows` order), the flat position whose hidden state scores it and the token."""

    ids: Tensor  # [1, L]
    position_ids: Tensor  # [1, L]
    groups: tuple[Group, ...]
    score_at: Tensor  # [N] positions in the row
    targets: Tensor  # [N]


def pack(groups: Sequence[tuple[Sequence[int], Sequence[Sequence[int]]]]) -> PackedRow:
    """One packed row of (prompt ids, [response ids, ...]) groups. A response's first token is scored
    by the prompt's last position, its token j > 0 by its own token j - 1."""
    ids: list[int] = []
    pos: list[int] = []
    layout: list[Group] = []
    score_at: list[int] = []
    targets: list[int] = []
    for prompt, responses in groups:
        if not prompt or not responses or any(len(r) == 0 for r in responses):
            raise ValueError("a group needs a prompt and non-empty responses")
        offset, p = len(ids), len(prompt)
        ids += prompt
        pos += range(p)
        for r in responses:
            start = len(ids)
            ids += r
            pos += range(p, p + len(r))
            score_at += [offset + p - 1] + list(range(start, start + len(r) - 1))
            targets += r
        layout.append(Group(offset, p, tuple(len(r) for r in responses)))
    return PackedRow(
        torch.tensor([ids], dtype=torch.long),
        torch.tensor([pos], dtype=torch.long),
        tuple(layout),
        torch.tensor(score_at, dtype=torch.long),
        torch.tensor(targets, dtype=torch.long),
    )


def _group_attention(q: Tensor, k: Tensor, v: Tensor, g: Group, scaling, dropout: float) -> Tensor:
    """[heads, g.length, d] attention output of one group (q, k, v: [heads, L, d], kv heads repeated).
    One SDPA call per response, over the prompt's keys and its own: no response is padded to another's
    length (at the paper's ragged lengths, padding to the group's longest would cost more scores than
    the unshared rows, which the micro-batch planner groups by length)."""
    o, p = g.offset, g.prompt_len
    kp, vp = k[:, o : o + p], v[:, o : o + p]
    parts = [F.scaled_dot_product_attention(q[:, o : o + p], kp, vp, dropout_p=dropout, is_causal=True, scale=scaling)]
    start = o + p
    for n in g.response_lens:
        r = slice(start, start + n)
        keys, values = torch.cat([kp, k[:, r]], dim=1), torch.cat([vp, v[:, r]], dim=1)
        sees = torch.ones(n, p + n, dtype=torch.bool, device=q.device).tril(diagonal=p)  # query i: keys <= p + i
        parts.append(
            F.scaled_dot_product_attention(q[:, r], keys, values, attn_mask=sees, dropout_p=dropout, scale=scaling)
        )
        start += n
    return torch.cat(parts, dim=1)


def shared_prefix_attention(
    module, query: Tensor, key: Tensor, value: Tensor, attention_mask, scaling=None, dropout: float = 0.0, **kwargs
):
    """transformers attention interface: [B, heads, L, d] query, [B, kv heads, L, d] key/value ->
    ([B, L, heads, d], None). Shared-prefix attention with `prefix_layout`, else SDPA as transformers does."""
    layout = kwargs.pop("prefix_layout", None)
    if layout is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    if query.shape[0] != 1:
        raise ValueError(f"a shared-prefix batch is one packed row, got {query.shape[0]}")
    if kwargs.get("sliding_window") is not None or kwargs.get("softcap") is not None:
        raise ValueError("shared-prefix attention supports neither sliding windows nor soft-capping")
    rep = query.shape[1] // key.shape[1]
    k = key[0].repeat_interleave(rep, dim=0) if rep > 1 else key[0]
    v = value[0].repeat_interleave(rep, dim=0) if rep > 1 else value[0]
    out = torch.cat([_group_attention(query[0], k, v, g, scaling, dropout) for g in layout], dim=1)
    return out.transpose(0, 1)[None].contiguous(), None


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    if ATTENTION not in AttentionInterface._global_mapping:
        AttentionInterface.register(ATTENTION, shared_prefix_attention)
        AttentionMaskInterface.register(ATTENTION, sdpa_mask)  # the unshared path's masks: SDPA's


def supported(model) -> bool:
    """Whether `model` (a transformers PreTrainedModel) can run shared-prefix passes: functional
    attention on SDPA (or already switched), and no sliding window."""
    impl = getattr(model.config, "_attn_implementation", None)
    if impl not in ("sdpa", ATTENTION) or getattr(model.config, "sliding_window", None):
        return False
    can = getattr(model, "_can_set_attn_implementation", None)
    return bool(can and can())


def enable(model) -> None:
    """Route `model`'s attention through shared_prefix_attention (SDPA without a layout). Idempotent."""
    if model.config._attn_implementation != ATTENTION:
        _register()
        model.set_attn_implementation(ATTENTION)


def hidden_states(decoder, row: PackedRow, device) -> Tensor:
    """[N, H] last hidden states at the row's scored positions, from one shared-prefix forward."""
    ids = row.ids.to(device)
    placeholder = torch.ones(1, 1, 1, 1, dtype=torch.bool, device=device)  # a 4D mask is passed as is: none built
    out = decoder(
        input_ids=ids,
        attention_mask=placeholder,
        position_ids=row.position_ids.to(device),
        use_cache=False,
        prefix_layout=row.groups,
    ).last_hidden_state
    return out[0][row.score_at.to(device)]

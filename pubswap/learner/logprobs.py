"""Token log-probs from hidden states, in chunks of positions: no [batch, tokens, vocab] tensor exists.

At the paper's shape (64 sequences x 3,071 scored positions x 151,936 vocab) the full fp32 logits of
one step would take ~119 GB. Instead the decoder's last hidden states are gathered at the scored
(response) positions only, [N, hidden], and the LM head is applied to `chunk` positions at a time:

    logp(token) = z[token] - logsumexp(z),   z = lm_head(h) / temperature   (fp32)

Under autograd each chunk is recomputed in the backward pass (activation checkpointing), so only the
[N, hidden] states are kept between forward and backward; the peak is a few [chunk, vocab] fp32
buffers. The values are those of the direct computation (same ops on the same rows).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint


def _chunk_logprobs(
    h: Tensor, targets: Tensor, weight: Tensor, bias: Tensor | None, temperature: float, entropy: str
) -> tuple[Tensor, Tensor]:
    """[n] log-probs of `targets` and [n] entropies of the distributions (empty unless `entropy`:
    "grad" keeps it in the graph, "value" computes it without gradient)."""
    logits = F.linear(h, weight, bias).float()
    if temperature != 1.0:
        logits = logits / temperature
    lse = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, targets[:, None]).squeeze(-1) - lse
    if not entropy:
        return logp, logp.new_zeros(0)
    with torch.set_grad_enabled(torch.is_grad_enabled() and entropy == "grad"):
        ent = lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)  # H = logsumexp(z) - E_p[z]
    return logp, ent


def chunked_token_logprobs(
    hidden: Tensor,
    targets: Tensor,
    lm_head: torch.nn.Linear,
    temperature: float = 1.0,
    chunk: int = 1024,
    entropy: str = "",
) -> Tensor | tuple[Tensor, Tensor]:
    """log p(targets[i] | hidden[i]) for hidden [N, H] and targets [N], as an fp32 [N] tensor.

    With `entropy` ("grad": differentiable, "value": a detached metric) also the [N] entropies of the
    token distributions, as VERL's `entropy_from_logits`, computed on the same chunks.
    """
    if hidden.dim() != 2 or targets.shape != hidden.shape[:1]:
        raise ValueError(f"hidden must be [N, H] and targets [N], got {tuple(hidden.shape)}, {tuple(targets.shape)}")
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    if entropy not in ("", "grad", "value"):
        raise ValueError(f"entropy must be '', 'grad' or 'value', got {entropy!r}")
    weight, bias = lm_head.weight, lm_head.bias
    recompute = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    logps, ents = [], []
    for start in range(0, hidden.shape[0], chunk):
        h, t = hidden[start : start + chunk], targets[start : start + chunk]
        if recompute:
            lp, ent = checkpoint(_chunk_logprobs, h, t, weight, bias, temperature, entropy, use_reentrant=False)
        else:
            lp, ent = _chunk_logprobs(h, t, weight, bias, temperature, entropy)
        logps.append(lp)
        ents.append(ent)
    empty = hidden.new_zeros(0, dtype=torch.float32)
    logp = torch.cat(logps) if logps else empty
    if not entropy:
        return logp
    return logp, (torch.cat(ents) if ents else empty)

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


def _chunk_logprobs(h: Tensor, targets: Tensor, weight: Tensor, bias: Tensor | None, temperature: float) -> Tensor:
    logits = F.linear(h, weight, bias).float()
    if temperature != 1.0:
        logits = logits / temperature
    return logits.gather(-1, targets[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def chunked_token_logprobs(hidden: Tensor, targets: Tensor, lm_head: torch.nn.Linear, temperature: float = 1.0,
                           chunk: int = 1024) -> Tensor:
    """log p(targets[i] | hidden[i]) for hidden [N, H] and targets [N], as an fp32 [N] tensor."""
    if hidden.dim() != 2 or targets.shape != hidden.shape[:1]:
        raise ValueError(f"hidden must be [N, H] and targets [N], got {tuple(hidden.shape)}, {tuple(targets.shape)}")
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    weight, bias = lm_head.weight, lm_head.bias
    recompute = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    out = []
    for start in range(0, hidden.shape[0], chunk):
        h, t = hidden[start:start + chunk], targets[start:start + chunk]
        if recompute:
            out.append(checkpoint(_chunk_logprobs, h, t, weight, bias, temperature, use_reentrant=False))
        else:
            out.append(_chunk_logprobs(h, t, weight, bias, temperature))
    return torch.cat(out) if out else hidden.new_zeros(0, dtype=torch.float32)

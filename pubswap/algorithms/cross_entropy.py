"""Token cross-entropy on the response tokens after a prompt: the loss of the objectives label-words
(the response is a label word) and sft (the response is the row's reference answer).

    loss = -(1/N) sum over the batch's N response tokens of log p(token | prompt, previous tokens)

Prompt tokens are not scored. Micro-batches divide their token sums by the whole (mini-)batch's N, so
their losses add up to the batch's.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass
class TokenNLL:
    loss: Tensor  # what is backpropagated: the token sum over n_tokens
    nll: Tensor  # the same value, logged


def token_nll(logp: Tensor, n_tokens: float) -> TokenNLL:
    """The token-mean negative log-likelihood of one micro-batch's response tokens `logp` [N], its token
    sum divided by `n_tokens`, the response tokens of the whole (mini-)batch."""
    loss = -logp.sum() / n_tokens
    return TokenNLL(loss, loss.detach())

"""Fed-DARE: DARE (Yu et al., 2023, "drop and rescale") applied to every client's update.

Client i drops each entry of its delta trained_i - start with probability p (Bernoulli, seeded from
(seed, round, client, tensor)) and rescales the rest by 1 / (1 - p), so the sent delta is unbiased:
E[sent] = delta. It sends the kept entries (values + positions); the server averages the deltas and
sends the new dense adapter down. Default p = 0.9.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from pubswap.algorithms.aggregation.base import AggregationStrategy, Context, normalized_weights, weighted_mean
from pubswap.algorithms.aggregation.payload import Payload, dense, sparsify
from pubswap.lora import Adapter
from pubswap.seeding import derive_seed


class FedDARE(AggregationStrategy):
    name = "fed-dare"
    linear = False

    def __init__(self, p: float = 0.9):
        if not 0.0 <= p < 1.0:
            raise ValueError(f"p must be in [0, 1), got {p}")
        self.p = float(p)

    def upload(self, start: Adapter, trained: Adapter, ctx: Context) -> Payload:
        out = {}
        for k in sorted(trained):
            delta = trained[k] - start[k]
            gen = torch.Generator().manual_seed(derive_seed(ctx.seed, "dare", ctx.round, ctx.client, k))
            keep = torch.rand(delta.shape, generator=gen) >= self.p
            out[k] = sparsify(delta / (1.0 - self.p), keep)
        return out

    def server_aggregate(self, start: Adapter, uploads: Sequence[Payload], weights, ctx: Context) -> Payload:
        w = normalized_weights(weights, len(uploads))
        return {k: start[k] + weighted_mean([dense(u[k]) for u in uploads], w) for k in sorted(start)}

"""FlexLoRA (Bai et al., NeurIPS 2024): average the full products, truncate to rank r with an SVD.

    W = sum_i w_i B_i A_i,   W ~ U_r S_r V_r^T,   B = U_r S_r^(1/2),   A = S_r^(1/2) V_r^T

Clients send their dense A and B (r (m + d) values per module) and receive the new factors. The product is
never formed (pubswap/algorithms/aggregation/lowrank.py). Per-client ranks (`lora.r` a list, the paper's
point): adapters are max(r) wide for everyone, client i trains and sends only its first r_i components and
keeps only the first r_i of the download (the trainer zeroes the others' gradients). Splitting S evenly
between B and A is our choice of gauge (the paper fixes only the product). The new global is the best rank-r
approximation of the mean product, so when the clients' products together have rank <= r it is that mean
exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

from pubswap.algorithms.aggregation.base import AggregationStrategy, Context, lora_pairs, normalized_weights
from pubswap.algorithms.aggregation.lowrank import balanced_factors, stack_products
from pubswap.algorithms.aggregation.payload import FP32, Payload, dense
from pubswap.lora import Adapter, components


class FlexLoRA(AggregationStrategy):
    name = "flexlora"
    linear = False

    def upload(self, start: Adapter, trained: Adapter, ctx: Context) -> Payload:
        """The client's factors; one of lower rank r_i sends only its r_i components, r_i (m + d) values."""
        r = ctx.rank
        if r is None:
            return dict(sorted(trained.items()))
        return {k: v[components(k, 0, r)].contiguous() for k, v in sorted(trained.items())}

    def download_bytes(self, download: Payload, rank: int | None = None, board: bool = False) -> int:
        """The new factors; a client of rank r_i is sent its first r_i components, the best rank-r_i
        part of the mean product (S is sorted). The object store holds one full-rank download per round,
        which each client actor fetches; this counts what the algorithm sends the client."""
        if rank is None:
            return super().download_bytes(download, board=board)
        size = (lambda v: FP32) if board else (lambda v: v.element_size())
        return sum(v[components(k, 0, rank)].numel() * size(v) for k, v in download.items())

    def server_aggregate(self, start: Adapter, uploads: Sequence[Payload], weights, ctx: Context) -> Payload:
        w = normalized_weights(weights, len(uploads))
        out = {}
        for ka, kb in lora_pairs(start):
            L, R = stack_products([dense(u[kb]) for u in uploads], [dense(u[ka]) for u in uploads], w)
            B, A = balanced_factors(L, R, start[ka].shape[0])
            out[ka], out[kb] = A.to(start[ka].dtype), B.to(start[kb].dtype)
        return out

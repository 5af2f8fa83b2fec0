"""FedProx (Li et al., 2020): a proximal term in every client's local loss, over any aggregation.

    local loss = GRPO loss + (mu / 2) * ||theta - theta_global||^2

over the LoRA tensors, theta_global being the round-start global adapter. The norm is SQUARED (paper
appendix; Li et al. eq. 2); some implementations write it unsquared, which changes the gradient
from mu * (theta - theta_global) to mu * (theta - theta_global) / ||theta - theta_global||.
fedprox-grpo is this term over FedIT averaging; with `federation.aggregation` set, over that strategy.
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor

from pubswap.algorithms.aggregation.base import AggregationStrategy
from pubswap.algorithms.aggregation.fedit import FedIT


class FedProx(AggregationStrategy):
    name = "fedprox"

    def __init__(self, mu: float = 0.01, inner: AggregationStrategy | None = None):
        if mu < 0:
            raise ValueError(f"mu must be >= 0, got {mu}")
        self.mu = float(mu)
        self.inner = inner if inner is not None else FedIT()
        self.linear = self.inner.linear
        if self.inner.name != "fedit":
            self.name = f"fedprox+{self.inner.name}"

    def client_penalty(self, params: Mapping[str, Tensor], global_adapter: Mapping[str, Tensor]) -> Tensor:
        if set(params) != set(global_adapter):
            raise ValueError("params and global adapter have different keys")
        total = sum(
            ((params[k] - global_adapter[k].to(params[k].device, params[k].dtype)) ** 2).sum() for k in sorted(params)
        )
        return 0.5 * self.mu * total

    # the round is the inner strategy's
    def trains(self, key):
        return self.inner.trains(key)

    def upload(self, start, trained, ctx):
        return self.inner.upload(start, trained, ctx)

    def server_aggregate(self, start, uploads, weights, ctx):
        return self.inner.server_aggregate(start, uploads, weights, ctx)

    def apply_download(self, start, download, ctx):
        return self.inner.apply_download(start, download, ctx)

    def download_bytes(self, download, rank=None, board=False):
        return self.inner.download_bytes(download, rank, board)

    def aggregate(self, adapters, weights=None):
        return self.inner.aggregate(adapters, weights)

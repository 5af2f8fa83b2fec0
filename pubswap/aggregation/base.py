"""The small interface every aggregation strategy implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from pubswap.lora import Adapter


def normalized_weights(weights: Sequence[float] | None, n: int) -> list[float]:
    """Uniform when `weights` is None, else `weights` scaled to sum to 1 (all must be >= 0, sum > 0)."""
    if weights is None:
        return [1.0 / n] * n
    if len(weights) != n:
        raise ValueError(f"{len(weights)} weights for {n} adapters")
    if any(w < 0 for w in weights) or sum(weights) <= 0:
        raise ValueError(f"weights must be >= 0 with a positive sum, got {list(weights)}")
    total = float(sum(weights))
    return [float(w) / total for w in weights]


class AggregationStrategy(ABC):
    name: str = ""
    # A linear rule is a weighted sum of the clients' tensors: it can run as an allreduce among clients.
    linear: bool = True

    @abstractmethod
    def aggregate(self, adapters: Sequence[Mapping[str, Tensor]], weights: Sequence[float] | None = None) -> Adapter:
        """The new global adapter from the clients' adapters (same keys and shapes)."""

    def client_penalty(self, params: Mapping[str, Tensor], global_adapter: Mapping[str, Tensor]) -> Tensor:
        """A term added to each client's local loss; zero unless the strategy regularises clients."""
        return torch.zeros(())

    @staticmethod
    def _check_same_keys(adapters: Sequence[Mapping[str, Tensor]]) -> list[str]:
        if not adapters:
            raise ValueError("no adapters to aggregate")
        keys = sorted(adapters[0])
        for i, a in enumerate(adapters[1:], start=1):
            if sorted(a) != keys:
                raise ValueError(f"adapter {i} has different keys from adapter 0")
            for k in keys:
                if a[k].shape != adapters[0][k].shape:
                    raise ValueError(f"adapter {i}: {k} has shape {tuple(a[k].shape)}, "
                                     f"adapter 0 has {tuple(adapters[0][k].shape)}")
        return keys
